//! [`LimiterBuilder`]: configuration for a keyed [`Limiter`].

use std::fmt;
use std::hash::{BuildHasher, Hash};
use std::marker::PhantomData;
use std::time::Duration;

use super::Limiter;
use crate::clock_source::ClockSource;
use crate::hash::RandomState;
use crate::quota::Quota;
use crate::table::{FullPolicy, Table, TableConfig};
use crate::time::{Clock, MonotonicClock, saturating_nanos};

/// Configures a keyed [`Limiter`]. Start from [`Limiter::builder`].
///
/// # Examples
///
/// ```
/// use tollgate::{FullPolicy, Limiter, ManualClock, Quota};
///
/// let limiter = Limiter::builder(Quota::per_minute(600))
///     .capacity(100_000)
///     .presize(10_000)
///     .full_policy(FullPolicy::RefuseNewKeys)
///     .clock(ManualClock::new())
///     .build();
/// assert!(limiter.capacity() >= 100_000);
/// assert!(limiter.check("alice").is_ok());
/// ```
pub struct LimiterBuilder<K: ?Sized, S = RandomState> {
    quota: Quota,
    config: TableConfig,
    clock: ClockSource,
    router: S,
    _key: PhantomData<fn(&K)>,
}

impl<K: ?Sized> LimiterBuilder<K> {
    /// The default capacity: 2^23 (about 8.4 million) keys. At 16 bytes a slot, and a full
    /// shard loaded to 3/4, this caps the table at about 170 MiB; memory is only taken as keys
    /// arrive (a shard grows by about 1.5x at a time, twice while it is small).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{LimiterBuilder, Limiter, Quota};
    ///
    /// let limiter = Limiter::keyed(Quota::per_second(1));
    /// assert_eq!(limiter.capacity(), LimiterBuilder::<str>::DEFAULT_CAPACITY);
    /// assert!(limiter.check("alice").is_ok());
    /// ```
    pub const DEFAULT_CAPACITY: usize = 1 << 23;

    pub(crate) fn new(quota: Quota) -> LimiterBuilder<K> {
        LimiterBuilder {
            quota,
            config: TableConfig {
                capacity: Self::DEFAULT_CAPACITY,
                presize: 0,
                policy: FullPolicy::default(),
                shards: 64,
                keep_expired: None,
            },
            clock: ClockSource::Monotonic(MonotonicClock::new()),
            router: RandomState::new(),
            _key: PhantomData,
        }
    }
}

impl<K: ?Sized, S> LimiterBuilder<K, S> {
    /// The most keys held at once (a hard cap on memory). Rounded up to a multiple of the
    /// shard count; each shard holds an equal share, so a table can report full slightly
    /// before `capacity` keys if keys spread unevenly (about 1 % at a million keys). A full
    /// table takes about 21 bytes a key: the key that fills a shard grows it to a load of 3/4,
    /// so that the new keys it then refuses or evicts probe short runs. `usize::MAX` is no
    /// cap: the table grows as far as memory goes.
    ///
    /// # Panics
    ///
    /// If `capacity` is zero.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Limiter, Quota};
    ///
    /// let limiter = Limiter::builder(Quota::per_second(1)).capacity(1_000).build();
    /// assert_eq!(limiter.capacity(), 1_024); // 64 shards of 16 keys
    /// assert!(limiter.check(&7).is_ok());
    /// ```
    #[track_caller]
    pub fn capacity(mut self, capacity: usize) -> Self {
        assert!(
            capacity > 0,
            "LimiterBuilder::capacity(0): a limiter must hold at least one key"
        );
        self.config.capacity = capacity;
        self
    }

    /// Sizes the table for `keys` keys up front (at most the capacity), so that inserting
    /// them never grows a shard (a growth rebuilds the shard under its lock): about 20 bytes per
    /// key.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Limiter, Quota};
    ///
    /// let limiter = Limiter::builder(Quota::per_second(1)).shards(1).presize(1_000).build();
    /// let bytes = limiter.stats().bytes;
    /// for key in 0..1_000 {
    ///     assert!(limiter.check(&key).is_ok());
    /// }
    /// assert_eq!(limiter.stats().bytes, bytes); // the table never grew
    /// ```
    pub fn presize(mut self, keys: usize) -> Self {
        self.config.presize = keys;
        self
    }

    /// What to do with a new key when the table is full and nothing has expired.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{FullPolicy, Limiter, ManualClock, Quota};
    ///
    /// let limiter = Limiter::builder(Quota::per_second(1))
    ///     .shards(1)
    ///     .capacity(1)
    ///     .full_policy(FullPolicy::RefuseNewKeys)
    ///     .clock(ManualClock::new())
    ///     .build();
    /// assert!(limiter.check("a").is_ok());
    /// assert!(limiter.check("b").unwrap_err().is_table_full());
    /// ```
    pub fn full_policy(mut self, policy: FullPolicy) -> Self {
        self.config.policy = policy;
        self
    }

