//! Redis away, as policy: [`FaultPolicy`] (what a check does when Redis fails or is late),
//! [`Unavailable`] (why an operation without a policy failed), which errors mean Redis was
//! not reached, and the local fallback's share of a quota. Plain values and pure functions;
//! the engine applies them (`engine.rs`).

use std::fmt;
use std::time::Duration;

use redis::RedisError;
use tollgate::Quota;

/// What to do when Redis does not answer in time, or answers with an error.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate_redis::FaultPolicy;
///
/// // Ten nodes share the limit: each admits a tenth of it on its own while Redis is away.
/// let policy = FaultPolicy::Local { nodes: 10 };
/// let closed = FaultPolicy::FailClosed { retry_after: Duration::from_secs(1) };
/// assert_ne!(policy, closed);
/// // The default divides by the fleet's size as the nodes last counted it in Redis.
/// assert_eq!(FaultPolicy::default(), FaultPolicy::LocalShare);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FaultPolicy {
    /// Admit: availability first. [`Admitted::source`](crate::Admitted::source) is
    /// [`Source::FailOpen`](crate::Source::FailOpen).
    FailOpen,
    /// Refuse with [`Error::RateLimited`](tollgate::Error::RateLimited) and this `wait` as the
    /// retry hint.
    FailClosed {
        /// What to put in the refusal's `wait` (`Retry-After`).
        retry_after: Duration,
    },
    /// Decide with a local `tollgate::Limiter` at `1/nodes` of the fleet's rate: interval
    /// `nodes × T`, burst `max(1, b / nodes)`. With `nodes` set to the fleet's size (and a
    /// burst of at least `nodes`) the fleet as a whole stays within the quota's bound while
    /// Redis is away; the local state is not merged into Redis when it comes back. Its
    /// admissions report the share's `limit`, `remaining` and `reset_after`. A call for more
    /// cells than the share's burst (and no more than the quota's) is refused as
    /// [`Error::RateLimited`](tollgate::Error::RateLimited), for the time the share takes to
    /// fill, not as `InsufficientCapacity`: the fleet admits it once Redis answers.
    Local {
        /// How many nodes share the limit.
        nodes: u32,
    },
    /// As [`Local`](Self::Local), with `nodes` the fleet's size as last counted in Redis: each
    /// node's limiter keeps a presence entry there, refreshed every heartbeat
    /// ([`FleetBuilder::heartbeat`](crate::FleetBuilder::heartbeat), 1 s by default), and counts
    /// the entries younger than three heartbeats ([`Stats::fleet_size`](crate::Stats::fleet_size)).
    /// A node that has not counted yet (Redis away since it started) refuses, rather than admit the
    /// whole limit alone.
    ///
    /// **The bound it gives**: while Redis is away, `k` nodes that last counted `N` admit
    /// about `k/N` of the limit between them (each its share, interval `N × T`, burst
    /// `max(1, b / N)`), so the whole limit if the fleet did not grow since the last
    /// heartbeat before the outage; each node started or first counted after that adds its
    /// own share on top. The default.
    LocalShare,
}

impl Default for FaultPolicy {
    /// [`LocalShare`](Self::LocalShare): the limit divided by the fleet's size as last
    /// counted, so that an outage never multiplies the limit by the number of nodes.
    fn default() -> FaultPolicy {
        FaultPolicy::LocalShare
    }
}

/// Why an operation without a fault policy (`reset`, `penalize`) did not reach Redis.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> redis::RedisResult<()> {
/// use tollgate::Quota;
/// use tollgate_redis::{FleetLimiter, Unavailable};
///
/// // Nothing listens on port 1: `reset`, which has no fault policy, fails.
/// let client = redis::Client::open("redis://127.0.0.1:1/")?;
/// let limiter = FleetLimiter::builder(Quota::per_second(5)).connect(client).await?;
/// let err = limiter.reset("alice").await.unwrap_err();
/// // No answer within the timeout, or the connection refused: Redis was not reached.
/// assert!(matches!(err, Unavailable::Timeout(_) | Unavailable::Redis(_)), "{err}");
/// # Ok(()) }
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum Unavailable {
    /// No answer within the per-call timeout (also when the connection's own response
    /// timeout fired first, as one set below it through
    /// [`FleetBuilder::connection_manager`](crate::FleetBuilder::connection_manager) does).
    Timeout(Duration),
    /// The connection or the server failed.
    Redis(RedisError),
    /// Not sent: the circuit breaker is open after calls in a row failed, for about this
    /// much longer ([`FleetBuilder::circuit_breaker`](crate::FleetBuilder::circuit_breaker)).
    CircuitOpen(Duration),
}

impl fmt::Display for Unavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unavailable::Timeout(t) => write!(f, "Redis did not answer within {t:?}"),
            Unavailable::Redis(e) => write!(f, "Redis failed: {e}"),
            Unavailable::CircuitOpen(t) => write!(
                f,
                "not sent: Redis failed repeatedly, the circuit breaker is open for {t:?} more"
            ),
        }
    }
}

impl std::error::Error for Unavailable {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Unavailable::Redis(e) => Some(e),
            Unavailable::Timeout(_) | Unavailable::CircuitOpen(_) => None,
        }
    }
}

/// Whether `e` says Redis was not reached, or is of no use to this node (rather than that
/// it answered a call with an error). On a cluster, also: no connection to the slot's
/// master (`ClusterConnectionNotFound`, and the cluster client's own `Client` errors: a
/// request it could not route or hand over), and a redirection or `CLUSTERDOWN`/`TRYAGAIN`
/// that outlived the client's retries (the slot's master has failed and no replica has
/// taken over yet, or the slot is moving). And a server that refuses this node's
/// credentials ([`refuses_credentials`]): it answers, but decides nothing until the
/// configuration changes, so it counts as away (the breaker opens, and
/// `memory_policy` is an error rather than `Unknown`).
pub(crate) fn unreachable(e: &RedisError) -> bool {
    use redis::ErrorKind;
    refuses_credentials(e)
        || e.is_io_error()
        || e.is_timeout()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_cluster_error()
        || matches!(
            e.kind(),
            ErrorKind::ClusterConnectionNotFound | ErrorKind::Client
        )
}

/// Whether `e` says the server refuses this node's credentials: `NOAUTH` (none given to a
/// server that requires a password), `WRONGPASS` and the `redis` crate's
/// `AuthenticationFailed` (a wrong password or user, at connect).
pub(crate) fn refuses_credentials(e: &RedisError) -> bool {
    e.kind() == redis::ErrorKind::AuthenticationFailed
        || matches!(e.code(), Some("NOAUTH" | "WRONGPASS"))
}

/// The fallback's share of `quota` for one of `nodes` nodes.
pub(crate) fn share(quota: Quota, nodes: u32) -> Option<Quota> {
    let nodes = nodes.max(1);
    let interval = quota.interval().checked_mul(nodes)?;
    Quota::try_with_period(interval)
        .ok()?
        .try_allow_burst((quota.burst() / nodes).max(1))
        .ok()
}
