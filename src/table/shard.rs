//! One shard: its current slot array (`array.rs`), its lock, and everything done under it.
//!
//! Lock-free: `find` (probe for a fingerprint), updates of live slots (see `slot.rs`), and
//! the refusal of a new key at a full shard whose gate is closed (`gate.rs`). Under the shard
//! lock: inserting, reclaiming expired keys, forced eviction, tombstone clean-up, compaction
//! and growth. Every locked operation re-probes, or takes over a lock-free probe's miss when
//! no lock holder has changed a fingerprint since (`changes.rs`), so one key never has two
//! slots.
//!
//! A full shard (at its cap, nothing expired): a new key under `RefuseNewKeys` is refused
//! under the lock once, which closes the gate until the shard's next possible expiry; later
//! ones are refused lock-free until then or until any locked change of the slots reopens it.
//! Under `EvictClosestToExpiry` the new key takes its victim's slot in place whenever the
//! victim is on its probe run (always in a large shard: the victim is chosen there), as a
//! reclaim of an expired key does. A victim off the run (a large shard's fallback when the run
//! holds no key, or a small shard's whole-shard choice) leaves no tombstone either: the keys
//! after it on its own run shift back into its slot (`close_hole`). So evictions owe no
//! compaction.
//!
//! Time: `now` in this module is only ever the threshold at or before which a stored TAT
//! counts as expired (`Table::update`'s `expired_by`), never a clock reading of its own.
//!
//! Invariant (probe runs): no key is separated from its home slot by an `EMPTY` slot. Inserts
//! keep it by taking the first free slot on the key's own run; tombstones turn back into
//! `EMPTY` only when the next slot is `EMPTY` (the run ends there anyway).
//!
//! Growth and compaction are one operation, a *rebuild* (`rebuild`): one walk freezes every
//! key and empties its slot, then every key is placed again, with its TAT, over the grown
//! slots (nearly in order of their homes, so mostly without probing: `array::Placer`). A
//! growth drops the keys that have expired, and between the walk and the placing gets its
//! slots (`array.rs`): a small shard moves to a new array twice as large (the old one is
//! kept), a larger one adds segments after its slots and is rebuilt over old and new slots
//! together; then it publishes the new length (Release). Compaction rebuilds over the same
//! slots, to clear the tombstones that churn leaves inside probe runs (keys come, expire and
//! are swept), where a sweep cannot turn them back into `EMPTY`; the shard compacts instead
//! of growing when the live keys alone would leave room. Nothing is ever freed before the
//! shard, so nothing has to be reclaimed: the slots a reader may be probing stay where they
//! are.
//!
//! To a lock-free reader a rebuild is a series of hand-overs (the same protocol as slot reuse,
//! see `slot.rs`): it meets a frozen word (locked path, which waits for the rebuild), a
//! missing key (locked path: a miss is only a hint, and every rebuild marks the shard's
//! change count, so the locked path probes again), or another key's fingerprint (re-probe).
//! A reader that loaded the old length probes only old slots, which still exist (or the new
//! array, on its old length: misses there are hints too); one that loaded the new length
//! sees the new array or segments initialised (`array.rs`, publication). A
//! compaction forgets nothing, so the removal epoch does not move; a growth that drops expired
//! keys moves it. An off-run eviction's backward shift (`close_hole`) moves keys too, a few
//! slots back on one run, and is the same series of hand-overs to a reader. `Shard::moves`
//! lets `remove`'s lock-free miss tell that it may have probed mid-rebuild or mid-shift.

use super::Miss;
use super::array::{Free, Probe, Segments, SlotArray};
use super::changes::Changes;
use super::full_policy::FullPolicy;
use super::gate::FullGate;
use super::keep::KeepExpired;
use super::slot::{Attempt, EMPTY, Slot, Step, TOMBSTONE, frozen_word, is_live, tat_of};
use crate::seq::{Epoch, EpochWriter, SeqCount};
use crate::sync::{Mutex, Ordering, lock};

/// Probing stops treating a shard as "roomy" beyond this load (used + tombstones) / len.
const MAX_LOAD_NUM: usize = 5;
const MAX_LOAD_DEN: usize = 6;
/// Slots in a new, unsized shard. Loom models use tiny shards to force collisions and reuse.
#[cfg(not(tollgate_loom))]
pub(crate) const MIN_LEN: usize = 8;
#[cfg(tollgate_loom)]
pub(crate) const MIN_LEN: usize = 2;
/// Slots up to which a shard grows as one array, moved to a larger one at each growth; past
/// it, it grows by segments (`array.rs`). A shard whose cap needs no more than twice this
/// stays one array to its cap. One array costs a check one load less than a segment does
/// (the directory entry) and no segment arithmetic; each move leaves the smaller array
/// behind until the shard drops, in all fewer slots than this (4 KiB a shard). Loom models
/// use a tiny one, so that their growths both move the array and add segments.
#[cfg(not(tollgate_loom))]
pub(crate) const CONTIGUOUS_LEN: usize = 256;
#[cfg(tollgate_loom)]
pub(crate) const CONTIGUOUS_LEN: usize = 4;
/// A shard with tombstones is compacted rather than grown if that leaves at least
/// `compact_room(len)` slots for new keys below the load limit, and a shard at its largest
/// once tombstones are that many: each O(len) compaction then pays for at least that many
/// inserts or removals.
const COMPACT_ROOM: usize = 8;

