//! A connection that stays open and answers nothing (a hung server, an L4 proxy whose
//! upstream hangs, a host partitioned away without a reset) is replaced: a real
//! `redis-server` behind a proxy of our own (`common/proxy.rs`) that silences the open
//! connection while new ones go through, as a failover behind a virtual address does.
//! Recovery is asserted within a generous bound, never a tight one; the bound on
//! replacements is checked against the elapsed time measured around them.

mod common;

use std::time::{Duration, Instant};

use common::RedisServer;
use common::proxy::Proxy;
use tollgate::Quota;
use tollgate_redis::{FaultPolicy, FleetBuilder, FleetLimiter, Source};

/// How long the limiter may take to find Redis again: many times what it needs (a few
/// timeouts, a cool-down, a connection), so that a loaded machine never fails the test.
const RECOVERY: Duration = Duration::from_secs(30);

fn builder(timeout: Duration) -> FleetBuilder {
    FleetLimiter::builder(Quota::per_second(100_000))
        .timeout(timeout)
        .fault_policy(FaultPolicy::FailClosed {
            retry_after: Duration::from_millis(1),
        })
}

/// Checks until Redis answers one, within [`RECOVERY`].
async fn until_redis_answers(l: &FleetLimiter) {
    let start = Instant::now();
    loop {
        if let Ok(ok) = l.check("k").await
            && ok.source() == Source::Redis
        {
            return;
        }
        assert!(
            start.elapsed() < RECOVERY,
            "Redis did not answer again within {RECOVERY:?}: {:?}",
            l.stats()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_gone_silent_is_replaced_and_redis_answers_again() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port);
    let l = builder(Duration::from_millis(300))
        .circuit_breaker(3, Duration::from_millis(400))
        .connect(proxy.client())
        .await
        .unwrap();
    until_redis_answers(&l).await;
    let (before, accepted) = (l.stats(), proxy.accepted());
    // The open connection goes silent; a new one would reach the server.
    proxy.silence_open();
    assert!(l.check("k").await.unwrap_err().is_rate_limited());
    until_redis_answers(&l).await;
    let s = l.stats();
    assert!(s.timeouts - before.timeouts >= 3, "{s:?}");
    assert!(s.circuit_opened > before.circuit_opened, "{s:?}");
    assert!(s.reconnects > before.reconnects, "{s:?}");
    assert!(proxy.accepted() > accepted, "no new connection");
    // And it stays: the new connection answers.
    for _ in 0..20 {
        assert_eq!(l.check("k").await.unwrap().source(), Source::Redis);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_breaker_off_a_silent_connection_is_replaced_too() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port);
    let l = builder(Duration::from_millis(200))
        .circuit_breaker(0, Duration::ZERO)
        .connect(proxy.client())
        .await
        .unwrap();
    until_redis_answers(&l).await;
    proxy.silence_open();
    until_redis_answers(&l).await;
    let s = l.stats();
    assert!(s.timeouts >= 1 && s.reconnects >= 1, "{s:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_never_answers_is_reconnected_to_at_most_once_a_second() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port);
    let l = builder(Duration::from_millis(50))
        .circuit_breaker(0, Duration::ZERO)
        .connect(proxy.client())
        .await
        .unwrap();
    until_redis_answers(&l).await;
    // Every connection silent, the open one and every new one: each check times out, and
    // two tasks check at once, so many timeouts find a replacement in flight.
    proxy.silence_all();
    let before = l.stats();
    let start = Instant::now();
    let tasks: Vec<_> = (0..2)
        .map(|_| {
            let l = l.clone();
            tokio::spawn(async move {
                while start.elapsed() < Duration::from_secs(3) {
                    assert!(l.check("k").await.unwrap_err().is_rate_limited());
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let s = l.stats();
    let elapsed = start.elapsed();
    let (reconnects, timeouts) = (
        s.reconnects - before.reconnects,
        s.timeouts - before.timeouts,
    );
    // Replacements start at least a second apart: at most one more than the whole seconds
    // elapsed, however many calls timed out.
    assert!(reconnects >= 1, "{s:?}");
    assert!(
        reconnects <= 1 + elapsed.as_secs(),
        "{reconnects} replacements in {elapsed:?} ({timeouts} timeouts)"
    );
    assert!(timeouts > 2 * reconnects, "{s:?}");
}

/// While Redis answers, the connection is never replaced: one connection through the proxy
/// for the limiter's whole life (its checks, waits and presence beats).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_healthy_connection_is_never_replaced() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port);
    let l = FleetLimiter::builder(Quota::per_second(1000))
        .timeout(common::CALM_TIMEOUT)
        .heartbeat(Duration::from_millis(50))
        .connect(proxy.client())
        .await
        .unwrap();
    for i in 0..500 {
        let _ = l.check(format!("k{}", i % 7)).await;
    }
    l.until_ready("w").await.unwrap();
    let s = l.stats();
    assert_eq!((s.faults, s.reconnects), (0, 0), "{s:?}");
    assert_eq!(proxy.accepted(), 1);
}
