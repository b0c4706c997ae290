//! The design record's semantics (`src/design.rs`, §1), rule by rule, through the public API
//! on a manual clock.
//!
//! Notation as in the design record: interval `T`, burst `b`, tolerance `tau = (b-1)·T`.

use std::time::Duration;

use tollgate::{
    Admitted, DirectLimiter, Error, Limiter, ManualClock, Quota, QuotaError, Timestamp,
};

const MS: Duration = Duration::from_millis(1);
const NS: Duration = Duration::from_nanos(1);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn at(d: Duration) -> Timestamp {
    Timestamp::ZERO + d
}

fn keyed<K: std::hash::Hash + ?Sized>(quota: Quota) -> (Limiter<K>, ManualClock) {
    let clock = ManualClock::new();
    let limiter = Limiter::builder(quota).clock(clock.clone()).build();
    (limiter, clock)
}

fn direct(quota: Quota) -> (DirectLimiter, ManualClock) {
    let clock = ManualClock::new();
    (DirectLimiter::with_clock(quota, clock.clone()), clock)
}

/// The exact refusal a check at `now` should get when it becomes admissible at `earliest`.
fn limited(earliest: Duration, now: Duration, limit: u32) -> Error {
    Error::RateLimited {
        earliest: at(earliest),
        wait: earliest - now,
        limit,
    }
}

fn rejected(r: Result<Admitted, Error>) -> Error {
    match r {
        Ok(ok) => panic!("expected a refusal, got {ok:?}"),
        Err(e) => e,
    }
}

// ---------------------------------------------------------------------------------------------
// governor's known cases and the basic GCRA rules
// ---------------------------------------------------------------------------------------------

#[test]
fn governor_two_per_second() {
    // governor's `check_n` / `rejects_too_many` cases: 2 per second, burst 2.
    let (l, clock) = keyed::<u32>(Quota::per_second(2));
    assert!(l.check(&1).is_ok()); // 0 ms
    clock.advance(MS);
    assert!(l.check(&1).is_ok()); // 1 ms
    clock.advance(MS);
    // 2 ms: both cells used; the stored TAT is 1000 ms, one cell returns at 1000 - tau = 500.
    assert_eq!(rejected(l.check(&1)), limited(ms(500), ms(2), 2));
    clock.set(at(ms(1002)));
    assert!(l.check(&1).is_ok());
    // At 1002 ms the TAT (1000 ms) had lapsed: a full burst of exactly 2.
    assert!(l.check(&1).is_ok());
    assert_eq!(rejected(l.check(&1)), limited(ms(1502), ms(1002), 2));
}

#[test]
fn one_cell_per_interval_after_the_burst() {
    let (l, clock) = keyed::<str>(Quota::per_second(10).allow_burst(3));
    clock.set(at(ms(5_000)));
    for _ in 0..3 {
        assert!(l.check("k").is_ok());
    }
    // Then exactly one cell per 100 ms, never two.
    for i in 1..=20u64 {
        let t = ms(5_000 + 100 * i);
        clock.set(at(t - NS));
        assert_eq!(rejected(l.check("k")), limited(t, t - NS, 3), "step {i}");
        clock.set(at(t));
        assert!(l.check("k").is_ok(), "step {i}");
        assert_eq!(
            rejected(l.check("k")),
            limited(t + ms(100), t, 3),
            "step {i}"
        );
    }
}

#[test]
fn check_n_above_the_burst_is_insufficient_capacity_and_writes_nothing() {
    let (l, clock) = keyed::<u32>(Quota::per_second(5));
    let err = rejected(l.check_n(&1, 6));
    assert_eq!(
        err,
        Error::InsufficientCapacity {
            requested: 6,
            burst: 5
        }
    );
    assert!(err.is_insufficient_capacity());
    assert!(!err.is_rate_limited());
    assert_eq!(err.retry_after(), None);
    // Nothing was stored for the new key...
    assert_eq!(l.count_live_keys(), 0);
    assert_eq!(l.stats().keys_held, 0);
    // ...and the key still has its whole burst.
    let ok = l.check_n(&1, 5).unwrap();
    assert_eq!(ok.remaining(), 0);

    // On a key with state, an oversized request leaves the state as it was.
    clock.advance(ms(200)); // one cell back
    assert_eq!(
        rejected(l.check_n(&1, u32::MAX)),
        Error::InsufficientCapacity {
            requested: u32::MAX,
            burst: 5
        }
    );
    assert_eq!(l.check(&1).unwrap().remaining(), 0);
    assert_eq!(rejected(l.check(&1)), limited(ms(400), ms(200), 5));
}