    /// Keeps a key for `time` after its state expired, while its shard holds fewer keys than
    /// its share of the [capacity](LimiterBuilder::capacity), in place of the time the table
    /// learns by default.
    ///
    /// An expired key is one whose next check would find a full burst, so forgetting it
    /// changes no answer; it changes what that next check costs. A held key's check is the
    /// lock-free update of its slot; a forgotten key's is an insert under its shard's lock.
    /// Where clients come back after their windows have expired (a per-second quota, clients
    /// returning every few seconds), those inserts would be most of the limiter's work, and on
    /// several cores the threads would contend for the shards they insert into. Keeping keys
    /// for as long as clients take to come back makes their checks those of held keys, at the
    /// price of holding them: about 20 bytes a key, so memory follows the keys seen within
    /// `time` rather than the live ones.
    ///
    /// **By default each shard learns the time.** It follows a few expired keys: when one it
    /// forgot comes back, it keeps expired keys twice as long as that one was away, up to a
    /// second; while it keeps, it follows expired keys it holds, and keeps on while more than a
    /// quarter of them come back, cutting the time by a quarter at a time (to zero within
    /// about ten seconds) when fewer do. A flood of one-off keys is never kept, and memory
    /// follows the live keys; clients that return within a second are held (BENCHMARKS.md,
    /// scenario E with keys expiring), and so is about a second of the one-off keys among
    /// them. Tables do not shrink: a shard that learned to keep and then meets a flood of
    /// one-off keys grows once to about a second of them before the time fades. Set a time
    /// for clients that take longer, or `Duration::ZERO` to keep nothing past the millisecond
    /// every expired key is kept.
    ///
    /// Whatever `time` is, learned or set, a shard that holds its share of the capacity
    /// reclaims an expired key's slot for a new key once the millisecond has passed: a full
    /// table never refuses or evicts for a slot an expired key holds.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Limiter, Quota};
    ///
    /// // Clients come back within a few seconds; their 10/s windows expire in between.
    /// let limiter = Limiter::builder(Quota::per_second(10))
    ///     .keep_expired(Duration::from_secs(5))
    ///     .build();
    /// assert!(limiter.check("alice").is_ok());
    /// ```
    pub fn keep_expired(mut self, time: Duration) -> Self {
        self.config.keep_expired = Some(saturating_nanos(time));
        self
    }

    /// How many independently locked shards the table has (default 64). Inserts and growth
    /// lock one shard; checks of known keys lock nothing.
    ///
    /// # Panics
    ///
    /// If `shards` is zero, or more than 65,536 (each shard takes a few hundred bytes
    /// before it holds a key; more shards than that would lock no less).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Limiter, Quota};
    ///
    /// let limiter = Limiter::builder(Quota::per_second(1)).shards(3).capacity(10).build();
    /// assert_eq!(limiter.capacity(), 12); // 3 shards of 4 keys
    /// assert!(limiter.check(&7).is_ok());
    /// ```
    #[track_caller]
    pub fn shards(mut self, shards: usize) -> Self {
        /// More shards would lock no less, and each one takes memory before it holds a key.
        const MAX_SHARDS: usize = 1 << 16;
        assert!(
            shards > 0,
            "LimiterBuilder::shards(0): a table needs at least one shard"
        );
        assert!(
            shards <= MAX_SHARDS,
            "LimiterBuilder::shards({shards}): at most {MAX_SHARDS} shards"
        );
        self.config.shards = shards;
        self
    }

    /// The clock (default: [`MonotonicClock`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Limiter, ManualClock, Quota, Timestamp};
    ///
    /// let clock = ManualClock::new();
    /// let limiter = Limiter::builder(Quota::per_second(1)).clock(clock.clone()).build();
    /// clock.advance(Duration::from_secs(5));
    /// assert_eq!(limiter.now(), Timestamp::from_nanos(5_000_000_000));
    /// assert!(limiter.check("alice").is_ok());
    /// ```
    ///
    /// # Panics
    ///
    /// If a clock of your own (not one of tollgate's) already reads more than 2^58 ns (9.1
    /// years) after its origin, as one counting from the Unix epoch does: a limiter's time
    /// stops 2^59 ns after the origin ([`Clock`]).
    #[track_caller]
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = ClockSource::from_clock(clock);
        self
    }

    /// The router: a hasher that picks each key's shard, e.g. to keep a tenant's keys together.
    ///
    /// It does **not** decide key identity: tollgate always fingerprints keys with its own
    /// randomly seeded [`RandomState`], so even a constant hasher cannot merge two keys'
    /// limits (it only puts every key in one shard). The default routes with the identity
    /// hash, costing one hash per check; a custom router costs a second one.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::hash::{BuildHasherDefault, Hasher};
    /// use tollgate::{Limiter, Quota};
    ///
    /// // A router that sends every key to the same shard.
    /// #[derive(Default)]
    /// struct Constant;
    /// impl Hasher for Constant {
    ///     fn finish(&self) -> u64 { 0 }
    ///     fn write(&mut self, _: &[u8]) {}
    /// }
    ///
    /// let limiter =
    ///     Limiter::builder(Quota::per_second(1)).router(BuildHasherDefault::<Constant>::default()).build();
    /// assert!(limiter.check("a").is_ok());
    /// assert!(limiter.check("b").is_ok()); // same shard, separate limits
    /// assert!(limiter.check("a").is_err());
    /// ```
    pub fn router<S2: BuildHasher + 'static>(self, router: S2) -> LimiterBuilder<K, S2> {
        LimiterBuilder {
            quota: self.quota,
            config: self.config,
            clock: self.clock,
            router,
            _key: PhantomData,
        }
    }
}

impl<K: Hash + ?Sized, S: BuildHasher + 'static> LimiterBuilder<K, S> {
    /// Builds the limiter.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Limiter, Quota};
    ///
    /// let limiter = Limiter::builder(Quota::per_second(2)).build();
    /// assert_eq!(limiter.quota(), Quota::per_second(2));
    /// assert!(limiter.check("k").is_ok());
    /// ```
    pub fn build(self) -> Limiter<K, S> {
        Limiter::from_parts(Table::new(self.config), self.quota, self.clock, self.router)
    }
}

impl<K: ?Sized, S> fmt::Debug for LimiterBuilder<K, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LimiterBuilder")
            .field("quota", &self.quota)
            .field("config", &self.config)
            .field("clock", &self.clock)
            .finish_non_exhaustive()
    }
}
