//! [`AdaptiveRate`]: a per-key rate learned from the server's answers, driving a keyed
//! [`Limiter`] through per-call quotas.
//!
//! The pieces: `config.rs` (the bounds and gains), `state.rs` (one key's state and the pure
//! rules each signal applies), `table.rs` (the bounded store, least recently used evicted).
//! It is built on the core's public API alone: waiting is the limiter's
//! ([`AdaptiveRate::until_ready`] is [`Limiter::until_ready_with`] under the key's current
//! quota, so waiters queue FIFO per key on tollgate's timer), a `Retry-After` is a
//! [`Limiter::penalize`] of the key, and [`AdaptiveRate::forget`] a [`Limiter::reset`].

mod config;
mod state;
mod table;

pub use config::{AdaptiveConfig, MAX_RATE, MIN_RATE};
pub use state::{RateSnapshot, Signal};

use std::any::Any;
use std::fmt;
use std::hash::{BuildHasher, Hash};
use std::sync::Arc;
use std::time::Duration;

use state::{KeyRate, SLOWEST, quota_for};
use table::Table;
use tollgate::hash::RandomState;
use tollgate::{
    Admitted, Clock, Error, Limiter, ManualClock, MonotonicClock, Quota, Timestamp, TscClock,
    UntilReady,
};

/// A rate per key that adapts to what the server says: for clients (crawlers, API clients)
/// pacing each host at a rate they do not know in advance.
///
/// Each key has a current rate between a floor and a ceiling ([`AdaptiveConfig`]), moved by
/// these signals:
///
/// * [`success`](AdaptiveRate::success): an additive increase until the key is first
///   throttled; after that, once `confirm` successes in a row hold a rate, the next rate
///   tried is halfway to the slowest rate that was throttled (a bisection);
/// * [`throttled`](AdaptiveRate::throttled): back to the fastest rate confirmed, or a
///   multiplicative decrease if none is known, and the key's next admission moves out by
///   the server's `Retry-After`, in full unless the configuration caps it;
/// * [`announce`](AdaptiveRate::announce): the server said its policy; the key is paced to
///   it exactly instead of probing, for the policy's window (then it learns again), and a
///   throttle under it lowers the rate below it;
/// * [`spread`](AdaptiveRate::spread): the server said how much is left until its reset;
///   the key is paced at that over the time left, when slower.
///
/// Requests wait for their turn with [`until_ready`](AdaptiveRate::until_ready) (or ask with
/// [`check`](AdaptiveRate::check)): the keyed [`Limiter`] inside, under the key's current
/// quota with a burst of 1. Memory is bounded: at most the configured capacity of keys, the
/// least recently used evicted; [`snapshot`](AdaptiveRate::snapshot) copies a key's state.
///
/// Cloning is cheap and every clone shares the same state.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::{ManualClock, Quota};
/// use tollgate_client::{AdaptiveConfig, AdaptiveRate};
///
/// let clock = ManualClock::new();
/// let rates = AdaptiveRate::with_clock(AdaptiveConfig::new(10.0), clock.clone());
/// assert!(rates.check("a.example").is_ok());
/// assert!(rates.check("a.example").is_err()); // 10 per second, evenly spaced
///
/// rates.throttled("a.example", Some(Duration::from_secs(2))); // a 429 with Retry-After: 2
/// assert_eq!(rates.rate("a.example"), 8.0);
/// clock.advance(Duration::from_millis(1_999));
/// assert!(rates.check("a.example").is_err()); // held back by the Retry-After
/// clock.advance(Duration::from_millis(1));
/// assert!(rates.check("a.example").is_ok());
///
/// rates.announce("b.example", Quota::per_second(50)); // RateLimit-Policy: q=50;w=1
/// assert_eq!(rates.rate("b.example"), 50.0);
/// ```
pub struct AdaptiveRate<K: ?Sized> {
    shared: Arc<Shared<K>>,
}

struct Shared<K: ?Sized> {
    limiter: Limiter<K>,
    /// Each key's content bytes, under its byte policy's per-call quota (on the same clock).
    bytes: Limiter<K>,
    table: Table,
    config: AdaptiveConfig,
    identity: RandomState,
}