#[test]
fn n_equal_to_burst_after_idle() {
    let (l, clock) = keyed::<u32>(Quota::per_second(4));
    let ok = l.check_n(&7, 4).unwrap();
    assert_eq!((ok.remaining(), ok.reset_after()), (0, ms(1_000)));
    // Half a second of idle is not enough for a full burst: 2 cells back, 2 short.
    clock.advance(ms(500));
    assert_eq!(rejected(l.check_n(&7, 4)), limited(ms(1_000), ms(500), 4));
    clock.set(at(ms(1_000)));
    let ok = l.check_n(&7, 4).unwrap();
    assert_eq!((ok.remaining(), ok.reset_after()), (0, ms(1_000)));
    clock.advance(Duration::from_secs(3_600));
    assert!(l.check_n(&7, 4).is_ok());
    assert_eq!(rejected(l.check(&7)).retry_after(), Some(ms(250)));
}

#[test]
fn exactly_burst_cells_after_a_long_idle() {
    // governor #107/#249, pelikan ratelimit #36: one extra cell after idle time.
    for burst in [1u32, 2, 3, 10] {
        let (l, clock) = keyed::<u32>(Quota::per_second(10).allow_burst(burst));
        // A steady user first: one cell every 100 ms for a while.
        for _ in 0..50 {
            assert!(l.check(&1).is_ok());
            clock.advance(ms(100));
        }
        // Idle for a long time, then a burst.
        for idle in [
            ms(1_000),
            Duration::from_secs(3_600),
            Duration::from_secs(86_400),
        ] {
            clock.advance(idle);
            let now = clock_now(&clock);
            for i in 0..burst {
                let ok = l
                    .check(&1)
                    .unwrap_or_else(|e| panic!("b={burst} cell {i}: {e:?}"));
                assert_eq!(ok.remaining(), burst - 1 - i);
            }
            let err = rejected(l.check(&1));
            assert_eq!(
                err,
                limited(now + ms(100), now, burst),
                "b={burst}, idle {idle:?}"
            );
        }
    }
}

fn clock_now(clock: &ManualClock) -> Duration {
    use tollgate::Clock;
    Duration::from_nanos(clock.now().as_nanos())
}

#[test]
fn the_burst_returns_exactly_when_the_tat_lapses() {
    // Boundary of "absent = now": a TAT equal to now carries no information.
    let (l, clock) = keyed::<u32>(Quota::per_second(10).allow_burst(3));
    assert!(l.check_n(&1, 3).is_ok()); // TAT = 300 ms
    clock.set(at(ms(300) - NS));
    // One nanosecond short of the full burst: 2 cells are back, the third is not.
    assert_eq!(
        rejected(l.check_n(&1, 3)),
        limited(ms(300), ms(300) - NS, 3)
    );
    clock.set(at(ms(300)));
    assert!(l.check_n(&1, 3).is_ok());
    assert_eq!(rejected(l.check(&1)), limited(ms(400), ms(300), 3));
}

#[test]
fn a_denied_check_writes_nothing() {
    let (l, clock) = keyed::<u32>(Quota::per_second(1));
    assert!(l.check(&1).is_ok()); // TAT = 1 s
    // Hammer the key while it is limited: the earliest time must not move.
    for t in [0, 1, 10, 500, 999] {
        clock.set(at(ms(t)));
        for _ in 0..100 {
            assert_eq!(rejected(l.check(&1)), limited(ms(1_000), ms(t), 1));
        }
    }
    clock.set(at(ms(1_000) - NS));
    assert_eq!(rejected(l.check(&1)), limited(ms(1_000), ms(1_000) - NS, 1));
    clock.set(at(ms(1_000)));
    assert!(l.check(&1).is_ok());
    assert_eq!(l.stats().denied, 501);
    assert_eq!(l.stats().admitted, 2);
}

