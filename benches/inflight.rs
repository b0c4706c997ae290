//! The `inflight` benchmark: acquire/release pairs per second of the per-key concurrency
//! limit ([`InFlight`]) beside the usual hand-rolled ones, a `tokio::sync::Semaphore` per
//! key in a `Mutex<HashMap<u64, Arc<Semaphore>>>` or in a `DashMap<u64, Arc<Semaphore>>`
//! (sharded `RwLock`s), in the same process run.
//!
//! ```text
//! cargo bench --bench inflight                           # full run
//! TOLLGATE_BENCH_QUICK=1 cargo bench --bench inflight    # smoke run (a few seconds)
//! TOLLGATE_BENCH_ROUNDS=15 cargo bench --bench inflight  # 15 rounds (default 9)
//! ```
//!
//! Each pair is `acquire(&key)` polled once (it is always free, so ready at once) and the
//! permit dropped. The reference does what per-key semaphore code usually does: lock the
//! map, get or insert the key's semaphore, clone its `Arc`, unlock, `acquire_owned()` polled
//! once, drop the permit. It never removes a semaphore (removing one safely needs the
//! reference count checked under the map lock, which such code rarely does), so it keeps
//! every key it has seen; tollgate keeps a key only while a permit is out. The DashMap
//! subject does the same through `entry().or_insert_with()` on its shard's write lock
//! (the get-or-insert that per-key semaphore code over DashMap writes), and keeps every
//! key too. A fourth subject,
//! *reclaiming*, is the same map whose permit's drop removes the key's semaphore under the
//! map lock once its reference count says nobody holds or waits on it: bounded memory like
//! tollgate's. The *keys held after* column shows the difference. Throughputs are also given
//! relative to tollgate's (tollgate = 1; below 1, the other is slower).
//!
//! Scenarios, each reported as the median over rounds with min–max, in million pairs per
//! second:
//!
//! * **hot**: one thread, one key, pairs back to back;
//! * **1M keys**: one thread, one pair per key over 1M random keys in random order;
//! * **1M held**: one thread acquires a permit on each of 1M keys, then drops them all
//!   (pairs per second over both phases: a million keys with state at once). Here the
//!   reference's release is one atomic add on its semaphore, while tollgate's removes the
//!   key's entry under the shard lock: the price of holding no state for idle keys;
//! * **2 threads hot**: two threads on one key with a limit of 64 (never waits: the cost
//!   of sharing the key's lock or semaphore).

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use futures_util::FutureExt;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use dashmap::DashMap;

use common::fmt::{plain_summary, table_header, thousands};
use common::machine::{cpu_model, cpus, loadavg, loadavg_line, today};
use common::{Rng, Size, Summary, run_threads};
use tollgate::{InFlight, Permit};

/// The per-key limit of every scenario.
const LIMIT: usize = 64;

/// The two subjects behind one interface.
trait Subject: Sync {
    type Permit;
    fn acquire(&self, key: u64) -> Self::Permit;
    fn keys(&self) -> usize;
}

struct Tollgate(InFlight<u64>);

impl Subject for Tollgate {
    type Permit = Permit;
    fn acquire(&self, key: u64) -> Permit {
        self.0.acquire(&key).now_or_never().expect("free")
    }
    fn keys(&self) -> usize {
        self.0.keys()
    }
}

#[derive(Default)]
struct Semaphores(Mutex<HashMap<u64, Arc<Semaphore>>>);

impl Subject for Semaphores {
    type Permit = OwnedSemaphorePermit;
    fn acquire(&self, key: u64) -> OwnedSemaphorePermit {
        let sem = {
            let mut map = self.0.lock().unwrap();
            Arc::clone(
                map.entry(key)
                    .or_insert_with(|| Arc::new(Semaphore::new(LIMIT))),
            )
        };
        sem.acquire_owned().now_or_never().expect("free").unwrap()
    }
    fn keys(&self) -> usize {
        self.0.lock().unwrap().len()
    }
}

/// A semaphore per key in a `DashMap`: get or insert under the key's shard lock, clone the
/// `Arc`, acquire. Never removes a key.
#[derive(Default)]
struct DashSemaphores(DashMap<u64, Arc<Semaphore>>);

