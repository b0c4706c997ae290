//! A shard's count of locked changes to its fingerprints: what lets the lock holder take over
//! a lock-free probe's miss instead of walking the new key's run a second time.
//!
//! A new key's check walks its run twice: lock-free, to learn that the key is absent, then
//! under the lock, to learn it again and to find the slot to insert into. The second walk is
//! the same walk over the same lines, and at a growing shard's load (up to 5/6) it is 15 % of
//! an insert's instructions (`benches/counters`, scenario `insert`). The lock holder may skip
//! it if no fingerprint has changed since the lock-free probe read them: the probe's answer
//! (the `EMPTY` slot that ended the run) is then the locked probe's answer too.
//!
//! Protocol. Fingerprints (and a shard's length) change only under the shard lock. Every lock
//! holder that may change one ends with [`mark`](Changes::mark), before it unlocks: the count
//! plus one, stored with Release. A lock-free prober [`read`](Changes::read)s the count
//! (Acquire) before the fingerprint loads that decide its miss and hands the value to the
//! locked path with it; the lock holder compares it with the count
//! ([`unchanged`](Changes::unchanged)). (A check looks at its home slot first and reads the
//! count only if its key is not there, then walks the run from the home slot again:
//! `SlotArray::find_or_end`.)
//!
//! Why an unchanged count means that the probe saw every fingerprint on its run as it is now.
//! Say the probe read the value `c` that lock holder `L` stored (or the initial 0: no holder
//! marked yet). Its Acquire load synchronizes with `L`'s Release store, so `L`'s writes, and
//! through the lock every earlier holder's, happen before the probe's loads: each load sees
//! those writes or later ones. A later write to a fingerprint is a later holder's, which
//! marks before it unlocks; the count only grows (one writer at a time, each storing one more
//! than the value it reads, which through the lock is the last one stored), so the holder
//! that compares, after that one in lock order, reads more than `c`. If it reads `c`, no
//! fingerprint was written after `L`'s writes, and the probe's loads, which saw nothing older
//! than them, saw the current values.
//!
//! Where it lives: in the shard's second cache line, beside the lock word, which every lock
//! holder writes anyway. A hit in its home slot does not read it; a hit further along its run
//! does, and in a shard that another core is inserting into it may wait for that line. On two
//! cores, one thread checking a million live keys while the other inserts new ones, hits
//! took 6–7 % longer than before the take-over, read here or before every probe alike, while
//! the inserter, its inserts cheaper, inserted 9–12 % more keys in the time: no cost of the
//! line shows beside that of the inserts themselves.
//!
//! Loom: `two_new_keys_on_one_run` (the second key written over the first's slot) and three
//! other models fail when an insert does not mark, when the count is read or marked Relaxed,
//! or when it is read after the walk; design record, §3 ("a miss taken over").

use crate::sync::{AtomicU64, Ordering};

#[derive(Debug)]
pub(crate) struct Changes(AtomicU64);

impl Changes {
    pub(crate) fn new() -> Changes {
        Changes(AtomicU64::new(0))
    }

    /// Lock-free, before the first fingerprint load of a probe whose miss may be reused.
    #[inline(always)]
    pub(crate) fn read(&self) -> u64 {
        // ordering: Acquire pairs with `mark`'s Release (module docs).
        self.0.load(Ordering::Acquire)
    }

    /// Under the shard lock: [`mark`](Changes::mark)s when dropped, so a lock holder whose
    /// changes end in an early return or a panic marks all the same, if it drops this before
    /// its lock guard.
    pub(crate) fn mark_on_drop(&self) -> MarkOnDrop<'_> {
        MarkOnDrop(self)
    }

    /// Under the shard lock, after changes to fingerprints or the length, before unlocking.
    pub(crate) fn mark(&self) {
        // ordering: the load is Relaxed: the lock holder is the only writer, and the lock
        // orders the previous holder's store before it. Release pairs with `read`'s Acquire.
        let count = self.0.load(Ordering::Relaxed);
        self.0.store(count + 1, Ordering::Release);
    }

    /// Under the shard lock: whether no holder has marked since a prober read `read`.
    pub(crate) fn unchanged(&self, read: u64) -> bool {
        // ordering: Relaxed: under the lock, which orders every earlier holder's store.
        self.0.load(Ordering::Relaxed) == read
    }
}

/// Marks its count when dropped ([`Changes::mark_on_drop`]).
#[must_use = "it marks when dropped: bind it for as long as the changes go on"]
pub(crate) struct MarkOnDrop<'a>(&'a Changes);

impl Drop for MarkOnDrop<'_> {
    fn drop(&mut self) {
        self.0.mark();
    }
}
