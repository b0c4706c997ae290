//! What an admitted check answers: [`Admitted`] (the values for rate-limit headers) and its
//! [`Source`] (Redis, or which fault policy). A leaf: plain values that the engine, waits and
//! the public API all hand out, so they sit below all three.

use std::time::Duration;

/// Who decided an admission.
///
/// # Examples
///
/// ```
/// use tollgate_redis::Source;
///
/// assert_ne!(Source::Redis, Source::FailOpen);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Source {
    /// The script on the server: the fleet-wide decision.
    Redis,
    /// Redis was unavailable and the policy is
    /// [`FaultPolicy::FailOpen`](crate::FaultPolicy::FailOpen).
    FailOpen,
    /// Redis was unavailable and the local fallback limiter admitted
    /// ([`FaultPolicy::Local`](crate::FaultPolicy::Local),
    /// [`FaultPolicy::LocalShare`](crate::FaultPolicy::LocalShare)).
    Local,
}

/// An admitted check, with the values for rate-limit headers: the core's
/// [`tollgate::Admitted`] plus [`source`](Admitted::source) (who decided, Redis or a fault
/// policy). It converts into a [`tollgate::Admitted`] (`.into()`), so code written for the
/// core's admissions serves the fleet's too; that conversion cannot be undone on a core
/// limiter (nothing to give back).
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> redis::RedisResult<()> {
/// use tollgate_redis::Admitted;
///
/// fn headers(ok: &Admitted) -> [(&'static str, String); 3] {
///     [
///         ("RateLimit-Limit", ok.limit().to_string()),
///         ("RateLimit-Remaining", ok.remaining().to_string()),
///         ("RateLimit-Reset", ok.reset_after().as_secs().to_string()),
///     ]
/// }
/// # use tollgate::Quota;
/// # use tollgate_redis::{FaultPolicy, FleetLimiter};
/// # // No Redis on port 1: the check fails open, with the values Redis gives a first check.
/// # let client = redis::Client::open("redis://127.0.0.1:1/")?;
/// # let limiter = FleetLimiter::builder(Quota::per_minute(60))
/// #     .fault_policy(FaultPolicy::FailOpen)
/// #     .connect(client)
/// #     .await?;
/// let ok = limiter.check("alice").await.unwrap(); // a first request, 60 a minute
/// let values = headers(&ok).map(|(_, value)| value);
/// assert_eq!(values, ["60", "59", "1"]);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admitted {
    pub(crate) limit: u32,
    pub(crate) remaining: u32,
    pub(crate) reset_after: Duration,
    pub(crate) source: Source,
}

impl Admitted {
    /// The burst: how many cells the key may use at once (the `limit` header).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(limiter: tollgate_redis::FleetLimiter) {
    /// let ok = limiter.check("alice").await.unwrap();
    /// assert_eq!(ok.limit(), limiter.quota().burst());
    /// # }
    /// ```
    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// Single cells still admissible right now (the `remaining` header).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis::RedisResult<()> {
    /// # use tollgate::Quota;
    /// # use tollgate_redis::{FaultPolicy, FleetLimiter};
    /// # // Nothing listens on port 1 (`connect` is lazy): the local fallback decides.
    /// # let client = redis::Client::open("redis://127.0.0.1:1/")?;
    /// # let limiter = FleetLimiter::builder(Quota::per_second(5))
    /// #     .fault_policy(FaultPolicy::Local { nodes: 1 })
    /// #     .connect(client)
    /// #     .await?;
    /// let ok = limiter.check("alice").await.unwrap();
    /// assert_eq!(ok.remaining(), limiter.quota().burst() - 1); // a fresh key: one cell spent
    /// # Ok(()) }
    /// ```
    pub fn remaining(&self) -> u32 {
        self.remaining
    }

    /// How long until the key is back to a full burst (the `reset` header); also the key's
    /// TTL in Redis after an admission.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(limiter: tollgate_redis::FleetLimiter) {
    /// let ok = limiter.check("alice").await.unwrap();
    /// assert!(ok.reset_after() <= limiter.quota().interval() * limiter.quota().burst());
    /// # }
    /// ```
    pub fn reset_after(&self) -> Duration {
        self.reset_after
    }

    /// Who decided: Redis, or a fault policy.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis::RedisResult<()> {
    /// # // Nothing listens on port 1: `connect` is lazy.
    /// # let client = redis::Client::open("redis://127.0.0.1:1/")?;
    /// use tollgate::Quota;
    /// use tollgate_redis::{FaultPolicy, FleetLimiter, Source};
    ///
    /// let limiter = FleetLimiter::builder(Quota::per_second(5))
    ///     .fault_policy(FaultPolicy::FailOpen)
    ///     .connect(client) // a Redis that is away
    ///     .await?;
    /// let ok = limiter.check("alice").await.unwrap();
    /// assert_eq!(ok.source(), Source::FailOpen); // degraded: Redis did not decide
    /// # Ok(()) }
    /// ```
    pub fn source(&self) -> Source {
        self.source
    }
}

impl From<Admitted> for tollgate::Admitted {
    /// The same limit, remaining cells and reset time, as the core's type.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis::RedisResult<()> {
    /// # use tollgate::Quota;
    /// # use tollgate_redis::{FaultPolicy, FleetLimiter};
    /// # // Nothing listens on port 1 (`connect` is lazy): the local fallback decides.
    /// # let client = redis::Client::open("redis://127.0.0.1:1/")?;
    /// # let limiter = FleetLimiter::builder(Quota::per_second(5))
    /// #     .fault_policy(FaultPolicy::Local { nodes: 1 })
    /// #     .connect(client)
    /// #     .await?;
    /// fn headers(ok: tollgate::Admitted) -> String {
    ///     format!("limit={}, remaining={}", ok.limit(), ok.remaining())
    /// }
    /// let ok = limiter.check("alice").await.unwrap(); // a first check, 5 a second
    /// assert_eq!(headers(ok.into()), "limit=5, remaining=4");
    /// # Ok(()) }
    /// ```
    fn from(ok: Admitted) -> tollgate::Admitted {
        tollgate::Admitted::from_parts(ok.limit, ok.remaining, ok.reset_after)
    }
}
