//! A full shard's gate: new keys refused without the shard lock while nothing can have changed.
//!
//! When a locked insert finds its shard at its cap with nothing expired, it refuses the key
//! (`FullPolicy::RefuseNewKeys`) and *closes* the gate, publishing what the refusal depended
//! on: `until`, the shard's next possible expiry (`next_sweep_at`: no held key's TAT was
//! below it at the last sweep), and `horizon`, the TAT an absent key reads as. A later new key
//! whose `expired_by` is below `until` is then refused lock-free, after a probe of its own run
//! that finds neither the key nor an expired key on it. Every lock holder that is about to
//! change the slots (an insert of any kind, a reclaim, a sweep, a rebuild, an eviction, a
//! reset) *opens* the gate first.
//!
//! # States
//!
//! ```text
//! seq: odd = open (the lock holder may be changing the slots); even = closed
//! until, horizon: written only while open, by the lock holder, just before it closes
//! ```
//!
//! The gate is a [`SeqCount`] whose write section is the time the shard is open: `open` is
//! `begin`, `close` is `end`, and the shard starts open (its first write section never
//! ends until a refusal). The protected data are `until`, `horizon` and every slot's
//! fingerprint and state word. Lock-free updaters CAS live state words at any time, closed or
//! open; they are not part of the protocol (a locked probe races them just the same).
//!
//! # Why a lock-free refusal is one the locked path would have made
//!
//! A reader [`read`](FullGate::read)s the gate, probes its key's run, and
//! [`still_closed`](FullGate::still_closed) validates. `SeqCount`'s argument gives: if the
//! validation passes, the read saw an even count set by a `close`, and every load between
//! read a value stored before that `close` (or by a lock-free updater), none stored after the
//! next `open`. Between a `close` and the next `open` the lock holder changes no slot (a
//! locked update of a held key is an updater's CAS), so the reader's probe saw the run as the
//! locked path would at any instant of that interval, and `until`, `horizon`, the shard's
//! count of keys (at its cap) and its `next_sweep_at` (= `until`) are those of the interval.
//! The locked path at such an instant, for a key whose `expired_by` is below `until`: probes
//! the run (the same fingerprints, the same decision on expired keys), does not sweep
//! (`expired_by < next_sweep_at`), cannot grow or take a free slot (at its cap), and so
//! refuses, after running `f` on the horizon; if `f` writes nothing it returns `f`'s answer
//! instead. The reader does exactly that.
//!
//! Races handled on purpose: a reset, reclaim, sweep or eviction opens the gate before its
//! first slot write, so a reader that saw any of those writes fails validation and takes the
//! lock (loom: "refusal vs reset"); a refusal under the lock re-closes the gate (open, new
//! `until`, close), which fails readers that overlapped it: they take the lock and are
//! refused there.

use crate::seq::SeqCount;
use crate::sync::{AtomicU64, Ordering};

#[derive(Debug)]
pub(super) struct FullGate {
    seq: SeqCount,
    until: AtomicU64,
    horizon: AtomicU64,
    /// New keys refused lock-free (the locked refusals are counted under the lock).
    refused: AtomicU64,
}

/// What a reader saw of a closed gate, for [`FullGate::still_closed`].
#[derive(Debug, Clone, Copy)]
pub(super) struct Closed {
    before: u64,
    /// New keys are refused while their `expired_by` is below this.
    pub(super) until: u64,
    /// What an absent key's TAT reads as.
    pub(super) horizon: u64,
}

impl FullGate {
    /// A gate that is open.
    pub(super) fn new() -> FullGate {
        let seq = SeqCount::new();
        seq.begin();
        FullGate {
            seq,
            until: AtomicU64::new(0),
            horizon: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        }
    }

    /// Under the shard lock, with the gate open: closes it on a refusal at the cap.
    pub(super) fn close(&self, until: u64, horizon: u64) {
        // ordering: Relaxed data stores inside the write section; `end`'s Release publishes
        // them to a reader whose `read_begin` sees the even count (`SeqCount`).
        self.until.store(until, Ordering::Relaxed);
        self.horizon.store(horizon, Ordering::Relaxed);
        self.seq.end();
    }

    /// Under the shard lock, with the gate closed, before any slot write.
    pub(super) fn open(&self) {
        // ordering: `begin`'s bump and Release fence order it before the slot writes that
        // follow, for a reader's validating fence (`SeqCount`).
        self.seq.begin();
    }

    /// Reader: the gate's data if it is closed now. Loads made after this and before
    /// [`still_closed`](FullGate::still_closed) are validated by it.
    #[inline]
    pub(super) fn read(&self) -> Option<Closed> {
        let before = self.seq.read_begin();
        if before % 2 == 1 {
            return None;
        }
        Some(Closed {
            before,
            // ordering: Relaxed data loads after `read_begin`'s Acquire (`SeqCount`).
            until: self.until.load(Ordering::Relaxed),
            horizon: self.horizon.load(Ordering::Relaxed),
        })
    }

    /// Reader: whether every load since `read` saw the closed shard (module docs).
    #[inline]
    pub(super) fn still_closed(&self, closed: &Closed) -> bool {
        self.seq.validate(closed.before)
    }

    pub(super) fn count_refusal(&self) {
        // ordering: a statistic; nothing is published through it.
        self.refused.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn refused(&self) -> u64 {
        // ordering: a statistic.
        self.refused.load(Ordering::Relaxed)
    }
}