fn compact_room(len: usize) -> usize {
    (len / COMPACT_ROOM).max(1)
}
/// A shard of at most this many slots evicts the key closest to expiry in the whole shard.
const SMALL_SHARD: usize = 64;
/// A larger shard evicts the key closest to expiry on the new key's probe run or, if that
/// run holds no key, among this many keys from its home on.
const FALLBACK_KEYS: usize = 16;

/// The shard holds its share of the capacity and the policy refused a new key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Full;

/// The largest array for a shard of `cap` keys: loaded to at most 3/4 when full.
///
/// A shard below its cap grows before its load passes 5/6; at its cap nothing relieves the
/// load, and every new key (refused, or evicting a held one) misses: its lock-free probe and
/// its locked probe each walk its run to the `EMPTY` that ends it. Linear probing's miss
/// walks ½(1 + 1/(1 − α)²) slots at load α: 17.8 at 5/6, 8.5 at 3/4. A full shard then
/// takes 21.3 bytes a key instead of 19.2.
pub(crate) fn len_for_cap(cap: usize) -> usize {
    cap.saturating_mul(4).div_ceil(3).max(MIN_LEN)
}

/// How many slots forward from index `from` index `to` lies, wrapping at `len` (both below
/// `len`): a compare and a select, not a division.
fn forward(from: usize, to: usize, len: usize) -> usize {
    if to >= from {
        to - from
    } else {
        to + len - from
    }
}

pub(crate) fn len_for_keys(keys: usize) -> usize {
    keys.saturating_mul(MAX_LOAD_DEN)
        .div_ceil(MAX_LOAD_NUM)
        .max(MIN_LEN)
}

/// Counters and bookkeeping, all under the shard lock.
#[derive(Debug, Default, Clone)]
pub(crate) struct ShardCounts {
    /// Slots holding a key (live words).
    pub(crate) used: usize,
    pub(crate) tombstones: usize,
    pub(crate) reclaimed: u64,
    pub(crate) evicted: u64,
    pub(crate) refused: u64,
    /// In-place rebuilds that cleared tombstones (see `compact`).
    pub(crate) compactions: u64,
    pub(crate) bytes: usize,
    /// No key can expire before this, so a sweep before it would find nothing. TATs grow
    /// outside the lock; the one write that lowers a TAT (an undo) runs under it and lowers
    /// this too (`update_locked`).
    next_sweep_at: u64,
    /// The latest TAT of any key this shard has forgotten as expired: what an absent key's
    /// TAT is taken to be (see `update_locked`).
    horizon: u64,
}

#[derive(Debug)]
struct Inner {
    counts: ShardCounts,
    /// Whether `Shard::gate` is closed (only the lock holder opens and closes it).
    gate_closed: bool,
    /// `Shard::removals`' count: the lock holder is its only writer (`Epoch::begin_serial`).
    removals: EpochWriter,
    /// How long past a caller's `expired_by` an expired key is kept (see `forget_by`).
    keep: KeepExpired,
}

#[derive(Debug)]
pub(crate) struct Shard {
    /// The slots and their current length. Grows under the lock; never freed before the shard
    /// (`array.rs`).
    slots: Segments,
    /// The removal epoch: `begin_serial`/`end_serial` (under the lock, which makes the lock
    /// holder its only writer: plain stores, no RMW) around every forgetting of a key of
    /// this shard that may still be live: a reset, a forced eviction. An undo applies only if
    /// this has not moved since its write (see `removals`). Forgetting an expired key (a
    /// reclaim, a sweep, a growth dropping it) does not move it: see `removals`.
    removals: Epoch,
    /// A sequence count around each rebuild (compaction or growth) and each backward shift
    /// that moves a key (`close_hole`), which move keys within the slots so that a lock-free probe can miss a key the shard holds (see
    /// `absent_for_sure`).
    moves: SeqCount,
    /// Marked by every lock holder that may change a fingerprint or the length, so that the
    /// next one can tell whether a lock-free probe's miss still holds (`changes.rs`).
    changes: Changes,
    /// Closed while the shard is at its cap with nothing expired, so that new keys can be
    /// refused without the lock (`gate.rs`).
    gate: FullGate,
    inner: Mutex<Inner>,
    /// The most keys this shard holds.
    cap: usize,
}

impl Shard {
    /// `keep_expired`: the user's fixed keep, in TAT units, or `None` to learn it (`keep.rs`).
    pub(crate) fn new(initial_len: usize, cap: usize, keep_expired: Option<u64>) -> Shard {
        let max_len = len_for_cap(cap);
        // A shard capped at twice the one-array length or less stays one array to its cap.
        let contiguous = if max_len <= 2 * CONTIGUOUS_LEN {
            max_len
        } else {
            CONTIGUOUS_LEN
        };
        let slots = Segments::new(initial_len.clamp(MIN_LEN, max_len), contiguous, max_len);
        let bytes = slots.initial_bytes();
        Shard {
            slots,
            removals: Epoch::new(),
            moves: SeqCount::new(),
            changes: Changes::new(),
            gate: FullGate::new(),
            inner: Mutex::new(Inner {
                counts: ShardCounts {
                    bytes,
                    // No key, so none can expire: every insert lowers it to its TAT.
                    next_sweep_at: u64::MAX,
                    ..ShardCounts::default()
                },
                gate_closed: false,
                removals: EpochWriter::default(),
                keep: KeepExpired::new(keep_expired),
            }),
            cap,
        }
    }

