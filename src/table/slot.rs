//! One table slot, `{ fingerprint, state }`, and the lock-free protocol on it.
//!
//! # The state word
//!
//! ```text
//! state: { live: 1 | gen: 3 | tat: 60 }      (bit 63 | bits 60..63 | bits 0..60)
//! ```
//!
//! * `live = 1`: the slot holds the key named by `fp`, and `tat` is its GCRA timestamp.
//! * `live = 0` ("frozen"): the slot holds no key, or is being handed over under the shard
//!   lock. An all-zero word is a frozen slot of generation 0, so a fresh array is all empty.
//! * `gen` counts the slot's owners (mod 8). It is kept across freezing and bumped whenever a
//!   new key takes the slot, so a word of the old owner never equals a word of the new one
//!   unless a multiple of 8 hand-overs and an identical 60-bit TAT coincide while one updater
//!   is paused between its load and its CAS. A compaction that puts a key back in the slot it
//!   was frozen in restores its word unchanged (`restore`): the owner did not change, so the
//!   generation does not move.
//!
//! # Fingerprints
//!
//! `fp` is `EMPTY` (never used: ends a probe), `TOMBSTONE` (used before: keep probing; free for
//! reuse) or a key's 64-bit identity fingerprint (`>= 2`, remapped by the caller).
//!
//! # Who writes what
//!
//! * Lock-free updaters only CAS a *live* state word to another live word with the same
//!   `gen` (`{1, g, tat} -> {1, g, tat'}`). They never write `fp`.
//! * Everything else happens under the shard lock: taking a slot for a new key, freezing a
//!   slot (eviction, reclaiming an expired key, reset, migration), tombstoning, and turning
//!   tombstones back into `EMPTY`.
//!
//! # No cross-key contamination
//!
//! An updater for key A must never change the state of key B that took A's slot. Hand-over
//! (under the lock) is: CAS `{1, g, tat} -> {0, g, 0}` (freeze), store `fp = B` (Release),
//! store `{1, g+1, tat_B}` (Release). The updater loads the state (Acquire), *then* re-checks
//! `fp == A`, then CASes from the word it loaded. Cases:
//!
//! 1. It loaded B's word: the Acquire load synchronises with B's Release store, which follows
//!    the `fp = B` store, so the re-check sees B and the updater re-probes. Never touches B.
//! 2. It loaded a word of A (or a frozen word, which sends it to the locked path): its CAS
//!    expects that word, but the state has since moved to frozen and then to a word with
//!    generation `g+1`: the CAS fails (see `gen` above for the wrap-around bound; in the
//!    common case of reuse after expiry B's TAT is also strictly later than any TAT of A,
//!    but not when a compaction moves B here with its TAT: there the generation alone guards).
//!    A compaction that froze A and restored A's own word in the same slot lets the CAS
//!    succeed, on A's unchanged state: that is case 3.
//! 3. Its CAS succeeded: then no freeze came between its load and its CAS (a freeze changes
//!    the word), so the slot still belonged to A at the CAS: the update is A's.
//!
//! Inserting into an `EMPTY`/`TOMBSTONE` slot writes `fp` (Release) while the state is still
//! frozen, then the live word (Release). An updater that finds `fp == B` (Acquire) therefore
//! sees at least the frozen word, never a stale live word from a previous owner.
//!
//! Loom checks these cases in `loom-tests/`.

use crate::sync::{AtomicU64, Ordering, cas_retry_hint};

/// `fp` of a never-used slot: a probe for an absent key stops here.
pub(crate) const EMPTY: u64 = 0;
/// `fp` of a slot whose key left: probes continue past it; inserts may reuse it.
pub(crate) const TOMBSTONE: u64 = 1;

const LIVE: u64 = 1 << 63;
const GEN_SHIFT: u32 = 60;
const GEN_MASK: u64 = 0x7 << GEN_SHIFT;
const TAT_MASK: u64 = (1 << GEN_SHIFT) - 1;

/// Packs a live state word `{1, gen, tat}`.
#[inline]
pub(crate) fn live_word(gen_bits: u64, tat: u64) -> u64 {
    debug_assert!(tat <= TAT_MASK);
    LIVE | (gen_bits & GEN_MASK) | (tat & TAT_MASK)
}

/// The frozen word `{0, gen, 0}` that keeps `word`'s generation.
#[inline]
pub(crate) fn frozen_word(word: u64) -> u64 {
    word & GEN_MASK
}

/// The generation bits of the next owner of a slot whose current word is `word`.
#[inline]
pub(crate) fn next_gen(word: u64) -> u64 {
    (word & GEN_MASK).wrapping_add(1 << GEN_SHIFT) & GEN_MASK
}

#[inline]
pub(crate) fn is_live(word: u64) -> bool {
    word & LIVE != 0
}

#[inline]
pub(crate) fn tat_of(word: u64) -> u64 {
    word & TAT_MASK
}

/// What a closure asks of a key's state: store a new TAT, or leave it.
pub(crate) type Step<R> = (Option<u64>, R);

/// Result of a lock-free update attempt on one slot.
pub(crate) enum Attempt<R> {
    /// The closure ran on this key's state (and its write, if any, landed).
    Done(R),
    /// The slot is frozen: take the locked path.
    Frozen,
    /// The slot no longer holds this key: probe again.
    Moved,
}

#[derive(Debug)]
#[repr(align(16))]
pub(crate) struct Slot {
    pub(crate) fp: AtomicU64,
    pub(crate) state: AtomicU64,
}

impl Slot {
    pub(crate) fn new() -> Slot {
        Slot {
            fp: AtomicU64::new(EMPTY),
            state: AtomicU64::new(0),
        }
    }

