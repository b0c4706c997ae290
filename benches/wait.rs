//! The `wait` benchmark: scenarios F1 and F2 of the design record (many tasks pacing
//! themselves with `until_ready` on a tokio runtime), G (the same under timeouts), the lockout
//! after dropped waiters, and the lateness of the timers: tollgate beside governor 0.10
//! (`until_key_ready`, which sleeps on futures-timer) and, in F1/F2, an ideal, in the same
//! process run.
//!
//! ```text
//! cargo bench --bench wait                                   # full run (~5 min on 2 cores)
//! TOLLGATE_BENCH_QUICK=1 cargo bench --bench wait            # smoke run (< 40 s)
//! TOLLGATE_BENCH_WAIT=f1,g cargo bench --bench wait          # a subset of f1, f2, g, lockout, timer, prim
//! TOLLGATE_BENCH_LIMITERS=tollgate,ideal cargo bench ...     # only these F1/F2/G rows (tollgate, driven, governor, ideal)
//! TOLLGATE_BENCH_ROUNDS=9 cargo bench ...                    # rounds of F1/F2, timer, prim (default 5; quick 2)
//! ```
//!
//! **F1 / F2.** `tasks` tokio tasks (multi-thread runtime, 2 workers; tokio's timer serves the ideal and G only) each
//! loop `until_ready(&key).await` and log the instant of every admission. Keys get
//! `per_second` cells a second with a burst of 1. After a warm-up (which absorbs the start,
//! when every task asks at once) the harness measures a fixed window and reports, per
//! limiter (in F2 the keys start staggered over one emission interval, 20 ms, so their
//! schedules are out of phase as independent keys' are; a tollgate variant starts every key
//! at once):
//!
//! * *rate*: admissions inside the window / (window × the keys' combined quota), in %;
//! * *starved*: tasks with no admission inside the window;
//! * *p99 beyond fair share*: with `n` tasks on a key of rate `r`, a fair limiter admits each
//!   task once every `n / r` (its fair share: 0.5 s in F1, 0.2 s in F2). Every wait (from
//!   the task's request, which follows its previous admission at once, to its admission)
//!   that ends inside the window contributes `wait - n / r`; so does every wait still open
//!   at the window's end if it is already longer than `n / r` (a lower bound, so a starved
//!   task counts too). The figure is the 99th percentile of those values;
//! * *CPU per admission*: the process's user + system time over the window (`getrusage`,
//!   every thread: tokio workers, the limiter's timer thread, this harness) / admissions in
//!   the window; *of which timer thread* from that thread's `/proc/self/task/*/schedstat`,
//!   which also counts its *runs* (times scheduled in, about one per wake-up: fewer than
//!   one per admission means it fires batches); *context switches per admission*: voluntary
//!   + involuntary, from `getrusage`.
//!
//! The *runtime-driven* row (`tollgate, runtime-driven timer`, `TOLLGATE_BENCH_LIMITERS=driven`)
//! is tollgate with `tollgate::timer::drive(|at| tokio::time::sleep_until(at.into()))`
//! spawned on the row's runtime: the timer's turns, and so the hand-overs, run in that task on
//! a worker, and the timer thread is only the backstop. It is attached for its own row only
//! (aborted, which detaches it, before the runtime is dropped); it also runs in G.
//!
//! The *ideal* row of F1/F2 is the cheapest correct pacing: per key an `AtomicU64` of the
//! next free instant, advanced by one interval with a CAS, then `tokio::time::sleep_until`
//! (no cancellation handling, no timer of its own). *CPU vs ideal* is the median (min–max) of
//! the round-by-round ratios: within a round the limiters run back to back, so each ratio
//! compares runs under about the same load from the rest of the machine.
//!
//! **G (timeouts).** 200 tasks on one key at 100/s, burst 1, each looping
//! `tokio::time::timeout(500 ms, wait)`: the queue is 2 s deep, so three waits in four time
//! out and are dropped. Reported: the rate admitted in the window, the most admissions any
//! one-second span saw (GCRA allows rate + burst = 101), timeouts per second and CPU per
//! admission. A reservation that a dropped wait keeps (the eager design) admits about a
//! tenth of the rate here.
//!
//! **Lockout.** A 100/s, burst-1 key with its cell taken; 300 waiters queue for 20 ms and are
//! all aborted. Reported: the time from the aborts until a `check` on the key passes (polled
//! every 100 µs). Nothing was admitted for the dropped waiters, so it should be at most one
//! interval (10 ms) plus the timer's lateness.
//!
//! **Timer lateness.** Sleeps of a uniformly random 0.1–5 ms, lateness = the instant the
//! waiting code resumes − the deadline, on an otherwise idle process: `tollgate::timer::sleep_until`
//! alone, and a direct limiter of each crate whose single cell was just taken (so its
//! `until_ready` waits one period; governor's wait is its futures-timer `Delay`), both one
//! at a time under `futures_executor::block_on` and as concurrent tokio tasks.
//!
//! **Primitives.** What a thread's timed sleep and its wake-up by another thread cost in CPU
//! on this machine: the units the F figures are made of.
//!
//! Every figure is the median over rounds with min–max; within a round the limiters take
//! turns, starting with a different one each round. The markdown tables on stdout are meant
//! for BENCHMARKS.md; per-round figures and progress go to stderr. Built as a test
//! (`cargo test --all-targets`, no `--bench` argument) it runs everything once on tiny sizes.

mod common;

use std::future::Future;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::fmt::{count_summary, plain_summary, sig, table_header, thousands, time, time_summary};
use common::machine::{cpus, loadavg, loadavg_line};
use common::proc::{own_cpu_ns, thread_sched, usage};
use common::{Rng, Size, Summary, percentile};

// ---------------------------------------------------------------------------------------
// configuration

/// One F scenario: `keys × tasks_per_key` tasks, `per_second` cells a second per key.
#[derive(Debug, Clone, Copy)]
struct Load {
    label: &'static str,
    keys: usize,
    tasks_per_key: usize,
    per_second: u32,
    warm_up: Duration,
    window: Duration,
}

impl Load {
    fn tasks(&self) -> usize {
        self.keys * self.tasks_per_key
    }

    /// A fair limiter admits each task once every `tasks_per_key / per_second`.
    fn fair_share_ns(&self) -> u64 {
        self.tasks_per_key as u64 * 1_000_000_000 / u64::from(self.per_second)
    }

    fn describe(&self) -> String {
        if self.keys == 1 {
            format!(
                "{}. {} tasks on one key, {}/s burst 1",
                self.label,
                thousands(self.tasks()),
                thousands(self.per_second as usize)
            )
        } else {
            format!(
                "{}. {} keys x {} tasks, {}/s burst 1 each",
                self.label,
                thousands(self.keys),
                self.tasks_per_key,
                self.per_second
            )
        }
    }
}

