//! A polite crawler in miniature: many tasks fetch from many simulated hosts, and tollgate
//! keeps every host at its own rate, under tokio or async-std, with no runtime timer.
//!
//! Hosts come in classes (a personal blog allows 1 request per second, a CDN 500). One keyed
//! `Limiter` holds every host, keyed by host name; each wait brings its host's own quota
//! (`until_ready_with`), so one table serves every rate and stores nothing per host but its
//! state. Every task owns one host and loops: wait for a cell (bounded with `.within(..)` by
//! the time left, so the run ends cleanly), then "fetch" (a short `tollgate::timer::sleep`, standing
//! in for network latency). Waiters on a host are served in FIFO order, each woken once.
//!
//! ```text
//! cargo run --release --example hosts -- [--hosts 20] [--tasks 200] [--seconds 10] [--runtime tokio|async-std]
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tollgate::{Limiter, Quota};

#[path = "support/progress.rs"]
mod progress;
use progress::Progress;

/// Host classes: name and requests per second allowed per host (burst 1: evenly spaced).
const CLASSES: [(&str, u32); 5] = [
    ("blog", 1),
    ("shop", 5),
    ("news", 20),
    ("api", 100),
    ("cdn", 500),
];

/// Simulated fetch latency.
const FETCH: Duration = Duration::from_millis(2);

#[derive(Clone, Copy, PartialEq)]
enum Runtime {
    Tokio,
    AsyncStd,
}

struct Args {
    hosts: usize,
    tasks: usize,
    seconds: u64,
    runtime: Runtime,
}

fn parse_args() -> Args {
    let mut args = Args {
        hosts: 20,
        tasks: 200,
        seconds: 10,
        runtime: Runtime::Tokio,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || {
            it.next()
                .unwrap_or_else(|| usage(&format!("{flag} needs a value")))
        };
        match flag.as_str() {
            "--hosts" => args.hosts = value().parse().unwrap_or_else(|_| usage("bad --hosts")),
            "--tasks" => args.tasks = value().parse().unwrap_or_else(|_| usage("bad --tasks")),
            "--seconds" => {
                args.seconds = value().parse().unwrap_or_else(|_| usage("bad --seconds"))
            }
            "--runtime" => {
                args.runtime = match value().as_str() {
                    "tokio" => Runtime::Tokio,
                    "async-std" => Runtime::AsyncStd,
                    other => usage(&format!("unknown runtime {other} (tokio or async-std)")),
                }
            }
            "--help" | "-h" => usage(""),
            other => usage(&format!("unknown flag {other}")),
        }
    }
    if args.hosts == 0 || args.tasks < args.hosts || args.seconds == 0 {
        usage("need --hosts >= 1, --tasks >= --hosts and --seconds >= 1");
    }
    args
}

fn usage(msg: &str) -> ! {
    if !msg.is_empty() {
        eprintln!("error: {msg}");
    }
    eprintln!("usage: hosts [--hosts N] [--tasks N] [--seconds N] [--runtime tokio|async-std]");
    std::process::exit(2)
}

/// One simulated host and what its tasks observed.
struct Host {
    name: String,
    class: usize,
    /// Its class's rate: every wait on this host brings it.
    quota: Quota,
    tasks: usize,
    admissions: AtomicU64,
    /// The earliest request (before any cell of this host was reserved) and the latest
    /// admission (after the last reserved instant), in nanoseconds since the start. However
    /// late the scheduler runs a task, the span between them holds every interval the
    /// limiter spaced the admissions by.
    first_asked_ns: AtomicU64,
    last_ns: AtomicU64,
    max_wait_ns: AtomicU64,
}

struct Crawl {
    limiter: Limiter<str>,
    hosts: Vec<Host>,
    start: Instant,
    end: Instant,
    done: AtomicBool,
}

/// One crawler task: wait for the host's next cell, fetch, repeat until time is up.
async fn crawl_host(crawl: Arc<Crawl>, host: usize) {
    let h = &crawl.hosts[host];
    loop {
        let asked = Instant::now();
        if asked >= crawl.end {
            return;
        }
        h.first_asked_ns
            .fetch_min((asked - crawl.start).as_nanos() as u64, Ordering::Relaxed);
        // Bounded by the time left: a cell after the end is refused, and nothing is reserved.
        let left = crawl.end - asked;
        if crawl
            .limiter
            .until_ready_with(&h.name, h.quota)
            .within(left)
            .await
            .is_err()
        {
            return;
        }
        let admitted = Instant::now();
        let at = (admitted - crawl.start).as_nanos() as u64;
        h.admissions.fetch_add(1, Ordering::Relaxed);
        h.last_ns.fetch_max(at, Ordering::Relaxed);
        h.max_wait_ns
            .fetch_max((admitted - asked).as_nanos() as u64, Ordering::Relaxed);
        tollgate::timer::sleep(FETCH).await;
    }
}

/// Updates the progress line four times a second until the crawl is done (redrawn in a
/// terminal, a plain line a second in a log).
async fn progress(crawl: Arc<Crawl>, seconds: u64) {
    let mut line = Progress::new();
    while !crawl.done.load(Ordering::Relaxed) {
        let total: u64 = crawl
            .hosts
            .iter()
            .map(|h| h.admissions.load(Ordering::Relaxed))
            .sum();
        let elapsed = crawl.start.elapsed().as_secs_f64();
        line.update(
            elapsed / seconds.max(1) as f64,
            format_args!(
                "[{elapsed:>5.1} / {seconds} s] {total:>7} fetches, {:>7.0} fetches/s",
                total as f64 / elapsed.max(1e-9)
            ),
        );
        tollgate::timer::sleep(Duration::from_millis(250)).await;
    }
    line.finish();
}

