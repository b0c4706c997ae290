//! The adaptive rate's public behaviour, on a manual clock: each signal's effect, the floor
//! and the ceiling, the `Retry-After` push and its cap, announced policies, bounded memory.

use std::time::Duration;

use tollgate::{ManualClock, Quota};
use tollgate_client::{AdaptiveConfig, AdaptiveRate, Signal};

fn rates(config: AdaptiveConfig) -> (AdaptiveRate<str>, ManualClock) {
    let clock = ManualClock::new();
    (AdaptiveRate::with_clock(config, clock.clone()), clock)
}

/// Admissions of `key` over `secs` seconds of fake time in 1 ms steps, asking at each step.
fn admitted_over(rates: &AdaptiveRate<str>, clock: &ManualClock, key: &str, secs: u64) -> u64 {
    let mut n = 0;
    for _ in 0..secs * 1000 {
        while rates.check(key).is_ok() {
            n += 1;
        }
        clock.advance(Duration::from_millis(1));
    }
    n
}

#[test]
fn success_increases_additively_up_to_the_ceiling() {
    let (r, _) = rates(AdaptiveConfig::new(10.0).ceiling(12.0).increase(0.5));
    r.success("h");
    assert_eq!(r.rate("h"), 10.5);
    for _ in 0..10 {
        r.success("h");
    }
    assert_eq!(r.rate("h"), 12.0);
    assert_eq!(r.snapshot("h").unwrap().successes, 11);
}

#[test]
fn throttle_decreases_multiplicatively_down_to_the_floor() {
    let (r, clock) = rates(AdaptiveConfig::new(10.0).floor(3.0).decrease(0.5));
    assert!(r.throttled("h", None));
    assert_eq!(r.rate("h"), 5.0);
    clock.advance(Duration::from_secs(1)); // past the cooldown
    assert!(r.throttled("h", None));
    assert_eq!(r.rate("h"), 3.0); // 2.5, floored
    clock.advance(Duration::from_secs(1));
    assert!(r.throttled("h", None));
    assert_eq!(r.rate("h"), 3.0);
    let snap = r.snapshot("h").unwrap();
    assert_eq!(snap.throttles, 3);
    assert_eq!(snap.last_signal, Signal::Throttled { retry_after: None });
}

#[test]
fn a_throttle_inside_the_cooldown_does_not_cut_again() {
    let (r, clock) = rates(AdaptiveConfig::new(10.0).cooldown(Duration::from_secs(2)));
    assert!(r.throttled("h", None));
    clock.advance(Duration::from_millis(1_999));
    assert!(!r.throttled("h", None));
    assert_eq!(r.rate("h"), 8.0);
    clock.advance(Duration::from_millis(1));
    assert!(r.throttled("h", None));
    assert!((r.rate("h") - 6.4).abs() < 1e-9);
}

#[test]
fn after_a_throttle_the_rate_bisects_towards_it_and_settles() {
    let config = AdaptiveConfig::new(20.0)
        .band(0.05)
        .confirm(3)
        .reprobe(Duration::from_secs(60));
    let (r, clock) = rates(config);
    r.throttled("h", None); // 20 is too fast; no safe rate yet: 16
    assert_eq!(r.rate("h"), 16.0);
    let mut tried = vec![];
    for _ in 0..4 {
        clock.advance(Duration::from_secs(1));
        for _ in 0..3 {
            r.success("h");
        }
        tried.push(r.rate("h"));
    }
    // 20 - 19 is within 5 % of 20: settle half a band (2.5 %) under 19.
    assert_eq!(tried, [18.0, 19.0, 19.0 * 0.975, 19.0 * 0.975]);
    assert_eq!(r.snapshot("h").unwrap().safe, Some(19.0));
    // Throttled twice under the safe rate: it was not safe after all.
    clock.advance(Duration::from_secs(2));
    assert!(!r.throttled("h", None)); // once: a strike, maybe requests bunched on the way
    assert_eq!(r.rate("h"), 19.0 * 0.975);
    clock.advance(Duration::from_secs(1));
    assert!(r.throttled("h", None));
    assert!((r.rate("h") - 19.0 * 0.975 * 0.8).abs() < 1e-9);
    assert_eq!(r.snapshot("h").unwrap().safe, None);
}

#[test]
fn a_quiet_reprobe_period_raises_the_mark() {
    let config = AdaptiveConfig::new(20.0).reprobe(Duration::from_secs(10));
    let (r, clock) = rates(config);
    r.throttled("h", None);
    clock.advance(Duration::from_secs(10));
    r.success("h");
    assert!((r.snapshot("h").unwrap().throttled_at.unwrap() - 20.0 * 1.06).abs() < 1e-9);
}