#[test]
fn retrying_a_denied_request_at_earliest_succeeds_exactly_then() {
    // Multi-cell requests too: the earliest time is for the same request.
    let (l, clock) = keyed::<str>(Quota::per_second(10).allow_burst(5));
    assert!(l.check_n("k", 4).is_ok()); // TAT = 400 ms
    clock.set(at(ms(50)));
    // 3 more cells: admissible at TAT + 2·T - tau = 400 + 200 - 400 = 200 ms.
    let Error::RateLimited {
        earliest,
        wait,
        limit,
    } = rejected(l.check_n("k", 3))
    else {
        panic!("not rate limited")
    };
    assert_eq!((earliest, wait, limit), (at(ms(200)), ms(150), 5));
    clock.set(Timestamp::from_nanos(earliest.as_nanos() - 1));
    assert_eq!(
        rejected(l.check_n("k", 3)),
        limited(ms(200), ms(200) - NS, 5)
    );
    clock.set(earliest);
    let ok = l.check_n("k", 3).unwrap();
    assert_eq!((ok.remaining(), ok.reset_after()), (0, ms(500)));
}

#[test]
fn check_at_uses_the_given_time_not_the_clock() {
    let (l, clock) = keyed::<u32>(Quota::per_second(1));
    clock.set(at(ms(10_000)));
    assert!(l.check_at(&1, at(ms(1))).is_ok());
    assert_eq!(
        rejected(l.check_at(&1, at(ms(2)))),
        limited(ms(1_001), ms(2), 1)
    );
    assert!(l.check_n_at(&1, 1, at(ms(1_001))).is_ok());
    assert_eq!(l.now(), at(ms(10_000)));
}

// ---------------------------------------------------------------------------------------------
// Header fields
// ---------------------------------------------------------------------------------------------

#[test]
fn header_fields_count_down_and_report_the_reset() {
    let (l, clock) = keyed::<str>(Quota::per_second(10));
    clock.set(at(ms(7_000)));
    for i in 1..=10u32 {
        let ok = l.check("client").unwrap();
        assert_eq!(ok.limit(), 10);
        assert_eq!(ok.remaining(), 10 - i);
        assert_eq!(ok.reset_after(), ms(100) * i);
    }
    let err = rejected(l.check("client"));
    assert_eq!(err, limited(ms(7_100), ms(7_000), 10));
    assert_eq!(err.retry_after(), Some(ms(100)));
    assert!(err.is_rate_limited() && !err.is_table_full());

    // Time returns cells one interval at a time, and the reset shrinks with it.
    clock.advance(ms(250));
    let ok = l.check("client").unwrap();
    // TAT was 8000 ms; at 7250 ms two cells had come back (one now used): 1 left.
    assert_eq!(
        (ok.limit(), ok.remaining(), ok.reset_after()),
        (10, 1, ms(850))
    );
    // check_n reports the same fields.
    let ok = l.check_n("other", 4).unwrap();
    assert_eq!(
        (ok.limit(), ok.remaining(), ok.reset_after()),
        (10, 6, ms(400))
    );
}

// ---------------------------------------------------------------------------------------------
// set_quota, reset, penalize
// ---------------------------------------------------------------------------------------------

#[test]
fn set_quota_applies_to_every_key_and_keeps_their_state() {
    let (l, clock) = keyed::<u32>(Quota::per_second(1));
    // 100 keys (across shards), each with its one cell used: TAT = 1 s.
    for k in 0..100 {
        assert!(l.check(&k).is_ok());
    }
    // Raise the burst to 3 at 0 ms. A key that used its burst gets no fresh one: with
    // tau = 2 s and TAT = 1 s, exactly two more cells, then the third at 1 s.
    l.set_quota(Quota::per_second(1).allow_burst(3));
    assert_eq!(l.quota(), Quota::per_second(1).allow_burst(3));
    for k in 0..100 {
        let ok = l.check(&k).unwrap();
        assert_eq!((ok.limit(), ok.remaining()), (3, 1), "key {k}");
        assert!(l.check(&k).is_ok(), "key {k}");
        assert_eq!(
            rejected(l.check(&k)),
            limited(ms(1_000), ms(0), 3),
            "key {k}"
        );
    }
    // A new key sees the new burst in full.
    assert_eq!(l.check(&1_000).unwrap().remaining(), 2);

    // Lower it again: every key now reads the stored TAT (3 s) with burst 1, tau = 0.
    clock.set(at(ms(500)));
    l.set_quota(Quota::with_period(ms(250)));
    for k in 0..100 {
        assert_eq!(
            rejected(l.check(&k)),
            limited(ms(3_000), ms(500), 1),
            "key {k}"
        );
    }
    clock.set(at(ms(3_000)));
    for k in 0..100 {
        let ok = l.check(&k).unwrap();
        assert_eq!(
            (ok.limit(), ok.remaining(), ok.reset_after()),
            (1, 0, ms(250))
        );
    }
}

