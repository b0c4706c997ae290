//! [`AdaptiveConfig`]: the bounds and gains of an [`AdaptiveRate`](crate::AdaptiveRate).

use std::time::Duration;

/// The highest rate an [`AdaptiveConfig`] accepts, in requests per second (one a nanosecond
/// is the finest interval a [`Quota`](tollgate::Quota) can express).
pub const MAX_RATE: f64 = 1e9;

/// The lowest rate an [`AdaptiveConfig`] accepts: one request a day. It bounds the
/// configuration (its initial rate, floor and ceiling), not the server's word: an announced
/// policy, a remaining count spread over its reset or a key's own ceiling may pace a key
/// slower (a weekly quota at its rate), down to the slowest pace a
/// [`Quota`](tollgate::Quota) can hold.
pub const MIN_RATE: f64 = 1.0 / 86_400.0;

/// How an [`AdaptiveRate`](crate::AdaptiveRate) moves each key's rate, in requests per second.
///
/// * Until its first throttle, a key's **success** adds [`increase`](AdaptiveConfig::increase)
///   to its rate, up to the ceiling: the rate grows in proportion to itself, about
///   `increase × rate` per second (a fast start).
/// * A **throttle** marks its rate as too fast and falls back to the fastest rate known to
///   be safe, or multiplies the rate by [`decrease`](AdaptiveConfig::decrease) if none is,
///   down to the floor; at most once per [`cooldown`](AdaptiveConfig::cooldown) (the
///   responses of requests already sent at the old rate must not cut it again). It moves
///   the key's next admission out by the server's `Retry-After`, in full unless
///   [`max_retry_after`](AdaptiveConfig::max_retry_after) caps it.
/// * After the first throttle, a rate that draws [`confirm`](AdaptiveConfig::confirm)
///   successes without a throttle is safe, and the next rate tried is halfway to the
///   lowest rate throttled: a bisection, which stops within [`band`](AdaptiveConfig::band)
///   of that rate and settles half a band under the safe one. Every [`reprobe`](AdaptiveConfig::reprobe) without a
///   throttle, the throttled mark moves up by two bands, so a server that raised its limit
///   is found again. A throttle at or under the safe rate is a strike; a second strike
///   before `confirm` successes forgets the safe rate (the server slowed down) and
///   decreases.
/// * An **announced policy** replaces probing: the key is paced at exactly the announced
///   rate (at most the ceiling; a policy slower than the floor is kept, throttles then
///   never raise or lower it). It is trusted for its window (or
///   [`announcement_ttl`](AdaptiveConfig::announcement_ttl)) from the last response that
///   carried it, then the key goes back to learning from that rate. A throttle under it
///   lowers the rate below it (the quota is shared with other clients, or smaller than
///   said), and the bisection then runs under the announced rate, never above it.
/// * A **remaining count** `r` with `t` seconds to its reset (`RateLimit: r=..;t=..`,
///   `X-RateLimit-Remaining` and `-Reset`) paces the key at `r / t` until the reset when
///   that is slower, so that what is left is spread over the window, not spent at once.
///
/// # Panics
///
/// Each setter panics on a value outside its documented range: a configuration is code, and
/// a wrong one is a bug to be found at start-up, not a state to run in.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate_client::AdaptiveConfig;
///
/// let config = AdaptiveConfig::new(5.0)
///     .floor(0.5)
///     .ceiling(200.0)
///     .decrease(0.7)
///     .max_retry_after(Duration::from_secs(30));
/// assert_eq!(config.initial_rate(), 5.0);
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdaptiveConfig {
    pub(crate) initial: f64,
    pub(crate) floor: f64,
    pub(crate) ceiling: f64,
    pub(crate) increase: f64,
    pub(crate) decrease: f64,
    pub(crate) band: f64,
    pub(crate) cooldown: Duration,
    pub(crate) confirm: u32,
    pub(crate) reprobe: Duration,
    pub(crate) max_retry_after: Duration,
    /// How long an announcement is trusted; `None`: its own window.
    pub(crate) announcement_ttl: Option<Duration>,
    pub(crate) capacity: usize,
}

fn check_rate(what: &str, rate: f64) {
    assert!(
        rate.is_finite() && (MIN_RATE..=MAX_RATE).contains(&rate),
        "{what} must be a rate between {MIN_RATE} and {MAX_RATE} per second, got {rate}"
    );
}

