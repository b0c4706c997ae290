//! One key's adaptive state and the pure rules that move it: no lock, no clock read, so the
//! unit tests below drive them with plain numbers.

use std::time::Duration;

use super::config::AdaptiveConfig;
use crate::quota::Quota;
use crate::time::Timestamp;

/// The last signal a key received, as [`RateSnapshot::last_signal`] reports it.
///
/// # Examples
///
/// ```
/// use tollgate::{AdaptiveConfig, AdaptiveRate, Signal};
///
/// let rates = AdaptiveRate::new(AdaptiveConfig::new(10.0));
/// rates.success("example.com");
/// assert_eq!(rates.snapshot("example.com").unwrap().last_signal, Signal::Success);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// A request went through.
    Success,
    /// The server refused for rate (429, or 503 with `Retry-After`), asking to wait this long
    /// if it said so (after the cap).
    Throttled {
        /// The wait asked for, capped at the configuration's `max_retry_after`.
        retry_after: Option<Duration>,
    },
    /// The server announced its policy.
    Announced(Quota),
}

/// A copy of one key's adaptive state, from [`AdaptiveRate::snapshot`](crate::AdaptiveRate::snapshot).
///
/// # Examples
///
/// ```
/// use tollgate::{AdaptiveConfig, AdaptiveRate};
///
/// let rates = AdaptiveRate::new(AdaptiveConfig::new(10.0));
/// rates.throttled("example.com", None);
/// let snap = rates.snapshot("example.com").unwrap();
/// assert_eq!(snap.rate, 8.0); // 10 × the default decrease 0.8
/// assert_eq!(snap.throttled_at, Some(10.0));
/// assert_eq!((snap.successes, snap.throttles), (0, 1));
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateSnapshot {
    /// The rate the key is paced at now, in requests per second.
    pub rate: f64,
    /// The server's announced policy, if it sent one: the key is paced to it exactly.
    pub announced: Option<Quota>,
    /// The rate of the last throttle that lowered the rate (moved up by reprobes): the key
    /// holds a band below it.
    pub throttled_at: Option<f64>,
    /// Successes seen.
    pub successes: u64,
    /// Throttles seen (including those inside a cooldown, which did not lower the rate).
    pub throttles: u64,
    /// The last signal.
    pub last_signal: Signal,
    /// When the rate was last lowered by a throttle: a key whose rate has not been lowered
    /// for a while has converged.
    pub last_decrease: Option<Timestamp>,
}

/// One key's state.
#[derive(Debug, Clone)]
pub(crate) struct KeyRate {
    pub(crate) snap: RateSnapshot,
    /// When the key last held at its mark or reprobed (for the reprobe timer).
    held_since: Option<Timestamp>,
}

impl KeyRate {
    pub(crate) fn new(config: &AdaptiveConfig) -> KeyRate {
        KeyRate {
            snap: RateSnapshot {
                rate: config.initial,
                announced: None,
                throttled_at: None,
                successes: 0,
                throttles: 0,
                last_signal: Signal::Success,
                last_decrease: None,
            },
            held_since: None,
        }
    }

    /// The quota the key is paced at: its rate with a burst of 1 (requests evenly spaced, so
    /// the server's own burst is never leaned on).
    pub(crate) fn quota(&self) -> Quota {
        if let Some(q) = self.snap.announced {
            return q.allow_burst(1);
        }
        quota_for(self.snap.rate)
    }

