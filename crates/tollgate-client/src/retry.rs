//! [`RetryPolicy`]: exponential backoff with jitter, capped, that listens to the server's
//! `Retry-After` and gives up on a repeated 429. Nothing here knows HTTP: the caller says
//! what went wrong with a [`Failure`].

use std::time::Duration;

/// Why an attempt failed, as the retry policy needs to know it.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate_client::Failure;
///
/// let f = Failure::Throttled { retry_after: Some(Duration::from_secs(2)) };
/// assert_eq!(f.retry_after(), Some(Duration::from_secs(2)));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The server refused for rate (HTTP 429).
    Throttled {
        /// When the server said to come back, if it did.
        retry_after: Option<Duration>,
    },
    /// A failure that may pass (HTTP 5xx, a reset connection, a timeout).
    Transient {
        /// When the server said to come back, if it did (a 503 may say).
        retry_after: Option<Duration>,
    },
}

impl Failure {
    /// The server's `Retry-After`, if any.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(tollgate_client::Failure::Transient { retry_after: None }.retry_after(), None);
    /// ```
    pub fn retry_after(&self) -> Option<Duration> {
        match *self {
            Failure::Throttled { retry_after } | Failure::Transient { retry_after } => retry_after,
        }
    }
}

/// What to do after a failed attempt.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate_client::{Decision, Failure, GiveUp, RetryPolicy};
///
/// let policy = RetryPolicy::new().max_retries(1);
/// let mut state = policy.start();
/// let first = policy.decide(&mut state, Failure::Transient { retry_after: None });
/// assert!(matches!(first, Decision::Retry(_)));
/// let second = policy.decide(&mut state, Failure::Transient { retry_after: None });
/// assert_eq!(second, Decision::GiveUp(GiveUp::Exhausted));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Try again after this long.
    Retry(Duration),
    /// Stop; the last answer is the caller's.
    GiveUp(GiveUp),
}

/// Why a [`RetryPolicy`] gave up.
///
/// # Examples
///
/// ```
/// use tollgate_client::GiveUp;
/// assert_ne!(GiveUp::Exhausted, GiveUp::RepeatedThrottle);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GiveUp {
    /// The retries are used up.
    Exhausted,
    /// The server refused for rate again after the configured number of 429s in a row.
    RepeatedThrottle,
    /// The server's `Retry-After` is longer than the policy is willing to wait.
    RetryAfterTooLong,
}

/// The state of one request's retries: attempts so far and 429s in a row.
///
/// # Examples
///
/// ```
/// let state = tollgate_client::RetryPolicy::new().start();
/// assert_eq!(state.retries(), 0);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RetryState {
    retries: u32,
    throttles_in_a_row: u32,
}

impl RetryState {
    /// Retries decided so far.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate_client::{Failure, RetryPolicy};
    ///
    /// let policy = RetryPolicy::new();
    /// let mut state = policy.start();
    /// policy.decide(&mut state, Failure::Transient { retry_after: None });
    /// assert_eq!(state.retries(), 1);
    /// ```
    pub fn retries(&self) -> u32 {
        self.retries
    }
}

/// A retry schedule: exponential backoff from [`base`](RetryPolicy::base), doubled per retry
/// and capped at [`max_delay`](RetryPolicy::max_delay), each delay shortened by a random
/// fraction of up to [`jitter`](RetryPolicy::jitter) of it (so that clients refused together
/// do not come back together).
///
/// * A server's `Retry-After` replaces the schedule's delay for that retry (the server knows
///   when it will have room); one longer than [`max_retry_after`](RetryPolicy::max_retry_after)
///   gives up instead of waiting that long.
/// * [`give_up_after_throttles`](RetryPolicy::give_up_after_throttles) 429s in a row give up:
///   a server that refuses again after its own `Retry-After` is not going to be talked round.
/// * At most [`max_retries`](RetryPolicy::max_retries) retries in all.
///
/// Which requests may be retried at all (idempotent methods; never a 4xx other than 429) is
/// the caller's rule: the client layer applies it.
/// [`sleep`](RetryPolicy::sleep) waits on tollgate's timer, with no runtime.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate_client::{Decision, Failure, RetryPolicy};
///
/// let policy = RetryPolicy::new()
///     .base(Duration::from_millis(100))
///     .max_delay(Duration::from_secs(1))
///     .jitter(0.0);
/// assert_eq!(policy.backoff(0), Duration::from_millis(100));
/// assert_eq!(policy.backoff(3), Duration::from_millis(800));
/// assert_eq!(policy.backoff(10), Duration::from_secs(1)); // capped
///
/// let mut state = policy.start();
/// let told = Failure::Throttled { retry_after: Some(Duration::from_secs(3)) };
/// assert_eq!(policy.decide(&mut state, told), Decision::Retry(Duration::from_secs(3)));
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    max_retries: u32,
    base: Duration,
    max_delay: Duration,
    jitter: f64,
    max_retry_after: Duration,
    give_up_after_throttles: u32,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy::new()
    }
}

