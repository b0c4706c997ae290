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
//! A shard learns which it sees by following a few expired keys (`GHOSTS` of them), each from
//! the TAT it had when it was last seen:
//!
//! * While the shard keeps nothing, it follows keys it forgot. A ghost whose key is inserted
//!   again within `MAX_LEARNED` is a *return*, `gap` after its expiry, and the shard then
//!   keeps expired keys at least `2 × gap` (capped at `MAX_LEARNED`), so that a key as slow
//!   to return is held. A ghost whose key has not come back within `MAX_LEARNED` is *stale*.
//! * While it keeps, the keys it forgets are only those that outlived the keep, the ones that
//!   did not come back in time; following only those would count every kept key that came
//!   back as nothing, and a keep that works would look useless. So it follows expired keys
//!   it *holds*, found by its sweeps: one whose TAT has moved by a later sweep came back while
//!   kept (a return); one forgotten later is followed on as a forgotten key (a return if it
//!   comes back, raising the keep, or stale).
//!
//! Each return adds `RETURN_WEIGHT` to a balance (at most `MAX_BALANCE`); each stale takes one
//! from it, or, with none left, a quarter off the kept time. So the shard keeps while more
//! than a quarter of the expired keys it follows come back, and goes back to keeping nothing
//! within about ten seconds when fewer do. A quarter, not a half: clients kept for twice their
//! gap are still held after one cut, so a stray run of stales among one-off keys does not
//! make the shard forget them all. One-off keys never return, so they never raise the time,
//! and under them alone memory keeps following the live keys.
//!
//! Everything here runs under the shard lock; no reader sees it. The kept time only chooses
//! which TATs the locked path counts as expired (`Shard::forget_by`), and a shard at its cap
//! keeps nothing, so what is learned can delay a reclaim but never refuse or evict a key.

use super::slot::EMPTY;

/// The longest a learned keep lasts, and how long a ghost waits for its key, in TAT units
/// (nanoseconds): a second.
pub(crate) const MAX_LEARNED: u64 = 1_000_000_000;
/// How long a held ghost waits to be resolved by a sweep, which may come seldom, or forgotten,
/// before its slot is given up: its key may have left without either (evicted, reset).
const HELD_WAIT: u64 = 10 * MAX_LEARNED;
/// Expired keys a shard follows at once (at most 8: `KeepExpired::held` has a bit each).
const GHOSTS: usize = 8;
const _: () = assert!(GHOSTS <= u8::BITS as usize && GHOSTS.is_power_of_two());
/// What a return adds to the balance, where a stale takes one: a keep is kept while more
/// than a quarter of the expired keys followed come back.
const RETURN_WEIGHT: u32 = 3;
/// The most balance returns build up, so that a keep that stops paying fades within seconds.
const MAX_BALANCE: u32 = GHOSTS as u32;

/// A followed key, `fp` (`EMPTY`: none), the TAT it had when last seen, and whether the shard
/// held it then (a kept key found by a sweep) or had forgotten it. `held` is kept in
/// `KeepExpired::held`, a bit per ghost, so that a ghost is two words.
#[derive(Debug, Clone, Copy)]
struct Ghost {
    fp: u64,
    tat: u64,
    held: bool,
}