impl<K: ?Sized> Clone for AdaptiveRate<K> {
    fn clone(&self) -> Self {
        AdaptiveRate {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<K: ?Sized> fmt::Debug for AdaptiveRate<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AdaptiveRate")
            .field("config", &self.shared.config)
            .finish_non_exhaustive()
    }
}

impl<K: Hash + ?Sized> AdaptiveRate<K> {
    /// An adaptive rate on the monotonic clock.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate_client::{AdaptiveConfig, AdaptiveRate};
    ///
    /// let rates = AdaptiveRate::new(AdaptiveConfig::new(5.0));
    /// assert_eq!(rates.rate("example.com"), 5.0);
    /// ```
    pub fn new(config: AdaptiveConfig) -> AdaptiveRate<K> {
        AdaptiveRate::with_clock(config, MonotonicClock::new())
    }

    /// An adaptive rate on `clock` (a [`ManualClock`](tollgate::ManualClock) in tests: the
    /// waits then run on fake time too).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::ManualClock;
    /// use tollgate_client::{AdaptiveConfig, AdaptiveRate};
    ///
    /// let rates = AdaptiveRate::<str>::with_clock(AdaptiveConfig::new(5.0), ManualClock::new());
    /// assert_eq!(rates.now(), tollgate::Timestamp::ZERO);
    /// ```
    ///
    /// # Panics
    ///
    /// If a clock of your own (not one of tollgate's) already reads more than 2^58 ns (9.1
    /// years) after its origin, as one counting from the Unix epoch does: a limiter's time
    /// stops 2^59 ns after the origin ([`Clock`]).
    #[track_caller]
    pub fn with_clock(config: AdaptiveConfig, clock: impl Clock) -> AdaptiveRate<K> {
        // The bytes' limiter: every wait on it names the key's byte policy, so its default
        // quota is never used.
        let (limiter, bytes) = two_on(clock, || {
            Limiter::builder(quota_for(config.initial)).capacity(config.capacity.max(64))
        });
        AdaptiveRate {
            shared: Arc::new(Shared {
                limiter,
                bytes,
                table: Table::new(config.capacity),
                config,
                identity: RandomState::new(),
            }),
        }
    }

    fn hash(&self, key: &K) -> u64 {
        self.shared.identity.hash_one(key)
    }

    /// A copy of the key's state as of now (what has run out dropped), if it has one.
    fn current(&self, key: &K) -> Option<KeyRate> {
        let mut k = self.shared.table.get(self.hash(key))?;
        k.expire(self.shared.limiter.now());
        Some(k)
    }

    /// The key's current quota (its rate, burst 1), as the waits use it.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::Quota;
    /// use tollgate_client::{AdaptiveConfig, AdaptiveRate};
    ///
    /// let rates = AdaptiveRate::new(AdaptiveConfig::new(4.0));
    /// assert_eq!(rates.quota("example.com"), Quota::per_second(4).allow_burst(1));
    /// ```
    pub fn quota(&self, key: &K) -> Quota {
        match self.current(key) {
            Some(k) => k.quota(),
            None => quota_for(self.shared.config.initial),
        }
    }

    /// The key's current rate in requests per second: the rate it is paced at now (its
    /// learned or announced rate, or the slower spread of a remaining count, see
    /// [`spread`](AdaptiveRate::spread)).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate_client::{AdaptiveConfig, AdaptiveRate};
    ///
    /// let rates = AdaptiveRate::new(AdaptiveConfig::new(4.0).increase(1.0));
    /// rates.success("example.com");
    /// assert_eq!(rates.rate("example.com"), 5.0);
    /// ```
    pub fn rate(&self, key: &K) -> f64 {
        match self.current(key) {
            Some(k) => k.pace(),
            None => self.shared.config.initial,
        }
    }