/// How big a run is.
#[derive(Debug, Clone)]
struct Config {
    /// `"full"`, `"quick"` or `"test"`.
    mode: &'static str,
    rounds: usize,
    f1: Load,
    f2: Load,
    g: Timeouts,
    g_rounds: usize,
    /// Waiters dropped in the lockout, and its rounds.
    lockout_waiters: usize,
    lockout_rounds: usize,
    /// Sequential sleeps per timer row and round.
    timer_sequential: usize,
    /// Concurrent timer rows: tasks, and sleeps per task.
    timer_tasks: usize,
    timer_per_task: usize,
    /// Which parts to run: `f1`, `f2`, `g`, `lockout`, `timer`, `prim`.
    parts: Vec<String>,
}

impl Config {
    /// Sized by [`Size::from_env`]; `TOLLGATE_BENCH_WAIT=f1,f2,g,lockout,timer,prim` picks parts.
    fn from_env() -> Config {
        let size = Size::from_env();
        let parts = std::env::var("TOLLGATE_BENCH_WAIT")
            .unwrap_or_else(|_| "f1,f2,g,lockout,timer,prim".to_owned())
            .to_lowercase()
            .split(',')
            .map(|s| s.trim().to_owned())
            .collect();
        let ms = Duration::from_millis;
        let f1 = |tasks, warm_up, window| Load {
            label: "F1",
            keys: 1,
            tasks_per_key: tasks,
            per_second: 20_000,
            warm_up,
            window,
        };
        let f2 = |keys, warm_up, window| Load {
            label: "F2",
            keys,
            tasks_per_key: 10,
            per_second: 50,
            warm_up,
            window,
        };
        let g = |window| Timeouts {
            tasks: 200,
            per_second: 100,
            deadline: ms(500),
            warm_up: ms(500),
            window,
        };
        let base = match size {
            Size::Test => Config {
                mode: size.name(),
                rounds: 1,
                f1: f1(100, ms(50), ms(200)),
                f2: f2(10, ms(250), ms(500)),
                g: g(ms(500)),
                g_rounds: 1,
                lockout_waiters: 50,
                lockout_rounds: 1,
                timer_sequential: 20,
                timer_tasks: 10,
                timer_per_task: 3,
                parts: Vec::new(),
            },
            Size::Quick => Config {
                mode: size.name(),
                rounds: 2,
                f1: f1(2_000, ms(300), ms(800)),
                f2: f2(100, ms(400), ms(800)),
                g: g(ms(3_000)),
                g_rounds: 1,
                lockout_waiters: 300,
                lockout_rounds: 3,
                timer_sequential: 100,
                timer_tasks: 50,
                timer_per_task: 10,
                parts: Vec::new(),
            },
            Size::Full => Config {
                mode: size.name(),
                rounds: 5,
                f1: f1(10_000, ms(1_000), ms(2_500)),
                f2: f2(1_000, ms(600), ms(2_500)),
                g: g(ms(10_000)),
                g_rounds: 3,
                lockout_waiters: 300,
                lockout_rounds: 7,
                timer_sequential: 400,
                timer_tasks: 100,
                timer_per_task: 20,
                parts: Vec::new(),
            },
        };
        let rounds = Size::rounds_or(base.rounds);
        Config {
            parts,
            rounds,
            ..base
        }
    }

    fn runs(&self, part: &str) -> bool {
        self.parts.iter().any(|p| p == part)
    }
}

// ---------------------------------------------------------------------------------------
// the limiters

/// A keyed limiter whose tasks wait for their turn.
trait Waiting: Send + Sync + Sized + 'static {
    /// The column name in the report.
    const NAME: &'static str;
    /// The name (`comm`) of the thread that fires its sleeps, if it has one of its own.
    const TIMER_THREAD: Option<&'static str>;
    /// Whether tollgate's global timer is driven from the runtime (`tollgate::timer::drive`,
    /// spawned on the row's runtime and aborted at its end) instead of its own thread alone.
    const DRIVE: bool = false;

    /// `per_second` cells a second per key, burst 1, for `keys` (and, but for the ideal, any
    /// other key).
    fn build(per_second: u32, keys: &[u64]) -> Self;

    /// Completes when a cell for `key` is admitted.
    fn wait(&self, key: &u64) -> impl Future<Output = ()> + Send;
}

/// A limiter that can also admit a cell without waiting (the lockout probes with it).
trait Checking: Waiting {
    /// Admits a cell for `key` now if one is free.
    fn check(&self, key: &u64) -> bool;
}

/// `tollgate::Limiter::<u64>::keyed`, default configuration; sleeps on tollgate's timer.
#[derive(Debug)]
struct Tollgate(tollgate::Limiter<u64>);

impl Waiting for Tollgate {
    const NAME: &'static str = "tollgate";
    const TIMER_THREAD: Option<&'static str> = Some("tollgate-timer");

    fn build(per_second: u32, _keys: &[u64]) -> Self {
        Tollgate(tollgate::Limiter::keyed(
            tollgate::Quota::per_second(per_second).allow_burst(1),
        ))
    }

    async fn wait(&self, key: &u64) {
        self.0
            .until_ready(key)
            .await
            .expect("one cell never exceeds the burst and the table is not full");
    }
}

impl Checking for Tollgate {
    fn check(&self, key: &u64) -> bool {
        self.0.check(key).is_ok()
    }
}

/// [`Tollgate`] with its global timer driven from the row's tokio runtime
/// (`tollgate::timer::drive` with `tokio::time::sleep_until`); the timer thread is then only
/// the backstop. The driver is attached for this row alone.
#[derive(Debug)]
struct TollgateDriven(Tollgate);

impl Waiting for TollgateDriven {
    const NAME: &'static str = DRIVEN;
    const TIMER_THREAD: Option<&'static str> = Some("tollgate-timer");
    const DRIVE: bool = true;

    fn build(per_second: u32, keys: &[u64]) -> Self {
        TollgateDriven(Tollgate::build(per_second, keys))
    }

    fn wait(&self, key: &u64) -> impl Future<Output = ()> + Send {
        self.0.wait(key)
    }
}

/// The name of the runtime-driven tollgate row.
const DRIVEN: &str = "tollgate, runtime-driven timer";

/// Attaches tollgate's runtime driver to `rt` if `L` asks for it.
fn attach_driver<L: Waiting>(rt: &tokio::runtime::Runtime) -> Option<tokio::task::JoinHandle<()>> {
    L::DRIVE.then(|| {
        rt.spawn(tollgate::timer::drive(|at| {
            tokio::time::sleep_until(at.into())
        }))
    })
}

/// Detaches the driver `attach_driver` spawned, and waits until it is dropped, so the next
/// row starts with the timer thread alone.
fn detach_driver(rt: &tokio::runtime::Runtime, driver: Option<tokio::task::JoinHandle<()>>) {
    if let Some(driver) = driver {
        assert!(
            !driver.is_finished(),
            "the runtime driver did not attach (another one held the timer)"
        );
        driver.abort();
        let _ = rt.block_on(driver);
    }
}

