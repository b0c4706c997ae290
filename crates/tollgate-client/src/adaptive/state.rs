//! One key's adaptive state and the pure rules that move it: no lock, no clock read, so the
//! unit tests below drive them with plain numbers.

use std::time::Duration;

use super::config::{AdaptiveConfig, MAX_RATE};
use tollgate::Quota;
use tollgate::Timestamp;

/// The last signal a key received, as [`RateSnapshot::last_signal`] reports it.
///
/// # Examples
///
/// ```
/// use tollgate_client::{AdaptiveConfig, AdaptiveRate, Signal};
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
        /// The wait asked for, capped at the configuration's `max_retry_after` if it has one.
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
/// use tollgate_client::{AdaptiveConfig, AdaptiveRate};
///
/// let rates = AdaptiveRate::new(AdaptiveConfig::new(10.0));
/// rates.throttled("example.com", None);
/// let snap = rates.snapshot("example.com").unwrap();
/// assert_eq!(snap.rate, 8.0); // 10 × the default decrease 0.8
/// assert_eq!(snap.throttled_at, Some(10.0));
/// assert_eq!((snap.successes, snap.throttles), (0, 1));
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct RateSnapshot {
    /// The rate the key is paced at now, in requests per second.
    pub rate: f64,
    /// The server's announced policy, while it is trusted (for its window, or the
    /// configuration's [`announcement_ttl`](crate::AdaptiveConfig::announcement_ttl), from
    /// the last response that carried it): the key is paced to it, or under it after a
    /// throttle.
    pub announced: Option<Quota>,
    /// The lowest rate that drew a throttle (raised by reprobes): the bracket's top.
    pub throttled_at: Option<f64>,
    /// The highest rate that held a whole confirm period without a throttle since: the
    /// bracket's bottom, where the key settles.
    pub safe: Option<f64>,
    /// Successes seen.
    pub successes: u64,
    /// Throttles seen (including those inside a cooldown, which did not lower the rate).
    pub throttles: u64,
    /// The pace the server's remaining count asks for until its reset (`r / t` of
    /// `RateLimit: r=..;t=..`, or `X-RateLimit-Remaining` over `X-RateLimit-Reset`), while it
    /// is in force and below the rate: the key is paced at this instead, so that what is
    /// left is spread over the window rather than spent at once.
    pub spread: Option<f64>,
    /// The server's policy in content bytes (`RateLimit-Policy` with `qu="content-bytes"`),
    /// while trusted: each request of the key is charged its bytes under it.
    pub byte_policy: Option<Quota>,
    /// The last signal.
    pub last_signal: Signal,
    /// When the rate was last lowered by a throttle: a key whose rate has not been lowered
    /// for a while has converged.
    pub last_decrease: Option<Timestamp>,
}

/// One key's state.
///
/// Probing brackets the server's rate: `throttled_at` (U) is the lowest rate that drew a
/// throttle, `safe` (L) the highest that held for `confirm` successes without one.
/// Before the first throttle the rate grows by `increase` per success (in proportion to
/// itself over time). After it, each confirmed rate becomes L and the next rate tried is
/// the middle of the bracket, until the bracket is narrower than `band × U`: then the key
/// holds half a band under L. A throttle makes its rate the new U and falls back to L (or, with no L, to
/// `rate × decrease`). A throttle at or below L is a strike: a second one before `confirm`
/// successes shows L was wrong, and forgets it (one alone is more likely requests bunched
/// on the way, which a server's small burst refuses).
#[derive(Debug, Clone)]
pub(crate) struct KeyRate {
    pub(crate) snap: RateSnapshot,
    /// When the current rate began to be tried (after any `Retry-After` stall).
    since: Timestamp,
    /// When U was last set or raised (for the reprobe timer).
    marked: Timestamp,
    /// Successes at the current rate (those that came after `since`).
    confirmed: u32,
    /// A throttle at or under L was seen and not yet outweighed by `confirm` successes.
    strike: bool,
    /// When the last throttle that counted (a decrease or a strike) came, for the cooldown.
    counted: Option<Timestamp>,
    /// Until when the announcement is trusted (meaningful while `snap.announced` is set).
    announced_until: Timestamp,
    /// The last policy announced, trusted or not: a renewal of it keeps what throttles under
    /// it taught, a new one starts over at its rate.
    last_policy: Option<Quota>,
    /// The spread pace and when the server's reset ends it.
    spread: Option<(f64, Timestamp)>,
    /// The content-bytes policy and until when it is trusted.
    bytes: Option<(Quota, Timestamp)>,
    /// This key's own ceiling, under the configuration's (a robots.txt `Crawl-delay`).
    max: Option<f64>,
    /// Until when the server's latest hold (`Retry-After`, a spent quota) keeps the key
    /// closed: for a wait whose turn was reserved before the hold came.
    pub(crate) held_until: Option<Timestamp>,
}

