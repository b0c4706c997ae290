//! A fleet sharing one limit on Redis: several nodes, each with its own connection and
//! tasks, hammer one key; the admitted counts per node and in total are printed against the
//! quota's bound `b + floor(W / T)`. Then, unless REDIS_URL is set, the same run with Redis
//! killed a third of the way in and restarted at two thirds, under each fault policy.
//!
//! After each run it prints what an operator's dashboard would show, read from a `metrics`
//! recorder (the `metrics` feature, on by default; the example needs it): round trips per admission, the
//! round trip's p50 and p99, fast-path refusals, and the fault policy's answers. While a run
//! goes, a progress line is redrawn in place on a terminal; piped into a log, it prints a
//! plain line every quarter second instead.
//!
//! ```sh
//! cargo run --release -p tollgate-redis --example fleet   # its own redis-server
//! REDIS_URL=redis://127.0.0.1:6379/ cargo run -p tollgate-redis --example fleet
//! cargo run -p tollgate-redis --example fleet -- --nodes 6 --tasks 4 --seconds 2 --rate 500
//! cargo run -p tollgate-redis --example fleet -- --cluster      # a cluster of its own, a master killed
//! ```

// The redis-server harness the tests use: one copy, started and killed the same way.
#[path = "../tests/common/mod.rs"]
mod common;
// The same for a cluster, and the `--cluster` run (`fleet/cluster.rs`).
#[path = "fleet/cluster.rs"]
mod cluster_demo;
#[path = "../tests/common/cluster.rs"]
mod cluster_harness;

use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use common::RedisServer;
use common::recorder::{Recorder, quantile};
use tollgate::Quota;
use tollgate_redis::{FaultPolicy, FleetLimiter, Source};

struct Args {
    nodes: usize,
    tasks: usize,
    seconds: f64,
    rate: u32,
    burst: u32,
    cluster: bool,
}

fn args() -> Args {
    let mut a = Args {
        nodes: 4,
        tasks: 8,
        seconds: 3.0,
        rate: 200,
        burst: 20,
        cluster: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--cluster" {
            a.cluster = true;
            continue;
        }
        let v = it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--nodes" => a.nodes = v.parse().unwrap(),
            "--tasks" => a.tasks = v.parse().unwrap(),
            "--seconds" => a.seconds = v.parse().unwrap(),
            "--rate" => a.rate = v.parse().unwrap(),
            "--burst" => a.burst = v.parse().unwrap(),
            _ => panic!("unknown flag {flag} (--nodes, --tasks, --seconds, --rate, --burst)"),
        }
    }
    a
}

fn server_time_us(url: &str) -> Option<u64> {
    let mut c = redis::Client::open(url).ok()?.get_connection().ok()?;
    let (s, us): (u64, u64) = redis::cmd("TIME").query(&mut c).ok()?;
    Some(s * 1_000_000 + us)
}

struct Tally {
    redis: AtomicU64,
    open: AtomicU64,
    local: AtomicU64,
    refused: AtomicU64,
    /// The first and last local fallback admissions, in ns since `base`.
    first_local: AtomicU64,
    last_local: AtomicU64,
    base: Instant,
}

impl Tally {
    fn new(base: Instant) -> Tally {
        Tally {
            redis: AtomicU64::new(0),
            open: AtomicU64::new(0),
            local: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            first_local: AtomicU64::new(u64::MAX),
            last_local: AtomicU64::new(0),
            base,
        }
    }

    fn local_admission(&self) {
        let at = self.base.elapsed().as_nanos() as u64;
        self.first_local.fetch_min(at, Relaxed);
        self.last_local.fetch_max(at, Relaxed);
        self.local.fetch_add(1, Relaxed);
    }

    /// How long this node's fallback admitted for (zero if it never did).
    fn local_span(&self) -> Duration {
        let (first, last) = (
            self.first_local.load(Relaxed),
            self.last_local.load(Relaxed),
        );
        Duration::from_nanos(last.saturating_sub(first))
    }
}

