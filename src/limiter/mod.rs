//! [`Limiter`]: the keyed limiter, one GCRA state per key in a lock-free table.

mod batch;
mod builder;
mod wait;

pub use builder::LimiterBuilder;
pub use wait::UntilReady;

use std::any::TypeId;
use std::borrow::Borrow;
use std::fmt;
use std::hash::{BuildHasher, Hash};
use std::marker::PhantomData;
use std::ops::Deref;
use std::time::Duration;

use crate::clock_source::ClockSource;
use crate::engine::{self, Word};
use crate::error::Error;
use crate::gcra::Gcra;
use crate::gcra::MAX_NOW;
use crate::hash::RandomState;
use crate::outcome::Admitted;
use crate::quota::Quota;
use crate::quota_cell::QuotaCell;
use crate::stats::{Counters, Stats};
use crate::sync::Arc;
use crate::table::{Full, Miss, Spot, Step, Table, fingerprint};
use crate::time::{Timestamp, saturating_nanos};
use crate::wait::{Cells, KEYED_SHARDS, Waitlists};

/// A keyed rate limiter: every key gets its own [`Quota`], enforced with GCRA.
///
/// Cloning is cheap and every clone enforces the *same* limits (the state is shared), so one
/// limiter can be handed to every thread, task and request handler.
///
/// Keys are never stored: the table keeps a 64-bit fingerprint per key from a randomly
/// seeded hash (see [`RandomState`]), so memory per key is the same for a `u64` and a long
/// `String`. Expired keys are reclaimed automatically, or, by default, kept up to a second
/// where they come back ([`keep_expired`](crate::LimiterBuilder::keep_expired));
/// memory grows with the live keys up to [`capacity`](Limiter::capacity), and a full table
/// follows its [`FullPolicy`](crate::FullPolicy).
///
/// # Examples
///
/// ```
/// use tollgate::{Limiter, Quota};
///
/// let limiter = Limiter::keyed(Quota::per_second(2));
/// assert!(limiter.check("10.0.0.1").is_ok());
/// assert!(limiter.check("10.0.0.1").is_ok());
/// let err = limiter.check("10.0.0.1").unwrap_err();
/// assert!(err.retry_after().unwrap() <= std::time::Duration::from_millis(500));
/// assert!(limiter.check("10.0.0.2").is_ok()); // another key, another limit
/// ```
pub struct Limiter<K: ?Sized, S = RandomState> {
    shared: Arc<Shared<S>>,
    _key: PhantomData<fn(&K)>,
}

/// The state every clone of a limiter shares (the waiting futures use it directly).
pub(crate) struct Shared<S> {
    pub(crate) table: Table,
    pub(crate) quota: QuotaCell,
    pub(crate) clock: ClockSource,
    identity: RandomState,
    router: S,
    pub(crate) counters: Counters,
    /// The queues of keys with waiters (`wait/`); `check` never touches them.
    pub(crate) waitlists: Waitlists,
}

/// How long after its TAT has passed a key may be reclaimed (1 ms, in nanoseconds).
///
/// Callers' `now`s disagree by the time between a clock read and the table operation (or by
/// more, see `Shard::update_locked`'s horizon). A key forgotten while still live for a
/// caller that is behind would make that caller treat every new key of the shard as no
/// older than the forgotten TAT: with burst 1, a refusal of a first request. Forgetting
/// keys only a millisecond after they expire keeps that to callers stalled for longer.
/// Expired keys cost their slot that much longer; a full table refusing new keys may
/// refuse while its keys are in this millisecond.
const RECLAIM_GRACE: u64 = 1_000_000;

impl<S> Shared<S> {
    /// Runs `f` on the key's TAT in the table (see `Table::update`), letting the table reclaim
    /// keys whose TAT is `RECLAIM_GRACE` behind `now`.
    #[inline]
    pub(crate) fn update_key<R>(
        &self,
        route: u64,
        fp: u64,
        now: u64,
        f: impl FnMut(u64) -> Step<R>,
    ) -> Result<R, Full> {
        self.table
            .update(route, fp, now.saturating_sub(RECLAIM_GRACE), f)
    }
}