impl KeyRate {
    pub(crate) fn new(config: &AdaptiveConfig) -> KeyRate {
        KeyRate {
            snap: RateSnapshot {
                rate: config.initial,
                announced: None,
                throttled_at: None,
                safe: None,
                successes: 0,
                throttles: 0,
                spread: None,
                byte_policy: None,
                last_signal: Signal::Success,
                last_decrease: None,
            },
            since: Timestamp::ZERO,
            marked: Timestamp::ZERO,
            confirmed: 0,
            strike: false,
            counted: None,
            announced_until: Timestamp::ZERO,
            last_policy: None,
            spread: None,
            bytes: None,
            max: None,
            held_until: None,
        }
    }

    /// Drops what has run out by `now`: an announcement past its trust (the key goes back
    /// to learning, from the rate it was paced at), a spread past the server's reset, a
    /// byte policy past its trust.
    pub(crate) fn expire(&mut self, now: Timestamp) {
        if self.snap.announced.is_some() && now >= self.announced_until {
            self.snap.announced = None;
        }
        if self.spread.is_some_and(|(_, until)| now >= until) {
            self.spread = None;
        }
        if self.bytes.is_some_and(|(_, until)| now >= until) {
            self.bytes = None;
        }
        self.snap.spread = self.spread.map(|(r, _)| r).filter(|&r| r < self.snap.rate);
        self.snap.byte_policy = self.bytes.map(|(q, _)| q);
    }

    /// The highest rate the key may be paced at: the configuration's ceiling, and under an
    /// announcement its rate.
    fn ceiling(&self, config: &AdaptiveConfig) -> f64 {
        let own = self.own_ceiling(config);
        match self.snap.announced {
            Some(q) => own.min(rate_of(q)),
            None => own,
        }
    }

    /// The ceiling before any announcement: the configuration's, or the key's own below it.
    fn own_ceiling(&self, config: &AdaptiveConfig) -> f64 {
        self.max.map_or(config.ceiling, |m| m.min(config.ceiling))
    }

    /// Sets the key's own ceiling (`None` lifts it); its rate comes down to it at once.
    pub(crate) fn set_ceiling(
        &mut self,
        config: &AdaptiveConfig,
        max: Option<f64>,
        now: Timestamp,
    ) {
        self.expire(now);
        self.max = max;
        if let Some(q) = self.snap.announced {
            // Re-clamp the announcement under the new ceiling.
            let rate = rate_of(q).min(self.own_ceiling(config));
            if rate < rate_of(q) {
                self.snap.announced = Some(quota_for(rate));
            }
        }
        if self.snap.rate > self.ceiling(config) {
            let rate = self.snap.rate;
            self.set_rate(rate, config, now);
        }
        self.expire(now);
    }

    /// The rate the key is paced at now: its rate, or the spread if that is lower.
    pub(crate) fn pace(&self) -> f64 {
        self.snap
            .spread
            .map_or(self.snap.rate, |s| s.min(self.snap.rate))
    }

