//! tollgate-redis against a local redis-server of its own, in one run:
//!
//! 1. latency of one check (p50/p99), one connection, beside a bare `PING`, an `EVALSHA` of
//!    an empty script (the floor of scripting) and a plain Lua GCRA in the redis_rate style (float seconds, `EVALSHA`), the baseline;
//! 2. throughput with one connection shared by many tasks and with one connection per task;
//! 3. an abusive key hammered with and without the local fast path: round trips per 1,000
//!    checks (`INFO commandstats`);
//! 4. a hot key under its limit, with and without leases (`FleetBuilder::lease`): round trips
//!    per 1,000 checks and checks/s;
//! 5. the same on a three-master Redis Cluster of its own (`cluster_rows`): p50/p99 per call
//!    and admissions/s of a check beside the plain Lua GCRA on the same cluster, and beside
//!    one server; round trips per 1,000 checks with the fast path and with leases;
//!    `check_all` of three limits in one slot and across three.
//!
//! `cargo bench -p tollgate-redis --bench redis`; `TOLLGATE_BENCH_QUICK=1` for a smoke run.
//! With the `metrics` feature (on by default) a recorder that keeps every sample (`tests/common/recorder.rs`)
//! is installed first, so the figures include the metrics' cost: 1. for a check's round
//! trip, 3. (fast path on) for a check refused without one.

// The redis-server harness the tests use: one copy, started and killed the same way.
#[path = "../tests/common/mod.rs"]
mod common;
// The same for a cluster.
#[path = "../tests/common/cluster.rs"]
mod cluster;

use std::time::{Duration, Instant};

use common::RedisServer;
use redis::aio::ConnectionManager;
use tollgate::Quota;
use tollgate_redis::FleetLimiter;

/// The redis_rate approach: GCRA in float seconds since 2017 (go-redis/redis_rate's script,
/// trimmed to one cell).
const PLAIN_LUA: &str = r#"
local key = KEYS[1]
local burst = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local period = tonumber(ARGV[3])
local emission_interval = period / rate
local burst_offset = emission_interval * burst
local jan_1_2017 = 1483228800
local now = redis.call("TIME")
now = (now[1] - jan_1_2017) + (now[2] / 1000000)
local tat = redis.call("GET", key)
if not tat then tat = now else tat = tonumber(tat) end
tat = math.max(tat, now)
local new_tat = tat + emission_interval
local allow_at = new_tat - burst_offset
local diff = now - allow_at
if diff < 0 then return {0, 0} end
local reset_after = new_tat - now
if reset_after > 0 then redis.call("SET", key, new_tat, "EX", math.ceil(reset_after)) end
return {1, math.floor(diff / emission_interval)}
"#;

struct Latencies(Vec<Duration>);

impl Latencies {
    fn pct(&mut self, p: f64) -> Duration {
        self.0.sort_unstable();
        self.0[((self.0.len() - 1) as f64 * p) as usize]
    }
}

