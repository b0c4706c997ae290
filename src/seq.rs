//! Odd/even counters: the two concurrency idioms tollgate repeats, each with its ordering
//! argument written once, here.
//!
//! Both are a counter that a writer bumps twice around some writes (odd while it is between
//! them, even otherwise) and that lock-free readers compare. They differ in what a reader does
//! with it:
//!
//! * [`SeqCount`], a sequence lock's count: a reader loads it, reads the protected data, and
//!   *validates*: the read is good only if the count was even and has not moved, else it
//!   retries (or distrusts what it saw). Used by the quota cell (`quota_cell.rs`: the two
//!   halves of a quota), by a table shard around whatever moves keys (`Shard::moves`:
//!   compaction and an eviction's backward shift; a lock-free probe that overlapped one may
//!   miss a key), and by the full table's gate (`table/gate.rs`: "open" is its write
//!   section).
//! * [`Epoch`], a removal epoch: a writer *records* it before its CAS and a later undo compares
//!   it (`engine.rs`). Used per table shard (`Shard::removals`) and per direct limiter
//!   (`direct::Shared::resets`).
//!
//! Writers of a `SeqCount` are serialised by the caller (a mutex, or the shard lock), so they
//! bump it with a load and a store; only readers are lock-free. An `Epoch` has two kinds of
//! writer: concurrent ones, which bump it with RMWs (a direct limiter's resets run without a
//! lock), and a serialised one, which keeps the count under its lock in an [`EpochWriter`]
//! and only stores it (a table shard).
//!
//! Loom models fail when any of `SeqCount`'s orderings is weakened, or when `Epoch`'s two
//! bumps become one, with either kind of writer; `Epoch`'s Release/Acquire pair is beyond
//! what loom can show (`src/design.rs`, section 6, names the models and says why).

use crate::sync::{AtomicU64, Ordering, fence};

/// A sequence lock's count over data kept in relaxed atomics.
///
/// A writer (one at a time) calls [`begin`](SeqCount::begin), stores the data (Relaxed), then
/// [`end`](SeqCount::end). A reader calls [`read_begin`](SeqCount::read_begin), loads the data
/// (Relaxed), then [`validate`](SeqCount::validate): if that says yes, the loads saw exactly
/// the data of one writer's `end` (or the initial data), none of a writer still under way.
///
/// Why: the reader's Acquire load in `read_begin`, if it reads an even value from `end`'s
/// Release, makes that writer's data visible, so the data loads see it or something newer.
/// If a data load saw a store of a later writer, that writer's `begin` (a bump, then a
/// Release fence, then its data stores) synchronizes with the Acquire fence in `validate`
/// (fence to fence, through that data store), so `validate`'s re-load sees at least the odd
/// count and differs from `before`.
#[derive(Debug)]
pub(crate) struct SeqCount(AtomicU64);

impl SeqCount {
    pub(crate) fn new() -> SeqCount {
        SeqCount(AtomicU64::new(0))
    }

    /// Writer: the count becomes odd; the data stores that follow come after it for any
    /// reader that sees one of them (type docs).
    pub(crate) fn begin(&self) {
        // ordering: the bump needs no ordering of its own: the Release fence orders it before
        // every later (Relaxed) data store, paired with the fence in `validate`.
        self.bump(Ordering::Relaxed);
        fence(Ordering::Release);
    }

    /// Writer: the count becomes even again, publishing the data stored since `begin`.
    pub(crate) fn end(&self) {
        // ordering: Release pairs with `read_begin`'s Acquire (type docs).
        self.bump(Ordering::Release);
    }

    /// The count plus one, with a load and a store rather than an RMW: writers are serialised
    /// by the caller, so each one's load reads the previous one's last store (the caller's
    /// lock orders them) and nothing writes between the load and the store. What a reader
    /// needs of the count, that its values grow in its modification order, holds as with an
    /// RMW; a locked RMW would cost about 20 cycles a bump (two per backward shift of an
    /// eviction at a full table, `Shard::close_hole`).
    fn bump(&self, order: Ordering) {
        // ordering: Relaxed: the only writer's own previous store, ordered by the caller's
        // lock if another writer made it.
        let count = self.0.load(Ordering::Relaxed);
        self.0.store(count + 1, order);
    }

    /// Reader: the count before the data loads, for [`validate`](SeqCount::validate).
    #[inline]
    pub(crate) fn read_begin(&self) -> u64 {
        // ordering: Acquire pairs with `end`'s Release (type docs).
        self.0.load(Ordering::Acquire)
    }

    /// Reader, after its data loads: whether they saw one writer's finished data, i.e. the
    /// count was even at `read_begin` and has not moved since.
    #[inline]
    pub(crate) fn validate(&self, before: u64) -> bool {
        // ordering: keeps the data loads above before the re-load, and pairs with `begin`'s
        // Release fence: a data store seen makes its odd count seen (type docs).
        fence(Ordering::Acquire);
        before % 2 == 0 && self.0.load(Ordering::Relaxed) == before
    }
}

