//! The `tracing` side against a real `redis-server` that is killed and started again: the
//! fault policy's taking over is one warning and its giving back one info event per
//! outage, however many checks the outage answers; the breaker's opening is one warning
//! too; calls and waits run in debug spans that name their operation. In a binary of its
//! own: the test installs the process's subscriber.

mod common;

use std::time::{Duration, Instant};

use common::events::Events;
use common::{FAULT_TIMEOUT, RedisServer};
use tollgate::Quota;
use tollgate_redis::{FaultPolicy, FleetLimiter, Source};
use tracing::Level;

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
    let events = Events::install();
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