impl<K: Hash + ?Sized> Limiter<K> {
    /// A keyed limiter with the default configuration: monotonic clock, capacity
    /// [`LimiterBuilder::DEFAULT_CAPACITY`] keys, evict-closest-to-expiry when full.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{LimiterBuilder, Limiter, Quota};
    ///
    /// let limiter = Limiter::keyed(Quota::per_minute(1));
    /// assert_eq!(limiter.capacity(), LimiterBuilder::<str>::DEFAULT_CAPACITY);
    /// assert!(limiter.check("alice").is_ok());
    /// assert!(limiter.check("alice").is_err());
    /// ```
    pub fn keyed(quota: Quota) -> Limiter<K> {
        Limiter::builder(quota).build()
    }

    /// A builder to choose capacity, presizing, shards, router, clock and full-table policy.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{FullPolicy, Limiter, Quota};
    ///
    /// let limiter = Limiter::builder(Quota::per_minute(1))
    ///     .shards(1)
    ///     .capacity(1)
    ///     .full_policy(FullPolicy::RefuseNewKeys)
    ///     .build();
    /// assert!(limiter.check(&1).is_ok());
    /// assert!(limiter.check(&2).unwrap_err().is_table_full());
    /// ```
    pub fn builder(quota: Quota) -> LimiterBuilder<K> {
        LimiterBuilder::new(quota)
    }
}

