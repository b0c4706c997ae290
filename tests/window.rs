//! tollgate against a plain reference GCRA model, and the window guarantee, by proptest.
//!
//! The model is the design record's semantics (`src/design.rs`, §1) written out with `u64`
//! arithmetic and no cleverness:
//!
//! ```text
//! tat0 = max(tat, now)                       (absent key: tat = 0, so tat0 = now)
//! admit iff tat0 + (n-1)·T <= now + tau      (t_admit = tat0 + (n-1)·T - tau <= now)
//! on admission tat = tat0 + n·T; on refusal nothing changes
//! ```
//!
//! `remaining` is modelled by actually running single-cell checks on a copy.

use std::collections::HashMap;
use std::time::Duration;

use proptest::prelude::*;
use tollgate::{
    Admitted, DirectLimiter, Error, FullPolicy, Limiter, ManualClock, Quota, Timestamp,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Params {
    interval: u64,
    burst: u32,
}

impl Params {
    fn quota(self) -> Quota {
        Quota::with_period(Duration::from_nanos(self.interval)).allow_burst(self.burst)
    }

    fn tau(self) -> u64 {
        (u64::from(self.burst) - 1) * self.interval
    }
}

/// What the model says a check returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    Admitted { remaining: u32, reset_after: u64 },
    Limited { earliest: u64 },
    Insufficient,
}

#[derive(Debug, Clone, Copy)]
struct Model {
    p: Params,
    tat: u64,
}

impl Model {
    fn new(p: Params) -> Model {
        Model { p, tat: 0 }
    }

    /// A single-cell-at-a-time count of what is still admissible at `now`.
    fn remaining(&self, now: u64) -> u32 {
        let mut copy = *self;
        let mut k = 0;
        while k < self.p.burst && copy.admit(now, 1).is_ok() {
            k += 1;
        }
        k
    }

    /// The bare GCRA step: `Ok(())` and the TAT moves, or `Err(earliest)`.
    fn admit(&mut self, now: u64, n: u32) -> Result<(), u64> {
        let t = self.p.interval;
        let tat0 = self.tat.max(now);
        let last_cell = tat0 + u64::from(n - 1) * t;
        if last_cell <= now + self.p.tau() {
            self.tat = tat0 + u64::from(n) * t;
            Ok(())
        } else {
            Err(last_cell - self.p.tau())
        }
    }

    fn check(&mut self, now: u64, n: u32) -> Expect {
        if n > self.p.burst {
            return Expect::Insufficient;
        }
        if n > 0 {
            if let Err(earliest) = self.admit(now, n) {
                return Expect::Limited { earliest };
            }
        }
        Expect::Admitted {
            remaining: self.remaining(now),
            reset_after: self.tat.saturating_sub(now),
        }
    }

    fn penalize(&mut self, now: u64, delay: u64) {
        if delay > 0 {
            self.tat = self.tat.max(now + delay + self.p.tau());
        }
    }
}

/// Compares a tollgate result with the model's, field by field.
fn same(
    got: Result<Admitted, Error>,
    want: Expect,
    p: Params,
    now: u64,
    n: u32,
) -> Result<(), TestCaseError> {
    match (got, want) {
        (
            Ok(ok),
            Expect::Admitted {
                remaining,
                reset_after,
            },
        ) => {
            prop_assert_eq!(ok.limit(), p.burst);
            prop_assert_eq!(ok.remaining(), remaining);
            prop_assert_eq!(ok.reset_after(), Duration::from_nanos(reset_after));
        }
        (
            Err(Error::RateLimited {
                earliest,
                wait,
                limit,
            }),
            Expect::Limited { earliest: e },
        ) => {
            prop_assert_eq!(earliest, Timestamp::from_nanos(e));
            prop_assert_eq!(wait, Duration::from_nanos(e - now));
            prop_assert_eq!(limit, p.burst);
        }
        (Err(Error::InsufficientCapacity { requested, burst }), Expect::Insufficient) => {
            prop_assert_eq!((requested, burst), (n, p.burst));
        }
        (got, want) => prop_assert!(
            false,
            "at {} n={}: tollgate {:?}, model {:?}",
            now,
            n,
            got,
            want
        ),
    }
    Ok(())
}

