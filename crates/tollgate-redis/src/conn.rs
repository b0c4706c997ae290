//! The one connection a limiter sends its calls on: to one server (or a proxy), through a
//! [`ConnectionManager`], or to a Redis Cluster, through the `redis` crate's async cluster
//! client. Everything above sends commands through [`Conn`] as through any
//! [`redis::aio::ConnectionLike`], and asks which it is only through [`Conn::route`]:
//! the circuit breaker a call goes through (`server.rs`: one on one server, one per range
//! of slots on a cluster) and the slots `check_all` groups its keys by (`check_all.rs`).
//!
//! On a cluster every call of the limit names its key (`EVALSHA sha 1 key ...`), so the
//! client routes it to the master that owns the key's slot, follows `MOVED` (refreshing
//! its slot map) and `ASK` (during a migration) by itself, and retries on a connection
//! error after refreshing the map (so a promoted replica is found).
//!
//! Scripts run through [`Conn::eval`]: `EVALSHA`, and on `NOSCRIPT` (a restarted server, a
//! promoted replica, a `SCRIPT FLUSH`), on one server `SCRIPT LOAD` and the `EVALSHA` again
//! (as [`redis::Script`] does), on a cluster `EVAL` with the text, which goes to the key's
//! master like the `EVALSHA` and leaves the script cached there. Not `SCRIPT LOAD` on a
//! cluster: the cluster client sends it to every master, so while any master is down it
//! fails, and a master that lacks the script could not be given it (tested in
//! `tests/cluster.rs`).
//!
//! # A connection that hangs
//!
//! The [`Link`] holds the current connection and replaces it when it stops answering. The
//! `redis` crate reconnects when a connection drops (the server closed it, a reset), not
//! when it stays open and silent: a paused or wedged server, an L4 proxy whose upstream
//! hangs, a host partitioned away without a reset. Each call there times out (tollgate's
//! timer drops it, so the cluster client never sees a failure either, and keeps its slot
//! map), the breaker probes the same socket every cool-down, and the fault policy answers
//! until the kernel gives up on the socket (about 15 minutes) or, behind a proxy, for ever.
//!
//! So the call path tells the link how each call went ([`Link::answered`],
//! [`Link::timed_out`]; on the connection it went on: calls still in flight on a replaced
//! one count no more, and a new connection starts with no timeouts against it), and after `after` calls in a row on one range of slots timed out
//! (the breaker's failures, 5 by default), the link builds a new connection from what the
//! first was built from: on one server a new [`ConnectionManager`], on a cluster a new
//! cluster connection, which reads the slot map afresh (so a promoted replica is found).
//! The new connection is built in the background, on the runtime the limiter was built on,
//! and replaces the old one only once it has connected (a cluster's: to the nodes that
//! answer); calls go on the old one meanwhile, and those in flight finish there. Scripts
//! are loaded on the new connection as on any (`NOSCRIPT`, above).
//!
//! Bounded: one replacement at a time, at most one a second ([`REPLACE_EVERY`]), each given
//! up after [`patience`] (the old connection is kept). While Redis answers, a call costs the
//! link one load of its range's count (and an `ArcSwap` load to clone the connection: no
//! lock, no count that every thread writes);
//! a Redis that is merely slow, answering some calls in time, resets the count with each
//! answer and is never reconnected to; one that answers none in time is reconnected to at
//! most once a second, as a hung one is.

use std::sync::atomic::{
    AtomicBool, AtomicU32, AtomicU64, Ordering::Acquire, Ordering::Relaxed, Ordering::Release,
};
use std::sync::{Arc, Weak};

use arc_swap::ArcSwap;
use std::time::{Duration, Instant};

use crate::observe::Route;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::{ClusterClient, ClusterConfig};
use redis::cluster_async::ClusterConnection;
use redis::{
    Client, Cmd, ErrorKind, FromRedisValue, Pipeline, RedisFuture, RedisResult, Script,
    ServerErrorKind, Value,
};

