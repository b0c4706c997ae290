//! [`FleetLimiter`], its builder, the fault policy and what a check answers.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Client, RedisError};
use tollgate::{Clock, Error, Limiter, MonotonicClock, Quota};

use crate::admitted::{Admitted, Source};
use crate::breaker::Breaker;
use crate::cache::{LocalCache, Lookup, ProbeGuard};
use crate::fault::{FaultPolicy, Unavailable, share};
use crate::lease::{Lease, LeaseStore, Spend};
use crate::memory::MemoryPolicy;
use crate::presence::Presence;
use crate::script::{Reply, interval_micros, micros_ceil};
use crate::server::{Arg, Server};
use crate::stats::{Counters, Stats, add, bump};
use crate::wait::UntilReady;

/// Builds a [`FleetLimiter`].
///
/// # Examples
///
/// ```no_run
/// # async fn f() -> redis::RedisResult<()> {
/// use std::time::Duration;
/// use tollgate::Quota;
/// use tollgate_redis::{FaultPolicy, FleetLimiter};
///
/// let client = redis::Client::open("redis://127.0.0.1:6379/")?;
/// let limiter = FleetLimiter::builder(Quota::per_second(100))
///     .prefix("api:rl:")
///     .timeout(Duration::from_millis(50))
///     .fault_policy(FaultPolicy::Local { nodes: 8 })
///     .local_cache(10_000)
///     .connect(client)
///     .await?;
/// # let _ = limiter; Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct FleetBuilder {
    quota: Quota,
    prefix: Vec<u8>,
    timeout: Duration,
    policy: FaultPolicy,
    cache: usize,
    lease: Option<(u32, Duration)>,
    manager: Option<ConnectionManagerConfig>,
    /// Failures in a row that open the breaker (0: no breaker), and its cool-down.
    breaker: (u32, Duration),
    /// How often a node refreshes its presence entry ([`FaultPolicy::LocalShare`]).
    heartbeat: Duration,
}

impl FleetBuilder {
    /// The per-call timeout if none is set: 100 ms.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate_redis::FleetBuilder;
    ///
    /// assert_eq!(FleetBuilder::DEFAULT_TIMEOUT, Duration::from_millis(100));
    /// ```
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(100);

    /// The fast path's capacity in keys if none is set.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(tollgate_redis::FleetBuilder::DEFAULT_CACHE, 65_536);
    /// ```
    pub const DEFAULT_CACHE: usize = 65_536;

    /// The prefix of every Redis key (default `"tollgate:"`). A key `k` is stored as
    /// `prefix + k`, bytes as given. On Redis Cluster, each call touches one key, so any
    /// prefix works; put a hash tag in the *key* (`"{tenant}:user"`) to keep keys together.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f() -> redis::RedisResult<()> {
    /// use tollgate::Quota;
    /// use tollgate_redis::FleetLimiter;
    ///
    /// let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let limiter = FleetLimiter::builder(Quota::per_second(5)).prefix("rl:").connect(client).await?;
    /// assert_eq!(limiter.redis_key("alice"), b"rl:alice".to_vec());
    /// # Ok(()) }
    /// ```
    pub fn prefix(mut self, prefix: impl AsRef<[u8]>) -> Self {
        self.prefix = prefix.as_ref().to_vec();
        self
    }

    /// The circuit breaker if none is set: open after 5 failed calls in a row, for 1 s.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate_redis::FleetBuilder;
    ///
    /// assert_eq!(FleetBuilder::DEFAULT_BREAKER, (5, Duration::from_secs(1)));
    /// ```
    pub const DEFAULT_BREAKER: (u32, Duration) = (5, Duration::from_secs(1));

    /// The circuit breaker in front of Redis (default
    /// [`DEFAULT_BREAKER`](Self::DEFAULT_BREAKER)): after `failures` calls in a row fail
    /// (errors or timeouts), calls are not sent for `cool_down` and each is answered at once
    /// by the fault policy (as [`Unavailable::CircuitOpen`] where there is none); then one
    /// call probes Redis, and its answer closes the breaker, its failure opens it for
    /// another `cool_down`. Without it, while Redis does not answer every check waits out
    /// the timeout first. Counted in [`Stats::circuit_opened`] and
    /// [`Stats::short_circuited`]; a `tracing` warning when it opens. `failures = 0` turns
    /// it off.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::Quota;
    /// use tollgate_redis::FleetLimiter;
    ///
    /// let builder = FleetLimiter::builder(Quota::per_second(5))
    ///     .circuit_breaker(3, Duration::from_millis(500));
    /// # let _ = builder;
    /// ```
    pub fn circuit_breaker(mut self, failures: u32, cool_down: Duration) -> Self {
        self.breaker = (failures, cool_down);
        self
    }

