//! The circuit breaker in front of Redis: after `failures` calls in a row fail, calls are
//! not sent for a cool-down and the fault policy answers at once; then one call probes, and
//! its success closes the breaker (its failure opens it for another cool-down).
//!
//! Without it, a Redis that stops answering (a paused or overloaded server, a black-holed
//! network) makes every check wait out the call's timeout before its fault policy decides,
//! and a request path that waits 100 ms per check on a dead dependency is an outage of its
//! own.
//!
//! # States
//!
//! ```text
//! closed  (open_until == 0):      calls go; `failures` counts failures in a row
//! open    (now < open_until):     calls do not go (short-circuited)
//! half    (now >= open_until > 0): the one caller that sets `probing` goes; others do not
//! ```
//!
//! Who writes what: any caller bumps or clears `failures`; a failure that reaches the
//! threshold, or a failed probe, stores `open_until`; a success stores 0 there. The words
//! are independent atomics, read and written Relaxed: they publish no other memory, and a
//! race between two outcomes only decides whether one more call goes or one fewer (two
//! closing successes, or a failure racing a success, leave the breaker closed or open, both
//! of which the next calls correct). A probe that never finishes (its future dropped) would
//! leave `probing` set: the probe's guard clears it on drop.

use std::sync::atomic::AtomicBool;
use std::sync::atomic::AtomicU32;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

/// Whether a call may go to Redis.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Pass {
    /// Closed: go.
    Go,
    /// Half-open: go, as the one probe (the guard ends the probe when dropped).
    Probe,
    /// Open: do not go; the fault policy answers.
    ShortCircuit,
}

#[derive(Debug)]
pub(crate) struct Breaker {
    /// Failures in a row that open it (at least 1).
    failures: u32,
    cool_down: Duration,
    in_a_row: AtomicU32,
    /// When the cool-down ends, in ns on the limiter's clock; 0 while closed.
    open_until: AtomicU64,
    probing: AtomicBool,
}

/// What happened to the call the breaker let go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Redis answered (any reply, a refusal included).
    Answered,
    /// The call failed or timed out.
    Failed,
}

/// What a recorded outcome changed, for the counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Change {
    None,
    Opened,
    Closed,
}

impl Breaker {
    /// A closed breaker with this one's settings.
    pub(crate) fn fresh(&self) -> Breaker {
        Breaker::new(self.failures, self.cool_down)
    }

    pub(crate) fn new(failures: u32, cool_down: Duration) -> Breaker {
        Breaker {
            failures: failures.max(1),
            cool_down,
            in_a_row: AtomicU32::new(0),
            open_until: AtomicU64::new(0),
            probing: AtomicBool::new(false),
        }
    }

    /// Failures in a row that open it.
    pub(crate) fn failures(&self) -> u32 {
        self.failures
    }

    /// Whether a call at `now` (ns) may go.
    pub(crate) fn pass(&self, now: u64) -> Pass {
        // ordering: Relaxed throughout (module docs).
        let until = self.open_until.load(Relaxed);
        if until == 0 {
            return Pass::Go;
        }
        if now < until {
            return Pass::ShortCircuit;
        }
        match self.probing.compare_exchange(false, true, Relaxed, Relaxed) {
            Ok(_) => Pass::Probe,
            Err(_) => Pass::ShortCircuit,
        }
    }

    /// Records the outcome of a call that `pass` let go at `now` (ns).
    pub(crate) fn record(&self, pass: &Pass, outcome: Outcome, now: u64) -> Change {
        let probe = *pass == Pass::Probe;
        let change = match outcome {
            Outcome::Answered => {
                self.in_a_row.store(0, Relaxed);
                if self.open_until.swap(0, Relaxed) != 0 {
                    Change::Closed
                } else {
                    Change::None
                }
            }
            Outcome::Failed => {
                let in_a_row = self.in_a_row.fetch_add(1, Relaxed).saturating_add(1);
                if probe || (in_a_row >= self.failures && self.open_until.load(Relaxed) == 0) {
                    let until = now.saturating_add(self.cool_down.as_nanos() as u64).max(1);
                    self.open_until.store(until, Relaxed);
                    Change::Opened
                } else {
                    Change::None
                }
            }
        };
        if probe {
            self.probing.store(false, Relaxed);
        }
        change
    }

    /// A probe that ended without an outcome (its call was dropped): the next caller after
    /// the cool-down probes instead.
    pub(crate) fn abandon(&self, pass: &Pass) {
        if *pass == Pass::Probe {
            self.probing.store(false, Relaxed);
        }
    }

    /// How long until the cool-down ends (zero if closed or over).
    pub(crate) fn remaining(&self, now: u64) -> Duration {
        Duration::from_nanos(self.open_until.load(Relaxed).saturating_sub(now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn opens_after_failures_in_a_row_then_probes_once_and_closes() {
        let b = Breaker::new(3, Duration::from_millis(100));
        // Two failures, a success: the count starts over.
        for _ in 0..2 {
            assert_eq!(b.record(&b.pass(0), Outcome::Failed, 0), Change::None);
        }
        assert_eq!(b.record(&b.pass(0), Outcome::Answered, 0), Change::None);
        for _ in 0..2 {
            assert_eq!(b.record(&b.pass(MS), Outcome::Failed, MS), Change::None);
        }
        assert_eq!(b.record(&b.pass(MS), Outcome::Failed, MS), Change::Opened);
        // Open for the cool-down.
        assert_eq!(b.pass(50 * MS), Pass::ShortCircuit);
        assert_eq!(b.remaining(50 * MS), Duration::from_millis(51));
        // After it, one probe at a time.
        let probe = b.pass(101 * MS);
        assert_eq!(probe, Pass::Probe);
        assert_eq!(b.pass(101 * MS), Pass::ShortCircuit);
        // A failed probe opens it again, for a whole cool-down.
        assert_eq!(b.record(&probe, Outcome::Failed, 110 * MS), Change::Opened);
        assert_eq!(b.pass(200 * MS), Pass::ShortCircuit);
        let probe = b.pass(210 * MS);
        assert_eq!(probe, Pass::Probe);
        // A successful probe closes it: calls go again.
        assert_eq!(
            b.record(&probe, Outcome::Answered, 211 * MS),
            Change::Closed
        );
        assert_eq!(b.pass(211 * MS), Pass::Go);
        assert_eq!(b.remaining(211 * MS), Duration::ZERO);
    }

    #[test]
    fn an_abandoned_probe_lets_the_next_caller_probe() {
        let b = Breaker::new(1, Duration::from_millis(10));
        assert_eq!(b.record(&b.pass(0), Outcome::Failed, 0), Change::Opened);
        let probe = b.pass(20 * MS);
        assert_eq!(probe, Pass::Probe);
        b.abandon(&probe);
        assert_eq!(b.pass(20 * MS), Pass::Probe);
    }

    #[test]
    fn calls_in_flight_when_it_opens_do_not_open_it_again() {
        let b = Breaker::new(2, Duration::from_millis(10));
        let passes: Vec<Pass> = (0..4).map(|_| b.pass(0)).collect();
        let changes: Vec<Change> = passes
            .iter()
            .map(|p| b.record(p, Outcome::Failed, 0))
            .collect();
        assert_eq!(
            changes,
            [Change::None, Change::Opened, Change::None, Change::None]
        );
    }
}
