//! A simulated API front door: a million-odd clients in four classes hit `check` per client
//! key; each request is answered 200 or 429.
//!
//! Traffic is generated in virtual time (each client sends evenly spaced requests with its
//! own phase) and checked with `check_at`, as fast as the worker threads can go. So the
//! result is deterministic and can be compared with what the quota promises: a client is
//! never allowed more than `burst + floor(span / interval)` requests, and a client that
//! stays under its rate is never refused.
//!
//! ```text
//! cargo run --release --example api_server -- [--seconds 60] [--threads 2] [--scale 1.0]
//! ```

use std::time::{Duration, Instant};

use tollgate::{Limiter, Quota, Timestamp};

#[path = "support/progress.rs"]
mod progress;
use progress::Progress;

/// Per client: 10 requests per second, bursts of up to 20.
const RATE: u32 = 10;
const BURST: u32 = 20;
/// Virtual time advances in slices; the progress line is updated after each.
const SLICE: Duration = Duration::from_millis(250);

struct Class {
    name: &'static str,
    clients: u64,
    /// Requests per second each client sends.
    rate: f64,
}

const CLASSES: [Class; 4] = [
    Class {
        name: "idle",
        clients: 60_000,
        rate: 0.2,
    },
    Class {
        name: "steady",
        clients: 30_000,
        rate: 5.0,
    },
    Class {
        name: "bursty",
        clients: 6_000,
        rate: 40.0,
    },
    Class {
        name: "abusive",
        clients: 500,
        rate: 1_500.0,
    },
];

struct Args {
    seconds: u64,
    threads: usize,
    scale: f64,
}

fn parse_args() -> Args {
    let mut args = Args {
        seconds: 60,
        threads: 2,
        scale: 1.0,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || {
            it.next()
                .unwrap_or_else(|| usage(&format!("{flag} needs a value")))
        };
        match flag.as_str() {
            "--seconds" => {
                args.seconds = value().parse().unwrap_or_else(|_| usage("bad --seconds"))
            }
            "--threads" => {
                args.threads = value().parse().unwrap_or_else(|_| usage("bad --threads"))
            }
            "--scale" => args.scale = value().parse().unwrap_or_else(|_| usage("bad --scale")),
            "--help" | "-h" => usage(""),
            other => usage(&format!("unknown flag {other}")),
        }
    }
    if args.seconds == 0 || args.threads == 0 || args.scale <= 0.0 {
        usage("--seconds, --threads and --scale must be positive");
    }
    args
}

fn usage(msg: &str) -> ! {
    if !msg.is_empty() {
        eprintln!("error: {msg}");
    }
    eprintln!(
        "usage: api_server [--seconds N (virtual)] [--threads N] [--scale F (client count factor)]"
    );
    std::process::exit(2)
}

/// One client: its key, the interval between its requests, and its first request's time.
#[derive(Clone, Copy)]
struct Client {
    key: u64,
    class: usize,
    interval: u64,
    next: u64,
    first: Option<u64>,
    last: u64,
    sent: u64,
    allowed: u64,
    refused_under_rate: u64,
}

fn main() {
    let args = parse_args();
    let quota = Quota::per_second(RATE).allow_burst(BURST);
    let limiter = Limiter::builder(quota).build();
    let end = args.seconds * 1_000_000_000;

    // Build the clients, dealt round-robin to the worker threads.
    let mut per_thread: Vec<Vec<Client>> = vec![Vec::new(); args.threads];
    let mut key = 0u64;
    for (class, c) in CLASSES.iter().enumerate() {
        let count = ((c.clients as f64 * args.scale) as u64).max(1);
        let interval = (1e9 / c.rate) as u64;
        for _ in 0..count {
            key += 1;
            // A deterministic phase in [0, interval) so clients do not fire in lockstep.
            let phase = key.wrapping_mul(0x9E37_79B9_7F4A_7C15) % interval;
            per_thread[(key as usize) % args.threads].push(Client {
                key,
                class,
                interval,
                next: phase,
                first: None,
                last: 0,
                sent: 0,
                allowed: 0,
                refused_under_rate: 0,
            });
        }
    }
    let clients: u64 = per_thread.iter().map(|v| v.len() as u64).sum();
    println!(
        "{clients} clients, quota {RATE}/s burst {BURST} per client, {} s of traffic, {} threads",
        args.seconds, args.threads
    );

    let started = Instant::now();
    let mut progress = Progress::new();
    let mut checks = 0u64;
    let mut slice_start = 0u64;
    while slice_start < end {
        let slice_end = (slice_start + SLICE.as_nanos() as u64).min(end);
        // Each thread replays its clients' requests in [slice_start, slice_end) at its own
        // pace, so the threads' virtual times differ by up to a slice: the disagreement
        // between callers' `now`s that a real server has between threads, magnified.
        checks += std::thread::scope(|s| {
            let workers: Vec<_> = per_thread
                .iter_mut()
                .map(|clients| {
                    let limiter = &limiter;
                    s.spawn(move || run_slice(limiter, clients, slice_start, slice_end))
                })
                .collect();
            workers
                .into_iter()
                .map(|w| w.join().expect("worker panicked"))
                .sum::<u64>()
        });
        slice_start = slice_end;
        let elapsed = started.elapsed().as_secs_f64();
        progress.update(
            slice_start as f64 / end as f64,
            format_args!(
                "[{:>5.1} / {} s virtual] {:>6.1} M checks, {:>5.1} M checks/s, {} keys held",
                slice_start as f64 / 1e9,
                args.seconds,
                checks as f64 / 1e6,
                checks as f64 / elapsed / 1e6,
                limiter.stats().keys_held,
            ),
        );
    }
    let wall = started.elapsed();
    progress.finish();

    report(&per_thread, quota, checks, wall, &limiter);
}

