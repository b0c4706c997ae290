//! The `metrics` feature against a real `redis-server`: after known traffic (admissions,
//! fast-path refusals, a peek, a reset, a script reload, waits and their refund, leases, and
//! Redis killed under the fault policy and the breaker), every metric equals the `stats()`
//! field it mirrors, and the figures are the ones the traffic makes. Each test records into
//! a recorder of its own, installed for the test's thread while the limiter is built (the
//! limiter registers its handles then).

#![cfg(feature = "metrics")]

mod common;

use std::time::{Duration, Instant};

use common::recorder::Recorder;
use common::{CALM_TIMEOUT, FAULT_TIMEOUT, RedisServer};
use tollgate::Quota;
use tollgate_redis::{FaultPolicy, FleetBuilder, FleetLimiter, Source, Stats};

/// Builds the limiter with `recorder` as this thread's: its handles go there.
async fn connect(recorder: &Recorder, builder: FleetBuilder, server: &RedisServer) -> FleetLimiter {
    let _local = metrics::set_default_local_recorder(recorder);
    builder.connect(server.client()).await.unwrap()
}

const OPERATIONS: [&str; 9] = [
    "check", "peek", "reserve", "refund", "lease", "giveback", "penalize", "reset", "other",
];

/// Round trips recorded in the latency histogram, per operation.
fn round_trips(r: &Recorder, limiter: &str) -> Vec<(&'static str, usize)> {
    OPERATIONS
        .iter()
        .map(|&op| {
            let labels = [("limiter", limiter), ("operation", op)];
            (
                op,
                r.samples("tollgate_redis_round_trip_seconds", &labels)
                    .len(),
            )
        })
        .filter(|&(_, n)| n > 0)
        .collect()
}

