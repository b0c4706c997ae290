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

use crate::observe::Route;
use redis::aio::{ConnectionLike, ConnectionManager};
use redis::cluster_async::ClusterConnection;
use redis::{
    Cmd, ErrorKind, FromRedisValue, Pipeline, RedisFuture, RedisResult, Script, ServerErrorKind,
    Value,
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
        &self,
        script: &Script,
        code: &str,
        fill: impl Fn(&mut Cmd),
        reloaded: impl FnOnce(),
    ) -> RedisResult<T> {
        let mut conn = self.clone();
        let mut evalsha = redis::cmd("EVALSHA");
        evalsha.arg(script.get_hash());
        fill(&mut evalsha);
        match evalsha.query_async(&mut conn).await {
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                reloaded();
                match self {
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

    /// The range of slots a call on `key` goes to: the only one on one server (index 0, all
    /// slots), else range `slot / 1,024` of a cluster.
    pub(crate) fn route(&self, key: &[u8]) -> Route {
        const WIDTH: u16 = (16_384 / ROUTES) as u16;
        match self {
            Conn::Single(_) => Route {
                index: 0,
                first_slot: 0,
                last_slot: 16_383,
            },
            Conn::Cluster(_) => {
                let first_slot = slot(key) / WIDTH * WIDTH;
                Route {
                    index: usize::from(first_slot / WIDTH),
                    first_slot,
                    last_slot: first_slot + WIDTH - 1,
                }
            }
        }
    }
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
