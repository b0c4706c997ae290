//! tollgate-redis against a real `redis-server` (see `common/`): exactness across nodes,
//! per-call quotas, TTLs, the fast path, script eviction, faults, bad input.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::{FAULT_TIMEOUT, RedisServer};
use tollgate::{Error, Quota};
use tollgate_redis::{FaultPolicy, FleetLimiter, Gate, Source};

async fn node(server: &RedisServer, quota: Quota) -> FleetLimiter {
    FleetLimiter::builder(quota)
        .timeout(common::CALM_TIMEOUT)
        .connect(server.client())
        .await
        .unwrap()
}

fn pttl(server: &RedisServer, key: &[u8]) -> i64 {
    redis::cmd("PTTL")
        .arg(key)
        .query(&mut server.conn())
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_on_one_key_admit_exactly_the_bound() {
    let server = RedisServer::start();
    // T = 10 ms, b = 50: a burst of half a second, so that a task descheduled on a loaded
    // machine loses no cells unless it stalls for longer than that.
    let quota = Quota::per_second(100).allow_burst(50);
    let nodes = [node(&server, quota).await, node(&server, quota).await];
    let admitted = Arc::new(AtomicU64::new(0));
    let start_us = server.time_us();
    let run = Duration::from_millis(1_000);
    let deadline = Instant::now() + run;
    let mut tasks = Vec::new();
    for (i, n) in nodes.iter().enumerate() {
        for _ in 0..3 {
            let (n, admitted) = (n.clone(), Arc::clone(&admitted));
            tasks.push(tokio::spawn(async move {
                let mut mine = 0;
                while Instant::now() < deadline {
                    match n.check("shared").await {
                        Ok(ok) => {
                            assert_eq!(ok.source(), Source::Redis);
                            mine += 1;
                        }
                        Err(e) => {
                            assert!(e.is_rate_limited(), "node {i}: {e}");
                            tokio::task::yield_now().await;
                        }
                    }
                }
                admitted.fetch_add(mine, Ordering::Relaxed);
                mine
            }));
        }
    }
    let mut per_task = Vec::new();
    for t in tasks {
        per_task.push(t.await.unwrap());
    }
    let end_us = server.time_us();
    let admitted = admitted.load(Ordering::Relaxed);
    let window = end_us - start_us;
    let bound = 50 + window / 10_000;
    println!("admitted {admitted} over {window} us (bound {bound}), per task {per_task:?}");
    // Every admission happened inside [start, end] on the server's clock: never more than
    // the bound. That is the guarantee. How close to it six busy tasks come depends on the
    // machine (a task descheduled for longer than the burst's 500 ms loses cells), so below
    // it the test only asks that most cells were used, which a limiter refusing wrongly fails.
    assert!(admitted <= bound, "admitted {admitted} > bound {bound}");
    assert!(
        admitted * 4 >= bound * 3,
        "admitted {admitted}, bound {bound}"
    );
    let s: Vec<_> = nodes.iter().map(|n| n.stats()).collect();
    assert_eq!(s[0].admitted + s[1].admitted, admitted);
    assert_eq!(s[0].faults + s[1].faults, 0);
    assert!(
        s[0].admitted > 0 && s[1].admitted > 0,
        "both nodes served: {s:?}"
    );
}

#[tokio::test]
async fn per_call_quotas_share_the_keys_time() {
    let server = RedisServer::start();
    let limiter = node(&server, Quota::per_second(10)).await;

    // Exact header values: the server's now is one reading inside the script.
    let ok = limiter.check_n("k", 3).await.unwrap();
    assert_eq!(
        (ok.limit(), ok.remaining(), ok.reset_after()),
        (10, 7, Duration::from_millis(300))
    );

    let two_a_minute = Quota::per_minute(2);
    let ok = limiter.check_with("m", two_a_minute).await.unwrap();
    assert_eq!((ok.limit(), ok.remaining()), (2, 1));
    assert_eq!(ok.reset_after(), Duration::from_secs(30));
    limiter.check_with("m", two_a_minute).await.unwrap();
    let err = limiter.check_with("m", two_a_minute).await.unwrap_err();
    let wait = err.retry_after().unwrap();
    assert!(
        wait > Duration::from_millis(29_900) && wait <= Duration::from_secs(30),
        "{wait:?}"
    );
    assert!(matches!(err, Error::RateLimited { limit: 2, .. }));
    // The key's 60 s of used time leave room under a quota with a longer tolerance ...
    let roomy = Quota::per_second(1).allow_burst(100);
    let ok = limiter.check_with("m", roomy).await.unwrap();
    assert_eq!(ok.limit(), 100);
    // ... and none under the default one (10/s, 0.9 s of tolerance).
    assert!(limiter.check("m").await.unwrap_err().is_rate_limited());
    // peek agrees with check and spends nothing.
    let p1 = limiter.peek_with("m", roomy).await.unwrap();
    let p2 = limiter.peek_with("m", roomy).await.unwrap();
    assert_eq!(p1.remaining(), p2.remaining());
    assert!(limiter.peek("m").await.unwrap_err().is_rate_limited());
}

#[tokio::test]
async fn ttl_is_the_reset_time() {
    let server = RedisServer::start();
    let limiter = node(&server, Quota::per_second(10)).await;
    let key = limiter.redis_key("ttl");

    assert!(limiter.peek("ttl").await.is_ok());
    let exists: i64 = redis::cmd("EXISTS")
        .arg(&key)
        .query(&mut server.conn())
        .unwrap();
    assert_eq!(exists, 0, "peek stores nothing");

    // Time from before the check is sent: the server ran the script at some point after this,
    // so its clock has moved by at most `since` when PTTL answers (however slow the reply and
    // the scheduling of this test are on a loaded machine).
    let asked = Instant::now();
    let ok = limiter.check_n("ttl", 3).await.unwrap();
    let ttl = pttl(&server, &key);
    let since = asked.elapsed().as_millis() as i64;
    let reset = ok.reset_after().as_millis() as i64;
    assert_eq!(reset, 300);
    // The expiry is the reset instant rounded up to a whole ms (never before it); PTTL
    // counts from the server's ms clock, rounded down: so up to 1 ms above.
    assert!(
        ttl <= reset + 1 && ttl >= reset - 1 - since,
        "PTTL {ttl} ms, reset {reset} ms"
    );

    // A penalty of 30 s under a burst of 10 (tau 0.9 s): TTL 30.9 s, less the time since.
    let asked = Instant::now();
    limiter
        .penalize("ttl", Duration::from_secs(30))
        .await
        .unwrap();
    let ttl = pttl(&server, &key);
    let since = asked.elapsed().as_millis() as i64;
    assert!(
        ttl <= 30_901 && ttl >= 30_899 - since,
        "PTTL {ttl}, {since} ms since"
    );
    let wait = limiter
        .check("ttl")
        .await
        .unwrap_err()
        .retry_after()
        .unwrap();
    assert!(wait > Duration::from_millis(29_900), "{wait:?}");

    // The key goes when its reset time passes.
    let short = limiter
        .check_with("gone", Quota::per_second(50).allow_burst(1))
        .await
        .unwrap();
    assert_eq!(short.reset_after(), Duration::from_millis(20));
    tokio::time::sleep(Duration::from_millis(40)).await;
    let exists: i64 = redis::cmd("EXISTS")
        .arg(limiter.redis_key("gone"))
        .query(&mut server.conn())
        .unwrap();
    assert_eq!(exists, 0);

    // reset forgets the key.
    assert!(limiter.reset("ttl").await.unwrap());
    assert!(!limiter.reset("ttl").await.unwrap());
    assert!(limiter.check("ttl").await.is_ok());
}

#[tokio::test]
async fn the_fast_path_refuses_without_a_round_trip() {
    let server = RedisServer::start();
    let quota = Quota::per_minute(1);
    let limiter = node(&server, quota).await;
    limiter.peek("warm-up").await.unwrap(); // loads the script (NOSCRIPT, then EVALSHA)
    let before = server.calls("evalsha");
    limiter.check("abuser").await.unwrap(); // burst spent: the node remembers
    for _ in 0..1_000 {
        assert!(limiter.check("abuser").await.unwrap_err().is_rate_limited());
    }
    assert_eq!(
        server.calls("evalsha") - before,
        1,
        "one round trip for 1,001 checks"
    );
    assert_eq!(limiter.stats().local_refusals, 1_000);

    // Without the fast path every check is a round trip.
    let plain = FleetLimiter::builder(quota)
        .timeout(common::CALM_TIMEOUT)
        .local_cache(0)
        .connect(server.client())
        .await
        .unwrap();
    let before = server.calls("evalsha");
    for _ in 0..100 {
        assert!(plain.check("abuser").await.unwrap_err().is_rate_limited());
    }
    assert_eq!(server.calls("evalsha") - before, 100);

    // Never refuses what Redis would admit: a quota with room goes to the server, and is
    // admitted there.
    let roomy = Quota::per_second(1).allow_burst(1_000);
    assert_eq!(
        limiter.check_with("abuser", roomy).await.unwrap().source(),
        Source::Redis
    );
    // A reset on this node clears its bound.
    limiter.reset("abuser").await.unwrap();
    assert!(limiter.check("abuser").await.is_ok());
}

#[tokio::test]
async fn the_fast_path_costs_about_one_round_trip_per_interval() {
    let server = RedisServer::start();
    let quota = Quota::per_second(50).allow_burst(1); // T = 20 ms
    let limiter = node(&server, quota).await;
    let plain = FleetLimiter::builder(quota)
        .timeout(common::CALM_TIMEOUT)
        .local_cache(0)
        .connect(server.client())
        .await
        .unwrap();
    for (name, l) in [("fast path", &limiter), ("no fast path", &plain)] {
        let key = format!("hot-{name}");
        let before = server.calls("evalsha");
        let start = Instant::now();
        let (mut checks, mut ok) = (0u64, 0u64);
        while start.elapsed() < Duration::from_millis(500) {
            checks += 1;
            if l.check(&key).await.is_ok() {
                ok += 1;
            }
            tokio::task::yield_now().await;
        }
        let trips = server.calls("evalsha") - before;
        println!(
            "{name}: {checks} checks, {ok} admitted, {trips} round trips ({:.1} per 1,000 checks)",
            trips as f64 * 1_000.0 / checks as f64
        );
        if name == "fast path" {
            // 25 intervals in 500 ms: one round trip per admission, plus the probes that
            // reach the server early and are refused there. A probe is early when its
            // latency is below the bound's slack: the fastest recent latency plus the
            // bound's aging (`offset.rs`, 1,000 ppm: 20 µs per interval here). On a quiet
            // machine, where loopback latency barely varies, that aging alone makes a
            // probe early in 5–40 % of the intervals (30–35 trips for 25 admissions in
            // twelve quiet runs; 26–28 for 23–24 with both cores busy). A second early
            // probe in one interval is rare: the first one's reply is a fresh sample,
            // unaged, from a latency that beat the slack, so it tightens the bound below
            // the latency just seen. So at most about two trips an interval; the path
            // without the fast path makes one per check (over 100,000 here).
            assert!(
                trips <= 2 * ok + 2,
                "{trips} round trips for {ok} admissions"
            );
            // The bound b + floor(W/T) = 1 + 25 caps admissions; how many come below it
            // depends on scheduling (burst 1: a late check loses time), so only the cap is
            // asserted.
            assert!(ok <= 26, "{ok}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_tasks_on_a_node_send_one_probe_at_a_time() {
    let server = RedisServer::start();
    let quota = Quota::per_second(50).allow_burst(1); // T = 20 ms
    let limiter = node(&server, quota).await;
    limiter.peek("warm-up").await.unwrap();
    let before = server.calls("evalsha");
    let deadline = Instant::now() + Duration::from_millis(500);
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let l = limiter.clone();
            tokio::spawn(async move {
                let (mut checks, mut ok) = (0u64, 0u64);
                while Instant::now() < deadline {
                    checks += 1;
                    ok += u64::from(l.check("hot").await.is_ok());
                    tokio::task::yield_now().await;
                }
                (checks, ok)
            })
        })
        .collect();
    let (mut checks, mut ok) = (0, 0);
    for t in tasks {
        let (c, o) = t.await.unwrap();
        (checks, ok) = (checks + c, ok + o);
    }
    let trips = server.calls("evalsha") - before;
    println!("8 tasks: {checks} checks, {ok} admitted, {trips} round trips");
    assert!(ok <= 26, "{ok}");
    // Before the key is held, all 8 tasks may ask at once; after, one probe at a time: an
    // admission, or a refusal that raises the bound.
    assert!(
        trips <= 2 * ok + 8,
        "{trips} round trips for {ok} admissions"
    );
}

#[tokio::test]
async fn every_local_refusal_is_one_redis_would_make() {
    let server = RedisServer::start();
    let quota = Quota::per_second(50).allow_burst(2); // T = 20 ms
    let fast = node(&server, quota).await;
    let plain = FleetLimiter::builder(quota)
        .timeout(common::CALM_TIMEOUT)
        .local_cache(0)
        .connect(server.client())
        .await
        .unwrap();
    let start = Instant::now();
    let (mut compared, mut checks) = (0, 0);
    // Counted in comparisons, not time, so a loaded machine only makes it slower.
    while compared <= 50 && start.elapsed() < Duration::from_secs(30) {
        checks += 1;
        let local = fast.stats().local_refusals;
        let asked = Instant::now();
        let Err(e) = fast.check("k").await else {
            continue;
        };
        if fast.stats().local_refusals == local {
            continue; // Redis itself refused
        }
        // Refused here without a round trip, as admissible only at or after `asked + wait`.
        // Redis, asked now, must refuse too, if its answer comes back before that instant
        // (it then read TIME before it).
        let admissible = asked + e.retry_after().unwrap();
        let redis = plain.peek("k").await;
        if Instant::now() < admissible {
            compared += 1;
            assert!(
                redis.unwrap_err().is_rate_limited(),
                "the fast path refused what Redis admits"
            );
        }
    }
    println!("{compared} local refusals checked against Redis in {checks} checks");
    assert!(compared > 50, "{compared}");
}

#[tokio::test]
async fn a_flushed_script_is_reloaded() {
    let server = RedisServer::start();
    let limiter = node(&server, Quota::per_second(2)).await;
    limiter.check("k").await.unwrap();
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query(&mut server.conn())
        .unwrap();
    let loads = server.calls("script|load");
    assert_eq!(limiter.check("k").await.unwrap().remaining(), 0);
    assert!(server.calls("script|load") > loads);
    assert_eq!(limiter.stats().faults, 0);
}

async fn until_redis_answers(limiter: &FleetLimiter, key: &str) -> Duration {
    let start = Instant::now();
    loop {
        if let Ok(ok) = limiter.check(key).await
            && ok.source() == Source::Redis
        {
            return start.elapsed();
        }
        assert!(start.elapsed() < Duration::from_secs(15), "no recovery");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn faults_follow_the_policy_and_the_limiter_recovers() {
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
        assert_eq!(l.check("k").await.unwrap().source(), Source::Redis);
    }

    server.kill();
    for _ in 0..3 {
        let ok = open.check("k").await.unwrap();
        assert_eq!(ok.source(), Source::FailOpen);
        let err = closed.check("k").await.unwrap_err();
        assert_eq!(err.retry_after(), Some(retry_after));
    }
    // 1/2 of the fleet's rate: burst 2, one every 30 s.
    assert_eq!(local.check("k").await.unwrap().source(), Source::Local);
    assert_eq!(local.check("k").await.unwrap().source(), Source::Local);
    let err = local.check("k").await.unwrap_err();
    assert!(
        err.retry_after().unwrap() > Duration::from_secs(29),
        "{err:?}"
    );
    assert!(local.reset("k").await.is_err());
    assert!(local.penalize("k", Duration::from_secs(1)).await.is_err());

    let (so, sc, sl) = (open.stats(), closed.stats(), local.stats());
    assert_eq!((so.failed_open, so.faults), (3, 3));
    assert_eq!((sc.failed_closed, sc.faults), (3, 3));
    assert_eq!(sl.fell_back, 3);
    assert!(sl.faults >= 3);

    server.restart();
    for (name, l) in [("open", &open), ("closed", &closed), ("local", &local)] {
        let took = until_redis_answers(l, "after").await;
        println!("{name}: Redis answering again {took:?} after the restart");
    }
}

#[tokio::test]
async fn a_limiter_built_while_redis_is_down_starts_working_when_it_comes_up() {
    let mut server = RedisServer::start();
    server.kill();
    let limiter = FleetLimiter::builder(Quota::per_second(10))
        .timeout(Duration::from_millis(50))
        .fault_policy(FaultPolicy::FailClosed {
            retry_after: Duration::from_secs(1),
        })
        .connect(server.client())
        .await
        .unwrap();
    assert!(limiter.check("k").await.is_err());
    server.restart();
    until_redis_answers(&limiter, "k").await;
}

#[tokio::test]
async fn bad_input() {
    let server = RedisServer::start();
    let limiter = node(&server, Quota::per_second(10).allow_burst(2)).await;

    // Zero quotas cannot be built; the core says so.
    assert!(Quota::try_new(0, Duration::from_secs(1)).is_err());
    assert!(Quota::try_with_period(Duration::ZERO).is_err());

    // n = 0 spends nothing; n > burst never reaches the server.
    let before = server.calls("evalsha");
    assert!(matches!(
        limiter.check_n("n", 3).await,
        Err(Error::InsufficientCapacity {
            requested: 3,
            burst: 2
        })
    ));
    assert_eq!(server.calls("evalsha"), before);
    assert_eq!(limiter.check_n("n", 0).await.unwrap().remaining(), 2);
    assert_eq!(limiter.check_n("n", 2).await.unwrap().remaining(), 0);
    assert_eq!(limiter.check_n("n", 0).await.unwrap().remaining(), 0);

    // The longest window the core accepts: 2^58 ns per cell, burst 2 (2^59 ns in all).
    let huge = Quota::try_with_period(Duration::from_nanos(1 << 58))
        .unwrap()
        .allow_burst(2);
    let ok = limiter.check_n_with("huge", 2, huge).await.unwrap();
    assert_eq!(
        ok.reset_after(),
        Duration::from_micros(2 * 288_230_376_151_712)
    );
    let wait = limiter
        .check_with("huge", huge)
        .await
        .unwrap_err()
        .retry_after()
        .unwrap();
    let t = Duration::from_micros(288_230_376_151_712);
    assert!(wait <= t && wait > t - Duration::from_secs(1), "{wait:?}");
    // A penalty beyond anything representable saturates.
    limiter.penalize("huge", Duration::MAX).await.unwrap();
    assert!(pttl(&server, &limiter.redis_key("huge")) > 0);

    // The fastest quota: sub-µs intervals become 1 µs.
    let fast = Quota::per_second(2_000_000).allow_burst(1_000);
    assert_eq!(
        limiter
            .check_n_with("fast", 1_000, fast)
            .await
            .unwrap()
            .remaining(),
        0
    );

    // Odd key bytes: empty, every byte value, hash tags, CRLF, long, not UTF-8.
    let long = vec![b'x'; 10_000];
    let all: Vec<u8> = (0..=255).collect();
    let keys: [&[u8]; 6] = [b"", &all, b"{tag}:x", b"a\r\nb", &long, &[0xff, 0xfe, 0]];
    for k in keys {
        let one = Quota::per_minute(1);
        assert!(limiter.check_with(k, one).await.is_ok(), "{k:?}");
        assert!(limiter.check_with(k, one).await.is_err(), "{k:?}");
    }
    // Each key was its own.
    let count: i64 = redis::cmd("DBSIZE").query(&mut server.conn()).unwrap();
    assert!(count >= 6);

    // Garbage in a key's value reads as no state; a key of another type is a fault.
    let _: () = redis::cmd("SET")
        .arg(limiter.redis_key("garbage"))
        .arg("not a number")
        .query(&mut server.conn())
        .unwrap();
    assert!(limiter.check("garbage").await.is_ok());
    let _: () = redis::cmd("LPUSH")
        .arg(limiter.redis_key("list"))
        .arg("x")
        .query(&mut server.conn())
        .unwrap();
    let faults = limiter.stats().faults;
    let _ = limiter.check("list").await;
    assert_eq!(limiter.stats().faults, faults + 1);
}

/// The default fault policy divides the limit by the fleet's size as the nodes last counted
/// it in Redis: three nodes that lose Redis admit the limit's burst between them, not three
/// times it; a node that never counted (started while Redis was away) refuses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_under_the_default_policy_admits_the_limit_across_the_fleet() {
    let mut server = RedisServer::start();
    let quota = Quota::per_minute(6); // a burst of 6, one cell each 10 s
    let mut nodes = Vec::new();
    for _ in 0..3 {
        let l = FleetLimiter::builder(quota)
            .timeout(common::FAULT_TIMEOUT)
            .heartbeat(Duration::from_millis(50))
            .connect(server.client())
            .await
            .unwrap();
        // The first heartbeat runs in the background from `connect` on, and may already
        // have answered: 0 before it, then at most the nodes started so far.
        let seen = l.stats().fleet_size;
        assert!(seen <= nodes.len() as u64 + 1, "counted {seen}");
        nodes.push(l);
    }
    let start = Instant::now();
    while nodes.iter().any(|l| l.stats().fleet_size != 3) {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "the nodes did not count 3"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    server.kill();
    let mut admitted = 0;
    for l in &nodes {
        for _ in 0..10 {
            if let Ok(ok) = l.check("k").await {
                assert_eq!(ok.source(), Source::Local);
                admitted += 1;
            }
        }
    }
    assert_eq!(
        admitted, 6,
        "the fleet admitted the limit's burst between its nodes"
    );
    assert!(nodes.iter().all(|l| l.stats().fell_back > 0));

    // A node that has never reached Redis has no count: it refuses.
    let newcomer = FleetLimiter::builder(quota)
        .timeout(common::FAULT_TIMEOUT)
        .heartbeat(Duration::from_millis(50))
        .connect(server.client())
        .await
        .unwrap();
    for _ in 0..3 {
        assert!(newcomer.check("k").await.unwrap_err().is_rate_limited());
    }
    let s = newcomer.stats();
    assert_eq!((s.fleet_size, s.failed_closed, s.fell_back), (0, 3, 0));

    // Back: the count resumes.
    server.spawn();
    let start = Instant::now();
    while newcomer.stats().fleet_size == 0 {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{:?}",
            newcomer.stats()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// No client's key names the limiter's own keys: a client called `{fleet}` (any header a
/// proxy keys on can say so) is an ordinary key, and the fleet's count survives it.
#[tokio::test]
async fn a_client_named_like_the_presence_set_is_an_ordinary_key() {
    let server = RedisServer::start();
    let limiter = FleetLimiter::builder(Quota::per_minute(2)) // a burst of 2
        .timeout(common::CALM_TIMEOUT)
        .heartbeat(Duration::from_millis(50))
        .fault_policy(FaultPolicy::LocalShare)
        .connect(server.client())
        .await
        .unwrap();
    let start = Instant::now();
    while limiter.stats().fleet_size != 1 {
        assert!(start.elapsed() < Duration::from_secs(5), "never counted");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let presence: &[u8] = b"tollgate:\0{fleet}";
    let keys: [&[u8]; 5] = [b"{fleet}", b"\0{fleet}", b"\0", b"", b"x"];
    for key in keys {
        assert_ne!(limiter.redis_key(key), presence, "{key:?}");
        for _ in 0..2 {
            assert_eq!(limiter.check(key).await.unwrap().source(), Source::Redis);
        }
        assert!(
            limiter.check(key).await.unwrap_err().is_rate_limited(),
            "{key:?}"
        );
    }
    // Five keys, five states: `\0x` and `x` do not share one.
    assert_eq!(limiter.redis_key("\0x"), b"tollgate:\0\0x".to_vec());
    assert_eq!(limiter.check("\0x").await.unwrap().source(), Source::Redis);
    assert!(limiter.reset("{fleet}").await.unwrap());
    assert!(limiter.reset("\0{fleet}").await.unwrap());
    let exists: bool = redis::cmd("EXISTS")
        .arg(presence)
        .query(&mut server.conn())
        .unwrap();
    assert!(exists, "the presence set is still there");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let s = limiter.stats();
    assert_eq!((s.faults, s.fleet_size), (0, 1));
}

/// In an outage a node's fallback holds its share of the burst; a call for more than that,
/// but no more than the burst, is one the fleet admits once Redis answers: rate limited for
/// now, never `InsufficientCapacity` (which says "never").
#[tokio::test]
async fn an_outage_refuses_a_call_larger_than_the_share_as_rate_limited() {
    let mut server = RedisServer::start();
    let quota = Quota::per_second(10); // a burst of 10: each of 4 nodes' share is 2
    let limiter = FleetLimiter::builder(quota)
        .timeout(FAULT_TIMEOUT)
        .fault_policy(FaultPolicy::Local { nodes: 4 })
        .connect(server.client())
        .await
        .unwrap();
    assert_eq!(limiter.check("k").await.unwrap().source(), Source::Redis);
    server.kill();
    // The share fills in 2 x 400 ms.
    let err = limiter.check_n("k", 5).await.unwrap_err();
    assert!(err.is_rate_limited(), "{err:?}");
    assert_eq!(err.retry_after(), Some(Duration::from_millis(800)));
    let err = limiter.until_n_ready("k", 5).await.unwrap_err();
    assert!(err.is_rate_limited(), "{err:?}");
    let refused = limiter
        .check_all([Gate::new("k").n(1), Gate::new("j").n(3)])
        .await
        .unwrap_err();
    assert!(refused.error.is_rate_limited(), "{refused:?}");
    // More than the burst itself stays "never", with the quota's burst, not the share's.
    assert!(matches!(
        limiter.check_n("k", 11).await.unwrap_err(),
        Error::InsufficientCapacity {
            requested: 11,
            burst: 10
        }
    ));
    // Within the share, the fallback admits.
    let ok = limiter.check_n("k", 2).await.unwrap();
    assert_eq!((ok.source(), ok.remaining()), (Source::Local, 0));
}

/// `Duration::MAX` for "no timeout" (or a heartbeat, or a cool-down) is taken as a year,
/// not an overflow in the first check or in the heartbeat's task.
#[tokio::test]
async fn durations_too_long_to_add_are_taken_as_a_year() {
    let server = RedisServer::start();
    let limiter = FleetLimiter::builder(Quota::per_second(10))
        .timeout(Duration::MAX)
        .heartbeat(Duration::MAX)
        .circuit_breaker(1, Duration::MAX)
        .local_cache(100)
        .fault_policy(FaultPolicy::LocalShare)
        .connect(server.client())
        .await
        .unwrap();
    for _ in 0..12 {
        let _ = limiter.check("k").await;
    }
    assert!(limiter.check("k").await.unwrap_err().is_rate_limited());
    let start = Instant::now();
    while limiter.stats().fleet_size != 1 {
        assert!(start.elapsed() < Duration::from_secs(5), "never counted");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(limiter.stats().faults, 0);
    // A lease held "forever" is held a year: the first lease does not overflow.
    let leasing = FleetLimiter::builder(Quota::per_second(10))
        .lease(4, Duration::MAX)
        .connect(server.client())
        .await
        .unwrap();
    for _ in 0..10 {
        leasing.check("hot").await.unwrap();
    }
    assert!(leasing.check("hot").await.unwrap_err().is_rate_limited());
}