    /// The quota the key is paced at: its rate with a burst of 1 (requests evenly spaced, so
    /// the server's own burst is never leaned on).
    /// Call [`expire`](KeyRate::expire) first.
    pub(crate) fn quota(&self) -> Quota {
        if let Some((spread, _)) = self.spread.filter(|&(s, _)| s < self.snap.rate) {
            return quota_for(spread);
        }
        match self.snap.announced {
            // Paced to the policy itself while no throttle under it lowered the rate: its
            // interval is exact, where a rate rounded through f64 might not be.
            Some(q) if self.snap.rate >= rate_of(q) => q.allow_burst(1),
            _ => quota_for(self.snap.rate),
        }
    }

    /// Sets the key's rate within its ceiling and the floor (or a safe rate known below the
    /// floor); a decrease never raises it: a key already below the floor (an announced
    /// policy slower than it) stays where it is.
    fn set_rate(&mut self, rate: f64, config: &AdaptiveConfig, from: Timestamp) {
        let ceiling = self.ceiling(config);
        let lowest = config
            .floor
            .min(ceiling)
            .min(self.snap.safe.unwrap_or(f64::INFINITY));
        let mut set = rate.clamp(lowest, ceiling);
        if rate < self.snap.rate {
            set = set.min(self.snap.rate);
        }
        self.snap.rate = set;
        self.since = from;
        self.confirmed = 0;
    }

    /// A success at `now`.
    pub(crate) fn success(&mut self, config: &AdaptiveConfig, now: Timestamp) {
        self.expire(now);
        self.snap.successes += 1;
        self.snap.last_signal = Signal::Success;
        if self.snap.announced.is_some() && self.snap.throttled_at.is_none() {
            return; // paced to the announcement, nothing to probe under it
        }
        let Some(mut upper) = self.snap.throttled_at else {
            let rate = self.snap.rate + config.increase;
            self.set_rate(rate, config, now);
            return;
        };
        if now.saturating_duration_since(self.marked) >= config.reprobe {
            // Long enough without a throttle: the server may allow more now.
            upper = (upper * (1.0 + 2.0 * config.band)).min(self.ceiling(config));
            self.snap.throttled_at = Some(upper);
            self.marked = now;
        }
        if now < self.since {
            return; // an answer to a request sent before the rate changed
        }
        self.confirmed += 1;
        if self.confirmed < config.confirm {
            return;
        }
        // The rate held for `confirm` successes: it is safe.
        self.strike = false;
        let safe = self
            .snap
            .safe
            .map_or(self.snap.rate, |l| l.max(self.snap.rate));
        self.snap.safe = Some(safe);
        let next = if upper - safe > config.band * upper {
            (safe + upper) / 2.0
        } else {
            // Settle half a band under the safe rate: a rate a little over the server's
            // can pass `confirm` successes before the server's burst runs out.
            safe * (1.0 - config.band / 2.0)
        };
        self.set_rate(next, config, now);
    }

    /// A throttle at `now`, with the server's wait already capped. Returns whether the rate
    /// was lowered.
    pub(crate) fn throttled(
        &mut self,
        config: &AdaptiveConfig,
        now: Timestamp,
        retry_after: Option<Duration>,
    ) -> bool {
        self.expire(now);
        self.snap.throttles += 1;
        self.snap.last_signal = Signal::Throttled { retry_after };
        // Under an announcement too: a 429 while paced to the policy says the quota is
        // shared (other clients spend it) or smaller than announced, so the rate goes
        // below the policy and is bisected under it.
        if let Some(last) = self.counted {
            if now.saturating_duration_since(last) < config.cooldown {
                return false;
            }
        }
        self.counted = Some(now);
        let rate = self.snap.rate;
        if self.snap.safe.is_some_and(|safe| rate <= safe) && !self.strike {
            // One throttle at a rate known to be safe is more likely a bunching of requests
            // on the way than a slower server: a strike, not yet a decrease. A second one
            // before `confirm` successes forgets L.
            self.strike = true;
            self.since = now + retry_after.unwrap_or(Duration::ZERO);
            self.confirmed = 0;
            return false;
        }
        self.strike = false;
        self.snap.throttled_at = Some(rate);
        self.marked = now;
        let next = match self.snap.safe {
            Some(safe) if safe < rate => safe,
            _ => {
                self.snap.safe = None;
                rate * config.decrease
            }
        };
        self.set_rate(next, config, now + retry_after.unwrap_or(Duration::ZERO));
        self.snap.last_decrease = Some(now);
        true
    }

