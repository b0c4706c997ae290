//! `until_ready` on the fleet limit against a real `redis-server`: reservations never
//! over-admit, cancelled waits give their cells back (when the key still holds what they
//! wrote), bounded waits reserve nothing, and a dead Redis follows the fault policy.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{CLOCK_SKEW, FAULT_TIMEOUT, RedisServer};
use tollgate::Quota;
use tollgate_redis::{FaultPolicy, FleetLimiter, Source, Stats};

async fn node(server: &RedisServer, quota: Quota) -> FleetLimiter {
    FleetLimiter::builder(quota)
        .timeout(common::CALM_TIMEOUT)
        .connect(server.client())
        .await
        .unwrap()
}

fn pttl(server: &RedisServer, key: &str) -> i64 {
    redis::cmd("PTTL")
        .arg(format!("tollgate:{key}"))
        .query(&mut server.conn())
        .unwrap()
}

/// Polls `l`'s stats until `done` says so, for up to 5 s.
async fn until_stats(l: &FleetLimiter, done: impl Fn(&Stats) -> bool) -> Stats {
    let start = Instant::now();
    loop {
        let s = l.stats();
        if done(&s) {
            return s;
        }
        assert!(start.elapsed() < Duration::from_secs(5), "{s:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_on_two_nodes_never_over_admit() {
    let server = RedisServer::start();
    let quota = Quota::per_second(20).allow_burst(2); // T = 50 ms, b = 2
    let t = Duration::from_millis(50);
    let nodes = [node(&server, quota).await, node(&server, quota).await];
    for n in &nodes {
        n.peek("warm-up").await.unwrap(); // connect and load the script first
    }
    let start = Instant::now();
    let deadline = start + Duration::from_millis(600);
    let done = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for n in &nodes {
        for _ in 0..3 {
            let (l, done) = (n.clone(), Arc::clone(&done));
            tasks.push(tokio::spawn(async move {
                while Instant::now() < deadline {
                    let ok = l.until_ready("k").await.unwrap();
                    assert_eq!(ok.source(), Source::Redis);
                    done.lock().unwrap().push(Instant::now());
                }
            }));
        }
    }
    for task in tasks {
        task.await.unwrap();
    }
    let mut done = done.lock().unwrap().clone();
    done.sort();
    // A waiter completes no earlier than its server instant, and every server instant is
    // after `start`: so by any local instant c, at most b + floor((c - start) / T) waiters
    // have completed, up to the clocks' skew (`CLOCK_SKEW`, 0.5 % of an interval; an extra
    // cell would break the bound for up to a whole interval).
    for (i, c) in done.iter().enumerate() {
        let since = c.duration_since(start) + CLOCK_SKEW;
        let bound = 2 + (since.as_nanos() / t.as_nanos()) as usize;
        assert!(
            i < bound,
            "{} admitted by {:?}",
            i + 1,
            c.duration_since(start)
        );
    }
    // And it admits at the rate: 13 cells by 600 ms, most of them despite the scheduling.
    assert!(done.len() >= 8, "{}", done.len());
    let s = nodes[0].stats();
    assert_eq!(s.limited, 0);
    assert!(s.reserved > 0, "{s:?}");
}

#[tokio::test]
async fn a_cancelled_wait_gives_its_cell_back_if_the_key_holds_what_it_wrote() {
    let server = RedisServer::start();
    let quota = Quota::per_second(1); // T = 1 s, b = 1
    let (a, b) = (node(&server, quota).await, node(&server, quota).await);

    // Alone: dropped while waiting, the reservation is undone.
    a.check("alone").await.unwrap(); // TAT = now + 1 s
    let cancelled = tokio::time::timeout(Duration::from_millis(50), a.until_ready("alone")).await;
    assert!(cancelled.is_err(), "the cell is 1 s off");
    let s = until_stats(&a, |s| s.refunded + s.refunds_declined > 0).await;
    assert_eq!((s.reserved, s.refunded, s.refunds_declined), (1, 1, 0));
    assert!(
        pttl(&server, "alone") <= 1_001, // the expiry is the TAT rounded up to the ms: 1 s off, not 2 s
        "{}",
        pttl(&server, "alone")
    );
    // And this node's fast path forgot the reservation: the next wait is one interval.
    let wait = a.peek("alone").await.unwrap_err().retry_after().unwrap();
    assert!(wait <= Duration::from_secs(1), "{wait:?}");

    // Two waiters on two nodes: the first one's refund must not give back the second's.
    b.check("pair").await.unwrap(); // TAT = now + 1 s
    let first = tokio::spawn({
        let a = a.clone();
        async move { a.until_ready("pair").await }
    });
    until_stats(&a, |s| s.reserved == 2).await; // TAT = now + 2 s
    let second = tokio::spawn({
        let b = b.clone();
        async move { b.until_ready("pair").await }
    });
    until_stats(&b, |s| s.reserved == 1).await; // TAT = now + 3 s
    first.abort();
    let s = until_stats(&a, |s| s.refunded + s.refunds_declined > 1).await;
    assert_eq!((s.refunded, s.refunds_declined), (1, 1), "the key moved on");
    let held = pttl(&server, "pair");
    assert!(held > 2_000, "{held}");
    // The second's refund finds its own write and restores the first's TAT.
    second.abort();
    let s = until_stats(&b, |s| s.refunded + s.refunds_declined > 0).await;
    assert_eq!((s.refunded, s.refunds_declined), (1, 0));
    let held = pttl(&server, "pair");
    assert!((1_000..=2_001).contains(&held), "{held}");
}

#[tokio::test]
async fn a_bounded_wait_reserves_nothing_when_too_far_off() {
    let server = RedisServer::start();
    let quota = Quota::per_second(1).allow_burst(2); // T = 1 s, b = 2
    let l = node(&server, quota).await;
    l.check_n("k", 2).await.unwrap(); // TAT = now + 2 s: the next cell in 1 s
    let err = l
        .until_ready("k")
        .within(Duration::from_millis(100))
        .await
        .unwrap_err();
    let wait = err.retry_after().unwrap();
    assert!(wait > Duration::from_millis(800), "{wait:?}");
    assert_eq!(l.stats().reserved, 0);
    // The expiry is the TAT rounded up to the ms: at most 2,001 ms off.
    assert!(pttl(&server, "k") <= 2_001, "{}", pttl(&server, "k"));
    // Known to the fast path (the burst was spent), the second refusal costs no round trip.
    let trips = l.stats().round_trips;
    let err = l.until_ready("k").within(Duration::ZERO).await.unwrap_err();
    assert!(err.is_rate_limited());
    assert_eq!(l.stats().round_trips, trips);
    // A bound that covers the wait reserves, and admits when the cell comes.
    let start = Instant::now();
    let ok = l
        .until_ready("k")
        .within(Duration::from_secs(2))
        .await
        .unwrap();
    assert!(start.elapsed() >= Duration::from_millis(500));
    assert_eq!(ok.remaining(), 0);
    // The core's type carries the same header values.
    let core: tollgate::Admitted = ok.into();
    assert_eq!((core.limit(), core.remaining()), (2, 0));
    assert_eq!(core.reset_after(), ok.reset_after());
    assert!(ok.reset_after() > Duration::from_millis(900), "{ok:?}");
    // More than the burst can never be waited for.
    let err = l.until_n_ready("k", 3).await.unwrap_err();
    assert!(err.is_insufficient_capacity());
}

#[tokio::test]
async fn a_dead_redis_follows_the_fault_policy() {
    let mut server = RedisServer::start();
    let quota = Quota::per_minute(4); // T = 15 s, b = 4
    let build = |policy| {
        FleetLimiter::builder(quota)
            .timeout(FAULT_TIMEOUT)
            .fault_policy(policy)
            .connect(server.client())
    };
    let open = build(FaultPolicy::FailOpen).await.unwrap();
    let retry_after = Duration::from_secs(2);
    let closed = build(FaultPolicy::FailClosed { retry_after })
        .await
        .unwrap();
    let local = build(FaultPolicy::Local { nodes: 2 }).await.unwrap();
    for l in [&open, &closed, &local] {
        assert_eq!(l.until_ready("k").await.unwrap().source(), Source::Redis);
    }
    server.kill();
    assert_eq!(
        open.until_ready("k").await.unwrap().source(),
        Source::FailOpen
    );
    let err = closed.until_ready("k").await.unwrap_err();
    assert_eq!(err.retry_after(), Some(retry_after));
    // 1/2 of the fleet's rate: burst 2, one every 30 s; a bounded wait is refused. The
    // admissions carry the local share's values, as a check's would: 1 then 0 left, the
    // key full again 30 s then 60 s on.
    for left in [1, 0] {
        let ok = local.until_ready("k").await.unwrap();
        assert_eq!(ok.source(), Source::Local);
        assert_eq!((ok.limit(), ok.remaining()), (2, left), "{ok:?}");
        let full_in = Duration::from_secs(30 * (2 - u64::from(left)));
        assert!(
            ok.reset_after() <= full_in && ok.reset_after() > full_in - Duration::from_secs(5),
            "{ok:?}"
        );
    }
    let err = local
        .until_ready("k")
        .within(Duration::from_millis(100))
        .await
        .unwrap_err();
    assert!(
        err.retry_after().unwrap() > Duration::from_secs(29),
        "{err:?}"
    );
    assert_eq!(local.stats().fell_back, 3);
}

#[test]
fn the_wait_future_is_send_and_unpin() {
    fn pin<T: Send + Unpin + 'static>() {}
    pin::<tollgate_redis::UntilReady>();
}

/// `n = 0` asks for nothing, so it never waits, bounded or not, whatever the key's state, on
/// every path: a plain node, a node whose fast path has the key's refusal cached, a leasing
/// node; and `check_n(.., 0)` agrees (admitted, the key's state, nothing spent).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zero_cells_are_ready_at_once_on_every_path() {
    let server = RedisServer::start();
    // One cell an hour: once spent, the key's next cell is an hour off.
    let quota = Quota::per_hour(1);
    let plain = node(&server, quota).await;
    let cached = FleetLimiter::builder(quota)
        .timeout(common::CALM_TIMEOUT)
        .local_cache(1_000)
        .connect(server.client())
        .await
        .unwrap();
    let leasing = FleetLimiter::builder(quota)
        .timeout(common::CALM_TIMEOUT)
        .lease(1, Duration::from_secs(1))
        .connect(server.client())
        .await
        .unwrap();
    plain.check("spent").await.unwrap();
    // The cached node learns the refusal, so its fast path knows the key is spent.
    assert!(cached.check("spent").await.unwrap_err().is_rate_limited());
    for (name, l) in [
        ("plain", &plain),
        ("cached", &cached),
        ("leasing", &leasing),
    ] {
        let bounded = tokio::time::timeout(
            Duration::from_secs(5),
            l.until_n_ready("spent", 0).within(Duration::from_millis(1)),
        );
        let ok = bounded.await.expect("a zero-cell wait returned at once");
        let ok = ok.unwrap_or_else(|e| panic!("{name}: {e:?}"));
        assert_eq!((ok.remaining(), ok.source()), (0, Source::Redis), "{name}");
        assert!(
            ok.reset_after() > Duration::from_secs(3500),
            "{name}: {ok:?}"
        );
        let unbounded = tokio::time::timeout(Duration::from_secs(5), l.until_n_ready("spent", 0));
        assert!(unbounded.await.expect("returned at once").is_ok(), "{name}");
        let ok = l.check_n("spent", 0).await.unwrap();
        assert_eq!(ok.remaining(), 0, "{name}");
    }
    // Nothing was spent: a fresh key still has its cell after zero-cell waits.
    plain.until_n_ready("fresh", 0).await.unwrap();
    assert_eq!(plain.check("fresh").await.unwrap().remaining(), 0);
}
