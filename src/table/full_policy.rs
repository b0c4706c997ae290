//! [`FullPolicy`]: the public choice of what a full table does with a new key. The shard
//! carries it out (`shard.rs`: the eviction in place, the refusal and its gate).

/// What to do when a shard holds its share of the capacity and no key has expired.
///
/// # Examples
///
/// ```
/// use tollgate::{FullPolicy, Limiter, ManualClock, Quota};
///
/// fn one_key(policy: FullPolicy) -> Limiter<str> {
///     Limiter::builder(Quota::per_second(1)).shards(1).capacity(1).full_policy(policy).clock(ManualClock::new()).build()
/// }
/// let evicting = one_key(FullPolicy::default());
/// assert!(evicting.check("a").is_ok());
/// assert!(evicting.check("b").is_ok()); // "a" was evicted to make room
/// assert_eq!(evicting.stats().forced_evictions, 1);
///
/// let refusing = one_key(FullPolicy::RefuseNewKeys);
/// assert!(refusing.check("a").is_ok());
/// assert!(refusing.check("b").unwrap_err().is_table_full());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FullPolicy {
    /// Evict the key whose state expires soonest among a bounded set of keys near the new
    /// key's slot, and give its slot to the new key; counted in
    /// [`Stats::forced_evictions`](crate::Stats::forced_evictions). The evicted key is
    /// forgotten: its next request is treated as its first. The default.
    ///
    /// The set: in a shard of at most 64 slots (capacity per shard up to 53 keys), every key
    /// of the shard, so the choice is exact; in a larger shard, the keys on the new key's
    /// probe run (the keys a lookup of it walks past, about 17 on average in a full shard),
    /// or, if that run holds none, the first 16 keys from its home slot on. The evicted key
    /// expires no later than any other key of that set. An approximation of "closest to
    /// expiry" that keeps an eviction O(1) and lets the new key take the victim's slot in
    /// place. TATs are compared as they stand when the eviction looks at them.
    #[default]
    EvictClosestToExpiry,
    /// Refuse the new key: checks on it fail with
    /// [`Error::TableFull`](crate::Error::TableFull); known keys are unaffected. Exactly the
    /// keys that would not fit are refused: a key is refused only if its shard is at its cap
    /// with no key expired (or reclaimable) by the check's time. Once a shard has refused a
    /// key, later new keys are refused without its lock until its earliest held key may
    /// expire or a key leaves.
    RefuseNewKeys,
}
