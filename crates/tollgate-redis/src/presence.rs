//! How many nodes share the limit, learned from Redis: each node's limiter keeps an entry
//! in one sorted set (`prefix + "\0{fleet}"`, `engine::internal_key`: no client's key names
//! it), member: the node's id, score: the server's time of
//! its last heartbeat), refreshes it every heartbeat, and reads back how many entries are
//! younger than three heartbeats. [`FaultPolicy::LocalShare`](crate::FaultPolicy) divides
//! the limit by the last count seen, so that N nodes deciding alone while Redis is away
//! admit about the limit between them, not N times it.
//!
//! The beat is a small script (the server's `TIME`, so the nodes' clocks never matter):
//! add or refresh this node, drop entries older than the window, give the set a TTL of the
//! window (a fleet that stops leaves nothing behind), and answer the count. It runs in the
//! background, on tollgate's timer between beats, holding only a weak reference to this
//! node's [`Presence`], which the limiter owns: the task ends at the first beat after the
//! limiter (every clone) is dropped. A presence holds what a beat needs (the connection, the
//! set's key, the per-call timeout) and knows nothing else of the limiter.

use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use crate::conn::Link;

const BEAT_LUA: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local window = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
redis.call('PEXPIRE', KEYS[1], window)
return redis.call('ZCARD', KEYS[1])
"#;

/// This node's part in the count: its id, and the count it last read.
pub(crate) struct Presence {
    id: u64,
    every: Duration,
    /// The fleet's size at the last beat Redis answered; 0 before any.
    seen: AtomicU32,
    /// The limiter's connection, the sorted set's key, and the limiter's per-call timeout.
    link: Arc<Link>,
    key: Vec<u8>,
    timeout: Duration,
}

impl Presence {
    pub(crate) fn new(
        every: Duration,
        link: Arc<Link>,
        key: Vec<u8>,
        timeout: Duration,
    ) -> Presence {
        // An id no other node picks: a randomly seeded hash of what is unique here.
        let id = std::hash::BuildHasher::hash_one(
            &std::collections::hash_map::RandomState::new(),
            (std::process::id(), Instant::now()),
        );
        Presence {
            id,
            every: every.max(Duration::from_millis(1)),
            seen: AtomicU32::new(0),
            link,
            key,
            timeout,
        }
    }

    /// The fleet's size as last seen (0: never).
    pub(crate) fn seen(&self) -> u32 {
        // ordering: a figure read on its own; it publishes nothing.
        self.seen.load(Relaxed)
    }
}

/// Beats until the presence (and so the limiter that owns it) is gone: the background task
/// `connect` starts.
pub(crate) async fn beat(presence: Weak<Presence>) {
    loop {
        let Some(presence) = presence.upgrade() else {
            return;
        };
        let every = presence.every;
        let window = (every * 3).as_millis().max(1) as u64;
        let (mut conn, _) = presence.link.get();
        // `EVAL` with the text, not `EVALSHA`: a few hundred bytes a second, and the
        // limiter's own script calls (`EVALSHA`) stay countable apart from the beats.
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(BEAT_LUA)
            .arg(1)
            .arg(&presence.key)
            .arg(presence.id)
            .arg(window);
        let asked = cmd.query_async::<u32>(&mut conn);
        if let Ok(Ok(count)) = crate::rt::timeout(presence.timeout, asked).await {
            // ordering: as in `seen`.
            presence.seen.store(count, Relaxed);
        }
        drop(presence);
        tollgate::timer::sleep_until(Instant::now() + every).await;
    }
}