    /// The timeout of each call to Redis (default [`DEFAULT_TIMEOUT`](Self::DEFAULT_TIMEOUT)).
    /// A call that times out is a fault; it may still have run on the server. A check of a
    /// key the fast path holds may first wait up to this long for another task's call on the
    /// same key (single flight), so while Redis does not answer, such a check can take up to
    /// twice the timeout before its fault policy decides.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::Quota;
    /// use tollgate_redis::FleetLimiter;
    ///
    /// let builder = FleetLimiter::builder(Quota::per_second(5)).timeout(Duration::from_millis(20));
    /// # let _ = builder;
    /// ```
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// How often this node refreshes its presence entry in Redis under
    /// [`FaultPolicy::LocalShare`] (default 1 s): a node counts the entries younger than three
    /// of these, so a stopped node drops out of the count within three heartbeats. Each
    /// heartbeat is one small call (a sorted set's `ZADD`, trim and count), in the background.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::Quota;
    /// use tollgate_redis::FleetLimiter;
    ///
    /// let builder = FleetLimiter::builder(Quota::per_second(5)).heartbeat(Duration::from_millis(500));
    /// # let _ = builder;
    /// ```
    pub fn heartbeat(mut self, every: Duration) -> Self {
        self.heartbeat = every;
        self
    }

