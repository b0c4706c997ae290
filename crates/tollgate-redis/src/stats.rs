//! What a limiter counts: the public [`Stats`] snapshot, and the atomic counters behind it
//! that the engine, waits and the call path bump. Apart so that each of those can count
//! without importing the others.

use crate::observe::{Count, Observer};

/// Counters of one [`FleetLimiter`](crate::FleetLimiter) (and its clones) since it was built.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> redis::RedisResult<()> {
/// # use tollgate::Quota;
/// # use tollgate_redis::{FaultPolicy, FleetLimiter};
/// # // Nothing listens on port 1 (`connect` is lazy): every check fails open.
/// # let client = redis::Client::open("redis://127.0.0.1:1/")?;
/// # let limiter = FleetLimiter::builder(Quota::per_second(5))
/// #     .fault_policy(FaultPolicy::FailOpen)
/// #     .connect(client)
/// #     .await?;
/// limiter.check("alice").await.unwrap(); // Redis is away: failed open
/// let s = limiter.stats();
/// assert_eq!((s.round_trips, s.local_refusals, s.faults), (1, 0, 1));
/// assert_eq!(s.failed_open, 1);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Calls sent to Redis, answered or not: the script's (refunds included), and `reset`'s
    /// `DEL`.
    pub round_trips: u64,
    /// Checks (and waits) admitted by Redis.
    pub admitted: u64,
    /// Checks refused by Redis, and bounded waits it found too long.
    pub limited: u64,
    /// Checks (and bounded waits) refused by the local fast path, without a round trip.
    pub local_refusals: u64,
    /// Calls that failed: errors and timeouts together.
    pub faults: u64,
    /// Of the faults, timeouts.
    pub timeouts: u64,
    /// Checks admitted by [`FaultPolicy::FailOpen`](crate::FaultPolicy::FailOpen).
    pub failed_open: u64,
    /// Checks refused by [`FaultPolicy::FailClosed`](crate::FaultPolicy::FailClosed).
    pub failed_closed: u64,
    /// Checks decided by the local fallback ([`FaultPolicy::Local`](crate::FaultPolicy::Local),
    /// [`FaultPolicy::LocalShare`](crate::FaultPolicy::LocalShare)), admitted or not.
    pub fell_back: u64,
    /// Keys in the fast path's cache now.
    pub cached_keys: u64,
    /// Waits ([`FleetLimiter::until_ready`](crate::FleetLimiter::until_ready)) that reserved cells
    /// on the server.
    pub reserved: u64,
    /// Reservations given back on the server after their wait was cancelled.
    pub refunded: u64,
    /// Cancelled reservations that could not be given back (the key had moved on, or
    /// Redis did not answer): their cells stay spent.
    pub refunds_declined: u64,
    /// Cells granted to this node by leases ([`FleetBuilder::lease`](crate::FleetBuilder::lease)),
    /// including those the leasing check spent at once.
    pub leased: u64,
    /// Leased cells spent here without a round trip.
    pub spent_locally: u64,
    /// Unspent leased cells given back on the server.
    pub returned: u64,
    /// Leased cells neither spent nor given back (the key had moved on, Redis was away, or
    /// the lease was dropped by `reset`, `penalize` or the store's bound): spent on the
    /// server for nothing.
    pub expired_unspent: u64,
    /// Times the circuit breaker opened
    /// ([`FleetBuilder::circuit_breaker`](crate::FleetBuilder::circuit_breaker)): that many calls
    /// in a row failed, or a probe after a cool-down did.
    pub circuit_opened: u64,
    /// The fleet's size as this node last counted it in Redis
    /// ([`FaultPolicy::LocalShare`](crate::FaultPolicy::LocalShare)); 0 before the first count, or
    /// under another policy.
    pub fleet_size: u64,
    /// Calls not sent because the breaker was open; their fault policy answered at once
    /// (counted there too: `failed_open`, `failed_closed`, `fell_back`).
    pub short_circuited: u64,
    /// Times Redis answered `NOSCRIPT` and the script was loaded, within the call that met
    /// it: at the first call a server gets from any node, then after a restart, a
    /// `SCRIPT FLUSH` or a failover to a replica that never ran it.
    pub script_reloads: u64,
    /// Times calls to Redis timed out in a row (as many as open the breaker, 5 by default)
    /// on a connection that stays open, and the limiter started a new connection to replace
    /// it: a hung server, a proxy whose upstream hangs, a partitioned host. At most one a
    /// second; the new connection replaces the old once it connects
    /// ([`FleetBuilder::timeout`](crate::FleetBuilder::timeout)).
    pub reconnects: u64,
}

/// The live counters behind [`Stats`], bumped where things happen; each also feeds its
/// metric with the `metrics` feature (`observe.rs`, which builds them).
#[derive(Debug)]
pub(crate) struct Counters {
    pub(crate) round_trips: Count,
    pub(crate) admitted: Count,
    pub(crate) limited: Count,
    pub(crate) local_refusals: Count,
    pub(crate) faults: Count,
    pub(crate) timeouts: Count,
    pub(crate) failed_open: Count,
    pub(crate) failed_closed: Count,
    pub(crate) fell_back: Count,
    pub(crate) reserved: Count,
    pub(crate) refunded: Count,
    pub(crate) refunds_declined: Count,
    pub(crate) leased: Count,
    pub(crate) spent_locally: Count,
    pub(crate) returned: Count,
    pub(crate) expired_unspent: Count,
    pub(crate) circuit_opened: Count,
    pub(crate) short_circuited: Count,
    pub(crate) script_reloads: Count,
    pub(crate) reconnects: Count,
    /// What is not a counter of `Stats`: latency, gauges, the fault policy's transitions.
    pub(crate) observer: Observer,
}

impl Counters {
    /// The counters now, with the two figures that are not counters: the keys in the fast
    /// path's cache, and the fleet's size as last counted.
    pub(crate) fn snapshot(&self, cached_keys: u64, fleet_size: u64) -> Stats {
        // Each counter is read on its own (`Count::get`, Relaxed): statistics, not a
        // consistent cut across counters.
        let c = self;
        Stats {
            round_trips: c.round_trips.get(),
            admitted: c.admitted.get(),
            limited: c.limited.get(),
            local_refusals: c.local_refusals.get(),
            faults: c.faults.get(),
            timeouts: c.timeouts.get(),
            failed_open: c.failed_open.get(),
            failed_closed: c.failed_closed.get(),
            fell_back: c.fell_back.get(),
            cached_keys,
            reserved: c.reserved.get(),
            refunded: c.refunded.get(),
            refunds_declined: c.refunds_declined.get(),
            leased: c.leased.get(),
            spent_locally: c.spent_locally.get(),
            returned: c.returned.get(),
            expired_unspent: c.expired_unspent.get(),
            circuit_opened: c.circuit_opened.get(),
            short_circuited: c.short_circuited.get(),
            fleet_size,
            script_reloads: c.script_reloads.get(),
            reconnects: c.reconnects.get(),
        }
    }
}

/// Adds 1 to a counter.
pub(crate) fn bump(c: &Count) {
    c.add(1);
}

/// Adds `n` to a counter.
pub(crate) fn add(c: &Count, n: u64) {
    c.add(n);
}