/// A connection to one server or to a cluster. A cheap `Clone`: clones share the
/// connection (or the cluster's connections).
#[derive(Clone)]
pub(crate) enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

/// How many ranges of slots a cluster's calls are told apart by for the circuit breaker:
/// 16 ranges of 1,024 slots. A master owns a few contiguous ranges (a three-master
/// cluster about 5.3 each), so a dead master opens only the breakers of its own ranges, and
/// shares at most the ranges at its boundaries with a live one.
pub(crate) const ROUTES: usize = 16;

impl Conn {
    /// Whether the keys live on a cluster (so a script's keys must share a hash slot).
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self, Conn::Cluster(_))
    }

    /// Runs `script` (whose text is `code`) with what `fill` appends after the SHA-1 or the
    /// text: the number of keys, the keys, the arguments. See the module docs for
    /// `NOSCRIPT`.
    pub(crate) async fn eval<T: FromRedisValue>(
        self,
        script: &Script,
        code: &str,
        fill: impl Fn(&mut Cmd),
        reloaded: impl FnOnce(),
    ) -> RedisResult<T> {
        let mut conn = self;
        let mut evalsha = redis::cmd("EVALSHA");
        evalsha.arg(script.get_hash());
        fill(&mut evalsha);
        match evalsha.query_async(&mut conn).await {
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                reloaded();
                match conn {
                    Conn::Single(_) => {
                        let mut load = redis::cmd("SCRIPT");
                        load.arg("LOAD").arg(code);
                        load.query_async::<String>(&mut conn).await?;
                        evalsha.query_async(&mut conn).await
                    }
                    Conn::Cluster(_) => {
                        let mut eval = redis::cmd("EVAL");
                        eval.arg(code);
                        fill(&mut eval);
                        eval.query_async(&mut conn).await
                    }
                }
            }
            r => r,
        }
    }
}

/// The range of slots a call on `key` goes to: the only one on one server (index 0, all
/// slots), else range `slot / 1,024` of a cluster.
fn route(cluster: bool, key: &[u8]) -> Route {
    const WIDTH: u16 = (16_384 / ROUTES) as u16;
    if !cluster {
        return Route {
            index: 0,
            first_slot: 0,
            last_slot: 16_383,
        };
    }
    let first_slot = slot(key) / WIDTH * WIDTH;
    Route {
        index: usize::from(first_slot / WIDTH),
        first_slot,
        last_slot: first_slot + WIDTH - 1,
    }
}

/// What the connection was built from, to build another: a client and the connection's
/// configuration.
#[derive(Clone)]
pub(crate) enum Origin {
    Single(Client, ConnectionManagerConfig),
    Cluster(ClusterClient, ClusterConfig),
}

impl Origin {
    /// A new connection, connected (a cluster's: its slot map read, its nodes connected to).
    async fn connect(self) -> RedisResult<Conn> {
        match self {
            Origin::Single(client, config) => ConnectionManager::new_with_config(client, config)
                .await
                .map(Conn::Single),
            Origin::Cluster(client, config) => client
                .get_async_connection_with_config(config)
                .await
                .map(Conn::Cluster),
        }
    }
}

/// The least time between two replacements of a hung connection (module docs).
pub(crate) const REPLACE_EVERY: Duration = Duration::from_secs(1);

/// How long a replacement may take to connect before it is given up, for a limiter whose
/// per-call timeout is `timeout`: ten of them (a connection's few attempts, and on a cluster
/// the slot map and the nodes), from one second to one minute.
pub(crate) fn patience(timeout: Duration) -> Duration {
    timeout
        .saturating_mul(10)
        .clamp(Duration::from_secs(1), Duration::from_secs(60))
}

/// A connection and how many replacements came before it.
struct Current {
    conn: Conn,
    generation: u64,
}