    /// A success at `now`: climb, or hold below the mark, or reprobe.
    pub(crate) fn success(&mut self, config: &AdaptiveConfig, now: Timestamp) {
        self.snap.successes += 1;
        self.snap.last_signal = Signal::Success;
        if self.snap.announced.is_some() {
            return;
        }
        let target = match self.snap.throttled_at {
            None => config.ceiling,
            Some(mark) => {
                let since = *self.held_since.get_or_insert(now);
                if now.saturating_duration_since(since) >= config.reprobe {
                    // Long enough without a throttle: the server may allow more now.
                    let mark = (mark * (1.0 + 2.0 * config.band)).min(config.ceiling);
                    self.snap.throttled_at = Some(mark);
                    self.held_since = Some(now);
                }
                let mark = self.snap.throttled_at.unwrap_or(config.ceiling);
                (mark * (1.0 - config.band)).min(config.ceiling)
            }
        };
        if self.snap.rate < target {
            self.snap.rate = (self.snap.rate + config.increase).min(target);
        }
    }

    /// A throttle at `now`, with the server's wait already capped. Returns whether the rate
    /// was lowered.
    pub(crate) fn throttled(
        &mut self,
        config: &AdaptiveConfig,
        now: Timestamp,
        retry_after: Option<Duration>,
    ) -> bool {
        self.snap.throttles += 1;
        self.snap.last_signal = Signal::Throttled { retry_after };
        if self.snap.announced.is_some() {
            return false;
        }
        if let Some(last) = self.snap.last_decrease {
            if now.saturating_duration_since(last) < config.cooldown {
                return false;
            }
        }
        self.snap.throttled_at = Some(self.snap.rate);
        self.snap.rate = (self.snap.rate * config.decrease).max(config.floor);
        self.snap.last_decrease = Some(now);
        self.held_since = Some(now);
        true
    }

    /// The server announced `policy`: pace to it, within floor and ceiling.
    pub(crate) fn announce(&mut self, config: &AdaptiveConfig, policy: Quota) {
        let rate = rate_of(policy).clamp(config.floor, config.ceiling);
        let paced = if rate == rate_of(policy) {
            policy
        } else {
            quota_for(rate)
        };
        self.snap.rate = rate;
        self.snap.announced = Some(paced);
        self.snap.last_signal = Signal::Announced(policy);
    }
}

/// Requests per second of a quota's sustained rate.
pub(crate) fn rate_of(quota: Quota) -> f64 {
    1.0 / quota.interval().as_secs_f64()
}

/// A burst-1 quota at `rate` per second (`rate` is within the configuration's bounds, so
/// the interval is between a nanosecond and a day).
pub(crate) fn quota_for(rate: f64) -> Quota {
    let nanos = (1e9 / rate).ceil().clamp(1.0, 86_400e9);
    Quota::with_period(Duration::from_nanos(nanos as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: f64) -> Timestamp {
        Timestamp::from_nanos((secs * 1e9) as u64)
    }

    #[test]
    fn climbs_then_holds_a_band_below_the_mark() {
        let config = AdaptiveConfig::new(10.0).increase(1.0);
        let mut k = KeyRate::new(&config);
        for _ in 0..10 {
            k.success(&config, at(0.0));
        }
        assert_eq!(k.snap.rate, 20.0);
        assert!(k.throttled(&config, at(1.0), None));
        assert_eq!(k.snap.rate, 16.0);
        for _ in 0..100 {
            k.success(&config, at(2.0));
        }
        assert!((k.snap.rate - 20.0 * 0.97).abs() < 1e-9);
    }

    #[test]
    fn cooldown_and_reprobe() {
        let config = AdaptiveConfig::new(10.0);
        let mut k = KeyRate::new(&config);
        assert!(k.throttled(&config, at(0.0), None));
        assert!(!k.throttled(&config, at(0.5), None)); // the old rate's stragglers
        assert_eq!(k.snap.rate, 8.0);
        assert_eq!(k.snap.throttles, 2);
        k.success(&config, at(31.0));
        assert!((k.snap.throttled_at.unwrap() - 10.0 * 1.06).abs() < 1e-9);
    }

    #[test]
    fn quota_round_trip() {
        assert_eq!(quota_for(10.0), Quota::per_second(10).allow_burst(1));
        assert_eq!(rate_of(Quota::per_second(4)), 4.0);
    }
}