    /// Waits for the key's next admission at its current rate: the limiter's FIFO queue for
    /// the key, on tollgate's timer (no runtime needed). A wait keeps the quota it started
    /// with; the rate's later changes apply to the waits that start after them. And the
    /// limiter's state keeps the gap it was sized at: the first admission after a slowdown
    /// follows the one before by the old interval.
    ///
    /// [`PoliteLayer`](crate::PoliteLayer) closes both gaps: after its turn, an attempt whose
    /// host is now paced slower than the quota it waited at ([`quota`](Self::quota), read
    /// before the wait) waits again at the slower one (with
    /// [`Limiter::until_ready_with`] on [`limiter`](Self::limiter)); and after an answer
    /// that slowed the host, the layer moves its next admission out to the new interval
    /// after its latest send ([`Limiter::penalize`]). Code of your own that waits here can
    /// do the same.
    ///
    /// # Cancel safety
    ///
    /// As [`Limiter::until_ready`]: a dropped wait costs nothing.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// use tollgate_client::{AdaptiveConfig, AdaptiveRate};
    ///
    /// let rates = AdaptiveRate::new(AdaptiveConfig::new(100.0));
    /// let start = Instant::now();
    /// futures_executor::block_on(async {
    ///     rates.until_ready("example.com").await.unwrap();
    ///     rates.until_ready("example.com").await.unwrap(); // 10 ms later
    /// });
    /// assert!(start.elapsed() >= Duration::from_millis(10));
    /// ```
    pub fn until_ready(&self, key: &K) -> UntilReady<'_> {
        self.shared.limiter.until_ready_with(key, self.quota(key))
    }

    /// Admits a request of `key` now if its rate allows, without waiting.
    ///
    /// # Errors
    ///
    /// As [`Limiter::check`]: [`Error::RateLimited`] with the wait until the next admission.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate_client::{AdaptiveConfig, AdaptiveRate};
    ///
    /// let rates = AdaptiveRate::new(AdaptiveConfig::new(1.0));
    /// assert!(rates.check("example.com").is_ok());
    /// assert!(rates.check("example.com").unwrap_err().is_rate_limited());
    /// ```
    pub fn check(&self, key: &K) -> Result<Admitted, Error> {
        self.shared.limiter.check_with(key, self.quota(key))
    }

    /// A request of `key` went through: its rate climbs (see [`AdaptiveConfig`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate_client::{AdaptiveConfig, AdaptiveRate};
    ///
    /// let rates = AdaptiveRate::new(AdaptiveConfig::new(1.0).ceiling(1.5).increase(1.0));
    /// rates.success("example.com");
    /// assert_eq!(rates.rate("example.com"), 1.5); // capped at the ceiling
    /// ```
    pub fn success(&self, key: &K) {
        let shared = &*self.shared;
        let now = shared.limiter.now();
        shared.table.with(self.hash(key), &shared.config, |k| {
            k.success(&shared.config, now)
        });
    }

    /// The server refused a request of `key` for rate: the rate drops (at most once per
    /// cooldown, never below the floor), and if `retry_after` is given the key's next
    /// admission moves out by it (in full, or up to the configuration's
    /// [`max_retry_after`](AdaptiveConfig::max_retry_after) if it sets one; a later admission
    /// already due stays). Returns whether the rate was lowered.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::ManualClock;
    /// use tollgate_client::{AdaptiveConfig, AdaptiveRate};
    ///
    /// let config = AdaptiveConfig::new(10.0).max_retry_after(Duration::from_secs(5));
    /// let rates = AdaptiveRate::with_clock(config, ManualClock::new());
    /// assert!(rates.throttled("example.com", Some(Duration::from_secs(3_600))));
    /// let wait = rates.check("example.com").unwrap_err().retry_after().unwrap();
    /// assert_eq!(wait, Duration::from_secs(5)); // the hour was capped
    /// assert!(!rates.throttled("example.com", None)); // inside the cooldown: no second cut
    /// ```
    pub fn throttled(&self, key: &K, retry_after: Option<Duration>) -> bool {
        let shared = &*self.shared;
        let hash = self.hash(key);
        let now = shared.limiter.now();
        let capped = retry_after.map(|d| d.min(shared.config.max_retry_after));
        let lowered = shared.table.with(hash, &shared.config, |k| {
            if let Some(wait) = capped {
                k.held_until = k.held_until.max(Some(now + wait));
            }
            k.throttled(&shared.config, now, capped)
        });
        if let Some(wait) = capped {
            // A full limiter table cannot hold the push; the next wait then paces at the
            // lowered rate only, which is the documented policy of a full table.
            let _ = shared.limiter.penalize(key, wait);
        }
        lowered
    }

