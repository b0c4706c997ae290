//! The retry schedule: exponential, capped, jittered within bounds, `Retry-After` over the
//! schedule, and the give-up rules.

use std::time::Duration;

use tollgate_client::{Decision, Failure, GiveUp, RetryPolicy};

const TRANSIENT: Failure = Failure::Transient { retry_after: None };
const THROTTLED: Failure = Failure::Throttled { retry_after: None };

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[test]
fn the_schedule_doubles_and_is_capped() {
    let p = RetryPolicy::new()
        .base(ms(10))
        .max_delay(ms(100))
        .jitter(0.0);
    let got: Vec<_> = (0..6).map(|i| p.backoff(i)).collect();
    assert_eq!(got, [ms(10), ms(20), ms(40), ms(80), ms(100), ms(100)]);
    assert_eq!(p.backoff(31), ms(100));
    assert_eq!(p.backoff(u32::MAX), ms(100)); // no overflow
    let huge = RetryPolicy::new()
        .base(Duration::MAX)
        .max_delay(Duration::MAX);
    assert_eq!(huge.backoff(40), Duration::MAX);
}

#[test]
fn decisions_follow_the_schedule_without_jitter() {
    let p = RetryPolicy::new().base(ms(10)).max_retries(4).jitter(0.0);
    let mut s = p.start();
    let got: Vec<_> = (0..5).map(|_| p.decide(&mut s, TRANSIENT)).collect();
    assert_eq!(
        got,
        [
            Decision::Retry(ms(10)),
            Decision::Retry(ms(20)),
            Decision::Retry(ms(40)),
            Decision::Retry(ms(80)),
            Decision::GiveUp(GiveUp::Exhausted),
        ]
    );
    assert_eq!(s.retries(), 4);
}

#[test]
fn jitter_stays_within_its_bounds() {
    let p = RetryPolicy::new().base(ms(100)).jitter(0.3);
    assert_eq!(p.jittered(0, 0.0), ms(100));
    assert_eq!(p.jittered(0, 1.0), ms(70));
    assert_eq!(p.jittered(0, 7.0), ms(70)); // clamped draws
    assert_eq!(p.jittered(0, -1.0), ms(100));
    assert_eq!(p.jittered(0, f64::NAN), ms(100));
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..2_000 {
        let Decision::Retry(d) = p.decide(&mut p.start(), TRANSIENT) else {
            panic!("the first retry is always allowed");
        };
        assert!(d > ms(70) && d <= ms(100), "{d:?} outside (70 ms, 100 ms]");
        seen.insert(d.as_millis());
    }
    assert!(seen.len() > 10, "the jitter does not vary: {seen:?}");
    let full = RetryPolicy::new().jitter(1.0);
    assert_eq!(full.jittered(2, 0.5), ms(200));
}

#[test]
fn retry_after_overrides_the_schedule_and_has_a_limit() {
    let p = RetryPolicy::new()
        .jitter(0.0)
        .max_retry_after(Duration::from_secs(30));
    let mut s = p.start();
    let told = |secs| Failure::Transient {
        retry_after: Some(Duration::from_secs(secs)),
    };
    assert_eq!(
        p.decide(&mut s, told(5)),
        Decision::Retry(Duration::from_secs(5))
    );
    assert_eq!(p.decide(&mut s, told(0)), Decision::Retry(Duration::ZERO));
    assert_eq!(
        p.decide(&mut s, told(30)),
        Decision::Retry(Duration::from_secs(30))
    );
    let mut s = p.start();
    assert_eq!(
        p.decide(&mut s, told(31)),
        Decision::GiveUp(GiveUp::RetryAfterTooLong)
    );
}

#[test]
fn a_repeated_429_gives_up() {
    let p = RetryPolicy::new().max_retries(10);
    let mut s = p.start();
    assert!(matches!(p.decide(&mut s, THROTTLED), Decision::Retry(_)));
    assert!(matches!(p.decide(&mut s, TRANSIENT), Decision::Retry(_))); // breaks the run
    assert!(matches!(p.decide(&mut s, THROTTLED), Decision::Retry(_)));
    assert_eq!(
        p.decide(&mut s, THROTTLED),
        Decision::GiveUp(GiveUp::RepeatedThrottle)
    );

    let patient = RetryPolicy::new()
        .give_up_after_throttles(4)
        .max_retries(10);
    let mut s = patient.start();
    for _ in 0..3 {
        assert!(matches!(
            patient.decide(&mut s, THROTTLED),
            Decision::Retry(_)
        ));
    }
    assert_eq!(
        patient.decide(&mut s, THROTTLED),
        Decision::GiveUp(GiveUp::RepeatedThrottle)
    );

    let strict = RetryPolicy::new().give_up_after_throttles(1);
    assert_eq!(
        strict.decide(&mut strict.start(), THROTTLED),
        Decision::GiveUp(GiveUp::RepeatedThrottle)
    );
}

#[test]
fn never_retries() {
    let p = RetryPolicy::never();
    assert_eq!(
        p.decide(&mut p.start(), TRANSIENT),
        Decision::GiveUp(GiveUp::Exhausted)
    );
}

#[test]
#[should_panic(expected = "jitter")]
fn a_jitter_above_one_is_refused() {
    let _ = RetryPolicy::new().jitter(1.5);
}

#[test]
fn sleep_waits_on_tollgates_timer() {
    let start = std::time::Instant::now();
    futures_executor::block_on(RetryPolicy::sleep(ms(20)));
    assert!(start.elapsed() >= ms(20));
}