/// The limiter's connection, and its replacement when it hangs (module docs). Shared by the
/// call path, the presence beat and the memory-policy question.
pub(crate) struct Link {
    /// The connection and its generation, swapped whole by a replacement (its only writer,
    /// one at a time: `replacing`). An `ArcSwap` (which the `redis` crate's connection
    /// manager already builds on) rather than a lock: a call's load writes no line that
    /// every calling thread shares.
    current: ArcSwap<Current>,
    origin: Origin,
    cluster: bool,
    /// The Tokio runtime the limiter was built on, where a replacement is built; none when
    /// it was built on smol's reactor (`smol-comp`), and a replacement is built there too.
    runtime: Option<tokio::runtime::Handle>,
    /// Per range of slots ([`Route`]; one on one server): calls that timed out since its
    /// last answer.
    silent: Vec<AtomicU32>,
    /// Timeouts in a row on a range that start a replacement (at least 1).
    after: u32,
    patience: Duration,
    /// Whether a replacement is being built, and when the last started (ns since `base`,
    /// plus 1; 0: never).
    replacing: AtomicBool,
    last: AtomicU64,
    base: Instant,
}

impl Link {
    /// The link for `conn`, built from `origin` on the current runtime; a replacement after
    /// `after` timeouts in a row on a range, given up after `patience`.
    pub(crate) fn new(conn: Conn, origin: Origin, after: u32, patience: Duration) -> Arc<Link> {
        let cluster = conn.is_cluster();
        Arc::new(Link {
            current: ArcSwap::from_pointee(Current {
                conn,
                generation: 0,
            }),
            origin,
            cluster,
            runtime: tokio::runtime::Handle::try_current().ok(),
            silent: (0..if cluster { ROUTES } else { 1 })
                .map(|_| AtomicU32::new(0))
                .collect(),
            after: after.max(1),
            patience,
            replacing: AtomicBool::new(false),
            last: AtomicU64::new(0),
            base: Instant::now(),
        })
    }

    /// The current connection (a clone: clones share it) and its generation, from one
    /// load, so the two agree: a call's outcome is told with it
    /// ([`answered`](Self::answered), [`timed_out`](Self::timed_out)).
    pub(crate) fn get(&self) -> (Conn, u64) {
        let current = self.current.load();
        (current.conn.clone(), current.generation)
    }

    /// The generation of the connection calls are now sent on.
    fn generation(&self) -> u64 {
        self.current.load().generation
    }

    /// Whether the keys live on a cluster (so a script's keys must share a hash slot).
    pub(crate) fn is_cluster(&self) -> bool {
        self.cluster
    }

    /// The range of slots a call on `key` goes to: the only one on one server (index 0, all
    /// slots), else range `slot / 1,024` of a cluster.
    pub(crate) fn route(&self, key: &[u8]) -> Route {
        route(self.cluster, key)
    }

    /// A call on `route` was answered (an error reply included): its range is not hung.
    pub(crate) fn answered(&self, route: Route, generation: u64) {
        // A stale read only lets one outcome count (or not) once more.
        if generation != self.generation() {
            return;
        }
        // ordering: Relaxed: a count that publishes nothing. Loaded first so that a healthy
        // call writes nothing shared.
        let silent = &self.silent[route.index];
        if silent.load(Relaxed) != 0 {
            silent.store(0, Relaxed);
        }
    }

    /// A call on `route` timed out (or was refused the credentials, which a new connection
    /// presents afresh); whether this started a replacement of the connection
    /// (`after` in a row on the range, none in flight, none started in the last
    /// [`REPLACE_EVERY`]).
    pub(crate) fn timed_out(self: &Arc<Self>, route: Route, generation: u64) -> bool {
        // As in `answered`.
        if generation != self.generation() {
            return false; // sent on a connection replaced since
        }
        // ordering: the counts are Relaxed: they publish nothing. `replacing` elects one
        // caller (Acquire), whose read of `last` then follows the previous winner's write
        // of it (`replacing` released with Release after it).
        let in_a_row = self.silent[route.index]
            .fetch_add(1, Relaxed)
            .saturating_add(1);
        if in_a_row < self.after || !self.can_build_here() {
            return false;
        }
        if self
            .replacing
            .compare_exchange(false, true, Acquire, Relaxed)
            .is_err()
        {
            return false;
        }
        // Elected: now, and only now, the last start is this caller's to read and write.
        let now = u64::try_from(self.base.elapsed().as_nanos())
            .unwrap_or(u64::MAX)
            .saturating_add(1);
        let last = self.last.load(Relaxed);
        let every = u64::try_from(REPLACE_EVERY.as_nanos()).unwrap_or(u64::MAX);
        if last != 0 && now < last.saturating_add(every) {
            self.replacing.store(false, Release);
            return false;
        }
        self.last.store(now, Relaxed);
        let task = replace(
            self.origin.clone(),
            self.patience,
            Replacing(Arc::downgrade(self)),
        );
        match &self.runtime {
            Some(runtime) => drop(runtime.spawn(task)),
            None => crate::rt::spawn_thread(task),
        }
        true
    }

