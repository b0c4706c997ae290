//! In-process A/B of the keyed table: this tree (`tollgate`) against an older commit
//! (`tollgate_base`), rounds interleaved with rotating order, beside a simple ideal (an
//! `AtomicU64` array read with `Instant`). Run with `benches/ab/run.sh` (see there).
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

struct Ideal {
    slots: Vec<AtomicU64>,
    shift: u32,
    origin: Instant,
}
impl Ideal {
    fn new(keys: usize) -> Ideal {
        let n = keys.next_power_of_two();
        Ideal {
            slots: (0..n).map(|_| AtomicU64::new(0)).collect(),
            shift: 64 - n.trailing_zeros(),
            origin: Instant::now(),
        }
    }
    #[inline(never)]
    fn check_at(&self, key: u64, now: u64) -> bool {
        const T: u64 = 3_600_000_000_000;
        const TAU: u64 = T * 99_999;
        let s = &self.slots[(key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> self.shift) as usize];
        let mut cur = s.load(Ordering::Relaxed);
        loop {
            let tat = cur.max(now);
            if tat - now > TAU {
                return false;
            }
            match s.compare_exchange_weak(cur, tat + T, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return true,
                Err(c) => cur = c,
            }
        }
    }
    fn check(&self, key: u64) -> bool {
        self.check_at(key, self.origin.elapsed().as_nanos() as u64)
    }
}

macro_rules! subject {
    ($m:ident, $c:ident) => {
        mod $m {
            use super::*;
            use $c::{FullPolicy, Limiter, ManualClock, Quota, Timestamp};
            pub fn quota() -> Quota {
                Quota::with_period(Duration::from_secs(3600)).allow_burst(100_000)
            }
            pub fn keyed() -> Limiter<u64> {
                Limiter::keyed(quota())
            }
            pub fn presized(n: usize) -> Limiter<u64> {
                Limiter::builder(quota()).presize(n).build()
            }
            pub fn len_info(l: &Limiter<u64>) -> usize {
                l.stats().bytes
            }
            pub fn a(l: &Limiter<u64>, blocks: usize, block: usize, at: bool) -> f64 {
                let t = Instant::now();
                let mut ok = 0u64;
                for b in 0..blocks {
                    let key = 1_000_000 + b as u64;
                    if at {
                        let now = l.now();
                        for _ in 0..block {
                            ok += l.check_at(black_box(&key), now).is_ok() as u64;
                        }
                    } else {
                        for _ in 0..block {
                            ok += l.check(black_box(&key)).is_ok() as u64;
                        }
                    }
                }
                assert_eq!(ok as usize, blocks * block);
                t.elapsed().as_nanos() as f64 / (blocks * block) as f64
            }
            pub fn b(l: &Limiter<u64>, order: &[u64], at: bool) -> f64 {
                let t = Instant::now();
                let mut ok = 0u64;
                if at {
                    let now = l.now();
                    for k in order {
                        ok += l.check_at(k, now).is_ok() as u64;
                    }
                } else {
                    for k in order {
                        ok += l.check(k).is_ok() as u64;
                    }
                }
                assert_eq!(ok as usize, order.len());
                t.elapsed().as_nanos() as f64 / order.len() as f64
            }
            /// A full table: (hit ns, refused-or-evicting ns), both with check (clock read).
            pub fn full(policy: FullPolicy, n: usize, seed: u64) -> (f64, f64) {
                let l: Limiter<u64> = Limiter::builder(quota())
                    .capacity(16_384)
                    .full_policy(policy)
                    .build();
                let mut rng = Rng(seed);
                let held: Vec<u64> = (0..l.capacity() * 2).map(|_| rng.next()).collect();
                for k in &held {
                    let _ = l.check(k);
                }
                // Held keys only: `check_n(k, 0)` is also Ok for an absent key, which a
                // check would then insert (an eviction under `EvictClosestToExpiry`), so a
                // key counts as held when its remaining burst shows the check it had.
                let held: Vec<u64> = held
                    .into_iter()
                    .filter(|k| l.check_n(k, 0).is_ok_and(|ok| ok.remaining() < 100_000))
                    .take(16_000)
                    .collect();
                let fresh: Vec<u64> = (0..n).map(|_| rng.next()).collect();
                let t = Instant::now();
                for i in 0..n {
                    black_box(l.check(&held[i % held.len()]).is_ok());
                }
                let hit = t.elapsed().as_nanos() as f64 / n as f64;
                let t = Instant::now();
                for k in &fresh {
                    black_box(l.check(k).is_ok());
                }
                let miss = t.elapsed().as_nanos() as f64 / n as f64;
                (hit, miss)
            }
            pub fn churn(seed: u64) -> (f64, String) {
                let clock = ManualClock::new();
                let l: Limiter<u64> = Limiter::builder(Quota::with_period(Duration::from_secs(1)))
                    .clock(clock.clone())
                    .build();
                let mut rng = Rng(seed);
                let mut now = Timestamp::ZERO;
                let t = Instant::now();
                for _ in 0..1300 {
                    for _ in 0..1000 {
                        assert!(l.check_at(&rng.next(), now).is_ok());
                    }
                    now = now + Duration::from_millis(10);
                }
                let ns = t.elapsed().as_nanos() as f64 / 1.3e6;
                clock.set(now);
                (ns, format!("{:?}", l.stats()))
            }
            /// C-like: insert n new keys into a fresh growing limiter: (ns/key, bytes/key).
            pub fn c(keys: &[u64]) -> (f64, f64) {
                let l: Limiter<u64> = Limiter::builder(quota()).clock(ManualClock::new()).build();
                let t = Instant::now();
                for k in keys {
                    assert!(l.check_at(k, Timestamp::ZERO).is_ok());
                }
                let ns = t.elapsed().as_nanos() as f64 / keys.len() as f64;
                let s = l.stats();
                assert_eq!(s.keys_held, keys.len());
                (ns, s.bytes as f64 / keys.len() as f64)
            }
        }
    };
}
subject!(new, tollgate);
subject!(old, tollgate_base);

