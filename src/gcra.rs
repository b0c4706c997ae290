//! The generic cell rate algorithm as pure functions on nanosecond timestamps.
//!
//! No atomics and no clock here: callers load a stored theoretical arrival time (TAT), ask
//! [`Gcra::decide`] what to do at `now`, and CAS the answer in. Keeping the math pure lets it be
//! property-tested against a plain model (see `tests/window.rs`).
//!
//! Notation: emission interval `T`, burst `b`, tolerance `tau = (b - 1)·T`. A stored TAT that is
//! `<= now` carries no information: it behaves exactly like an absent key (TAT 0).

/// The largest `now` the math accepts (about 18 years after the clock's origin); later
/// timestamps saturate here. With a window of at most 2^59 ns every TAT then fits in 60 bits.
pub(crate) const MAX_NOW: u64 = (1 << 59) - 1;
/// The largest TAT ever stored.
pub(crate) const MAX_TAT: u64 = (1 << 60) - 1;

/// A quota in the form the math uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Gcra {
    /// Emission interval `T` in nanoseconds (>= 1).
    pub(crate) interval: u64,
    /// Tolerance `tau = (b - 1)·T` in nanoseconds.
    pub(crate) tolerance: u64,
    /// Burst `b` (>= 1).
    pub(crate) burst: u32,
}

/// What a request of `n` cells should do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Admit now and store this TAT.
    Admit { new_tat: u64 },
    /// Refuse; the request would be admissible at `admit_at`. Store nothing.
    Deny { admit_at: u64 },
}

impl Gcra {
    #[inline]
    pub(crate) fn new(quota: crate::quota::Quota) -> Gcra {
        Gcra::from_parts(quota.interval_nanos(), quota.burst())
    }

    /// From an interval and burst that a `Quota` validated (`interval >= 1`, `burst >= 1`,
    /// `interval × burst <= 2^59`).
    #[inline]
    pub(crate) fn from_parts(interval: u64, burst: u32) -> Gcra {
        Gcra {
            interval,
            tolerance: interval * u64::from(burst - 1),
            burst,
        }
    }

    /// Decides a request of `n` cells (`1 <= n <= burst`, checked by the caller) at `now`
    /// against the stored `tat`:
    ///
    /// ```text
    /// tat0     = max(tat, now)
    /// admit_at = tat0 + (n-1)·T - tau        admitted iff admit_at <= now
    /// new tat  = tat0 + n·T
    /// ```
    ///
    /// Computed as `tat + (n-1)·T <= now + tau`, which is the same test: if `tat >= now`,
    /// `tat0` is `tat`; if `tat < now`, both sides hold, since `(n-1)·T <= tau` when
    /// `n <= burst` (the left is below `now + (n-1)·T`, and `admit_at` is at most `now`).
    /// This way the only work after the clock read is one add and a compare: `tat + (n-1)·T`
    /// is ready as soon as the word is loaded, and the clock read waits for nothing
    /// (BENCHMARKS.md, A and D). No sum overflows: `tat < 2^60`, and `now`, `tau` and `n·T`
    /// are each at most `2^59` (`MAX_NOW`, `MAX_WINDOW_NANOS`).
    #[inline]
    pub(crate) fn decide(&self, tat: u64, now: u64, n: u32) -> Decision {
        debug_assert!(n >= 1 && n <= self.burst);
        let now = now.min(MAX_NOW);
        let last_cell = tat + u64::from(n - 1) * self.interval;
        if last_cell <= now + self.tolerance {
            Decision::Admit {
                new_tat: self.advance(tat.max(now), n),
            }
        } else {
            // Above `now + tau`, so no saturation: exactly `admit_at` of the docs' formula.
            Decision::Deny {
                admit_at: last_cell - self.tolerance,
            }
        }
    }

    /// Reserves `n` cells whatever the wait: returns `(admit_at, new_tat)`. The caller stores
    /// `new_tat` and may proceed at `admit_at` (possibly in the past, meaning now).
    #[inline]
    pub(crate) fn reserve(&self, tat: u64, now: u64, n: u32) -> (u64, u64) {
        debug_assert!(n >= 1 && n <= self.burst);
        let tat0 = tat.max(now.min(MAX_NOW));
        (self.admit_at(tat0, n), self.advance(tat0, n))
    }

    /// The TAT that pushes the next single-cell admission to at least `now + delay`.
    #[inline]
    pub(crate) fn penalized(&self, tat: u64, now: u64, delay_nanos: u64) -> u64 {
        let target = now
            .min(MAX_NOW)
            .saturating_add(delay_nanos)
            .saturating_add(self.tolerance)
            .min(MAX_TAT);
        tat.max(target)
    }

    /// Cells still admissible at `now` after storing `tat` (for rate-limit headers).
    #[inline]
    pub(crate) fn remaining(&self, tat: u64, now: u64) -> u32 {
        // A single cell is admissible iff tat - tau <= now; k cells iff tat + (k-1)·T - tau <= now.
        match (now.min(MAX_NOW) + self.tolerance).checked_sub(tat) {
            Some(slack) => {
                let k = slack / self.interval + 1;
                k.min(u64::from(self.burst)) as u32
            }
            None => 0,
        }
    }

