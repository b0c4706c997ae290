//! The operations on one GCRA state word, written once: check, peek, penalize, reserve and
//! undo. A [`Word`] is a key's slot in a keyed limiter's table (`limiter::KeyState`) or a
//! direct limiter's single word (`direct::DirectState`); the public limiters are thin types
//! that find the word and call in here, and the waiting engine (`wait/`) reserves through
//! the same functions.
//!
//! # Undoing a write
//!
//! An admission or a reservation can be given back ([`undo`]): the word goes back to the
//! state it replaced, but only while it still holds exactly the state the write stored, and
//! only in the same incarnation of the key. The TAT alone does not identify a write: after a
//! `reset` (or a forced eviction) the key can be checked back up to exactly the same TAT,
//! and undoing then would hand back a cell someone else used. So each such removal bumps an
//! *epoch* (per table shard, or per direct limiter) twice, before and after it removes: odd
//! while a removal is under way. A key forgotten as expired moves no epoch: its next
//! incarnation starts from the shard's horizon, at or above every TAT it stored, so it never
//! holds a state an old write stored but the one that write left (`Shard::removals`), and
//! an undo never inserts a key the table no longer holds. So the churn of other keys (new
//! clients taking the slots of expired ones) leaves undos, `check_all`'s give-backs and the
//! refunds of dropped waiters exact. The write records the epoch, read *before* its CAS; the undo
//! reads it again *after* the state load that found the write's TAT, which is what makes a
//! newer epoch visible (the argument is written once, on `seq::Epoch`; its users are
//! `Shard::removals` and `direct::Shared::resets`). A write that read an
//! odd epoch may have landed just before the removal took its state away, so it is never
//! undone. An undo that finds anything else writes nothing: the write's cells count as used,
//! never as an extra cell. Exact when nothing else wrote the key since, else a no-op: the
//! window guarantee holds either way. In a keyed table the undo runs under the shard lock
//! (`Word::update_lowering`): it is the one write that lowers a TAT, and the shard's bound on
//! its earliest expiry has to follow it (`Shard::update_locked`).

use std::ops::Deref;
use std::time::Duration;

use crate::error::Error;
use crate::gcra::{Decision, Gcra};
use crate::outcome::{Admitted, Written};
use crate::sync::Arc;
use crate::table::{Full, Step};
use crate::time::Timestamp;

/// One GCRA state word and the limiter around it.
pub(crate) trait Word {
    /// The limiter's quota now (a per-call quota replaces it for that call only).
    fn quota(&self) -> Gcra;
    /// The limiter's clock, clamped to what the GCRA math accepts.
    fn now(&self) -> u64;
    /// The removal epoch of the word (module docs).
    fn epoch(&self) -> u64;
    /// Runs `f` on the stored TAT and stores what it returns (one CAS, retried on contention).
    /// `now` is the caller's time; a keyed table may reclaim keys expired well before it. An
    /// absent key is inserted only if `f` writes.
    fn update<R>(&self, now: u64, f: impl FnMut(u64) -> Step<R>) -> Result<R, Full>;
    /// [`update`](Word::update) for a write that may lower the TAT (an undo), of a word
    /// that exists: `None` (nothing run or written) for a key its table does not hold, which
    /// an undo never inserts. A keyed table makes it under the shard lock, which keeps its
    /// bound on the earliest expiry true (`Shard::update_held`): a lock-free write could lower
    /// a TAT under a sweep.
    #[inline]
    fn update_lowering<R>(&self, now: u64, f: impl FnMut(u64) -> Step<R>) -> Option<R> {
        self.update(now, f).ok()
    }
    /// [`update`](Word::update) with the removal epoch read before it, returned beside its
    /// result: what a write that may be undone records. Called after
    /// [`try_update_recording`](Word::try_update_recording) failed, with what it saw
    /// (`miss`), so a keyed table skips its lock-free probe here and takes its locked path at
    /// once (`Table::update_recording`), where it may take that miss over.
    #[inline]
    fn update_recording<R>(
        &self,
        now: u64,
        f: impl FnMut(u64) -> Step<R>,
        _miss: Self::Miss,
    ) -> Result<(R, u64), Full> {
        let epoch = self.epoch();
        Ok((self.update(now, f)?, epoch))
    }
    /// [`update_recording`](Word::update_recording)'s lock-free attempt alone, for the hot
    /// path: `Err` when it would need more (a key to insert, a frozen slot), with what the
    /// attempt saw for `update_recording`, and then it has written nothing, though `f` may
    /// have run: a caller that starts over must not mind running it again (`check`'s step is
    /// pure). Must be cheap to inline: no lock, no call.
    ///
    /// `spot` is where [`locate`](Word::locate) found the word.
    fn try_update_recording<R>(
        &self,
        spot: Self::Spot<'_>,
        f: impl FnMut(u64) -> Step<R>,
    ) -> Result<(R, u64), Self::Miss>;
    /// What a failed lock-free attempt hands its locked retry (a keyed table's probe miss).
    type Miss: Copy;
    /// Counts a decision in the limiter's statistics.
    fn count(&self, admitted: bool);
    /// The limiter's capacity in keys, for [`Error::TableFull`].
    fn capacity(&self) -> usize;
    /// Where the word lives (a keyed table's shard and home slot; nothing for a direct
    /// limiter's one word), found once per check for its lock-free attempt.
    type Spot<'a>: Copy
    where
        Self: 'a;
    /// Finds where the word lives and starts loading it into the cache, where it may be far
    /// (a keyed table's slot): [`check_now`] does so before it reads the clock
    /// (`prefetch.rs`). Reading nothing the caller sees, it changes nothing.
    fn locate(&self) -> Self::Spot<'_>;
}