impl Subject for DashSemaphores {
    type Permit = OwnedSemaphorePermit;
    fn acquire(&self, key: u64) -> OwnedSemaphorePermit {
        let sem = Arc::clone(
            &self
                .0
                .entry(key)
                .or_insert_with(|| Arc::new(Semaphore::new(LIMIT))),
        );
        sem.acquire_owned().now_or_never().expect("free").unwrap()
    }
    fn keys(&self) -> usize {
        self.0.len()
    }
}

/// The same map, but a permit's drop removes its key's semaphore once nobody holds or
/// waits on it (the reference count, checked under the map lock): bounded memory, as
/// tollgate's, at the price of a map lookup per release.
#[derive(Default)]
struct Reclaiming(Arc<Mutex<HashMap<u64, Arc<Semaphore>>>>);

struct ReclaimingPermit {
    permit: Option<OwnedSemaphorePermit>,
    map: Arc<Mutex<HashMap<u64, Arc<Semaphore>>>>,
    key: u64,
}

impl Drop for ReclaimingPermit {
    fn drop(&mut self) {
        let mut map = self.map.lock().unwrap();
        drop(self.permit.take()); // drops this permit's reference to the semaphore
        if map
            .get(&self.key)
            .is_some_and(|sem| Arc::strong_count(sem) == 1)
        {
            map.remove(&self.key);
        }
    }
}

impl Subject for Reclaiming {
    type Permit = ReclaimingPermit;
    fn acquire(&self, key: u64) -> ReclaimingPermit {
        let sem = {
            let mut map = self.0.lock().unwrap();
            Arc::clone(
                map.entry(key)
                    .or_insert_with(|| Arc::new(Semaphore::new(LIMIT))),
            )
        };
        ReclaimingPermit {
            permit: Some(sem.acquire_owned().now_or_never().expect("free").unwrap()),
            map: Arc::clone(&self.0),
            key,
        }
    }
    fn keys(&self) -> usize {
        self.0.lock().unwrap().len()
    }
}

struct Sizes {
    rounds: usize,
    hot_pairs: usize,
    keys: usize,
    threads_pairs: usize,
}

/// Million pairs per second of `pairs` pairs taking `ns`.
fn mpairs(pairs: usize, ns: f64) -> f64 {
    pairs as f64 / ns * 1e3
}

fn hot<S: Subject>(s: &S, pairs: usize) -> f64 {
    let start = Instant::now();
    for _ in 0..pairs {
        drop(std::hint::black_box(s.acquire(std::hint::black_box(1))));
    }
    mpairs(pairs, start.elapsed().as_nanos() as f64)
}

fn spread<S: Subject>(s: &S, keys: &[u64]) -> f64 {
    let start = Instant::now();
    for &key in keys {
        drop(std::hint::black_box(s.acquire(key)));
    }
    mpairs(keys.len(), start.elapsed().as_nanos() as f64)
}

fn held<S: Subject>(s: &S, keys: &[u64]) -> f64 {
    let start = Instant::now();
    let permits: Vec<S::Permit> = keys.iter().map(|&key| s.acquire(key)).collect();
    drop(permits);
    mpairs(keys.len(), start.elapsed().as_nanos() as f64)
}

fn two_threads<S: Subject>(s: &S, pairs: usize) -> f64 {
    let (ns, _) = run_threads(2, |_| {
        for _ in 0..pairs {
            drop(std::hint::black_box(s.acquire(1)));
        }
        0
    });
    mpairs(2 * pairs, ns)
}

