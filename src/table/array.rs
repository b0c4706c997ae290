//! A shard's slots: linear probing over `{fingerprint, state}` slots (see `slot.rs`), in one
//! array while the shard is small, then in *segments* added after it.
//!
//! # Growth frees nothing
//!
//! A lock-free reader may be anywhere in a probe when the shard grows, and the hot path has
//! no room for telling the grower where it is (a reader count or an epoch pin is a locked
//! RMW or a full fence per check, 5–10 ns on a check of 10–35 ns). So growth never frees
//! memory a reader could hold. It freezes every key in the old slots (a reader that meets
//! one fails its CAS or misses, and takes the locked path), places every key again in the
//! grown slots, then publishes them (`Shard::rebuild`), in one of two ways:
//!
//! * **Below `first` slots, the array moves** (`extend` allocates, `move_front` swaps it
//!   in): a new array twice as large, or `first` itself once doubling twice would pass it.
//!   The old one is *outgrown*, kept until the shard drops, as a reader may still probe it;
//!   a shard's outgrown arrays together hold fewer slots than `first` (248 at `first` = 256
//!   from 8: 4 KiB). The reward: every slot of a small shard is one load from the shard
//!   (`base`), as in a presized one. `first` is 256 slots (`shard::CONTIGUOUS_LEN`), or a
//!   capped shard's whole length if that is 512 or fewer: such a shard stays one array.
//! * **From `first` on, segments are added**: the shard is rebuilt in place over the old and
//!   new segments together, as a compaction rebuilds it over the same slots. The old slots
//!   are the front of the grown ones; a reader that loaded the old length probes slots that
//!   still exist and meets the rebuild as a series of hand-overs (`slot.rs`). A large
//!   shard's outgrown arrays would hold as many slots as the shard or more: segments cost
//!   nothing.
//!
//! Outgrown arrays and segments are freed only in `Drop`.
//!
//! # Layout
//!
//! ```text
//! index:    0 .. first | first + U·[0, 1) | U·[1, 2) | U·[2, 3) | U·[3, 4) | U·[4, 6) | U·[6, 8) | U·[8, 12) | ...
//! segment:  0          | 1                | 2        | 3        | 4        | 5        | 6        | 7         | ...
//! ```
//!
//! Segment 0 is the array (`first` slots once grown to it; any size: presizing picks the
//! initial one, and a presized shard of `first` slots or more never moves). After it come
//! segments in a fixed pattern over a unit `U` (a power of two, about half of `first`): four
//! of `U`, then two per octave, so that the boundaries are `first + U·{1, 2, 3, 4, 6, 8, 12,
//! 16, 24, ...}` and a large shard grows by 1.5x and 1.33x in turn (a load of 55–62 % after
//! growth, against 42 % after a doubling). Finding a slot's segment is a few register
//! operations (`segment_of`) and one load from the directory; each directory entry is
//! biased by its segment's first index, so slot `i` is at `dir[segment_of(i)] + i`. Probes
//! and scans look a segment up once per *run* (`run`: its entry and where it ends) and step
//! within it like a plain array: a lookup per slot would make the probe loop about 2.5 times
//! as long (scenario C's inserts).
//!
//! # Publication
//!
//! `len` is the shard's current length and `base` segment 0's array. Growth takes every key
//! out of the old slots, then allocates the new array, storing it (Release, `move_front`),
//! or the new segments, storing their directory entries; then it places the keys and stores
//! the new `len` (Release, `publish`). A reader loads `len` (Acquire, `current`), then, for a
//! slot of segment 0, `base` (Acquire, `SlotArray::entry`):
//!
//! * The `len` it reads was stored after the array grown to it, so the `base` it reads next
//!   is that array or a later one: arrays only grow, so it has at least `min(len, first)`
//!   slots, and the reader never indexes past its end. Storing the array after the length
//!   would let a reader pair a new length with an old array and read past it (loom:
//!   `reader_past_the_old_array_vs_move`). A reader that loads the new array while the
//!   rebuild fills it meets hand-overs, as in a rebuild in place.
//! * The Acquire loads see what the Release stores published: the directory entries and the
//!   initialised slots of every segment below `len`, the new array's slots. A reader whose
//!   `base` is newer than its `len` (a growth came between its two loads) probes the new
//!   array on the old length: its homes are wrong there, so it may miss a held key, which
//!   is a hint the locked path checks, as any miss is; a key it finds is its own
//!   (fingerprints are keys).
//! * A reader that loaded an older length only indexes below it, into segments published by
//!   an earlier store of `len` (or by construction).
//!
//! Invariant (probe runs): no key is separated from its home slot by an `EMPTY` slot, outside
//! a rebuild. `find` is the lock-free probe; the rest runs under the shard lock and is called
//! from `shard.rs`.

use super::slot::{EMPTY, Slot, TOMBSTONE, is_live, tat_of};
use crate::select::select;
use crate::sync::{AtomicPtr, AtomicUsize, Ordering};