    /// The server refused a request of `key` that the client itself sent bunched with
    /// others (closer together than the key's paced interval, as after the client was not
    /// scheduled for a while): a burst overrun, not evidence that the rate is too high. Only
    /// the `Retry-After` applies (capped as in [`throttled`](AdaptiveRate::throttled)); the
    /// rate and what was learned of the server's rate stay. The throttle is counted.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::ManualClock;
    /// use tollgate_client::{AdaptiveConfig, AdaptiveRate};
    ///
    /// let rates = AdaptiveRate::with_clock(AdaptiveConfig::new(10.0), ManualClock::new());
    /// rates.overrun("example.com", Some(Duration::from_secs(1)));
    /// assert_eq!(rates.rate("example.com"), 10.0); // not lowered
    /// assert!(rates.check("example.com").is_err()); // but held back by the Retry-After
    /// assert_eq!(rates.snapshot("example.com").unwrap().throttles, 1);
    /// ```
    pub fn overrun(&self, key: &K, retry_after: Option<Duration>) {
        let shared = &*self.shared;
        let capped = retry_after.map(|d| d.min(shared.config.max_retry_after));
        let now = shared.limiter.now();
        shared.table.with(self.hash(key), &shared.config, |k| {
            if let Some(wait) = capped {
                k.held_until = k.held_until.max(Some(now + wait));
            }
            k.overrun(capped)
        });
        if let Some(wait) = capped {
            // As in `throttled`: a full limiter table paces at the rate alone.
            let _ = shared.limiter.penalize(key, wait);
        }
    }

    /// The server said `key`'s quota is spent for `wait` (`RateLimit: r=0;t=N`,
    /// `X-RateLimit-Remaining: 0` with a reset), on whatever status: the key's next
    /// admission moves out by it (capped as in [`throttled`](AdaptiveRate::throttled); a
    /// later admission already due stays). The rate and the counts stay: a spent quota is
    /// the server's window, not a sign that the pace was wrong.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::ManualClock;
    /// use tollgate_client::{AdaptiveConfig, AdaptiveRate};
    ///
    /// let rates = AdaptiveRate::with_clock(AdaptiveConfig::new(10.0), ManualClock::new());
    /// rates.hold("example.com", Duration::from_secs(30));
    /// let wait = rates.check("example.com").unwrap_err().retry_after();
    /// assert_eq!(wait, Some(Duration::from_secs(30)));
    /// assert_eq!(rates.rate("example.com"), 10.0); // not lowered
    /// ```
    pub fn hold(&self, key: &K, wait: Duration) {
        let shared = &*self.shared;
        let wait = wait.min(shared.config.max_retry_after);
        let now = shared.limiter.now();
        shared.table.with(self.hash(key), &shared.config, |k| {
            k.held_until = k.held_until.max(Some(now + wait));
        });
        // As in `throttled`: a full limiter table paces at the rate alone.
        let _ = shared.limiter.penalize(key, wait);
    }

    /// How long the server's latest hold of `key` (from [`throttled`](Self::throttled),
    /// [`overrun`](Self::overrun) or [`hold`](Self::hold)) still keeps it closed, if it
    /// does: for a wait whose turn was reserved before the hold came, which the hold does
    /// not move (the key's queue keeps its head's reservation). Forgotten with the key's
    /// state (by [`forget`](Self::forget), or when the table evicts it).
    pub(crate) fn held_after_now(&self, key: &K) -> Option<Duration> {
        let shared = &*self.shared;
        let now = shared.limiter.now();
        let until = shared.table.get(self.hash(key))?.held_until?;
        (until > now).then(|| until.saturating_duration_since(now))
    }