    /// What a check does when Redis is unavailable (default [`FaultPolicy::default`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::Quota;
    /// use tollgate_redis::{FaultPolicy, FleetLimiter};
    ///
    /// let builder = FleetLimiter::builder(Quota::per_second(5)).fault_policy(FaultPolicy::FailOpen);
    /// # let _ = builder;
    /// ```
    pub fn fault_policy(mut self, policy: FaultPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// The fast path's capacity in keys (default [`DEFAULT_CACHE`](Self::DEFAULT_CACHE)); 0
    /// turns the fast path off, so every check is a round trip.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::Quota;
    /// use tollgate_redis::FleetLimiter;
    ///
    /// let every_check_asks_redis = FleetLimiter::builder(Quota::per_second(5)).local_cache(0);
    /// # let _ = every_check_asks_redis;
    /// ```
    pub fn local_cache(mut self, keys: usize) -> Self {
        self.cache = keys;
        self
    }

    /// Batching for hot keys (off by default): a check under the default quota that finds no
    /// leased cells here takes a *lease* of up to `cells` cells of its key from Redis in its
    /// one round trip (only cells available now, never a wait), spends one, and keeps the
    /// rest for later checks on this node, which need no round trip, until `max_hold` after
    /// the lease was sent. Unspent cells are then given back on the server if no one has
    /// written the key since (compare and restore), else lost. Per-call quotas (`*_with`)
    /// and waits do not use leases.
    ///
    /// **The bound it buys.** Over any window `W`, per key, fleet-wide, however many nodes
    /// lease: at most `b + floor((W + max_hold) / T)` cells are spent (instead of
    /// `b + floor(W / T)`): a cell is admitted by the server at its lease's instant and spent
    /// within `max_hold` of it. Also at most `b + floor(W / T) + H`, where `H` is the leased
    /// cells the nodes hold unspent when the window opens (at most `cells - 1` per node and
    /// key, as the check that takes a lease spends from it at once, unless several tasks of
    /// a node take leases of a key at the same moment). The other way, while leases hold
    /// unspent cells the fleet may refuse: at most `cells` per node per key at any instant,
    /// and a lease whose give-back is declined leaves the key at most `cells·T` late until
    /// it goes idle. With Redis away, leased cells are still spent until they expire (they
    /// were admitted), then the fault policy decides; they cannot be given back. `cells` is
    /// capped at the burst; `cells` of 0 or 1, or a zero `max_hold`, turn leasing off.
    /// [`peek`](FleetLimiter::peek) answers from a lease held here without a round trip;
    /// `remaining` counts this node's leased cells (plus, on the check that took the lease,
    /// what the server had left). The
    /// store holds leases for at most [`local_cache`](Self::local_cache) keys (at least
    /// 1,024). Derivation: `src/lease.rs`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::Quota;
    /// use tollgate_redis::FleetLimiter;
    ///
    /// // 1,000/s; a node takes 10 cells at a time and spends them within 20 ms: over any
    /// // window W, at most b + floor((W + 20 ms) / 1 ms) per key.
    /// let builder = FleetLimiter::builder(Quota::per_second(1_000).allow_burst(50))
    ///     .lease(10, Duration::from_millis(20));
    /// # let _ = builder;
    /// ```
    pub fn lease(mut self, cells: u32, max_hold: Duration) -> Self {
        self.lease = (cells > 1 && !max_hold.is_zero()).then_some((cells, max_hold));
        self
    }

    /// The connection manager's configuration (reconnection back-off and so on). By default
    /// its response and connection timeouts are the per-call timeout, and it retries a
    /// reconnection a few times with a back-off capped at one second; later calls start a new
    /// reconnection.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use redis::aio::ConnectionManagerConfig;
    /// use tollgate::Quota;
    /// use tollgate_redis::FleetLimiter;
    ///
    /// let config = ConnectionManagerConfig::new().set_max_delay(Duration::from_millis(200));
    /// let builder = FleetLimiter::builder(Quota::per_second(5)).connection_manager(config);
    /// # let _ = builder;
    /// ```
    pub fn connection_manager(mut self, config: ConnectionManagerConfig) -> Self {
        self.manager = Some(config);
        self
    }

    /// Builds the limiter on `client`, with a connection of its own (clones of the limiter
    /// share it). Connects lazily: Redis need not be up yet, and until it is, checks follow
    /// the fault policy. Built inside a Tokio runtime, the connection runs on it; elsewhere
    /// it needs the `smol-comp` feature, and runs on smol's reactor.
    ///
    /// # Errors
    ///
    /// A [`RedisError`] if the client's configuration is refused.
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
    /// # let _ = limiter; Ok(()) }
    /// ```
    pub async fn connect(self, client: Client) -> Result<FleetLimiter, RedisError> {
        let config = self.manager.unwrap_or_else(|| {
            ConnectionManagerConfig::new()
                .set_response_timeout(Some(self.timeout))
                .set_connection_timeout(Some(self.timeout))
                .set_number_of_retries(3)
                .set_min_delay(Duration::from_millis(10))
                .set_max_delay(Duration::from_secs(1))
        });
        let conn = ConnectionManager::new_lazy_with_config(client, config)?;
        let fallback = match self.policy {
            FaultPolicy::Local { .. } | FaultPolicy::LocalShare => Some(Limiter::keyed(self.quota)),
            _ => None,
        };
        let limiter = FleetLimiter {
            inner: Arc::new(Inner {
                server: Server::new(
                    conn,
                    self.timeout,
                    (self.breaker.0 > 0).then(|| Breaker::new(self.breaker.0, self.breaker.1)),
                ),
                quota: self.quota,
                prefix: self.prefix,
                policy: self.policy,
                cache: (self.cache > 0).then(|| LocalCache::new(self.cache)),
                lease: self.lease.map(|(cells, max_hold)| Leasing {
                    cells: cells.min(self.quota.burst()),
                    max_hold,
                    store: LeaseStore::new(self.cache.max(1_024)),
                }),
                fallback,
                clock: MonotonicClock::new(),
                counters: Counters::default(),
                presence: (self.policy == FaultPolicy::LocalShare)
                    .then(|| Presence::new(self.heartbeat)),
            }),
        };
        if limiter.inner.presence.is_some() {
            let mut key = limiter.inner.prefix.clone();
            key.extend_from_slice(b"{fleet}");
            crate::rt::spawn(crate::presence::beat(Arc::downgrade(&limiter.inner), key));
        }
        // Say it once, at the start, if the server may forget keys (`MemoryPolicy`): in the
        // background, since the connection is lazy and a dead Redis must not fail `connect`.
        let probe = limiter.clone();
        crate::rt::spawn(async move {
            if let Ok(MemoryPolicy::Evicting(policy)) = probe.memory_policy().await {
                tracing::warn!(
                    "tollgate-redis: the server's maxmemory-policy is {policy}, which can evict \
                     the limiter's keys (they carry TTLs): an evicted key is admitted afresh, \
                     up to a burst over the limit. Use a Redis of its own or set \
                     maxmemory-policy noeviction (see tollgate_redis::MemoryPolicy)."
                );
            }
        });
        Ok(limiter)
    }
}

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
///     Ok(ok) => println!("200 OK ({} left)", ok.remaining()),
///     Err(e) => println!("429, Retry-After {:?}", e.retry_after()),
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct FleetLimiter {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) server: Server,
    pub(crate) quota: Quota,
    pub(crate) prefix: Vec<u8>,
    pub(crate) policy: FaultPolicy,
    pub(crate) cache: Option<LocalCache>,
    pub(crate) lease: Option<Leasing>,
    pub(crate) fallback: Option<Limiter<[u8]>>,
    pub(crate) clock: MonotonicClock,
    pub(crate) counters: Counters,
    /// This node's presence entry, under [`FaultPolicy::LocalShare`].
    pub(crate) presence: Option<Presence>,
}