impl<K: ?Sized, S: BuildHasher + 'static> Limiter<K, S> {
    pub(crate) fn from_parts(
        table: Table,
        quota: Quota,
        clock: ClockSource,
        router: S,
    ) -> Limiter<K, S> {
        Limiter {
            shared: Arc::new(Shared {
                table,
                quota: QuotaCell::new(quota),
                clock,
                identity: RandomState::new(),
                router,
                counters: Counters::new(),
                waitlists: Waitlists::new(KEYED_SHARDS),
            }),
            _key: PhantomData,
        }
    }

    /// `(route, fingerprint)`: the shard hash and the identity of `key`.
    #[inline]
    pub(crate) fn hashes<Q: Hash + ?Sized>(&self, key: &Q) -> (u64, u64) {
        let id = self.shared.identity.hash_one(key);
        // With the default router the identity hash routes too: one hash per check. A custom
        // router only picks the shard; identity stays with our seeded hash either way.
        let route = if TypeId::of::<S>() == TypeId::of::<RandomState>() {
            id
        } else {
            self.shared.router.hash_one(key)
        };
        (route, fingerprint(id))
    }

    /// The same limiter, taking its keys in a borrowed form `Q`: `&str` for `String` keys,
    /// `&[u8]` for `Vec<u8>`. Every operation sees the same state, since `Borrow` promises
    /// that `K` and `Q` hash alike. A cheap handle (one reference count), like a clone.
    ///
    /// The key type of a limiter is inferred from its first use, so it takes `&K`; this is
    /// how a limiter of owned keys is asked with a borrowed one.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Limiter, Quota};
    ///
    /// let limiter = Limiter::keyed(Quota::per_minute(1));
    /// assert!(limiter.check(&String::from("alice")).is_ok()); // the key type is String
    /// let by_str = limiter.borrowed::<str>();
    /// assert!(by_str.check("alice").is_err()); // the same key: her cell is used
    /// ```
    pub fn borrowed<Q>(&self) -> Limiter<Q, S>
    where
        K: Borrow<Q>,
        Q: Hash + ?Sized,
    {
        Limiter {
            shared: Arc::clone(&self.shared),
            _key: PhantomData,
        }
    }

    /// `key`'s state word, for the engine.
    #[inline]
    pub(crate) fn state(&self, key: &K) -> KeyState<&Arc<Shared<S>>>
    where
        K: Hash,
    {
        let (route, fp) = self.hashes(key);
        self.state_hashed(route, fp)
    }

    /// The state word of the key with these hashes.
    #[inline]
    pub(crate) fn state_hashed(&self, route: u64, fp: u64) -> KeyState<&Arc<Shared<S>>> {
        KeyState {
            shared: &self.shared,
            route,
            fp,
        }
    }

    /// The current time on this limiter's clock, for the `_at` methods.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Limiter, ManualClock, Quota, Timestamp};
    ///
    /// let clock = ManualClock::new();
    /// let limiter = Limiter::builder(Quota::per_second(1))
    ///     .clock(clock.clone())
    ///     .build();
    /// assert_eq!(limiter.now(), Timestamp::ZERO);
    /// clock.advance(Duration::from_millis(5));
    /// assert_eq!(limiter.now(), Timestamp::from_nanos(5_000_000));
    /// assert!(limiter.check("alice").is_ok());
    /// ```
    #[inline]
    pub fn now(&self) -> Timestamp {
        self.shared.clock.now()
    }

    /// Admits one cell for `key` if its rate allows, recording it; otherwise records nothing.
    ///
    /// Known keys take no lock and allocate nothing: a hash, a short probe and one CAS.
    ///
    /// Each call reads the limiter's clock, and that read is most of the call's time (about
    /// two thirds for a hot key with the default monotonic clock; `BENCHMARKS.md`, scenario
    /// A). A server that handles requests in batches, such as a proxy's event loop, should
    /// read [`now`](Limiter::now) once per turn and pass it to
    /// [`check_at`](Limiter::check_at).
    ///
    /// # Errors
    ///
    /// [`Error::RateLimited`] with the time to retry, or [`Error::TableFull`] for
    /// a new key when the table is full under [`FullPolicy::RefuseNewKeys`](crate::FullPolicy).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Limiter, Quota};
    ///
    /// let limiter = Limiter::keyed(Quota::per_minute(1));
    /// assert_eq!(limiter.check("alice").unwrap().remaining(), 0);
    /// assert!(limiter.check("alice").unwrap_err().is_rate_limited());
    /// assert!(limiter.check("bob").is_ok()); // each key has its own limit
    /// ```
    #[inline]
    pub fn check(&self, key: &K) -> Result<Admitted, Error>
    where
        K: Hash,
    {
        engine::check_now(&self.state(key), 1, None, true)
    }

    /// Admits `n` cells at once for `key`, or none.
    ///
    /// `n = 0` is always admitted and writes nothing (the statistics count it as an admitted
    /// check).
    ///
    /// # Errors
    ///
    /// As [`check`](Limiter::check), plus [`Error::InsufficientCapacity`] when `n`
    /// exceeds the burst (such a request can never pass; waiting does not help).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Limiter, Quota};
    ///
    /// let limiter = Limiter::keyed(Quota::per_second(10));
    /// assert!(limiter.check_n(&7, 10).is_ok());
    /// assert!(limiter.check_n(&7, 11).unwrap_err().is_insufficient_capacity());
    /// ```
    #[inline]
    pub fn check_n(&self, key: &K, n: u32) -> Result<Admitted, Error>
    where
        K: Hash,
    {
        engine::check_now(&self.state(key), n, None, true)
    }

    /// [`check`](Limiter::check) at a time the caller read from [`now`](Limiter::now), so a
    /// batch of checks reads the clock once.
    ///
    /// This is the fast path, and the one to use in a proxy or any server with an event
    /// loop: read `now()` once per turn of the loop and check every request of that turn at
    /// it. For a hot key that is about a third of what `check` costs (`BENCHMARKS.md`,
    /// scenario A, and the curve's `check_at` column); a turn's requests are microseconds
    /// apart, well inside any quota's resolution. With the turn's keys in hand,
    /// [`check_batch_at`](Limiter::check_batch_at) also overlaps their cache misses.
    ///
    /// Threads may pass times that disagree (each read its clock at its own moment, or
    /// stamps a whole batch with one reading). The window guarantee holds for every key
    /// whose own times never go backwards, whatever the other keys' callers pass: when a
    /// caller far ahead reclaims an expired key, a caller still behind does not get a fresh
    /// burst for it, because a forgotten key is treated as having the latest state its shard
    /// forgot. The price is that a *new* key checked at a time behind that horizon starts
    /// from it (at most as late as some caller's `now`), as if its burst had been spent up
    /// to then: judged at its own earlier time, it has that much less of its burst, and a
    /// key of burst 1 checked more than a millisecond behind is refused until the horizon.
    /// Keys are reclaimed only a millisecond after they expire, so only a caller more than a
    /// millisecond behind the others pays it.
    ///
    /// Times must come from this limiter's clock. A time far ahead of the others (from
    /// another clock, say) fails closed: keys that caller checks, once forgotten, hold back
    /// the new keys of their shard until the clock catches up, instead of handing out fresh
    /// bursts.
    ///
    /// # Errors
    ///
    /// As [`check`](Limiter::check).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Limiter, Quota};
    ///
    /// let limiter = Limiter::keyed(Quota::per_second(1));
    /// let now = limiter.now(); // one clock read for the batch
    /// assert!(limiter.check_at(&7, now).is_ok());
    /// assert!(limiter.check_at(&7, now).is_err());
    /// assert!(limiter.check_at(&7, now + Duration::from_secs(1)).is_ok());
    /// ```
    #[inline]
    pub fn check_at(&self, key: &K, now: Timestamp) -> Result<Admitted, Error>
    where
        K: Hash,
    {
        self.check_n_at(key, 1, now)
    }

    /// [`check_n`](Limiter::check_n) at a caller-supplied time.
    ///
    /// # Errors
    ///
    /// As [`check_n`](Limiter::check_n).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Limiter, Quota};
    ///
    /// let limiter = Limiter::keyed(Quota::per_second(10));
    /// let now = limiter.now();
    /// assert_eq!(limiter.check_n_at(&7, 4, now).unwrap().remaining(), 6);
    /// assert!(limiter.check_n_at(&7, 7, now).unwrap_err().is_rate_limited());
    /// assert!(limiter.check_n_at(&7, 11, now).unwrap_err().is_insufficient_capacity());
    /// ```
    // Always: the check is a few dozen instructions once inlined; out of line (as a caller
    // in another crate got it) its result travels through memory and is copied twice.
    #[inline(always)]
    pub fn check_n_at(&self, key: &K, n: u32, now: Timestamp) -> Result<Admitted, Error>
    where
        K: Hash,
    {
        let now = now.as_nanos().min(MAX_NOW);
        engine::check(&self.state(key), n, self.shared.quota.gcra(), now, true)
    }

    /// [`check`](Limiter::check) under `quota` instead of the limiter's own, for this call
    /// only: one limiter for keys with different rates (a crawler obeying each host's
    /// `Crawl-delay`, free and paid API tiers). Nothing is stored per key beyond its state.
    ///
    /// A key's state is one theoretical arrival time (TAT), and each call judges it by the
    /// quota it brings: a request of `n` cells under a quota of interval `T` and burst `b`
    /// is admitted iff `max(TAT, now) + n·T - b·T <= now`, and moves the TAT to
    /// `max(TAT, now) + n·T`. So what a key has used carries over between quotas as *time*:
    /// a key that used its burst under a fast quota and is then checked under a slow one
    /// waits out the fast quota's debt, not the slow one's. Over any window `W`, the cells
    /// admitted satisfy `sum(n·T) <= W + max(b·T)` over the quotas used, which is the window
    /// guarantee `b + W/T` when one quota is used throughout.
    /// [`set_quota`](Limiter::set_quota) changes only the default, which calls without a
    /// quota of their own use.
    ///
    /// # Errors
    ///
    /// As [`check`](Limiter::check).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Limiter, Quota};
    ///
    /// let free = Quota::per_minute(2);
    /// let paid = Quota::per_minute(100);
    /// let limiter = Limiter::keyed(free); // the default, for calls without a quota
    /// assert!(limiter.check_with("paid-user", paid).is_ok());
    /// assert_eq!(limiter.check_with("paid-user", paid).unwrap().remaining(), 98);
    /// assert!(limiter.check("free-user").is_ok());
    /// assert!(limiter.check("free-user").is_ok());
    /// assert!(limiter.check("free-user").is_err());
    /// ```
    #[inline]
    pub fn check_with(&self, key: &K, quota: Quota) -> Result<Admitted, Error>
    where
        K: Hash,
    {
        self.check_n_with(key, 1, quota)
    }

    /// [`check_n`](Limiter::check_n) under `quota`, as [`check_with`](Limiter::check_with).
    ///
    /// # Errors
    ///
    /// As [`check_n`](Limiter::check_n), with the burst of `quota`.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Limiter, Quota};
    ///
    /// let limiter = Limiter::keyed(Quota::per_second(1));
    /// let bulk = Quota::per_second(100);
    /// assert_eq!(limiter.check_n_with(&7, 60, bulk).unwrap().remaining(), 40);
    /// assert!(limiter.check_n_with(&7, 101, bulk).unwrap_err().is_insufficient_capacity());
    /// ```
    #[inline]
    pub fn check_n_with(&self, key: &K, n: u32, quota: Quota) -> Result<Admitted, Error>
    where
        K: Hash,
    {
        engine::check_now(&self.state(key), n, Some(Gcra::new(quota)), true)
    }

    /// What [`check`](Limiter::check) would answer now, consuming nothing and counting
    /// nothing: for rate-limit headers on a response that did not ask for a cell, or to skip
    /// work that would be refused. A new key is never inserted; a peek cannot tell that a
    /// full table would refuse it ([`Error::TableFull`] comes only from a check).
    ///
    /// # Errors
    ///
    /// [`Error::RateLimited`] if a check would be refused.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Limiter, Quota};
    ///
    /// let limiter = Limiter::keyed(Quota::per_minute(2));
    /// assert_eq!(limiter.peek("alice").unwrap().remaining(), 1); // as a check would say
    /// assert_eq!(limiter.peek("alice").unwrap().remaining(), 1); // and nothing was used
    /// limiter.check_n("alice", 2).unwrap();
    /// assert!(limiter.peek("alice").unwrap_err().is_rate_limited());
    /// assert_eq!(limiter.count_live_keys(), 1); // peeking at new keys stores nothing
    /// ```
    pub fn peek(&self, key: &K) -> Result<Admitted, Error>
    where
        K: Hash,
    {
        engine::check_now(&self.state(key), 1, None, false)
    }

    /// [`peek`](Limiter::peek) under `quota`, as [`check_with`](Limiter::check_with).
    ///
    /// # Errors
    ///
    /// As [`peek`](Limiter::peek).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Limiter, Quota};
    ///
    /// let limiter = Limiter::keyed(Quota::per_minute(1));
    /// let two = Quota::per_minute(2);
    /// limiter.check_with("alice", two).unwrap(); // 30 s of her time used
    /// assert!(limiter.peek("alice").is_err()); // one a minute: no room for another 60 s
    /// assert!(limiter.peek_with("alice", two).is_ok()); // two a minute: room for 30 s more
    /// ```
    pub fn peek_with(&self, key: &K, quota: Quota) -> Result<Admitted, Error>
    where
        K: Hash,
    {
        engine::check_now(&self.state(key), 1, Some(Gcra::new(quota)), false)
    }

    /// Gives back the cells of an admission of `key` that was not used: for stacked limits,
    /// where a refusal by a later limit should cost the earlier ones nothing (see
    /// [`check_all`](crate::check_all)). Exact when nothing else wrote `key`'s state since:
    /// the key is as if the check had never happened. Otherwise (another admission stacked
    /// on it, a penalty, a reset) it writes nothing and returns `false`: the cells count as
    /// used, never as an extra cell. Other keys coming and going meanwhile change nothing,
    /// except a reset or a forced eviction of a key that shares `key`'s table shard, after
    /// which an undo is refused the same way. The statistics still count the admission.
    ///
    /// `admitted` must come from this limiter and `key` (an admission of another key or
    /// limiter is almost always a no-op, but not provably so), and be given back once.
    /// `Admitted` is `Copy`, so nothing stops a second `undo` of it: that one is a no-op
    /// while the key holds the state the first restored, but once a later check has stored
    /// exactly what this admission stored (the same cells at the same instant: a
    /// [`ManualClock`](crate::ManualClock), or one `check_at` time), the two admissions are
    /// the same state, and the second `undo` gives back the later check's cells.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Limiter, Quota};
    ///
    /// let limiter = Limiter::keyed(Quota::per_minute(1));
    /// let ok = limiter.check("alice").unwrap();
    /// assert!(limiter.check("alice").is_err());
    /// assert!(limiter.undo("alice", ok)); // the work was never done: give the cell back
    /// assert!(limiter.check("alice").is_ok());
    /// ```
    pub fn undo(&self, key: &K, admitted: Admitted) -> bool
    where
        K: Hash,
    {
        engine::undo(&self.state(key), admitted.written())
    }

    /// Forgets `key`: its next request is treated as its first. Returns whether the key held
    /// any state: whether it was live (its next cells not all back yet), as
    /// [`DirectLimiter::reset`](crate::DirectLimiter::reset) answers, whether or not the
    /// table still kept the key after it expired.
    ///
    /// Waiters already queued on the key keep their places: the head is admitted at its
    /// instant (its reservation was forgotten with the rest), and those behind it reserve in
    /// the key's new history, after whatever checks took the fresh burst meanwhile.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Limiter, Quota};
    ///
    /// let limiter = Limiter::keyed(Quota::per_minute(1));
    /// assert!(!limiter.reset("alice")); // never seen
    /// limiter.check("alice").unwrap();
    /// assert!(limiter.check("alice").is_err());
    /// assert!(limiter.reset("alice"));
    /// assert!(limiter.check("alice").is_ok()); // a fresh start
    /// ```
    pub fn reset(&self, key: &K) -> bool
    where
        K: Hash,
    {
        let (route, fp) = self.hashes(key);
        let now = self.now().as_nanos().min(MAX_NOW);
        self.shared.table.remove(route, fp, now)
    }

    /// Pushes `key`'s next admission at least `delay` from now, keeping any later one: for
    /// escalating against abuse, or honouring a server's `Retry-After`. Durations too long
    /// to represent saturate (about 36 years). Waiters too: the head of the key's queue,
    /// whose cell was reserved before the penalty, reserves again after it (a bounded one
    /// whose bound that passes fails with [`Error::RateLimited`]), and the others follow.
    ///
    /// The push is measured under the limiter's own quota. A check under a per-call quota
    /// ([`check_with`](Limiter::check_with), [`until_ready_with`](Limiter::until_ready_with))
    /// tolerates `(burst - 1) × interval` of its own, so one with a larger tolerance than the
    /// limiter's passes that much sooner: penalize such keys only when their per-call
    /// quotas have the limiter's tolerance (tollgate-client's adaptive rates use burst 1
    /// throughout).
    ///
    /// # Errors
    ///
    /// [`Error::TableFull`] if the key is new and the table refuses new keys.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Limiter, ManualClock, Quota};
    ///
    /// let clock = ManualClock::new();
    /// let limiter = Limiter::builder(Quota::per_second(100)).clock(clock.clone()).build();
    /// limiter.penalize("api.example.com", Duration::from_secs(30)).unwrap();
    /// assert_eq!(
    ///     limiter.check("api.example.com").unwrap_err().retry_after(),
    ///     Some(Duration::from_secs(30))
    /// );
    /// ```
    ///
    /// Under a per-call quota:
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Limiter, ManualClock, Quota};
    ///
    /// let paced = Quota::per_second(1).allow_burst(1);
    /// let limiter = Limiter::builder(paced).clock(ManualClock::new()).build();
    /// limiter.penalize("h", Duration::from_secs(10)).unwrap();
    /// let wait = |q| limiter.check_with("h", q).unwrap_err().retry_after();
    /// assert_eq!(wait(paced), Some(Duration::from_secs(10))); // the same tolerance: exact
    /// assert_eq!(wait(paced.allow_burst(5)), Some(Duration::from_secs(6))); // 4 s of it
    /// ```
    pub fn penalize(&self, key: &K, delay: Duration) -> Result<(), Error>
    where
        K: Hash,
        S: Send + Sync,
    {
        (self.state(key).penalize(saturating_nanos(delay))).map_err(|Full| Error::TableFull {
            capacity: self.capacity(),
        })
    }

    /// The current quota.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Limiter, Quota};
    ///
    /// let limiter = Limiter::keyed(Quota::per_second(5));
    /// assert_eq!(limiter.quota(), Quota::per_second(5));
    /// assert_eq!(limiter.quota().interval(), Duration::from_millis(200));
    /// assert_eq!(limiter.check("alice").unwrap().remaining(), 4);
    /// ```
    #[inline]
    pub fn quota(&self) -> Quota {
        self.shared.quota.quota()
    }

    /// Replaces the quota for every key at once. Stored states are kept: a key that just used
    /// its burst does not get a fresh one.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Limiter, Quota};
    ///
    /// let limiter = Limiter::keyed(Quota::per_minute(1));
    /// limiter.check("alice").unwrap();
    /// limiter.set_quota(Quota::per_minute(2));
    /// assert_eq!(limiter.quota().burst(), 2);
    /// assert!(limiter.check("alice").is_err()); // her used cell still counts
    /// assert_eq!(limiter.check("bob").unwrap().remaining(), 1); // a new key gets the new burst
    /// ```
    pub fn set_quota(&self, quota: Quota) {
        self.shared.quota.store(quota);
    }

    /// Counts the keys whose state still carries information (their TAT is ahead of now):
    /// a lock-free scan of every slot, O(capacity), so not for a hot path. [`stats`](Limiter::stats)
    /// reports it with the other figures.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Limiter, ManualClock, Quota};
    ///
    /// let clock = ManualClock::new();
    /// let limiter = Limiter::builder(Quota::per_second(1)).clock(clock.clone()).build();
    /// assert_eq!(limiter.count_live_keys(), 0);
    /// for key in [1, 2, 2] {
    ///     let _ = limiter.check(&key);
    /// }
    /// assert_eq!(limiter.count_live_keys(), 2);
    /// clock.advance(Duration::from_secs(1)); // their states have expired
    /// assert_eq!(limiter.count_live_keys(), 0);
    /// ```
    pub fn count_live_keys(&self) -> usize {
        // On the limiter's time, which saturates as every check's does.
        self.shared
            .table
            .live_keys(self.now().as_nanos().min(MAX_NOW))
    }

    /// The most keys this limiter holds at once.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Limiter, Quota};
    ///
    /// let limiter = Limiter::builder(Quota::per_second(1))
    ///     .shards(4)
    ///     .capacity(1_000)
    ///     .build();
    /// assert_eq!(limiter.capacity(), 1_000);
    /// assert!(limiter.check("alice").is_ok());
    /// ```
    pub fn capacity(&self) -> usize {
        self.shared.table.capacity()
    }

    /// A snapshot of counters and memory (takes each shard's lock briefly, and scans the
    /// table for `live_keys`).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Limiter, Quota};
    ///
    /// let limiter = Limiter::keyed(Quota::per_minute(1));
    /// limiter.check("alice").unwrap();
    /// assert!(limiter.check("alice").is_err());
    /// let stats = limiter.stats();
    /// assert_eq!((stats.admitted, stats.denied, stats.live_keys), (1, 1, 1));
    /// assert_eq!(stats.capacity, limiter.capacity());
    /// ```
    pub fn stats(&self) -> Stats {
        let shared = &*self.shared;
        let (admitted, denied) = shared.counters.totals();
        let table = shared.table.counts();
        Stats {
            admitted,
            denied,
            live_keys: self.count_live_keys(),
            keys_held: table.keys_held,
            expired_reclaimed: table.reclaimed,
            forced_evictions: table.evicted,
            refused_keys: table.refused,
            compactions: table.compactions,
            bytes: table.bytes
                + shared.counters.bytes()
                + shared.waitlists.bytes()
                + std::mem::size_of::<Shared<S>>(),
            capacity: shared.table.capacity(),
        }
    }
}