    /// The server announced its policy for `key` (`RateLimit-Policy`, `X-RateLimit-Limit`):
    /// the key is paced at exactly that rate (at most the ceiling; below the floor and
    /// [`MIN_RATE`] too if the server asks, a weekly quota as well: the floor bounds only
    /// what throttles do), and successes no
    /// longer probe above it. It is trusted for the policy's window (or the configuration's
    /// [`announcement_ttl`](AdaptiveConfig::announcement_ttl)) from now; then the key goes
    /// back to learning, from the rate it was paced at. A throttle under it lowers the rate
    /// below it (several clients sharing the quota each paced at the whole of it are too
    /// fast together), and the rate is then bisected under the announced one; a renewal of
    /// the same policy keeps that lower rate, a different policy starts over at its rate.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::Quota;
    /// use tollgate_client::{AdaptiveConfig, AdaptiveRate};
    ///
    /// let rates = AdaptiveRate::new(AdaptiveConfig::new(1.0).ceiling(100.0));
    /// rates.announce("example.com", Quota::new(100, Duration::from_secs(60)));
    /// assert!((rates.rate("example.com") - 100.0 / 60.0).abs() < 1e-6);
    /// rates.success("example.com");
    /// assert!((rates.rate("example.com") - 100.0 / 60.0).abs() < 1e-6); // no probing
    ///
    /// rates.announce("b.example", Quota::per_second(50));
    /// rates.throttled("b.example", None); // a 429 under it: other clients share the quota
    /// assert_eq!(rates.rate("b.example"), 40.0); // 50 × the decrease 0.8
    /// rates.announce("b.example", Quota::per_second(50)); // renewed: still under it
    /// assert_eq!(rates.rate("b.example"), 40.0);
    /// ```
    pub fn announce(&self, key: &K, policy: Quota) {
        let shared = &*self.shared;
        let now = shared.limiter.now();
        let ttl = shared.config.announcement_ttl;
        shared.table.with(self.hash(key), &shared.config, |k| {
            k.announce(&shared.config, policy, now, ttl)
        });
    }

    /// The server said `remaining` requests of `key`'s quota are left until its reset,
    /// `reset` from now (`RateLimit: r=..;t=..`, or `X-RateLimit-Remaining` with
    /// `X-RateLimit-Reset`): until then the key is paced at `remaining / reset` if that is
    /// slower than its rate, so that what is left is spread over the window instead of
    /// spent at once (and several clients sharing one quota do not each pace at the whole
    /// of it). Each call replaces the last one's spread.
    ///
    /// A reset of a second or less spreads nothing: whole-second fields round a sub-second
    /// refill up to 1 s, and `r / 1` would read a server that refills continuously as far
    /// slower than it is. A `remaining` of 0 spreads nothing either: it is a
    /// [`hold`](AdaptiveRate::hold) until the reset. The spread is not floored at the
    /// configuration's floor nor at [`MIN_RATE`] (the server's word, as a hold is): 1 left
    /// for a week paces at one a week, down to the slowest pace a [`Quota`] can hold (one
    /// every 2^59 ns, about 18 years).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{ManualClock, Quota};
    /// use tollgate_client::{AdaptiveConfig, AdaptiveRate};
    ///
    /// let clock = ManualClock::new();
    /// let rates = AdaptiveRate::with_clock(AdaptiveConfig::new(10.0), clock.clone());
    /// rates.announce("example.com", Quota::new(600, Duration::from_secs(60)));
    /// assert_eq!(rates.rate("example.com"), 10.0);
    /// // 20 left of it for the next 40 s (other clients spent the rest):
    /// rates.spread("example.com", 20, Duration::from_secs(40));
    /// assert_eq!(rates.rate("example.com"), 0.5);
    /// clock.advance(Duration::from_secs(40)); // the reset: the whole policy again
    /// assert_eq!(rates.rate("example.com"), 10.0);
    /// ```
    pub fn spread(&self, key: &K, remaining: u64, reset: Duration) {
        let shared = &*self.shared;
        let now = shared.limiter.now();
        shared.table.with(self.hash(key), &shared.config, |k| {
            k.spread(remaining, reset, now)
        });
    }

    /// The server's policy for `key` is in content bytes (`RateLimit-Policy` with
    /// `qu="content-bytes"`): `policy` is its bytes per window. From now on, for the
    /// policy's window (or the configuration's
    /// [`announcement_ttl`](AdaptiveConfig::announcement_ttl)), each request of the key
    /// waits at [`until_bytes_ready`](AdaptiveRate::until_bytes_ready) for its bytes too.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::Quota;
    /// use tollgate_client::{AdaptiveConfig, AdaptiveRate};
    ///
    /// let rates = AdaptiveRate::new(AdaptiveConfig::new(10.0));
    /// let policy = Quota::new(1_000_000, Duration::from_secs(60)); // a megabyte a minute
    /// rates.byte_policy("example.com", policy);
    /// assert_eq!(rates.snapshot("example.com").unwrap().byte_policy, Some(policy));
    /// ```
    pub fn byte_policy(&self, key: &K, policy: Quota) {
        let shared = &*self.shared;
        let now = shared.limiter.now();
        let ttl = shared.config.announcement_ttl;
        shared.table.with(self.hash(key), &shared.config, |k| {
            k.byte_policy(policy, now, ttl)
        });
    }

