//! [`Limiter`]: the keyed limiter, one GCRA state per key in a lock-free table.

use std::any::TypeId;
use std::borrow::Borrow;
use std::fmt;
use std::hash::{BuildHasher, Hash};
use std::marker::PhantomData;
use std::time::Duration;

use crate::builder::Builder;
use crate::clock::ClockSource;
use crate::gcra::MAX_NOW;
use crate::hash::RandomState;
use crate::outcome::{Admitted, CheckError, TableFull, check_capacity, check_step, verdict};
use crate::quota::Quota;
use crate::quota_cell::QuotaCell;
use crate::stats::{Counters, Stats};
use crate::sync::Arc;
use crate::table::{Full, Table, fingerprint};
use crate::time::{Timestamp, saturating_nanos};
use crate::wait::{KEYED_SHARDS, Waitlists};

/// A keyed rate limiter: every key gets its own [`Quota`], enforced with GCRA.
///
/// Cloning is cheap and every clone enforces the *same* limits (the state is shared), so one
/// limiter can be handed to every thread, task and request handler.
///
/// Keys are never stored: the table keeps a 64-bit fingerprint per key from a randomly
/// seeded hash (see [`RandomState`]), so memory per key is the same for a `u64` and a long
/// `String`. Expired keys are reclaimed automatically; memory grows with live keys up to
/// [`capacity`](Limiter::capacity), and a full table follows its
/// [`FullPolicy`](crate::FullPolicy).
///
/// # Examples
///
/// ```
/// use tollgate::{Limiter, Quota};
///
/// let limiter: Limiter<str> = Limiter::keyed(Quota::per_second(2));
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
#[derive(Debug)]
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
        f: impl FnMut(u64) -> crate::table::Step<R>,
    ) -> Result<R, Full> {
        self.table
            .update(route, fp, now.saturating_sub(RECLAIM_GRACE), f)
    }
}

impl<K: Hash + ?Sized> Limiter<K> {
    /// A keyed limiter with the default configuration: monotonic clock, capacity
    /// [`Builder::DEFAULT_CAPACITY`] keys, evict-closest-to-expiry when full.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Builder, Limiter, Quota};
    ///
    /// let limiter: Limiter<str> = Limiter::keyed(Quota::per_minute(1));
    /// assert_eq!(limiter.capacity(), Builder::<str>::DEFAULT_CAPACITY);
    /// assert!(limiter.check("alice").is_ok());
    /// assert!(limiter.check("alice").is_err());
    /// ```
    pub fn keyed(quota: Quota) -> Limiter<K> {
        Limiter::builder(quota).build()
    }

