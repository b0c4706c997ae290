//! [`DirectLimiter`]: one GCRA state for everything, in a single atomic word.

mod pace;
mod wait;

pub use pace::Paced;
pub use wait::DirectUntilReady;

use std::fmt;
use std::ops::Deref;
use std::time::Duration;

use crossbeam_utils::CachePadded;

use crate::clock_source::ClockSource;
use crate::engine::{self, Word};
use crate::error::Error;
use crate::gcra::Gcra;
use crate::gcra::MAX_NOW;
use crate::outcome::Admitted;
use crate::quota::Quota;
use crate::quota_cell::QuotaCell;
use crate::seq::Epoch;
use crate::stats::{Counters, Stats};
use crate::sync::{Arc, AtomicU64, Ordering, cas_retry_hint};
use crate::table::{Full, Step};
use crate::time::{Clock, MonotonicClock, Timestamp, saturating_nanos};
use crate::wait::{Cells, Waitlists};

/// The TAT's bits in the direct word; the generation is above them.
const TAT_BITS: u32 = 60;
const TAT_MASK: u64 = (1 << TAT_BITS) - 1;

/// An unkeyed rate limiter: one limit shared by every caller (a global request budget, one
/// upstream's quota). Its whole state is one `AtomicU64` TAT; a check is one CAS.
///
/// Cloning is cheap and clones share the limit.
///
/// # Examples
///
/// ```
/// use tollgate::{DirectLimiter, Quota};
///
/// let limiter = DirectLimiter::new(Quota::per_second(1));
/// assert!(limiter.check().is_ok());
/// assert!(limiter.check().unwrap_err().is_rate_limited());
/// ```
#[derive(Clone)]
pub struct DirectLimiter {
    shared: Arc<Shared>,
}

/// The state every clone shares (the waiting futures use it directly).
pub(crate) struct Shared {
    /// `{gen:4 | tat:60}`: the TAT in nanoseconds on `clock` (0: no information), and a
    /// generation that each `reset` advances (see `new_incarnation`).
    tat: CachePadded<AtomicU64>,
    /// The removal epoch, bumped around every `reset` (see `resets`).
    resets: Epoch,
    pub(crate) quota: QuotaCell,
    pub(crate) clock: ClockSource,
    counters: Counters,
    /// The queue of waiters (`wait/`).
    pub(crate) waitlists: Waitlists,
}

impl DirectLimiter {
    /// A limiter on the monotonic clock.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{DirectLimiter, Quota};
    ///
    /// let limiter = DirectLimiter::new(Quota::per_second(3));
    /// assert_eq!(limiter.quota(), Quota::per_second(3));
    /// assert_eq!(limiter.check().unwrap().remaining(), 2);
    /// ```
    pub fn new(quota: Quota) -> DirectLimiter {
        DirectLimiter::with_source(quota, ClockSource::Monotonic(MonotonicClock::new()))
    }

    /// A limiter on the given clock.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{DirectLimiter, ManualClock, Quota};
    ///
    /// let clock = ManualClock::new();
    /// let limiter = DirectLimiter::with_clock(Quota::per_second(1), clock.clone());
    /// assert!(limiter.check().is_ok());
    /// assert!(limiter.check().is_err());
    /// clock.advance(Duration::from_secs(1));
    /// assert!(limiter.check().is_ok());
    /// ```
    ///
    /// # Panics
    ///
    /// If a clock of your own (not one of tollgate's) already reads more than 2^58 ns (9.1
    /// years) after its origin, as one counting from the Unix epoch does: a limiter's time
    /// stops 2^59 ns after the origin ([`Clock`]).
    #[track_caller]
    pub fn with_clock(quota: Quota, clock: impl Clock) -> DirectLimiter {
        DirectLimiter::with_source(quota, ClockSource::from_clock(clock))
    }

    fn with_source(quota: Quota, clock: ClockSource) -> DirectLimiter {
        DirectLimiter {
            shared: Arc::new(Shared {
                tat: CachePadded::new(AtomicU64::new(0)),
                resets: Epoch::new(),
                quota: QuotaCell::new(quota),
                clock,
                counters: Counters::new(),
                waitlists: Waitlists::new(1),
            }),
        }
    }