/// The segments of one shard and its current length.
#[derive(Debug)]
pub(crate) struct Segments {
    /// Slots in use: `[0, len)`. Grows only, under the shard lock (Release; see module docs).
    len: AtomicUsize,
    /// Segment 0's array: `min(len, first)` slots. Replaced by a larger one (`move_front`)
    /// while the shard grows below `first`, fixed from then on. Beside `len`, so that a slot
    /// in segment 0 (every slot of a shard below `first`) is one load from the shard.
    base: AtomicPtr<Slot>,
    /// Per segment after segment 0, its first slot's address minus its first index (null:
    /// not allocated). Entry 0 is unused.
    dir: Box<[AtomicPtr<Slot>]>,
    /// Every array segment 0 has had, and its slots, the current one last (null: none yet):
    /// an outgrown one is kept until the shard drops, as a reader may still hold one (module
    /// docs).
    fronts: Box<[(AtomicPtr<Slot>, AtomicUsize)]>,
    /// Slots in segment 0 once the shard has grown to it.
    first: usize,
    /// log2 of the unit `U` of the later segments.
    unit_shift: u32,
}

/// The extra segment (0-based, after segment 0) holding unit index `q` (index past `first`,
/// in units of `U`): `q` for `q < 4`, then two segments per octave.
///
/// Without a branch: a home slot falls below `4U` past `first` in no order a predictor could
/// learn (a fifth of a shard of 2,000 slots). For `x >= 2`, twice `x`'s top bit's position
/// plus the bit below it is `x` for 2 and 3, then two per octave; `q` below 2 is raised to 2
/// for it and taken back after, with a min and a max (selects).
#[inline]
fn extra_segment(q: usize) -> usize {
    let x = q.max(2);
    let k = (usize::BITS - 1 - x.leading_zeros()) as usize;
    2 * k + ((x >> (k - 1)) & 1) + q.min(2) - 2
}

/// The first unit index of extra segment `e` (the inverse of `extra_segment`).
fn extra_start(e: usize) -> usize {
    if e < 4 {
        e
    } else {
        let k = e / 2;
        (1 << k) + ((e & 1) << (k - 1))
    }
}

/// `slots` new `EMPTY` slots, as a raw pointer to the first (freed in `Segments::drop`).
fn allocate(slots: usize) -> *mut Slot {
    let array: Box<[Slot]> = (0..slots).map(|_| Slot::new()).collect();
    Box::into_raw(array).cast::<Slot>()
}

/// Frees an array from [`allocate`].
///
/// # Safety
///
/// `base` came from `allocate(slots)`, is freed once, and no reference into it is live.
unsafe fn free(base: *mut Slot, slots: usize) {
    // SAFETY: as the caller promises: the pointer and length of the boxed slice `allocate`
    // leaked, freed once, with no reference left into it.
    drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(base, slots)) });
}

impl Segments {
    /// Segments for a shard of `initial` slots that may grow to `max_len`, in one array up to
    /// `first` slots (at least `initial`), then in segments.
    pub(super) fn new(initial: usize, first: usize, max_len: usize) -> Segments {
        let first = first.max(initial).min(max_len.max(initial));
        let unit_shift = (first / 2).max(1).ilog2();
        let count = if max_len > first {
            2 + extra_segment((max_len - first - 1) >> unit_shift)
        } else {
            1
        };
        // Each move of segment 0 at least doubles it, or takes it to `first`.
        let moves = if initial < first {
            (first.div_ceil(initial.max(1))).next_power_of_two().ilog2() as usize + 1
        } else {
            0
        };
        let front = allocate(initial);
        Segments {
            len: AtomicUsize::new(initial),
            base: AtomicPtr::new(front),
            dir: (0..count)
                .map(|_| AtomicPtr::new(std::ptr::null_mut()))
                .collect(),
            fronts: (0..=moves)
                .map(|k| {
                    let (ptr, slots) = if k == 0 {
                        (front, initial)
                    } else {
                        (std::ptr::null_mut(), 0)
                    };
                    (AtomicPtr::new(ptr), AtomicUsize::new(slots))
                })
                .collect(),
            first,
            unit_shift,
        }
    }

    /// The absolute index of segment `s`'s first slot.
    fn start(&self, s: usize) -> usize {
        if s == 0 {
            0
        } else {
            self.first + (extra_start(s - 1) << self.unit_shift)
        }
    }

    /// The length the next growth reaches from `len`: below `first`, twice `len`, or `first`
    /// once twice that would pass it (so the arrays a shard outgrows hold fewer slots than
    /// `first` in all); past it, segment boundaries are added until it grows by a quarter,
    /// and by `first` at least (small shards would otherwise rebuild for a few slots at a
    /// time); at most `max_len`.
    pub(super) fn grown_len(&self, len: usize, max_len: usize) -> usize {
        if len < self.first {
            let next = if 4 * len > self.first {
                self.first
            } else {
                2 * len
            };
            return next.max(len + 1).min(max_len);
        }
        let mut e = if len == self.first {
            0
        } else {
            extra_segment((len - self.first - 1) >> self.unit_shift) + 1
        };
        loop {
            e += 1;
            let next = self.first + (extra_start(e) << self.unit_shift);
            if next >= max_len {
                return max_len;
            }
            if next >= len + (len / 4).max(self.first) {
                return next;
            }
        }
    }

