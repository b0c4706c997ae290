//! The server's `maxmemory-policy` against a real `redis-server`: an evicting policy can
//! forget a key's TAT (the fleet then admits it afresh), so the limiter reads it, says so
//! once at connect with a `tracing` warning, and answers `memory_policy()`. In a binary of
//! its own: the test installs the process's subscriber.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{CALM_TIMEOUT, FAULT_TIMEOUT, RedisServer};
use tollgate::Quota;
use tollgate_redis::{FleetLimiter, MemoryPolicy};
use tracing::subscriber::Subscriber;
use tracing::{Event, Level, Metadata};

/// Counts warning events that name `maxmemory-policy`.
struct Warnings(Arc<AtomicUsize>);

struct Message(String);

impl tracing::field::Visit for Message {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
}

impl Subscriber for Warnings {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &Event<'_>) {
        let mut message = Message(String::new());
        event.record(&mut message);
        if *event.metadata().level() == Level::WARN && message.0.contains("maxmemory-policy") {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

async fn node(client: redis::Client, timeout: Duration) -> FleetLimiter {
    FleetLimiter::builder(Quota::per_second(10))
        .timeout(timeout)
        .connect(client)
        .await
        .unwrap()
}

/// Waits up to 5 s for `count` to reach `want` (the warning comes from a background task),
/// then a little longer, to see that it does not go past it.
async fn settles_at(count: &AtomicUsize, want: usize) {
    let start = Instant::now();
    while count.load(Ordering::Relaxed) < want && start.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(count.load(Ordering::Relaxed), want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evicting_memory_policy_is_reported_and_warned_of_at_connect() {
    let warnings = Arc::new(AtomicUsize::new(0));
    tracing::subscriber::set_global_default(Warnings(Arc::clone(&warnings))).unwrap();
    let mut server = RedisServer::start();

    // Redis's default: no eviction, no warning.
    let l = node(server.client(), CALM_TIMEOUT).await;
    assert_eq!(l.memory_policy().await.unwrap(), MemoryPolicy::NoEviction);
    settles_at(&warnings, 0).await;

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
        settles_at(&warnings, warned).await;
    }

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
    settles_at(&warnings, 2).await;

    // No server: an error for the question, and `connect` itself still succeeds.
    server.kill();
    let dead = node(server.client(), FAULT_TIMEOUT).await;
    assert!(dead.memory_policy().await.is_err());
}
