//! How a limiter is made: [`FleetBuilder`], its settings and their defaults, and
//! [`FleetBuilder::connect`], which assembles the engine and starts the limiter's background
//! tasks (the presence beat, the memory-policy warning). [`FleetLimiter::builder`] lives here
//! too: the builder returns a [`FleetLimiter`], so the public API's file cannot also import
//! the builder without a circle.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Client, RedisError};
use tollgate::{Limiter, MonotonicClock, Quota};

use crate::breaker::Breaker;
use crate::cache::LocalCache;
use crate::conn::{Conn, Link, Origin};
use crate::engine::{Engine, Leasing, internal_key};
use crate::fault::FaultPolicy;
use crate::lease::LeaseStore;
use crate::limiter::FleetLimiter;
use crate::memory::MemoryPolicy;
use crate::presence::Presence;
use crate::server::Server;
use crate::stats::Counters;

/// The longest timeout, heartbeat, circuit breaker cool-down and lease hold a builder takes: longer ones
/// (`Duration::MAX` for "never") are taken as this, a year. Deadlines are `Instant`s and
/// nanosecond counts, which a longer one would overflow.
const LONGEST: Duration = Duration::from_secs(365 * 86_400);

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
/// assert_eq!(limiter.quota(), Quota::per_second(100));
/// assert_eq!(limiter.redis_key("alice"), b"api:rl:alice".to_vec());
/// # Ok(()) }
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
    /// `prefix + k`, bytes as given (a `k` that starts with a NUL byte gets a second one,
    /// [`FleetLimiter::redis_key`]). On Redis Cluster, each call touches one key, so any
    /// prefix works; put a hash tag in the *key* (`"{tenant}:user"`) to keep keys together.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f() -> redis::RedisResult<()> {
    /// use tollgate::Quota;
    /// use tollgate_redis::FleetLimiter;
    ///
    /// let client = redis::Client::open("redis://127.0.0.1/")?; let limiter =
    /// FleetLimiter::builder(Quota::per_second(5)).prefix("rl:").connect(client).await?;
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

    /// The circuit breaker in front of Redis (default [`DEFAULT_BREAKER`](Self::DEFAULT_BREAKER)):
    /// after `failures` calls in a row fail (errors or timeouts), calls are not sent for
    /// `cool_down` and each is answered at once by the fault policy (as
    /// [`Unavailable::CircuitOpen`](crate::Unavailable::CircuitOpen) where there is none); then one
    /// call probes Redis, and its answer closes the breaker, its failure opens it for another
    /// `cool_down`. Without it, while Redis does not answer every check waits out the timeout
    /// first. A server that refuses the client's credentials (`NOAUTH`, a wrong password)
    /// counts as failing, as one that is away does; other error replies count as answers. When the `failures` in a row are timeouts (`5` when the breaker is off), the
    /// connection is also replaced by a new one, at most once a second: it may be open and
    /// hung, which the `redis` crate does not notice ([`Stats::reconnects`](crate::Stats::reconnects)).
    /// Counted in [`Stats::circuit_opened`](crate::Stats::circuit_opened) and
    /// [`Stats::short_circuited`](crate::Stats::short_circuited); a `tracing` warning when it
    /// opens. `failures = 0` turns it off. A `cool_down` over a year is taken as a year.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis::RedisResult<()> {
    /// use std::time::Duration;
    /// use tollgate::Quota;
    /// use tollgate_redis::{FaultPolicy, FleetLimiter};
    ///
    /// let client = redis::Client::open("redis://127.0.0.1:1/")?; // no Redis here
    /// let limiter = FleetLimiter::builder(Quota::per_second(5))
    ///     .circuit_breaker(3, Duration::from_secs(30))
    ///     .fault_policy(FaultPolicy::FailOpen)
    ///     .connect(client)
    ///     .await?;
    /// for _ in 0..5 {
    ///     limiter.check("alice").await.unwrap(); // failed open
    /// }
    /// let s = limiter.stats();
    /// // Three calls failed; the breaker opened and the last two checks were not sent.
    /// assert_eq!((s.round_trips, s.circuit_opened, s.short_circuited), (3, 1, 2));
    /// # Ok(()) }
    /// ```
    pub fn circuit_breaker(mut self, failures: u32, cool_down: Duration) -> Self {
        self.breaker = (failures, cool_down.min(LONGEST));
        self
    }

    /// The timeout of each call to Redis (default [`DEFAULT_TIMEOUT`](Self::DEFAULT_TIMEOUT)).
    /// A call that times out is a fault; it may still have run on the server. A check of a
    /// key the fast path holds may first wait up to this long for another task's call on the
    /// same key (single flight), so while Redis does not answer, such a check can take up to
    /// twice the timeout before its fault policy decides. After as many timeouts in a row as
    /// open the [`circuit_breaker`](Self::circuit_breaker) (on one range of slots, on a
    /// cluster), the connection is replaced by a new one: a connection that stays open and
    /// answers nothing is never dropped by the `redis` crate. A timeout over a year
    /// (`Duration::MAX`: none) is taken as a year.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis::RedisResult<()> {
    /// use std::time::Duration;
    /// use tollgate::Quota;
    /// use tollgate_redis::{FaultPolicy, FleetLimiter, Source};
    ///
    /// // A port that takes connections and never answers: a Redis that hangs.
    /// let silent = std::net::TcpListener::bind("127.0.0.1:0")?;
    /// let client = redis::Client::open(format!("redis://{}/", silent.local_addr()?))?;
    /// let limiter = FleetLimiter::builder(Quota::per_second(5))
    ///     .timeout(Duration::from_millis(20))
    ///     .fault_policy(FaultPolicy::FailOpen)
    ///     .connect(client)
    ///     .await?;
    /// assert_eq!(limiter.check("alice").await.unwrap().source(), Source::FailOpen);
    /// let s = limiter.stats();
    /// assert_eq!((s.faults, s.timeouts), (1, 1)); // a timeout is a fault
    /// # Ok(()) }
    /// ```
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout.min(LONGEST);
        self
    }

    /// How often this node refreshes its presence entry in Redis under
    /// [`FaultPolicy::LocalShare`] (default 1 s): a node counts the entries younger than three
    /// of these, so a stopped node drops out of the count within three heartbeats. Each
    /// heartbeat is one small call (a sorted set's `ZADD`, trim and count), in the background.
    /// A heartbeat over a year is taken as a year.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(client: redis::Client) -> redis::RedisResult<()> {
    /// use std::time::Duration;
    /// use tollgate::Quota;
    /// use tollgate_redis::FleetLimiter;
    ///
    /// let limiter = FleetLimiter::builder(Quota::per_second(5))
    ///     .heartbeat(Duration::from_millis(500))
    ///     .connect(client)
    ///     .await?;
    /// tokio::time::sleep(Duration::from_millis(500)).await;
    /// assert!(limiter.stats().fleet_size >= 1); // this node, counted in Redis
    /// # Ok(()) }
    /// ```
    pub fn heartbeat(mut self, every: Duration) -> Self {
        self.heartbeat = every.min(LONGEST);
        self
    }

    /// What a check does when Redis is unavailable (default [`FaultPolicy::default`]).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis::RedisResult<()> {
    /// use tollgate::Quota;
    /// use tollgate_redis::{FaultPolicy, FleetLimiter, Source};
    ///
    /// let client = redis::Client::open("redis://127.0.0.1:1/")?; // no Redis here
    /// let limiter = FleetLimiter::builder(Quota::per_second(5))
    ///     .fault_policy(FaultPolicy::FailOpen)
    ///     .connect(client)
    ///     .await?;
    /// assert_eq!(limiter.check("alice").await.unwrap().source(), Source::FailOpen);
    /// assert_eq!(limiter.stats().failed_open, 1);
    /// # Ok(()) }
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
    /// ```no_run
    /// # async fn f(client: redis::Client) -> redis::RedisResult<()> {
    /// use tollgate::Quota;
    /// use tollgate_redis::FleetLimiter;
    ///
    /// let every_check_asks_redis = FleetLimiter::builder(Quota::per_second(5))
    ///     .local_cache(0)
    ///     .connect(client)
    ///     .await?;
    /// for _ in 0..10 {
    ///     let _ = every_check_asks_redis.check("alice").await; // 5 admitted, then refused
    /// }
    /// let s = every_check_asks_redis.stats();
    /// assert_eq!((s.round_trips, s.local_refusals), (10, 0)); // the refusals asked Redis too
    /// # Ok(()) }
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
    /// ```no_run
    /// # async fn f(client: redis::Client) -> redis::RedisResult<()> {
    /// use std::time::Duration;
    /// use tollgate::Quota;
    /// use tollgate_redis::FleetLimiter;
    ///
    /// // 1,000/s; a node takes 10 cells at a time and spends them within 20 ms: over any
    /// // window W, at most b + floor((W + 20 ms) / 1 ms) per key.
    /// let limiter = FleetLimiter::builder(Quota::per_second(1_000).allow_burst(50))
    ///     .lease(10, Duration::from_millis(20))
    ///     .connect(client)
    ///     .await?;
    /// limiter.check("hot").await.unwrap(); // takes a lease of 10 cells and spends one
    /// limiter.check("hot").await.unwrap(); // spends a leased cell, without a round trip
    /// let s = limiter.stats();
    /// assert_eq!((s.round_trips, s.leased, s.spent_locally), (1, 10, 1));
    /// # Ok(()) }
    /// ```
    pub fn lease(mut self, cells: u32, max_hold: Duration) -> Self {
        let max_hold = max_hold.min(LONGEST);
        self.lease = (cells > 1 && !max_hold.is_zero()).then_some((cells, max_hold));
        self
    }

    /// The connection manager's configuration (reconnection back-off and so on). By default
    /// its response and connection timeouts are twice the per-call timeout, so that a call
    /// that times out is always timed out by tollgate's timer first (and its caller sees
    /// [`Unavailable::Timeout`](crate::Unavailable::Timeout); a response timeout set below
    /// the per-call timeout here is reported as that too), and it retries a
    /// reconnection a few times with a back-off capped at one second; later calls start a new
    /// reconnection. A connection that hangs (calls time out in a row on it while it stays
    /// open) is replaced by a new manager built with this configuration from the same
    /// client ([`timeout`](Self::timeout)).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(client: redis::Client) -> redis::RedisResult<()> {
    /// use std::time::Duration;
    /// use redis::aio::ConnectionManagerConfig;
    /// use tollgate::Quota;
    /// use tollgate_redis::{FleetLimiter, Source};
    ///
    /// let config = ConnectionManagerConfig::new().set_max_delay(Duration::from_millis(200));
    /// let limiter = FleetLimiter::builder(Quota::per_second(5))
    ///     .connection_manager(config)
    ///     .connect(client)
    ///     .await?;
    /// assert_eq!(limiter.check("alice").await.unwrap().source(), Source::Redis);
    /// # Ok(()) }
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
    /// A [`RedisError`] if the client's configuration is refused, or (of kind
    /// [`ErrorKind::Client`](redis::ErrorKind::Client)) if called outside a Tokio runtime
    /// without the `smol-comp` feature: there is no runtime for the connection to run on
    /// (the `redis` crate would panic).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis::RedisResult<()> {
    /// use tollgate::Quota;
    /// use tollgate_redis::{FaultPolicy, FleetLimiter, Source};
    ///
    /// // Nothing listens on port 1: `connect` succeeds all the same, as it connects lazily.
    /// let client = redis::Client::open("redis://127.0.0.1:1/")?;
    /// let limiter = FleetLimiter::builder(Quota::per_second(5))
    ///     .fault_policy(FaultPolicy::FailOpen)
    ///     .connect(client)
    ///     .await?;
    /// // Until Redis answers, checks follow the fault policy.
    /// assert_eq!(limiter.check("alice").await.unwrap().source(), Source::FailOpen);
    /// # Ok(()) }
    /// ```
    pub async fn connect(self, client: Client) -> Result<FleetLimiter, RedisError> {
        runtime_here()?;
        let config = self.manager.clone().unwrap_or_else(|| {
            ConnectionManagerConfig::new()
                .set_response_timeout(Some(self.connection_timeout()))
                .set_connection_timeout(Some(self.connection_timeout()))
                .set_number_of_retries(3)
                .set_min_delay(Duration::from_millis(10))
                .set_max_delay(Duration::from_secs(1))
        });
        let conn = ConnectionManager::new_lazy_with_config(client.clone(), config.clone())?;
        Ok(self.finish(Conn::Single(conn), Origin::Single(client, config)))
    }

    /// Assembles the engine on `conn` (one server's, or a cluster's: `cluster.rs`), built
    /// from `origin` (so that a hung one can be replaced: `conn.rs`), and starts the
    /// background tasks.
    pub(crate) fn finish(self, conn: Conn, origin: Origin) -> FleetLimiter {
        // A hung connection is replaced after as many timeouts in a row as open the breaker
        // (its default's when it is off).
        let after = match self.breaker.0 {
            0 => FleetBuilder::DEFAULT_BREAKER.0,
            failures => failures,
        };
        let link = Link::new(conn, origin, after, crate::conn::patience(self.timeout));
        let presence = (self.policy == FaultPolicy::LocalShare).then(|| {
            Arc::new(Presence::new(
                self.heartbeat,
                link.clone(),
                internal_key(&self.prefix, b"{fleet}"),
                self.timeout,
            ))
        });
        let fallback = match self.policy {
            FaultPolicy::Local { .. } | FaultPolicy::LocalShare => Some(Limiter::keyed(self.quota)),
            _ => None,
        };
        let counters = Counters::new(&self.prefix);
        let limiter = FleetLimiter {
            inner: Arc::new(Engine {
                server: Server::new(
                    link,
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
                counters,
                presence,
            }),
        };
        if let Some(presence) = &limiter.inner.presence {
            crate::rt::spawn(crate::presence::beat(Arc::downgrade(presence)));
        }
        // Say it once, at the start, if the server may forget keys (`MemoryPolicy`): in the
        // background, since the connection is lazy and a dead Redis must not fail `connect`.
        let probe = limiter.clone();
        crate::rt::spawn(async move {
            if let Ok(MemoryPolicy::Evicting(policy)) = probe.memory_policy().await {
                probe.inner.counters.observer.evicting_policy(&policy);
            }
        });
        limiter
    }

    /// The connection's own response and connection timeouts (the cluster's too): twice the
    /// per-call timeout. Equal to it, the two timers raced, and a call that timed out came
    /// back as the connection's error (`Unavailable::Redis(timed out)`) about as often as
    /// `Unavailable::Timeout`; above it, tollgate's fires first. Still finite, so that a
    /// connection's own attempts (a reconnection, a replacement: `conn.rs`) end.
    pub(crate) fn connection_timeout(&self) -> Duration {
        self.timeout.saturating_mul(2)
    }
}