#[test]
fn reset_forgets_a_key() {
    let (l, _clock) = keyed::<str>(Quota::per_minute(3));
    assert!(l.check_n("a", 3).is_ok());
    assert!(l.check_n("b", 3).is_ok());
    assert!(rejected(l.check("a")).is_rate_limited());
    assert!(l.reset("a"));
    assert!(!l.reset("a"));
    assert!(!l.reset("never seen"));
    assert_eq!(l.count_live_keys(), 1);
    // "a" starts over with a full burst; "b" is untouched.
    assert_eq!(l.check("a").unwrap().remaining(), 2);
    assert_eq!(
        rejected(l.check("b")),
        limited(Duration::from_secs(20), ms(0), 3)
    );
}

/// `reset` says whether the key was live, keyed and direct alike: an expired key is
/// forgotten either way, but held nothing, whether or not the table still kept it (here it
/// keeps every expired key; keyed `reset` once answered from that).
#[test]
fn reset_says_whether_the_key_was_live_keyed_and_direct_alike() {
    let clock = ManualClock::new();
    let l = Limiter::<str>::builder(Quota::per_second(1))
        .keep_expired(Duration::MAX)
        .clock(clock.clone())
        .build();
    let d = DirectLimiter::with_clock(Quota::per_second(1), clock.clone());
    assert!(l.check("a").is_ok() && d.check().is_ok());
    assert!(l.check("b").is_ok());
    assert_eq!((l.reset("b"), d.reset()), (true, true)); // live: a cell out
    assert!(d.check().is_ok());
    clock.advance(Duration::from_secs(1)); // the cells are back: expired
    assert_eq!(l.stats().keys_held, 1, "the table keeps the expired key");
    assert_eq!((l.reset("a"), d.reset()), (false, false));
    assert_eq!(l.stats().keys_held, 0, "and forgets it");
    assert_eq!((l.reset("a"), l.reset("never seen")), (false, false));
}

#[test]
fn penalize_pushes_the_next_admission_out() {
    let (l, clock) = keyed::<str>(Quota::per_second(100));
    clock.set(at(ms(1_000)));
    l.penalize("host", Duration::from_secs(30)).unwrap();
    assert_eq!(
        rejected(l.check("host")),
        limited(ms(31_000), ms(1_000), 100)
    );
    clock.set(at(ms(31_000) - NS));
    assert_eq!(
        rejected(l.check("host")),
        limited(ms(31_000), ms(31_000) - NS, 100)
    );
    clock.set(at(ms(31_000)));
    assert!(l.check("host").is_ok());
    // Other keys are not affected.
    assert_eq!(l.check_n("other", 100).unwrap().remaining(), 0);
}

#[test]
fn penalize_keeps_a_later_admission() {
    let (l, clock) = keyed::<u32>(Quota::per_minute(1));
    assert!(l.check(&1).is_ok()); // next admission at 60 s
    l.penalize(&1, Duration::from_secs(10)).unwrap();
    assert_eq!(rejected(l.check(&1)), limited(ms(60_000), ms(0), 1));
    // A longer penalty wins, then a shorter one does not shorten it.
    l.penalize(&1, Duration::from_secs(90)).unwrap();
    l.penalize(&1, Duration::from_secs(5)).unwrap();
    clock.set(at(ms(1_000)));
    assert_eq!(rejected(l.check(&1)), limited(ms(90_000), ms(1_000), 1));
    clock.set(at(ms(90_000)));
    assert!(l.check(&1).is_ok());
}

#[test]
fn penalize_by_zero_changes_nothing() {
    let (l, _clock) = keyed::<u32>(Quota::per_second(4));
    l.penalize(&1, Duration::ZERO).unwrap();
    assert_eq!(l.stats().keys_held, 0);
    assert!(l.check_n(&1, 4).is_ok());
}

// ---------------------------------------------------------------------------------------------
// Saturation instead of overflow
// ---------------------------------------------------------------------------------------------