    /// A builder to choose capacity, presizing, hasher, clock and full-table policy.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{FullPolicy, Limiter, Quota};
    ///
    /// let limiter: Limiter<u64> = Limiter::builder(Quota::per_minute(1))
    ///     .shards(1)
    ///     .capacity(1)
    ///     .full_policy(FullPolicy::RefuseNewKeys)
    ///     .build();
    /// assert!(limiter.check(&1).is_ok());
    /// assert!(limiter.check(&2).unwrap_err().is_table_full());
    /// ```
    pub fn builder(quota: Quota) -> Builder<K> {
        Builder::new(quota)
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

    pub(crate) fn shared(&self) -> &Arc<Shared<S>> {
        &self.shared
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

    /// The current time on this limiter's clock, for the `_at` methods.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Limiter, ManualClock, Quota, Timestamp};
    ///
    /// let clock = ManualClock::new();
    /// let limiter: Limiter<str> = Limiter::builder(Quota::per_second(1))
    ///     .clock(clock.clone())
    ///     .build();
    /// assert_eq!(limiter.now(), Timestamp::ZERO);
    /// clock.advance(Duration::from_millis(5));
    /// assert_eq!(limiter.now(), Timestamp::from_nanos(5_000_000));
    /// ```
    #[inline]
    pub fn now(&self) -> Timestamp {
        self.shared.clock.now()
    }

    /// Admits one cell for `key` if its rate allows, recording it; otherwise records nothing.
    ///
    /// Known keys take no lock and allocate nothing: a hash, a short probe and one CAS.
    ///
    /// # Errors
    ///
    /// [`CheckError::RateLimited`] with the time to retry, or [`CheckError::TableFull`] for
    /// a new key when the table is full under [`FullPolicy::RefuseNewKeys`](crate::FullPolicy).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Limiter, Quota};
    ///
    /// let limiter: Limiter<str> = Limiter::keyed(Quota::per_minute(1));
    /// assert_eq!(limiter.check("alice").unwrap().remaining(), 0);
    /// assert!(limiter.check("alice").unwrap_err().is_rate_limited());
    /// assert!(limiter.check("bob").is_ok()); // each key has its own limit
    /// ```
    #[inline]
    pub fn check<Q>(&self, key: &Q) -> Result<Admitted, CheckError>
    where
        K: Borrow<Q>,
        Q: Hash + ?Sized,
    {
        self.check_n_at(key, 1, self.now())
    }

    /// Admits `n` cells at once for `key`, or none.
    ///
    /// `n = 0` is always admitted and records nothing.
    ///
    /// # Errors
    ///
    /// As [`check`](Limiter::check), plus [`CheckError::InsufficientCapacity`] when `n`
    /// exceeds the burst (such a request can never pass; waiting does not help).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Limiter, Quota};
    ///
    /// let limiter: Limiter<u32> = Limiter::keyed(Quota::per_second(10));
    /// assert!(limiter.check_n(&7, 10).is_ok());
    /// assert!(limiter.check_n(&7, 11).unwrap_err().is_insufficient_capacity());
    /// ```
    #[inline]
    pub fn check_n<Q>(&self, key: &Q, n: u32) -> Result<Admitted, CheckError>
    where
        K: Borrow<Q>,
        Q: Hash + ?Sized,
    {
        self.check_n_at(key, n, self.now())
    }

    /// [`check`](Limiter::check) at a time the caller read from [`now`](Limiter::now), so a
    /// batch of checks reads the clock once.
    ///
    /// Threads may pass times that disagree (each read its clock at its own moment, or
    /// stamps a whole batch with one reading). The window guarantee holds for every key
    /// whose own times never go backwards, whatever the other keys' callers pass: when a
    /// caller far ahead reclaims an expired key, a caller still behind does not get a fresh
    /// burst for it, because a forgotten key is treated as having the latest state its shard
    /// forgot. The price is that a *new* key checked at a time behind that horizon is
    /// treated as if checked at the horizon (at most as late as some caller's `now`); keys
    /// are reclaimed only a millisecond after they expire, so only a caller more than a
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
    /// let limiter: Limiter<u32> = Limiter::keyed(Quota::per_second(1));
    /// let now = limiter.now(); // one clock read for the batch
    /// assert!(limiter.check_at(&7, now).is_ok());
    /// assert!(limiter.check_at(&7, now).is_err());
    /// assert!(limiter.check_at(&7, now + Duration::from_secs(1)).is_ok());
    /// ```
    #[inline]
    pub fn check_at<Q>(&self, key: &Q, now: Timestamp) -> Result<Admitted, CheckError>
    where
        K: Borrow<Q>,
        Q: Hash + ?Sized,
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
    /// let limiter: Limiter<u32> = Limiter::keyed(Quota::per_second(10));
    /// let now = limiter.now();
    /// assert_eq!(limiter.check_n_at(&7, 4, now).unwrap().remaining(), 6);
    /// assert!(limiter.check_n_at(&7, 7, now).unwrap_err().is_rate_limited());
    /// assert!(limiter.check_n_at(&7, 11, now).unwrap_err().is_insufficient_capacity());
    /// ```
    #[inline]
    pub fn check_n_at<Q>(&self, key: &Q, n: u32, now: Timestamp) -> Result<Admitted, CheckError>
    where
        K: Borrow<Q>,
        Q: Hash + ?Sized,
    {
        let shared = &*self.shared;
        let gcra = shared.quota.gcra();
        check_capacity(gcra, n)?;
        let now = now.as_nanos().min(MAX_NOW);
        let (route, fp) = self.hashes(key);
        let step = check_step(gcra, now, n);
        match shared.update_key(route, fp, now, step) {
            Ok(v) => {
                if v.is_ok() {
                    shared.counters.admitted();
                } else {
                    shared.counters.denied();
                }
                verdict(gcra, now, v)
            }
            Err(Full) => Err(CheckError::TableFull {
                capacity: shared.table.capacity(),
            }),
        }
    }

    /// Forgets `key`: its next request is treated as its first. Returns whether the key held
    /// any state.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Limiter, Quota};
    ///
    /// let limiter: Limiter<str> = Limiter::keyed(Quota::per_minute(1));
    /// assert!(!limiter.reset("alice")); // never seen
    /// limiter.check("alice").unwrap();
    /// assert!(limiter.check("alice").is_err());
    /// assert!(limiter.reset("alice"));
    /// assert!(limiter.check("alice").is_ok()); // a fresh start
    /// ```
    pub fn reset<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + ?Sized,
    {
        let (route, fp) = self.hashes(key);
        self.shared.table.remove(route, fp)
    }

    /// Pushes `key`'s next admission at least `delay` from now, keeping any later one: for
    /// escalating against abuse, or honouring a server's `Retry-After`. Durations too long
    /// to represent saturate (about 36 years).
    ///
    /// # Errors
    ///
    /// [`TableFull`] if the key is new and the table refuses new keys.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Limiter, ManualClock, Quota};
    ///
    /// let clock = ManualClock::new();
    /// let limiter: Limiter<str> = Limiter::builder(Quota::per_second(100)).clock(clock.clone()).build();
    /// limiter.penalize("api.example.com", Duration::from_secs(30)).unwrap();
    /// assert_eq!(
    ///     limiter.check("api.example.com").unwrap_err().retry_after(),
    ///     Some(Duration::from_secs(30))
    /// );
    /// ```
    pub fn penalize<Q>(&self, key: &Q, delay: Duration) -> Result<(), TableFull>
    where
        K: Borrow<Q>,
        Q: Hash + ?Sized,
    {
        let shared = &*self.shared;
        let gcra = shared.quota.gcra();
        let now = self.now().as_nanos().min(MAX_NOW);
        let delay = saturating_nanos(delay);
        if delay == 0 {
            return Ok(());
        }
        let (route, fp) = self.hashes(key);
        shared
            .update_key(route, fp, now, |tat| {
                let target = gcra.penalized(tat, now, delay);
                ((target > tat).then_some(target), ())
            })
            .map_err(|Full| TableFull {
                capacity: shared.table.capacity(),
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
    /// let limiter: Limiter<str> = Limiter::keyed(Quota::per_second(5));
    /// assert_eq!(limiter.quota(), Quota::per_second(5));
    /// assert_eq!(limiter.quota().interval(), Duration::from_millis(200));
    /// ```
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
    /// let limiter: Limiter<str> = Limiter::keyed(Quota::per_minute(1));
    /// limiter.check("alice").unwrap();
    /// limiter.set_quota(Quota::per_minute(2));
    /// assert_eq!(limiter.quota().burst(), 2);
    /// assert!(limiter.check("alice").is_err()); // her used cell still counts
    /// assert_eq!(limiter.check("bob").unwrap().remaining(), 1); // a new key gets the new burst
    /// ```
    pub fn set_quota(&self, quota: Quota) {
        self.shared.quota.store(quota);
    }

    /// Keys whose state still carries information: a lock-free O(capacity) scan.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Limiter, Quota};
    ///
    /// let limiter: Limiter<u32> = Limiter::keyed(Quota::per_minute(10));
    /// assert_eq!(limiter.len(), 0);
    /// for key in [1, 2, 2] {
    ///     limiter.check(&key).unwrap();
    /// }
    /// assert_eq!(limiter.len(), 2);
    /// ```
    pub fn len(&self) -> usize {
        self.shared.table.live_keys(self.now().as_nanos())
    }

    /// Whether no key is live.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Limiter, ManualClock, Quota};
    ///
    /// let clock = ManualClock::new();
    /// let limiter: Limiter<str> = Limiter::builder(Quota::per_second(1))
    ///     .clock(clock.clone())
    ///     .build();
    /// assert!(limiter.is_empty());
    /// limiter.check("alice").unwrap();
    /// assert!(!limiter.is_empty());
    /// clock.advance(Duration::from_secs(1)); // her state has expired
    /// assert!(limiter.is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The most keys this limiter holds at once.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Limiter, Quota};
    ///
    /// let limiter: Limiter<str> = Limiter::builder(Quota::per_second(1))
    ///     .shards(4)
    ///     .capacity(1_000)
    ///     .build();
    /// assert_eq!(limiter.capacity(), 1_000);
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
    /// let limiter: Limiter<str> = Limiter::keyed(Quota::per_minute(1));
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
            live_keys: self.len(),
            keys_held: table.keys_held,
            expired_reclaimed: table.reclaimed,
            forced_evictions: table.evicted,
            refused_keys: table.refused,
            compactions: table.compactions,
            bytes: table.bytes
                + shared.counters.bytes()
                + shared.waitlists.bytes()
                + std::mem::size_of::<Shared<S>>(),
            retired_bytes: table.retired_bytes,
            capacity: shared.table.capacity(),
        }
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

impl<K: ?Sized, S> fmt::Debug for Limiter<K, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Limiter")
            .field("capacity", &self.shared.table.capacity())
            .finish_non_exhaustive()
    }
}