/// Whether a connection can run here: inside a Tokio runtime, or anywhere with the
/// `smol-comp` feature (smol's reactor). Elsewhere the `redis` crate panics when the
/// connection is built ("there is no reactor running"); this says so as an error instead.
pub(crate) fn runtime_here() -> Result<(), RedisError> {
    if tokio::runtime::Handle::try_current().is_ok() || cfg!(feature = "smol-comp") {
        return Ok(());
    }
    Err(RedisError::from((
        redis::ErrorKind::Client,
        "tollgate-redis: no runtime for the connection",
        "the limiter was built outside a Tokio runtime: build it inside one (its connection \
         runs there), or enable the crate's smol-comp feature to run it on smol's reactor"
            .to_owned(),
    )))
}

impl FleetLimiter {
    /// A builder for a limiter with `quota` as its default quota.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis::RedisResult<()> {
    /// use tollgate::Quota;
    /// use tollgate_redis::FleetLimiter;
    ///
    /// # // No Redis on port 1: `connect` is lazy, and the quota is the builder's.
    /// # let client = redis::Client::open("redis://127.0.0.1:1/")?;
    /// let limiter = FleetLimiter::builder(Quota::per_minute(60)).connect(client).await?;
    /// assert_eq!(limiter.quota(), Quota::per_minute(60));
    /// # Ok(()) }
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
}