#[test]
fn overflowing_durations_saturate() {
    let (l, clock) = keyed::<u32>(Quota::per_second(1));
    // A penalty too long to represent saturates (about 36 years) instead of panicking.
    l.penalize(&1, Duration::MAX).unwrap();
    let wait = rejected(l.check(&1)).retry_after().unwrap();
    assert!(wait >= Duration::from_secs(18 * 365 * 86_400), "{wait:?}");
    // Clock and timestamp arithmetic saturate too.
    clock.advance(Duration::MAX);
    clock.advance(Duration::MAX);
    assert_eq!(l.now(), Timestamp::from_nanos(u64::MAX));
    assert_eq!(
        Timestamp::from_nanos(5) + Duration::MAX,
        Timestamp::from_nanos(u64::MAX)
    );
    assert_eq!(Timestamp::from_nanos(5) - Duration::MAX, Timestamp::ZERO);
    // At the far end of time a fresh key still gets one cell, then is limited by one
    // interval: the limiter keeps working, it just no longer sees time pass.
    let ok = l.check(&2).unwrap();
    assert_eq!((ok.remaining(), ok.reset_after()), (0, ms(1_000)));
    assert_eq!(rejected(l.check(&2)).retry_after(), Some(ms(1_000)));
    assert!(l.check_at(&3, Timestamp::from_nanos(u64::MAX)).is_ok());
    // The largest burst and cost do not overflow either.
    let q = Quota::try_new(u32::MAX, Duration::from_secs(10)).unwrap();
    let (l, _clock) = keyed::<u32>(q);
    let ok = l.check_n(&1, u32::MAX).unwrap();
    assert_eq!((ok.limit(), ok.remaining()), (u32::MAX, 0));
    assert_eq!(ok.reset_after(), q.interval() * u32::MAX);
}

/// At the far end of time a key checked there is live, as the limiter's own (saturated)
/// time says, in the count and the stats alike (the count once read the clock unsaturated
/// and said none).
#[test]
fn keys_checked_at_the_far_end_of_time_count_as_live() {
    let (l, clock) = keyed::<u32>(Quota::per_second(1));
    clock.advance(Duration::MAX);
    assert!(l.check(&1).is_ok());
    assert_eq!(l.count_live_keys(), 1);
    assert_eq!(l.stats().live_keys, 1);
}

/// A clock of the caller's own that counts from the Unix epoch is past the limiter's horizon
/// from the start, so every key over its burst would be refused for good: refused where the
/// limiter is configured, with the cause.
#[test]
#[should_panic(expected = "count from a recent origin")]
fn a_clock_counting_from_the_unix_epoch_is_refused() {
    #[derive(Debug)]
    struct Epoch;
    impl tollgate::Clock for Epoch {
        fn now(&self) -> Timestamp {
            let since = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap();
            Timestamp::from_nanos(since.as_nanos() as u64)
        }
    }
    let _ = Limiter::<u32>::builder(Quota::per_second(1)).clock(Epoch);
}

/// A clock of the caller's own nine years from its origin is taken; tollgate's own clocks
/// are taken at any reading (a `ManualClock` may be moved anywhere, before or after).
#[test]
fn recent_and_manual_clocks_are_taken_at_any_reading_below_the_bound() {
    #[derive(Debug)]
    struct At(u64);
    impl tollgate::Clock for At {
        fn now(&self) -> Timestamp {
            Timestamp::from_nanos(self.0)
        }
    }
    let nine_years = 1 << 58;
    let l = Limiter::<u32>::builder(Quota::per_second(1))
        .clock(At(nine_years))
        .build();
    assert!(l.check(&1).is_ok());
    let refused = std::panic::catch_unwind(|| {
        tollgate::DirectLimiter::with_clock(Quota::per_second(1), At(nine_years + 1))
    });
    assert!(refused.is_err());
    let clock = tollgate::ManualClock::new();
    clock.advance(Duration::MAX);
    assert!(
        Limiter::<u32>::builder(Quota::per_second(1))
            .clock(clock)
            .build()
            .check(&1)
            .is_ok()
    );
}

#[test]
fn direct_limiter_saturates_too() {
    let (d, clock) = direct(Quota::per_second(2));
    d.penalize(Duration::MAX);
    assert!(rejected(d.check()).retry_after().unwrap() >= Duration::from_secs(18 * 365 * 86_400));
    d.reset();
    clock.advance(Duration::MAX);
    assert_eq!(d.check_n(2).unwrap().reset_after(), ms(1_000));
    assert_eq!(rejected(d.check()).retry_after(), Some(ms(500)));
}

// ---------------------------------------------------------------------------------------------
// Fractional rates and quota construction
// ---------------------------------------------------------------------------------------------