#[test]
fn the_limiter_paces_at_the_current_rate() {
    let (r, clock) = rates(AdaptiveConfig::new(10.0));
    assert_eq!(admitted_over(&r, &clock, "h", 2), 20);
    r.throttled("h", None); // 8 per second
    clock.advance(Duration::from_secs(1));
    assert_eq!(admitted_over(&r, &clock, "h", 5), 40);
    assert_eq!(admitted_over(&r, &clock, "other", 1), 10); // another key, its own rate
}

#[test]
fn retry_after_pushes_the_next_admission_and_is_capped() {
    let config = AdaptiveConfig::new(100.0).max_retry_after(Duration::from_secs(10));
    let (r, clock) = rates(config);
    let _ = r.check("h").unwrap();
    r.throttled("h", Some(Duration::from_secs(3)));
    assert_eq!(
        r.check("h").unwrap_err().retry_after(),
        Some(Duration::from_secs(3))
    );
    clock.advance(Duration::from_secs(3));
    assert!(r.check("h").is_ok());
    // A shorter push never pulls a later admission in.
    r.throttled("h", Some(Duration::from_secs(5)));
    r.throttled("h", Some(Duration::from_secs(1)));
    assert_eq!(
        r.check("h").unwrap_err().retry_after(),
        Some(Duration::from_secs(5))
    );
    // The cap.
    r.throttled("g", Some(Duration::from_secs(86_400)));
    assert_eq!(
        r.check("g").unwrap_err().retry_after(),
        Some(Duration::from_secs(10))
    );
    assert_eq!(
        r.snapshot("g").unwrap().last_signal,
        Signal::Throttled {
            retry_after: Some(Duration::from_secs(10))
        }
    );
}

#[test]
fn an_announced_policy_is_paced_exactly() {
    let (r, clock) = rates(AdaptiveConfig::new(1.0).ceiling(1_000.0));
    r.announce("h", Quota::new(30, Duration::from_secs(1)));
    assert!((r.rate("h") - 30.0).abs() < 1e-4); // 1 / the interval, rounded up to a nanosecond
    for _ in 0..50 {
        r.success("h");
    }
    assert!((r.rate("h") - 30.0).abs() < 1e-4); // no probing: the rate stays
    // 90 in 3 s, less one if asking in whole milliseconds lands after an instant (33.3 ms).
    assert!((89..=90).contains(&admitted_over(&r, &clock, "h", 3)));
    // A throttle under it lowers the rate below it (the quota is shared, or smaller).
    assert!(r.throttled("h", None));
    assert!(r.rate("h") < 30.0);
    // Clamped to the ceiling.
    let (r, _) = rates(AdaptiveConfig::new(1.0).ceiling(10.0));
    r.announce("h", Quota::per_second(500));
    assert_eq!(r.rate("h"), 10.0);
    assert_eq!(r.quota("h"), Quota::per_second(10).allow_burst(1));
}

#[test]
fn an_announced_policy_still_honours_retry_after() {
    let (r, _) = rates(AdaptiveConfig::new(1.0).ceiling(1_000.0));
    r.announce("h", Quota::per_second(100));
    r.throttled("h", Some(Duration::from_secs(2)));
    assert_eq!(
        r.check("h").unwrap_err().retry_after(),
        Some(Duration::from_secs(2))
    );
}

#[test]
fn memory_is_bounded_by_the_capacity() {
    let (r, _) = rates(AdaptiveConfig::new(1.0).capacity(32));
    let cap = r.capacity();
    for i in 0..10_000 {
        r.success(&format!("host{i}"));
    }
    assert!(r.keys() <= cap);
    assert!(r.snapshot("host9999").is_some()); // the newest stays
}

#[test]
fn a_recently_used_key_survives_eviction() {
    let (r, _) = rates(AdaptiveConfig::new(1.0).capacity(1));
    r.throttled("a", None);
    r.success("b");
    assert!(r.snapshot("a").is_none());
    assert_eq!(r.rate("a"), 1.0); // starts over
}

#[test]
#[should_panic(expected = "the floor")]
fn a_floor_above_the_initial_rate_is_refused() {
    let _ = AdaptiveConfig::new(1.0).floor(2.0);
}

#[test]
#[should_panic(expected = "rate between")]
fn a_nan_rate_is_refused() {
    let _ = AdaptiveConfig::new(f64::NAN);
}

#[test]
fn waits_queue_on_the_limiter() {
    let r = AdaptiveRate::<str>::new(AdaptiveConfig::new(200.0));
    futures_executor::block_on(async {
        for _ in 0..3 {
            r.until_ready("h").await.unwrap();
        }
    });
    assert_eq!(r.limiter().stats().admitted, 3);
}