    /// Allocates what a growth from `len` to `new_len` needs (under the shard lock, after the
    /// rebuild has frozen and taken every key out of the old slots, before it places them):
    /// below `first`, segment 0's new array, which becomes `base` at once (the old one is
    /// kept, as outgrown); the later segments that cover `[first, new_len)`. Returns the
    /// bytes they add.
    pub(super) fn extend(&self, len: usize, new_len: usize) -> usize {
        debug_assert!(len < new_len);
        let mut added = 0;
        if len < self.first {
            let slots = new_len.min(self.first);
            added += slots * std::mem::size_of::<Slot>();
            self.move_front(allocate(slots), slots);
        }
        let mut s = if len <= self.first {
            1
        } else {
            self.view(len).segment_of(len)
        };
        while self.start(s) < new_len {
            let end = self.start(s + 1).min(new_len);
            let base = allocate(end - self.start(s));
            // ordering: Relaxed; the Release store of `len` that makes these slots reachable
            // publishes it (module docs).
            self.dir[s].store(base.wrapping_sub(self.start(s)), Ordering::Relaxed);
            added += (end - self.start(s)) * std::mem::size_of::<Slot>();
            s += 1;
        }
        added
    }

    /// Makes `front`, of `slots` slots, segment 0's array in place of the current one,
    /// which is kept, outgrown (under the shard lock).
    fn move_front(&self, front: *mut Slot, slots: usize) {
        let spare = self
            .fronts
            .iter()
            // ordering: Relaxed; only the lock holder stores these, and we hold the lock.
            .find(|(ptr, _)| ptr.load(Ordering::Relaxed).is_null())
            .expect("segment 0 moves at most `fronts.len() - 1` times");
        spare.1.store(slots, Ordering::Relaxed);
        // ordering: Relaxed; the Release store of `base` below publishes the record to a
        // reader that Acquires the new array (`front_len_of`); `drop` reads it with `&mut`.
        spare.0.store(front, Ordering::Relaxed);
        // ordering: Release publishes the new array's slots (all `EMPTY`, and each key the
        // rebuild places next, with its own Release stores) to readers that Acquire it
        // (`SlotArray::entry`). Stored before the new length, so a reader that loaded that
        // length loads this array or a later one (module docs).
        self.base.store(front, Ordering::Release);
    }

    /// The current slots: `len` loaded once, so that one probe sees one length.
    #[inline]
    pub(super) fn current(&self) -> SlotArray<'_> {
        // ordering: Acquire pairs with `publish`'s Release: the directory entries and slots
        // below the length read are initialised (module docs).
        self.view(self.len.load(Ordering::Acquire))
    }

    /// The slots as they will be once `len` is published (the lock holder's view).
    pub(super) fn view(&self, len: usize) -> SlotArray<'_> {
        SlotArray {
            segments: self,
            len,
        }
    }

    /// Makes `[0, len)` the current slots (under the shard lock, after a rebuild).
    pub(super) fn publish(&self, len: usize) {
        // ordering: Release publishes the new segments' directory entries and every slot
        // write of the rebuild to readers that Acquire the new length.
        self.len.store(len, Ordering::Release);
    }

    /// The slots of segment-0 array `base`, as `fronts` records them (0: not found), for
    /// the assertion in `SlotArray::entry`. Tests and loom models only.
    #[cfg(any(debug_assertions, tollgate_loom))]
    fn front_len_of(&self, base: *const Slot) -> usize {
        self.fronts
            .iter()
            // ordering: Relaxed; a caller that loaded `base` with Acquire (`entry`) or holds
            // the lock sees its record, stored before `base` (`move_front`).
            .find(|(ptr, _)| std::ptr::eq(ptr.load(Ordering::Relaxed), base))
            .map_or(0, |(_, slots)| slots.load(Ordering::Relaxed))
    }

    /// Bytes of the directory, the table of segment 0's arrays and the first of them.
    pub(super) fn initial_bytes(&self) -> usize {
        std::mem::size_of_val(&*self.dir)
            + std::mem::size_of_val(&*self.fronts)
            + self.len.load(Ordering::Relaxed) * std::mem::size_of::<Slot>()
    }
}

impl Drop for Segments {
    fn drop(&mut self) {
        // ordering: `&mut self`: no other thread can touch these any more.
        let len = self.len.load(Ordering::Relaxed);
        // SAFETY (each `free` below): (1) each pointer is one `allocate` returned for exactly
        // that many slots: each of segment 0's arrays, the slots recorded with it; a later
        // segment, up to the next segment's start or the length growth reached, which `len`
        // then became; (2) each is freed once, here; (3) `&mut self` means no reader holds a
        // slot.
        for (ptr, slots) in self.fronts.iter() {
            let ptr = ptr.load(Ordering::Relaxed);
            if !ptr.is_null() {
                // SAFETY: as above.
                unsafe { free(ptr, slots.load(Ordering::Relaxed)) };
            }
        }
        let mut s = 1;
        while s < self.dir.len() && self.start(s) < len {
            let base = self.dir[s]
                .load(Ordering::Relaxed)
                .wrapping_add(self.start(s));
            let end = self.start(s + 1).min(len);
            // SAFETY: as above.
            unsafe { free(base, end - self.start(s)) };
            s += 1;
        }
    }
}