#[test]
fn fractional_rate_one_cell_every_ten_seconds() {
    let q = Quota::with_period(Duration::from_secs(10));
    assert_eq!((q.interval(), q.burst()), (Duration::from_secs(10), 1));
    assert_eq!(Quota::try_new(1, Duration::from_secs(10)), Ok(q));
    assert_eq!(Quota::try_with_period(Duration::from_secs(10)), Ok(q));
    let (l, clock) = keyed::<u32>(q);
    assert!(l.check(&1).is_ok());
    clock.set(at(ms(10_000) - NS));
    assert_eq!(
        rejected(l.check(&1)),
        limited(ms(10_000), ms(10_000) - NS, 1)
    );
    clock.set(at(ms(10_000)));
    assert!(l.check(&1).is_ok());
    assert_eq!(rejected(l.check(&1)).retry_after(), Some(ms(10_000)));
    // Two cells per 3 s with burst 2 (0.667/s).
    let q = Quota::try_new(2, Duration::from_secs(3)).unwrap();
    assert_eq!((q.interval(), q.burst()), (ms(1_500), 2));
}

#[test]
fn quota_constructors() {
    assert_eq!(Quota::per_second(2).interval(), ms(500));
    assert_eq!(Quota::per_minute(60).interval(), ms(1_000));
    assert_eq!(Quota::per_hour(2).interval(), Duration::from_secs(1_800));
    assert_eq!(Quota::per_minute(6).burst(), 6);
    // Uneven periods round the interval up: never more than asked for.
    assert_eq!(
        Quota::per_second(3).interval(),
        Duration::from_nanos(333_333_334)
    );
    // The finest resolution: one cell per nanosecond.
    let q = Quota::try_new(1_000_000_000, Duration::from_secs(1)).unwrap();
    assert_eq!((q.interval(), q.burst()), (NS, 1_000_000_000));
    assert_eq!(Quota::per_second(10).allow_burst(1).burst(), 1);
    assert_eq!(
        Quota::per_second(10).try_allow_burst(25).map(|q| q.burst()),
        Ok(25)
    );
}

#[test]
fn quota_errors() {
    let s = Duration::from_secs(1);
    assert_eq!(Quota::try_new(0, s), Err(QuotaError::ZeroCells));
    assert_eq!(
        Quota::try_new(1, Duration::ZERO),
        Err(QuotaError::ZeroPeriod)
    );
    assert_eq!(
        Quota::try_with_period(Duration::ZERO),
        Err(QuotaError::ZeroPeriod)
    );
    assert_eq!(
        Quota::try_new(3, Duration::from_nanos(2)),
        Err(QuotaError::IntervalBelowOneNanosecond {
            cells: 3,
            period: Duration::from_nanos(2)
        })
    );
    assert_eq!(
        Quota::per_second(1).try_allow_burst(0),
        Err(QuotaError::ZeroBurst)
    );
    assert_eq!(
        Quota::try_with_period(Duration::MAX),
        Err(QuotaError::WindowTooLong)
    );
    // 2^59 ns is the longest window: exactly it is fine, one more nanosecond is not.
    let max = Duration::from_nanos(1 << 59);
    assert!(Quota::try_with_period(max).is_ok());
    assert_eq!(
        Quota::try_with_period(max + NS),
        Err(QuotaError::WindowTooLong)
    );
    assert_eq!(
        Quota::try_with_period(Duration::from_nanos(1 << 58))
            .unwrap()
            .try_allow_burst(3),
        Err(QuotaError::WindowTooLong)
    );
    // The benchmarks' "live" quota (a 100,000-hour window, 11.4 years) is accepted.
    assert_eq!(
        Quota::per_hour(1)
            .try_allow_burst(100_000)
            .map(|q| q.burst()),
        Ok(100_000)
    );
    assert_eq!(
        Quota::per_hour(1).try_allow_burst(u32::MAX),
        Err(QuotaError::WindowTooLong)
    );
    // Errors are displayable and std errors.
    let e: Box<dyn std::error::Error> = Box::new(QuotaError::ZeroCells);
    assert!(!e.to_string().is_empty());
}

#[test]
#[should_panic(expected = "per_second(0)")]
fn per_second_zero_panics() {
    let _ = Quota::per_second(0);
}

#[test]
#[should_panic(expected = "per_minute(0)")]
fn per_minute_zero_panics() {
    let _ = Quota::per_minute(0);
}