    /// A throttle the client caused by sending requests bunched: counted, nothing learned.
    pub(crate) fn overrun(&mut self, retry_after: Option<Duration>) {
        self.snap.throttles += 1;
        self.snap.last_signal = Signal::Throttled { retry_after };
    }

    /// The server announced `policy` at `now`: pace to it, under the ceiling (and under the
    /// floor if it says so: the floor bounds what throttles do, not what a server asks), and
    /// trust it until `now + ttl` (its window if `ttl` is `None`). A renewal of the same
    /// policy keeps a rate that throttles under it lowered; a new policy starts over at
    /// its rate.
    pub(crate) fn announce(
        &mut self,
        config: &AdaptiveConfig,
        policy: Quota,
        now: Timestamp,
        ttl: Option<Duration>,
    ) {
        self.expire(now);
        let ceiling = self.own_ceiling(config);
        // No lower bound: a policy is a quota, so its rate is one a quota can pace at.
        let rate = rate_of(policy).min(ceiling);
        let paced = if rate == rate_of(policy) {
            policy
        } else {
            quota_for(rate)
        };
        let renewal = self.last_policy == Some(policy) && self.snap.throttled_at.is_some();
        self.snap.announced = Some(paced);
        self.last_policy = Some(policy);
        self.announced_until = now + ttl.unwrap_or(policy.window());
        if renewal {
            self.snap.rate = self.snap.rate.min(rate);
        } else {
            self.snap.rate = rate;
            self.snap.throttled_at = None;
            self.snap.safe = None;
            self.strike = false;
            self.confirmed = 0;
            self.since = now;
        }
        self.snap.last_signal = Signal::Announced(policy);
        self.expire(now);
    }

    /// The server said `remaining` requests are left until its reset `reset` from `now`:
    /// pace at `remaining / reset` until then if that is slower. A reset of a second or less
    /// is ignored: whole-second fields round a sub-second refill up to 1 s, and `r / 1`
    /// would then read a server that refills continuously as far slower than it is. A
    /// remaining count of 0 is a hold, not a pace (the layer holds the key instead).
    pub(crate) fn spread(&mut self, remaining: u64, reset: Duration, now: Timestamp) {
        self.spread = (remaining > 0 && reset > Duration::from_secs(1)).then(|| {
            let pace = (remaining as f64 / reset.as_secs_f64()).clamp(SLOWEST, MAX_RATE);
            (pace, now + reset)
        });
        self.expire(now);
    }

    /// The server's content-bytes policy at `now`, trusted until `now + ttl` (its window if
    /// `ttl` is `None`).
    pub(crate) fn byte_policy(&mut self, policy: Quota, now: Timestamp, ttl: Option<Duration>) {
        self.bytes = Some((policy, now + ttl.unwrap_or(policy.window())));
        self.expire(now);
    }
}

/// Requests per second of a quota's sustained rate.
pub(crate) fn rate_of(quota: Quota) -> f64 {
    1.0 / quota.interval().as_secs_f64()
}

/// The longest interval a [`Quota`] can have, in nanoseconds: 2^59 (about 18 years; see
/// `Quota::try_new`).
const LONGEST_NANOS: u64 = 1 << 59;

/// The slowest rate a [`Quota`] can pace at, in requests per second: one every
/// [`LONGEST_NANOS`]. The server's own word (an announced policy, a spread, a site's
/// ceiling) is paced down to it; what throttles teach stays above the floor.
pub(crate) const SLOWEST: f64 = 1e9 / LONGEST_NANOS as f64;

