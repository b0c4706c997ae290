//! The README's quota recipes ("What a quota means"), each checked on a manual clock: the
//! policy a reader asks for is the one the `Quota` enforces.
//!
//! nginx's `limit_req` is modelled from its source (`ngx_http_limit_req_module.c`): per key
//! an `excess` in thousandths of a request and the `last` millisecond it moved; a request
//! computes `excess - rate·ms/1000 + 1000`, clamped at zero, and is refused when that exceeds
//! `burst·1000`; a new key starts at zero and is admitted. Without `nodelay` an admitted
//! request is delayed by `excess/rate`.

use std::future::Future;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tollgate::{Limiter, ManualClock, Quota};

const MS: Duration = Duration::from_millis(1);

/// nginx's per-key state for `limit_req rate=R r/s burst=B`, in its own units.
struct NginxLimitReq {
    /// Requests per second × 1000, as nginx stores `rate`.
    rate: i64,
    /// `burst` × 1000.
    burst: i64,
    /// `(excess, last)` once the key has been seen.
    node: Option<(i64, i64)>,
}

impl NginxLimitReq {
    fn new(rate_per_sec: i64, burst: i64) -> NginxLimitReq {
        NginxLimitReq {
            rate: rate_per_sec * 1000,
            burst: burst * 1000,
            node: None,
        }
    }

    /// A request at millisecond `now`: `Some(delay in ms)` if admitted (the delay nginx
    /// applies without `nodelay`), `None` if refused.
    fn request(&mut self, now: i64) -> Option<i64> {
        let Some((excess, last)) = self.node else {
            self.node = Some((0, now));
            return Some(0);
        };
        let ms = (now - last).max(0);
        let excess = (excess - self.rate * ms / 1000 + 1000).max(0);
        if excess > self.burst {
            return None;
        }
        self.node = Some((excess, if ms != 0 { now } else { last }));
        Some(excess * 1000 / self.rate)
    }
}

/// A small deterministic generator of arrival gaps: bursts, spread-out requests and pauses.
struct Gaps(u64);

impl Gaps {
    fn next_ms(&mut self) -> i64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let r = (self.0 >> 33) % 1000;
        match r {
            0..=499 => 0,                  // a burst: same millisecond
            500..=899 => (r % 120) as i64, // around the rate (one per 100 ms)
            _ => 200 + (r % 3000) as i64,  // a pause
        }
    }
}

#[test]
fn nginx_nodelay_is_rate_10_burst_21() {
    // limit_req zone=... rate=10r/s burst=20 nodelay;
    for seed in 1..=20 {
        let clock = ManualClock::new();
        let limiter = Limiter::builder(Quota::per_second(10).allow_burst(21))
            .clock(clock.clone())
            .build();
        let mut nginx = NginxLimitReq::new(10, 20);
        let mut gaps = Gaps(seed);
        let (mut now, mut admitted) = (0i64, 0);
        for i in 0..5_000 {
            now += gaps.next_ms();
            clock.set(tollgate::Timestamp::ZERO + MS * now as u32);
            let ours = limiter.check(&"client").is_ok();
            let theirs = nginx.request(now).is_some();
            assert_eq!(ours, theirs, "seed {seed}, request {i} at {now} ms");
            admitted += u32::from(ours);
        }
        // The sequences must exercise both answers, or the comparison says little.
        assert!(
            admitted > 1_000 && admitted < 5_000,
            "seed {seed}: {admitted}"
        );
    }
}