/// Sends every request the clients make before `until`, interleaving clients in steps of
/// `STEP` so that consecutive checks hit different keys, as in a real server. Returns how
/// many requests were checked.
fn run_slice(limiter: &Limiter<u64>, clients: &mut [Client], from: u64, until: u64) -> u64 {
    const STEP: u64 = 10_000_000;
    let mut checks = 0;
    let mut step_end = from;
    while step_end < until {
        step_end = (step_end + STEP).min(until);
        checks += run_step(limiter, clients, step_end);
    }
    checks
}

fn run_step(limiter: &Limiter<u64>, clients: &mut [Client], until: u64) -> u64 {
    let mut checks = 0;
    for c in clients.iter_mut() {
        while c.next < until {
            let at = c.next;
            c.first.get_or_insert(at);
            c.last = at;
            c.sent += 1;
            checks += 1;
            match limiter.check_at(&c.key, Timestamp::from_nanos(at)) {
                Ok(_) => c.allowed += 1,
                Err(_) if c.interval >= 1_000_000_000 / u64::from(RATE) => {
                    c.refused_under_rate += 1
                }
                Err(_) => {}
            }
            c.next += c.interval;
        }
    }
    checks
}

fn report(
    per_thread: &[Vec<Client>],
    quota: Quota,
    checks: u64,
    wall: Duration,
    limiter: &Limiter<u64>,
) {
    let interval = quota.interval().as_nanos() as u64;
    println!();
    println!(
        "{:<8} {:>8} {:>9} {:>11} {:>11} {:>11} {:>12} {:>8}",
        "class", "clients", "req/s", "sent", "allowed", "refused", "quota bound", "allowed"
    );
    println!("{}", "-".repeat(86));
    let mut all_within_bound = true;
    let mut under_rate_refusals = 0;
    for (i, class) in CLASSES.iter().enumerate() {
        let members = per_thread.iter().flatten().filter(|c| c.class == i);
        let (mut n, mut sent, mut allowed, mut bound) = (0u64, 0u64, 0u64, 0u64);
        for c in members {
            n += 1;
            sent += c.sent;
            allowed += c.allowed;
            under_rate_refusals += c.refused_under_rate;
            // The window guarantee over this client's whole span of requests.
            let span = c.last - c.first.unwrap_or(c.last);
            let client_bound = c.sent.min(u64::from(quota.burst()) + span / interval);
            all_within_bound &= c.allowed <= client_bound;
            bound += client_bound;
        }
        println!(
            "{:<8} {:>8} {:>9.1} {:>11} {:>11} {:>11} {:>12} {:>7.2}%",
            class.name,
            n,
            class.rate,
            sent,
            allowed,
            sent - allowed,
            bound,
            100.0 * allowed as f64 / bound.max(1) as f64,
        );
    }
    let stats = limiter.stats();
    println!();
    println!(
        "{:.1} M checks in {:.2} s: {:.1} M checks/s ({:.0} ns per check per thread)",
        checks as f64 / 1e6,
        wall.as_secs_f64(),
        checks as f64 / wall.as_secs_f64() / 1e6,
        wall.as_nanos() as f64 * per_thread.len() as f64 / checks as f64,
    );
    println!(
        "table: {} keys held, {:.1} MiB ({:.1} B/key), {} expired keys reclaimed, {} forced evictions",
        stats.keys_held,
        stats.bytes as f64 / (1 << 20) as f64,
        stats.bytes as f64 / stats.keys_held.max(1) as f64,
        stats.expired_reclaimed,
        stats.forced_evictions,
    );
    println!(
        "every client within its quota bound: {}; clients under their rate refused: {} times",
        if all_within_bound { "yes" } else { "NO" },
        under_rate_refusals
    );
    if !all_within_bound || under_rate_refusals > 0 {
        std::process::exit(1);
    }
}