async fn time_calls<F, Fut>(n: usize, mut f: F) -> Latencies
where
    F: FnMut(usize) -> Fut,
    Fut: Future<Output = ()>,
{
    for i in 0..n / 10 {
        f(i).await; // warm-up
    }
    let mut v = Vec::with_capacity(n);
    for i in 0..n {
        let t = Instant::now();
        f(i).await;
        v.push(t.elapsed());
    }
    Latencies(v)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let quick = std::env::var_os("TOLLGATE_BENCH_QUICK").is_some();
    // Before any limiter is built: limiters register their metrics when they connect.
    #[cfg(feature = "metrics")]
    let _recorder = common::recorder::Recorder::install_global();
    println!(
        "metrics: {}",
        if cfg!(feature = "metrics") {
            "on, a recorder installed"
        } else {
            "feature off"
        }
    );
    let n = if quick { 2_000 } else { 20_000 };
    let server = RedisServer::start();
    let client = redis::Client::open(server.url()).unwrap();
    // A live quota that never denies: every check is a full admission on the server.
    let live = Quota::per_minute(1).allow_burst(100_000);

    // 1. Latency, one connection, sequential; keys cycle over 1,000 so GET finds state.
    let conn = ConnectionManager::new(client.clone()).await.unwrap();
    let mut ping = time_calls(n, |_| {
        let mut c = conn.clone();
        async move {
            let _: String = redis::cmd("PING").query_async(&mut c).await.unwrap();
        }
    })
    .await;
    // Server-side time per call of each script, from `INFO commandstats` deltas.
    let server_us = |server: &RedisServer, before: (u64, u64)| {
        let (calls, usec) = (server.calls("evalsha"), server.usec("evalsha"));
        (usec - before.1) as f64 / (calls - before.0).max(1) as f64
    };
    let mark = |server: &RedisServer| (server.calls("evalsha"), server.usec("evalsha"));
    // The floor of scripting: EVALSHA of a script that does nothing.
    let empty = redis::Script::new("return 0");
    let _: i64 = empty.invoke_async(&mut conn.clone()).await.unwrap(); // loaded
    let before = mark(&server);
    let mut floor = time_calls(n, |_| {
        let (mut c, empty) = (conn.clone(), &empty);
        async move {
            let _: i64 = empty.invoke_async(&mut c).await.unwrap();
        }
    })
    .await;
    let floor_us = server_us(&server, before);
    let plain = redis::Script::new(PLAIN_LUA);
    let _: Vec<f64> = plain
        .key("plain:load")
        .arg(1)
        .arg(1)
        .arg(60)
        .invoke_async(&mut conn.clone())
        .await
        .unwrap();
    let before = mark(&server);
    let mut baseline = time_calls(n, |i| {
        let (mut c, plain) = (conn.clone(), &plain);
        async move {
            let _: Vec<f64> = plain
                .key(format!("plain:{}", i % 1_000))
                .arg(100_000)
                .arg(1)
                .arg(60)
                .invoke_async(&mut c)
                .await
                .unwrap();
        }
    })
    .await;
    let plain_us = server_us(&server, before);
    let limiter = FleetLimiter::builder(live)
        .connect(client.clone())
        .await
        .unwrap();
    limiter.peek("load").await.unwrap();
    let before = mark(&server);
    let mut ours = time_calls(n, |i| {
        let limiter = &limiter;
        async move {
            limiter.check(format!("live:{}", i % 1_000)).await.unwrap();
        }
    })
    .await;
    let ours_us = server_us(&server, before);
    let (p50, p99) = (ping.pct(0.5), ping.pct(0.99));
    println!(
        "1. one check, one connection, {n} sequential calls (p50 / p99; server time per call):"
    );
    println!("   PING                    {p50:>10.1?} {p99:>10.1?}");
    let f = (floor.pct(0.5), floor.pct(0.99));
    println!(
        "   EVALSHA \"return 0\"      {:>10.1?} {:>10.1?}   p50 {:.2}x PING; server {floor_us:.1} µs",
        f.0,
        f.1,
        f.0.as_secs_f64() / p50.as_secs_f64()
    );
    let b = (baseline.pct(0.5), baseline.pct(0.99));
    println!(
        "   plain Lua GCRA          {:>10.1?} {:>10.1?}   p50 {:.2}x PING; server {plain_us:.1} µs",
        b.0,
        b.1,
        b.0.as_secs_f64() / p50.as_secs_f64()
    );
    let o = (ours.pct(0.5), ours.pct(0.99));
    println!(
        "   tollgate-redis check    {:>10.1?} {:>10.1?}   p50 {:.2}x PING, {:.2}x the plain script; server {ours_us:.1} µs",
        o.0,
        o.1,
        o.0.as_secs_f64() / p50.as_secs_f64(),
        o.0.as_secs_f64() / b.0.as_secs_f64()
    );

    // 2. Throughput: 16 tasks on one shared connection, then one connection per task.
    let tasks = 16;
    let per_task = n / 4;
    for shared in [true, false] {
        let mut limiters: Vec<FleetLimiter> = Vec::new();
        for _ in 0..tasks {
            if shared && !limiters.is_empty() {
                limiters.push(limiters[0].clone());
            } else {
                limiters.push(
                    FleetLimiter::builder(live)
                        .connect(client.clone())
                        .await
                        .unwrap(),
                );
            }
        }
        let start = Instant::now();
        let handles: Vec<_> = limiters
            .into_iter()
            .enumerate()
            .map(|(t, l)| {
                tokio::spawn(async move {
                    for i in 0..per_task {
                        l.check(format!("live:{t}:{}", i % 100)).await.unwrap();
                    }
                })
            })
            .collect();
        for h in handles {
            h.await.unwrap();
        }
        let rate = (tasks * per_task) as f64 / start.elapsed().as_secs_f64();
        println!(
            "2. {tasks} tasks, {}: {rate:>9.0} checks/s",
            if shared {
                "one shared connection "
            } else {
                "one connection per task"
            }
        );
    }

    // 3. An abusive key: 100/s burst 1, hammered by one task for a while.
    let abusive = Quota::per_second(100).allow_burst(1);
    let run = Duration::from_millis(if quick { 300 } else { 2_000 });
    for cache in [true, false] {
        let l = FleetLimiter::builder(abusive)
            .local_cache(if cache { 1_024 } else { 0 })
            .connect(client.clone())
            .await
            .unwrap();
        l.peek("warm-up").await.unwrap();
        let key = format!("abuser:{cache}");
        let before = server.calls("evalsha");
        let start = Instant::now();
        let (mut checks, mut admitted) = (0u64, 0u64);
        while start.elapsed() < run {
            checks += 1;
            admitted += u64::from(l.check(&key).await.is_ok());
        }
        let trips = server.calls("evalsha") - before;
        let intervals = run.as_secs_f64() * 100.0;
        println!(
            "3. abusive key, fast path {}: {checks:>8} checks ({:.0} ns each), {admitted} admitted, {trips} round trips = {:.2} per 1,000 checks, {:.2} per interval",
            if cache { "on " } else { "off" },
            run.as_secs_f64() * 1e9 / checks as f64,
            trips as f64 * 1_000.0 / checks as f64,
            trips as f64 / intervals
        );
    }

    // 4. A hot key under its limit (every check admitted): 4 tasks on one node, leases of
    //    16 cells held up to 50 ms, against one round trip per check.
    let hot = Quota::per_second(1_000_000).allow_burst(100_000);
    let checks_per_task = if quick { 2_000 } else { 20_000 };
    for lease in [true, false] {
        let mut b = FleetLimiter::builder(hot);
        if lease {
            b = b.lease(16, Duration::from_millis(50));
        }
        let l = b.connect(client.clone()).await.unwrap();
        l.peek("warm-up").await.unwrap();
        let key = format!("hot:{lease}");
        let before = server.calls("evalsha");
        let start = Instant::now();
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let (l, key) = (l.clone(), key.clone());
                tokio::spawn(async move {
                    for _ in 0..checks_per_task {
                        l.check(&key).await.unwrap();
                    }
                })
            })
            .collect();
        for h in handles {
            h.await.unwrap();
        }
        let secs = start.elapsed().as_secs_f64();
        let checks = 4 * checks_per_task as u64;
        let trips = server.calls("evalsha") - before;
        let s = l.stats();
        println!(
            "4. hot key, lease {}: {checks} checks, {trips} round trips = {:.1} per 1,000 checks, {:>9.0} checks/s (spent locally {}, returned {}, lost {})",
            if lease { "on " } else { "off" },
            trips as f64 * 1_000.0 / checks as f64,
            checks as f64 / secs,
            s.spent_locally,
            s.returned,
            s.expired_unspent
        );
    }

    cluster_rows(quick, n, live, &client).await;
}