/// Every counter metric against the `Stats` field it mirrors.
fn assert_agree(r: &Recorder, limiter: &str, s: &Stats) {
    let one = |name: &str| r.counter(name, &[("limiter", limiter)]);
    let by = |name: &str, label: &str, value: &str| {
        r.counter(name, &[("limiter", limiter), (label, value)])
    };
    let decision = |o| by("tollgate_redis_decisions_total", "outcome", o);
    let answer = |p| by("tollgate_redis_fault_answers_total", "policy", p);
    let reservation = |o| by("tollgate_redis_reservations_total", "outcome", o);
    let lease = |k| by("tollgate_redis_lease_cells_total", "kind", k);
    let metrics = [
        one("tollgate_redis_round_trips_total"),
        decision("admitted"),
        decision("limited"),
        decision("local_refusal"),
        one("tollgate_redis_faults_total"),
        one("tollgate_redis_timeouts_total"),
        answer("fail_open"),
        answer("fail_closed"),
        answer("local"),
        reservation("reserved"),
        reservation("refunded"),
        reservation("refund_declined"),
        lease("leased"),
        lease("spent_locally"),
        lease("returned"),
        lease("expired_unspent"),
        one("tollgate_redis_circuit_opened_total"),
        one("tollgate_redis_short_circuited_total"),
        one("tollgate_redis_script_reloads_total"),
        one("tollgate_redis_reconnects_total"),
    ];
    let stats = [
        s.round_trips,
        s.admitted,
        s.limited,
        s.local_refusals,
        s.faults,
        s.timeouts,
        s.failed_open,
        s.failed_closed,
        s.fell_back,
        s.reserved,
        s.refunded,
        s.refunds_declined,
        s.leased,
        s.spent_locally,
        s.returned,
        s.expired_unspent,
        s.circuit_opened,
        s.short_circuited,
        s.script_reloads,
        s.reconnects,
    ];
    assert_eq!(metrics, stats, "metrics against {s:?}");
    // Every call sent is timed once, whatever its fate.
    let timed: usize = round_trips(r, limiter).iter().map(|&(_, n)| n).sum();
    assert_eq!(timed as u64, s.round_trips);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metrics_count_what_stats_counts_through_an_outage() {
    let mut server = RedisServer::start();
    let recorder = Recorder::default();
    let builder = FleetLimiter::builder(Quota::per_minute(3))
        .prefix("outage:")
        .timeout(FAULT_TIMEOUT)
        .fault_policy(FaultPolicy::FailOpen)
        .circuit_breaker(2, Duration::from_secs(600));
    let l = connect(&recorder, builder, &server).await;
    let gauge = |name| recorder.gauge(name, &[("limiter", "outage:")]);
    assert_eq!(gauge("tollgate_redis_circuit_open"), Some(0.0));
    assert_eq!(gauge("tollgate_redis_fault_policy_active"), Some(0.0));

    // The burst of 3 admitted by Redis; the last spends it, so the next 4 are refused by
    // the fast path without a round trip.
    for _ in 0..3 {
        assert_eq!(l.check("a").await.unwrap().source(), Source::Redis);
    }
    for _ in 0..4 {
        assert!(l.check("a").await.unwrap_err().is_rate_limited());
    }
    // The server had never run the script: the first call loaded it.
    assert_eq!(l.stats().script_reloads, 1);
    l.peek("b").await.unwrap();
    assert!(l.reset("a").await.unwrap());
    // The server forgets its scripts: the next call loads it again, within the call.
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query(&mut server.conn())
        .unwrap();
    assert_eq!(l.check("c").await.unwrap().source(), Source::Redis);
    // A wait with nothing to wait for: reserved, admitted.
    l.until_ready("d").await.unwrap();
    let s = l.stats();
    assert_eq!(
        (
            s.round_trips,
            s.admitted,
            s.local_refusals,
            s.script_reloads
        ),
        (7, 5, 4, 2),
        "{s:?}"
    );
    assert_eq!(
        round_trips(&recorder, "outage:"),
        [("check", 4), ("peek", 1), ("reserve", 1), ("reset", 1)]
    );
    assert_agree(&recorder, "outage:", &s);

    // Redis killed: the fault policy answers; after 2 failures in a row the breaker opens,
    // and 3 more checks are answered without a call.
    server.kill();
    let start = Instant::now();
    while l.stats().circuit_opened == 0 {
        assert_eq!(l.check("e").await.unwrap().source(), Source::FailOpen);
        assert!(start.elapsed() < Duration::from_secs(30), "{:?}", l.stats());
    }
    assert_eq!(gauge("tollgate_redis_circuit_open"), Some(1.0));
    assert_eq!(gauge("tollgate_redis_fault_policy_active"), Some(1.0));
    for _ in 0..3 {
        assert_eq!(l.check("e").await.unwrap().source(), Source::FailOpen);
    }
    let s = l.stats();
    assert_eq!(s.short_circuited, 3, "{s:?}");
    assert_eq!(s.failed_open, s.faults + 3, "{s:?}");
    assert_eq!(s.circuit_opened, 1);
    assert_agree(&recorder, "outage:", &s);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metrics_count_leases_and_refunds_as_stats_does() {
    let server = RedisServer::start();
    let recorder = Recorder::default();
    let builder = FleetLimiter::builder(Quota::per_minute(1).allow_burst(20))
        .prefix("leases:")
        .timeout(CALM_TIMEOUT)
        .lease(4, Duration::from_secs(600));
    let l = connect(&recorder, builder, &server).await;
    // 8 checks of a hot key: two leases of 4 cells, each taken by a check that spends one.
    for _ in 0..8 {
        l.check("hot").await.unwrap();
    }
    assert_eq!(l.return_leases().await.unwrap(), 0); // all spent
    // A wait a minute off (a minute's rate, its burst of 1 spent), dropped while it waits:
    // its cell is given back.
    let key_quota = Quota::per_minute(1);
    l.until_n_ready_with("w", 1, key_quota).await.unwrap();
    let mut waiting = Box::pin(l.until_n_ready_with("w", 1, key_quota));
    // Polled until its reservation is answered (a wait dropped while that call is in flight
    // cannot give its cell back), then dropped.
    let start = Instant::now();
    while l.stats().reserved < 2 {
        let polled = tokio::time::timeout(Duration::from_millis(10), waiting.as_mut()).await;
        assert!(polled.is_err(), "a minute's wait is over");
        assert!(start.elapsed() < Duration::from_secs(20), "{:?}", l.stats());
    }
    drop(waiting);
    while l.stats().refunded == 0 {
        assert!(start.elapsed() < Duration::from_secs(20), "{:?}", l.stats());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let s = l.stats();
    assert_eq!(
        (
            s.leased,
            s.spent_locally,
            s.admitted,
            s.reserved,
            s.refunded
        ),
        (8, 6, 4, 2, 1),
        "{s:?}"
    );
    assert_eq!(
        round_trips(&recorder, "leases:"),
        [("reserve", 2), ("refund", 1), ("lease", 2)]
    );
    assert_agree(&recorder, "leases:", &s);
}