fn main() {
    let size = Size::from_env();
    let sizes = match size {
        Size::Test => Sizes {
            rounds: 1,
            hot_pairs: 1_000,
            keys: 1_000,
            threads_pairs: 1_000,
        },
        Size::Quick => Sizes {
            rounds: 3,
            hot_pairs: 2_000_000,
            keys: 1_000_000,
            threads_pairs: 1_000_000,
        },
        Size::Full => Sizes {
            rounds: 9,
            hot_pairs: 10_000_000,
            keys: 1_000_000,
            threads_pairs: 5_000_000,
        },
    };
    let sizes = Sizes {
        rounds: Size::rounds_or(sizes.rounds),
        ..sizes
    };
    println!(
        "inflight bench ({} run, {} rounds, limit {LIMIT} per key, {} keys), {}, {} CPUs ({})\n",
        size.name(),
        sizes.rounds,
        thousands(sizes.keys),
        today(),
        cpus(),
        cpu_model()
    );
    let before = loadavg();
    table_header(&[
        "scenario",
        "tollgate InFlight (M pairs/s)",
        "Mutex<HashMap<_, Arc<Semaphore>>> (M pairs/s)",
        "DashMap<_, Arc<Semaphore>> (M pairs/s)",
        "Mutex<HashMap>, reclaiming (M pairs/s)",
        "tollgate / mutex map / DashMap / reclaiming (ratio of medians)",
        "keys held after (tollgate / mutex map / DashMap / reclaiming)",
    ]);
    let mut rng = Rng::new(11);
    let keys = rng.keys(sizes.keys);
    type Scenario<'k> = (
        &'static str,
        Box<dyn Fn(&Tollgate) -> f64 + 'k>,
        Box<dyn Fn(&Semaphores) -> f64 + 'k>,
        Box<dyn Fn(&DashSemaphores) -> f64 + 'k>,
        Box<dyn Fn(&Reclaiming) -> f64 + 'k>,
    );
    let scenarios: Vec<Scenario<'_>> = vec![
        (
            "hot: 1 thread, 1 key",
            Box::new(|s| hot(s, sizes.hot_pairs)),
            Box::new(|s| hot(s, sizes.hot_pairs)),
            Box::new(|s| hot(s, sizes.hot_pairs)),
            Box::new(|s| hot(s, sizes.hot_pairs)),
        ),
        (
            "1M keys: 1 thread, one pair per key, random order",
            Box::new(|s| spread(s, &keys)),
            Box::new(|s| spread(s, &keys)),
            Box::new(|s| spread(s, &keys)),
            Box::new(|s| spread(s, &keys)),
        ),
        (
            "1M held: 1 thread, every key held, then released",
            Box::new(|s| held(s, &keys)),
            Box::new(|s| held(s, &keys)),
            Box::new(|s| held(s, &keys)),
            Box::new(|s| held(s, &keys)),
        ),
        (
            "2 threads, 1 key",
            Box::new(|s| two_threads(s, sizes.threads_pairs)),
            Box::new(|s| two_threads(s, sizes.threads_pairs)),
            Box::new(|s| two_threads(s, sizes.threads_pairs)),
            Box::new(|s| two_threads(s, sizes.threads_pairs)),
        ),
    ];
    for (name, ours, mutex, dash, reclaiming) in &scenarios {
        let (mut a, mut b, mut d, mut c) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let mut held = (0, 0, 0, 0);
        for round in 0..sizes.rounds {
            // Fresh subjects per round, run in a rotating order.
            let t = Tollgate(InFlight::new(LIMIT));
            let s = Semaphores::default();
            let m = DashSemaphores::default();
            let r = Reclaiming::default();
            for i in 0..4 {
                match (round + i) % 4 {
                    0 => a.push(ours(&t)),
                    1 => b.push(mutex(&s)),
                    2 => d.push(dash(&m)),
                    _ => c.push(reclaiming(&r)),
                }
            }
            held = (t.keys(), s.keys(), m.keys(), r.keys());
        }
        let (sa, sb, sd, sc) = (
            Summary::of(&a),
            Summary::of(&b),
            Summary::of(&d),
            Summary::of(&c),
        );
        println!(
            "| {name} | {} | {} | {} | {} | 1 / {:.2} / {:.2} / {:.2} | {} / {} / {} / {} |",
            plain_summary(sa, ""),
            plain_summary(sb, ""),
            plain_summary(sd, ""),
            plain_summary(sc, ""),
            sb.median / sa.median,
            sd.median / sa.median,
            sc.median / sa.median,
            thousands(held.0),
            thousands(held.1),
            thousands(held.2),
            thousands(held.3),
        );
    }
    println!("\n{}", loadavg_line(&before));
}
