//! The server's `maxmemory-policy` and why it bears on the limit's exactness: the public
//! [`MemoryPolicy`] and the one question (`CONFIG GET`) that finds it. Apart from the limit's
//! calls: its faults are not the limit's, and it goes through no breaker or fault policy.

use std::time::Duration;

use crate::conn::Conn;
use crate::fault::{Unavailable, unreachable};

/// The server's `maxmemory-policy`, as it bears on the limit's exactness
/// ([`FleetLimiter::memory_policy`](crate::FleetLimiter::memory_policy)).
///
/// A key's state is its TAT; a server that forgets the key forgets what the key spent, and
/// the fleet admits it afresh: up to a whole burst more than the limit, per forgotten key.
/// tollgate's keys carry TTLs (their reset time), so every evicting policy can take them,
/// `volatile-*` as well as `allkeys-*`. Run the limiter on a Redis of its own, or one set to
/// `maxmemory-policy noeviction` (a write at the memory limit then fails, and the fault
/// policy answers, which is bounded and counted, where an eviction is silent).
///
/// # Examples
///
/// ```no_run
/// # async fn f(limiter: tollgate_redis::FleetLimiter) {
/// use tollgate_redis::MemoryPolicy;
///
/// let policy = limiter.memory_policy().await.unwrap();
/// assert!(!matches!(policy, MemoryPolicy::Evicting(_)), "Redis may forget keys: {policy:?}");
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum MemoryPolicy {
    /// `noeviction`: keys are never evicted.
    NoEviction,
    /// A policy that evicts keys (its name: `allkeys-lru`, `volatile-ttl`, ...).
    Evicting(String),
    /// The server would not say (`CONFIG` refused, as managed services and ACLs do; not a
    /// refusal of the credentials, which is an error).
    Unknown,
}

/// Asks the server for its `maxmemory-policy`, within `timeout`.
pub(crate) async fn ask(mut conn: Conn, timeout: Duration) -> Result<MemoryPolicy, Unavailable> {
    let mut cmd = redis::cmd("CONFIG");
    cmd.arg("GET").arg("maxmemory-policy");
    let asked = cmd.query_async::<Vec<String>>(&mut conn);
    // Not through `call`: this is no limit decision, and its faults are not the limit's.
    match crate::rt::timeout(timeout, asked).await {
        Err(()) => Err(Unavailable::Timeout(timeout)),
        Ok(Ok(reply)) => Ok(match reply.get(1).map(String::as_str) {
            Some("noeviction") => MemoryPolicy::NoEviction,
            Some(policy) => MemoryPolicy::Evicting(policy.to_owned()),
            None => MemoryPolicy::Unknown,
        }),
        // The connection's own timer fired first: a timeout, as in `Server::call`.
        Ok(Err(e)) if e.is_timeout() => Err(Unavailable::Timeout(timeout)),
        Ok(Err(e)) if unreachable(&e) => Err(Unavailable::Redis(e)),
        // Another error reply: the server refuses `CONFIG` (an ACL, a renamed command). A
        // refusal of the credentials is not one: `unreachable` takes it, above.
        Ok(Err(_)) => Ok(MemoryPolicy::Unknown),
    }
}
