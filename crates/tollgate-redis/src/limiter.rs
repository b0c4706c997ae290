//! The public face: [`FleetLimiter`] and its methods, with their documentation. Each method
//! delegates to the engine (`engine.rs`), which a wait ([`UntilReady`]) holds too; the
//! constructor, [`FleetLimiter::builder`], is in `builder.rs`, which builds a `FleetLimiter`
//! and so sits above this file.

use std::sync::Arc;
use std::time::Duration;

use tollgate::{Error, Quota};

use crate::admitted::Admitted;
use crate::engine::{Engine, Op};
use crate::fault::Unavailable;
use crate::memory::MemoryPolicy;
use crate::stats::Stats;
use crate::wait::UntilReady;

/// One rate limit shared by a fleet: exact GCRA in a Lua script on Redis (or Valkey), with
/// a local fast path for keys Redis has refused, and a policy for when Redis is away.
///
/// Semantics are the core's ([`tollgate::Quota`]): over any window `W`, at most
/// `b + floor(W / T)` cells per key, fleet-wide, with `T` rounded up to whole microseconds
/// ([`interval_micros`](crate::interval_micros)). The clock is the server's `TIME`, so the
/// nodes' clocks never matter. A cheap `Clone`; clones share the connection, counters and
/// cache.
///
/// # Examples
///
/// ```no_run
/// # async fn f() -> redis::RedisResult<()> {
/// use tollgate::Quota;
/// use tollgate_redis::FleetLimiter;
///
/// let client = redis::Client::open("redis://127.0.0.1/")?;
/// let limiter = FleetLimiter::builder(Quota::per_second(5)).connect(client).await?;
/// match limiter.check("203.0.113.9").await {
///     Ok(ok) => assert!(ok.remaining() < ok.limit()), // 200 OK: one of the 5 spent
///     Err(e) => assert!(e.retry_after().is_some()),   // 429, with a Retry-After
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct FleetLimiter {
    pub(crate) inner: Arc<Engine>,
}

impl FleetLimiter {
    /// The default quota.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis::RedisResult<()> {
    /// # // Nothing listens on port 1: `connect` is lazy.
    /// # let client = redis::Client::open("redis://127.0.0.1:1/")?;
    /// use std::time::Duration;
    /// use tollgate::Quota;
    /// use tollgate_redis::FleetLimiter;
    ///
    /// let limiter = FleetLimiter::builder(Quota::per_second(5)).connect(client).await?;
    /// assert_eq!(limiter.quota().burst(), 5);
    /// assert_eq!(limiter.quota().interval(), Duration::from_millis(200));
    /// # Ok(()) }
    /// ```
    pub fn quota(&self) -> Quota {
        self.inner.quota
    }

    /// The Redis key that holds `key`'s state: the prefix, then `key`'s bytes. A key that
    /// starts with a NUL byte gets a second one before it, so that no key lands on the
    /// limiter's own keys (the presence set of [`FaultPolicy::LocalShare`](crate::FaultPolicy),
    /// `prefix + "\0{fleet}"`), whatever a client calls itself.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(limiter: tollgate_redis::FleetLimiter) {
    /// assert_eq!(limiter.redis_key("alice"), b"tollgate:alice".to_vec()); // default prefix
    /// assert_eq!(limiter.redis_key("{fleet}"), b"tollgate:{fleet}".to_vec());
    /// assert_eq!(limiter.redis_key("\0x"), b"tollgate:\0\0x".to_vec());
    /// # }
    /// ```
    pub fn redis_key(&self, key: impl AsRef<[u8]>) -> Vec<u8> {
        self.inner.redis_key(key.as_ref())
    }

    /// Admits one cell for `key` under the default quota, or refuses.
    ///
    /// # Errors
    ///
    /// [`Error::RateLimited`] when the fleet is over the key's rate (or the local fast path knows
    /// it is, or Redis is away under [`FaultPolicy::FailClosed`](crate::FaultPolicy::FailClosed) or
    /// an exhausted [`FaultPolicy::Local`](crate::FaultPolicy::Local)). `earliest` is on
    /// [`tollgate::MonotonicClock`]'s timeline.
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
    /// # let limiter = FleetLimiter::builder(Quota::per_minute(1))
    /// #     .fault_policy(FaultPolicy::Local { nodes: 1 })
    /// #     .connect(client)
    /// #     .await?;
    /// use std::time::Duration;
    ///
    /// // `limiter` allows 1 a minute: the first check is admitted, the next refused.
    /// assert_eq!(limiter.check("alice").await.unwrap().remaining(), 0);
    /// let e = limiter.check("alice").await.unwrap_err();
    /// assert!(e.retry_after().unwrap() > Duration::from_secs(50)); // a minute off
    /// # Ok(()) }
    /// ```
    pub async fn check(&self, key: impl AsRef<[u8]>) -> Result<Admitted, Error> {
        self.inner
            .decide(key.as_ref(), 1, self.inner.quota, Op::Check)
            .await
    }