/// Runs the fleet's nodes, each with its own connection and `a.tasks` tasks, on `key` for
/// `run`.
#[allow(clippy::too_many_arguments)]
async fn run_fleet(
    a: &Args,
    url: &str,
    quota: Quota,
    policy: FaultPolicy,
    prefix: &str,
    key: &str,
    run: Duration,
) -> (Vec<Arc<Tally>>, Vec<FleetLimiter>) {
    let mut nodes = Vec::new();
    for _ in 0..a.nodes {
        let client = redis::Client::open(url).unwrap();
        let limiter = FleetLimiter::builder(quota)
            .prefix(prefix)
            .timeout(Duration::from_millis(50))
            .fault_policy(policy)
            .connect(client)
            .await
            .unwrap();
        nodes.push(limiter);
    }
    let deadline = Instant::now() + run;
    let base = Instant::now();
    let tallies: Vec<_> = (0..a.nodes).map(|_| Arc::new(Tally::new(base))).collect();
    let mut handles = Vec::new();
    for (node, tally) in nodes.iter().zip(&tallies) {
        for _ in 0..a.tasks {
            let (node, tally, key) = (node.clone(), Arc::clone(tally), key.to_owned());
            handles.push(tokio::spawn(async move {
                while Instant::now() < deadline {
                    match node.check(&key).await {
                        Ok(ok) => match ok.source() {
                            Source::Redis => {
                                tally.redis.fetch_add(1, Relaxed);
                            }
                            Source::FailOpen => {
                                tally.open.fetch_add(1, Relaxed);
                            }
                            _ => tally.local_admission(),
                        },
                        Err(_) => {
                            tally.refused.fetch_add(1, Relaxed);
                        }
                    }
                    // A client that retries at once: the worst case for round trips.
                    tokio::task::yield_now().await;
                }
            }));
        }
    }
    let ticker = tokio::spawn(progress(tallies.clone(), base, run));
    for h in handles {
        h.await.unwrap();
    }
    ticker.await.unwrap();
    (tallies, nodes)
}

/// Prints the run's progress every quarter second until `run` is over: redrawn in place with
/// a bar on a terminal, one plain line each time otherwise (a log, a pipe, CI).
async fn progress(tallies: Vec<Arc<Tally>>, base: Instant, run: Duration) {
    let tty = std::io::stdout().is_terminal();
    let mut out = std::io::stdout();
    loop {
        let left = run.saturating_sub(base.elapsed());
        tokio::time::sleep(left.min(Duration::from_millis(250))).await;
        let done = base.elapsed().min(run);
        let sum = |f: fn(&Tally) -> &AtomicU64| -> u64 {
            tallies.iter().map(|t| f(t).load(Relaxed)).sum()
        };
        let admitted = sum(|t| &t.redis) + sum(|t| &t.open) + sum(|t| &t.local);
        let refused = sum(|t| &t.refused);
        let line = format!(
            "{:>5.2} s  admitted {admitted:>7}  refused {refused:>9}",
            done.as_secs_f64()
        );
        if tty {
            const WIDTH: usize = 24;
            let filled = (WIDTH as f64 * done.as_secs_f64() / run.as_secs_f64()) as usize;
            let bar = format!("{}{}", "#".repeat(filled), ".".repeat(WIDTH - filled));
            // Redrawn in place: back to the line's start, cleared, written.
            let _ = write!(out, "\r\x1b[2K  [{bar}] {line}");
            let _ = out.flush();
        } else {
            println!("  progress {line}");
        }
        if done >= run {
            break;
        }
    }
    if tty {
        let _ = write!(out, "\r\x1b[2K");
        let _ = out.flush();
    }
}

/// What the recorder holds for the nodes that share `limiter` (their prefix, the metrics'
/// `limiter` label): printed, and checked against the nodes' own `stats()`.
fn print_figures(recorder: &Recorder, limiter: &str, nodes: &[FleetLimiter]) {
    let l = [("limiter", limiter)];
    let by = |name: &str, k: &str, v: &str| recorder.counter(name, &[l[0], (k, v)]);
    let round_trips = recorder.counter("tollgate_redis_round_trips_total", &l);
    let admitted = by("tollgate_redis_decisions_total", "outcome", "admitted")
        + by("tollgate_redis_lease_cells_total", "kind", "spent_locally");
    let fast = by("tollgate_redis_decisions_total", "outcome", "local_refusal");
    let answers = ["fail_open", "fail_closed", "local"]
        .map(|p| by("tollgate_redis_fault_answers_total", "policy", p));
    let latency = recorder.samples(
        "tollgate_redis_round_trip_seconds",
        &[l[0], ("operation", "check")],
    );
    let us = |q| quantile(&latency, q).map_or(0.0, |s| s * 1e6);
    println!(
        "  metrics: {round_trips} round trips for {admitted} admissions by Redis = {:.2} per \
         admission; round trip p50 {:.0} us, p99 {:.0} us ({} timed); fast-path refusals \
         {fast}; fault answers: fail-open {}, fail-closed {}, local {}",
        round_trips as f64 / admitted.max(1) as f64,
        us(0.5),
        us(0.99),
        latency.len(),
        answers[0],
        answers[1],
        answers[2],
    );
    // The recorder and the nodes' snapshots count the same things.
    let stats =
        |f: fn(&tollgate_redis::Stats) -> u64| -> u64 { nodes.iter().map(|n| f(&n.stats())).sum() };
    assert_eq!(round_trips, stats(|s| s.round_trips));
    assert_eq!(fast, stats(|s| s.local_refusals));
    assert_eq!(
        answers,
        [
            stats(|s| s.failed_open),
            stats(|s| s.failed_closed),
            stats(|s| s.fell_back)
        ]
    );
}