#[test]
#[should_panic(expected = "with_period")]
fn with_period_zero_panics() {
    let _ = Quota::with_period(Duration::ZERO);
}

#[test]
#[should_panic(expected = "allow_burst(0)")]
fn allow_burst_zero_panics() {
    let _ = Quota::per_second(1).allow_burst(0);
}

// ---------------------------------------------------------------------------------------------
// n = 0, borrowed keys
// ---------------------------------------------------------------------------------------------

#[test]
fn zero_cells_are_admitted_and_write_nothing() {
    let (l, clock) = keyed::<u32>(Quota::per_second(2));
    // On a new key: admitted, full headers, nothing stored.
    let ok = l.check_n(&1, 0).unwrap();
    assert_eq!(
        (ok.limit(), ok.remaining(), ok.reset_after()),
        (2, 2, Duration::ZERO)
    );
    assert_eq!(l.stats().keys_held, 0);
    assert_eq!(l.count_live_keys(), 0);
    // On a limited key: admitted, reports the state, changes nothing.
    assert!(l.check_n(&1, 2).is_ok());
    let ok = l.check_n(&1, 0).unwrap();
    assert_eq!((ok.remaining(), ok.reset_after()), (0, ms(1_000)));
    assert_eq!(rejected(l.check(&1)), limited(ms(500), ms(0), 2));
    clock.set(at(ms(500)));
    for _ in 0..10 {
        assert!(l.check_n(&1, 0).is_ok());
    }
    assert!(l.check(&1).is_ok());
    assert_eq!(rejected(l.check(&1)), limited(ms(1_000), ms(500), 2));
}

/// The key type comes from the first use, with no annotation on the limiter (a newcomer's
/// first lines: this is a compile-time test as much as a run-time one).
#[test]
fn the_key_type_is_inferred_from_use() {
    let by_ip = Limiter::keyed(Quota::per_second(1));
    let ip = std::net::IpAddr::from([203, 0, 113, 9]);
    assert!(by_ip.check(&ip).is_ok());
    assert!(by_ip.check(&ip).is_err());
    let by_host = Limiter::keyed(Quota::per_second(1));
    futures_executor::block_on(by_host.until_ready("example.com")).unwrap();
    assert!(by_host.check("example.com").is_err());
}

#[test]
fn string_keys_are_checked_with_str_through_borrowed() {
    let (l, _clock) = keyed::<String>(Quota::per_second(3));
    let by_str = l.borrowed::<str>();
    assert!(by_str.check("alice").is_ok());
    assert!(l.check(&String::from("alice")).is_ok());
    assert!(by_str.check_n("alice", 1).is_ok());
    // The &str and &String forms name the same key: three cells are used.
    assert!(rejected(l.check(&"alice".to_owned())).is_rate_limited());
    assert!(rejected(by_str.check_at("alice", Timestamp::ZERO)).is_rate_limited());
    assert_eq!(by_str.check("bob").unwrap().remaining(), 2);
    assert!(by_str.reset("alice"));
    assert_eq!(l.check(&String::from("alice")).unwrap().remaining(), 2);
    by_str.penalize("bob", ms(10)).unwrap();
    assert_eq!(l.count_live_keys(), 2);
}

// ---------------------------------------------------------------------------------------------
// DirectLimiter: the same rules on one word
// ---------------------------------------------------------------------------------------------

#[test]
fn direct_governor_two_per_second() {
    let (d, clock) = direct(Quota::per_second(2));
    assert!(d.check().is_ok());
    clock.advance(MS);
    assert!(d.check().is_ok());
    clock.advance(MS);
    assert_eq!(rejected(d.check()), limited(ms(500), ms(2), 2));
    clock.set(at(ms(1_002)));
    assert!(d.check().is_ok());
    assert!(d.check().is_ok());
    assert_eq!(rejected(d.check()), limited(ms(1_502), ms(1_002), 2));
}

#[test]
fn direct_headers_and_exact_burst_after_idle() {
    let (d, clock) = direct(Quota::per_second(10).allow_burst(4));
    for _ in 0..30 {
        assert!(d.check().is_ok());
        clock.advance(ms(100));
    }
    clock.advance(Duration::from_secs(3_600));
    let now = clock_now(&clock);
    for i in 1..=4u32 {
        let ok = d.check().unwrap();
        assert_eq!(
            (ok.limit(), ok.remaining(), ok.reset_after()),
            (4, 4 - i, ms(100) * i)
        );
    }
    assert_eq!(rejected(d.check()), limited(now + ms(100), now, 4));
}