impl RetryPolicy {
    /// The defaults: 3 retries, base 100 ms, delays capped at 10 s, jitter 0.5, a
    /// `Retry-After` of up to 60 s honoured, giving up on the second 429 in a row.
    ///
    /// # Examples
    ///
    /// ```
    /// let policy = tollgate_client::RetryPolicy::new();
    /// assert_eq!(policy, tollgate_client::RetryPolicy::default());
    /// ```
    pub fn new() -> RetryPolicy {
        RetryPolicy {
            max_retries: 3,
            base: Duration::from_millis(100),
            max_delay: Duration::from_secs(10),
            jitter: 0.5,
            max_retry_after: Duration::from_secs(60),
            give_up_after_throttles: 2,
        }
    }

    /// No retries at all.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate_client::{Decision, Failure, GiveUp, RetryPolicy};
    ///
    /// let never = RetryPolicy::never();
    /// let d = never.decide(&mut never.start(), Failure::Transient { retry_after: None });
    /// assert_eq!(d, Decision::GiveUp(GiveUp::Exhausted));
    /// ```
    pub fn never() -> RetryPolicy {
        RetryPolicy::new().max_retries(0)
    }

    /// At most `n` retries of one request.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate_client::{Decision, Failure, GiveUp, RetryPolicy};
    ///
    /// let policy = RetryPolicy::new().max_retries(5);
    /// let mut state = policy.start();
    /// let failed = Failure::Transient { retry_after: None };
    /// for _ in 0..5 {
    ///     assert!(matches!(policy.decide(&mut state, failed), Decision::Retry(_)));
    /// }
    /// assert_eq!(policy.decide(&mut state, failed), Decision::GiveUp(GiveUp::Exhausted));
    /// ```
    #[must_use]
    pub fn max_retries(mut self, n: u32) -> Self {
        self.max_retries = n;
        self
    }

    /// The first retry's delay, before jitter.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let policy = tollgate_client::RetryPolicy::new().base(Duration::from_millis(50)).jitter(0.0);
    /// assert_eq!(policy.backoff(0), Duration::from_millis(50));
    /// ```
    #[must_use]
    pub fn base(mut self, base: Duration) -> Self {
        self.base = base;
        self
    }

    /// The longest delay the schedule reaches.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let policy = tollgate_client::RetryPolicy::new().max_delay(Duration::from_millis(150));
    /// assert_eq!(policy.backoff(5), Duration::from_millis(150));
    /// ```
    #[must_use]
    pub fn max_delay(mut self, max: Duration) -> Self {
        self.max_delay = max;
        self
    }

    /// The largest fraction a delay is shortened by at random: 0 for none, 1 for "full
    /// jitter" (anywhere between 0 and the backoff).
    ///
    /// # Panics
    ///
    /// If `fraction` is not in `[0, 1]`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let policy = tollgate_client::RetryPolicy::new().jitter(1.0);
    /// assert_eq!(policy.jittered(0, 0.0), Duration::from_millis(100)); // the whole backoff
    /// assert_eq!(policy.jittered(0, 0.75), Duration::from_millis(25));
    /// assert_eq!(policy.jittered(0, 1.0), Duration::ZERO); // down to nothing
    /// ```
    #[must_use]
    pub fn jitter(mut self, fraction: f64) -> Self {
        assert!(
            (0.0..=1.0).contains(&fraction),
            "the jitter must be a fraction in [0, 1], got {fraction}"
        );
        self.jitter = fraction;
        self
    }

    /// The longest `Retry-After` honoured; a longer one gives up.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate_client::{Decision, Failure, GiveUp, RetryPolicy};
    ///
    /// let policy = RetryPolicy::new().max_retry_after(Duration::from_secs(5));
    /// let told = |secs| Failure::Throttled { retry_after: Some(Duration::from_secs(secs)) };
    /// let five = policy.decide(&mut policy.start(), told(5));
    /// assert_eq!(five, Decision::Retry(Duration::from_secs(5)));
    /// let six = policy.decide(&mut policy.start(), told(6));
    /// assert_eq!(six, Decision::GiveUp(GiveUp::RetryAfterTooLong));
    /// ```
    #[must_use]
    pub fn max_retry_after(mut self, max: Duration) -> Self {
        self.max_retry_after = max;
        self
    }