/// One consistent view of a shard's slots: its segments and a length read once.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SlotArray<'a> {
    segments: &'a Segments,
    len: usize,
}

impl<'a> SlotArray<'a> {
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    #[inline]
    fn segment_of(&self, i: usize) -> usize {
        let seg = self.segments;
        if i < seg.first {
            0
        } else {
            1 + extra_segment((i - seg.first) >> seg.unit_shift)
        }
    }

    /// The biased entry of segment `s` (below a published length, or the lock holder's):
    /// segment 0's array, or the directory's entry.
    #[inline]
    fn entry(&self, s: usize) -> *const Slot {
        let seg = self.segments;
        let biased = if s == 0 {
            // ordering: Acquire pairs with `move_front`'s Release: the array's slots are
            // initialised. Loaded after this view's length, so it has at least
            // `min(len, first)` slots (module docs).
            let base = seg.base.load(Ordering::Acquire);
            // A length newer than its array (a broken publication) would index past the
            // array's end: stop it here in tests and loom models rather than read there.
            #[cfg(any(debug_assertions, tollgate_loom))]
            assert!(
                self.len.min(seg.first) <= seg.front_len_of(base),
                "a length of {} read with an array of {} slots",
                self.len,
                seg.front_len_of(base)
            );
            base
        } else {
            // ordering: Relaxed; the Acquire load of `len` (or the shard lock) ordered this
            // entry's store before us (module docs).
            seg.dir[s].load(Ordering::Relaxed)
        };
        // A reader that saw a length without its segments (a broken publication) would
        // index from null: stop it here in tests and loom models rather than fault.
        if cfg!(any(debug_assertions, tollgate_loom)) {
            assert!(
                !biased.is_null(),
                "segment {s} read before it was published"
            );
        }
        biased
    }

