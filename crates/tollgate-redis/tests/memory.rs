//! The server's `maxmemory-policy` against a real `redis-server`: an evicting policy can
//! forget a key's TAT (the fleet then admits it afresh), so the limiter reads it, says so
//! once at connect with a `tracing` warning, and answers `memory_policy()`. In a binary of
//! its own: the test installs the process's subscriber.

mod common;

use std::time::{Duration, Instant};

use common::events::Events;
use common::{CALM_TIMEOUT, FAULT_TIMEOUT, RedisServer};
use tollgate::Quota;
use tollgate_redis::{FleetLimiter, MemoryPolicy};
use tracing::Level;

async fn node(client: redis::Client, timeout: Duration) -> FleetLimiter {
    FleetLimiter::builder(Quota::per_second(10))
        .timeout(timeout)
        .connect(client)
        .await
        .unwrap()
}

/// The warnings that name `maxmemory-policy`.
fn warnings(events: &Events) -> usize {
    events.count(Level::WARN, "maxmemory-policy")
}

/// Waits up to 5 s for the warnings to reach `want` (they come from a background task),
/// then a little longer, to see that they do not go past it.
async fn settles_at(events: &Events, want: usize) {
    let start = Instant::now();
    while warnings(events) < want && start.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(warnings(events), want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evicting_memory_policy_is_reported_and_warned_of_at_connect() {
    let events = Events::install();
    let mut server = RedisServer::start();

    // Redis's default: no eviction, no warning.
    let l = node(server.client(), CALM_TIMEOUT).await;
    assert_eq!(l.memory_policy().await.unwrap(), MemoryPolicy::NoEviction);
    settles_at(&events, 0).await;

    // Every evicting policy is reported, `volatile-*` too (the keys carry TTLs), and a
    // limiter connecting to such a server warns once.
    for (policy, warned) in [("allkeys-lru", 1), ("volatile-ttl", 2)] {
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("maxmemory-policy")
            .arg(policy)
            .query(&mut server.conn())
            .unwrap();
        assert_eq!(
            l.memory_policy().await.unwrap(),
            MemoryPolicy::Evicting(policy.to_owned())
        );
        let _fresh = node(server.client(), CALM_TIMEOUT).await;
        settles_at(&events, warned).await;
    }
    // The warning's fields say which policy, and which limiter (its key prefix).
    let said = events.matching(|s| s.level == Level::WARN && s.field("policy").is_some());
    let fields: Vec<_> = said
        .iter()
        .map(|s| (s.field("policy").unwrap(), s.field("limiter").unwrap()))
        .collect();
    assert_eq!(
        fields,
        [("allkeys-lru", "tollgate:"), ("volatile-ttl", "tollgate:")]
    );

    // A user the server does not let run CONFIG (as managed services do): unknown, and the
    // limiter works.
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("limited")
        .arg(&["on", ">secret", "~*", "+@all", "-config"])
        .query(&mut server.conn())
        .unwrap();
    let url = format!("redis://limited:secret@127.0.0.1:{}/", server.port);
    let limited = node(redis::Client::open(url).unwrap(), CALM_TIMEOUT).await;
    assert_eq!(
        limited.memory_policy().await.unwrap(),
        MemoryPolicy::Unknown
    );
    assert!(limited.check("k").await.is_ok());
    settles_at(&events, 2).await;

    // No server: an error for the question, and `connect` itself still succeeds.
    server.kill();
    let dead = node(server.client(), FAULT_TIMEOUT).await;
    assert!(dead.memory_policy().await.is_err());
}