/// The window guarantee over `admitted` (time, cells), sorted by time: every window
/// `[t_i, t_j]` between two admitted arrivals holds at most `b + floor((t_j - t_i) / T)` cells.
fn assert_window(admitted: &[(u64, u32)], p: Params) -> Result<(), TestCaseError> {
    for i in 0..admitted.len() {
        let start = admitted[i].0;
        if i > 0 && admitted[i - 1].0 == start {
            continue; // the window starting at the first arrival of this instant covers it
        }
        let mut cells = 0u64;
        for &(t, n) in &admitted[i..] {
            cells += u64::from(n);
            let bound = u64::from(p.burst) + (t - start) / p.interval;
            prop_assert!(
                cells <= bound,
                "{} cells in [{}, {}] ns, bound {} ({:?})",
                cells,
                start,
                t,
                bound,
                p
            );
        }
    }
    Ok(())
}

fn params() -> impl Strategy<Value = Params> {
    // Interval 1 ns ..= 1 s, with small intervals well represented.
    let interval = prop_oneof![
        1u64..=1_000,
        1_000u64..=1_000_000,
        1_000_000u64..=1_000_000_000
    ];
    (interval, 1u32..=50).prop_map(|(interval, burst)| Params { interval, burst })
}

/// A gap between arrivals, scaled to the quota: none, a fraction of an interval, a few
/// intervals, or an idle time longer than the whole burst.
fn gap(p: Params) -> impl Strategy<Value = u64> {
    let window = p.interval * u64::from(p.burst);
    prop_oneof![
        3 => Just(0u64),
        6 => (0u64..=3_000).prop_map(move |permille| p.interval * permille / 1_000),
        1 => (0u64..=3).prop_map(move |k| p.interval * k + k),
        1 => (1u64..=3).prop_map(move |k| window * k + p.interval),
    ]
}

/// A cost: mostly one cell, sometimes 0, up to the burst, or one more than it.
fn cost(p: Params) -> impl Strategy<Value = u32> {
    prop_oneof![6 => Just(1u32), 3 => 0..=p.burst, 1 => Just(p.burst + 1)]
}