/// `governor::RateLimiter::keyed` (DashMap, SipHash, quanta clock); `until_key_ready` checks,
/// and on a refusal sleeps on a futures-timer `Delay` until the earliest possible instant,
/// then checks again.
#[derive(Debug)]
struct Governor(governor::DefaultKeyedRateLimiter<u64>);

impl Waiting for Governor {
    const NAME: &'static str = "governor";
    const TIMER_THREAD: Option<&'static str> = Some("futures-timer");

    fn build(per_second: u32, _keys: &[u64]) -> Self {
        let quota = governor::Quota::per_second(NonZeroU32::new(per_second).expect("non-zero"))
            .allow_burst(NonZeroU32::MIN);
        Governor(governor::RateLimiter::keyed(quota))
    }

    async fn wait(&self, key: &u64) {
        self.0.until_key_ready(key).await;
    }
}

impl Checking for Governor {
    fn check(&self, key: &u64) -> bool {
        self.0.check_key(key).is_ok()
    }
}

/// The cheapest correct pacing, as a yardstick for CPU per admission: per key an `AtomicU64`
/// holding the next free instant, which a waiter advances by one interval with a CAS (an
/// eager reservation, as x/time/rate's `Wait`), then a `tokio::time::sleep_until` to that
/// instant. Keys live in a map built up front and only read afterwards. It does nothing for
/// cancellation (a dropped wait keeps its cell), so it has no row in G or the lockout.
#[derive(Debug)]
struct Ideal {
    next_free: std::collections::HashMap<u64, AtomicU64>,
    interval_ns: u64,
    origin: Instant,
}

impl Ideal {
    /// Nanoseconds since the limiter's origin.
    fn now(&self) -> u64 {
        nanos_since(self.origin)
    }

    /// Reserves the key's next cell and returns its instant.
    fn reserve(&self, key: &u64) -> u64 {
        let slot = &self.next_free[key];
        let now = self.now();
        // ordering: Relaxed; the slot is the only shared state and the CAS orders it.
        let mut seen = slot.load(Ordering::Relaxed);
        loop {
            let at = seen.max(now);
            match slot.compare_exchange_weak(
                seen,
                at + self.interval_ns,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return at,
                Err(actual) => seen = actual,
            }
        }
    }
}

impl Waiting for Ideal {
    const NAME: &'static str = "ideal (AtomicU64 + tokio sleep_until)";
    // tokio's timer runs on the worker threads.
    const TIMER_THREAD: Option<&'static str> = None;

    fn build(per_second: u32, keys: &[u64]) -> Self {
        Ideal {
            next_free: keys.iter().map(|&k| (k, AtomicU64::new(0))).collect(),
            interval_ns: 1_000_000_000 / u64::from(per_second),
            origin: Instant::now(),
        }
    }

    async fn wait(&self, key: &u64) {
        let at = self.reserve(key);
        if at > self.now() {
            tokio::time::sleep_until((self.origin + Duration::from_nanos(at)).into()).await;
        }
    }
}

// ---------------------------------------------------------------------------------------
// F1 / F2

/// One round of one limiter under one load.
#[derive(Debug, Clone, Copy)]
struct LoadRound {
    admitted: u64,
    rate_pct: f64,
    starved: usize,
    p99_beyond_ns: f64,
    max_beyond_ns: f64,
    cpu_ns_per_admission: Option<f64>,
    timer_ns_per_admission: Option<f64>,
    timer_runs_per_admission: Option<f64>,
    /// The timer thread's voluntary and involuntary context switches per admission.
    timer_sleeps_per_admission: Option<f64>,
    timer_preempted_per_admission: Option<f64>,
    /// The timer thread's time waiting for a CPU, in % of the window.
    timer_runqueue_pct: Option<f64>,
    switches_per_admission: Option<f64>,
}

fn nanos_since(origin: Instant) -> u64 {
    origin.elapsed().as_nanos() as u64
}