/// Runs every crawler task to completion on the chosen runtime.
fn run(args: &Args, crawl: &Arc<Crawl>) {
    let tasks: Vec<usize> = (0..args.tasks).map(|t| t % args.hosts).collect();
    match args.runtime {
        Runtime::Tokio => {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .build()
                .expect("a tokio runtime");
            rt.block_on(async {
                let bar = tokio::spawn(progress(crawl.clone(), args.seconds));
                let workers: Vec<_> = tasks
                    .iter()
                    .map(|&h| tokio::spawn(crawl_task(crawl, h)))
                    .collect();
                for w in workers {
                    w.await.expect("a crawler task panicked");
                }
                crawl.done.store(true, Ordering::Relaxed);
                bar.await.expect("the progress task panicked");
            });
        }
        Runtime::AsyncStd => async_std::task::block_on(async {
            let bar = async_std::task::spawn(progress(crawl.clone(), args.seconds));
            let workers: Vec<_> = tasks
                .iter()
                .map(|&h| async_std::task::spawn(crawl_task(crawl, h)))
                .collect();
            for w in workers {
                w.await;
            }
            crawl.done.store(true, Ordering::Relaxed);
            bar.await;
        }),
    }
}

fn crawl_task(crawl: &Arc<Crawl>, host: usize) -> impl std::future::Future<Output = ()> + use<> {
    crawl_host(crawl.clone(), host)
}

/// CPU time (user + system) of this process so far, from /proc (Linux); None elsewhere.
fn cpu_time() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which is in parentheses and may hold spaces).
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // /proc reports in USER_HZ, which is 100 on every Linux ABI.
    Some(Duration::from_millis(ticks * 10))
}

fn main() {
    let args = parse_args();
    // The default quota is never used: every wait brings its host's own.
    let limiter = Limiter::keyed(Quota::per_second(1).allow_burst(1));
    let hosts: Vec<Host> = (0..args.hosts)
        .map(|i| {
            let class = i % CLASSES.len();
            Host {
                name: format!("{}-{i}.example", CLASSES[class].0),
                class,
                quota: Quota::per_second(CLASSES[class].1).allow_burst(1),
                tasks: (0..args.tasks).filter(|t| t % args.hosts == i).count(),
                admissions: AtomicU64::new(0),
                first_asked_ns: AtomicU64::new(u64::MAX),
                last_ns: AtomicU64::new(0),
                max_wait_ns: AtomicU64::new(0),
            }
        })
        .collect();
    let start = Instant::now();
    let crawl = Arc::new(Crawl {
        limiter,
        hosts,
        start,
        end: start + Duration::from_secs(args.seconds),
        done: AtomicBool::new(false),
    });
    println!(
        "{} tasks crawling {} hosts for {} s on {}",
        args.tasks,
        args.hosts,
        args.seconds,
        if args.runtime == Runtime::Tokio {
            "tokio (2 workers)"
        } else {
            "async-std"
        }
    );
    let cpu_before = cpu_time();
    run(&args, &crawl);
    let cpu = cpu_time()
        .zip(cpu_before)
        .map(|(after, before)| after - before);
    report(&crawl, cpu);
}

fn report(crawl: &Crawl, cpu: Option<Duration>) {
    println!();
    println!(
        "{:<18} {:>6} {:>11} {:>11} {:>9} {:>10} {:>10}",
        "host", "tasks", "configured", "achieved", "of rate", "fetches", "max wait"
    );
    println!("{}", "-".repeat(81));
    let mut total = 0;
    let mut worst = 0.0f64;
    for h in &crawl.hosts {
        let rate = CLASSES[h.class].1;
        let n = h.admissions.load(Ordering::Relaxed);
        total += n;
        // n admissions are n - 1 intervals apart (burst 1), all inside this span.
        let span = h
            .last_ns
            .load(Ordering::Relaxed)
            .saturating_sub(h.first_asked_ns.load(Ordering::Relaxed));
        let achieved = if n > 1 {
            (n - 1) as f64 / (span as f64 / 1e9)
        } else {
            0.0
        };
        let ratio = achieved / f64::from(rate);
        worst = worst.max(ratio);
        println!(
            "{:<18} {:>6} {:>9}/s {:>9.2}/s {:>8.1}% {:>10} {:>8.0}ms",
            h.name,
            h.tasks,
            rate,
            achieved,
            100.0 * ratio,
            n,
            h.max_wait_ns.load(Ordering::Relaxed) as f64 / 1e6,
        );
    }
    println!();
    match cpu {
        Some(cpu) => println!(
            "{total} fetches; CPU {:.2} s in all, {:.1} µs per admission (fetch simulation included)",
            cpu.as_secs_f64(),
            cpu.as_secs_f64() * 1e6 / total.max(1) as f64
        ),
        None => println!("{total} fetches; CPU time is only reported on Linux"),
    }
    // GCRA never lets a host go faster than its rate. Measured over a span that contains
    // every interval (see `Host`), this holds exactly; the tolerance is for float rounding.
    println!(
        "fastest host relative to its rate: {:.2}% ({})",
        100.0 * worst,
        if worst <= 1.0 + 1e-9 {
            "within its rate"
        } else {
            "OVER ITS RATE"
        }
    );
    if worst > 1.0 + 1e-9 {
        std::process::exit(1);
    }
}