/// One shard's keep, under its lock.
#[derive(Debug, Clone)]
pub(crate) struct KeepExpired {
    /// Set by the user (`LimiterBuilder::keep_expired`): kept as is, nothing learned.
    fixed: Option<u64>,
    learned: u64,
    /// Slot `ghost_index(fp)` follows one key at a time, until it comes back, goes stale, or
    /// (a held ghost whose key left the shard otherwise: evicted, reset) is given up after
    /// `HELD_WAIT`.
    ghosts: [[u64; 2]; GHOSTS],
    /// Bit `i`: ghost `i` is of a held key.
    held: u8,
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
            ghosts: [[EMPTY, 0]; GHOSTS],
            held: 0,
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
        if self.ghost(i).fp == fp {
            // A held ghost's key, forgotten now: follow it on.
            self.set(
                i,
                Ghost {
                    fp,
                    tat,
                    held: false,
                },
            );
            return;
        }
        // While keeping, the forgotten keys are the ones that outlived the keep: the sweeps
        // pick held keys to follow instead.
        if self.learned == 0 && self.free(i, tat) {
            self.set(
                i,
                Ghost {
                    fp,
                    tat,
                    held: false,
                },
            );
        }
    }

    /// A sweep found key `fp` held, with TAT `tat`, by a caller whose `expired_by` is
    /// `expired_by`.
    pub(crate) fn held(&mut self, fp: u64, tat: u64, expired_by: u64) {
        if self.fixed.is_some() {
            return;
        }
        let i = ghost_index(fp);
        let ghost = self.ghost(i);
        if ghost.fp == fp {
            if ghost.held && tat > ghost.tat {
                // Checked again while kept.
                self.clear(i);
                self.returned();
            }
            return;
        }
        if self.learned > 0 && tat <= expired_by && self.free(i, tat) {
            self.set(
                i,
                Ghost {
                    fp,
                    tat,
                    held: true,
                },
            );
        }
    }

    /// Key `fp` is about to be inserted, by a caller whose `expired_by` is `now`.
    pub(crate) fn inserting(&mut self, fp: u64, now: u64) {
        if self.fixed.is_some() {
            return;
        }
        let i = ghost_index(fp);
        let ghost = self.ghost(i);
        if ghost.fp != fp {
            return;
        }
        self.clear(i);
        if ghost.held {
            // It left the shard without being forgotten as expired (evicted, reset).
            return;
        }
        let gap = now.saturating_sub(ghost.tat);
        if gap > MAX_LEARNED {
            self.stale();
            return;
        }
        self.returned();
        self.learned = self.learned.max(gap.saturating_mul(2).min(MAX_LEARNED));
    }

    /// Whether ghost slot `i` may follow a new key, seen with TAT `tat` (standing in for the
    /// time): it is empty, or its ghost is past waiting for, which for a forgotten key's ghost
    /// is a stale. A ghost more than `MAX_LEARNED` ahead of `tat` (a caller's clock far ahead
    /// of the others) is given up too, so that it cannot hold its slot for good.
    fn free(&mut self, i: usize, tat: u64) -> bool {
        let ghost = self.ghost(i);
        if ghost.fp == EMPTY {
            return true;
        }
        // A forgotten key may still come back; a held key is still to be seen again by a
        // sweep, or forgotten (unless it left otherwise: evicted, reset).
        let wait = if ghost.held { HELD_WAIT } else { MAX_LEARNED };
        if tat.abs_diff(ghost.tat) <= wait {
            return false;
        }
        if !ghost.held && tat > ghost.tat {
            self.stale();
        }
        self.clear(i);
        true
    }

    fn ghost(&self, i: usize) -> Ghost {
        let [fp, tat] = self.ghosts[i];
        Ghost {
            fp,
            tat,
            held: self.held & (1 << i) != 0,
        }
    }

    fn set(&mut self, i: usize, ghost: Ghost) {
        self.ghosts[i] = [ghost.fp, ghost.tat];
        self.held = (self.held & !(1 << i)) | (u8::from(ghost.held) << i);
    }

    fn clear(&mut self, i: usize) {
        self.set(
            i,
            Ghost {
                fp: EMPTY,
                tat: 0,
                held: false,
            },
        );
    }

    fn returned(&mut self) {
        self.balance = (self.balance + RETURN_WEIGHT).min(MAX_BALANCE);
    }

    fn stale(&mut self) {
        match self.balance.checked_sub(1) {
            Some(balance) => self.balance = balance,
            None => self.learned -= self.learned / 4,
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

    /// Learns `800 ms` from one return: balance `RETURN_WEIGHT`.
    fn learned() -> KeepExpired {
        let mut keep = KeepExpired::new(None);
        keep.forgot(7, 0);
        keep.inserting(7, 400 * MS);
        assert_eq!((keep.time(), keep.balance), (800 * MS, RETURN_WEIGHT));
        keep
    }

    /// While keeping: follows `fp` from a sweep that holds it expired at `tat`, then forgets it.
    fn follow_and_forget(keep: &mut KeepExpired, fp: u64, tat: u64) {
        keep.held(fp, tat, tat + MS);
        keep.forgot(fp, tat);
    }

    #[test]
    fn a_return_keeps_twice_its_gap_capped() {
        let mut keep = KeepExpired::new(None);
        assert_eq!(keep.time(), 0);
        keep.forgot(7, 100 * MS);
        keep.inserting(7, 130 * MS);
        assert_eq!(keep.time(), 60 * MS);
        // A shorter gap never lowers it.
        follow_and_forget(&mut keep, 7, 200 * MS);
        keep.inserting(7, 210 * MS);
        assert_eq!(keep.time(), 60 * MS);
        follow_and_forget(&mut keep, 7, 300 * MS);
        keep.inserting(7, 300 * MS + MAX_LEARNED);
        assert_eq!(keep.time(), MAX_LEARNED);
    }

    #[test]
    fn keys_that_never_come_back_keep_nothing() {
        // Each new key shares the forgotten one's ghost: only the same key is a return.
        let fps = same_ghost(10_000);
        let mut keep = KeepExpired::new(None);
        for (i, pair) in fps.windows(2).enumerate() {
            let now = i as u64 * MS;
            keep.forgot(pair[0], now);
            keep.inserting(pair[1], now + MS);
        }
        assert_eq!((keep.time(), keep.balance), (0, 0));
    }

    #[test]
    fn a_return_later_than_the_most_learned_is_stale() {
        let mut keep = learned();
        follow_and_forget(&mut keep, 9, MAX_LEARNED);
        keep.inserting(9, 2 * MAX_LEARNED + 1);
        assert_eq!((keep.time(), keep.balance), (800 * MS, RETURN_WEIGHT - 1));
    }

    #[test]
    fn a_return_from_behind_counts_and_raises_nothing() {
        let mut keep = learned();
        follow_and_forget(&mut keep, 9, 500 * MS);
        keep.inserting(9, 400 * MS); // a caller whose clock is behind the forgetter's
        assert_eq!((keep.time(), keep.balance), (800 * MS, 2 * RETURN_WEIGHT));
    }

    #[test]
    fn the_balance_is_capped() {
        let mut keep = learned();
        for i in 1..10u64 {
            follow_and_forget(&mut keep, 7, i * MAX_LEARNED);
            keep.inserting(7, i * MAX_LEARNED + 10 * MS);
        }
        assert_eq!(keep.balance, MAX_BALANCE);
    }

    #[test]
    fn stales_beyond_the_returns_cut_a_quarter_each() {
        let fps = same_ghost(20);
        let mut keep = learned();
        // Each followed key is forgotten and never comes back; the next one finds it stale.
        let mut expected = 800 * MS;
        for (n, &fp) in fps.iter().enumerate() {
            let tat = (n as u64 + 1) * (MAX_LEARNED + 1);
            follow_and_forget(&mut keep, fp, tat);
            // The first follow finds no ghost; the next `RETURN_WEIGHT` stales use the balance.
            if n > RETURN_WEIGHT as usize {
                expected -= expected / 4;
            }
            assert_eq!(keep.time(), expected, "after {} follows", n + 1);
        }
        assert!(keep.time() < 10 * MS);
    }

    #[test]
    fn a_held_key_checked_again_is_a_return() {
        let fps = same_ghost(2);
        let mut keep = learned();
        keep.held(fps[0], 100 * MS, 150 * MS);
        keep.held(fps[0], 100 * MS, 200 * MS); // still kept, not checked since
        keep.held(fps[1], 180 * MS, 200 * MS); // the ghost is taken
        assert_eq!(keep.balance, RETURN_WEIGHT);
        keep.held(fps[0], 300 * MS, 400 * MS); // checked again
        assert_eq!((keep.time(), keep.balance), (800 * MS, 2 * RETURN_WEIGHT));
        keep.held(fps[1], 300 * MS, 400 * MS); // the ghost is free again
        assert_eq!(keep.ghost(0).fp, fps[1]);
    }

    #[test]
    fn live_keys_and_keys_forgotten_while_keeping_are_not_followed() {
        let mut keep = learned();
        keep.held(9, 500 * MS, 400 * MS); // not expired
        assert_eq!(keep.ghost(ghost_index(9)).fp, EMPTY);
        // A key forgotten while keeping outlived the keep: following only those would count
        // the kept keys that came back as nothing.
        keep.forgot(9, 500 * MS);
        keep.inserting(9, 510 * MS);
        assert_eq!((keep.time(), keep.balance), (800 * MS, RETURN_WEIGHT));
    }

    #[test]
    fn a_held_ghost_whose_key_left_otherwise_is_given_up_without_a_stale() {
        let fps = same_ghost(2);
        let mut keep = learned();
        keep.held(fps[0], 0, MS); // then evicted: neither checked again nor forgotten
        keep.held(fps[1], HELD_WAIT, HELD_WAIT + MS);
        assert_eq!(keep.ghost(0).fp, fps[0], "waited for");
        keep.held(fps[1], HELD_WAIT + 1, HELD_WAIT + MS);
        assert_eq!(keep.ghost(0).fp, fps[1]);
        assert_eq!((keep.time(), keep.balance), (800 * MS, RETURN_WEIGHT));
    }

    #[test]
    fn a_ghost_far_ahead_of_the_others_is_given_up() {
        let fps = same_ghost(2);
        let mut keep = KeepExpired::new(None);
        keep.forgot(fps[0], 100 * MAX_LEARNED); // from a clock far ahead
        keep.forgot(fps[1], MS);
        assert_eq!(keep.ghost(0).fp, fps[1]);
        assert_eq!(keep.balance, 0);
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
        keep.held(8, 0, MS);
        assert_eq!(keep.time(), 0);
        assert!(keep.ghosts.iter().all(|g| g[0] == EMPTY));
        assert_eq!(KeepExpired::new(Some(5 * MS)).time(), 5 * MS);
    }
}
