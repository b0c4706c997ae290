//! The `tracing` side against a real `redis-server` that is killed and started again: the
//! fault policy's taking over is one warning and its giving back one info event per
//! outage, however many checks the outage answers; the breaker's opening is one warning
//! too; calls and waits run in debug spans that name their operation; refusals are debug
//! events sampled to one a second. In a binary of its own: its tests share the process's
//! subscriber, and each reads only what its own limiter (its prefix) said.

mod common;

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::events::Events;
use common::{CALM_TIMEOUT, FAULT_TIMEOUT, RedisServer};
use tollgate::Quota;
use tollgate_redis::{FaultPolicy, FleetLimiter, Source};
use tracing::Level;

/// The process's subscriber, installed by the first test that asks.
fn events() -> &'static Events {
    static EVENTS: OnceLock<Events> = OnceLock::new();
    EVENTS.get_or_init(Events::install)
}

const TAKES_OVER: &str = "the fault policy answers until Redis is back";
const GIVES_BACK: &str = "the fault policy hands back";
const BREAKER_OPEN: &str = "the circuit breaker is open";

/// Checks until one is answered by Redis (the connection manager reconnects on its own
/// schedule); how many the fault policy answered meanwhile.
async fn until_redis_answers(l: &FleetLimiter) -> u32 {
    let start = Instant::now();
    let mut by_policy = 0;
    loop {
        if l.check("k").await.unwrap().source() == Source::Redis {
            return by_policy;
        }
        by_policy += 1;
        assert!(start.elapsed() < Duration::from_secs(30), "{:?}", l.stats());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_outage_is_one_warning_and_one_recovery_and_calls_are_spans() {
    let events = events();
    let mut server = RedisServer::start();
    let l = FleetLimiter::builder(Quota::per_second(1_000))
        .prefix("events:")
        .timeout(FAULT_TIMEOUT)
        .fault_policy(FaultPolicy::FailOpen)
        .circuit_breaker(3, Duration::from_millis(200))
        .connect(server.client())
        .await
        .unwrap();
    for _ in 0..5 {
        assert_eq!(l.check("k").await.unwrap().source(), Source::Redis);
    }
    let counts = || {
        (
            events.count(Level::WARN, TAKES_OVER),
            events.count(Level::INFO, GIVES_BACK),
            events.count(Level::WARN, BREAKER_OPEN),
        )
    };
    assert_eq!(counts(), (0, 0, 0));

    for outage in 1..=2 {
        server.kill();
        // Checks until the breaker has opened (a reconnecting call may take its timeout to
        // fail) and for long enough that it probes again (every 200 ms) a few times.
        let opened = l.stats().circuit_opened;
        let start = Instant::now();
        while start.elapsed() < Duration::from_millis(700) || l.stats().circuit_opened == opened {
            assert_eq!(l.check("k").await.unwrap().source(), Source::FailOpen);
            assert!(start.elapsed() < Duration::from_secs(30), "{:?}", l.stats());
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let s = l.stats();
        assert!(s.faults >= 3 * outage as u64, "{s:?}");
        assert_eq!(counts(), (outage, outage - 1, outage), "outage {outage}");
        server.spawn();
        until_redis_answers(&l).await;
        for _ in 0..5 {
            assert_eq!(l.check("k").await.unwrap().source(), Source::Redis);
        }
        assert_eq!(counts(), (outage, outage, outage), "outage {outage}");
    }

    // The events' fields: the limiter, the error that started the outage, and the size of
    // the outage (every failed or short-circuited call of it).
    let over = events.matching(|s| s.message().contains(TAKES_OVER));
    assert!(over.iter().all(|s| s.field("limiter") == Some("events:")));
    assert!(over.iter().all(|s| s.field("error").is_some()));
    let back = events.matching(|s| s.message().contains(GIVES_BACK));
    let failed: u64 = back
        .iter()
        .map(|s| s.field("failed_calls").unwrap().parse::<u64>().unwrap())
        .sum();
    let s = l.stats();
    assert_eq!(failed, s.faults + s.short_circuited, "{s:?}");
    let opened = events.matching(|s| s.message().contains(BREAKER_OPEN));
    assert!(opened.iter().all(|s| s.field("failures") == Some("3")));

    // Calls run in debug spans named by operation; a wait in one that says how long.
    let spans = |name: &str, field: &str, value: &str| {
        events
            .matching(|s| s.span == Some(name) && s.field(field) == Some(value))
            .len()
    };
    let before = spans("tollgate_redis.call", "operation", "reserve");
    let waits = spans("tollgate_redis.wait", "limiter", "events:");
    let slow = Quota::per_second(20).allow_burst(1);
    l.until_n_ready_with("w", 1, slow).await.unwrap();
    l.until_n_ready_with("w", 1, slow).await.unwrap(); // waits about 50 ms
    assert_eq!(
        spans("tollgate_redis.call", "operation", "reserve"),
        before + 2
    );
    assert_eq!(
        spans("tollgate_redis.wait", "limiter", "events:"),
        waits + 1
    );
    let call = &events.matching(|s| s.span == Some("tollgate_redis.call"))[0];
    assert_eq!(call.level, Level::DEBUG);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_are_debug_events_sampled_to_one_a_second() {
    let events = events();
    let server = RedisServer::start();
    let l = FleetLimiter::builder(Quota::per_minute(1))
        .prefix("refusals:")
        .timeout(CALM_TIMEOUT)
        .connect(server.client())
        .await
        .unwrap();
    l.check("k").await.unwrap();
    // A flood of refusals (the fast path's, after Redis admitted the burst), a pause longer
    // than the sampling period, one more.
    let start = Instant::now();
    for _ in 0..100 {
        assert!(l.check("k").await.unwrap_err().is_rate_limited());
    }
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    assert!(l.check("k").await.unwrap_err().is_rate_limited());
    let elapsed = start.elapsed();
    let seen = events.matching(|s| {
        s.field("limiter") == Some("refusals:") && s.message().contains("refused (sampled")
    });
    assert!(seen.iter().all(|s| s.level == Level::DEBUG));
    // Each refusal is logged or counted in the next logged one's `unlogged`; the last,
    // past the period, is logged.
    let stands_for: u64 = seen
        .iter()
        .map(|s| 1 + s.field("unlogged").unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(stands_for, 101, "{seen:?}");
    // At most one a second.
    assert!(seen.len() >= 2, "{seen:?}");
    assert!(seen.len() as u64 <= 1 + elapsed.as_secs(), "{seen:?}");
}
