//! [`RetryPolicy`]: exponential backoff with jitter, capped, that listens to the server's
//! `Retry-After` and gives up on a repeated 429. Nothing here knows HTTP: the caller says
//! what went wrong with a [`Failure`]. Which errors of the wrapped client are worth a retry
//! is [`is_transient_error`]'s call, widened by [`RetryPolicy::retry_errors_if`].

use std::error::Error;
use std::fmt;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderMap, Method};

use crate::budget::RetryBudget;

/// A user's rule for errors that [`is_transient_error`] does not retry.
type ErrorHook = dyn Fn(&(dyn Error + 'static)) -> bool + Send + Sync;

/// The `std::io::Error` kinds a second attempt may get past: the peer refused or dropped
/// the connection, or it timed out.
const TRANSIENT_KINDS: [io::ErrorKind; 6] = [
    io::ErrorKind::ConnectionRefused,
    io::ErrorKind::ConnectionReset,
    io::ErrorKind::ConnectionAborted,
    io::ErrorKind::TimedOut,
    io::ErrorKind::BrokenPipe,
    io::ErrorKind::UnexpectedEof,
];

/// Whether an error of the wrapped client may pass on a second attempt: some error in its
/// [`source`](Error::source) chain (itself included, and the payload of an `io::Error`) is
/// a `std::io::Error` of kind
/// `ConnectionRefused`, `ConnectionReset`, `ConnectionAborted`, `TimedOut`, `BrokenPipe` or
/// `UnexpectedEof`, or (feature `reqwest`) a `reqwest::Error` that
/// [`is_timeout`](https://docs.rs/reqwest/0.12/reqwest/struct.Error.html#method.is_timeout).
///
/// Anything else is not: a DNS failure, a TLS error, an invalid URI, a body error, and
/// every error this function does not know. reqwest's `is_connect()` is true of DNS and
/// TCP failures alike (hyper-util's connect error is private), so a connect error counts
/// only through the `io::Error` under it: a refused TCP connect is `ConnectionRefused`,
/// while a failed name lookup is a kind of its own and TLS errors are `InvalidData` or
/// `Other`. [`RetryPolicy::retry_errors_if`] adds errors of your own.
///
/// # Examples
///
/// ```
/// use std::io;
/// use tollgate_client::is_transient_error;
///
/// let refused = io::Error::new(io::ErrorKind::ConnectionRefused, "refused");
/// assert!(is_transient_error(&refused));
/// let wrapped = io::Error::other(refused); // found down the source chain
/// assert!(is_transient_error(&wrapped));
/// let denied = io::Error::new(io::ErrorKind::PermissionDenied, "denied");
/// assert!(!is_transient_error(&denied));
/// ```
pub fn is_transient_error(err: &(dyn Error + 'static)) -> bool {
    let mut next = Some(err);
    while let Some(e) = next {
        if let Some(io) = e.downcast_ref::<io::Error>() {
            if TRANSIENT_KINDS.contains(&io.kind()) {
                return true;
            }
            // An io::Error's `source` is its payload's source, so the payload (an io::Error
            // wrapped as `Other`, say) is looked at on its own.
            if let Some(inner) = io.get_ref() {
                next = Some(inner);
                continue;
            }
        }
        #[cfg(feature = "reqwest")]
        if let Some(re) = e.downcast_ref::<reqwest::Error>() {
            if re.is_timeout() {
                return true;
            }
        }
        next = e.source();
    }
    false
}

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
/// * At most [`max_retries`](RetryPolicy::max_retries) retries in all, and in the client
///   layer, a host's retries within its [`RetryBudget`] (on by default; see
///   [`budget`](RetryPolicy::budget), [`no_budget`](RetryPolicy::no_budget)).
/// * An error of the wrapped client is retried only if [`retries_error`](RetryPolicy::retries_error)
///   says so: a refused, reset or timed-out connection ([`is_transient_error`]), or what your
///   [`retry_errors_if`](RetryPolicy::retry_errors_if) hook accepts.
///
/// Which requests may be retried at all is [`retries_method`](RetryPolicy::retries_method)'s
/// rule: GET, HEAD and OPTIONS by default; PUT, DELETE and a POST carrying an
/// `Idempotency-Key` header only after [`retry_writes`](RetryPolicy::retry_writes). Never a
/// 4xx other than 429 and a 403 that refuses for rate
/// ([`Verdict::Throttled`](crate::Verdict::Throttled)): the client layer applies that.
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
#[derive(Clone)]
pub struct RetryPolicy {
    max_retries: u32,
    base: Duration,
    max_delay: Duration,
    jitter: f64,
    max_retry_after: Duration,
    give_up_after_throttles: u32,
    retry_errors_if: Option<Arc<ErrorHook>>,
    budget: Option<RetryBudget>,
    writes: bool,
}

impl fmt::Debug for RetryPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryPolicy")
            .field("max_retries", &self.max_retries)
            .field("base", &self.base)
            .field("max_delay", &self.max_delay)
            .field("jitter", &self.jitter)
            .field("max_retry_after", &self.max_retry_after)
            .field("give_up_after_throttles", &self.give_up_after_throttles)
            .field("retry_errors_if", &self.retry_errors_if.is_some())
            .field("budget", &self.budget)
            .field("writes", &self.writes)
            .finish()
    }
}

/// Equal settings; two hooks are equal only if they are the same one (clones of a policy).
impl PartialEq for RetryPolicy {
    fn eq(&self, other: &Self) -> bool {
        let hooks = match (&self.retry_errors_if, &other.retry_errors_if) {
            (None, None) => true,
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        };
        hooks
            && self.max_retries == other.max_retries
            && self.base == other.base
            && self.max_delay == other.max_delay
            && self.jitter == other.jitter
            && self.max_retry_after == other.max_retry_after
            && self.give_up_after_throttles == other.give_up_after_throttles
            && self.budget == other.budget
            && self.writes == other.writes
    }
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy::new()
    }
}