    /// The current time on this limiter's clock.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{DirectLimiter, ManualClock, Quota, Timestamp};
    ///
    /// let clock = ManualClock::new();
    /// let limiter = DirectLimiter::with_clock(Quota::per_second(1), clock.clone());
    /// clock.advance(Duration::from_millis(7));
    /// assert_eq!(limiter.now(), Timestamp::from_nanos(7_000_000));
    /// ```
    #[inline]
    pub fn now(&self) -> Timestamp {
        self.shared.clock.now()
    }

    /// Admits one cell if the rate allows; otherwise records nothing.
    ///
    /// # Errors
    ///
    /// [`Error::RateLimited`] with the time to retry.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{DirectLimiter, ManualClock, Quota};
    ///
    /// let limiter = DirectLimiter::with_clock(Quota::per_second(2), ManualClock::new());
    /// assert!(limiter.check().is_ok());
    /// assert!(limiter.check().is_ok());
    /// let err = limiter.check().unwrap_err();
    /// assert_eq!(err.retry_after(), Some(Duration::from_millis(500)));
    /// ```
    #[inline]
    pub fn check(&self) -> Result<Admitted, Error> {
        self.check_n_at(1, self.now())
    }

    /// Admits `n` cells at once, or none (`n = 0` always passes and writes nothing; the
    /// statistics count it as an admitted check).
    ///
    /// # Errors
    ///
    /// [`Error::RateLimited`], or [`Error::InsufficientCapacity`] if `n` exceeds
    /// the burst.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{DirectLimiter, ManualClock, Quota};
    ///
    /// let limiter = DirectLimiter::with_clock(Quota::per_second(5), ManualClock::new());
    /// assert_eq!(limiter.check_n(3).unwrap().remaining(), 2);
    /// assert!(limiter.check_n(3).unwrap_err().is_rate_limited()); // only 2 left
    /// assert!(limiter.check_n(6).unwrap_err().is_insufficient_capacity());
    /// assert!(limiter.check_n(0).is_ok());
    /// ```
    #[inline]
    pub fn check_n(&self, n: u32) -> Result<Admitted, Error> {
        self.check_n_at(n, self.now())
    }

    /// [`check`](DirectLimiter::check) at a caller-supplied time.
    ///
    /// # Errors
    ///
    /// As [`check`](DirectLimiter::check).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{DirectLimiter, Quota};
    ///
    /// let limiter = DirectLimiter::new(Quota::per_second(1));
    /// let now = limiter.now();
    /// assert!(limiter.check_at(now).is_ok());
    /// assert!(limiter.check_at(now).is_err());
    /// assert!(limiter.check_at(now + Duration::from_secs(1)).is_ok());
    /// ```
    #[inline]
    pub fn check_at(&self, now: Timestamp) -> Result<Admitted, Error> {
        self.check_n_at(1, now)
    }

    /// [`check_n`](DirectLimiter::check_n) at a caller-supplied time.
    ///
    /// # Errors
    ///
    /// As [`check_n`](DirectLimiter::check_n).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{DirectLimiter, Quota};
    ///
    /// let limiter = DirectLimiter::new(Quota::per_second(10)); // a cell every 100 ms
    /// let now = limiter.now();
    /// assert!(limiter.check_n_at(10, now).is_ok());
    /// assert!(limiter.check_n_at(2, now + Duration::from_millis(100)).is_err());
    /// assert!(limiter.check_n_at(2, now + Duration::from_millis(200)).is_ok());
    /// ```
    #[inline]
    pub fn check_n_at(&self, n: u32, now: Timestamp) -> Result<Admitted, Error> {
        let now = now.as_nanos().min(MAX_NOW);
        engine::check(&self.state(), n, self.shared.quota.gcra(), now, true)
    }

    /// What [`check`](DirectLimiter::check) would answer now, consuming nothing and counting
    /// nothing.
    ///
    /// # Errors
    ///
    /// [`Error::RateLimited`] if a check would be refused.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{DirectLimiter, Quota};
    ///
    /// let limiter = DirectLimiter::new(Quota::per_minute(1));
    /// assert!(limiter.peek().is_ok());
    /// assert!(limiter.check().is_ok()); // the peek used nothing
    /// assert!(limiter.peek().unwrap_err().is_rate_limited());
    /// ```
    pub fn peek(&self) -> Result<Admitted, Error> {
        engine::check_now(&self.state(), 1, None, false)
    }