    /// Slot `i` (`i < len`).
    #[inline]
    pub(crate) fn slot(&self, i: usize) -> &'a Slot {
        self.slot_in_segment(i).0
    }

    /// Slot `i` (`i < len`) and the segment holding it, from which a probe starting at `i`
    /// knows its run without looking the segment up again
    /// ([`find_or_end`](SlotArray::find_or_end)).
    #[inline]
    pub(crate) fn slot_in_segment(&self, i: usize) -> (&'a Slot, usize) {
        debug_assert!(i < self.len);
        let s = self.segment_of(i);
        let biased = self.entry(s);
        // SAFETY: (1) `i < len`, and every segment below a published (or, for the lock
        // holder, extended) length is allocated and its entry stored before that length
        // was; (2) the entry is the segment's base minus its first index, so `biased + i` is
        // inside it; (3) segments are freed only when `Segments` drops, which outlives `'a`;
        // (4) only shared references are made, and the slots are atomics.
        (unsafe { &*biased.wrapping_add(i) }, s)
    }

    /// Visits every slot once, with its index, from index `from` on, wrapping at `len`: a
    /// probe that never stops, for a rebuild's walk.
    #[inline(always)]
    pub(super) fn for_each_from(&self, from: usize, mut visit: impl FnMut(usize, &'a Slot)) {
        if self.len > 0 {
            self.probe_from(from % self.len, self.len, |i, slot| {
                visit(i, slot);
                None::<()>
            });
        }
    }

    /// Every slot, in index order.
    pub(crate) fn iter(self) -> impl Iterator<Item = &'a Slot> {
        let (mut i, mut biased, mut end) = (0, std::ptr::null(), 0);
        std::iter::from_fn(move || {
            if i == self.len {
                return None;
            }
            if i == end {
                (biased, end) = self.run(i);
            }
            let slot = Self::in_run(biased, i);
            i += 1;
            Some(slot)
        })
    }

    #[inline]
    pub(super) fn home(&self, fp: u64) -> usize {
        // Multiply-shift onto [0, len): uses all of fp's bits, and differs from the top bits
        // that (by default) picked the shard.
        let mixed = fp.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        ((u128::from(mixed) * self.len as u128) >> 64) as usize
    }

    /// The segment run holding slot `i` (`i < len`): its directory entry (biased, so slot
    /// `j` of the run is at `entry + j`) and the index where the run ends (the next
    /// segment's start, or `len`). Probes step within a run without a segment lookup.
    #[inline]
    fn run(&self, i: usize) -> (*const Slot, usize) {
        let s = self.segment_of(i);
        (self.entry(s), self.run_end(s))
    }

    /// Where segment `s`'s run ends on this view: the next segment's start, or `len`.
    #[inline]
    fn run_end(&self, s: usize) -> usize {
        self.segments.start(s + 1).min(self.len)
    }

    /// The slot at `i` of a run from `run` (`i` below the run's end).
    #[inline]
    fn in_run(biased: *const Slot, i: usize) -> &'a Slot {
        // SAFETY: as in `slot`: `i` lies in the run whose biased entry this is, below a
        // length whose segments were published, and segments outlive `'a`.
        unsafe { &*biased.wrapping_add(i) }
    }

    /// Linear probing from `fp`'s home over every slot once, run by run: `visit` gets each
    /// index and slot and says whether to stop.
    #[inline]
    pub(super) fn probe<T>(
        &self,
        fp: u64,
        visit: impl FnMut(usize, &'a Slot) -> Option<T>,
    ) -> Option<T> {
        self.probe_from(self.home(fp), self.len, visit)
    }

    /// Linear probing over `steps` slots from index `i` (`i < len`), wrapping at `len`.
    #[inline]
    pub(super) fn probe_from<T>(
        &self,
        i: usize,
        steps: usize,
        visit: impl FnMut(usize, &'a Slot) -> Option<T>,
    ) -> Option<T> {
        let (biased, end) = self.run(i);
        self.probe_run(i, biased, end, steps, visit)
    }

    /// [`probe_from`](SlotArray::probe_from) for a caller that knows the run holding slot
    /// `i`: its biased entry and its end, as [`run`](SlotArray::run) gives them.
    #[inline(always)]
    fn probe_run<T>(
        &self,
        mut i: usize,
        mut biased: *const Slot,
        mut end: usize,
        steps: usize,
        mut visit: impl FnMut(usize, &'a Slot) -> Option<T>,
    ) -> Option<T> {
        for _ in 0..steps {
            if let Some(out) = visit(i, Self::in_run(biased, i)) {
                return Some(out);
            }
            i += 1;
            if i == end {
                if i == self.len {
                    i = 0;
                }
                (biased, end) = self.run(i);
            }
        }
        None
    }

    /// Starts loading slot `home` (a key's home slot) into the cache, before a clock read
    /// (`prefetch.rs`). The probe that follows finds it there, or on its way.
    ///
    /// It also asks for the next cache line: a probe that goes past the home slot (most do,
    /// at a shard's usual load) goes on into it within a slot or three, and a new key's
    /// probe, which walks its whole run to the `EMPTY` that ends it, walks into it on most
    /// inserts. The two lines are fetched side by side, so a hit in the home line pays
    /// nothing for the second.
    #[inline(always)]
    pub(crate) fn prefetch(home: &Slot) {
        /// The cache line of the CPUs this is tuned for (x86-64, most AArch64 cores).
        const LINE: usize = 64;
        let home: *const Slot = home;
        crate::prefetch::prefetch(home);
        crate::prefetch::prefetch(home.wrapping_byte_add(LINE));
    }

    /// Lock-free probe for `fp`. `None` is only a hint (the locked path re-checks). The
    /// check's own probe is [`find_or_end`](SlotArray::find_or_end); this is it without a miss
    /// to hand over.
    #[inline]
    pub(crate) fn find(&self, fp: u64) -> Option<&'a Slot> {
        let home = self.home(fp);
        let (home_slot, segment) = self.slot_in_segment(home);
        self.find_or_end(fp, home, home_slot, segment, || 0).ok()
    }

    /// Lock-free probe for `fp` from its home slot `home_slot` (index `home` on this view, in
    /// segment `segment`), for a check whose miss the locked path may take over
    /// (`changes.rs`).
    /// `Err(Some((e, count)))` names the `EMPTY` slot `e` that ended the run and `count`, the
    /// shard's change count read by `read_count` before every fingerprint load that decided
    /// the miss; `Err(None)`: every slot was walked and none was `EMPTY`.
    ///
    /// A key found in its home slot (most hits) reads no count: the count shares a cache line
    /// with the shard lock's word, which every lock holder writes. Anything else reads the
    /// count, then walks the run from the home slot again.
    #[inline(always)]
    pub(crate) fn find_or_end(
        &self,
        fp: u64,
        home: usize,
        home_slot: &'a Slot,
        segment: usize,
        read_count: impl FnOnce() -> u64,
    ) -> Result<&'a Slot, Option<(usize, u64)>> {
        // ordering: Acquire pairs with the Release fp store of an insert, so the state word
        // read next is at least the frozen word that preceded it (see slot.rs).
        if home_slot.fp.load(Ordering::Acquire) == fp {
            return Ok(home_slot);
        }
        let count = read_count();
        // The `EMPTY` slot's index is written where it is met, once, rather than returned
        // through the probe: an index in the loop's result cost a check 8 instructions
        // (`benches/counters`, scenario `live`).
        let mut end = None;
        // The run from the home slot, whose segment `locate` found: finding it again cost a
        // check that went past its home slot 25 instructions (`benches/counters`, `live`).
        // The entry is read again (one load from a line just read), not derived from
        // `home_slot`: a pointer from a reference to one slot may reach only that slot.
        // ordering: as `entry` argues. For segment 0 a growth may have moved the array since
        // `locate` read it; the probe then walks the newer array on this view's length, as
        // any probe a growth overtakes does (module docs, publication): a hit is the key's
        // live slot (fingerprints are exact), a miss only a hint, and the locked path takes
        // a miss over only if the change count read before it is still the shard's and its
        // length this view's (loom: `new_key_vs_move`).
        let biased = self.entry(segment);
        let run_end = self.run_end(segment);
        let found = self.probe_run(home, biased, run_end, self.len, |i, slot| {
            // ordering: Acquire, as above.
            match slot.fp.load(Ordering::Acquire) {
                f if f == fp => Some(Some(slot)),
                EMPTY => {
                    end = Some(i);
                    Some(None)
                }
                _ => None,
            }
        });
        found.flatten().ok_or(end.map(|e| (e, count)))
    }

    /// Locked probe: the key's slot, or where a new key could go and, for a forced
    /// eviction, the live key on the run with the least TAT (the first of equals).
    ///
    /// Where a new key could go is the first slot on the run that is a tombstone or holds a
    /// key expired by `now`, else the `EMPTY` slot that ends the run. The loop keeps as little
    /// as it can in registers (it walks about 18 slots of a full shard, once per insert or
    /// eviction): the first such slot's index alone, its kind read back after the walk (under
    /// the lock, fingerprints do not change), and the least TAT and its index kept with
    /// selects rather than branches, as TATs along a run come in no order a predictor could
    /// learn. A tombstone's word is frozen (it was frozen before it was cleared), so it is
    /// never the least; a frozen word counts as never expiring: it is no candidate.
    ///
    /// `probe_locked_plain` is the same walk for a caller that knows no key on the shard is
    /// expired by its threshold and wants no victim: it looks at fingerprints alone.
    pub(super) fn probe_locked(&self, fp: u64, now: u64) -> Probe {
        self.probe_locked_as::<true>(fp, now)
    }

    /// [`probe_locked`](SlotArray::probe_locked) where no key is expired and no victim is
    /// wanted: its `Absent` names no expired slot and no least TAT.
    pub(super) fn probe_locked_plain(&self, fp: u64) -> Probe {
        self.probe_locked_as::<false>(fp, 0)
    }

    /// `TATS`: whether to read the words (for expired keys and the least TAT).
    #[inline(always)]
    fn probe_locked_as<const TATS: bool>(&self, fp: u64, now: u64) -> Probe {
        let mut first_free = usize::MAX;
        let (mut least_tat, mut least) = (u64::MAX, usize::MAX);
        // `Ok(i)`: the key at `i`; `Err(i)`: the `EMPTY` slot `i` ends the run.
        let ended = self.probe(fp, |i, slot| {
            // ordering: fingerprints only change under the lock we hold.
            let f = slot.fp.load(Ordering::Relaxed);
            if f == fp {
                return Some(Ok(i));
            }
            if f == EMPTY {
                return Some(Err(i));
            }
            if !TATS {
                if first_free == usize::MAX && f == TOMBSTONE {
                    first_free = i;
                }
                return None;
            }
            let word = slot.word();
            let tat = if is_live(word) {
                tat_of(word)
            } else {
                u64::MAX
            };
            // `|` and `&`, not `||` and `&&`: selects, not branches on what the run holds.
            let free_here = (f == TOMBSTONE) | (tat <= now);
            first_free = if (first_free == usize::MAX) & free_here {
                i
            } else {
                first_free
            };
            // `select`: left to the compiler, these became a branch (`select.rs`).
            let less = tat < least_tat;
            least_tat = select(less, tat, least_tat);
            least = select(less, i as u64, least as u64) as usize;
            None
        });
        let empty = match ended {
            Some(Ok(i)) => return Probe::Found(i),
            Some(Err(i)) => Some(i),
            None => None,
        };
        let free = if first_free != usize::MAX {
            // ordering: as above.
            if self.slot(first_free).fp.load(Ordering::Relaxed) == TOMBSTONE {
                Some(Free::Tombstone(first_free))
            } else {
                Some(Free::Expired(first_free))
            }
        } else {
            empty.map(Free::Empty)
        };
        Probe::Absent(free, (least != usize::MAX).then_some(least))
    }

    /// The first `EMPTY` slot on `fp`'s probe run (under the lock).
    pub(super) fn free_slot(&self, fp: u64) -> usize {
        // ordering: fingerprints only change under the lock.
        self.probe(fp, |i, slot| {
            (slot.fp.load(Ordering::Relaxed) == EMPTY).then_some(i)
        })
        .expect("a rebuild or insert has an EMPTY slot on every run")
    }

    /// The segment run holding slot `i`: its biased entry, its first index and its end.
    fn run_span(&self, i: usize) -> (*const Slot, usize, usize) {
        let s = self.segment_of(i);
        let start = self.segments.start(s);
        (
            self.entry(s),
            start,
            self.segments.start(s + 1).min(self.len),
        )
    }

    /// A [`Placer`] for a rebuild into this view, whose slots are all `EMPTY`.
    pub(super) fn placer(self) -> Placer<'a> {
        Placer {
            array: self,
            cursor: 0,
            top: 0,
            run: self.run_span(0),
        }
    }
}