impl RetryPolicy {
    /// The defaults: 3 retries, base 100 ms, delays capped at 10 s, jitter 0.5, a
    /// `Retry-After` of up to 60 s honoured, giving up on the second 429 in a row; in the
    /// client layer, a host's retries within the default [`RetryBudget`] (20 % of its
    /// first attempts over 10 s, plus 1 per second).
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
            retry_errors_if: None,
            budget: Some(RetryBudget::default()),
            writes: false,
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

    /// Also retries PUT and DELETE requests, and POST requests that carry an
    /// `Idempotency-Key` header (the server then answers a repeat with the first outcome);
    /// off by default. Idempotent by RFC 9110, PUT and DELETE are still writes: retry them
    /// only if the server's handlers are, and a POST only if the server honours the key.
    /// A POST without the key, PATCH and other methods are never retried.
    ///
    /// # Examples
    ///
    /// ```
    /// use http::{HeaderMap, Method};
    /// use tollgate_client::RetryPolicy;
    ///
    /// let mut keyed = HeaderMap::new();
    /// keyed.insert("idempotency-key", "8e03978e-40d5-43e8".parse().unwrap());
    /// let none = HeaderMap::new();
    /// let default = RetryPolicy::new();
    /// assert!(!default.retries_method(&Method::PUT, &none));
    /// let writes = RetryPolicy::new().retry_writes(true);
    /// assert!(writes.retries_method(&Method::PUT, &none));
    /// assert!(writes.retries_method(&Method::DELETE, &none));
    /// assert!(writes.retries_method(&Method::POST, &keyed));
    /// assert!(!writes.retries_method(&Method::POST, &none)); // no key: never
    /// ```
    #[must_use]
    pub fn retry_writes(mut self, on: bool) -> Self {
        self.writes = on;
        self
    }

