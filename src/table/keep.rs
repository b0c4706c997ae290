//! How long a shard keeps a key after its state expired: fixed by the user, or learned from
//! the keys that come back after the shard forgot them.
//!
//! Forgetting an expired key changes no answer (its next check finds a full burst either
//! way); it changes what that next check costs. A held key's check is the lock-free update of
//! its slot, a forgotten key's an insert under the shard lock. So keeping pays where forgotten
//! keys come back (clients returning after their windows expired: the insert is then most of
//! a check's work, and on several cores the threads fight over the shards' locks), and costs
//! memory where they do not (a flood of one-off keys, whose slots would hold nothing that is
//! ever asked for again).
//!
//! A shard learns which it sees by remembering a few of the keys it forgot (`GHOSTS` of them,
//! each with the TAT it had): a ghost whose key is inserted again within `MAX_LEARNED` is a
//! *return*, `gap` after its expiry, and the shard then keeps expired keys at least `2 × gap`
//! (capped at `MAX_LEARNED`), so that a key as slow to return is held. A ghost whose key has
//! not come back within `MAX_LEARNED` is *stale*. Stales beyond the returns since the last
//! change halve the kept time: when most forgotten keys stop coming back, it goes back to
//! zero in a few seconds. One-off keys never return, so they never raise it, and memory keeps
//! following the live keys.
//!
//! Everything here runs under the shard lock; no reader sees it. The kept time only chooses
//! which TATs the locked path counts as expired (`Shard::forget_by`), and a shard at its cap
//! keeps nothing, so what is learned can delay a reclaim but never refuse or evict a key.

use super::slot::EMPTY;

/// The longest a learned keep lasts, and how long a ghost waits for its key, in TAT units
/// (nanoseconds): a second.
pub(crate) const MAX_LEARNED: u64 = 1_000_000_000;
/// Forgotten keys a shard remembers at once.
const GHOSTS: usize = 8;
/// Returns that count toward keeping before stales start halving it.
const MAX_BALANCE: u32 = GHOSTS as u32;

/// A forgotten key, `fp` (`EMPTY`: none), and the TAT it had when it was forgotten.
#[derive(Debug, Clone, Copy)]
struct Ghost {
    fp: u64,
    tat: u64,
}

const NO_GHOST: Ghost = Ghost { fp: EMPTY, tat: 0 };

/// One shard's keep, under its lock.
#[derive(Debug, Clone)]
pub(crate) struct KeepExpired {
    /// Set by the user (`LimiterBuilder::keep_expired`): kept as is, nothing learned.
    fixed: Option<u64>,
    learned: u64,
    /// Slot `ghost_index(fp)` holds the last forgotten key that landed there, until its key
    /// returns or a forgotten key finds it stale.
    ghosts: [Ghost; GHOSTS],
    /// Returns not yet offset by stales (at most `MAX_BALANCE`).
    balance: u32,
}

/// A ghost's place: top bits of a multiply by a constant unrelated to the ones that pick the
/// shard (`table::shard_index`) and the home slot (`SlotArray::home`), so the keys of one
/// shard spread over all its ghosts.
fn ghost_index(fp: u64) -> usize {
    (fp.wrapping_mul(0xC2B2_AE3D_27D4_EB4F) >> (64 - GHOSTS.trailing_zeros())) as usize
}

impl KeepExpired {
    /// `fixed`: the user's time, in TAT units; `None` learns it.
    pub(crate) fn new(fixed: Option<u64>) -> KeepExpired {
        KeepExpired {
            fixed,
            learned: 0,
            ghosts: [NO_GHOST; GHOSTS],
            balance: 0,
        }
    }

    /// How long past the caller's `expired_by` an expired key is kept now.
    #[inline]
    pub(crate) fn time(&self) -> u64 {
        self.fixed.unwrap_or(self.learned)
    }

    /// The shard forgot key `fp`, whose TAT was `tat`, as expired. `tat` stands in for the
    /// time (it is at most the caller's `expired_by`), so a ghost is found stale no earlier
    /// than `MAX_LEARNED` after it.
    pub(crate) fn forgot(&mut self, fp: u64, tat: u64) {
        if self.fixed.is_some() {
            return;
        }
        let i = ghost_index(fp);
        let ghost = self.ghosts[i];
        if ghost.fp != EMPTY {
            if tat.saturating_sub(ghost.tat) <= MAX_LEARNED {
                // Its key may still come back: keep waiting for it.
                return;
            }
            self.stale();
        }
        self.ghosts[i] = Ghost { fp, tat };
    }