impl AdaptiveConfig {
    /// A new key starts at `initial` requests per second. The defaults: floor 0.1, ceiling
    /// 10 000, increase 0.1 per success, decrease 0.8, band 3 %, cooldown 1 s, confirm 100,
    /// reprobe 30 s, `Retry-After` and resets honoured in full (no cap), 10 000 keys.
    ///
    /// # Panics
    ///
    /// If `initial` is not between [`MIN_RATE`] and [`MAX_RATE`].
    ///
    /// # Examples
    ///
    /// ```
    /// let config = tollgate_client::AdaptiveConfig::new(10.0);
    /// assert_eq!(config.initial_rate(), 10.0);
    /// ```
    pub fn new(initial: f64) -> AdaptiveConfig {
        check_rate("the initial rate", initial);
        AdaptiveConfig {
            initial,
            floor: 0.1_f64.min(initial),
            ceiling: 10_000_f64.max(initial),
            increase: 0.1,
            decrease: 0.8,
            band: 0.03,
            cooldown: Duration::from_secs(1),
            confirm: 100,
            reprobe: Duration::from_secs(30),
            max_retry_after: Duration::MAX,
            announcement_ttl: None,
            capacity: 10_000,
        }
    }

    /// The rate a new key starts at.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(tollgate_client::AdaptiveConfig::new(3.0).initial_rate(), 3.0);
    /// ```
    pub fn initial_rate(&self) -> f64 {
        self.initial
    }

    /// The lowest rate a key is slowed to by throttles (a `Retry-After` can still hold it
    /// back longer). A server's announced policy or `Crawl-delay` may ask for a slower one,
    /// which is kept: throttles then leave it where it is.
    ///
    /// # Panics
    ///
    /// If `floor` is not between [`MIN_RATE`] and the initial rate.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate_client::{AdaptiveConfig, AdaptiveRate};
    ///
    /// let rates = AdaptiveRate::new(AdaptiveConfig::new(10.0).floor(9.0));
    /// rates.throttled("example.com", None); // 10 × 0.8 = 8: held at the floor
    /// assert_eq!(rates.rate("example.com"), 9.0);
    /// ```
    #[must_use]
    pub fn floor(mut self, floor: f64) -> Self {
        check_rate("the floor", floor);
        assert!(
            floor <= self.initial,
            "the floor {floor} is above the initial rate"
        );
        self.floor = floor;
        self
    }

    /// The highest rate a key reaches, by probing or by a server's announcement.
    ///
    /// # Panics
    ///
    /// If `ceiling` is not between the initial rate and [`MAX_RATE`].
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::Quota;
    /// use tollgate_client::{AdaptiveConfig, AdaptiveRate};
    ///
    /// let rates = AdaptiveRate::new(AdaptiveConfig::new(10.0).ceiling(50.0));
    /// rates.announce("example.com", Quota::per_second(100));
    /// assert_eq!(rates.rate("example.com"), 50.0); // the announced 100, capped
    /// ```
    #[must_use]
    pub fn ceiling(mut self, ceiling: f64) -> Self {
        check_rate("the ceiling", ceiling);
        assert!(
            ceiling >= self.initial,
            "the ceiling {ceiling} is below the initial rate"
        );
        self.ceiling = ceiling;
        self
    }

    /// Requests per second added by each success while probing.
    ///
    /// # Panics
    ///
    /// If `increase` is not finite and positive.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate_client::{AdaptiveConfig, AdaptiveRate};
    ///
    /// let rates = AdaptiveRate::new(AdaptiveConfig::new(10.0).increase(0.5));
    /// rates.success("example.com");
    /// assert_eq!(rates.rate("example.com"), 10.5);
    /// ```
    #[must_use]
    pub fn increase(mut self, increase: f64) -> Self {
        assert!(
            increase.is_finite() && increase > 0.0,
            "the increase must be finite and positive, got {increase}"
        );
        self.increase = increase;
        self
    }

    /// The factor a throttle multiplies the rate by.
    ///
    /// # Panics
    ///
    /// If `decrease` is not in `(0, 1)`.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate_client::{AdaptiveConfig, AdaptiveRate};
    ///
    /// let rates = AdaptiveRate::new(AdaptiveConfig::new(10.0).decrease(0.5));
    /// rates.throttled("example.com", None);
    /// assert_eq!(rates.rate("example.com"), 5.0);
    /// ```
    #[must_use]
    pub fn decrease(mut self, decrease: f64) -> Self {
        assert!(
            decrease > 0.0 && decrease < 1.0,
            "the decrease must be in (0, 1), got {decrease}"
        );
        self.decrease = decrease;
        self
    }