type Map = std::collections::BTreeMap<String, Vec<f64>>;
fn put(res: &mut Map, k: &str, v: f64) {
    res.entry(k.to_string()).or_default().push(v);
}
fn med(v: &mut Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

fn main() {
    let what = std::env::args().nth(1).unwrap_or("ab".into());
    let rounds: usize = std::env::args()
        .nth(2)
        .map(|s| s.parse().unwrap())
        .unwrap_or(9);
    let mut rng = Rng(7);
    let mut res: std::collections::BTreeMap<String, Vec<f64>> = Default::default();
    if what == "ab" {
        let keys: Vec<u64> = (0..1_000_000).map(|_| rng.next()).collect();
        let presize = std::env::var("PRESIZE").is_ok();
        let (ln, lo) = if presize {
            (new::presized(1_000_000), old::presized(1_000_000))
        } else {
            (new::keyed(), old::keyed())
        };
        for k in &keys {
            assert!(ln.check(k).is_ok());
            assert!(lo.check(k).is_ok());
        }
        println!(
            "bytes new {} old {}",
            new::len_info(&ln),
            old::len_info(&lo)
        );
        let ideal = Ideal::new(keys.len());
        for k in &keys {
            ideal.check(*k);
        }
        let mut order = keys.clone();
        for r in 0..rounds {
            for i in (1..order.len()).rev() {
                let j = (rng.next() % (i as u64 + 1)) as usize;
                order.swap(i, j);
            }
            let (an, ao) = (new::keyed(), old::keyed());
            let ia = Ideal::new(64);
            for s in 0..3 {
                match (s + r) % 3 {
                    0 => {
                        put(&mut res, "A new", new::a(&an, 40, 50_000, false));
                        put(&mut res, "A new at", new::a(&an, 40, 50_000, true));
                        put(&mut res, "B new", new::b(&ln, &order, false));
                        put(&mut res, "B new at", new::b(&ln, &order, true));
                    }
                    1 => {
                        put(&mut res, "A old", old::a(&ao, 40, 50_000, false));
                        put(&mut res, "A old at", old::a(&ao, 40, 50_000, true));
                        put(&mut res, "B old", old::b(&lo, &order, false));
                        put(&mut res, "B old at", old::b(&lo, &order, true));
                    }
                    _ => {
                        let t = Instant::now();
                        let mut ok = 0;
                        for b in 0..40u64 {
                            for _ in 0..50_000 {
                                ok += ia.check(black_box(1_000 + b)) as u64;
                            }
                        }
                        assert_eq!(ok, 2_000_000);
                        put(&mut res, "A ideal", t.elapsed().as_nanos() as f64 / 2e6);
                        let t = Instant::now();
                        for k in &order {
                            assert!(ideal.check(*k));
                        }
                        put(
                            &mut res,
                            "B ideal",
                            t.elapsed().as_nanos() as f64 / order.len() as f64,
                        );
                    }
                }
            }
            let n = res["A new"].len() - 1;
            for (sc, _) in [("A", 0), ("B", 0)] {
                let r = res[&format!("{sc} new")][n] / res[&format!("{sc} old")][n];
                put(&mut res, &format!("{sc} new/old"), r);
                let ri = res[&format!("{sc} ideal")][n];
                let (a, b) = (
                    res[&format!("{sc} new")][n] / ri,
                    res[&format!("{sc} old")][n] / ri,
                );
                put(&mut res, &format!("{sc} new/ideal"), a);
                put(&mut res, &format!("{sc} old/ideal"), b);
                let r = res[&format!("{sc} new at")][n] / res[&format!("{sc} old at")][n];
                put(&mut res, &format!("{sc} at new/old"), r);
            }
        }
    } else if what == "bat" {
        // B check_at only. ORDER=old creates old first; AA=1 compares new vs new.
        let nk: usize = std::env::var("KEYS")
            .map(|s| s.parse().unwrap())
            .unwrap_or(1_000_000);
        let keys: Vec<u64> = (0..nk).map(|_| rng.next()).collect();
        let presize = std::env::var("PRESIZE").is_ok();
        let aa = std::env::var("AA").is_ok();
        let oldfirst = std::env::var("OLDFIRST").is_ok();
        let mk_new = || {
            if presize {
                new::presized(nk)
            } else {
                new::keyed()
            }
        };
        let mk_old = || {
            if presize {
                old::presized(nk)
            } else {
                old::keyed()
            }
        };
        let (lo, ln, ln2);
        if oldfirst {
            lo = mk_old();
            ln = mk_new();
            ln2 = mk_new();
        } else {
            ln = mk_new();
            ln2 = mk_new();
            lo = mk_old();
        }
        for k in &keys {
            assert!(ln.check(k).is_ok());
            assert!(lo.check(k).is_ok());
            assert!(ln2.check(k).is_ok());
        }
        let mut order = keys.clone();
        while order.len() < 2_000_000 {
            order.extend_from_slice(&keys);
        }
        for r in 0..rounds {
            for i in (1..order.len()).rev() {
                let j = (rng.next() % (i as u64 + 1)) as usize;
                order.swap(i, j);
            }
            let (mut x, mut y) = (0.0, 0.0);
            for s in 0..2 {
                if (s + r) % 2 == 0 {
                    x = new::b(&ln, &order, true);
                    put(&mut res, "B new at", x);
                } else if aa {
                    y = new::b(&ln2, &order, true);
                    put(&mut res, "B new2 at", y);
                } else {
                    y = old::b(&lo, &order, true);
                    put(&mut res, "B old at", y);
                }
            }
            put(&mut res, "B at new/other", x / y);
        }
    } else if what == "full" {
        use tollgate::FullPolicy as P;
        use tollgate_base::FullPolicy as Q;
        for r in 0..rounds {
            for s in 0..2 {
                if (s + r) % 2 == 0 {
                    let (h, m) = new::full(P::RefuseNewKeys, 1_000_000, r as u64);
                    put(&mut res, "refuse new hit", h);
                    put(&mut res, "refuse new refused", m);
                    put(&mut res, "refuse new refused/hit", m / h);
                    let (h, m) = new::full(P::EvictClosestToExpiry, 1_000_000, r as u64);
                    put(&mut res, "evict new hit", h);
                    put(&mut res, "evict new evicting", m);
                    put(&mut res, "evict new evicting/hit", m / h);
                } else {
                    let (h, m) = old::full(Q::RefuseNewKeys, 1_000_000, r as u64);
                    put(&mut res, "refuse old hit", h);
                    put(&mut res, "refuse old refused", m);
                    put(&mut res, "refuse old refused/hit", m / h);
                    let (h, m) = old::full(Q::EvictClosestToExpiry, 1_000_000, r as u64);
                    put(&mut res, "evict old hit", h);
                    put(&mut res, "evict old evicting", m);
                    put(&mut res, "evict old evicting/hit", m / h);
                }
            }
        }
    } else if what == "churn" {
        let (a, sa) = new::churn(1);
        let (b, sb) = old::churn(1);
        println!("new {a:.0} ns {sa}\nold {b:.0} ns {sb}");
    } else if what == "c" {
        let keys: Vec<u64> = (0..5_000_000).map(|_| rng.next()).collect();
        for r in 0..rounds {
            for s in 0..2 {
                if (s + r) % 2 == 0 {
                    let (ns, b) = new::c(&keys);
                    put(&mut res, "C new ns", ns);
                    put(&mut res, "C new B/key", b);
                } else {
                    let (ns, b) = old::c(&keys);
                    put(&mut res, "C old ns", ns);
                    put(&mut res, "C old B/key", b);
                }
            }
            let n = res["C new ns"].len() - 1;
            let r = res["C new ns"][n] / res["C old ns"][n];
            put(&mut res, "C new/old ns", r);
        }
    }
    for (k, v) in res.iter_mut() {
        let (m, lo, hi) = med(v);
        println!("{k:28} median {m:9.3}  ({lo:.3}–{hi:.3})  n={}", v.len());
    }
}