    #[inline]
    fn admit_at(&self, tat0: u64, n: u32) -> u64 {
        (tat0 + u64::from(n - 1) * self.interval).saturating_sub(self.tolerance)
    }

    #[inline]
    fn advance(&self, tat0: u64, n: u32) -> u64 {
        (tat0 + u64::from(n) * self.interval).min(MAX_TAT)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quota::Quota;
    use std::time::Duration;

    const MS: u64 = 1_000_000;

    fn gcra(q: Quota) -> Gcra {
        Gcra::new(q)
    }

    /// The formula of `decide`'s docs, as written there.
    fn decide_by_the_formula(g: &Gcra, tat: u64, now: u64, n: u32) -> Decision {
        let now = now.min(MAX_NOW);
        let tat0 = tat.max(now);
        let admit_at = g.admit_at(tat0, n);
        if admit_at <= now {
            Decision::Admit {
                new_tat: g.advance(tat0, n),
            }
        } else {
            Decision::Deny { admit_at }
        }
    }

    #[test]
    fn decide_is_the_formula_of_its_docs() {
        let mut rng = 0x9E37_79B9_7F4A_7C15_u64;
        let mut next = |bound: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % bound.max(1)
        };
        let quotas = [
            Quota::per_second(1),
            Quota::per_second(1_000_000_000),
            Quota::per_hour(1).allow_burst(100_000),
            Quota::with_period(Duration::from_nanos(1)).allow_burst(u32::MAX),
            Quota::with_period(Duration::from_nanos(crate::quota::MAX_WINDOW_NANOS)),
        ];
        for q in quotas {
            let g = gcra(q);
            let window = g.interval * u64::from(g.burst);
            for _ in 0..20_000 {
                let n = 1 + next(u64::from(g.burst)) as u32;
                // Near each other (where the answer turns), and anywhere in range.
                let now = match next(3) {
                    0 => next(MAX_NOW + 1),
                    1 => MAX_NOW - next(window.min(MAX_NOW) + 1),
                    _ => next(4 * window + 1),
                };
                let tat = match next(3) {
                    0 => next(MAX_TAT + 1),
                    1 => (now + next(2 * window + 1))
                        .saturating_sub(window)
                        .min(MAX_TAT),
                    _ => now
                        .saturating_add(g.tolerance)
                        .saturating_sub(next(3) * g.interval),
                };
                assert_eq!(
                    g.decide(tat, now, n),
                    decide_by_the_formula(&g, tat, now, n),
                    "{q:?} tat {tat} now {now} n {n}"
                );
            }
        }
    }

    #[test]
    fn fresh_key_admits_the_whole_burst_then_one_per_interval() {
        let g = gcra(Quota::per_second(2));
        let mut tat = 0;
        let now = 10 * MS;
        for _ in 0..2 {
            match g.decide(tat, now, 1) {
                Decision::Admit { new_tat } => tat = new_tat,
                d => panic!("{d:?}"),
            }
        }
        assert_eq!(
            g.decide(tat, now, 1),
            Decision::Deny {
                admit_at: now + 500 * MS
            }
        );
        assert_eq!(g.remaining(tat, now), 0);
    }

    #[test]
    fn remaining_counts_down_from_the_burst() {
        let g = gcra(Quota::per_second(10).allow_burst(5));
        let now = 1_000 * MS;
        let mut tat = 0;
        for expected in (0..5).rev() {
            let Decision::Admit { new_tat } = g.decide(tat, now, 1) else {
                panic!()
            };
            tat = new_tat;
            assert_eq!(g.remaining(tat, now), expected);
        }
    }

    #[test]
    fn penalize_pushes_the_next_single_cell_out() {
        let g = gcra(Quota::per_second(4));
        let now = 5_000 * MS;
        let tat = g.penalized(0, now, 2_000 * MS);
        assert_eq!(
            g.decide(tat, now + 1_999 * MS, 1),
            Decision::Deny {
                admit_at: now + 2_000 * MS
            }
        );
        assert!(matches!(
            g.decide(tat, now + 2_000 * MS, 1),
            Decision::Admit { .. }
        ));
        // Saturates instead of overflowing.
        assert_eq!(g.penalized(0, now, u64::MAX), MAX_TAT);
    }

    #[test]
    fn extreme_quota_and_timestamps_do_not_overflow() {
        let q = Quota::with_period(Duration::from_nanos(1 << 58)).allow_burst(2);
        let g = gcra(q);
        let Decision::Admit { new_tat } = g.decide(0, u64::MAX, 2) else {
            panic!()
        };
        assert!(new_tat <= MAX_TAT);
        assert!(matches!(
            g.decide(new_tat, u64::MAX, 1),
            Decision::Deny { .. }
        ));
    }
}