    /// How close to the lowest throttled rate the bisection goes, as a fraction of it.
    ///
    /// # Panics
    ///
    /// If `band` is not in `(0, 0.5)`.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::ManualClock;
    /// use tollgate_client::{AdaptiveConfig, AdaptiveRate};
    ///
    /// // Throttled at 10, back to 8; then 8 is confirmed safe by one success.
    /// let next = |band| {
    ///     let config = AdaptiveConfig::new(10.0).band(band).confirm(1);
    ///     let rates = AdaptiveRate::with_clock(config, ManualClock::new());
    ///     rates.throttled("example.com", None);
    ///     rates.success("example.com");
    ///     rates.rate("example.com")
    /// };
    /// assert_eq!(next(0.1), 9.0); // 8 is more than 10 % under 10: try halfway
    /// assert_eq!(next(0.25), 7.0); // within 25 % of 10: settle half a band under 8
    /// ```
    #[must_use]
    pub fn band(mut self, band: f64) -> Self {
        assert!(
            band > 0.0 && band < 0.5,
            "the band must be in (0, 0.5), got {band}"
        );
        self.band = band;
        self
    }

    /// The least time between two decreases of one key.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::ManualClock;
    /// use tollgate_client::{AdaptiveConfig, AdaptiveRate};
    ///
    /// let clock = ManualClock::new();
    /// let config = AdaptiveConfig::new(10.0).cooldown(Duration::from_millis(500));
    /// let rates = AdaptiveRate::with_clock(config, clock.clone());
    /// assert!(rates.throttled("example.com", None)); // 10 to 8
    /// clock.advance(Duration::from_millis(499));
    /// assert!(!rates.throttled("example.com", None)); // inside the cooldown: still 8
    /// clock.advance(Duration::from_millis(1));
    /// assert!(rates.throttled("example.com", None)); // 8 to 6.4
    /// assert_eq!(rates.rate("example.com"), 6.4);
    /// ```
    #[must_use]
    pub fn cooldown(mut self, cooldown: Duration) -> Self {
        self.cooldown = cooldown;
        self
    }

    /// How many successes in a row make a rate safe. A server whose burst leaves `e`
    /// cells of slack refuses a rate `ε` over its own after about `e / ε` requests, so
    /// `confirm` successes tell rates more than `e / confirm` over it from safe ones (the
    /// default 100: 1 % per cell of slack); the settling half band covers the rest.
    ///
    /// # Panics
    ///
    /// If `n` is 0.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::ManualClock;
    /// use tollgate_client::{AdaptiveConfig, AdaptiveRate};
    ///
    /// let config = AdaptiveConfig::new(10.0).confirm(3);
    /// let rates = AdaptiveRate::with_clock(config, ManualClock::new());
    /// rates.throttled("example.com", None); // 10 is too fast: back to 8
    /// rates.success("example.com");
    /// rates.success("example.com");
    /// assert_eq!(rates.rate("example.com"), 8.0); // not yet confirmed
    /// rates.success("example.com"); // the third: 8 is safe, try halfway to 10
    /// assert_eq!(rates.snapshot("example.com").unwrap().safe, Some(8.0));
    /// assert_eq!(rates.rate("example.com"), 9.0);
    /// ```
    #[must_use]
    pub fn confirm(mut self, n: u32) -> Self {
        assert!(n > 0, "a rate needs at least one success to count as safe");
        self.confirm = n;
        self
    }

    /// How long a key holds below its throttled mark before probing two bands higher.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::ManualClock;
    /// use tollgate_client::{AdaptiveConfig, AdaptiveRate};
    ///
    /// let clock = ManualClock::new();
    /// let config = AdaptiveConfig::new(10.0).reprobe(Duration::from_secs(60));
    /// let rates = AdaptiveRate::with_clock(config, clock.clone());
    /// rates.throttled("example.com", None); // 10 is too fast
    /// let mark = || rates.snapshot("example.com").unwrap().throttled_at.unwrap();
    /// clock.advance(Duration::from_secs(59));
    /// rates.success("example.com");
    /// assert_eq!(mark(), 10.0);
    /// clock.advance(Duration::from_secs(1));
    /// rates.success("example.com"); // a minute without a throttle: two bands up
    /// assert!((mark() - 10.0 * 1.06).abs() < 1e-9);
    /// ```
    #[must_use]
    pub fn reprobe(mut self, reprobe: Duration) -> Self {
        self.reprobe = reprobe;
        self
    }