#[test]
fn a_wait_on_fake_time_honours_the_retry_after_push() {
    use std::future::Future;
    use std::task::{Context, Waker};
    let (r, clock) = rates(AdaptiveConfig::new(100.0));
    r.throttled("h", Some(Duration::from_secs(2)));
    let mut wait = Box::pin(r.until_ready("h"));
    let mut poll = || wait.as_mut().poll(&mut Context::from_waker(Waker::noop()));
    assert!(poll().is_pending());
    clock.advance(Duration::from_millis(1_999));
    assert!(poll().is_pending());
    clock.advance(Duration::from_millis(1));
    assert!(matches!(poll(), std::task::Poll::Ready(Ok(()))));
}

/// A policy slower than the floor is paced to, not to the floor: one request in 30 s where
/// the server announces two a minute, with the default floor of 0.1 a second. A throttle
/// under it leaves it there (the floor bounds what throttles do, and never raises a rate).
#[test]
fn a_policy_slower_than_the_floor_is_paced_to_exactly() {
    let rates = AdaptiveRate::new(AdaptiveConfig::new(1.0));
    let policy = Quota::new(2, Duration::from_secs(60));
    rates.announce("slow.example", policy);
    assert!((rates.rate("slow.example") - 1.0 / 30.0).abs() < 1e-9);
    rates.throttled("slow.example", None);
    assert!((rates.rate("slow.example") - 1.0 / 30.0).abs() < 1e-9);
    // Above the floor, a throttle under the policy still lowers the rate (to 0.8 of it).
    rates.announce("fast.example", Quota::per_second(1));
    rates.throttled("fast.example", None);
    assert!((rates.rate("fast.example") - 0.8).abs() < 1e-9);
}

/// After a slow announcement expires the key learns again from its rate, below the floor
/// and under a ceiling above it: a throttle there must not raise it to the floor.
#[test]
fn a_throttle_never_raises_a_rate_below_the_floor() {
    let clock = ManualClock::new();
    let rates = AdaptiveRate::<str>::with_clock(AdaptiveConfig::new(1.0), clock.clone());
    rates.announce("slow.example", Quota::new(2, Duration::from_secs(60)));
    clock.advance(Duration::from_secs(61)); // the announcement's window is over
    let before = rates.rate("slow.example");
    assert!((before - 1.0 / 30.0).abs() < 1e-9, "{before}");
    rates.throttled("slow.example", None);
    let after = rates.rate("slow.example");
    assert!(after <= before, "{before} -> {after}");
}

/// Admissions of `key` over `days` of fake time, asking once a minute; `renew` runs after
/// each admission (a server repeating its fields on every answer).
fn admitted_each_minute(
    rates: &AdaptiveRate<str>,
    clock: &ManualClock,
    key: &str,
    days: u64,
    renew: impl Fn(),
) -> u64 {
    let mut n = 0;
    for _ in 0..days * 24 * 60 {
        if rates.check(key).is_ok() {
            n += 1;
            renew();
        }
        clock.advance(Duration::from_secs(60));
    }
    n
}

/// The server's word slower than a request a day (the configuration's lowest rate) is paced
/// to exactly, not at one a day: a policy of 5 a week, 1 left for the next week, a site's
/// ceiling of one every 2 days.
#[test]
fn the_servers_word_slower_than_a_day_is_paced_exactly() {
    let week = Duration::from_secs(7 * 86_400);
    let (r, clock) = rates(AdaptiveConfig::new(1.0));
    let weekly = Quota::new(5, week);
    r.announce("policy", weekly);
    assert_eq!(r.quota("policy"), weekly.allow_burst(1));
    assert!((r.rate("policy") - 5.0 / week.as_secs_f64()).abs() < 1e-15);
    // Renewed on every answer, as a server sends it: 5 in the week, then 5 in the next.
    let renew = || r.announce("policy", weekly);
    assert_eq!(admitted_each_minute(&r, &clock, "policy", 7, renew), 5);
    assert_eq!(admitted_each_minute(&r, &clock, "policy", 7, renew), 5);

    let (r, clock) = rates(AdaptiveConfig::new(1.0));
    r.spread("spread", 1, week);
    assert_eq!(r.quota("spread").interval(), week);
    assert_eq!(admitted_each_minute(&r, &clock, "spread", 7, || ()), 1);

    let (r, clock) = rates(AdaptiveConfig::new(1.0));
    r.set_ceiling("ceiling", Some(1.0 / (2.0 * 86_400.0))); // Crawl-delay: 172800
    assert_eq!(admitted_each_minute(&r, &clock, "ceiling", 7, || ()), 4); // days 0, 2, 4, 6
}