    /// Waits until `key`'s byte policy allows `bytes` more (and spends them), or `None` if
    /// the key has no byte policy in force. A charge larger than the policy's whole quota
    /// is cut to it: it waits for the full quota, never forever.
    ///
    /// # Cancel safety
    ///
    /// As [`Limiter::until_ready`]: a dropped wait costs nothing.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{ManualClock, Quota};
    /// use tollgate_client::{AdaptiveConfig, AdaptiveRate};
    ///
    /// let rates = AdaptiveRate::with_clock(AdaptiveConfig::new(10.0), ManualClock::new());
    /// assert!(rates.until_bytes_ready("example.com", 100).is_none()); // no byte policy
    /// rates.byte_policy("example.com", Quota::new(1_000, Duration::from_secs(1)));
    /// let spend = |n| rates.until_bytes_ready("example.com", n).unwrap().within(Duration::ZERO);
    /// futures_executor::block_on(async {
    ///     assert!(spend(600).await.is_ok());
    ///     let wait = spend(600).await.unwrap_err().retry_after().unwrap();
    ///     assert_eq!(wait, Duration::from_millis(200)); // 200 bytes short, at 1,000 a second
    /// });
    /// ```
    pub fn until_bytes_ready(&self, key: &K, bytes: u64) -> Option<UntilReady<'_>> {
        let policy = self.current(key)?.snap.byte_policy?;
        let n = u32::try_from(bytes)
            .unwrap_or(u32::MAX)
            .clamp(1, policy.burst());
        Some(self.shared.bytes.until_n_ready_with(key, n, policy))
    }

    /// Sets `key`'s own ceiling, in requests per second, under the configuration's
    /// (`None` lifts it): the key's rate, learned or announced, never goes above it, and
    /// comes down to it at once. For a site's own word on its pace, such as a robots.txt
    /// `Crawl-delay` of `d` seconds (a ceiling of `1 / d`; see
    /// [`PoliteLayer::crawl_delay`](crate::PoliteLayer::crawl_delay)).
    ///
    /// A ceiling is clamped to [`MAX_RATE`] (a NaN or infinite one lifts it); it is not
    /// clamped to the configuration's floor nor to [`MIN_RATE`] (a site that asks for one
    /// request a minute, or a week, gets that, whatever the floor), only to the slowest pace
    /// a [`Quota`] can hold (one every 2^59 ns, about 18 years). It lives with the key's learned state: a key
    /// evicted from the table forgets it, as it forgets its rate.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::Quota;
    /// use tollgate_client::{AdaptiveConfig, AdaptiveRate};
    ///
    /// let rates = AdaptiveRate::new(AdaptiveConfig::new(10.0));
    /// rates.set_ceiling("example.com", Some(0.5)); // Crawl-delay: 2
    /// assert_eq!(rates.rate("example.com"), 0.5);
    /// rates.announce("example.com", Quota::per_second(50)); // above it: clamped
    /// assert_eq!(rates.rate("example.com"), 0.5);
    /// rates.set_ceiling("example.com", None);
    /// rates.announce("example.com", Quota::per_second(50));
    /// assert_eq!(rates.rate("example.com"), 50.0);
    /// ```
    pub fn set_ceiling(&self, key: &K, max: Option<f64>) {
        let shared = &*self.shared;
        let now = shared.limiter.now();
        let max = max
            .filter(|m| m.is_finite())
            .map(|m| m.clamp(SLOWEST, MAX_RATE));
        shared.table.with(self.hash(key), &shared.config, |k| {
            k.set_ceiling(&shared.config, max, now)
        });
    }

    /// A copy of `key`'s state, or `None` if it has none (never signalled, or evicted).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate_client::{AdaptiveConfig, AdaptiveRate};
    ///
    /// let rates = AdaptiveRate::new(AdaptiveConfig::new(10.0));
    /// assert!(rates.snapshot("example.com").is_none());
    /// rates.success("example.com");
    /// assert_eq!(rates.snapshot("example.com").unwrap().successes, 1);
    /// ```
    pub fn snapshot(&self, key: &K) -> Option<RateSnapshot> {
        self.current(key).map(|k| k.snap)
    }

    /// Forgets `key`'s learned rate and any push of its next admission.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate_client::{AdaptiveConfig, AdaptiveRate};
    ///
    /// let rates = AdaptiveRate::new(AdaptiveConfig::new(10.0));
    /// rates.throttled("example.com", None);
    /// assert!(rates.forget("example.com"));
    /// assert_eq!(rates.rate("example.com"), 10.0);
    /// ```
    pub fn forget(&self, key: &K) -> bool {
        self.shared.limiter.reset(key);
        self.shared.bytes.reset(key);
        self.shared.table.remove(self.hash(key))
    }

    /// Keys whose state is held (at most [`capacity`](AdaptiveRate::capacity)).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate_client::{AdaptiveConfig, AdaptiveRate};
    ///
    /// let rates = AdaptiveRate::new(AdaptiveConfig::new(10.0).capacity(1));
    /// rates.success("a");
    /// rates.success("b"); // evicts "a"
    /// assert_eq!(rates.keys(), 1);
    /// assert!(rates.snapshot("a").is_none());
    /// ```
    pub fn keys(&self) -> usize {
        self.shared.table.keys()
    }

    /// The most keys held at once (the configured capacity, rounded up to whole shards).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate_client::{AdaptiveConfig, AdaptiveRate};
    ///
    /// let rates = AdaptiveRate::<str>::new(AdaptiveConfig::new(10.0).capacity(100));
    /// assert!(rates.capacity() >= 100 && rates.capacity() < 116);
    /// ```
    pub fn capacity(&self) -> usize {
        self.shared.table.capacity()
    }

    /// The configuration.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate_client::{AdaptiveConfig, AdaptiveRate};
    ///
    /// let rates = AdaptiveRate::<str>::new(AdaptiveConfig::new(10.0));
    /// assert_eq!(rates.config().initial_rate(), 10.0);
    /// ```
    pub fn config(&self) -> &AdaptiveConfig {
        &self.shared.config
    }

    /// The clock's reading.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{ManualClock, Timestamp};
    /// use tollgate_client::{AdaptiveConfig, AdaptiveRate};
    ///
    /// let rates = AdaptiveRate::<str>::with_clock(AdaptiveConfig::new(1.0), ManualClock::new());
    /// assert_eq!(rates.now(), Timestamp::ZERO);
    /// ```
    pub fn now(&self) -> Timestamp {
        self.shared.limiter.now()
    }

    /// The limiter that paces the keys (for its [`stats`](Limiter::stats)).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate_client::{AdaptiveConfig, AdaptiveRate};
    ///
    /// let rates = AdaptiveRate::new(AdaptiveConfig::new(1.0));
    /// rates.check("example.com").unwrap();
    /// assert_eq!(rates.limiter().stats().admitted, 1);
    /// ```
    pub fn limiter(&self) -> &Limiter<K> {
        &self.shared.limiter
    }
}