/// Puts a rebuild's keys into a view whose slots start out `EMPTY` (under the lock), each in
/// an `EMPTY` slot on its own probe run, so that no key is cut off from its home.
///
/// Fed in order of their homes, keys fill the slots from the front: each goes to its home
/// or, if that is taken, to the slot after the last one filled, with no probe and no
/// segment lookup unless it crosses into the next segment. A rebuild feeds them nearly in
/// that order (`Shard::rebuild` walks the old slots from the start of a probe run, and homes
/// on the old and the new length are in the same order: `home` is monotonic in the mixed
/// fingerprint); a key out of order, or one whose run wraps past the end, is placed by an
/// ordinary probe (`free_slot`). Any order is correct; order only makes it fast.
///
/// Why the fast path is right: every key placed so far lies below `cursor`, and every slot
/// of `[top, cursor)` holds a key. A key whose home `h` is at least `top` therefore finds
/// `[h, cursor)` full and `cursor` (or `h` itself, if past it) `EMPTY`, which is the first
/// `EMPTY` slot of its run, as a probe would find. A probe's slot below `cursor` keeps both
/// facts; a probe can only reach past `cursor` through a full `[h, cursor)`, so it stops at
/// `cursor` itself, and the cursor moves past it.
pub(super) struct Placer<'a> {
    array: SlotArray<'a>,
    cursor: usize,
    top: usize,
    /// The segment run last placed into: biased entry, first index, end.
    run: (*const Slot, usize, usize),
}