#[test]
fn nginx_delayed_is_rate_10_burst_1_waiting_at_most_2s() {
    // limit_req zone=... rate=10r/s burst=20;  (no nodelay: excess requests are delayed)
    for seed in 1..=10 {
        let clock = ManualClock::new();
        let limiter = Limiter::builder(Quota::per_second(10).allow_burst(1))
            .clock(clock.clone())
            .build();
        let mut nginx = NginxLimitReq::new(10, 20);
        let mut gaps = Gaps(seed);
        let mut cx = Context::from_waker(Waker::noop());
        let mut now = 0i64;
        // (the request's index, nginx's send instant, our wait)
        let mut waiting = Vec::new();
        let mut arrivals = Vec::new();
        for _ in 0..2_000 {
            now += gaps.next_ms();
            arrivals.push(now);
        }
        let mut next = 0;
        let mut sent = 0;
        let end = arrivals[arrivals.len() - 1] + 3_000;
        for t in 0..=end {
            clock.set(tollgate::Timestamp::ZERO + MS * t as u32);
            while next < arrivals.len() && arrivals[next] == t {
                let expected = nginx.request(t).map(|delay| t + delay);
                let mut wait = Box::pin(
                    limiter
                        .until_ready(&"client")
                        .within(Duration::from_secs(2)),
                );
                match (wait.as_mut().poll(&mut cx), expected) {
                    (Poll::Ready(Ok(_)), Some(at)) => {
                        assert_eq!(at, t, "seed {seed}, request {next} at {t} ms");
                        sent += 1;
                    }
                    (Poll::Ready(Err(_)), None) => {}
                    (Poll::Pending, Some(at)) => waiting.push((next, at, wait)),
                    (ours, theirs) => panic!(
                        "seed {seed}, request {next} at {t} ms: ours {:?}, nginx {theirs:?}",
                        ours.map(|r| r.is_ok())
                    ),
                }
                next += 1;
            }
            waiting.retain_mut(|(i, at, wait)| match wait.as_mut().poll(&mut cx) {
                Poll::Pending => {
                    assert!(
                        t < *at,
                        "seed {seed}, request {i}: nginx sends it at {at} ms"
                    );
                    true
                }
                Poll::Ready(result) => {
                    assert!(
                        result.is_ok(),
                        "seed {seed}, request {i}: refused after queueing"
                    );
                    assert_eq!(*at, t, "seed {seed}, request {i}: sent at {t} ms");
                    sent += 1;
                    false
                }
            });
        }
        assert!(waiting.is_empty());
        assert!(sent > 500 && sent < arrivals.len(), "seed {seed}: {sent}");
    }
}

/// Greedy callers (a check every `step`) admitted by `quota` over `span`: the admissions'
/// instants. Greedy is GCRA's worst case: every cell goes at the first instant it may.
fn greedy(quota: Quota, step: Duration, span: Duration) -> Vec<Duration> {
    let clock = ManualClock::new();
    let limiter = Limiter::builder(quota).clock(clock.clone()).build();
    let mut at = Duration::ZERO;
    let mut admitted = Vec::new();
    while at <= span {
        clock.set(tollgate::Timestamp::ZERO + at);
        while limiter.check(&"k").is_ok() {
            admitted.push(at);
        }
        at += step;
    }
    admitted
}

/// The most admissions in any closed window `[t, t + width]`.
fn most_in_any_window(admitted: &[Duration], width: Duration) -> usize {
    let mut most = 0;
    let mut start = 0;
    for end in 0..admitted.len() {
        while admitted[end] - admitted[start] > width {
            start += 1;
        }
        most = most.max(end - start + 1);
    }
    most
}

#[test]
fn a_hundred_a_minute_without_bursts_is_one_every_600ms() {
    let admitted = greedy(
        Quota::per_minute(100).allow_burst(1),
        MS,
        Duration::from_secs(300),
    );
    assert_eq!(admitted.len(), 501); // at 0, 0.6 s, ..., 300 s
    for pair in admitted.windows(2) {
        assert_eq!(pair[1] - pair[0], Duration::from_millis(600));
    }
}

#[test]
fn at_most_a_hundred_in_any_minute() {
    let minute = Duration::from_secs(60);
    let admitted = greedy(Quota::per_minute(50).allow_burst(50), MS * 10, minute * 5);
    assert_eq!(most_in_any_window(&admitted, minute), 100);
    // The shorthand a reader might reach for first lets twice as many through.
    let shorthand = greedy(Quota::per_minute(100), MS * 10, minute * 5);
    assert_eq!(most_in_any_window(&shorthand, minute), 200);
}

#[test]
fn ten_a_second_with_bursts_of_twenty() {
    let admitted = greedy(
        Quota::per_second(10).allow_burst(20),
        MS,
        Duration::from_secs(10),
    );
    assert!(admitted[..20].iter().all(|&at| at == Duration::ZERO));
    assert_eq!(admitted[20], Duration::from_millis(100));
    assert_eq!(admitted.len(), 20 + 100); // the burst, then one every 100 ms up to 10 s
}