/// Admits `n` cells under `gcra` at `now`, or writes nothing: `check` and, with `write`
/// false, `peek`. Only a writing check counts in the statistics.
///
/// The hot path is the word's lock-free attempt ([`Word::try_update_recording`]), inlined
/// into the caller with everything in registers; anything else (a key to insert, a slot
/// frozen by the shard lock) starts over in `check_slow`, out of line. The step is pure (it
/// captures by value and returns the state it replaced beside the verdict), so running it
/// again there changes nothing.
///
/// `check_slow` takes the word (a cheap handle: `Clone`) and the quota by value, in parts: a
/// reference, or the quota as one struct, would need them in memory, and the compiler stores
/// them up front, on the hot path too. Always inlined, so that the public method around it
/// makes the one inlining decision (left out of line, `check` took its quota through memory).
#[inline(always)]
pub(crate) fn check(
    word: &(impl Word + Clone),
    n: u32,
    gcra: Gcra,
    now: u64,
    write: bool,
) -> Result<Admitted, Error> {
    check_located(word, word.locate(), n, gcra, now, write)
}

/// [`check`] of a word already located ([`Word::locate`]): by `check_now` after its clock
/// read, and by a batch (`limiter/batch.rs`) some keys after.
#[inline(always)]
pub(crate) fn check_located<W: Word + Clone>(
    word: &W,
    spot: W::Spot<'_>,
    n: u32,
    gcra: Gcra,
    now: u64,
    write: bool,
) -> Result<Admitted, Error> {
    fits(gcra, n).map_err(|burst| Error::InsufficientCapacity {
        requested: n,
        burst,
    })?;
    match word.try_update_recording(spot, check_step(n, gcra, now, write)) {
        Ok(((verdict, prev), epoch)) => decided(word, gcra, now, write, verdict, prev, epoch),
        Err(miss) => check_slow(
            word.clone(),
            n,
            gcra.interval,
            gcra.tolerance,
            gcra.burst,
            now,
            write,
            miss,
        ),
    }
}

/// [`check`] through the word's general update (the locked path included).
#[cold]
#[inline(never)]
#[allow(clippy::too_many_arguments)] // in parts on purpose: see `check`
fn check_slow<W: Word>(
    word: W,
    n: u32,
    interval: u64,
    tolerance: u64,
    burst: u32,
    now: u64,
    write: bool,
    miss: W::Miss,
) -> Result<Admitted, Error> {
    let gcra = Gcra {
        interval,
        tolerance,
        burst,
    };
    let word = &word;
    let ((verdict, prev), epoch) = word
        .update_recording(now, check_step(n, gcra, now, write), miss)
        .map_err(|Full| Error::TableFull {
            capacity: word.capacity(),
        })?;
    decided(word, gcra, now, write, verdict, prev, epoch)
}

/// What a check's verdict on a stored TAT: `(write, (verdict, prev))`, where `verdict` is
/// the new TAT or the instant the cells would be admitted at, and `prev` the TAT it replaces.
///
/// It captures by value and returns `prev` rather than storing it through a reference: a
/// captured reference gives the caller's locals an address that the table's locked path can
/// reach, and the compiler then keeps them in memory on the hot path too, a store per local
/// before the CAS, which on x86 waits for the store buffer to drain (scenario A).
#[inline]
fn check_step(
    n: u32,
    gcra: Gcra,
    now: u64,
    write: bool,
) -> impl FnMut(u64) -> Step<(Result<u64, u64>, u64)> {
    move |tat| {
        if n == 0 {
            return (None, (Ok(tat), tat));
        }
        match gcra.decide(tat, now, n) {
            Decision::Admit { new_tat } => (write.then_some(new_tat), (Ok(new_tat), tat)),
            Decision::Deny { admit_at } => (None, (Err(admit_at), tat)),
        }
    }
}

/// Counts a check's verdict and turns it into its result.
#[inline]
fn decided(
    word: &impl Word,
    gcra: Gcra,
    now: u64,
    write: bool,
    verdict: Result<u64, u64>,
    prev: u64,
    epoch: u64,
) -> Result<Admitted, Error> {
    if write {
        word.count(verdict.is_ok());
    }
    match verdict {
        Ok(tat) => Ok(Admitted::new(gcra, now, Written { prev, tat, epoch })),
        Err(admit_at) => Err(Error::RateLimited {
            earliest: Timestamp::from_nanos(admit_at),
            wait: Duration::from_nanos(admit_at.saturating_sub(now)),
            limit: gcra.burst,
        }),
    }
}