    /// Whether a new connection can be built where this one was: on its Tokio runtime, or
    /// on smol's reactor (`smol-comp`).
    fn can_build_here(&self) -> bool {
        self.runtime.is_some() || cfg!(feature = "smol-comp")
    }
}

/// The replacement in flight: ends it when dropped (built, given up, or the task dropped
/// with its runtime), so that a later timeout may start another.
struct Replacing(Weak<Link>);

impl Drop for Replacing {
    fn drop(&mut self) {
        if let Some(link) = self.0.upgrade() {
            // ordering: Release, as in `Link::timed_out`.
            link.replacing.store(false, Release);
        }
    }
}

/// Builds a connection from `origin` and, if it connects within `patience`, makes it the
/// link's (the old one is dropped once the calls in flight on it finish).
async fn replace(origin: Origin, patience: Duration, replacing: Replacing) {
    if let Ok(Ok(conn)) = crate::rt::timeout(patience, origin.connect()).await
        && let Some(link) = replacing.0.upgrade()
    {
        // A new generation: what is still in flight on the old connection no longer counts,
        // and the new one starts with no timeouts against it. The only writer (`replacing`
        // elects one replacement at a time), so the load and store need no compare. The old
        // connection ends with the last call holding a clone of it.
        let generation = link.current.load().generation + 1;
        link.current.store(Arc::new(Current { conn, generation }));
        for silent in &link.silent {
            // ordering: Relaxed: a count that publishes nothing (`Link::answered`).
            silent.store(0, Relaxed);
        }
    }
    drop(replacing);
}

/// The Redis Cluster hash slot of `key`: CRC-16/XMODEM of its hash tag (the bytes between
/// the first `{` and the next `}`, if not empty) or else of the whole key, mod 16,384 (the
/// cluster specification's `HASH_SLOT`).
pub(crate) fn slot(key: &[u8]) -> u16 {
    let tagged = key.iter().position(|&b| b == b'{').and_then(|open| {
        let rest = &key[open + 1..];
        let close = rest.iter().position(|&b| b == b'}')?;
        (close > 0).then(|| &rest[..close])
    });
    let mut crc: u16 = 0;
    for &b in tagged.unwrap_or(key) {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16_384
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(cmd, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::slot;
    use redis::cluster_routing::Slot;

    #[test]
    fn slots_are_the_cluster_specification_s() {
        // Values from `CLUSTER KEYSLOT` on Redis 7.0.
        assert_eq!(slot(b"foo"), 12_182);
        assert_eq!(slot(b"{user1000}.following"), slot(b"user1000"));
        assert_eq!(slot(b"foo{}{bar}"), slot(b"foo{}{bar}")); // an empty tag: the whole key
        assert_eq!(slot(b"foo{{bar}}zap"), slot(b"{bar"));
        for key in [
            &b"a"[..],
            b"tollgate:ip:10.0.0.1",
            b"{t7}:x",
            b"x{",
            b"{}",
            b"",
        ] {
            let ours = Slot::new(slot(key)).unwrap();
            assert_eq!(
                ours,
                Slot::for_key(key),
                "{:?}",
                String::from_utf8_lossy(key)
            );
        }
    }
}