    /// Admits `n` cells for `key` at once, or none.
    ///
    /// # Errors
    ///
    /// As [`check`](Self::check), and [`Error::InsufficientCapacity`] (without a round trip) if `n`
    /// exceeds the burst. `n = 0` is admitted and spends nothing, whatever the key's state (never
    /// refused by the local fast path, never served from a lease); while Redis is away the fault
    /// policy answers it, and [`FaultPolicy::FailClosed`](crate::FaultPolicy::FailClosed) refuses
    /// it.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(limiter: tollgate_redis::FleetLimiter) {
    /// let too_many = limiter.quota().burst() + 1;
    /// assert!(limiter.check_n("alice", too_many).await.unwrap_err().is_insufficient_capacity());
    /// # }
    /// ```
    pub async fn check_n(&self, key: impl AsRef<[u8]>, n: u32) -> Result<Admitted, Error> {
        self.inner
            .decide(key.as_ref(), n, self.inner.quota, Op::Check)
            .await
    }

    /// [`check`](Self::check) under `quota` for this call: one limiter for keys with
    /// different rates. The key's state carries over between quotas as time, as in the core.
    ///
    /// # Errors
    ///
    /// As [`check`](Self::check).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(limiter: tollgate_redis::FleetLimiter) {
    /// use tollgate::Quota;
    ///
    /// let paid = Quota::per_second(100);
    /// let ok = limiter.check_with("customer-42", paid).await.unwrap();
    /// assert_eq!(ok.limit(), 100);
    /// # }
    /// ```
    pub async fn check_with(&self, key: impl AsRef<[u8]>, quota: Quota) -> Result<Admitted, Error> {
        self.inner.decide(key.as_ref(), 1, quota, Op::Check).await
    }

    /// [`check_n`](Self::check_n) under `quota` for this call.
    ///
    /// # Errors
    ///
    /// As [`check_n`](Self::check_n).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis::RedisResult<()> {
    /// # use tollgate_redis::{FaultPolicy, FleetLimiter};
    /// # // Nothing listens on port 1 (`connect` is lazy): the local fallback decides.
    /// # let client = redis::Client::open("redis://127.0.0.1:1/")?;
    /// # let limiter = FleetLimiter::builder(Quota::per_second(5))
    /// #     .fault_policy(FaultPolicy::Local { nodes: 1 })
    /// #     .connect(client)
    /// #     .await?;
    /// use tollgate::Quota;
    ///
    /// let upload = Quota::per_second(1_000); // bytes/s, say
    /// let ok = limiter.check_n_with("uploader", 512, upload).await.unwrap();
    /// assert_eq!((ok.limit(), ok.remaining()), (1_000, 488)); // a fresh key: 512 spent
    /// # Ok(()) }
    /// ```
    pub async fn check_n_with(
        &self,
        key: impl AsRef<[u8]>,
        n: u32,
        quota: Quota,
    ) -> Result<Admitted, Error> {
        self.inner.decide(key.as_ref(), n, quota, Op::Check).await
    }

    /// Waits until the fleet admits one cell for `key` under the default quota: the cell is
    /// reserved on the server in one round trip, then waited for here on tollgate's own
    /// timer (see [`UntilReady`] for cancellation). Bound it with
    /// [`within`](UntilReady::within).
    ///
    /// # Errors
    ///
    /// [`Error::RateLimited`] if bounded and the cell is further off than the bound (nothing is
    /// reserved), or Redis is away under
    /// [`FaultPolicy::FailClosed`](crate::FaultPolicy::FailClosed) (or the local fallback's bounded
    /// wait is too long, or, bounded or not, the call asks more cells than this node's share
    /// of the burst: [`FaultPolicy::Local`](crate::FaultPolicy::Local)).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future gives the reserved cell back when the key still holds exactly
    /// what the reservation wrote ([`UntilReady`]).
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
    /// let ok = limiter.until_ready("alice").await.unwrap();
    /// assert_eq!((ok.limit(), ok.remaining()), (5, 4)); // a cell spent
    /// # Ok(()) }
    /// ```
    pub fn until_ready(&self, key: impl AsRef<[u8]>) -> UntilReady {
        UntilReady::new(
            Arc::clone(&self.inner),
            key.as_ref().to_vec(),
            1,
            self.inner.quota,
        )
    }