    /// Gives back the cells of an admission that was not used, exactly if nothing else was
    /// admitted since, else not at all; give each admission back once (see
    /// [`Limiter::undo`](crate::Limiter::undo)). Returns whether it did.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{DirectLimiter, Quota};
    ///
    /// let limiter = DirectLimiter::new(Quota::per_minute(1));
    /// let ok = limiter.check().unwrap();
    /// assert!(limiter.undo(ok));
    /// assert!(limiter.check().is_ok());
    /// ```
    pub fn undo(&self, admitted: Admitted) -> bool {
        engine::undo(&self.state(), admitted.written())
    }

    /// Counters of admitted and denied checks and waits, and the bytes held.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{DirectLimiter, Quota};
    ///
    /// let limiter = DirectLimiter::new(Quota::per_minute(1));
    /// limiter.check().unwrap();
    /// assert!(limiter.check().is_err());
    /// let stats = limiter.stats();
    /// assert_eq!((stats.admitted, stats.denied, stats.capacity), (1, 1, 1));
    /// ```
    pub fn stats(&self) -> Stats {
        let shared = &*self.shared;
        let (admitted, denied) = shared.counters.totals();
        let now = self.state().now();
        Stats {
            admitted,
            denied,
            live_keys: usize::from(shared.tat.load(Ordering::Relaxed) & TAT_MASK > now),
            keys_held: 1,
            bytes: std::mem::size_of::<Shared>()
                + shared.counters.bytes()
                + shared.waitlists.bytes(),
            capacity: 1,
            ..Stats::default()
        }
    }

    /// Forgets all history: the next request sees a full burst. Returns whether the state
    /// still carried information (a TAT ahead of now), as
    /// [`Limiter::reset`](crate::Limiter::reset) says whether the key was held.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{DirectLimiter, ManualClock, Quota};
    ///
    /// let limiter = DirectLimiter::with_clock(Quota::per_second(1), ManualClock::new());
    /// assert!(!limiter.reset()); // nothing to forget
    /// assert!(limiter.check().is_ok());
    /// assert!(limiter.check().is_err());
    /// assert!(limiter.reset());
    /// assert!(limiter.check().is_ok());
    /// ```
    pub fn reset(&self) -> bool {
        let now = self.state().now();
        // The removal epoch's protocol around the removal (`Shared::resets`).
        self.shared.resets.begin();
        let old = self.shared.new_incarnation();
        self.shared.resets.end();
        old & TAT_MASK > now
    }

    /// Pushes the next admission at least `delay` from now (keeping any later one), a
    /// waiter's too: the head of the queue, whose cell was reserved before, reserves again
    /// after the penalty (and fails, if bounded past it). Unlike
    /// [`Limiter::penalize`](crate::Limiter::penalize) it cannot fail: there is no table
    /// to fill.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{DirectLimiter, ManualClock, Quota};
    ///
    /// let limiter = DirectLimiter::with_clock(Quota::per_second(100), ManualClock::new());
    /// limiter.penalize(Duration::from_secs(30));
    /// limiter.penalize(Duration::from_secs(5)); // earlier than the first: no effect
    /// assert_eq!(limiter.check().unwrap_err().retry_after(), Some(Duration::from_secs(30)));
    /// ```
    pub fn penalize(&self, delay: Duration) {
        // A direct limiter has no table to fill.
        let _ = self.state().penalize(saturating_nanos(delay));
    }

    /// The current quota.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{DirectLimiter, Quota};
    ///
    /// let limiter = DirectLimiter::new(Quota::per_minute(60));
    /// assert_eq!(limiter.quota().interval(), Duration::from_secs(1));
    /// assert_eq!(limiter.quota().burst(), 60);
    /// ```
    pub fn quota(&self) -> Quota {
        self.shared.quota.quota()
    }

    /// Replaces the quota; the stored state is kept (no fresh burst).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{DirectLimiter, ManualClock, Quota};
    ///
    /// let limiter = DirectLimiter::with_clock(Quota::per_second(2), ManualClock::new());
    /// assert!(limiter.check_n(2).is_ok());
    /// limiter.set_quota(Quota::per_second(4));
    /// assert_eq!(limiter.quota(), Quota::per_second(4));
    /// assert!(limiter.check().is_err()); // the state is kept: no fresh burst
    /// ```
    pub fn set_quota(&self, quota: Quota) {
        self.shared.quota.store(quota);
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    #[inline]
    pub(crate) fn state(&self) -> DirectState<&Arc<Shared>> {
        DirectState(&self.shared)
    }
}

impl Shared {
    /// The removal epoch, [`Epoch`]'s protocol (the argument is there; see `engine.rs` for
    /// what it protects). The removal is `reset`'s store of TAT 0 (Release), which is also
    /// the new incarnation's first state; every later TAT is an RMW continuing its release
    /// sequence, loaded with Acquire in `update`.
    pub(crate) fn resets(&self) -> u64 {
        self.resets.read()
    }