/// Admissions per second of `tasks` tasks sharing `check`, `per_task` calls each.
async fn throughput<F, Fut>(tasks: usize, per_task: usize, check: F) -> f64
where
    F: Fn(usize, usize) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let start = Instant::now();
    let handles: Vec<_> = (0..tasks)
        .map(|t| {
            let calls: Vec<Fut> = (0..per_task).map(|i| check(t, i)).collect();
            tokio::spawn(async move {
                for c in calls {
                    c.await;
                }
            })
        })
        .collect();
    for h in handles {
        h.await.unwrap();
    }
    (tasks * per_task) as f64 / start.elapsed().as_secs_f64()
}

/// Section 5: the cluster rows.
async fn cluster_rows(quick: bool, n: usize, live: Quota, single: &redis::Client) {
    let cluster = cluster::RedisCluster::start();
    let conn = cluster.client().get_async_connection().await.unwrap();
    let plain = redis::Script::new(PLAIN_LUA);
    let plain_call = |i: usize| {
        let (mut c, plain) = (conn.clone(), &plain);
        async move {
            let _: Vec<f64> = plain
                .key(format!("plain:{}", i % 1_000))
                .arg(100_000)
                .arg(1)
                .arg(60)
                .invoke_async(&mut c)
                .await
                .unwrap();
        }
    };
    let mut baseline = time_calls(n, plain_call).await;
    let limiter = FleetLimiter::builder(live)
        .connect_cluster(cluster.client())
        .await
        .unwrap();
    let mut ours = time_calls(n, |i| {
        let limiter = &limiter;
        async move {
            limiter.check(format!("live:{}", i % 1_000)).await.unwrap();
        }
    })
    .await;
    println!("5. a three-master cluster on loopback (a replica each), {n} sequential calls:");
    let b = (baseline.pct(0.5), baseline.pct(0.99));
    println!("   plain Lua GCRA          {:>10.1?} {:>10.1?}", b.0, b.1);
    let o = (ours.pct(0.5), ours.pct(0.99));
    println!(
        "   tollgate-redis check    {:>10.1?} {:>10.1?}   p50 {:.2}x the plain script",
        o.0,
        o.1,
        o.0.as_secs_f64() / b.0.as_secs_f64()
    );
    for (what, gates) in [
        ("in one slot ", ["{t}:ip", "{t}:token", "{t}:all"]),
        ("over 3 slots", ["ip:1", "token:2", "global"]),
    ] {
        let mut all = time_calls(n, |_| {
            let limiter = &limiter;
            async move {
                let [a, b, c] = gates;
                limiter
                    .check_all([
                        tollgate_redis::Gate::new(a),
                        tollgate_redis::Gate::new(b),
                        tollgate_redis::Gate::new(c),
                    ])
                    .await
                    .unwrap();
            }
        })
        .await;
        let a = (all.pct(0.5), all.pct(0.99));
        println!(
            "   check_all, 3 limits {what} {:>10.1?} {:>10.1?}",
            a.0, a.1
        );
    }

    // Admissions per second: 16 tasks on one shared connection.
    let (tasks, per_task) = (16, n / 4);
    let on_one = FleetLimiter::builder(live)
        .connect(single.clone())
        .await
        .unwrap();
    let single_rate = throughput(tasks, per_task, |t, i| {
        let l = on_one.clone();
        async move {
            l.check(format!("tp:{t}:{}", i % 100)).await.unwrap();
        }
    })
    .await;
    let cluster_rate = throughput(tasks, per_task, |t, i| {
        let l = limiter.clone();
        async move {
            l.check(format!("tp:{t}:{}", i % 100)).await.unwrap();
        }
    })
    .await;
    let plain_rate = throughput(tasks, per_task, |t, i| {
        let (mut c, plain) = (conn.clone(), plain.clone());
        async move {
            let _: Vec<f64> = plain
                .key(format!("tp:{t}:{}", i % 100))
                .arg(100_000)
                .arg(1)
                .arg(60)
                .invoke_async(&mut c)
                .await
                .unwrap();
        }
    })
    .await;
    println!("   {tasks} tasks, one shared connection, admissions/s:");
    println!("     tollgate-redis, one server       {single_rate:>9.0}");
    println!("     tollgate-redis, 3-master cluster {cluster_rate:>9.0}");
    println!("     plain Lua GCRA, 3-master cluster {plain_rate:>9.0}");

    // Round trips per admission: an abusive key with the fast path, a hot key with leases.
    let run = Duration::from_millis(if quick { 300 } else { 2_000 });
    for cache in [true, false] {
        let l = FleetLimiter::builder(Quota::per_second(100).allow_burst(1))
            .local_cache(if cache { 1_024 } else { 0 })
            .connect_cluster(cluster.client())
            .await
            .unwrap();
        l.peek("warm-up").await.unwrap();
        let key = format!("abuser:{cache}");
        let before = cluster.calls("evalsha");
        let start = Instant::now();
        let (mut checks, mut admitted) = (0u64, 0u64);
        while start.elapsed() < run {
            checks += 1;
            admitted += u64::from(l.check(&key).await.is_ok());
        }
        let trips = cluster.calls("evalsha") - before;
        println!(
            "   abusive key, fast path {}: {checks:>8} checks, {admitted} admitted, {:.2} round trips per admission, {:.2} per 1,000 checks",
            if cache { "on " } else { "off" },
            trips as f64 / admitted.max(1) as f64,
            trips as f64 * 1_000.0 / checks as f64
        );
    }
    let checks_per_task = if quick { 2_000 } else { 20_000 };
    for lease in [true, false] {
        let mut b = FleetLimiter::builder(Quota::per_second(1_000_000).allow_burst(100_000));
        if lease {
            b = b.lease(16, Duration::from_millis(50));
        }
        let l = b.connect_cluster(cluster.client()).await.unwrap();
        l.peek("warm-up").await.unwrap();
        let key = format!("hot:{lease}");
        let before = cluster.calls("evalsha");
        let rate = throughput(4, checks_per_task, |_, _| {
            let (l, key) = (l.clone(), key.clone());
            async move {
                l.check(&key).await.unwrap();
            }
        })
        .await;
        let trips = cluster.calls("evalsha") - before;
        println!(
            "   hot key, lease {}: {:.3} round trips per admission, {rate:>9.0} admissions/s",
            if lease { "on " } else { "off" },
            trips as f64 / (4 * checks_per_task) as f64
        );
    }
}