    /// Gives up at the `n`th 429 in a row (the default 2: one 429 is retried, a second is
    /// final). 0 or 1 never retries a 429.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate_client::{Decision, Failure, GiveUp, RetryPolicy};
    ///
    /// let policy = RetryPolicy::new().give_up_after_throttles(3);
    /// let mut state = policy.start();
    /// let throttled = Failure::Throttled { retry_after: None };
    /// assert!(matches!(policy.decide(&mut state, throttled), Decision::Retry(_)));
    /// assert!(matches!(policy.decide(&mut state, throttled), Decision::Retry(_)));
    /// assert_eq!(
    ///     policy.decide(&mut state, throttled),
    ///     Decision::GiveUp(GiveUp::RepeatedThrottle) // the third 429 in a row
    /// );
    /// ```
    #[must_use]
    pub fn give_up_after_throttles(mut self, n: u32) -> Self {
        self.give_up_after_throttles = n;
        self
    }

    /// The schedule's delay before retry `retry` (0 for the first), without jitter:
    /// `min(base × 2^retry, max_delay)`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let policy = tollgate_client::RetryPolicy::new();
    /// assert_eq!(policy.backoff(1), Duration::from_millis(200));
    /// assert_eq!(policy.backoff(u32::MAX), Duration::from_secs(10));
    /// ```
    pub fn backoff(&self, retry: u32) -> Duration {
        let factor = 1u32.checked_shl(retry).unwrap_or(u32::MAX);
        self.base.saturating_mul(factor).min(self.max_delay)
    }

    /// The delay before retry `retry` with `unit` (in `[0, 1)`, clamped) as the random
    /// draw: `backoff(retry) × (1 − jitter × unit)`. Deterministic, for tests and for callers
    /// with their own randomness.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let policy = tollgate_client::RetryPolicy::new().jitter(0.5);
    /// assert_eq!(policy.jittered(0, 0.0), Duration::from_millis(100));
    /// assert_eq!(policy.jittered(0, 0.5), Duration::from_millis(75));
    /// ```
    pub fn jittered(&self, retry: u32, unit: f64) -> Duration {
        let unit = if unit.is_nan() {
            0.0
        } else {
            unit.clamp(0.0, 1.0)
        };
        self.backoff(retry).mul_f64(1.0 - self.jitter * unit)
    }

    /// A fresh state for one request.
    ///
    /// # Examples
    ///
    /// ```
    /// let policy = tollgate_client::RetryPolicy::new();
    /// assert_eq!(policy.start().retries(), 0);
    /// ```
    pub fn start(&self) -> RetryState {
        RetryState::default()
    }

    /// Decides after a failed attempt, and counts the retry in `state` if there is one. The
    /// jitter comes from a thread-local PRNG; see [`decide_with`](RetryPolicy::decide_with).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate_client::{Decision, Failure, GiveUp, RetryPolicy};
    ///
    /// let policy = RetryPolicy::new();
    /// let mut state = policy.start();
    /// let throttled = Failure::Throttled { retry_after: None };
    /// assert!(matches!(policy.decide(&mut state, throttled), Decision::Retry(_)));
    /// assert_eq!(
    ///     policy.decide(&mut state, throttled),
    ///     Decision::GiveUp(GiveUp::RepeatedThrottle)
    /// );
    /// ```
    pub fn decide(&self, state: &mut RetryState, failure: Failure) -> Decision {
        self.decide_with(state, failure, fastrand::f64())
    }

    /// [`decide`](RetryPolicy::decide) with `unit` as the jitter's random draw.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate_client::{Decision, Failure, RetryPolicy};
    ///
    /// let policy = RetryPolicy::new().jitter(1.0);
    /// let d = policy.decide_with(&mut policy.start(), Failure::Transient { retry_after: None }, 0.25);
    /// assert_eq!(d, Decision::Retry(Duration::from_millis(75)));
    /// ```
    pub fn decide_with(&self, state: &mut RetryState, failure: Failure, unit: f64) -> Decision {
        match failure {
            Failure::Throttled { .. } => state.throttles_in_a_row += 1,
            Failure::Transient { .. } => state.throttles_in_a_row = 0,
        }
        if matches!(failure, Failure::Throttled { .. })
            && state.throttles_in_a_row >= self.give_up_after_throttles
        {
            return Decision::GiveUp(GiveUp::RepeatedThrottle);
        }
        if state.retries >= self.max_retries {
            return Decision::GiveUp(GiveUp::Exhausted);
        }
        let delay = match failure.retry_after() {
            Some(told) if told > self.max_retry_after => {
                return Decision::GiveUp(GiveUp::RetryAfterTooLong);
            }
            Some(told) => told,
            None => self.jittered(state.retries, unit),
        };
        state.retries += 1;
        Decision::Retry(delay)
    }

    /// Waits `delay` on tollgate's timer (no runtime needed).
    ///
    /// # Cancel safety
    ///
    /// Dropping it cancels the wait; nothing else is held.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// futures_executor::block_on(tollgate_client::RetryPolicy::sleep(Duration::from_millis(1)));
    /// ```
    pub fn sleep(delay: Duration) -> tollgate::timer::Sleep {
        tollgate::timer::sleep(delay)
    }
}