    /// [`until_ready`](Self::until_ready) for `n` cells at once.
    ///
    /// # Errors
    ///
    /// As [`until_ready`](Self::until_ready), and [`Error::InsufficientCapacity`] (without a round
    /// trip) if `n` exceeds the burst. `n = 0` never waits: it is answered at once as
    /// [`check_n`](Self::check_n) answers it (admitted, spending nothing; while Redis is away, by
    /// the fault policy, which under [`FaultPolicy::FailClosed`](crate::FaultPolicy::FailClosed)
    /// refuses it).
    ///
    /// # Cancel safety
    ///
    /// As [`until_ready`](Self::until_ready).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(limiter: tollgate_redis::FleetLimiter) {
    /// use std::time::Duration;
    ///
    /// let four = limiter.until_n_ready("uploader", 4).within(Duration::from_secs(1));
    /// let ok = four.await.unwrap();
    /// assert!(ok.remaining() + 4 <= ok.limit()); // the four cells are spent
    /// let too_many = limiter.quota().burst() + 1;
    /// let err = limiter.until_n_ready("uploader", too_many).await.unwrap_err();
    /// assert!(err.is_insufficient_capacity()); // never admissible: refused at once
    /// # }
    /// ```
    pub fn until_n_ready(&self, key: impl AsRef<[u8]>, n: u32) -> UntilReady {
        UntilReady::new(
            Arc::clone(&self.inner),
            key.as_ref().to_vec(),
            n,
            self.inner.quota,
        )
    }

    /// [`until_n_ready`](Self::until_n_ready) under `quota` for this call.
    ///
    /// # Errors
    ///
    /// As [`until_n_ready`](Self::until_n_ready).
    ///
    /// # Cancel safety
    ///
    /// As [`until_ready`](Self::until_ready).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis::RedisResult<()> {
    /// # use tollgate_redis::{FaultPolicy, FleetLimiter};
    /// # // Nothing listens on port 1 (`connect` is lazy): the local fallback decides.
    /// # let client = redis::Client::open("redis://127.0.0.1:1/")?;
    /// # let limiter = FleetLimiter::builder(Quota::per_second(5))
    /// #     .fault_policy(FaultPolicy::Local { nodes: 1 })
    /// #     .connect(client)
    /// #     .await?;
    /// use tollgate::Quota;
    ///
    /// let paid = Quota::per_second(100);
    /// let ok = limiter.until_n_ready_with("customer-42", 1, paid).await.unwrap();
    /// assert_eq!(ok.limit(), 100); // the burst of this call's quota
    /// # Ok(()) }
    /// ```
    pub fn until_n_ready_with(&self, key: impl AsRef<[u8]>, n: u32, quota: Quota) -> UntilReady {
        UntilReady::new(Arc::clone(&self.inner), key.as_ref().to_vec(), n, quota)
    }

    /// Answers as [`check`](Self::check) would, spending nothing.
    ///
    /// # Errors
    ///
    /// As [`check`](Self::check).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(limiter: tollgate_redis::FleetLimiter) {
    /// let before = limiter.peek("alice").await.unwrap().remaining();
    /// assert_eq!(limiter.peek("alice").await.unwrap().remaining(), before);
    /// # }
    /// ```
    pub async fn peek(&self, key: impl AsRef<[u8]>) -> Result<Admitted, Error> {
        self.inner
            .decide(key.as_ref(), 1, self.inner.quota, Op::Peek)
            .await
    }

    /// [`peek`](Self::peek) under `quota` for this call.
    ///
    /// # Errors
    ///
    /// As [`check`](Self::check).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(limiter: tollgate_redis::FleetLimiter) {
    /// use tollgate::Quota;
    ///
    /// let ok = limiter.peek_with("alice", Quota::per_minute(10)).await.unwrap();
    /// assert_eq!(ok.limit(), 10); // the burst of this call's quota
    /// # }
    /// ```
    pub async fn peek_with(&self, key: impl AsRef<[u8]>, quota: Quota) -> Result<Admitted, Error> {
        self.inner.decide(key.as_ref(), 1, quota, Op::Peek).await
    }

    /// The server's `maxmemory-policy` (`CONFIG GET`), and so whether it may forget the limiter's
    /// keys ([`MemoryPolicy`]). [`FleetBuilder::connect`](crate::FleetBuilder::connect) asks once,
    /// in the background, and logs a `tracing` warning for an evicting policy.
    ///
    /// # Errors
    ///
    /// [`Unavailable`] if Redis did not answer in time, the connection failed, or the server
    /// refused the client's credentials (`NOAUTH`, a wrong password); a server that refuses
    /// `CONFIG` (an ACL, a renamed command) is [`MemoryPolicy::Unknown`], not an error.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(limiter: tollgate_redis::FleetLimiter) {
    /// use tollgate_redis::MemoryPolicy;
    ///
    /// assert_eq!(limiter.memory_policy().await.unwrap(), MemoryPolicy::NoEviction);
    /// # }
    /// ```
    pub async fn memory_policy(&self) -> Result<MemoryPolicy, Unavailable> {
        crate::memory::ask(self.inner.server.link.get().0, self.inner.server.timeout).await
    }

