//! The debug event for refusals, sampled: at most one per policy per second, each saying how
//! many refusals were left out since the last one, so that a flood of refused requests
//! cannot become a flood of log lines.
//!
//! States: `next`, the limiter-clock time (ms) before which this policy logs nothing, and
//! `suppressed`, the refusals left out since the last event. A refusal at or after `next`
//! claims the event by moving `next` a second on (a CAS: of two racing refusals one logs,
//! the other is counted as suppressed) and takes `suppressed` with a swap. A refusal that
//! counts itself after the swap is reported by the next event instead: none is lost, and
//! none is reported twice.
//!
//! Nothing here runs unless a subscriber wants the event (`tracing::enabled!` first), so a
//! server that does not log refusals reads no clock for them.

use std::sync::atomic::{AtomicU64, Ordering};

use tracing::Level;

use crate::refusal::Refusal;

/// Events per policy: one per this many milliseconds at most.
pub(crate) const EVERY_MS: u64 = 1_000;

/// One policy's sampler.
#[derive(Debug, Default)]
pub(crate) struct RefusalLog {
    next: AtomicU64,
    suppressed: AtomicU64,
}

impl RefusalLog {
    /// A refusal at `now_ms`: `Some(refusals left out since the last event)` if this one
    /// is to be logged.
    pub(crate) fn sample(&self, now_ms: u64) -> Option<u64> {
        // ordering: a sampler for a log line; it publishes no other memory.
        let next = self.next.load(Ordering::Relaxed);
        if now_ms >= next
            && self
                .next
                .compare_exchange(
                    next,
                    now_ms.saturating_add(EVERY_MS),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok()
        {
            // ordering: as above.
            return Some(self.suppressed.swap(0, Ordering::Relaxed));
        }
        // ordering: as above.
        self.suppressed.fetch_add(1, Ordering::Relaxed);
        None
    }
}

/// Whether anyone listens for the refusal events (checked before any clock is read).
#[inline]
pub(crate) fn wanted() -> bool {
    tracing::enabled!(target: "tollgate_tower", Level::DEBUG)
}

/// Logs `refusal` by `policy`, if its sampler lets it through at `now_ms`.
pub(crate) fn log(log: &RefusalLog, now_ms: u64, policy: &str, refusal: &Refusal, dry_run: bool) {
    let Some(suppressed) = log.sample(now_ms) else {
        return;
    };
    let retry_after_s = refusal.retry_after().map_or(0, |d| d.as_secs());
    tracing::debug!(
        target: "tollgate_tower",
        policy,
        status = refusal.status().as_u16(),
        reason = ?refusal.reason(),
        retry_after_s,
        dry_run,
        suppressed,
        "request refused by the rate limit"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On a manual time line: the first refusal logs, the rest of its second are counted,
    /// and the next event reports them.
    #[test]
    fn one_event_per_second_with_the_count_left_out() {
        let log = RefusalLog::default();
        assert_eq!(log.sample(5_000), Some(0));
        for ms in 5_000..5_999 {
            assert_eq!(log.sample(ms), None);
        }
        assert_eq!(log.sample(6_000), Some(999));
        assert_eq!(log.sample(6_500), None);
        // A quiet spell: the next refusal logs at once, reporting the one left out.
        assert_eq!(log.sample(60_000), Some(1));
        assert_eq!(log.sample(60_001), None);
    }

    /// Racing threads: exactly one event per window, and every refusal is either logged or
    /// counted in the next event.
    #[test]
    fn racing_refusals_are_logged_or_counted_once() {
        let log = RefusalLog::default();
        let logged = AtomicU64::new(0);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..1_000 {
                        if log.sample(10).is_some() {
                            logged.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        assert_eq!(logged.load(Ordering::Relaxed), 1);
        assert_eq!(log.sample(10 + EVERY_MS), Some(3_999));
    }
}