/// Leasing's settings and store.
pub(crate) struct Leasing {
    pub(crate) cells: u32,
    pub(crate) max_hold: Duration,
    pub(crate) store: LeaseStore,
}

impl fmt::Debug for Inner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FleetLimiter")
            .field("quota", &self.quota)
            .field("prefix", &String::from_utf8_lossy(&self.prefix))
            .field("timeout", &self.server.timeout)
            .field("policy", &self.policy)
            .field("cache", &self.cache.is_some())
            .field("lease", &self.lease.as_ref().map(|l| (l.cells, l.max_hold)))
            .finish_non_exhaustive()
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    Check,
    Peek,
}

impl FleetLimiter {
    /// A builder for a limiter with `quota` as its default quota.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f() -> redis::RedisResult<()> {
    /// use tollgate::Quota;
    /// use tollgate_redis::FleetLimiter;
    ///
    /// let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let limiter = FleetLimiter::builder(Quota::per_minute(60)).connect(client).await?;
    /// # let _ = limiter; Ok(()) }
    /// ```
    pub fn builder(quota: Quota) -> FleetBuilder {
        FleetBuilder {
            quota,
            prefix: b"tollgate:".to_vec(),
            timeout: FleetBuilder::DEFAULT_TIMEOUT,
            policy: FaultPolicy::default(),
            cache: FleetBuilder::DEFAULT_CACHE,
            lease: None,
            manager: None,
            breaker: FleetBuilder::DEFAULT_BREAKER,
            heartbeat: Duration::from_secs(1),
        }
    }

    /// The default quota.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(limiter: tollgate_redis::FleetLimiter) {
    /// println!("{} per {:?}", limiter.quota().burst(), limiter.quota().interval());
    /// # }
    /// ```
    pub fn quota(&self) -> Quota {
        self.inner.quota
    }

    /// The Redis key that holds `key`'s state: the prefix, then `key`'s bytes.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(limiter: tollgate_redis::FleetLimiter) {
    /// assert_eq!(limiter.redis_key("alice"), b"tollgate:alice".to_vec()); // default prefix
    /// # }
    /// ```
    pub fn redis_key(&self, key: impl AsRef<[u8]>) -> Vec<u8> {
        let mut k = Vec::with_capacity(self.inner.prefix.len() + key.as_ref().len());
        k.extend_from_slice(&self.inner.prefix);
        k.extend_from_slice(key.as_ref());
        k
    }

    /// Admits one cell for `key` under the default quota, or refuses.
    ///
    /// # Errors
    ///
    /// [`Error::RateLimited`] when the fleet is over the key's rate (or the local fast path
    /// knows it is, or Redis is away under [`FaultPolicy::FailClosed`] or an exhausted
    /// [`FaultPolicy::Local`]). `earliest` is on [`tollgate::MonotonicClock`]'s timeline.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(limiter: tollgate_redis::FleetLimiter) {
    /// match limiter.check("alice").await {
    ///     Ok(ok) => println!("{} left", ok.remaining()),
    ///     Err(e) => println!("retry after {:?}", e.retry_after()),
    /// }
    /// # }
    /// ```
    pub async fn check(&self, key: impl AsRef<[u8]>) -> Result<Admitted, Error> {
        self.decide(key.as_ref(), 1, self.inner.quota, Op::Check)
            .await
    }