    /// Forgets `key` in Redis (its next request is its first), in this node's fast path and
    /// in its local fallback. Returns whether Redis held state for it. Another node's fast
    /// path may still refuse the key until the bound it cached passes (at most the key's
    /// wait at the time that node cached it).
    ///
    /// # Errors
    ///
    /// [`Unavailable`] if Redis did not answer in time or failed.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(limiter: tollgate_redis::FleetLimiter) {
    /// limiter.reset("alice").await.unwrap();
    /// assert!(limiter.check("alice").await.is_ok());
    /// # }
    /// ```
    pub async fn reset(&self, key: impl AsRef<[u8]>) -> Result<bool, Unavailable> {
        self.inner.reset(key.as_ref()).await
    }

    /// Pushes `key`'s next admission at least `delay` from now (on the server's clock),
    /// keeping any later one, under the default quota: for abuse escalation, or to honour an
    /// upstream's `Retry-After`. Delays beyond 2^49 µs (about 17 years) saturate.
    ///
    /// # Errors
    ///
    /// [`Unavailable`] if Redis did not answer in time or failed.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(limiter: tollgate_redis::FleetLimiter) {
    /// use std::time::Duration;
    ///
    /// limiter.penalize("abuser", Duration::from_secs(30)).await.unwrap();
    /// let wait = limiter.check("abuser").await.unwrap_err().retry_after().unwrap();
    /// assert!(wait > Duration::from_secs(29));
    /// # }
    /// ```
    pub async fn penalize(
        &self,
        key: impl AsRef<[u8]>,
        delay: Duration,
    ) -> Result<(), Unavailable> {
        self.penalize_with(key, delay, self.inner.quota).await
    }

    /// [`penalize`](Self::penalize) under `quota`: the TAT is set so that a single cell under
    /// `quota` waits `delay`.
    ///
    /// # Errors
    ///
    /// As [`penalize`](Self::penalize).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(limiter: tollgate_redis::FleetLimiter) {
    /// use std::time::Duration;
    /// use tollgate::Quota;
    ///
    /// let tier = Quota::per_second(50);
    /// limiter.penalize_with("abuser", Duration::from_secs(5), tier).await.unwrap();
    /// let wait = limiter.check_with("abuser", tier).await.unwrap_err().retry_after().unwrap();
    /// assert!(wait > Duration::from_secs(4));
    /// # }
    /// ```
    pub async fn penalize_with(
        &self,
        key: impl AsRef<[u8]>,
        delay: Duration,
        quota: Quota,
    ) -> Result<(), Unavailable> {
        self.inner.penalize(key.as_ref(), delay, quota).await
    }

    /// The counters since the limiter was built.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(limiter: tollgate_redis::FleetLimiter) {
    /// let before = limiter.stats().round_trips;
    /// let _ = limiter.check("alice").await;
    /// assert!(limiter.stats().round_trips <= before + 1);
    /// # }
    /// ```
    pub fn stats(&self) -> Stats {
        self.inner.stats()
    }

    /// Gives back every leased cell this node holds
    /// ([`FleetBuilder::lease`](crate::FleetBuilder::lease)), expired or not: for a node shutting
    /// down, or a key going quiet. Each lease is given back only if its key still holds exactly the
    /// TAT the lease stored (compare and restore); the rest are lost. Returns how many cells were
    /// given back. Without leasing, returns 0 at once.
    ///
    /// # Errors
    ///
    /// [`Unavailable`] if Redis did not answer in time or failed; the cells not yet given
    /// back by then are lost (counted in [`Stats::expired_unspent`]).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis::RedisResult<()> {
    /// # // Nothing listens on port 1: `connect` is lazy.
    /// # let client = redis::Client::open("redis://127.0.0.1:1/")?;
    /// use tollgate::Quota;
    /// use tollgate_redis::FleetLimiter;
    ///
    /// let limiter = FleetLimiter::builder(Quota::per_second(5)).connect(client).await?;
    /// // No leasing: nothing to give back, and no call to Redis.
    /// assert_eq!(limiter.return_leases().await.unwrap(), 0);
    /// assert_eq!(limiter.stats().round_trips, 0);
    /// # Ok(()) }
    /// ```
    pub async fn return_leases(&self) -> Result<u64, Unavailable> {
        self.inner.return_leases().await
    }
}
