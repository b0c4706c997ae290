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

use std::fmt;
use std::hash::{BuildHasher, Hash};
use std::sync::Arc;
use std::time::Duration;

use state::quota_for;
use table::Table;
use tollgate::hash::RandomState;
use tollgate::{Admitted, Clock, Error, Limiter, MonotonicClock, Quota, Timestamp, UntilReady};

/// A rate per key that adapts to what the server says: for clients (crawlers, API clients)
/// pacing each host at a rate they do not know in advance.
///
/// Each key has a current rate between a floor and a ceiling ([`AdaptiveConfig`]), moved by
/// three signals:
///
/// * [`success`](AdaptiveRate::success): an additive increase until the key is first
///   throttled; after that, once `confirm` successes in a row hold a rate, the next rate
///   tried is halfway to the slowest rate that was throttled (a bisection);
/// * [`throttled`](AdaptiveRate::throttled): back to the fastest rate confirmed, or a
///   multiplicative decrease if none is known, and the key's next admission moves out by
///   the server's `Retry-After`, in full unless the configuration caps it;
/// * [`announce`](AdaptiveRate::announce): the server said its policy; the key is paced to
///   it exactly instead of probing.
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
    pub fn with_clock(config: AdaptiveConfig, clock: impl Clock) -> AdaptiveRate<K> {
        let limiter = Limiter::builder(quota_for(config.initial))
            .capacity(config.capacity.max(64))
            .clock(clock)
            .build();
        AdaptiveRate {
            shared: Arc::new(Shared {
                limiter,
                table: Table::new(config.capacity),
                config,
                identity: RandomState::new(),
            }),
        }
    }

    fn hash(&self, key: &K) -> u64 {
        self.shared.identity.hash_one(key)
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
        let shared = &*self.shared;
        match shared.table.get(self.hash(key)) {
            Some(k) => k.quota(),
            None => quota_for(shared.config.initial),
        }
    }

    /// The key's current rate in requests per second.
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
        match self.shared.table.get(self.hash(key)) {
            Some(k) => k.snap.rate,
            None => self.shared.config.initial,
        }
    }

    /// Waits for the key's next admission at its current rate: the limiter's FIFO queue for
    /// the key, on tollgate's timer (no runtime needed). A wait keeps the quota it started
    /// with; the rate's later changes apply to the waits that start after them.
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
        shared
            .table
            .with(self.hash(key), &shared.config, |k| k.overrun(capped));
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
        // As in `throttled`: a full limiter table paces at the rate alone.
        let _ = shared
            .limiter
            .penalize(key, wait.min(shared.config.max_retry_after));
    }

    /// The server announced its policy for `key` (`RateLimit-Policy`, `X-RateLimit-Limit`):
    /// from now on the key is paced at exactly that rate, clamped to floor and ceiling, and
    /// successes and throttles no longer move it (a throttle still pushes by its
    /// `Retry-After`). A new announcement replaces the old one.
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
    /// ```
    pub fn announce(&self, key: &K, policy: Quota) {
        let shared = &*self.shared;
        shared.table.with(self.hash(key), &shared.config, |k| {
            k.announce(&shared.config, policy)
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
        self.shared.table.get(self.hash(key)).map(|k| k.snap)
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
