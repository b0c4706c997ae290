//! The one connection a limiter sends its calls on: to one server (or a proxy), through a
//! [`ConnectionManager`], or to a Redis Cluster, through the `redis` crate's async cluster
//! client. Everything above sends commands through [`Conn`] as through any
//! [`redis::aio::ConnectionLike`], and never asks which it is, except `check_all`, which
//! groups its keys by hash slot on a cluster (`check_all.rs`).
//!
//! On a cluster every call of the limit names its key (`EVALSHA sha 1 key ...`), so the
//! client routes it to the master that owns the key's slot, follows `MOVED` (refreshing
//! its slot map) and `ASK` (during a migration) by itself, and retries on a connection
//! error after refreshing the map (so a promoted replica is found). `NOSCRIPT` is handled
//! one level up, by [`redis::Script`]: it answers `NOSCRIPT` with `SCRIPT LOAD`, which the
//! cluster client sends to every master, and sends the `EVALSHA` again, which goes to the
//! node that refused it (tested in `tests/cluster.rs`).

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Value};

/// A connection to one server or to a cluster. A cheap `Clone`: clones share the
/// connection (or the cluster's connections).
#[derive(Clone)]
pub(crate) enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl Conn {
    /// Whether the keys live on a cluster (so a script's keys must share a hash slot).
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self, Conn::Cluster(_))
    }
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