/// A burst-1 quota at `rate` per second, its interval rounded up (never faster than
/// `rate`), between a nanosecond and [`LONGEST_NANOS`].
pub(crate) fn quota_for(rate: f64) -> Quota {
    let nanos = (1e9 / rate).ceil().clamp(1.0, LONGEST_NANOS as f64);
    Quota::with_period(Duration::from_nanos(nanos as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: f64) -> Timestamp {
        Timestamp::from_nanos((secs * 1e9) as u64)
    }

    fn successes(k: &mut KeyRate, config: &AdaptiveConfig, n: u32, now: f64) {
        for _ in 0..n {
            k.success(config, at(now));
        }
    }

    #[test]
    fn brackets_the_server_rate() {
        let config = AdaptiveConfig::new(10.0).increase(1.0).confirm(10);
        let mut k = KeyRate::new(&config);
        successes(&mut k, &config, 10, 0.0);
        assert_eq!(k.snap.rate, 20.0);
        assert!(k.throttled(&config, at(1.0), None)); // U = 20, no L: × 0.8
        assert_eq!(k.snap.rate, 16.0);
        successes(&mut k, &config, 9, 2.0); // not yet confirmed
        assert_eq!(k.snap.rate, 16.0);
        successes(&mut k, &config, 1, 2.0); // L = 16, try 18
        assert_eq!((k.snap.safe, k.snap.rate), (Some(16.0), 18.0));
        successes(&mut k, &config, 10, 3.0); // L = 18, try 19
        assert_eq!(k.snap.rate, 19.0);
        successes(&mut k, &config, 10, 4.0); // L = 19, 20 - 19 > 0.6: try 19.5
        assert_eq!(k.snap.rate, 19.5);
        successes(&mut k, &config, 10, 5.0); // L = 19.5: within the band, settle
        assert!((k.snap.rate - 19.5 * 0.985).abs() < 1e-9);
        successes(&mut k, &config, 50, 6.0);
        assert!((k.snap.rate - 19.5 * 0.985).abs() < 1e-9);
    }

    #[test]
    fn a_throttle_falls_back_to_the_safe_rate_or_forgets_it() {
        let config = AdaptiveConfig::new(10.0).confirm(5);
        let mut k = KeyRate::new(&config);
        assert!(k.throttled(&config, at(0.0), None));
        successes(&mut k, &config, 5, 2.0); // L = 8, try 9
        assert!(k.throttled(&config, at(3.0), Some(Duration::from_secs(1))));
        assert_eq!((k.snap.rate, k.snap.throttled_at), (8.0, Some(9.0)));
        successes(&mut k, &config, 10, 3.5); // answers from before the stall: not counted
        assert_eq!(k.snap.rate, 8.0);
        assert!(!k.throttled(&config, at(5.0), None)); // at L: a strike
        assert_eq!((k.snap.safe, k.snap.rate), (Some(8.0), 8.0));
        successes(&mut k, &config, 5, 6.0); // outweighed: L = 8 again, try 8.5
        assert_eq!(k.snap.rate, 8.5);
        assert!(k.throttled(&config, at(7.0), None)); // over L: back to it
        assert!(!k.throttled(&config, at(8.0), None)); // at L: a strike
        assert!(!k.throttled(&config, at(8.5), None)); // inside the cooldown: not counted
        assert!(k.throttled(&config, at(9.0), None)); // the second strike: L was wrong
        assert_eq!((k.snap.safe, k.snap.rate), (None, 6.4));
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
        // Down to the slowest quota, never beyond it (a rate of 0 would be forever).
        let longest = Duration::from_nanos(LONGEST_NANOS);
        assert_eq!(quota_for(SLOWEST).interval(), longest);
        assert_eq!(quota_for(SLOWEST / 2.0).interval(), longest);
        assert_eq!(quota_for(0.0).interval(), longest);
        let week = Duration::from_secs(7 * 86_400);
        assert_eq!(quota_for(1.0 / week.as_secs_f64()).interval(), week);
    }
}