    /// The CAS loop: `f` maps the TAT to `(write, out)`. The CAS compares the whole word,
    /// generation included, so a write computed on one incarnation never lands on the next.
    #[inline]
    fn update<R>(&self, mut f: impl FnMut(u64) -> Step<R>) -> R {
        let state = &self.tat;
        // ordering: for GCRA itself coherence on this one word suffices; Acquire (free on
        // x86) lets an undo's `f` see a reset that preceded the TAT it read (`resets`).
        let mut word = state.load(Ordering::Acquire);
        loop {
            let (write, out) = f(word & TAT_MASK);
            let Some(tat) = write else { return out };
            debug_assert!(tat <= TAT_MASK, "GCRA keeps TATs below 2^60");
            let new = (word & !TAT_MASK) | tat;
            // ordering: failure is Acquire for the same reason as the load above.
            match state.compare_exchange_weak(word, new, Ordering::Relaxed, Ordering::Acquire) {
                Ok(_) => return out,
                Err(current) => {
                    word = current;
                    cas_retry_hint();
                }
            }
        }
    }

    /// `reset`'s removal: TAT 0 under the next generation (Release: the new incarnation's
    /// first state). Without the generation, an undo that loaded the old TAT and checked the
    /// epoch before the reset could CAS its old state back over a new incarnation that had
    /// been checked back up to the same TAT (loom: `undo_during_reset_direct`). The
    /// generation wraps after 16 resets; an undo's load-to-CAS window spanning 16 resets
    /// (and a re-admission to the same TAT after each) is the only way left to fool it.
    /// Returns the word it replaced.
    fn new_incarnation(&self) -> u64 {
        // ordering: Relaxed load; the CAS below is the removal and carries the Release.
        let mut word = self.tat.load(Ordering::Relaxed);
        loop {
            let next = (word & !TAT_MASK).wrapping_add(1 << TAT_BITS);
            match self
                .tat
                .compare_exchange_weak(word, next, Ordering::Release, Ordering::Relaxed)
            {
                Ok(_) => return word,
                Err(current) => word = current,
            }
        }
    }
}

/// A direct limiter's state word, for the engine: `P` is `&Arc<Shared>` or, for the timer's
/// hand-over waker, `OwnedShared<Shared>`.
#[derive(Debug, Clone)]
pub(crate) struct DirectState<P>(pub(crate) P);

impl<P: Deref<Target = Arc<Shared>>> Word for DirectState<P> {
    #[inline]
    fn quota(&self) -> Gcra {
        self.0.quota.gcra()
    }

    #[inline(always)]
    fn now(&self) -> u64 {
        self.0.clock.now().as_nanos().min(MAX_NOW)
    }

    #[inline]
    fn epoch(&self) -> u64 {
        self.0.resets()
    }

    #[inline]
    fn update<R>(&self, _now: u64, f: impl FnMut(u64) -> Step<R>) -> Result<R, Full> {
        Ok(self.0.update(f))
    }

    type Spot<'a>
        = ()
    where
        Self: 'a;

    #[inline(always)]
    fn locate(&self) {}

    #[inline]
    fn try_update_recording<R>(
        &self,
        (): (),
        f: impl FnMut(u64) -> Step<R>,
    ) -> Result<(R, u64), ()> {
        // One word and no lock: the update is the lock-free attempt, and always lands.
        let epoch = self.epoch();
        Ok((self.0.update(f), epoch))
    }

    type Miss = ();

    #[inline]
    fn count(&self, admitted: bool) {
        if admitted {
            self.0.counters.admitted();
        } else {
            self.0.counters.denied();
        }
    }

    fn capacity(&self) -> usize {
        1
    }
}

/// What a waiting future's `Debug` shows of its limiter: its quota, not the counter stripes
/// and queues.
impl fmt::Debug for Shared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shared")
            .field("quota", &self.quota)
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for DirectLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DirectLimiter")
            .field("quota", &self.quota())
            .finish_non_exhaustive()
    }
}