    /// Whether a request of `method` with `headers` may be retried at all: GET, HEAD and
    /// OPTIONS always; with [`retry_writes`](RetryPolicy::retry_writes), PUT, DELETE and a
    /// POST with an `Idempotency-Key` header.
    ///
    /// # Examples
    ///
    /// ```
    /// use http::{HeaderMap, Method};
    ///
    /// let policy = tollgate_client::RetryPolicy::new();
    /// assert!(policy.retries_method(&Method::GET, &HeaderMap::new()));
    /// assert!(!policy.retries_method(&Method::DELETE, &HeaderMap::new()));
    /// ```
    pub fn retries_method(&self, method: &Method, headers: &HeaderMap) -> bool {
        match *method {
            Method::GET | Method::HEAD | Method::OPTIONS => true,
            Method::PUT | Method::DELETE => self.writes,
            Method::POST => self.writes && headers.contains_key("idempotency-key"),
            _ => false,
        }
    }

    /// Caps each host's retries at `budget` (the client layer keeps the count per host).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate_client::{RetryBudget, RetryPolicy};
    ///
    /// let policy = RetryPolicy::new().budget(RetryBudget::new(0.1));
    /// assert_eq!(policy.retry_budget(), Some(RetryBudget::new(0.1)));
    /// ```
    #[must_use]
    pub fn budget(mut self, budget: RetryBudget) -> Self {
        self.budget = Some(budget);
        self
    }

    /// No retry budget: each request is retried up to [`max_retries`](RetryPolicy::max_retries)
    /// times whatever the host's other requests did (a host failing everything then gets
    /// `1 + max_retries` times its load).
    ///
    /// # Examples
    ///
    /// ```
    /// let policy = tollgate_client::RetryPolicy::new().no_budget();
    /// assert_eq!(policy.retry_budget(), None);
    /// ```
    #[must_use]
    pub fn no_budget(mut self) -> Self {
        self.budget = None;
        self
    }

    /// The retry budget, if any.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate_client::{RetryBudget, RetryPolicy};
    /// assert_eq!(RetryPolicy::new().retry_budget(), Some(RetryBudget::default()));
    /// ```
    pub fn retry_budget(&self) -> Option<RetryBudget> {
        self.budget
    }

    /// Also retries the errors of the wrapped client for which `f` is true, beyond those
    /// [`is_transient_error`] retries (which `f` cannot veto). `f` sees the error as the
    /// client returned it; walk its [`source`](Error::source) chain for what it wraps. The
    /// retries still follow the schedule, the retry limit and (in the client layer) the
    /// method rule.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::io;
    /// use tollgate_client::RetryPolicy;
    ///
    /// let unreachable = io::Error::new(io::ErrorKind::NetworkUnreachable, "no route");
    /// assert!(!RetryPolicy::new().retries_error(&unreachable)); // not by default
    /// let policy = RetryPolicy::new().retry_errors_if(|err| {
    ///     err.downcast_ref::<io::Error>()
    ///         .is_some_and(|e| e.kind() == io::ErrorKind::NetworkUnreachable)
    /// });
    /// assert!(policy.retries_error(&unreachable));
    /// ```
    #[must_use]
    pub fn retry_errors_if<F>(mut self, f: F) -> Self
    where
        F: Fn(&(dyn Error + 'static)) -> bool + Send + Sync + 'static,
    {
        self.retry_errors_if = Some(Arc::new(f));
        self
    }

    /// Whether an error of the wrapped client is worth a retry: [`is_transient_error`], or
    /// the [`retry_errors_if`](RetryPolicy::retry_errors_if) hook.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::io;
    /// use tollgate_client::RetryPolicy;
    ///
    /// let policy = RetryPolicy::new();
    /// assert!(policy.retries_error(&io::Error::from(io::ErrorKind::ConnectionReset)));
    /// assert!(!policy.retries_error(&io::Error::from(io::ErrorKind::InvalidInput)));
    /// ```
    pub fn retries_error(&self, err: &(dyn Error + 'static)) -> bool {
        is_transient_error(err) || self.retry_errors_if.as_ref().is_some_and(|f| f(err))
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
    /// use std::time::{Duration, Instant};
    ///
    /// let start = Instant::now();
    /// futures_executor::block_on(tollgate_client::RetryPolicy::sleep(Duration::from_millis(1)));
    /// assert!(start.elapsed() >= Duration::from_millis(1)); // never early
    /// ```
    pub fn sleep(delay: Duration) -> tollgate::timer::Sleep {
        tollgate::timer::sleep(delay)
    }
}