    /// Runs `f` on the TAT of key `fp` in this slot and CASes its answer in.
    #[inline]
    pub(crate) fn update<R>(&self, fp: u64, f: &mut impl FnMut(u64) -> Step<R>) -> Attempt<R> {
        // ordering: Acquire pairs with the Release store of a new owner's first word, so the
        // fp re-check below sees that owner's fingerprint (case 1 above).
        let mut word = self.state.load(Ordering::Acquire);
        loop {
            if !is_live(word) {
                return Attempt::Frozen;
            }
            // ordering: Relaxed suffices; what matters is that it comes after the Acquire
            // load of `word` (program order), which carries the happens-before edge.
            if self.fp.load(Ordering::Relaxed) != fp {
                return Attempt::Moved;
            }
            let (write, out) = f(tat_of(word));
            let Some(tat) = write else {
                return Attempt::Done(out);
            };
            let new = live_word(word, tat);
            // ordering: success needs no ordering: the TAT is the whole message and the RMW
            // is coherent with every other write to this word. Failure is Acquire because the
            // fresh word may belong to a new owner whose fp we must then see (case 1).
            match self
                .state
                .compare_exchange_weak(word, new, Ordering::Relaxed, Ordering::Acquire)
            {
                Ok(_) => return Attempt::Done(out),
                Err(current) => {
                    word = current;
                    cas_retry_hint();
                }
            }
        }
    }

    /// Freezes a live slot (under the shard lock) if `keep(tat)` is false. Returns the word it
    /// froze, or `None` if the slot is not live or `keep` held at the last look.
    pub(crate) fn freeze_unless(&self, keep: impl Fn(u64) -> bool) -> Option<u64> {
        // ordering: Relaxed; the lock holder reads its own and updaters' TATs, which carry no
        // other data. The CAS decides whether an updater got in first.
        let mut word = self.state.load(Ordering::Relaxed);
        loop {
            if !is_live(word) || keep(tat_of(word)) {
                return None;
            }
            match self.state.compare_exchange_weak(
                word,
                frozen_word(word),
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                // memory ordering: from here on no updater's CAS can succeed (the word changed
                // and will next hold generation g+1), so the slot is ours to hand over.
                Ok(_) => return Some(word),
                Err(current) => word = current,
            }
        }
    }

    /// Freezes the slot whatever it holds (under the shard lock, in a rebuild that walks every
    /// slot) and returns the word it held: a live word as `freeze_unless` would have frozen
    /// it, or the frozen word a free slot keeps. One exchange and no branch, where
    /// `freeze_unless` tests liveness first: over a rebuild's walk, where held and free slots
    /// come in no order a predictor could learn, that test mispredicted 0.7 times a key
    /// inserted in scenario C (callgrind).
    pub(crate) fn freeze(&self) -> u64 {
        // ordering: Relaxed, as in `freeze_unless`. Updaters change only a live word's TAT,
        // never its liveness or generation (the lock holder does, and that is us), so the
        // generation read here is the one the exchange replaces, and the word stored is the
        // frozen word of whatever the slot holds at the exchange: a live word's as
        // `freeze_unless` makes it, a free slot's unchanged. An updater that loaded the live
        // word before the exchange fails its CAS after it, as after `freeze_unless`.
        let generation = frozen_word(self.state.load(Ordering::Relaxed));
        self.state.swap(generation, Ordering::Relaxed)
    }

    /// Gives a frozen slot (under the shard lock) to key `fp` with TAT `tat`. `frozen` is the
    /// word the slot holds now (frozen), whose generation the new owner's word bumps.
    pub(crate) fn hand_over(&self, frozen: u64, fp: u64, tat: u64) {
        debug_assert!(!is_live(frozen));
        // ordering: Release so an updater that reads fp == `fp` (Acquire) also sees the
        // frozen word, never a previous owner's live word.
        self.fp.store(fp, Ordering::Release);
        // ordering: Release publishes the fp store to updaters that Acquire this word.
        self.state
            .store(live_word(next_gen(frozen), tat), Ordering::Release);
    }

    /// Gives a frozen slot (under the shard lock, in a compaction) back to the key it was
    /// frozen from, with the live word it had then: same generation, same TAT. An updater
    /// still holding that word may CAS it; it is that key's state, so the update is right.
    pub(crate) fn restore(&self, fp: u64, word: u64) {
        debug_assert!(is_live(word) && !is_live(self.word()));
        // ordering: as in `hand_over`.
        self.fp.store(fp, Ordering::Release);
        self.state.store(word, Ordering::Release);
    }

    /// Sets the fingerprint of a frozen slot (under the shard lock) to `TOMBSTONE` or, for a
    /// tombstone that ends its probe run, back to `EMPTY`.
    pub(crate) fn clear(&self, marker: u64) {
        debug_assert!(marker == TOMBSTONE || marker == EMPTY);
        // ordering: the state is frozen and stays frozen, so an updater that still matches the old
        // fp goes to the locked path; a prober that sees the marker early or late only decides a
        // miss, which the locked path re-checks (the lock holder that cleared marks the shard's
        // change count, so no later holder takes that miss over). Release so that a lock-free miss
        // that reads it also sees every earlier locked write, a compaction's included
        // (`Shard::absent_for_sure`).
        self.fp.store(marker, Ordering::Release);
    }

    /// The current state word, for the lock holder and for statistics.
    #[inline]
    pub(crate) fn word(&self) -> u64 {
        // ordering: callers (under the lock or for statistics) only look at the TAT.
        self.state.load(Ordering::Relaxed)
    }
}