fn print_nodes(tallies: &[Arc<Tally>], nodes: &[FleetLimiter]) -> (u64, u64, u64) {
    let (mut r, mut o, mut l) = (0, 0, 0);
    println!(
        "  {:>4} {:>9} {:>9} {:>9} {:>10} {:>11} {:>13} {:>7}",
        "node",
        "by redis",
        "fail-open",
        "local",
        "refused",
        "round trips",
        "local refusals",
        "faults"
    );
    for (i, (t, n)) in tallies.iter().zip(nodes).enumerate() {
        let s = n.stats();
        let (tr, to, tl) = (
            t.redis.load(Relaxed),
            t.open.load(Relaxed),
            t.local.load(Relaxed),
        );
        println!(
            "  {i:>4} {tr:>9} {to:>9} {tl:>9} {:>10} {:>11} {:>13} {:>7}",
            t.refused.load(Relaxed),
            s.round_trips,
            s.local_refusals,
            s.faults
        );
        (r, o, l) = (r + tr, o + to, l + tl);
    }
    (r, o, l)
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let a = args();
    if a.cluster {
        return cluster_demo::run(&a).await;
    }
    // Before any limiter is built: a limiter registers its metrics when it connects.
    let recorder = Recorder::install_global();
    let quota = Quota::per_second(a.rate).allow_burst(a.burst);
    let t_us = tollgate_redis::interval_micros(quota);
    let (mut server, url) = match std::env::var("REDIS_URL") {
        Ok(url) => (None, url),
        Err(_) => {
            let s = RedisServer::start();
            let url = s.url();
            (Some(s), url)
        }
    };
    let run = Duration::from_secs_f64(a.seconds);
    println!(
        "{} nodes x {} tasks, one key, {}/s burst {} (T = {} us), {:.1} s, Redis at {url}",
        a.nodes, a.tasks, a.rate, a.burst, t_us, a.seconds
    );

    // 1. Redis up throughout: the fleet admits exactly the bound.
    let key = format!("fleet-{}", std::process::id());
    let t0 = server_time_us(&url).expect("Redis answers TIME");
    let prefix = "fleet:up:";
    let (tallies, nodes) =
        run_fleet(&a, &url, quota, FaultPolicy::FailOpen, prefix, &key, run).await;
    let t1 = server_time_us(&url).unwrap();
    let (total, _, _) = print_nodes(&tallies, &nodes);
    print_figures(&recorder, prefix, &nodes);
    let window = t1 - t0;
    let bound = u64::from(a.burst) + window / t_us;
    println!(
        "  total admitted {total}; bound b + floor(W/T) = {} + floor({window} us / {t_us} us) = {bound}: {}",
        a.burst,
        if total <= bound { "kept" } else { "EXCEEDED" }
    );
    assert!(
        total <= bound,
        "the fleet admitted more than the quota allows"
    );

    // 2. Redis killed a third of the way in, restarted at two thirds, per policy.
    let Some(server) = server.as_mut() else {
        println!("(REDIS_URL given: not stopping someone else's Redis)");
        return;
    };
    let policies = [
        ("fail open", FaultPolicy::FailOpen),
        (
            "fail closed",
            FaultPolicy::FailClosed {
                retry_after: Duration::from_secs(1),
            },
        ),
        (
            "local 1/N",
            FaultPolicy::Local {
                nodes: a.nodes as u32,
            },
        ),
    ];
    for (name, policy) in policies {
        let key = format!("{key}-{name}");
        let prefix = format!("fleet:{}:", name.replace([' ', '/'], "-"));
        let third = run / 3;
        let fleet = run_fleet(&a, &url, quota, policy, &prefix, &key, run);
        let outage = async {
            tokio::time::sleep(third).await;
            server.kill();
            tokio::time::sleep(third).await;
            // Blocks this worker briefly while the server starts; the fleet runs on.
            tokio::task::block_in_place(|| server.spawn());
        };
        let ((tallies, nodes), ()) = tokio::join!(fleet, outage);
        println!(
            "\nRedis down from {:.1} s to {:.1} s, policy {name}:",
            third.as_secs_f64(),
            2.0 * third.as_secs_f64()
        );
        let (r, o, l) = print_nodes(&tallies, &nodes);
        print_figures(&recorder, &prefix, &nodes);
        // Each node's fallback keeps its share's bound over the time it admitted, which
        // runs from the first fault until its connection is back (after the restart).
        let n = a.nodes as u64;
        let share_burst = (u64::from(a.burst) / n).max(1);
        let spans: Vec<_> = tallies.iter().map(|t| t.local_span()).collect();
        let share_bound: u64 = spans
            .iter()
            .map(|w| share_burst + w.as_micros() as u64 / (t_us * n))
            .sum();
        println!("  admitted by redis {r}, fail-open {o}, local {l}");
        if l > 0 {
            let longest = spans.iter().max().unwrap();
            println!(
                "  local fallback: sum over nodes of b/N + floor(W_node / (N·T)) = {share_bound} \
                 (W_node up to {longest:.2?}): {}",
                if l <= share_bound { "kept" } else { "EXCEEDED" }
            );
        }
    }
}
