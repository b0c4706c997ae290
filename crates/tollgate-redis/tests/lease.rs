//! Leases for hot keys against a real `redis-server` (see `common/`): round trips saved,
//! the documented bound `b + floor((W + L) / T)` across nodes, unspent cells given back or
//! lost, and a dead Redis with leases held.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{FAULT_TIMEOUT, RedisServer};
use tollgate::Quota;
use tollgate_redis::{FaultPolicy, FleetLimiter, Source};

async fn leasing(server: &RedisServer, quota: Quota, cells: u32, hold: Duration) -> FleetLimiter {
    FleetLimiter::builder(quota)
        .timeout(common::CALM_TIMEOUT)
        .lease(cells, hold)
        .connect(server.client())
        .await
        .unwrap()
}

async fn plain(server: &RedisServer, quota: Quota) -> FleetLimiter {
    FleetLimiter::builder(quota)
        .timeout(common::CALM_TIMEOUT)
        .local_cache(0)
        .connect(server.client())
        .await
        .unwrap()
}

#[tokio::test]
async fn a_hot_key_costs_one_round_trip_per_lease() {
    let server = RedisServer::start();
    // Never short of cells: every lease is granted in full.
    let quota = Quota::per_minute(1).allow_burst(100_000);
    let on = leasing(&server, quota, 10, Duration::from_secs(5)).await;
    let off = plain(&server, quota).await;
    on.peek("warm-up").await.unwrap(); // loads the script
    for (name, l, most) in [("lease on", &on, 100), ("lease off", &off, 1_000)] {
        let before = server.calls("evalsha");
        for _ in 0..1_000 {
            assert_eq!(l.check(name).await.unwrap().source(), Source::Redis);
        }
        let trips = server.calls("evalsha") - before;
        println!("{name}: {trips} round trips for 1,000 checks");
        assert_eq!(trips, most, "{name}");
    }
    let s = on.stats();
    assert_eq!((s.leased, s.spent_locally), (1_000, 900), "{s:?}");
    assert_eq!((s.returned, s.expired_unspent), (0, 0));
    // Redis counted every cell.
    let p = off.peek("lease on").await.unwrap();
    // (peek's remaining counts the cell it asks about as taken)
    assert_eq!(p.remaining(), 100_000 - 1_000 - 1);
}

/// Admissions as `[asked, answered]` intervals on this process's clock: the cell was spent
/// somewhere inside.
type Spans = Arc<Mutex<Vec<(Instant, Instant)>>>;