    /// The largest array this shard grows to.
    fn max_len(&self) -> usize {
        len_for_cap(self.cap)
    }

    /// The threshold at or before which a stored TAT counts as expired, for the lock holder
    /// deciding now (with the shard as `inner` has it), given the caller's `expired_by`.
    ///
    /// A shard below its cap of keys forgets a key only its keep time (`keep.rs`: the user's
    /// `keep_expired`, or learned) later than the caller asks: a key that comes back within
    /// that time is still held, and its check is the lock-free CAS of any held key, not an
    /// insert under this lock. Forgetting a key that will return only trades an insert later
    /// for a slot now, and below its cap a shard has a slot for every new key (it grows, or,
    /// at its largest array, has a sixth of its slots free). A shard at its cap uses the
    /// caller's threshold as it is, so that a full table never refuses or evicts for want of
    /// a slot that an expired key holds.
    fn forget_by(&self, inner: &Inner, expired_by: u64) -> u64 {
        if inner.counts.used < self.cap {
            expired_by.saturating_sub(inner.keep.time())
        } else {
            expired_by
        }
    }

    /// The current slots, with the length read once (`Segments::current`).
    #[inline]
    pub(crate) fn array(&self) -> SlotArray<'_> {
        self.slots.current()
    }

    /// The removal epoch, [`Epoch`]'s protocol (the argument is there; see `engine.rs` for
    /// what it protects). A removal runs under the lock: `begin_removal`, the freezes,
    /// `end_removal`; a new incarnation of a forgotten key is written after it under the same
    /// lock, with a Release store (`Slot::hand_over`), and every later state of it comes from
    /// RMWs continuing that store's release sequence (Acquire loads in `Slot::update`).
    ///
    /// Only a reset and a forced eviction are removals here. A key forgotten as expired
    /// had a TAT at most the forgetting threshold, and the shard's `horizon` is raised to at
    /// least that TAT; its next incarnation starts from the horizon and every write adds a
    /// cell, so no state of it equals a TAT the old incarnation stored, except the horizon
    /// itself restored by an undo of its first write: the very state the old write left, so
    /// an undo of the old write that finds it gives back what that write took, which is its
    /// meaning. (An undo never inserts the key: `update_held`.) Not moving the epoch there
    /// keeps undos, `check_all`'s give-backs and dropped waiters' refunds exact while other
    /// keys of the shard come and go, as they always do under churn.
    #[inline]
    pub(crate) fn removals(&self) -> u64 {
        self.removals.read()
    }

    /// The count of locked changes, for a lock-free probe whose miss the locked path may
    /// take over (`changes.rs`): read before the loads that decide the miss.
    #[inline(always)]
    pub(crate) fn changes(&self) -> u64 {
        self.changes.read()
    }

    /// Under the lock (`writer` is `Inner::removals`): single-writer stores, no RMW.
    fn begin_removal(&self, writer: &mut EpochWriter) {
        self.removals.begin_serial(writer);
    }

    fn end_removal(&self, writer: &mut EpochWriter) {
        self.removals.end_serial(writer);
    }

    /// The locked path: runs `f` on the key's TAT, inserting the key if `f` writes and it is
    /// absent.
    ///
    /// An absent key's TAT is the shard's `horizon`, not 0. A key is forgotten as expired when
    /// its TAT is at most the forgetting caller's `now`, but callers' `now`s need not agree:
    /// a thread that read its clock a little earlier (or a proxy stamping a whole event-loop
    /// turn with one `now`) may still be behind that TAT. Starting such a caller from 0 would
    /// hand it a fresh burst before the cells it already spent have come back: over-admission.
    /// Starting it from the horizon, which is at least the forgotten TAT, can only be stricter
    /// than never forgetting the key, so the window guarantee survives reclamation under any
    /// spread of `now`s. A caller whose `now` is past the horizon (the usual case, and always
    /// so with one monotonic clock read in order) sees `max(horizon, now) = now`: no change.
    ///
    /// `miss`: what the caller's lock-free probe saw, if it missed. If no lock holder has
    /// changed a fingerprint or the length since (`changes.rs`), and the walk would look at
    /// fingerprints alone and find no tombstone, the locked probe would end at the same
    /// `EMPTY` slot, and the walk is skipped.
    pub(crate) fn update_locked<R>(
        &self,
        fp: u64,
        now: u64,
        policy: FullPolicy,
        f: &mut impl FnMut(u64) -> Step<R>,
        miss: Option<Miss>,
    ) -> Result<R, Full> {
        if policy == FullPolicy::RefuseNewKeys {
            if let Some(decided) = self.refuse_unlocked(fp, now, f) {
                return decided;
            }
        }
        let mut inner = lock(&self.inner);
        let array = self.array();
        let forget_by = self.forget_by(&inner, now);
        // No held key is expired before `next_sweep_at`, and below its cap the shard wants
        // no victim: then the walk needs the fingerprints alone (`insert` probes in full
        // after anything that changes either).
        let counts = &inner.counts;
        let plain = forget_by < counts.next_sweep_at && counts.used < self.cap;
        let taken_over = miss.filter(|miss| {
            plain
                && counts.tombstones == 0
                && miss.len == array.len()
                && self.changes.unchanged(miss.changes)
        });
        let probed = match taken_over {
            Some(miss) => Probe::Absent(Some(Free::Empty(miss.empty)), None),
            None if plain => array.probe_locked_plain(fp),
            None => array.probe_locked(fp, forget_by),
        };
        let probed = match probed {
            Probe::Found(i) => return Ok(self.update_found(&mut inner, array.slot(i), fp, f)),
            Probe::Absent(free, least) => (free, least),
        };
        let (write, out) = f(inner.counts.horizon);
        if let Some(tat) = write {
            // Whatever the insert does (a sweep, a rebuild, an eviction, the key itself), the
            // next lock holder must not take over a miss probed before it: marked when this
            // drops, after the insert or a panic in it, and before `inner` unlocks (declared
            // later, dropped first).
            let _marked = self.changes.mark_on_drop();
            self.insert(&mut inner, fp, tat, now, policy, probed)?;
        }
        Ok(out)
    }

    /// [`update_locked`](Shard::update_locked) for a key the shard holds, never inserting
    /// it: `None` if it is absent. For the one write that lowers a TAT, an undo: giving back
    /// cells to a key the shard no longer holds would only add an expired key (`removals`).
    pub(crate) fn update_held<R>(&self, fp: u64, f: &mut impl FnMut(u64) -> Step<R>) -> Option<R> {
        let mut inner = lock(&self.inner);
        let array = self.array();
        match array.probe_locked_plain(fp) {
            Probe::Found(i) => Some(self.update_found(&mut inner, array.slot(i), fp, f)),
            Probe::Absent(..) => None,
        }
    }

    /// Runs `f` on the TAT of held key `fp` in `slot`, under the lock (`inner` is its
    /// guard's), and keeps the shard's bound on its earliest expiry.
    fn update_found<R>(
        &self,
        inner: &mut Inner,
        slot: &Slot,
        fp: u64,
        f: &mut impl FnMut(u64) -> Step<R>,
    ) -> R {
        // What the last run of `f` wrote (the CAS loop may run it more than once).
        let mut wrote = None;
        let attempt = slot.update(fp, &mut |tat| {
            let (write, out) = f(tat);
            wrote = write;
            (write, out)
        });
        let Attempt::Done(out) = attempt else {
            // Only lock holders freeze slots or change fingerprints.
            unreachable!("slot changed under the lock")
        };
        // Outside the lock TATs only grow; a write here may lower one (an undo, the only
        // such write: `Word::update_lowering`). `next_sweep_at` stays a lower bound of every
        // held TAT, which the sweep, the plain probe and the gate's "full until" rely on.
        if let Some(tat) = wrote.filter(|&tat| tat < inner.counts.next_sweep_at) {
            inner.counts.next_sweep_at = tat;
            self.open_gate(inner);
        }
        out
    }

    /// The lock-free refusal (`gate.rs`): if the gate is closed, `now` is below its `until`,
    /// and the key's run holds neither the key nor a key expired by `now`, decides as the
    /// locked path would: runs `f` on the horizon and refuses the key if `f` writes, else
    /// returns `f`'s answer. `None`: not decided, take the lock.
    #[inline]
    fn refuse_unlocked<R>(
        &self,
        fp: u64,
        now: u64,
        f: &mut impl FnMut(u64) -> Step<R>,
    ) -> Option<Result<R, Full>> {
        let closed = self.gate.read()?;
        if now >= closed.until {
            return None;
        }
        // The run as `probe_locked` sees it: `Some(true)` stops at the key or at a key expired
        // by `now` (the locked path must decide); `Some(false)` (an `EMPTY` slot) or `None`
        // (every slot walked) is a miss with nothing to reclaim on the way.
        let stop = self.array().probe(fp, |_, slot| {
            // ordering: Acquire, as in `SlotArray::find`; the gate's validation covers it.
            match slot.fp.load(Ordering::Acquire) {
                EMPTY => Some(false),
                TOMBSTONE => None,
                f if f == fp => Some(true),
                _ => {
                    let word = slot.word();
                    (is_live(word) && tat_of(word) <= now).then_some(true)
                }
            }
        });
        if stop == Some(true) || !self.gate.still_closed(&closed) {
            return None;
        }
        let (write, out) = f(closed.horizon);
        if write.is_none() {
            return Some(Ok(out));
        }
        self.gate.count_refusal();
        Some(Err(Full))
    }

    /// Whether a lock-free probe shows that the shard does not hold `fp`, with no lock taken.
    /// `false` means "maybe held": the caller takes the locked path.
    ///
    /// Outside a rebuild or a backward shift (`close_hole`), a held key is never cut off from
    /// its home by an `EMPTY` slot, so a probe that misses it must have overlapped one. The
    /// probe reads the slots under the `moves` seqlock ([`SeqCount`]'s reader protocol), so a
    /// probe that may have run mid-rebuild or mid-shift fails `validate` and its miss is not
    /// trusted. Their slot writes are the seqlock's data stores. A fingerprint written by a
    /// later locked operation is a Release store (`Slot::clear`, `hand_over`, `restore`) that
    /// comes after the rebuild or shift under the lock, so a probe that read one sees the
    /// count move just the same.
    pub(crate) fn absent_for_sure(&self, fp: u64) -> bool {
        let before = self.moves.read_begin();
        self.array().find(fp).is_none() && self.moves.validate(before)
    }

    /// Keys whose TAT is later than `now`: a lock-free scan. A scan that overlaps a compaction
    /// could count a moved key twice (or miss it), so it is repeated, a few times at most,
    /// until one runs between compactions.
    pub(crate) fn live_keys(&self, now: u64) -> usize {
        let count = || {
            self.array()
                .iter()
                .filter(|slot| {
                    let word = slot.word();
                    is_live(word) && tat_of(word) > now
                })
                .count()
        };
        for _ in 0..4 {
            // The `moves` seqlock's reader protocol, as in `absent_for_sure`.
            let before = self.moves.read_begin();
            let live = count();
            if self.moves.validate(before) {
                return live;
            }
        }
        count()
    }

    /// Forgets a key. Returns whether it was present and live (its TAT after `now`): an
    /// expired key the shard still keeps is forgotten too, but held nothing a check would see.
    pub(crate) fn remove(&self, fp: u64, now: u64) -> bool {
        let mut inner = lock(&self.inner);
        let array = self.array();
        let Probe::Found(i) = array.probe_locked(fp, 0) else {
            return false;
        };
        let slot = array.slot(i);
        self.open_gate(&mut inner);
        self.begin_removal(&mut inner.removals);
        let frozen = slot.freeze_unless(|_| false);
        self.end_removal(&mut inner.removals);
        let Some(word) = frozen else {
            return false;
        };
        slot.clear(TOMBSTONE);
        // The tombstone alone stops a take-over (`update_locked`), but the rule stays one
        // rule: whoever changes a fingerprint marks.
        self.changes.mark();
        inner.counts.used -= 1;
        inner.counts.tombstones += 1;
        tat_of(word) > now
    }

    /// For a shard holding `used` keys in `len` slots: whether it is at its cap, and whether
    /// the next key fills it, which then goes in at the shard's largest length (`len_for_cap`)
    /// rather than a growth step, so that a full shard is loaded to 3/4.
    fn fullness(&self, used: usize, len: usize) -> (bool, bool) {
        (
            used >= self.cap,
            used + 1 >= self.cap && len < self.max_len(),
        )
    }

    /// Opens the gate (under the lock) before a change to the slots (`gate.rs`).
    fn open_gate(&self, inner: &mut Inner) {
        if inner.gate_closed {
            self.gate.open();
            inner.gate_closed = false;
        }
    }

    /// Inserts absent key `fp`. `probed`: what the caller's locked probe found on the key's run
    /// (`Probe::Absent`) with the threshold `forget_by` gives, or the lock-free miss it took over
    /// in its place, still true under the same lock unless the keep changes here. `now` is the
    /// caller's `expired_by`; each step reclaims by `forget_by`'s answer for the shard as it is
    /// then.
    fn insert(
        &self,
        inner: &mut Inner,
        fp: u64,
        tat: u64,
        now: u64,
        policy: FullPolicy,
        probed: (Option<Free>, Option<usize>),
    ) -> Result<(), Full> {
        self.open_gate(inner);
        // First, so that a key the shard forgot too early is kept longer from this insert on;
        // if that changes the keep, the caller's probe (under the old threshold) is redone.
        let keep_before = inner.keep.time();
        inner.keep.inserting(fp, now);
        let mut probed = Some(probed).filter(|_| inner.keep.time() == keep_before);
        loop {
            let array = self.array();
            let len = array.len();
            // A shard at its largest never grows, so nothing else clears its tombstones; past
            // an eighth of its slots they would make every miss probe a long way.
            if len == self.max_len() && inner.counts.tombstones >= compact_room(len) {
                self.rebuild(&mut inner.counts, len, None);
                probed = None;
            }
            let forget_by = self.forget_by(inner, now);
            let (free, least) = match probed.take() {
                Some(probed) => probed,
                None => match array.probe_locked(fp, forget_by) {
                    Probe::Absent(free, least) => (free, least),
                    Probe::Found(_) => unreachable!("the caller probed under the same lock"),
                },
            };
            let counts = &mut inner.counts;
            let (at_cap, filling) = self.fullness(counts.used, len);
            let roomy = !filling
                && ((counts.used + counts.tombstones + 1) * MAX_LOAD_DEN <= len * MAX_LOAD_NUM
                    || len == self.max_len());
            match free {
                Some(Free::Expired(i)) => {
                    let slot = array.slot(i);
                    // Reclaim only if still expired: an updater may have revived it. No
                    // removal epoch: the key is expired (`removals`).
                    let frozen = slot.freeze_unless(|t| t > forget_by);
                    if let Some(old) = frozen {
                        // ordering: the fingerprint only changes under the lock we hold.
                        inner
                            .keep
                            .forgot(slot.fp.load(Ordering::Relaxed), tat_of(old));
                        slot.hand_over(frozen_word(old), fp, tat);
                        counts.reclaimed += 1;
                        counts.horizon = counts.horizon.max(tat_of(old));
                        counts.next_sweep_at = counts.next_sweep_at.min(tat);
                        return Ok(());
                    }
                    continue;
                }
                Some(Free::Tombstone(i)) if !at_cap => {
                    let slot = array.slot(i);
                    slot.hand_over(slot.word(), fp, tat);
                    counts.used += 1;
                    counts.tombstones -= 1;
                    counts.next_sweep_at = counts.next_sweep_at.min(tat);
                    return Ok(());
                }
                Some(Free::Empty(i)) if !at_cap && roomy => {
                    let slot = array.slot(i);
                    slot.hand_over(slot.word(), fp, tat);
                    counts.used += 1;
                    counts.next_sweep_at = counts.next_sweep_at.min(tat);
                    return Ok(());
                }
                _ => {}
            }
            // No room on this key's run: make some, then probe again. Sweep out expired keys;
            // if a rebuild without tombstones would leave an eighth of the slots free, do it
            // (that leaves the most room until the next sweep); grow only if neither helps.
            let swept = forget_by >= counts.next_sweep_at
                && self.sweep(array, counts, &mut inner.keep, forget_by, now);
            let (at_cap, filling) = self.fullness(counts.used, len);
            if !at_cap
                && !filling
                && counts.tombstones > 0
                && (counts.used + 1 + compact_room(len)) * MAX_LOAD_DEN <= len * MAX_LOAD_NUM
            {
                self.rebuild(counts, len, None);
                continue;
            }
            if swept {
                continue;
            }
            if !at_cap && len < self.max_len() {
                let grown = if filling {
                    self.max_len()
                } else {
                    self.slots.grown_len(len, self.max_len())
                };
                let dropping = Some((forget_by, &mut inner.keep));
                self.rebuild(counts, grown, dropping);
                continue;
            }
            match policy {
                FullPolicy::RefuseNewKeys => {
                    counts.refused += 1;
                    // At the cap `forget_by` is `now`.
                    if at_cap && now < counts.next_sweep_at {
                        // Nothing is expired by `now`, and nothing can be before
                        // `next_sweep_at` (just swept, or not due): later new keys are refused
                        // the same way without the lock until then, or until a change.
                        self.gate.close(counts.next_sweep_at, counts.horizon);
                        inner.gate_closed = true;
                    }
                    return Err(Full);
                }
                FullPolicy::EvictClosestToExpiry => {
                    if self.evict(array, counts, &mut inner.removals, fp, tat, least) {
                        return Ok(());
                    }
                    // The victim was off the key's run, its hole was closed by moving keys
                    // back (`close_hole`), and the key's home is not `EMPTY`: its run holds
                    // tombstones or frozen slots, or, in a small shard, keys the shift may
                    // have moved. Probe it again.
                    probed = None;
                }
            }
        }
    }

    /// Tombstones every key expired by `now` (the threshold `forget_by` gives), then turns
    /// tombstones that end a run back into `EMPTY`. Returns whether it freed anything. The
    /// keys it forgets and the ones it keeps (expired by the caller's `expired_by` or not)
    /// are shown to the shard's keep (`keep.rs`).
    fn sweep(
        &self,
        array: SlotArray<'_>,
        counts: &mut ShardCounts,
        keep: &mut KeepExpired,
        now: u64,
        expired_by: u64,
    ) -> bool {
        let mut reclaimed = 0;
        let mut earliest_live = u64::MAX;
        // No removal epoch: only expired keys go (`removals`).
        for slot in array.iter() {
            let word = slot.word();
            if !is_live(word) {
                continue;
            }
            if let Some(old) = slot.freeze_unless(|t| t > now) {
                // ordering: the fingerprint only changes under the lock we hold.
                keep.forgot(slot.fp.load(Ordering::Relaxed), tat_of(old));
                slot.clear(TOMBSTONE);
                reclaimed += 1;
                counts.horizon = counts.horizon.max(tat_of(old));
            } else {
                // TATs only grow outside the lock, so this bounds the next expiry from below.
                let tat = tat_of(slot.word());
                earliest_live = earliest_live.min(tat);
                // ordering: the fingerprint only changes under the lock we hold.
                keep.held(slot.fp.load(Ordering::Relaxed), tat, expired_by);
            }
        }
        counts.used -= reclaimed;
        counts.tombstones += reclaimed;
        counts.reclaimed += reclaimed as u64;
        counts.next_sweep_at = earliest_live;
        let trimmed = Self::trim_tombstones(array);
        counts.tombstones -= trimmed;
        reclaimed + trimmed > 0
    }

    /// Rebuilds the shard over `len` slots (its current length, or a larger one for
    /// growth): freezes every key and empties every slot in one walk, then places every key
    /// again with its TAT, without tombstones. `dropping`: a growth also drops the keys
    /// expired by then, telling the shard's keep (`keep.rs`); the removal epoch stays, as for
    /// any key forgotten as expired (`removals`); a compaction (`None`) forgets nothing.
    ///
    /// A key placed back in the slot it was frozen in gets its very word back, generation
    /// included: an updater that loaded that word before the freeze may still CAS it, and the
    /// update is then that same key's, on that same state. A key placed in another slot is
    /// a hand-over, which advances that slot's generation. So a slot's generation moves only
    /// when its occupant changes, as with reuse (the ABA bound in `slot.rs`). A move's new
    /// array has slots that were never anyone's: either write is right there.
    ///
    /// Growth: once the walk has taken every key out, the new array is stored (Release) or
    /// the new segments allocated and their directory entries stored, before any key is
    /// placed, and the new length is published (Release) after the last key is placed, so a
    /// reader never indexes a slot that is not there (`array.rs`, publication).
    fn rebuild(
        &self,
        counts: &mut ShardCounts,
        len: usize,
        mut dropping: Option<(u64, &mut KeepExpired)>,
    ) {
        let old = self.array();
        // The `moves` seqlock's writer protocol: the slot writes below are its data.
        self.moves.begin();
        // One entry a held key, written in place with no branch on whether a slot holds one
        // (a slot that does not is overwritten by the next): held and free slots come in no
        // order a predictor could learn. Room for one more than the held keys, as the write
        // after the last of them may be a free slot's.
        let mut keys: Vec<(usize, u64, u64, usize)> = Vec::with_capacity(counts.used + 1);
        let mut held = 0;
        // A live key with a TAT below this is expired: forgotten, not moved (0: none is).
        // None is when a growth's `now` comes before `next_sweep_at` (no held key expires
        // before it).
        let forget_below = match &dropping {
            Some((now, _)) if *now >= counts.next_sweep_at => now.saturating_add(1),
            _ => 0,
        };
        // The keys go back nearly in order of their homes on the new length, which the
        // placer is fast for: walked from the start of a probe run (the slot after the first
        // `EMPTY` one), the old slots hold them in that order but within each cluster (a
        // stretch between `EMPTY` slots, where keys sit in the order they came). Homes on the
        // old and the new length are in the same order (`SlotArray::home` is monotonic in the
        // mixed fingerprint).
        let new = self.slots.view(len);
        // ordering: fingerprints only change under the lock we hold.
        let fp_at = |slot: &Slot| slot.fp.load(Ordering::Relaxed);
        let from = old
            .iter()
            .position(|slot| fp_at(slot) == EMPTY)
            .map_or(0, |e| e + 1);
        old.for_each_from(from, |i, slot| {
            let fp = fp_at(slot);
            // After this freeze no updater can change the word: they go to the locked path,
            // which waits for us. The slot is emptied at once, while its line is at hand: a
            // reader that meets the `EMPTY` takes a miss, which is only a hint.
            let word = slot.freeze();
            slot.clear(EMPTY);
            let live = is_live(word);
            let expired = live & (tat_of(word) < forget_below);
            keys.spare_capacity_mut()[held].write((new.home(fp), fp, word, i));
            held += usize::from(live & !expired);
            if expired && let Some((_, keep)) = dropping.as_mut() {
                keep.forgot(fp, tat_of(word));
                counts.reclaimed += 1;
                counts.horizon = counts.horizon.max(tat_of(word));
            }
        });
        // SAFETY: each of the first `held` entries was written: `held` grows by one only after
        // a write at its current value.
        unsafe { keys.set_len(held) };
        // Every key is out of the old slots: a growth may now move segment 0 (`old` reads
        // the new array from here on, and is not read again).
        if len > old.len() {
            counts.bytes += self.slots.extend(old.len(), len);
        }
        let mut placer = new.placer();
        let mut earliest_live = u64::MAX;
        for &(home, fp, word, was) in &keys {
            let (i, slot) = placer.place(home, fp);
            if i == was {
                slot.restore(fp, word);
            } else {
                slot.hand_over(slot.word(), fp, tat_of(word));
            }
            earliest_live = earliest_live.min(tat_of(word));
        }
        if dropping.is_some() {
            counts.next_sweep_at = earliest_live;
        } else {
            debug_assert_eq!(keys.len(), counts.used);
            counts.compactions += 1;
        }
        counts.used = keys.len();
        counts.tombstones = 0;
        if len > old.len() {
            self.slots.publish(len);
        }
        self.moves.end();
    }

    /// Turns each tombstone directly before an `EMPTY` slot into `EMPTY`, repeatedly.
    fn trim_tombstones(array: SlotArray<'_>) -> usize {
        let len = array.len();
        let fp_at = |i: usize| array.slot(i).fp.load(Ordering::Relaxed);
        let mut trimmed = 0;
        for i in 0..len {
            if fp_at(i) != EMPTY {
                continue;
            }
            let mut j = if i == 0 { len - 1 } else { i - 1 };
            while j != i && fp_at(j) == TOMBSTONE {
                array.slot(j).clear(EMPTY);
                trimmed += 1;
                j = if j == 0 { len - 1 } else { j - 1 };
            }
        }
        trimmed
    }

    /// Forcibly evicts a live key for new key `fp` (`FullPolicy::EvictClosestToExpiry`), the
    /// one with the least TAT (the first of equals from `fp`'s home) among:
    ///
    /// * in a shard of more than `SMALL_SHARD` slots, the keys on `fp`'s own probe run (`least`,
    ///   from the locked probe that just walked it), or, if the run holds no live key, the
    ///   first `FALLBACK_KEYS` live keys from `fp`'s home on;
    /// * in a smaller shard, all its keys.
    ///
    /// A victim on `fp`'s run (no `EMPTY` slot between `fp`'s home and it) gives `fp` its
    /// slot in place, with TAT `tat`, as a reclaim of an expired key does (freeze, fingerprint,
    /// new-generation word: `slot.rs`); this returns `true`, and no tombstone is left, so no
    /// compaction is owed. Otherwise the keys after the victim on its own run shift back
    /// (`close_hole`), which leaves no tombstone either; then, if `fp`'s home is `EMPTY` (its
    /// run was empty: the usual reason it held no live key), `fp` goes there, where a probe
    /// would put it, and this returns `true`; else the caller probes `fp`'s run again and puts
    /// `fp` in its free slot.
    fn evict(
        &self,
        array: SlotArray<'_>,
        counts: &mut ShardCounts,
        removals: &mut EpochWriter,
        fp: u64,
        tat: u64,
        least: Option<usize>,
    ) -> bool {
        let len = array.len();
        let (i, on_run) = match least {
            Some(i) if len > SMALL_SHARD => (i, true),
            _ if len > SMALL_SHARD => Self::least_from_home(array, fp, FALLBACK_KEYS),
            _ => Self::least_from_home(array, fp, len),
        };
        let slot = array.slot(i);
        self.begin_removal(removals);
        let frozen = slot.freeze_unless(|_| false);
        self.end_removal(removals);
        let Some(old) = frozen else {
            unreachable!("only lock holders freeze a live slot")
        };
        counts.evicted += 1;
        if on_run {
            slot.hand_over(frozen_word(old), fp, tat);
            counts.next_sweep_at = counts.next_sweep_at.min(tat);
            return true;
        }
        counts.used -= 1;
        self.close_hole(array, i);
        // The shift moved keys back only from the victim's slot on, toward it, and stopped at
        // the `EMPTY` slot that ends the victim's run: an `EMPTY` home before the victim (the
        // scan started there) is still one. Placed here, the key spares the caller a second
        // locked probe and a pass through its loop (a quarter of evictions at a full table).
        let home = array.slot(array.home(fp));
        // ordering: fingerprints only change under the lock we hold.
        if home.fp.load(Ordering::Relaxed) == EMPTY {
            home.hand_over(home.word(), fp, tat);
            counts.used += 1;
            counts.next_sweep_at = counts.next_sweep_at.min(tat);
            return true;
        }
        false
    }

    /// Closes the hole at slot `hole` (frozen: its key was just forgotten) without a
    /// tombstone, by backward-shift deletion (under the lock): each key after it on its run
    /// whose home is not after the hole moves back into it and leaves a hole where it was,
    /// and the last hole becomes `EMPTY`. Every key left on the run has its home after the
    /// last hole, so no key is cut off from its home (module docs, invariant). A victim that
    /// ends its run leaves `EMPTY` at once, moving nothing.
    ///
    /// A moved key is frozen, handed over to the hole (a new generation there, as in a
    /// rebuild: an updater's stale CAS of the old slot fails, and it finds the key again in
    /// the locked path or by probing) and its old slot stays frozen, with its fingerprint,
    /// until it is the next hole or cleared. A reader probing for it sees the live copy first
    /// (the hole lies between its home and its old slot), or the frozen old slot (locked
    /// path), or, if it looked at the hole before the move and at the old slot after the
    /// clear, a miss: a lock-free miss is only a hint, and the shift runs inside the `moves`
    /// seqlock's write section (as a rebuild does), so `absent_for_sure` does not trust it.
    /// A moved key is not forgotten: the removal epoch does not move for it.
    fn close_hole(&self, array: SlotArray<'_>, hole: usize) {
        let len = array.len();
        // Slots from one past the hole on, run by run (no segment lookup a slot), stopping
        // at the `EMPTY` that ends the run; `hole` is the current hole's index and slot.
        let mut hole = (hole, array.slot(hole));
        let mut moving = false;
        let after = if hole.0 + 1 == len { 0 } else { hole.0 + 1 };
        array.probe_from(after, len - 1, |j, slot| {
            // ordering: fingerprints only change under the lock we hold.
            let f = slot.fp.load(Ordering::Relaxed);
            if f == EMPTY {
                return Some(());
            }
            // The key at `j` may fill the hole if its home is not in `(hole, j]`.
            if f == TOMBSTONE || forward(array.home(f), j, len) < forward(hole.0, j, len) {
                return None;
            }
            if !moving {
                // The `moves` seqlock's writer protocol, as in `rebuild`.
                self.moves.begin();
                moving = true;
            }
            let Some(word) = slot.freeze_unless(|_| false) else {
                unreachable!("under the lock a slot with a key's fingerprint is live")
            };
            hole.1.hand_over(hole.1.word(), f, tat_of(word));
            hole = (j, slot);
            None
        });
        hole.1.clear(EMPTY);
        if moving {
            self.moves.end();
        }
    }

    /// The live slot with the least TAT (the first of equals) among the first `keys` live
    /// slots from `fp`'s home, and whether it lies on `fp`'s probe run.
    fn least_from_home(array: SlotArray<'_>, fp: u64, keys: usize) -> (usize, bool) {
        let mut seen = 0;
        let mut on_run = true;
        let (mut least_tat, mut least, mut least_on_run) = (u64::MAX, usize::MAX, false);
        array.probe(fp, |i, slot| {
            // ordering: fingerprints only change under the lock we hold.
            on_run &= slot.fp.load(Ordering::Relaxed) != EMPTY;
            let word = slot.word();
            let live = is_live(word);
            // Selects, not branches (`&`, not `&&`): free and held slots come in no order a
            // predictor could learn. A TAT is below `u64::MAX` (`slot.rs`, 60 bits), so the
            // first live key always takes the place.
            let less = live & (tat_of(word) < least_tat);
            least_tat = if less { tat_of(word) } else { least_tat };
            least = if less { i } else { least };
            least_on_run = if less { on_run } else { least_on_run };
            seen += usize::from(live);
            (seen == keys).then_some(())
        });
        assert!(least != usize::MAX, "a shard at its cap holds live keys");
        (least, least_on_run)
    }

    pub(crate) fn counts(&self) -> ShardCounts {
        let mut counts = lock(&self.inner).counts.clone();
        counts.refused += self.gate.refused();
        counts
    }
}