/// Two limiters on one clock. tollgate's own clocks are cloned, so that the limiters still
/// recognise them (waits on a [`ManualClock`] sleep on its fake time, the monotonic clock
/// is read without dynamic dispatch); any other clock is shared behind an `Arc`.
#[track_caller]
fn two_on<K: Hash + ?Sized, C: Clock>(
    clock: C,
    builder: impl Fn() -> tollgate::LimiterBuilder<K>,
) -> (Limiter<K>, Limiter<K>) {
    let any: &dyn Any = &clock;
    if let Some(c) = any.downcast_ref::<ManualClock>() {
        let c = c.clone();
        return (
            builder().clock(c.clone()).build(),
            builder().clock(c).build(),
        );
    }
    if let Some(&c) = any.downcast_ref::<MonotonicClock>() {
        return (builder().clock(c).build(), builder().clock(c).build());
    }
    if let Some(&c) = any.downcast_ref::<TscClock>() {
        return (builder().clock(c).build(), builder().clock(c).build());
    }
    let c = SharedClock(Arc::new(clock));
    (
        builder().clock(c.clone()).build(),
        builder().clock(c).build(),
    )
}

/// A clock of the user's, read by both limiters (the requests' and the bytes').
#[derive(Debug, Clone)]
struct SharedClock(Arc<dyn Clock>);

impl Clock for SharedClock {
    fn now(&self) -> Timestamp {
        self.0.now()
    }
}
