//! One slot array: linear probing over `{fingerprint, state}` slots (see `slot.rs`).
//!
//! Invariant (probe runs): no key is separated from its home slot by an `EMPTY` slot, outside
//! a compaction. `find` is the lock-free probe; the rest runs under the shard lock (or on an
//! array not yet published) and is called from `shard.rs`.

use super::slot::{EMPTY, Slot, TOMBSTONE, is_live, tat_of};
use crate::sync::Ordering;

#[derive(Debug)]
pub(crate) struct SlotArray {
    pub(super) slots: Box<[Slot]>,
}

impl SlotArray {
    pub(super) fn new(len: usize) -> SlotArray {
        SlotArray {
            slots: (0..len).map(|_| Slot::new()).collect(),
        }
    }

    pub(crate) fn slots(&self) -> &[Slot] {
        &self.slots
    }

    pub(super) fn bytes(&self) -> usize {
        std::mem::size_of_val(&*self.slots) + std::mem::size_of::<SlotArray>()
    }

    #[inline]
    pub(super) fn home(&self, fp: u64) -> usize {
        // Multiply-shift onto [0, len): uses all of fp's bits, and differs from the top bits
        // that (by default) picked the shard.
        let mixed = fp.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        ((u128::from(mixed) * self.slots.len() as u128) >> 64) as usize
    }

    #[inline]
    pub(super) fn next(&self, i: usize) -> usize {
        if i + 1 == self.slots.len() { 0 } else { i + 1 }
    }

    /// Lock-free probe for `fp`. `None` is only a hint (the locked path re-checks).
    #[inline]
    pub(crate) fn find(&self, fp: u64) -> Option<&Slot> {
        let mut i = self.home(fp);
        for _ in 0..self.slots.len() {
            let slot = &self.slots[i];
            // ordering: Acquire pairs with the Release fp store of an insert, so the state
            // word read next is at least the frozen word that preceded it (see slot.rs).
            match slot.fp.load(Ordering::Acquire) {
                f if f == fp => return Some(slot),
                EMPTY => return None,
                _ => i = self.next(i),
            }
        }
        None
    }

    /// Locked probe: the key's slot, or where a new key could go.
    pub(super) fn probe_locked(&self, fp: u64, now: u64) -> Probe {
        let mut i = self.home(fp);
        let mut free = None;
        for _ in 0..self.slots.len() {
            let slot = &self.slots[i];
            // ordering: fingerprints only change under the lock we hold.
            match slot.fp.load(Ordering::Relaxed) {
                f if f == fp => return Probe::Found(i),
                EMPTY => return Probe::Absent(free.or(Some(Free::Empty(i)))),
                TOMBSTONE => free = free.or(Some(Free::Tombstone(i))),
                _ => {
                    let word = slot.word();
                    if free.is_none() && is_live(word) && tat_of(word) <= now {
                        free = Some(Free::Expired(i));
                    }
                }
            }
            i = self.next(i);
        }
        Probe::Absent(free)
    }

    /// The first `EMPTY` slot on `fp`'s probe run (under the lock, or in an unpublished array).
    pub(super) fn free_slot(&self, fp: u64) -> usize {
        let mut i = self.home(fp);
        // ordering: fingerprints only change under the lock (or before publication).
        while self.slots[i].fp.load(Ordering::Relaxed) != EMPTY {
            i = self.next(i);
        }
        i
    }

    /// Puts a key into a fresh, unpublished array (the Release store of the array pointer
    /// publishes it).
    pub(super) fn place(&self, fp: u64, tat: u64) {
        self.slots[self.free_slot(fp)].hand_over(0, fp, tat);
    }
}

/// What a locked probe found.
pub(super) enum Probe {
    /// The key, at this index.
    Found(usize),
    /// Not the key; where a new key could go on its run, if anywhere.
    Absent(Option<Free>),
}

/// A slot a new key may take, in order of preference on its probe run.
#[derive(Clone, Copy)]
pub(super) enum Free {
    Tombstone(usize),
    Expired(usize),
    Empty(usize),
}
