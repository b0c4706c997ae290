//! An upper bound on the server's clock, read on this node's clock: what lets the fast path
//! refuse exactly until the server would admit, not one latency earlier.
//!
//! # The bound
//!
//! Let `θ` be the server's `TIME` minus this node's monotonic clock (both in ns). A reply
//! read `TIME` as `s` (whole µs, truncated) at some instant between the request's `sent` and
//! the reply's `recv`, so
//!
//! ```text
//!   s - recv <= θ <= s - sent + 1 µs
//! ```
//!
//! The fast path needs the *upper* bound: a check at local `t` is refused locally only if a
//! server reading `TIME` at `t` (at most `t + θ`) would refuse. One reply's bound is `θ`
//! plus that request's one-way latency `d`; checks sent by it reach the server `d'` later,
//! so whenever `d' < d` (jitter) the node's probe arrives before the server's instant and is
//! refused there: an extra round trip. The estimator therefore keeps the *smallest* upper
//! bound seen, `θ + min d`, which is tight to within the fastest request seen.
//!
//! # Drift and steps
//!
//! The two clocks may drift apart (NTP slews either by at most 500 ppm), so an old bound is
//! aged by [`DRIFT_PPM`] (1,000 ppm: both slewing in opposite directions) per unit of local
//! time since its sample, and a fresh sample replaces it as soon as it is smaller. A server
//! clock stepped *back* makes `θ` smaller: the stored bound stays a bound (the node refuses
//! less) until a sample replaces it. A step *forward* makes the stored bound too small;
//! it is detected at the next reply whose lower bound `s - recv` exceeds it, and the bound
//! is then replaced by that reply's. A forward step smaller than the round trip can go
//! undetected until the aging catches up: for that long the fast path may refuse up to that
//! step early. GCRA on a clock that steps is approximate anyway (Redis decides on the
//! stepped clock too); run the server with a slewing NTP client.

use std::sync::Mutex;
use std::time::Instant;

/// The assumed worst relative drift of the server's clock against this node's.
pub(crate) const DRIFT_PPM: i128 = 1_000;

#[derive(Debug, Clone, Copy)]
struct Sample {
    /// Upper bound on `θ`, ns.
    hi: i128,
    /// Local ns at which it was taken.
    at: i128,
}

impl Sample {
    /// The bound aged to local instant `t`.
    fn at(&self, t: i128) -> i128 {
        let age = (t - self.at).max(0);
        self.hi + (age * DRIFT_PPM + 999_999) / 1_000_000
    }
}

/// The server clock's upper bound, shared by a limiter's clones.
#[derive(Debug)]
pub(crate) struct ServerClock {
    base: Instant,
    best: Mutex<Option<Sample>>,
}

impl ServerClock {
    pub(crate) fn new() -> ServerClock {
        ServerClock {
            base: Instant::now(),
            best: Mutex::new(None),
        }
    }

    fn local(&self, t: Instant) -> i128 {
        t.saturating_duration_since(self.base).as_nanos() as i128
    }

    /// Takes in a reply that read `TIME` as `server_us` between `sent` and `recv`.
    pub(crate) fn observe(&self, sent: Instant, recv: Instant, server_us: u64) {
        let s = i128::from(server_us) * 1_000;
        let (sent, recv) = (self.local(sent), self.local(recv));
        let sample = Sample {
            hi: s - sent + 1_000,
            at: sent,
        };
        let lo = s - recv;
        let mut best = self.best.lock().unwrap_or_else(|e| e.into_inner());
        match *best {
            // A tighter bound, or the old one is contradicted (a forward step).
            Some(old) if sample.hi >= old.at(sent) && lo <= old.at(recv) => {}
            _ => *best = Some(sample),
        }
    }

    /// An upper bound, in ns, on what the server's `TIME` reads at local instant `now`;
    /// `None` before the first reply.
    pub(crate) fn upper(&self, now: Instant) -> Option<i128> {
        let t = self.local(now);
        let best = self.best.lock().unwrap_or_else(|e| e.into_inner());
        best.map(|b| t + b.at(t))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn keeps_the_tightest_bound_and_follows_a_forward_step() {
        let c = ServerClock::new();
        let t0 = c.base + Duration::from_secs(1);
        let us = Duration::from_micros;
        assert_eq!(c.upper(t0), None);
        // θ = 5 s exactly; a slow request (300 µs to the server), then a fast one (50 µs).
        let theta = 5_000_000i128 * 1_000;
        let server = |t: Instant, d: Duration| ((c.local(t + d) + theta) / 1_000) as u64;
        c.observe(t0, t0 + us(600), server(t0, us(300)));
        assert_eq!(c.upper(t0).unwrap() - c.local(t0) - theta, 301_000);
        let t1 = t0 + us(1_000);
        c.observe(t1, t1 + us(100), server(t1, us(50)));
        let at = t1 + us(100);
        // 50 µs of latency, 1 µs of truncation, 0.1 µs of aging.
        assert_eq!(c.upper(at).unwrap() - c.local(at) - theta, 51_100);
        // A slower sample does not loosen it.
        let t2 = t1 + us(1_000);
        c.observe(t2, t2 + us(400), server(t2, us(200)));
        assert!(c.upper(t2).unwrap() - c.local(t2) - theta < 53_000);
        // The server steps 10 ms forward: the next reply's lower bound contradicts the
        // stored bound, which is replaced.
        let t3 = t2 + us(1_000);
        let stepped = ((c.local(t3 + us(100)) + theta + 10_000_000) / 1_000) as u64;
        c.observe(t3, t3 + us(200), stepped);
        assert!(c.upper(t3).unwrap() - c.local(t3) - theta >= 10_000_000);
    }
}