/// Checks every window against `bound(W)`: for each span's start `x`, the spans that start
/// at or after it, by when they were answered: the `k` first answered were all spent inside
/// `[x, y_k]` (`y_k` the `k`-th answer), so `k <= bound(y_k - x)`. Those are every window
/// that a count of certainly-spent cells can tell apart (a window's count only changes at a
/// span's start or answer). Returns how many windows were checked.
fn check_every_window(spans: &[(Instant, Instant)], bound: impl Fn(Duration) -> u64) -> usize {
    let mut windows = 0;
    for &(x, _) in spans {
        let mut answered: Vec<Instant> = spans
            .iter()
            .filter(|&&(a, _)| a >= x)
            .map(|&(_, r)| r)
            .collect();
        answered.sort_unstable();
        for (k, &y) in answered.iter().enumerate() {
            let w = y - x;
            let count = k as u64 + 1;
            assert!(
                count <= bound(w),
                "{count} cells spent within {w:?}: over {}",
                bound(w)
            );
            windows += 1;
        }
    }
    windows
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_leasing_nodes_stay_within_the_documented_bound() {
    let server = RedisServer::start();
    // 1,000/s, burst 10; six tasks each asking about every 4 ms: near the limit, so leases
    // find several cells at times and a single one at others.
    let (t, b) = (Duration::from_millis(1), 10u64);
    let hold = Duration::from_millis(20);
    let quota = Quota::per_second(1_000).allow_burst(10);
    let nodes = [
        leasing(&server, quota, 5, hold).await,
        leasing(&server, quota, 5, hold).await,
    ];
    let spans: Spans = Arc::default();
    let run = Duration::from_millis(1_000);
    let deadline = Instant::now() + run;
    let mut tasks = Vec::new();
    for n in &nodes {
        for _ in 0..3 {
            let (n, spans) = (n.clone(), Arc::clone(&spans));
            tasks.push(tokio::spawn(async move {
                while Instant::now() < deadline {
                    let asked = Instant::now();
                    match n.check("shared").await {
                        Ok(_) => spans.lock().unwrap().push((asked, Instant::now())),
                        Err(e) => assert!(e.is_rate_limited(), "{e}"),
                    }
                    tokio::time::sleep(Duration::from_millis(4)).await;
                }
            }));
        }
    }
    for task in tasks {
        task.await.unwrap();
    }
    let mut spans = spans.lock().unwrap().clone();
    spans.sort();
    let total = spans.len() as u64;
    let windows = check_every_window(&spans, |w| {
        b + ((w + hold).as_nanos() / t.as_nanos()) as u64
    });
    assert!(windows >= spans.len(), "{windows} windows");
    // Every leased cell is accounted for: spent by the leasing check or locally, given
    // back, or lost.
    for n in &nodes {
        n.return_leases().await.unwrap();
    }
    let s: Vec<_> = nodes.iter().map(|n| n.stats()).collect();
    println!("{total} admitted; {s:?}");
    for s in &s {
        assert_eq!(
            s.leased,
            s.admitted + s.spent_locally + s.returned + s.expired_unspent,
            "{s:?}"
        );
    }
    let spent: u64 = s.iter().map(|s| s.admitted + s.spent_locally).sum();
    assert_eq!(spent, total);
    // Leases were used, and the whole run stayed near the quota's own rate.
    assert!(s.iter().map(|s| s.spent_locally).sum::<u64>() > 0, "{s:?}");
    assert!(s.iter().all(|s| s.faults == 0));
    let run_bound = b + ((run + hold).as_nanos() / t.as_nanos()) as u64;
    assert!(total <= run_bound + 1, "{total} > {run_bound}");
    assert!(total > 0);
}

#[tokio::test]
async fn the_hold_term_is_real() {
    // Cells leased early and spent late come on top of a burst that has refilled: more than
    // b + floor(W / T) in a short window, within b + floor((W + L) / T).
    let server = RedisServer::start();
    let quota = Quota::per_second(10).allow_burst(5); // T = 100 ms, b = 5
    let hold = Duration::from_secs(5);
    let a = leasing(&server, quota, 5, hold).await;
    let other = plain(&server, quota).await;
    a.check("k").await.unwrap(); // leases 5, spends 1, holds 4
    tokio::time::sleep(Duration::from_millis(600)).await; // the burst refills (500 ms)
    let start = Instant::now();
    other.check_n("k", 5).await.unwrap();
    for _ in 0..4 {
        a.check("k").await.unwrap();
    }
    let w = start.elapsed();
    let spent = 9u64;
    let without_hold = 5 + (w.as_millis() / 100) as u64;
    println!("{spent} cells in {w:?}: b + floor(W/T) = {without_hold}");
    if w < Duration::from_millis(300) {
        assert!(spent > without_hold);
    }
    assert!(spent <= 5 + ((w + hold).as_millis() / 100) as u64);
    assert_eq!(a.stats().spent_locally, 4);
}

#[tokio::test]
async fn unspent_cells_are_given_back_when_the_key_allows() {
    let server = RedisServer::start();
    let quota = Quota::per_minute(1).allow_burst(10); // T = 6 s: no refill during the test
    let hold = Duration::from_millis(50);
    let node = leasing(&server, quota, 5, hold).await;
    let other = plain(&server, quota).await;

    node.check("k").await.unwrap(); // 5 leased, 1 spent, 4 held
    // peek's remaining counts the cell it asks about as taken: 10 - 5 - 1.
    assert_eq!(other.peek("k").await.unwrap().remaining(), 4);
    tokio::time::sleep(hold * 2).await;
    // Expired: the 4 go back in the same round trip as the next lease (5 more).
    let before = server.calls("evalsha");
    node.check("k").await.unwrap();
    assert_eq!(server.calls("evalsha") - before, 1);
    assert_eq!(other.peek("k").await.unwrap().remaining(), 3); // 1 + 1 spent, 4 held
    let s = node.stats();
    assert_eq!((s.leased, s.returned, s.expired_unspent), (10, 4, 0));
    // return_leases gives back what is held, expired or not.
    assert_eq!(node.return_leases().await.unwrap(), 4);
    assert_eq!(other.peek("k").await.unwrap().remaining(), 7);
    assert_eq!(node.stats().returned, 8);

    // When someone wrote after the lease, the give-back is declined: the cells are lost.
    node.check("j").await.unwrap(); // 4 held
    other.check("j").await.unwrap();
    tokio::time::sleep(hold * 2).await;
    node.check("j").await.unwrap(); // gives back (declined), leases 4 of the 4 left
    assert!(other.peek("j").await.unwrap_err().is_rate_limited());
    let s = node.stats();
    assert_eq!((s.returned, s.expired_unspent), (8, 4), "{s:?}");
    // reset drops this node's lease (counted lost) with the key.
    node.reset("j").await.unwrap();
    assert_eq!(node.stats().expired_unspent, 7);
}

#[tokio::test]
async fn a_dead_redis_with_leases_held_follows_the_policy() {
    let mut server = RedisServer::start();
    let quota = Quota::per_minute(1).allow_burst(10);
    // Long enough that a loaded machine spends two cells before it passes.
    let hold = Duration::from_millis(1_500);
    let node = FleetLimiter::builder(quota)
        .lease(5, hold)
        .timeout(FAULT_TIMEOUT)
        .fault_policy(FaultPolicy::FailClosed {
            retry_after: Duration::from_secs(1),
        })
        .connect(server.client())
        .await
        .unwrap();
    let start = Instant::now();
    node.check("k").await.unwrap(); // 4 held
    server.kill();
    // Leased cells were admitted by the fleet: spent until they expire, without Redis.
    for _ in 0..2 {
        let ok = node.check("k").await.unwrap();
        assert_eq!(ok.source(), Source::Redis);
    }
    assert!(
        start.elapsed() < hold,
        "the machine was too slow for this test"
    );
    assert_eq!(node.stats().spent_locally, 2);
    tokio::time::sleep(hold).await;
    // Expired: the fault policy decides; the 2 unspent are kept for a give-back.
    let err = node.check("k").await.unwrap_err();
    assert_eq!(err.retry_after(), Some(Duration::from_secs(1)));
    let s = node.stats();
    assert!(s.failed_closed >= 1 && s.faults >= 1, "{s:?}");
    assert_eq!(s.expired_unspent, 0);
    // Redis back, empty: the give-back finds the key gone, so the cells are lost.
    server.restart();
    let recovered = Instant::now();
    loop {
        if node.check("k").await.is_ok() {
            break;
        }
        assert!(recovered.elapsed() < Duration::from_secs(15), "no recovery");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let s = node.stats();
    assert_eq!((s.returned, s.expired_unspent), (0, 2), "{s:?}");
}