    /// Admits `n` cells for `key` at once, or none.
    ///
    /// # Errors
    ///
    /// As [`check`](Self::check), and [`Error::InsufficientCapacity`] (without a round trip)
    /// if `n` exceeds the burst. `n = 0` is admitted and spends nothing, whatever the key's
    /// state (never refused by the local fast path, never served from a lease); while Redis
    /// is away the fault policy answers it, and [`FaultPolicy::FailClosed`] refuses it.
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
        self.decide(key.as_ref(), n, self.inner.quota, Op::Check)
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
        self.decide(key.as_ref(), 1, quota, Op::Check).await
    }

    /// [`check_n`](Self::check_n) under `quota` for this call.
    ///
    /// # Errors
    ///
    /// As [`check_n`](Self::check_n).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(limiter: tollgate_redis::FleetLimiter) {
    /// use tollgate::Quota;
    ///
    /// let upload = Quota::per_second(1_000); // bytes/s, say
    /// limiter.check_n_with("uploader", 512, upload).await.unwrap();
    /// # }
    /// ```
    pub async fn check_n_with(
        &self,
        key: impl AsRef<[u8]>,
        n: u32,
        quota: Quota,
    ) -> Result<Admitted, Error> {
        self.decide(key.as_ref(), n, quota, Op::Check).await
    }

    /// Waits until the fleet admits one cell for `key` under the default quota: the cell is
    /// reserved on the server in one round trip, then waited for here on tollgate's own
    /// timer (see [`UntilReady`] for cancellation). Bound it with
    /// [`within`](UntilReady::within).
    ///
    /// # Errors
    ///
    /// [`Error::RateLimited`] if bounded and the cell is further off than the bound (nothing
    /// is reserved), or Redis is away under [`FaultPolicy::FailClosed`] (or the local
    /// fallback's bounded wait is too long).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future gives the reserved cell back when the key still holds exactly
    /// what the reservation wrote ([`UntilReady`]).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(limiter: tollgate_redis::FleetLimiter) {
    /// let ok = limiter.until_ready("alice").await.unwrap();
    /// println!("admitted ({} left)", ok.remaining());
    /// # }
    /// ```
    pub fn until_ready(&self, key: impl AsRef<[u8]>) -> UntilReady {
        UntilReady::new(self.clone(), key.as_ref().to_vec(), 1, self.inner.quota)
    }

    /// [`until_ready`](Self::until_ready) for `n` cells at once.
    ///
    /// # Errors
    ///
    /// As [`until_ready`](Self::until_ready), and [`Error::InsufficientCapacity`] (without a
    /// round trip) if `n` exceeds the burst. `n = 0` never waits: it is answered at once as
    /// [`check_n`](Self::check_n) answers it (admitted, spending nothing; while Redis is
    /// away, by the fault policy, which under [`FaultPolicy::FailClosed`] refuses it).
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
    /// let r = limiter.until_n_ready("uploader", 4).within(Duration::from_secs(1)).await;
    /// # let _ = r;
    /// # }
    /// ```
    pub fn until_n_ready(&self, key: impl AsRef<[u8]>, n: u32) -> UntilReady {
        UntilReady::new(self.clone(), key.as_ref().to_vec(), n, self.inner.quota)
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
    /// ```no_run
    /// # async fn f(limiter: tollgate_redis::FleetLimiter) {
    /// use tollgate::Quota;
    ///
    /// limiter.until_n_ready_with("customer-42", 1, Quota::per_second(100)).await.unwrap();
    /// # }
    /// ```
    pub fn until_n_ready_with(&self, key: impl AsRef<[u8]>, n: u32, quota: Quota) -> UntilReady {
        UntilReady::new(self.clone(), key.as_ref().to_vec(), n, quota)
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
        self.decide(key.as_ref(), 1, self.inner.quota, Op::Peek)
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
    /// let ok = limiter.peek_with("alice", Quota::per_minute(10)).await;
    /// # let _ = ok;
    /// # }
    /// ```
    pub async fn peek_with(&self, key: impl AsRef<[u8]>, quota: Quota) -> Result<Admitted, Error> {
        self.decide(key.as_ref(), 1, quota, Op::Peek).await
    }

    /// The server's `maxmemory-policy` (`CONFIG GET`), and so whether it may forget the
    /// limiter's keys ([`MemoryPolicy`]). [`FleetBuilder::connect`] asks once, in the
    /// background, and logs a `tracing` warning for an evicting policy.
    ///
    /// # Errors
    ///
    /// [`Unavailable`] if Redis did not answer in time or the connection failed; a server
    /// that refuses `CONFIG` is [`MemoryPolicy::Unknown`], not an error.
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
        crate::memory::ask(&self.inner.server.conn, self.inner.server.timeout).await
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
        let key = self.redis_key(key);
        if let Some(cache) = &self.inner.cache {
            cache.remove(&key);
        }
        self.drop_lease(&key);
        if let Some(fallback) = &self.inner.fallback {
            fallback.reset(&key);
        }
        let mut conn = self.inner.server.conn.clone();
        let mut cmd = redis::cmd("DEL");
        cmd.arg(&key);
        let server = &self.inner.server;
        let deleted: i64 = server
            .call(&self.inner.counters, cmd.query_async(&mut conn))
            .await?;
        Ok(deleted > 0)
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
    /// # }
    /// ```
    pub async fn penalize_with(
        &self,
        key: impl AsRef<[u8]>,
        delay: Duration,
        quota: Quota,
    ) -> Result<(), Unavailable> {
        let key = self.redis_key(key);
        self.drop_lease(&key);
        if let Some(fallback) = &self.inner.fallback {
            let _ = fallback.penalize(&key, delay);
        }
        let reply = self
            .run_script(&key, "penalize", quota, 1, micros_ceil(delay), 0)
            .await?;
        self.remember(&key, &reply);
        Ok(())
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
        self.inner.counters.snapshot(
            self.inner.cache.as_ref().map_or(0, |c| c.len() as u64),
            self.inner
                .presence
                .as_ref()
                .map_or(0, |p| u64::from(p.seen())),
        )
    }

    /// Gives back every leased cell this node holds ([`FleetBuilder::lease`]), expired or
    /// not: for a node shutting down, or a key going quiet. Each lease is given back only if
    /// its key still holds exactly the TAT the lease stored (compare and restore); the rest
    /// are lost. Returns how many cells were given back. Without leasing, returns 0 at once.
    ///
    /// # Errors
    ///
    /// [`Unavailable`] if Redis did not answer in time or failed; the cells not yet given
    /// back by then are lost (counted in [`Stats::expired_unspent`]).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(limiter: tollgate_redis::FleetLimiter) {
    /// let given_back = limiter.return_leases().await.unwrap();
    /// println!("{given_back} cells given back");
    /// # }
    /// ```
    pub async fn return_leases(&self) -> Result<u64, Unavailable> {
        let Some(leasing) = &self.inner.lease else {
            return Ok(0);
        };
        let c = &self.inner.counters;
        let mut leases = leasing.store.drain().into_iter();
        let mut given = 0;
        while let Some((key, l)) = leases.next() {
            add(&c.expired_unspent, u64::from(l.cells - l.unspent()));
            if l.unspent() == 0 {
                continue;
            }
            let (interval_us, burst) = l.quota;
            let args = [
                Arg::Op("giveback"),
                Arg::Num(interval_us),
                Arg::Num(u64::from(burst)),
                Arg::Num(0),
                Arg::Num(0),
                Arg::Num(l.written),
                Arg::Num(u64::from(l.unspent())),
            ];
            match self.inner.server.invoke(c, &key, args).await {
                Ok(r) if r.admitted => {
                    add(&c.returned, u64::from(l.unspent()));
                    given += u64::from(l.unspent());
                    if let Some(cache) = &self.inner.cache {
                        cache.remove(&key);
                    }
                }
                Ok(_) => {
                    add(&c.expired_unspent, u64::from(l.unspent()));
                }
                Err(e) => {
                    let rest: u64 = leases.map(|(_, l)| u64::from(l.cells)).sum();
                    add(&c.expired_unspent, u64::from(l.unspent()) + rest);
                    return Err(e);
                }
            }
        }
        Ok(given)
    }

    async fn decide(&self, key: &[u8], n: u32, quota: Quota, op: Op) -> Result<Admitted, Error> {
        let burst = quota.burst();
        if n > burst {
            return Err(Error::InsufficientCapacity {
                requested: n,
                burst,
            });
        }
        let key = self.redis_key(key);
        let interval_us = interval_micros(quota);
        let name = if op == Op::Check { "check" } else { "peek" };
        if let Some(leasing) = &self.inner.lease
            && n > 0
            && quota == self.inner.quota
        {
            let qt = (interval_us, burst);
            match op {
                Op::Check => return self.decide_leased(leasing, &key, n, quota).await,
                Op::Peek => {
                    if let Some(l) = leasing.store.held(&key, qt, Instant::now()) {
                        return Ok(lease_admission(&l, l.cells, burst));
                    }
                }
            }
        }
        let _probe = self.fast_path(&key, n, interval_us, burst).await?;
        match self.run_script(&key, name, quota, n, 0, 0).await {
            Ok(reply) => {
                let c = &self.inner.counters;
                if reply.admitted {
                    if op == Op::Check {
                        bump(&c.admitted);
                        // The key's burst is spent: the next check would be refused, so it
                        // may as well be refused here (the TAT is a bound like a refusal's).
                        // With cells to spare, the key needs no fast path (nor a probe).
                        match (reply.remaining, &self.inner.cache) {
                            (0, _) => self.remember(&key, &reply),
                            (_, Some(cache)) => cache.remove(&key),
                            (_, None) => {}
                        }
                    }
                    Ok(Admitted {
                        limit: burst,
                        remaining: reply.remaining,
                        reset_after: Duration::from_micros(reply.after_us),
                        source: Source::Redis,
                    })
                } else {
                    if op == Op::Check {
                        bump(&c.limited);
                    }
                    self.remember(&key, &reply);
                    Err(self.limited(Duration::from_micros(reply.after_us), burst))
                }
            }
            Err(_) => self.on_fault(&key, n, quota, op),
        }
    }

    /// The fast path: refuse here, or be the key's one probe, or wait for the probe in
    /// flight and look again (`cache.rs`); after waiting the call's timeout in all, ask
    /// Redis anyway.
    async fn fast_path(
        &self,
        key: &[u8],
        n: u32,
        interval_us: u64,
        burst: u32,
    ) -> Result<Option<ProbeGuard<'_>>, Error> {
        let mut probe = None;
        if let Some(cache) = &self.inner.cache
            && n > 0
        {
            let give_up = Instant::now() + self.inner.server.timeout;
            loop {
                let now = Instant::now();
                let Some(server_now) = self.inner.server.clock.upper(now) else {
                    break; // no reply yet, so nothing cached
                };
                match cache.lookup(key, server_now, n, interval_us, burst) {
                    Lookup::Refuse(wait) => {
                        bump(&self.inner.counters.local_refusals);
                        return Err(self.limited(wait, burst));
                    }
                    Lookup::Probe(guard) => {
                        probe = Some(guard);
                        break;
                    }
                    Lookup::Wait(probe) if now < give_up => {
                        let _ = crate::rt::timeout(give_up - now, probe).await;
                    }
                    Lookup::Wait(_) | Lookup::Miss => break,
                }
            }
        }
        Ok(probe)
    }

    /// A check under the default quota with leasing on: spend a leased cell here, or take a
    /// lease (giving back an expired one's cells in the same round trip).
    async fn decide_leased(
        &self,
        leasing: &Leasing,
        key: &[u8],
        n: u32,
        quota: Quota,
    ) -> Result<Admitted, Error> {
        let c = &self.inner.counters;
        let (interval_us, burst) = (interval_micros(quota), quota.burst());
        let expired = match leasing
            .store
            .spend(key, n, (interval_us, burst), Instant::now())
        {
            Spend::Spent { left, lease } => {
                add(&c.spent_locally, u64::from(n));
                return Ok(lease_admission(&lease, left, burst));
            }
            Spend::Empty { expired } => expired,
        };
        // Cells of older merged leases cannot be given back: lost now.
        if let Some(e) = &expired {
            add(&c.expired_unspent, u64::from(e.cells - e.unspent()));
        }
        // The fast path's bound counts the expired lease's cells as spent: with cells to give
        // back, ask Redis (the give-back rides on this call) rather than refuse on them.
        let probe = if expired.is_some_and(|e| e.unspent() > 0) {
            None
        } else {
            self.fast_path(key, n, interval_us, burst).await?
        };
        let want = leasing.cells.max(n).min(burst);
        let give = expired.map_or((0, 0), |e| (e.written, e.unspent()));
        let sent = Instant::now();
        let reply = self
            .inner
            .server
            .invoke(
                c,
                key,
                [
                    Arg::Op("lease"),
                    Arg::Num(interval_us),
                    Arg::Num(u64::from(burst)),
                    Arg::Num(u64::from(want)),
                    Arg::Num(u64::from(n)),
                    Arg::Num(give.0),
                    Arg::Num(u64::from(give.1)),
                ],
            )
            .await;
        drop(probe);
        let reply = match reply {
            Ok(r) => r,
            Err(_) => {
                self.keep_expired(leasing, key, expired);
                return self.on_fault(key, n, quota, Op::Check);
            }
        };
        let (granted, back) = reply.lease.unwrap_or((0, false));
        if give.1 > 0 {
            if back {
                add(&c.returned, u64::from(give.1));
                if let Some(cache) = &self.inner.cache {
                    cache.remove(key); // the TAT moved earlier
                }
            } else {
                add(&c.expired_unspent, u64::from(give.1));
            }
        }
        if !reply.admitted {
            bump(&c.limited);
            self.remember(key, &reply);
            return Err(self.limited(Duration::from_micros(reply.after_us), burst));
        }
        bump(&c.admitted);
        add(&c.leased, u64::from(granted));
        let recv = Instant::now();
        let left = granted.saturating_sub(n);
        if left > 0 {
            let lease = Lease {
                cells: left,
                expires: sent + leasing.max_hold,
                quota: (interval_us, burst),
                written: reply.reserved.map_or(0, |(_, new)| new),
                returnable: left,
                recv,
                tat_ahead_us: reply.tat_ahead_us,
            };
            let lost = leasing.store.put(key, lease, recv);
            add(&c.expired_unspent, lost);
        }
        match (reply.remaining, &self.inner.cache) {
            (0, _) => self.remember(key, &reply),
            (_, Some(cache)) => cache.remove(key),
            (_, None) => {}
        }
        Ok(Admitted {
            limit: burst,
            remaining: left.saturating_add(reply.remaining),
            reset_after: Duration::from_micros(reply.after_us),
            source: Source::Redis,
        })
    }

    /// An expired lease whose give-back did not happen goes back into the store, to be
    /// given back by a later call (counted lost if the store drops it).
    fn keep_expired(&self, leasing: &Leasing, key: &[u8], expired: Option<Lease>) {
        if let Some(mut e) = expired
            && e.unspent() > 0
        {
            e.cells = e.unspent();
            let lost = leasing.store.put(key, e, Instant::now());
            add(&self.inner.counters.expired_unspent, lost);
        }
    }

    /// Forgets this node's lease of `key` (reset, penalty): its cells are lost.
    fn drop_lease(&self, key: &[u8]) {
        if let Some(leasing) = &self.inner.lease
            && let Some(l) = leasing.store.take(key)
        {
            add(&self.inner.counters.expired_unspent, u64::from(l.cells));
        }
    }

    pub(crate) fn on_fault(
        &self,
        key: &[u8],
        n: u32,
        quota: Quota,
        op: Op,
    ) -> Result<Admitted, Error> {
        let c = &self.inner.counters;
        match self.inner.policy {
            FaultPolicy::FailOpen => {
                bump(&c.failed_open);
                Ok(Admitted {
                    limit: quota.burst(),
                    remaining: quota.burst() - n,
                    reset_after: quota.interval().saturating_mul(n),
                    source: Source::FailOpen,
                })
            }
            FaultPolicy::FailClosed { retry_after } => {
                bump(&c.failed_closed);
                Err(self.limited(retry_after, quota.burst()))
            }
            FaultPolicy::Local { .. } | FaultPolicy::LocalShare => {
                let Some(nodes) = self.fallback_nodes() else {
                    // No count of the fleet yet: refuse, rather than admit the whole limit.
                    bump(&c.failed_closed);
                    return Err(self.limited(quota.interval(), quota.burst()));
                };
                bump(&c.fell_back);
                let Some(share) = share(quota, nodes) else {
                    // The share is not a valid quota (a window beyond 18 years): refuse.
                    return Err(self.limited(quota.interval(), quota.burst()));
                };
                let fallback = self.inner.fallback.as_ref().expect("built with the policy");
                let r = match op {
                    Op::Check => fallback.check_n_with(key, n, share),
                    Op::Peek => fallback.peek_with(key, share),
                };
                r.map(|ok| Admitted {
                    limit: ok.limit(),
                    remaining: ok.remaining(),
                    reset_after: ok.reset_after(),
                    source: Source::Local,
                })
            }
        }
    }

    /// What the local fallback divides the limit by: the configured count, or the fleet's
    /// size as last counted (`None` before any count, and under other policies).
    pub(crate) fn fallback_nodes(&self) -> Option<u32> {
        match self.inner.policy {
            FaultPolicy::Local { nodes } => Some(nodes),
            FaultPolicy::LocalShare => self
                .inner
                .presence
                .as_ref()
                .map(Presence::seen)
                .filter(|&n| n > 0),
            _ => None,
        }
    }

    pub(crate) fn limited(&self, wait: Duration, limit: u32) -> Error {
        Error::RateLimited {
            earliest: self.inner.clock.now() + wait,
            wait,
            limit,
        }
    }

    /// Keeps the key's TAT from `reply` in the fast path.
    pub(crate) fn remember(&self, key: &[u8], reply: &Reply) {
        if let Some(cache) = &self.inner.cache
            && reply.tat_ahead_us > 0
        {
            let now = i128::from(reply.now_us) * 1_000;
            cache.raise(key, reply.tat_us(), now);
        }
    }

    /// Runs the script; every answer also tightens the bound on the server's clock.
    pub(crate) async fn run_script(
        &self,
        key: &[u8],
        op: &'static str,
        quota: Quota,
        n: u32,
        arg_us: u64,
        written: u64,
    ) -> Result<Reply, Unavailable> {
        let args = [
            Arg::Op(op),
            Arg::Num(interval_micros(quota)),
            Arg::Num(u64::from(quota.burst())),
            Arg::Num(u64::from(n)),
            Arg::Num(arg_us),
            Arg::Num(written),
        ];
        self.inner
            .server
            .invoke(&self.inner.counters, key, args)
            .await
    }
}

/// An admission from a lease held here: `left` cells remain in it.
fn lease_admission(lease: &Lease, left: u32, burst: u32) -> Admitted {
    let reset_at = lease.recv + Duration::from_micros(lease.tat_ahead_us);
    Admitted {
        limit: burst,
        remaining: left,
        reset_after: reset_at.saturating_duration_since(Instant::now()),
        source: Source::Redis,
    }
}