    /// Key `fp` is about to be inserted, by a caller whose `expired_by` is `now`.
    pub(crate) fn inserting(&mut self, fp: u64, now: u64) {
        if self.fixed.is_some() {
            return;
        }
        let i = ghost_index(fp);
        if self.ghosts[i].fp != fp {
            return;
        }
        let gap = now.saturating_sub(self.ghosts[i].tat);
        self.ghosts[i] = NO_GHOST;
        if gap > MAX_LEARNED {
            self.stale();
            return;
        }
        self.balance = (self.balance + 1).min(MAX_BALANCE);
        self.learned = self.learned.max(gap.saturating_mul(2).min(MAX_LEARNED));
    }

    fn stale(&mut self) {
        match self.balance.checked_sub(1) {
            Some(balance) => self.balance = balance,
            None => self.learned /= 2,
        }
    }
}

#[cfg(all(test, not(tollgate_loom)))]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    /// Distinct fingerprints that share one ghost.
    fn same_ghost(n: usize) -> Vec<u64> {
        (2..).filter(|&fp| ghost_index(fp) == 0).take(n).collect()
    }

    #[test]
    fn a_return_keeps_twice_its_gap_capped() {
        let mut keep = KeepExpired::new(None);
        assert_eq!(keep.time(), 0);
        keep.forgot(7, 100 * MS);
        keep.inserting(7, 130 * MS);
        assert_eq!(keep.time(), 60 * MS);
        // A shorter gap never lowers it.
        keep.forgot(7, 200 * MS);
        keep.inserting(7, 210 * MS);
        assert_eq!(keep.time(), 60 * MS);
        keep.forgot(7, 300 * MS);
        keep.inserting(7, 300 * MS + MAX_LEARNED);
        assert_eq!(keep.time(), MAX_LEARNED);
    }

    #[test]
    fn keys_that_never_come_back_keep_nothing() {
        let mut keep = KeepExpired::new(None);
        for (i, fp) in (2..10_000u64).enumerate() {
            let now = i as u64 * MS;
            keep.forgot(fp, now);
            keep.inserting(fp + 1_000_000, now);
        }
        assert_eq!(keep.time(), 0);
    }

    #[test]
    fn a_return_later_than_the_most_learned_is_stale() {
        let mut keep = KeepExpired::new(None);
        keep.forgot(7, 0);
        keep.inserting(7, MAX_LEARNED + 1);
        assert_eq!(keep.time(), 0);
    }

    #[test]
    fn stales_beyond_the_returns_halve_it() {
        let fps = same_ghost(20);
        let mut keep = KeepExpired::new(None);
        keep.forgot(fps[0], 0);
        keep.inserting(fps[0], 400 * MS);
        assert_eq!(keep.time(), 800 * MS);
        assert_eq!(keep.balance, 1);
        // Each later forgotten key waits out its second and is found stale by the next.
        let mut now = 0;
        for (n, &fp) in fps[1..].iter().enumerate() {
            now += MAX_LEARNED + 1;
            keep.forgot(fp, now);
            let expected = match n {
                0 | 1 => 800 * MS, // the first forgets only fills the ghost; then the return pays
                n => (800 * MS) >> (n - 1),
            };
            assert_eq!(keep.time(), expected, "after {} forgets", n + 1);
        }
    }

    #[test]
    fn a_ghost_waits_for_its_key_before_taking_another() {
        let fps = same_ghost(2);
        let mut keep = KeepExpired::new(None);
        keep.forgot(fps[0], 0);
        keep.forgot(fps[1], 10 * MS);
        keep.inserting(fps[1], 20 * MS);
        assert_eq!(keep.time(), 0, "the second key was not remembered");
        keep.inserting(fps[0], 20 * MS);
        assert_eq!(keep.time(), 40 * MS);
    }

    #[test]
    fn a_fixed_time_learns_nothing() {
        let mut keep = KeepExpired::new(Some(0));
        keep.forgot(7, 0);
        keep.inserting(7, 100 * MS);
        assert_eq!(keep.time(), 0);
        assert_eq!(KeepExpired::new(Some(5 * MS)).time(), 5 * MS);
    }
}