/// [`check`] on the word's own clock, under `quota` or, if `None`, the limiter's.
///
/// The word is located, and so prefetched, before the clock is read: the clock read waits
/// for earlier loads but not for a prefetch, so a word that misses the cache is on its way
/// during the read instead of after it (`prefetch.rs`; BENCHMARKS.md, B and E). The probe
/// then starts from that spot, not from a second lookup of the shard and home slot.
/// Always inlined, as `check`.
#[inline(always)]
pub(crate) fn check_now(
    word: &(impl Word + Clone),
    n: u32,
    quota: Option<Gcra>,
    write: bool,
) -> Result<Admitted, Error> {
    let spot = word.locate();
    let now = word.now();
    // After the clock read: read before it, the quota's words would be live across the
    // clock's call, kept in saved registers or on the stack (4 instructions a check).
    let gcra = quota.unwrap_or_else(|| word.quota());
    check_located(word, spot, n, gcra, now, write)
}

/// Pushes the next admission at least `delay` past `now`, keeping any later one. Returns
/// the state it stored, if it moved it (a later one was not there already).
pub(crate) fn penalize(
    word: &impl Word,
    gcra: Gcra,
    now: u64,
    delay: u64,
) -> Result<Option<u64>, Full> {
    if delay == 0 {
        return Ok(None);
    }
    word.update(now, |tat| {
        let target = gcra.penalized(tat, now, delay);
        let moved = (target > tat).then_some(target);
        (moved, moved)
    })
}

/// Gives back what `written` stored, if the word still holds exactly that in the same
/// incarnation (module docs). Returns whether it did.
pub(crate) fn undo(word: &impl Word, written: Written) -> bool {
    if written.prev == written.tat || written.epoch % 2 == 1 {
        return false; // It stored nothing, or raced a removal (module docs).
    }
    let step = |tat| {
        // The epoch is read after the load that gave `tat` (module docs).
        let exact = tat == written.tat && word.epoch() == written.epoch;
        (exact.then_some(written.prev), exact)
    };
    // The only write that lowers a TAT: `update_lowering` (a keyed table's locked path),
    // which never inserts a key the table no longer holds.
    word.update_lowering(word.now(), step).unwrap_or(false)
}

/// Why cells could not be reserved. Nothing is held afterwards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failure {
    /// The cells would be admitted at this instant, after the caller's bound.
    TooLong { admit_at: u64 },
    /// The key is not in the table, which refuses new keys.
    TableFull,
    /// More cells than the burst (the quota may have changed since the caller looked).
    OverBurst { burst: u32 },
}

/// A reservation: cells counted from `admit_at` on, written into the word.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Reserved {
    /// The `now` the reservation was computed at.
    pub(crate) now: u64,
    /// When the cells are admitted (possibly before `now`: at once).
    pub(crate) admit_at: u64,
    /// What it wrote, for a refund ([`undo`]).
    pub(crate) written: Written,
}

impl Reserved {
    /// The instant the cells count as admitted at: `admit_at`, or `now` if that is later.
    pub(crate) fn instant(&self) -> u64 {
        self.admit_at.max(self.now)
    }
}

/// Reserves `n` cells as GCRA would at `now`, whenever they come, unless they would be
/// admitted after `latest`: then writes nothing and fails with the instant they would have.
pub(crate) fn reserve(
    word: &impl Word,
    n: u32,
    gcra: Gcra,
    now: u64,
    latest: u64,
) -> Result<Reserved, Failure> {
    fits(gcra, n).map_err(|burst| Failure::OverBurst { burst })?;
    let epoch = word.epoch();
    let step = |prev| {
        let (admit_at, tat) = gcra.reserve(prev, now, n);
        if admit_at > latest {
            return (None, Err(Failure::TooLong { admit_at }));
        }
        let written = Written { prev, tat, epoch };
        (
            Some(tat),
            Ok(Reserved {
                now,
                admit_at,
                written,
            }),
        )
    };
    match word.update(now, step) {
        Ok(verdict) => verdict,
        Err(Full) => Err(Failure::TableFull),
    }
}

/// `n` must fit the burst; else the burst, for the error.
#[inline]
fn fits(gcra: Gcra, n: u32) -> Result<(), u32> {
    if n > gcra.burst {
        Err(gcra.burst)
    } else {
        Ok(())
    }
}

/// An owned `Arc` that derefs to itself, so that a word over `&Arc<Shared>` (borrowed by a
/// limiter's method or future) and one over `OwnedShared<Shared>` (held by the timer) share
/// one implementation (`P: Deref<Target = Arc<Shared>>`).
#[derive(Debug)]
pub(crate) struct OwnedShared<T>(pub(crate) Arc<T>);

impl<T> Clone for OwnedShared<T> {
    fn clone(&self) -> Self {
        OwnedShared(Arc::clone(&self.0))
    }
}

impl<T> Deref for OwnedShared<T> {
    type Target = Arc<T>;

    fn deref(&self) -> &Arc<T> {
        &self.0
    }
}