/// One key of a keyed limiter: the state word the engine works on. `P` is `&Arc<Shared>` for
/// the methods and futures that borrow their limiter, `OwnedShared<Shared>` for the timer's
/// hand-over waker, which may outlive them.
#[derive(Clone)]
pub(crate) struct KeyState<P> {
    pub(crate) shared: P,
    pub(crate) route: u64,
    pub(crate) fp: u64,
}

/// The limiter it belongs to; not the key's hashes (made with the identity hasher's secret
/// seed, they are no business of a log line).
impl<P: fmt::Debug> fmt::Debug for KeyState<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyState")
            .field("shared", &self.shared)
            .finish_non_exhaustive()
    }
}

impl<P, S> Word for KeyState<P>
where
    P: Deref<Target = Arc<Shared<S>>>,
    S: 'static,
{
    #[inline]
    fn quota(&self) -> Gcra {
        self.shared.quota.gcra()
    }

    #[inline(always)]
    fn now(&self) -> u64 {
        self.shared.clock.now().as_nanos().min(MAX_NOW)
    }

    #[inline]
    fn epoch(&self) -> u64 {
        self.shared.table.removals(self.route)
    }

    #[inline]
    fn update<R>(&self, now: u64, f: impl FnMut(u64) -> Step<R>) -> Result<R, Full> {
        self.shared.update_key(self.route, self.fp, now, f)
    }

    fn update_lowering<R>(&self, _now: u64, f: impl FnMut(u64) -> Step<R>) -> Option<R> {
        (self.shared.table).update_held(self.route, self.fp, f)
    }

    #[inline]
    fn update_recording<R>(
        &self,
        now: u64,
        f: impl FnMut(u64) -> Step<R>,
        miss: Option<Miss>,
    ) -> Result<(R, u64), Full> {
        let expired_by = now.saturating_sub(RECLAIM_GRACE);
        (self.shared.table).update_recording(self.route, self.fp, expired_by, f, miss)
    }

    // Always: the engine's hot path relies on this being inlined with the step's captures
    // in registers; left to the inliner, a caller in another crate (tollgate-tower's layer)
    // got it out of line, the step spilled to memory and passed by reference.
    #[inline(always)]
    fn try_update_recording<R>(
        &self,
        spot: Spot<'_>,
        f: impl FnMut(u64) -> Step<R>,
    ) -> Result<(R, u64), Option<Miss>> {
        Table::try_update_recording(spot, self.fp, f)
    }

    type Miss = Option<Miss>;

    #[inline]
    fn count(&self, admitted: bool) {
        if admitted {
            self.shared.counters.admitted();
        } else {
            self.shared.counters.denied();
        }
    }

    fn capacity(&self) -> usize {
        self.shared.table.capacity()
    }

    type Spot<'a>
        = Spot<'a>
    where
        Self: 'a;

    #[inline(always)]
    fn locate(&self) -> Spot<'_> {
        self.shared.table.locate(self.route, self.fp)
    }
}

impl<K: ?Sized, S> Clone for Limiter<K, S> {
    fn clone(&self) -> Self {
        Limiter {
            shared: Arc::clone(&self.shared),
            _key: PhantomData,
        }
    }
}

/// What a waiting future's `Debug` shows of its limiter: its quota and cap, not the table
/// (tens of kilobytes of shards and stripes) nor the identity hasher's secret seed.
impl<S> fmt::Debug for Shared<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shared")
            .field("quota", &self.quota)
            .field("capacity", &self.table.capacity())
            .finish_non_exhaustive()
    }
}

impl<K: ?Sized, S> fmt::Debug for Limiter<K, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Limiter")
            .field("capacity", &self.shared.table.capacity())
            .finish_non_exhaustive()
    }
}