/// A quota and a sequence of `(gap, key, cost)` arrivals.
fn scenario(keys: u8) -> impl Strategy<Value = (Params, u64, Vec<(u64, u8, u32)>)> {
    params().prop_flat_map(move |p| {
        let arrival = (gap(p), 0..keys, cost(p));
        (
            Just(p),
            0u64..1_000_000_000_000,
            prop::collection::vec(arrival, 1..120),
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 192, ..ProptestConfig::default() })]

    /// Keyed limiter on a manual clock: every answer equals the model's, and every key keeps
    /// the window guarantee.
    #[test]
    fn keyed_matches_the_model_and_keeps_the_window((p, start, arrivals) in scenario(3)) {
        let clock = ManualClock::new();
        let limiter: Limiter<u8> = Limiter::builder(p.quota()).clock(clock.clone()).build();
        let mut models: HashMap<u8, Model> = HashMap::new();
        let mut admitted: HashMap<u8, Vec<(u64, u32)>> = HashMap::new();
        let mut now = start;
        clock.set(Timestamp::from_nanos(now));
        for (g, key, n) in arrivals {
            now += g;
            clock.set(Timestamp::from_nanos(now));
            let want = models.entry(key).or_insert_with(|| Model::new(p)).check(now, n);
            let got = limiter.check_n(&key, n);
            if got.is_ok() && n > 0 {
                admitted.entry(key).or_default().push((now, n));
            }
            same(got, want, p, now, n)?;
        }
        for cells in admitted.values() {
            assert_window(cells, p)?;
        }
    }

    /// The direct limiter with caller-supplied times: the same model, the same window.
    #[test]
    fn direct_matches_the_model_and_keeps_the_window((p, start, arrivals) in scenario(1)) {
        let limiter = DirectLimiter::with_clock(p.quota(), ManualClock::new());
        let mut model = Model::new(p);
        let mut admitted = Vec::new();
        let mut now = start;
        for (g, _, n) in arrivals {
            now += g;
            let want = model.check(now, n);
            let got = limiter.check_n_at(n, Timestamp::from_nanos(now));
            if got.is_ok() && n > 0 {
                admitted.push((now, n));
            }
            same(got, want, p, now, n)?;
        }
        assert_window(&admitted, p)?;
    }

    /// Several callers, each with its own clock (as threads reading the time at different
    /// moments, or event loops stamping a whole turn with one `now`), on a small table that
    /// keeps forgetting expired keys by growth, sweeps and slot reuse. One caller may be far
    /// ahead of another; each key, stamped by its own caller only, still keeps the window.
    #[test]
    fn callers_with_their_own_clocks_keep_the_window(
        p in params(),
        capacity in prop_oneof![Just(6usize), Just(64)],
        steps in prop::collection::vec((0u8..3, 0u8..16, 0u8..4, 1u8..=100), 1..300),
    ) {
        let limiter: Limiter<u8> = Limiter::builder(p.quota())
            .shards(1)
            .capacity(capacity)
            .full_policy(FullPolicy::RefuseNewKeys)
            .build();
        let mut clocks = [0u64; 3];
        let mut admitted: HashMap<u8, Vec<(u64, u32)>> = HashMap::new();
        for (caller, key, kind, scale) in steps {
            let c = usize::from(caller);
            // Mostly small steps, sometimes an idle time longer than the whole burst.
            clocks[c] += match kind {
                0 => 0,
                1 | 2 => p.interval * u64::from(scale) / 50,
                _ => p.interval * u64::from(p.burst) * u64::from(scale) / 10,
            };
            let key = caller * 16 + key;
            if limiter.check_at(&key, Timestamp::from_nanos(clocks[c])).is_ok() {
                admitted.entry(key).or_default().push((clocks[c], 1));
            }
        }
        for cells in admitted.values() {
            assert_window(cells, p)?;
        }
    }

    /// Checks mixed with `reset`, `penalize` and `set_quota`: still exactly the model (state
    /// kept across quota changes, penalties only ever push the TAT later).
    #[test]
    fn keyed_operations_match_the_model(
        (p, start, arrivals) in scenario(2),
        ops in prop::collection::vec((0u8..10, 0u8..2, 1u64..3_000_000_000, params()), 0..8),
    ) {
        let clock = ManualClock::new();
        let limiter: Limiter<u8> = Limiter::builder(p.quota()).clock(clock.clone()).build();
        let mut quota = p;
        let mut models: HashMap<u8, Model> = HashMap::new();
        let mut now = start;
        clock.set(Timestamp::from_nanos(now));
        let every = arrivals.len() / (ops.len() + 1) + 1;
        let mut ops = ops.into_iter();
        for (i, (g, key, n)) in arrivals.into_iter().enumerate() {
            now += g;
            clock.set(Timestamp::from_nanos(now));
            if i % every == every - 1 {
                match ops.next() {
                    Some((0..=2, k, _, _)) => {
                        // Whether it reports the key as held depends on reclamation (an
                        // expired key may already be gone); what follows must be a fresh key.
                        let _ = limiter.reset(&k);
                        models.remove(&k);
                    }
                    Some((3..=6, k, delay, _)) => {
                        limiter.penalize(&k, Duration::from_nanos(delay)).unwrap();
                        let m = models.entry(k).or_insert_with(|| Model::new(quota));
                        m.penalize(now, delay);
                    }
                    Some((_, _, _, q)) => {
                        limiter.set_quota(q.quota());
                        quota = q;
                        for m in models.values_mut() {
                            m.p = q;
                        }
                    }
                    None => {}
                }
            }
            // Costs were drawn for the first quota; clamp so most stay admissible-sized.
            let n = n.min(quota.burst + 1);
            let want = models.entry(key).or_insert_with(|| Model::new(quota)).check(now, n);
            same(limiter.check_n(&key, n), want, quota, now, n)?;
        }
    }
}