    /// The longest a server's `Retry-After`, or the reset of a spent quota
    /// ([`AdaptiveRate::hold`](crate::AdaptiveRate::hold)), may hold a key back.
    ///
    /// By default there is no cap: a host that says `Retry-After: 3600` gets no request for
    /// an hour (a cap would have the client probe a host that said it is closed, and each
    /// probe would be refused). A cap is for a client that would rather be refused than
    /// trust a server's clock or a far-off reset; to keep a request from waiting that long
    /// instead, bound the wait with
    /// [`PoliteLayer::max_wait`](crate::PoliteLayer::max_wait).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::ManualClock;
    /// use tollgate_client::{AdaptiveConfig, AdaptiveRate};
    ///
    /// let hour = Duration::from_secs(3_600); // Retry-After: 3600
    /// let held = |config| {
    ///     let rates = AdaptiveRate::with_clock(config, ManualClock::new());
    ///     rates.throttled("example.com", Some(hour));
    ///     rates.check("example.com").unwrap_err().retry_after().unwrap()
    /// };
    /// assert_eq!(held(AdaptiveConfig::new(10.0)), hour); // the default: in full
    /// let capped = AdaptiveConfig::new(10.0).max_retry_after(Duration::from_secs(5));
    /// assert_eq!(held(capped), Duration::from_secs(5));
    /// ```
    #[must_use]
    pub fn max_retry_after(mut self, cap: Duration) -> Self {
        self.max_retry_after = cap;
        self
    }

    /// How long an announced policy (`RateLimit-Policy`, `X-RateLimit-Limit: N;w=S`) is
    /// trusted after the last response that carried it; by default its own window `w`.
    /// Past it, the key goes back to learning its rate from the answers, starting at the
    /// rate it was paced at. A server that announces on every response renews it with each
    /// one; one that announced once, long ago, may have changed its limit since.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{ManualClock, Quota};
    /// use tollgate_client::{AdaptiveConfig, AdaptiveRate};
    ///
    /// let clock = ManualClock::new();
    /// let config = AdaptiveConfig::new(1.0).announcement_ttl(Duration::from_secs(10));
    /// let rates = AdaptiveRate::with_clock(config, clock.clone());
    /// rates.announce("example.com", Quota::per_second(20));
    /// clock.advance(Duration::from_secs(9));
    /// assert!(rates.snapshot("example.com").unwrap().announced.is_some());
    /// clock.advance(Duration::from_secs(1));
    /// assert!(rates.snapshot("example.com").unwrap().announced.is_none()); // learning again
    /// assert_eq!(rates.rate("example.com"), 20.0); // from the announced rate
    /// ```
    #[must_use]
    pub fn announcement_ttl(mut self, ttl: Duration) -> Self {
        self.announcement_ttl = Some(ttl);
        self
    }

    /// The most keys whose state is kept; a new key beyond it evicts the least recently
    /// used one (which starts over at the initial rate if it comes back). A server's hold
    /// (`Retry-After`, a spent quota) is part of that state: the pacing limiter keeps its
    /// push as long as it keeps the key (a table of its own, as large), but a key evicted
    /// while held no longer keeps back the requests that had queued for their turn before the
    /// hold came. Keys are kept per shard (a sixteenth each), so a crawl that may have many
    /// hosts held at once (each saying `Retry-After: 3600`, say) needs a capacity well above
    /// that count.
    ///
    /// # Panics
    ///
    /// If `capacity` is 0.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate_client::{AdaptiveConfig, AdaptiveRate};
    ///
    /// let rates = AdaptiveRate::new(AdaptiveConfig::new(10.0).capacity(1));
    /// rates.throttled("a.example", None); // a: 8
    /// rates.success("b.example"); // evicts a
    /// assert_eq!(rates.keys(), 1);
    /// assert_eq!(rates.rate("a.example"), 10.0); // a starts over
    /// ```
    #[must_use]
    pub fn capacity(mut self, capacity: usize) -> Self {
        assert!(
            capacity > 0,
            "an adaptive rate needs room for at least one key"
        );
        self.capacity = capacity;
        self
    }
}