/// A removal epoch: bumped twice around every removal of state that a lock-free writer may
/// later want to undo (reset, eviction, reclaim, growth), so it is odd while one is under way.
/// What it protects is in `engine.rs`: an undo must not apply to a *later incarnation* of its
/// key, removed and then checked back up to the very TAT the undone write stored.
///
/// A removal is [`begin`](Epoch::begin), the writes that take the old incarnation's state away
/// (freezes, or the direct limiter's store of TAT 0), then [`end`](Epoch::end). A writer
/// [`read`](Epoch::read)s the epoch before its CAS and records it; the undo reads it again
/// after the load that found the write's TAT, and applies only if the two are equal and even.
///
/// * Writer side. If the writer reads the even value `end` made, it synchronizes with `end`'s
///   Release, so the removal's writes happened before its CAS, which therefore lands in the
///   new incarnation. If it reads the value before `begin`, any undo after the removal reads
///   a newer one. If it reads the odd value, its write may land just before the removal's
///   writes: the engine never undoes it.
/// * Undo side. Every state of a later incarnation is a Release store made after `begin` in
///   the remover's program order (in a shard: under the lock, after `end`; in a direct
///   limiter: the store of 0 itself), or an RMW continuing that store's release sequence.
///   An undo that loaded such a state (Acquire) therefore reads at least the first bump, so
///   it cannot mistake the new incarnation for the one its write was made in.
///
/// Both sides ask two things of the bumps themselves: that the epoch's values only grow in
/// its modification order (so "at least the first bump" means a value past the one recorded
/// before it), and that `end`'s write is a Release that a reader's Acquire can read from.
/// Neither needs an RMW. Concurrent writers get both from `fetch_add`
/// ([`begin`](Epoch::begin), [`end`](Epoch::end)). A writer serialised by a lock
/// ([`begin_serial`](Epoch::begin_serial), [`end_serial`](Epoch::end_serial)) gets them from
/// the lock: each holder's stores happen before the next holder's (the lock's release and
/// acquire), so they come later in the modification order, and the value it stores is one
/// more than the last one stored, which it keeps in its [`EpochWriter`] under that lock
/// (nothing else writes the epoch). A plain store instead of a locked RMW is what the shard's
/// removals (every eviction and reclaim) save: two of them per removal. What is lost is
/// only that `begin`'s store no longer continues the release sequence of the previous `end`;
/// no reader relies on that (a reader that sees an odd value never undoes, and one that sees
/// an even value reads it from the `end` that stored it).
#[derive(Debug)]
pub(crate) struct Epoch(AtomicU64);

impl Epoch {
    pub(crate) fn new() -> Epoch {
        Epoch(AtomicU64::new(0))
    }

    /// Before a removal: the epoch becomes odd.
    pub(crate) fn begin(&self) {
        // ordering: Relaxed; the later Release stores of the new incarnation (or the lock
        // release) order it for undos (type docs, undo side).
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    /// After a removal: the epoch becomes even, publishing the removal's writes.
    pub(crate) fn end(&self) {
        // ordering: Release pairs with `read`'s Acquire (type docs, writer side).
        self.0.fetch_add(1, Ordering::Release);
    }

    /// Before a removal, by the epoch's only writer (serialised by the lock that `writer`
    /// lives under): the epoch becomes odd, with a store instead of an RMW (type docs).
    pub(crate) fn begin_serial(&self, writer: &mut EpochWriter) {
        writer.0 += 1;
        // ordering: Relaxed, as in `begin`; this holder's store follows every earlier
        // holder's in the modification order through the lock (type docs).
        self.0.store(writer.0, Ordering::Relaxed);
    }

    /// After a removal, by the epoch's only writer: the epoch becomes even, publishing the
    /// removal's writes, with a store instead of an RMW (type docs).
    pub(crate) fn end_serial(&self, writer: &mut EpochWriter) {
        writer.0 += 1;
        // ordering: Release pairs with `read`'s Acquire, as `end`'s does (type docs, writer
        // side): a reader that reads this value sees the removal's writes.
        self.0.store(writer.0, Ordering::Release);
    }

    /// The epoch now, to record before a write or to compare in an undo.
    #[inline]
    pub(crate) fn read(&self) -> u64 {
        // ordering: Acquire pairs with `end`'s Release (type docs).
        self.0.load(Ordering::Acquire)
    }
}

/// The count of an [`Epoch`] that one serialised writer bumps with stores
/// ([`Epoch::begin_serial`]): kept under the writer's lock, so that `&mut` to it is the
/// proof that nothing else writes the epoch. One per epoch, created with it.
#[derive(Debug, Default)]
pub(crate) struct EpochWriter(u64);