impl<'a> Placer<'a> {
    /// Places key `fp`, whose home on this view is `home`: the index and the slot it goes to
    /// (`EMPTY` until the caller writes).
    pub(super) fn place(&mut self, home: usize, fp: u64) -> (usize, &'a Slot) {
        debug_assert_eq!(home, self.array.home(fp));
        let at = home.max(self.cursor);
        if home < self.top || at >= self.array.len {
            let i = self.array.free_slot(fp);
            if i >= self.cursor {
                self.cursor = i + 1;
            }
            return (i, self.array.slot(i));
        }
        self.top = home;
        self.cursor = at + 1;
        if at < self.run.1 || at >= self.run.2 {
            self.run = self.array.run_span(at);
        }
        let slot = SlotArray::in_run(self.run.0, at);
        // ordering: fingerprints only change under the lock.
        debug_assert_eq!(slot.fp.load(Ordering::Relaxed), EMPTY);
        (at, slot)
    }
}

/// What a locked probe found.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Probe {
    /// The key, at this index.
    Found(usize),
    /// Not the key; where a new key could go on its run, if anywhere, and the index of the
    /// live key on the run with the least TAT, if any.
    Absent(Option<Free>, Option<usize>),
}

/// A slot a new key may take, in order of preference on its probe run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Free {
    Tombstone(usize),
    Expired(usize),
    Empty(usize),
}

#[cfg(all(test, not(tollgate_loom)))]
mod tests {
    use super::*;

    #[test]
    fn segments_tile_the_index_space() {
        for q in 0..10_000 {
            let e = extra_segment(q);
            assert!(extra_start(e) <= q && q < extra_start(e + 1), "{q} -> {e}");
        }
        let boundaries: Vec<usize> = (0..10).map(extra_start).collect();
        assert_eq!(boundaries, [0, 1, 2, 3, 4, 6, 8, 12, 16, 24]);
    }