#[test]
fn direct_check_n_rules() {
    let (d, clock) = direct(Quota::per_second(5));
    assert_eq!(
        rejected(d.check_n(6)),
        Error::InsufficientCapacity {
            requested: 6,
            burst: 5
        }
    );
    let ok = d.check_n(0).unwrap();
    assert_eq!((ok.remaining(), ok.reset_after()), (5, Duration::ZERO));
    assert!(d.check_n(5).is_ok());
    assert!(d.check_n(0).is_ok());
    clock.set(at(ms(300)));
    // Denied checks write nothing: the earliest time for 2 cells stays at 400 ms.
    for _ in 0..10 {
        assert_eq!(rejected(d.check_n(2)), limited(ms(400), ms(300), 5));
    }
    assert_eq!(
        rejected(d.check_n_at(2, at(ms(400) - NS))),
        limited(ms(400), ms(400) - NS, 5)
    );
    assert!(d.check_n_at(2, at(ms(400))).is_ok());
    assert!(d.check_at(at(ms(400))).is_err());
}

#[test]
fn direct_set_quota_reset_penalize() {
    let (d, clock) = direct(Quota::per_second(1));
    assert!(d.check().is_ok()); // TAT 1 s
    d.set_quota(Quota::per_second(1).allow_burst(3));
    assert_eq!(d.quota().burst(), 3);
    // No fresh burst: two more cells, not three.
    assert!(d.check().is_ok());
    assert!(d.check().is_ok());
    assert_eq!(rejected(d.check()), limited(ms(1_000), ms(0), 3));
    d.reset();
    assert!(d.check_n(3).is_ok());

    clock.set(at(ms(5_000)));
    d.reset();
    d.penalize(Duration::from_secs(30));
    assert_eq!(rejected(d.check()), limited(ms(35_000), ms(5_000), 3));
    d.penalize(Duration::from_secs(1));
    clock.set(at(ms(35_000) - NS));
    assert!(d.check().is_err());
    clock.set(at(ms(35_000)));
    assert!(d.check().is_ok());
}

#[test]
fn direct_penalize_by_zero_changes_nothing() {
    // The keyed limiter's penalize(ZERO) is a no-op; the direct one must be too.
    let (d, _clock) = direct(Quota::per_second(4));
    d.penalize(Duration::ZERO);
    assert!(d.check_n(4).is_ok());
}

#[test]
fn direct_fractional_rate() {
    let (d, clock) = direct(Quota::with_period(Duration::from_secs(10)));
    assert!(d.check().is_ok());
    clock.set(at(ms(10_000) - NS));
    assert_eq!(rejected(d.check()), limited(ms(10_000), ms(10_000) - NS, 1));
    clock.set(at(ms(10_000)));
    assert!(d.check().is_ok());
}

#[test]
fn direct_clones_share_one_limit() {
    let (d, _clock) = direct(Quota::per_second(3));
    let d2 = d.clone();
    assert!(d.check().is_ok());
    assert!(d2.check().is_ok());
    assert_eq!(d.check().unwrap().remaining(), 0);
    assert!(d2.check().is_err());
}

// ---------------------------------------------------------------------------------------------
// The manual clock
// ---------------------------------------------------------------------------------------------

#[test]
fn manual_clock_clones_share_time() {
    use tollgate::Clock;
    let clock = ManualClock::new();
    let other = clock.clone();
    assert_eq!(clock.now(), Timestamp::ZERO);
    other.advance(ms(3));
    assert_eq!(clock.now(), at(ms(3)));
    clock.set(at(ms(10)));
    assert_eq!(other.now(), at(ms(10)));
    clock.set(at(ms(10))); // setting the current time is allowed
    // A limiter built on a clone follows the test's handle.
    let l: Limiter<u8> = Limiter::builder(Quota::per_second(1)).clock(other).build();
    assert_eq!(l.now(), at(ms(10)));
    assert!(l.check(&0).is_ok());
    clock.advance(ms(1_000));
    assert!(l.check(&0).is_ok());
}

#[test]
#[should_panic(expected = "backwards")]
fn manual_clock_never_moves_backwards() {
    let clock = ManualClock::new();
    clock.set(at(ms(5)));
    clock.set(at(ms(4)));
}
