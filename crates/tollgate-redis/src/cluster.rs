//! The limiter on Redis Cluster: [`FleetBuilder::connect_cluster`].
//!
//! # Where the keys go
//!
//! A key `k`'s state is one Redis key, `prefix + k` (the single-server format, unchanged),
//! and every call of the limit touches that one key: a check, a wait's reservation and its
//! refund, a lease and its give-back, a penalty, a reset's `DEL`. So each key's state lives
//! in one hash slot whatever the key looks like, and the keys spread over the masters by
//! their slots, as Redis hashes them. A hash tag in the key (`{tenant7}:ip:10.0.0.1`) puts
//! keys that share it in one slot, which lets [`FleetLimiter::check_all`] check them in one
//! script; a hash tag in the *prefix* puts every key in one slot (one master does all the
//! work: don't). The presence set ([`FaultPolicy::LocalShare`]) is `prefix + "\0{fleet}"`: its
//! own slot, one small call a second per node.
//!
//! # What the cluster changes
//!
//! Nothing in the semantics: a key's clock is the `TIME` of the master that owns its slot,
//! which decides alone, as one server does. The fast path only ever refuses, so it cannot
//! over-admit; it keeps one bound on "the server's clock" (`offset.rs`), fed by every
//! master's replies, so masters whose clocks are `d` apart may make a locally cached
//! refusal end up to `d` late on a key of the fastest master (under-admission), or early
//! on the slowest (a round trip that the master refuses). Masters kept by NTP are
//! milliseconds apart or less.
//!
//! Routing is the cluster client's: `MOVED` and `ASK` are followed, the slot map is
//! refreshed, and `NOSCRIPT` from a master that has not seen the script (a new master, a
//! promoted replica, a `SCRIPT FLUSH`) is answered by running the call again as `EVAL`
//! with the script's text, on that master, which then keeps it (`conn.rs`).
//!
//! # Failover
//!
//! When a master dies, its slots answer nothing until the cluster promotes a replica
//! (after `cluster-node-timeout`, plus an election): calls on those slots fail or time out,
//! and the fault policy answers them, as on one server that is away. The other masters
//! answer as usual until the cluster marks the master failed; from then until a replica
//! takes over, a cluster that requires full coverage (Redis's default) answers
//! `CLUSTERDOWN` on every slot, a fault like any other. The circuit breaker is one per
//! range of 1,024 slots (`conn.rs`): the dead master's ranges open and are answered by the
//! policy at once, while the live masters' keys keep going to Redis (but for a range the
//! dead master shares with a live one at the boundary of their slots).
//!
//! A master that hangs rather than dies (a paused process, a host cut off without a reset)
//! keeps its sockets open: its calls time out on tollgate's timer, and the cluster client,
//! which reads the slot map again on errors and `MOVED`, sees neither. After as many
//! timeouts in a row on a range as open the breaker, the limiter builds a new cluster
//! connection, which reads the slot map afresh, and uses it once it has connected (at most
//! one a second: `conn.rs`, "A connection that hangs"); once the cluster has promoted the
//! replica, the next one finds it (tested in `tests/cluster.rs`).
//!
//! **The cost.** The promoted replica holds what the master had replicated to it.
//! Replication is asynchronous, so a failover can lose the writes of the master's last
//! replication lag `λ`, and each key written in that lag is admitted afresh from its older
//! TAT: the cells it was admitted in the lag, **at most `b + floor(λ / T)` per such key**
//! (about one burst, as `λ` is a few milliseconds on a healthy link), over and above the
//! limit. Add what the fault policy admits in the gap (under [`FaultPolicy::LocalShare`],
//! each node's share over the gap: about the limit between the nodes; nothing under
//! `FailClosed`). Synchronous replication (`WAIT` after each write) would close the first
//! part at the cost of a round trip to a replica per call; the limiter does not do it.

use redis::RedisError;
use redis::cluster::{ClusterClient, ClusterConfig};

#[cfg(doc)]
use crate::FaultPolicy;
use crate::builder::FleetBuilder;
use crate::conn::{Conn, Origin};
use crate::limiter::FleetLimiter;

impl FleetBuilder {
    /// Builds the limiter on a Redis Cluster, with a cluster connection of its own (clones
    /// of the limiter share it). Everything else is as [`connect`](Self::connect): the same
    /// settings, semantics, fast path, leases and fault policies; each key's state is one
    /// Redis key in one slot (`prefix + key`, as on one server), so keys need no hash tags
    /// (see [`FleetLimiter::check_all`] for when they help). The connection's connection and
    /// response timeouts are twice the per-call timeout (so that tollgate's timer is the one
    /// that fires: a call that times out is
    /// [`Unavailable::Timeout`](crate::Unavailable::Timeout)); `client`'s own settings (retries, their
    /// waits, TLS, credentials) are kept, and
    /// [`connection_manager`](Self::connection_manager) does not apply. A connection whose
    /// calls to one range of slots time out in a row (a master that hangs) is replaced by
    /// a new one from `client`, which reads the slot map afresh. Connects lazily: the cluster need not be up yet,
    /// and until it is, checks follow the fault policy.
    ///
    /// On a failover the keys of the dead master's slots are decided by the fault policy
    /// until a replica is promoted, and a key written in the master's last replication lag
    /// `λ` may be admitted up to `b + floor(λ / T)` cells afresh, about one burst (the
    /// module's docs: `src/cluster.rs`).
    ///
    /// # Errors
    ///
    /// A [`RedisError`] of kind [`ErrorKind::Client`](redis::ErrorKind::Client) if called
    /// outside a Tokio runtime without the `smol-comp` feature, as
    /// [`connect`](Self::connect); nothing else today (the connection is lazy).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis::RedisResult<()> {
    /// use tollgate::Quota;
    /// use tollgate_redis::{FaultPolicy, FleetLimiter, Source};
    ///
    /// // No cluster on these ports: `connect_cluster` is lazy, and the policy answers.
    /// let nodes = ["redis://127.0.0.1:1/", "redis://127.0.0.1:2/"];
    /// let client = redis::cluster::ClusterClient::new(nodes)?;
    /// let limiter = FleetLimiter::builder(Quota::per_second(5))
    ///     .fault_policy(FaultPolicy::FailOpen)
    ///     .connect_cluster(client)
    ///     .await?;
    /// assert_eq!(limiter.check("alice").await.unwrap().source(), Source::FailOpen);
    /// assert_eq!(limiter.redis_key("alice"), b"tollgate:alice".to_vec()); // as on one server
    /// # Ok(()) }
    /// ```
    pub async fn connect_cluster(self, client: ClusterClient) -> Result<FleetLimiter, RedisError> {
        crate::builder::runtime_here()?;
        let timeout = self.connection_timeout();
        let config = ClusterConfig::new()
            .set_connection_timeout(timeout)
            .set_response_timeout(timeout);
        let conn = client.get_pending_async_connection_with_config(config.clone());
        Ok(self.finish(Conn::Cluster(conn), Origin::Cluster(client, config)))
    }
}