    /// Fingerprints as the table makes them (never `EMPTY` or `TOMBSTONE`), from xorshift.
    fn fingerprints(n: usize, seed: u64) -> Vec<u64> {
        let mut x = seed | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x | 2
            })
            .collect()
    }

    /// A grown view: `first` slots and segments up to `len`, every slot `EMPTY`.
    fn grown(first: usize, len: usize) -> Segments {
        let seg = Segments::new(first, first, len);
        if len > first {
            seg.extend(first, len);
            seg.publish(len);
        }
        seg
    }

    #[test]
    fn the_placer_puts_each_key_where_a_probe_would() {
        for (first, len) in [(8, 8), (8, 100), (64, 1000), (1000, 1000), (16, 7_777)] {
            let n = len * 5 / 6;
            let keys = fingerprints(n, len as u64);
            let seg = grown(first, len);
            let home = |fp: u64| seg.current().home(fp);
            let mut by_home = keys.clone();
            by_home.sort_by_key(|&fp| home(fp));
            // The rebuild's order (by home, from some run start on, wrapping), in order,
            // reversed, at random.
            let mut rotated = by_home.clone();
            rotated.rotate_left(n / 3);
            let mut reversed = by_home.clone();
            reversed.reverse();
            // A rebuild's order: the keys as a smaller table holds them (placed in random
            // order), walked from the slot after its first `EMPTY` one.
            let old = grown(first, first.max(len * 2 / 3).max(n + 1));
            let old_view = old.current();
            for &fp in &keys {
                let i = old_view.free_slot(fp);
                old_view.slot(i).fp.store(fp, Ordering::Relaxed);
            }
            let fps: Vec<u64> = old_view
                .iter()
                .map(|s| s.fp.load(Ordering::Relaxed))
                .collect();
            let from = fps.iter().position(|&fp| fp == EMPTY).unwrap() + 1;
            let mut walked: Vec<u64> = fps[from..].iter().chain(&fps[..from]).copied().collect();
            walked.retain(|&fp| fp != EMPTY);
            for (name, order) in [
                ("a rebuild's walk", &walked),
                ("by home", &by_home),
                ("rotated", &rotated),
                ("reversed", &reversed),
                ("random", &keys),
            ] {
                let seg = grown(first, len);
                let view = seg.current();
                let mut placer = view.placer();
                for &fp in order {
                    let probed = view.free_slot(fp);
                    let (i, slot) = placer.place(view.home(fp), fp);
                    assert_eq!(i, probed, "{name}, {first}/{len}: {fp:#x}");
                    assert!(std::ptr::eq(slot, view.slot(i)));
                    slot.fp.store(fp, Ordering::Relaxed);
                }
                for &fp in order {
                    assert!(
                        view.find(fp).is_some(),
                        "{name}, {first}/{len}: lost {fp:#x}"
                    );
                }
            }
        }
    }

    #[test]
    fn the_plain_locked_probe_agrees_when_nothing_is_expired() {
        use super::super::slot::live_word;
        let len = 1000;
        let seg = grown(64, len);
        let view = seg.current();
        let keys = fingerprints(len * 5 / 6, 7);
        for (k, &fp) in keys.iter().enumerate() {
            let slot = view.slot(view.free_slot(fp));
            slot.fp.store(fp, Ordering::Relaxed);
            slot.state
                .store(live_word(0, 10 + k as u64), Ordering::Relaxed);
        }
        // Every third key leaves a tombstone (frozen word, fingerprint `TOMBSTONE`).
        for &fp in keys.iter().step_by(3) {
            let slot = view.find(fp).unwrap();
            slot.freeze_unless(|_| false).unwrap();
            slot.clear(TOMBSTONE);
        }
        for &fp in keys.iter().chain(&fingerprints(500, 99)) {
            let full = view.probe_locked(fp, 5);
            let plain = view.probe_locked_plain(fp);
            match (full, plain) {
                (Probe::Absent(free, _), Probe::Absent(plain_free, None)) => {
                    assert_eq!(free, plain_free, "{fp:#x}");
                }
                (full, plain) => assert_eq!(full, plain, "{fp:#x}"),
            }
        }
    }

    #[test]
    fn growth_steps_and_every_slot_is_distinct() {
        for (initial, first, max_len) in [
            (8, 8, 150_000),
            (2, 2, 9),
            (1000, 1000, 7_777),
            (8, 8, 8),
            (13, 13, 100),
            (8, 256, 150_000),
            (2, 4, 10),
            (3, 100, 77),
            (8, 256, 256),
            (300, 256, 1000),
        ] {
            let seg = Segments::new(initial, first, max_len);
            let first = seg.first;
            let mut len = initial;
            while len < max_len {
                let new = seg.grown_len(len, max_len);
                assert!(new > len && new <= max_len, "{first} {len} -> {new}");
                if len < first {
                    // One array, twice as large, or `first` once twice that would pass it.
                    let want = if 4 * len > first { first } else { 2 * len };
                    assert_eq!(new, want.max(len + 1).min(max_len), "{len} -> {new}");
                } else {
                    assert!(
                        new == max_len || new * 2 <= len * 3 + 4 * first,
                        "{len} -> {new}"
                    );
                }
                seg.extend(len, new);
                seg.publish(new);
                len = new;
            }
            let view = seg.current();
            let mut addrs: Vec<usize> = view.iter().map(|s| s as *const Slot as usize).collect();
            addrs.sort_unstable();
            addrs.dedup();
            assert_eq!(addrs.len(), max_len);
        }
    }

    #[test]
    fn a_move_keeps_the_old_array_for_its_readers() {
        let seg = Segments::new(4, 16, 64);
        let before = seg.current();
        let old_base: *const Slot = before.slot(0);
        let old = before.slot(3);
        old.fp.store(42, Ordering::Relaxed);
        let bytes = seg.extend(4, 8);
        assert_eq!(bytes, 8 * std::mem::size_of::<Slot>());
        // The lock holder's view of the grown slots reads the new array at once.
        let grown = seg.view(8);
        assert!(!std::ptr::eq(grown.slot(3), old), "a new array");
        assert_eq!(grown.slot(3).fp.load(Ordering::Relaxed), EMPTY);
        seg.publish(8);
        assert_eq!(seg.current().len(), 8);
        // The old array is kept until the segments drop: a reader may still hold a slot.
        assert_eq!(old.fp.load(Ordering::Relaxed), 42);
        assert_eq!(seg.front_len_of(old_base), 4);
        assert_eq!(seg.front_len_of(seg.current().slot(0)), 8);
    }

    #[test]
    #[should_panic(expected = "a length of 8 read with an array of 4 slots")]
    #[cfg(debug_assertions)]
    fn a_length_newer_than_its_array_is_caught() {
        let seg = Segments::new(4, 16, 64);
        // A length of 8 with segment 0 still the 4-slot array: what a reader would see if
        // the length were published before the array it needs.
        seg.view(8).slot(5);
    }
}