fn sleep_until(t: Instant) {
    let now = Instant::now();
    if t > now {
        std::thread::sleep(t - now);
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        // For the ideal's sleeps and G's timeouts; tollgate and governor bring their own timers.
        .enable_time()
        .build()
        .expect("a tokio runtime")
}

/// Runs `load` once on a fresh limiter and a fresh runtime. With `stagger`, the tasks of key
/// `k` start `k / keys` of an emission interval after those of key 0, so the keys' schedules
/// are spread over the interval as independent keys' would be; otherwise every key starts
/// at once and their admission instants coincide.
fn run_load<L: Waiting>(load: &Load, keys: &[u64], stagger: bool) -> LoadRound {
    assert_eq!(keys.len(), load.keys);
    let limiter = Arc::new(L::build(load.per_second, keys));
    let tasks = load.tasks();
    // Per task: its first request, then the instant of every admission. A task asks again
    // right after each admission, so admission `k - 1` is also request `k`.
    let per_task =
        (load.warm_up + load.window).as_nanos() as usize / load.fair_share_ns() as usize + 8;
    let logs: Arc<Vec<Mutex<Vec<u64>>>> = Arc::new(
        (0..tasks)
            .map(|_| Mutex::new(Vec::with_capacity(per_task)))
            .collect(),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let rt = runtime();
    let driver = attach_driver::<L>(&rt);
    let origin = Instant::now();
    let interval_ns = 1_000_000_000 / u64::from(load.per_second);
    for i in 0..tasks {
        let (limiter, logs, stop) = (Arc::clone(&limiter), Arc::clone(&logs), Arc::clone(&stop));
        let k = i / load.tasks_per_key;
        if stagger && i % load.tasks_per_key == 0 {
            // Spin: a sleep is far coarser than the 20 µs steps of F2.
            let at = origin + Duration::from_nanos(interval_ns * k as u64 / load.keys as u64);
            while Instant::now() < at {
                std::hint::spin_loop();
            }
        }
        let key = keys[k];
        rt.spawn(async move {
            let log = &logs[i];
            log.lock().unwrap().push(nanos_since(origin));
            loop {
                limiter.wait(&key).await;
                log.lock().unwrap().push(nanos_since(origin));
                // ordering: only ends the loop; the logs are read after the runtime is gone.
                if stop.load(Ordering::Relaxed) {
                    return;
                }
            }
        });
    }
    sleep_until(origin + load.warm_up);
    let start = nanos_since(origin);
    let (u0, t0) = (usage(), L::TIMER_THREAD.and_then(thread_sched));
    sleep_until(origin + load.warm_up + load.window);
    let end = nanos_since(origin);
    let (u1, t1) = (usage(), L::TIMER_THREAD.and_then(thread_sched));
    // ordering: a hint to stop early; dropping the runtime cancels whatever still waits.
    stop.store(true, Ordering::Relaxed);
    detach_driver(&rt, driver);
    drop(rt);

    let fair = load.fair_share_ns() as i64;
    let mut admitted = 0u64;
    let mut starved = 0;
    let mut beyond: Vec<i64> = Vec::with_capacity(tasks * per_task);
    for log in logs.iter() {
        let log = log.lock().unwrap();
        let mut mine = 0;
        let mut open_since = log[0];
        for w in log.windows(2) {
            let (asked, got) = (w[0], w[1]);
            if got > end {
                break;
            }
            open_since = got;
            if got >= start {
                mine += 1;
                beyond.push((got - asked) as i64 - fair);
            }
        }
        // Still waiting at the end of the window: count that wait if it is already late.
        let open = (end - open_since.min(end)) as i64;
        if open > fair {
            beyond.push(open - fair);
        }
        admitted += mine;
        if mine == 0 {
            starved += 1;
        }
    }
    beyond.sort_unstable();
    let window_s = (end - start) as f64 / 1e9;
    let quota = window_s * f64::from(load.per_second) * load.keys as f64;
    let per_admission = |d: Option<u64>| {
        d.filter(|_| admitted > 0)
            .map(|d| d as f64 / admitted as f64)
    };
    let cpu = u0.zip(u1);
    let timer = t0.zip(t1);
    LoadRound {
        admitted,
        rate_pct: 100.0 * admitted as f64 / quota,
        starved,
        p99_beyond_ns: percentile(&beyond, 0.99).map_or(f64::NAN, |v| v as f64),
        max_beyond_ns: beyond.last().map_or(f64::NAN, |&v| v as f64),
        cpu_ns_per_admission: per_admission(cpu.map(|(a, b)| b.cpu_ns - a.cpu_ns)),
        timer_ns_per_admission: per_admission(timer.map(|(a, b)| b.cpu_ns - a.cpu_ns)),
        timer_runs_per_admission: per_admission(timer.map(|(a, b)| b.runs - a.runs)),
        timer_sleeps_per_admission: per_admission(timer.map(|(a, b)| b.voluntary - a.voluntary)),
        timer_preempted_per_admission: per_admission(timer.map(|(a, b)| b.preempted - a.preempted)),
        timer_runqueue_pct: timer
            .map(|(a, b)| 100.0 * (b.runqueue_ns - a.runqueue_ns) as f64 / (end - start) as f64),
        switches_per_admission: per_admission(cpu.map(|(a, b)| b.switches - a.switches)),
    }
}

/// The F results of one limiter, summarised over rounds.
#[derive(Debug)]
struct LoadSummary {
    name: &'static str,
    rate_pct: Summary,
    starved: Summary,
    p99_beyond_ns: Summary,
    max_beyond_ns: Summary,
    cpu_ns: Option<Summary>,
    /// CPU per admission of each round, in round order (for the paired ratio to the ideal).
    cpu_rounds: Option<Vec<f64>>,
    timer_ns: Option<Summary>,
    timer_runs: Option<Summary>,
    switches: Option<Summary>,
}

fn summarise_load(name: &'static str, rounds: &[LoadRound]) -> LoadSummary {
    let of = |f: fn(&LoadRound) -> f64| Summary::of(&rounds.iter().map(f).collect::<Vec<_>>());
    let of_opt = |f: fn(&LoadRound) -> Option<f64>| {
        let v: Option<Vec<f64>> = rounds.iter().map(f).collect();
        v.map(|v| Summary::of(&v))
    };
    LoadSummary {
        name,
        rate_pct: of(|r| r.rate_pct),
        starved: of(|r| r.starved as f64),
        p99_beyond_ns: of(|r| r.p99_beyond_ns),
        max_beyond_ns: of(|r| r.max_beyond_ns),
        cpu_ns: of_opt(|r| r.cpu_ns_per_admission),
        cpu_rounds: rounds.iter().map(|r| r.cpu_ns_per_admission).collect(),
        timer_ns: of_opt(|r| r.timer_ns_per_admission),
        timer_runs: of_opt(|r| r.timer_runs_per_admission),
        switches: of_opt(|r| r.switches_per_admission),
    }
}

/// The name of the F2 variant whose keys all start at once.
const ALIGNED: &str = "tollgate, keys in phase (variant)";

/// One limiter's run in a scenario, returning its figures for one round.
type Turn<'a, R> = Box<dyn Fn() -> R + 'a>;

/// Runs each entry once a round for `rounds` rounds, starting with a different one each
/// round so that slow phases of the machine are shared out, and `report`s each result (with
/// its round, from 1). Returns each entry's results, in entry order.
fn take_turns<R>(
    entries: &[(&'static str, Turn<'_, R>)],
    rounds: usize,
    report: impl Fn(&str, usize, &R),
) -> Vec<Vec<R>> {
    let mut samples: Vec<Vec<R>> = entries.iter().map(|_| Vec::new()).collect();
    for round in 0..rounds {
        for j in 0..entries.len() {
            let i = (round + j) % entries.len();
            let (name, run) = &entries[i];
            let r = run();
            report(name, round + 1, &r);
            samples[i].push(r);
        }
    }
    samples
}

/// `TOLLGATE_BENCH_LIMITERS=tollgate,driven,ideal`: only the rows whose names are one of
/// these words or start with it and a space (`tollgate` leaves out the in-phase variant and
/// the runtime-driven row, `driven` is the runtime-driven row, `ideal` the ideal row): to
/// profile one limiter, or for a shorter comparison.
fn retain_limiters<R>(entries: &mut Vec<(&'static str, Turn<'_, R>)>) {
    if let Ok(only) = std::env::var("TOLLGATE_BENCH_LIMITERS") {
        let only: Vec<String> = only.split(',').map(|s| s.trim().to_lowercase()).collect();
        entries.retain(|(name, _)| {
            only.iter().any(|o| {
                *name == o.as_str()
                    || name.starts_with(&format!("{o} "))
                    || (o == "driven" && *name == DRIVEN)
            })
        });
    }
}

fn scenario_f(load: &Load, rounds: usize, seed: u64) -> Vec<LoadSummary> {
    let keys = if load.keys == 1 {
        vec![0x5EED]
    } else {
        Rng::new(seed).keys(load.keys)
    };
    let mut entries: Vec<(&'static str, Turn<'_, LoadRound>)> = vec![
        (
            Tollgate::NAME,
            Box::new(|| run_load::<Tollgate>(load, &keys, true)),
        ),
        (
            DRIVEN,
            Box::new(|| run_load::<TollgateDriven>(load, &keys, true)),
        ),
        (
            Governor::NAME,
            Box::new(|| run_load::<Governor>(load, &keys, true)),
        ),
        (
            Ideal::NAME,
            Box::new(|| run_load::<Ideal>(load, &keys, true)),
        ),
    ];
    if load.keys > 1 {
        // A variant: every key's schedule in phase, so the timer fires a key's worth of
        // waiters per wake-up. It shows what a wake-up costs against an admission.
        entries.push((
            ALIGNED,
            Box::new(|| run_load::<Tollgate>(load, &keys, false)),
        ));
    }
    retain_limiters(&mut entries);
    let samples = take_turns(&entries, rounds, |name, round, r| {
        eprintln!(
            "  {} {name:<9} round {}: {} admitted, rate {:.2} %, starved {}, p99 beyond fair {}, max {}, CPU/adm {} (timer thread {}, {} runs/adm: {} sleeps + {} preemptions, waiting for a CPU {:.1} % of the time), switches/adm {}",
            load.label,
            round,
            r.admitted,
            r.rate_pct,
            r.starved,
            time(r.p99_beyond_ns),
            time(r.max_beyond_ns),
            r.cpu_ns_per_admission.map_or("n/a".into(), time),
            r.timer_ns_per_admission.map_or("n/a".into(), time),
            r.timer_runs_per_admission.map_or("n/a".into(), sig),
            r.timer_sleeps_per_admission.map_or("n/a".into(), sig),
            r.timer_preempted_per_admission.map_or("n/a".into(), sig),
            r.timer_runqueue_pct.unwrap_or(f64::NAN),
            r.switches_per_admission.map_or("n/a".into(), sig),
        );
    });
    entries
        .iter()
        .zip(&samples)
        .map(|((name, _), s)| summarise_load(name, s))
        .collect()
}

// ---------------------------------------------------------------------------------------
// G: waits under a timeout; the lockout after a crowd of waiters leaves

/// Scenario G: `tasks` tokio tasks on one key, `per_second` cells a second, burst 1, each
/// looping `tokio::time::timeout(deadline, wait)`: the queue is longer than the deadline,
/// so most waits time out and are dropped.
#[derive(Debug, Clone, Copy)]
struct Timeouts {
    tasks: usize,
    per_second: u32,
    deadline: Duration,
    warm_up: Duration,
    window: Duration,
}

/// One round of one limiter in G.
#[derive(Debug, Clone, Copy)]
struct TimeoutRound {
    rate_pct: f64,
    /// The most admissions seen in any span of one second, over the whole run.
    most_in_a_second: u64,
    timeouts_per_s: f64,
    cpu_ns_per_admission: Option<f64>,
}

/// The one key of G and of the lockout.
const HOT_KEY: u64 = 0x6A7E;

fn run_timeouts<L: Waiting>(g: &Timeouts) -> TimeoutRound {
    let limiter = Arc::new(L::build(g.per_second, &[HOT_KEY]));
    let stop = Arc::new(AtomicBool::new(false));
    let rt = runtime();
    let driver = attach_driver::<L>(&rt);
    let origin = Instant::now();
    let tasks: Vec<_> = (0..g.tasks)
        .map(|_| {
            let (limiter, stop, deadline) = (Arc::clone(&limiter), Arc::clone(&stop), g.deadline);
            rt.spawn(async move {
                let (mut admitted, mut timeouts) = (Vec::new(), Vec::new());
                // ordering: only ends the loop; the logs come back through the join handle.
                while !stop.load(Ordering::Relaxed) {
                    match tokio::time::timeout(deadline, limiter.wait(&HOT_KEY)).await {
                        Ok(()) => admitted.push(nanos_since(origin)),
                        Err(_) => timeouts.push(nanos_since(origin)),
                    }
                }
                (admitted, timeouts)
            })
        })
        .collect();
    sleep_until(origin + g.warm_up);
    let start = nanos_since(origin);
    let u0 = usage();
    sleep_until(origin + g.warm_up + g.window);
    let end = nanos_since(origin);
    let u1 = usage();
    stop.store(true, Ordering::Relaxed);
    let (mut admitted, mut timeouts) = (Vec::new(), Vec::new());
    for task in tasks {
        let (a, t) = rt.block_on(task).expect("a G task panicked");
        admitted.extend(a);
        timeouts.extend(t);
    }
    detach_driver(&rt, driver);
    drop(rt);

    admitted.sort_unstable();
    let inside = |t: &&u64| (start..=end).contains(*t);
    let in_window = admitted.iter().filter(inside).count() as u64;
    let window_s = (end - start) as f64 / 1e9;
    // Two pointers: for each admission, how many fall in the second that starts with it.
    let mut most_in_a_second = 0;
    let mut j = 0;
    for (i, &t) in admitted.iter().enumerate() {
        j = j.max(i);
        while j < admitted.len() && admitted[j] < t + 1_000_000_000 {
            j += 1;
        }
        most_in_a_second = most_in_a_second.max((j - i) as u64);
    }
    TimeoutRound {
        rate_pct: 100.0 * in_window as f64 / (window_s * f64::from(g.per_second)),
        most_in_a_second,
        timeouts_per_s: timeouts.iter().filter(inside).count() as f64 / window_s,
        cpu_ns_per_admission: u0
            .zip(u1)
            .filter(|_| in_window > 0)
            .map(|(a, b)| (b.cpu_ns - a.cpu_ns) as f64 / in_window as f64),
    }
}

/// The G results of one limiter, summarised over rounds.
#[derive(Debug)]
struct TimeoutSummary {
    name: &'static str,
    rate_pct: Summary,
    most_in_a_second: Summary,
    timeouts_per_s: Summary,
    cpu_ns: Option<Summary>,
}

fn scenario_g(g: &Timeouts, rounds: usize) -> Vec<TimeoutSummary> {
    let mut entries: Vec<(&'static str, Turn<'_, TimeoutRound>)> = vec![
        (Tollgate::NAME, Box::new(|| run_timeouts::<Tollgate>(g))),
        (DRIVEN, Box::new(|| run_timeouts::<TollgateDriven>(g))),
        (Governor::NAME, Box::new(|| run_timeouts::<Governor>(g))),
    ];
    retain_limiters(&mut entries);
    let samples = take_turns(&entries, rounds, |name, round, r| {
        eprintln!(
            "  G {name:<9} round {}: rate {:.1} %, most in a second {}, timeouts {:.0}/s, CPU/adm {}",
            round,
            r.rate_pct,
            r.most_in_a_second,
            r.timeouts_per_s,
            r.cpu_ns_per_admission.map_or("n/a".into(), time),
        );
    });
    entries
        .iter()
        .zip(&samples)
        .map(|((name, _), rounds)| {
            let of = |f: fn(&TimeoutRound) -> f64| {
                Summary::of(&rounds.iter().map(f).collect::<Vec<_>>())
            };
            let cpu: Option<Vec<f64>> = rounds.iter().map(|r| r.cpu_ns_per_admission).collect();
            TimeoutSummary {
                name,
                rate_pct: of(|r| r.rate_pct),
                most_in_a_second: of(|r| r.most_in_a_second as f64),
                timeouts_per_s: of(|r| r.timeouts_per_s),
                cpu_ns: cpu.map(|c| Summary::of(&c)),
            }
        })
        .collect()
}

/// The lockout: a key of `per_second` cells a second, burst 1, its cell taken; `waiters`
/// tasks wait on it, get 20 ms to queue, and are all aborted (dropped). Returns the time from
/// the aborts until a check on the key passes, polled every 100 µs (10 s at most).
fn run_lockout<L: Checking>(waiters: usize, per_second: u32) -> f64 {
    let limiter = Arc::new(L::build(per_second, &[HOT_KEY]));
    let rt = runtime();
    assert!(limiter.check(&HOT_KEY), "a fresh key has its cell");
    let tasks: Vec<_> = (0..waiters)
        .map(|_| {
            let limiter = Arc::clone(&limiter);
            rt.spawn(async move { limiter.wait(&HOT_KEY).await })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(20));
    for task in &tasks {
        task.abort();
    }
    let dropped = Instant::now();
    while !limiter.check(&HOT_KEY) && dropped.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_micros(100));
    }
    let locked_out = dropped.elapsed().as_nanos() as f64;
    drop(rt);
    locked_out
}

fn scenario_lockout(waiters: usize, rounds: usize) -> Vec<(&'static str, Summary)> {
    const PER_SECOND: u32 = 100;
    let entries: Vec<(&'static str, Turn<'_, f64>)> = vec![
        (
            Tollgate::NAME,
            Box::new(|| run_lockout::<Tollgate>(waiters, PER_SECOND)),
        ),
        (
            Governor::NAME,
            Box::new(|| run_lockout::<Governor>(waiters, PER_SECOND)),
        ),
    ];
    let samples = take_turns(&entries, rounds, |name, round, ns| {
        eprintln!("  lockout {name:<9} round {round}: {}", time(*ns));
    });
    entries
        .iter()
        .zip(&samples)
        .map(|((name, _), s)| (*name, Summary::of(s)))
        .collect()
}

// ---------------------------------------------------------------------------------------
// timer lateness

/// `Instant::now() - deadline` in nanoseconds; negative if the wait ended early.
fn lateness(deadline: Instant) -> i64 {
    let now = Instant::now();
    if now >= deadline {
        (now - deadline).as_nanos() as i64
    } else {
        -((deadline - now).as_nanos() as i64)
    }
}

/// Uniform in 0.1–5 ms.
fn random_delay(rng: &mut Rng) -> Duration {
    Duration::from_nanos(100_000 + rng.below(4_900_001) as u64)
}

/// `tollgate::timer::sleep_until(now + d)`.
async fn tollgate_sleep(d: Duration) -> i64 {
    let deadline = Instant::now() + d;
    tollgate::timer::sleep_until(deadline).await;
    lateness(deadline)
}

/// A tollgate direct limiter of one cell per `d`, its cell just taken: `until_ready` waits
/// one period. The deadline is taken before the check, so any lag of the limiter's clock
/// behind it counts as lateness (never as earliness).
async fn tollgate_direct(d: Duration) -> i64 {
    let limiter = tollgate::DirectLimiter::new(tollgate::Quota::with_period(d).allow_burst(1));
    let taken = Instant::now();
    assert!(limiter.check().is_ok(), "a fresh limiter admits its burst");
    limiter.until_ready().await.expect("one cell");
    lateness(taken + d)
}

/// The same with governor: its `until_ready` sleeps on a futures-timer `Delay`. governor
/// reads a TSC clock (quanta), not `Instant`; the two agree within far less than a
/// microsecond over these periods.
async fn governor_direct(d: Duration) -> i64 {
    let quota = governor::Quota::with_period(d)
        .expect("a non-zero period")
        .allow_burst(NonZeroU32::MIN);
    let limiter = governor::RateLimiter::direct(quota);
    let taken = Instant::now();
    limiter.check().expect("a fresh limiter admits its burst");
    limiter.until_ready().await;
    lateness(taken + d)
}

/// `n` waits one after another on this thread, under `futures_executor::block_on`.
fn sequential<F, Fut>(n: usize, rng: &mut Rng, wait: F) -> Vec<i64>
where
    F: Fn(Duration) -> Fut,
    Fut: Future<Output = i64>,
{
    (0..n)
        .map(|_| futures_executor::block_on(wait(random_delay(rng))))
        .collect()
}

/// `tasks` tokio tasks (2 workers) doing `per_task` waits each, all at once.
fn concurrent<F, Fut>(tasks: usize, per_task: usize, seed: u64, wait: F) -> Vec<i64>
where
    F: Fn(Duration) -> Fut + Copy + Send + 'static,
    Fut: Future<Output = i64> + Send + 'static,
{
    let rt = runtime();
    rt.block_on(async {
        let handles: Vec<_> = (0..tasks)
            .map(|t| {
                let mut rng = Rng::new(seed ^ (t as u64).wrapping_mul(0x9E37_79B9));
                tokio::spawn(async move {
                    let mut out = Vec::with_capacity(per_task);
                    for _ in 0..per_task {
                        out.push(wait(random_delay(&mut rng)).await);
                    }
                    out
                })
            })
            .collect();
        let mut all = Vec::with_capacity(tasks * per_task);
        for h in handles {
            all.extend(h.await.expect("a timer task panicked"));
        }
        all
    })
}

/// The timer rows: `(what, how)`.
const TIMER_ROWS: [(&str, &str); 6] = [
    ("`tollgate::timer::sleep_until`", "sequential"),
    ("`tollgate::timer::sleep_until`", "concurrent"),
    ("tollgate `DirectLimiter::until_ready`", "sequential"),
    (
        "governor direct `until_ready` (futures-timer)",
        "sequential",
    ),
    ("tollgate `DirectLimiter::until_ready`", "concurrent"),
    (
        "governor direct `until_ready` (futures-timer)",
        "concurrent",
    ),
];

fn timer_row(cfg: &Config, row: usize, seed: u64) -> Vec<i64> {
    let mut rng = Rng::new(seed);
    let (n, tasks, per) = (cfg.timer_sequential, cfg.timer_tasks, cfg.timer_per_task);
    match row {
        0 => sequential(n, &mut rng, tollgate_sleep),
        1 => concurrent(tasks, per, seed, tollgate_sleep),
        2 => sequential(n, &mut rng, tollgate_direct),
        3 => sequential(n, &mut rng, governor_direct),
        4 => concurrent(tasks, per, seed, tollgate_direct),
        5 => concurrent(tasks, per, seed, governor_direct),
        _ => unreachable!(),
    }
}

/// Per round: median, p99 and max lateness, and how many waits ended early.
#[derive(Debug, Clone, Copy)]
struct TimerRound {
    median: f64,
    p99: f64,
    max: f64,
    early: usize,
}

fn timer_round(mut samples: Vec<i64>) -> TimerRound {
    samples.sort_unstable();
    let at = |p| percentile(&samples, p).map_or(f64::NAN, |v| v as f64);
    TimerRound {
        median: at(0.5),
        p99: at(0.99),
        max: samples.last().map_or(f64::NAN, |&v| v as f64),
        early: samples.iter().filter(|&&v| v < 0).count(),
    }
}

fn scenario_timer(cfg: &Config) -> Vec<(usize, Summary, Summary, Summary, usize, usize)> {
    let mut rounds: Vec<Vec<TimerRound>> = vec![Vec::new(); TIMER_ROWS.len()];
    let mut counts = vec![0; TIMER_ROWS.len()];
    for round in 0..cfg.rounds {
        for j in 0..TIMER_ROWS.len() {
            let row = (round + j) % TIMER_ROWS.len();
            let samples = timer_row(cfg, row, 0x7153 + (round * 16 + row) as u64);
            counts[row] = samples.len();
            let r = timer_round(samples);
            eprintln!(
                "  timer {} {} round {}: median {}, p99 {}, max {}, early {}",
                TIMER_ROWS[row].0,
                TIMER_ROWS[row].1,
                round + 1,
                time(r.median),
                time(r.p99),
                time(r.max),
                r.early
            );
            rounds[row].push(r);
        }
    }
    rounds
        .iter()
        .enumerate()
        .map(|(row, r)| {
            let of = |f: fn(&TimerRound) -> f64| Summary::of(&r.iter().map(f).collect::<Vec<_>>());
            (
                row,
                of(|r| r.median),
                of(|r| r.p99),
                of(|r| r.max),
                r.iter().map(|r| r.early).sum(),
                counts[row],
            )
        })
        .collect()
}

// ---------------------------------------------------------------------------------------
// primitives: what a thread's sleep and wake-up cost on this machine

/// A fresh thread parks with `park_timeout(50 µs)` over and over for `span`: CPU per
/// cycle, about what a timer thread pays to sleep until a deadline 50 µs ahead and wake.
fn timed_park_cpu(span: Duration) -> Option<f64> {
    std::thread::spawn(move || {
        let start = Instant::now();
        let cpu = own_cpu_ns()?;
        let mut cycles = 0u64;
        while start.elapsed() < span {
            std::thread::park_timeout(Duration::from_micros(50));
            cycles += 1;
        }
        Some((own_cpu_ns()? - cpu) as f64 / cycles as f64)
    })
    .join()
    .expect("the park thread panicked")
}

/// Two threads hand a turn back and forth `n` times each with `unpark` and `park`: CPU of
/// both per hand-off, about what it costs to wake an idle worker thread and let it park again.
fn handoff_cpu(n: u64) -> Option<f64> {
    let turn = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let main = std::thread::current();
    let other = {
        let turn = Arc::clone(&turn);
        std::thread::spawn(move || {
            let cpu = own_cpu_ns()?;
            for i in 0..n {
                // ordering: Acquire/Release hand the turn over; the data is the counter.
                while turn.load(Ordering::Acquire) != 2 * i + 1 {
                    std::thread::park();
                }
                turn.store(2 * i + 2, Ordering::Release);
                main.unpark();
            }
            Some(own_cpu_ns()? - cpu)
        })
    };
    let cpu = own_cpu_ns()?;
    for i in 0..n {
        turn.store(2 * i + 1, Ordering::Release);
        other.thread().unpark();
        while turn.load(Ordering::Acquire) != 2 * i + 2 {
            std::thread::park();
        }
    }
    let mine = own_cpu_ns()? - cpu;
    let theirs = other.join().expect("the hand-off thread panicked")?;
    Some((mine + theirs) as f64 / (2 * n) as f64)
}

/// Rounds of both primitives: `(what, summary)`.
fn scenario_primitives(cfg: &Config) -> Vec<(&'static str, Option<Summary>)> {
    let span = Duration::from_millis(match cfg.mode {
        "test" => 50,
        "quick" => 200,
        _ => 500,
    });
    let handoffs = if cfg.mode == "test" { 1_000 } else { 20_000 };
    let mut park = Vec::new();
    let mut handoff = Vec::new();
    for round in 0..cfg.rounds {
        let p = timed_park_cpu(span);
        let h = handoff_cpu(handoffs);
        eprintln!(
            "  primitives round {}: timed park {} CPU a cycle, hand-off {} CPU",
            round + 1,
            p.map_or("n/a".into(), time),
            h.map_or("n/a".into(), time)
        );
        park.push(p);
        handoff.push(h);
    }
    let summary = |v: Vec<Option<f64>>| {
        let v: Option<Vec<f64>> = v.into_iter().collect();
        v.map(|v| Summary::of(&v))
    };
    vec![
        (
            "a thread sleeps with `park_timeout(50 µs)` and wakes: CPU per cycle",
            summary(park),
        ),
        (
            "one thread wakes another with `unpark`, which then parks again: CPU of both per hand-off",
            summary(handoff),
        ),
    ]
}

// ---------------------------------------------------------------------------------------
// the report

/// Target for tollgate's CPU per admission against the ideal's, in the same run.
const CPU_VS_IDEAL_TARGET: f64 = 1.2;

/// Targets of the design record (`src/design.rs`, §8) that `s` misses (by median), and for tollgate the CPU target
/// against the ideal (`vs_ideal`: the median of the round-by-round ratios).
fn missed(s: &LoadSummary, cpu_target_ns: f64, vs_ideal: Option<f64>) -> Vec<String> {
    let mut out = Vec::new();
    if (s.name == Tollgate::NAME || s.name == DRIVEN)
        && vs_ideal.is_some_and(|r| r > CPU_VS_IDEAL_TARGET)
    {
        out.push("CPU vs ideal".to_owned());
    }
    if s.rate_pct.median < 99.5 {
        out.push("rate".to_owned());
    }
    if s.starved.median > 0.0 {
        out.push("starved".to_owned());
    }
    if s.p99_beyond_ns.median > 2e6 {
        out.push("p99".to_owned());
    }
    if s.cpu_ns.is_some_and(|c| c.median > cpu_target_ns) {
        out.push("CPU".to_owned());
    }
    out
}

/// The ratio of `cpu` to `ideal` round by round (each round runs the limiters one after the
/// other, so a round's two figures saw about the same load from the rest of the machine),
/// summarised over rounds. On a machine whose load drifts this is far steadier than the
/// ratio of the two medians, whose rounds may have run under different loads.
fn paired_ratio(cpu: Option<&[f64]>, ideal: Option<&[f64]>) -> Option<Summary> {
    let ratios: Vec<f64> = cpu?.iter().zip(ideal?).map(|(c, i)| c / i).collect();
    (!ratios.is_empty()).then(|| Summary::of(&ratios))
}

fn print_load_table(loads: &[(Load, f64, Vec<LoadSummary>)]) {
    table_header(&[
        "scenario",
        "limiter",
        "rate, % of quota",
        "tasks starved",
        "p99 wait beyond fair share",
        "max beyond fair share",
        "CPU per admission",
        "CPU vs ideal",
        "of which timer thread",
        "timer thread runs per admission",
        "context switches per admission",
        "targets missed",
    ]);
    for (load, cpu_target, results) in loads {
        let ideal_rounds = results
            .iter()
            .find(|s| s.name == Ideal::NAME)
            .and_then(|s| s.cpu_rounds.as_ref());
        for s in results {
            let opt_time = |o: Option<Summary>| o.map_or("n/a".to_owned(), time_summary);
            let vs_ideal = paired_ratio(s.cpu_rounds.as_deref(), ideal_rounds.map(Vec::as_slice));
            let miss = missed(s, *cpu_target, vs_ideal.map(|r| r.median));
            println!(
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                load.describe(),
                s.name,
                plain_summary(s.rate_pct, "%"),
                count_summary(s.starved),
                time_summary(s.p99_beyond_ns),
                time_summary(s.max_beyond_ns),
                opt_time(s.cpu_ns),
                vs_ideal.map_or("n/a".to_owned(), |r| format!(
                    "{:.2}x ({:.2}–{:.2})",
                    r.median, r.min, r.max
                )),
                opt_time(s.timer_ns),
                s.timer_runs
                    .map_or("n/a".to_owned(), |x| plain_summary(x, "")),
                s.switches
                    .map_or("n/a".to_owned(), |x| plain_summary(x, "")),
                if miss.is_empty() {
                    "none".to_owned()
                } else {
                    format!("**{}**", miss.join(", "))
                },
            );
        }
        println!(
            "| {} | target | >= 99.5 % | 0 | <= 2 ms | | <= {} | <= {CPU_VS_IDEAL_TARGET}x (tollgate) | | | | |",
            load.describe(),
            time(*cpu_target)
        );
    }
}

fn main() {
    let cfg = Config::from_env();
    let started = Instant::now();
    let load_before = loadavg();
    eprintln!(
        "wait bench, mode {} ({} rounds), load average {load_before}",
        cfg.mode, cfg.rounds
    );

    let mut loads = Vec::new();
    for (part, load, cpu_target, seed) in
        [("f1", cfg.f1, 3_000.0, 0xF1), ("f2", cfg.f2, 1_500.0, 0xF2)]
    {
        if cfg.runs(part) {
            eprintln!("{}", load.describe());
            loads.push((load, cpu_target, scenario_f(&load, cfg.rounds, seed)));
        }
    }
    let g = cfg.runs("g").then(|| {
        eprintln!("G: timeouts");
        scenario_g(&cfg.g, cfg.g_rounds)
    });
    let lockout = cfg.runs("lockout").then(|| {
        eprintln!("lockout");
        scenario_lockout(cfg.lockout_waiters, cfg.lockout_rounds)
    });
    let timer = cfg.runs("timer").then(|| {
        eprintln!("timer lateness");
        scenario_timer(&cfg)
    });
    let prims = cfg.runs("prim").then(|| {
        eprintln!("primitives");
        scenario_primitives(&cfg)
    });

    println!();
    println!(
        "### wait bench — mode {}, {} rounds, {} CPUs",
        cfg.mode,
        cfg.rounds,
        cpus()
    );
    println!();
    println!("{}", loadavg_line(&load_before));
    if !loads.is_empty() {
        println!();
        println!(
            "Median over rounds (min–max). Tasks on a tokio multi-thread runtime with 2 workers; window {} after a warm-up of {} (F1), {} after {} (F2).",
            time(cfg.f1.window.as_nanos() as f64),
            time(cfg.f1.warm_up.as_nanos() as f64),
            time(cfg.f2.window.as_nanos() as f64),
            time(cfg.f2.warm_up.as_nanos() as f64),
        );
        println!();
        print_load_table(&loads);
    }
    if let Some(rows) = g {
        let g = cfg.g;
        println!();
        println!(
            "G. {} tokio tasks on one key, {}/s burst 1, each looping `tokio::time::timeout({}, wait)`; window {} after a warm-up of {}. Median over {} rounds (min–max). Most in a second: the most admissions any one-second span saw over the whole run, as logged by the tasks (GCRA allows {} = rate + burst; a task's log lags its admission by its scheduling delay).",
            g.tasks,
            g.per_second,
            time(g.deadline.as_nanos() as f64),
            time(g.window.as_nanos() as f64),
            time(g.warm_up.as_nanos() as f64),
            cfg.g_rounds,
            g.per_second + 1,
        );
        println!();
        table_header(&[
            "limiter",
            "rate, % of quota",
            "most in a second",
            "timeouts per second",
            "CPU per admission",
        ]);
        for s in rows {
            println!(
                "| {} | {} | {} | {} | {} |",
                s.name,
                plain_summary(s.rate_pct, "%"),
                count_summary(s.most_in_a_second),
                plain_summary(s.timeouts_per_s, ""),
                s.cpu_ns.map_or("n/a".to_owned(), time_summary),
            );
        }
        println!("| target | >= 99.5 % | <= {} | | |", g.per_second + 1);
    }
    if let Some(rows) = lockout {
        println!();
        println!(
            "Lockout: a 100/s, burst-1 key with its cell taken; {} waiters queue for 20 ms and are all dropped (tokio `abort`). Time from the drop until a `check` passes (polled every 100 µs), median over {} rounds (min–max).",
            cfg.lockout_waiters, cfg.lockout_rounds
        );
        println!();
        table_header(&["limiter", "key refused after the drop for"]);
        for (name, s) in rows {
            println!("| {name} | {} |", time_summary(s));
        }
        println!("| target | <= 10 ms (one interval) + timer lateness |");
    }
    if let Some(rows) = timer {
        println!();
        println!(
            "Timer lateness (resumed − deadline), sleeps of 0.1–5 ms: median over rounds (min–max) of each round's statistic. Sequential: {} waits a round under `futures_executor::block_on`; concurrent: {} tokio tasks (2 workers) x {} waits.",
            cfg.timer_sequential, cfg.timer_tasks, cfg.timer_per_task
        );
        println!();
        table_header(&[
            "wait",
            "mode",
            "waits a round",
            "median",
            "p99",
            "max",
            "ended early",
        ]);
        for (row, median, p99, max, early, n) in rows {
            let (what, how) = TIMER_ROWS[row];
            println!(
                "| {what} | {how} | {} | {} | {} | {} | {early} |",
                thousands(n),
                time_summary(median),
                time_summary(p99),
                time_summary(max)
            );
        }
        println!("| target (tollgate's timer) | | | <= 100 µs | <= 1 ms | | 0 |");
    }
    if let Some(prims) = prims {
        println!();
        println!("Thread sleep and wake-up costs on this machine (median over rounds, min–max):");
        println!();
        table_header(&["primitive", "CPU"]);
        for (what, s) in prims {
            println!("| {what} | {} |", s.map_or("n/a".to_owned(), time_summary));
        }
    }
    eprintln!("done in {:.1} s", started.elapsed().as_secs_f64());
}
