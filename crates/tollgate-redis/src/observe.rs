//! What an operator sees of a limiter beyond [`Stats`](crate::Stats): the `metrics` facade's
//! handles (with the `metrics` feature), and the `tracing` spans and events. Every metric's
//! name and labels, and every event's message and fields, are written here and nowhere
//! else; the crate docs list them. The call path reaches this file in one line per place.
//!
//! # Why handles, registered once
//!
//! Each counter of [`Stats`](crate::Stats) is a [`Count`]: the atomic the snapshot reads and,
//! with the feature, the facade's counter, registered once when the limiter is built (with
//! the limiter's label). A check then pays one more atomic add per counter it bumps, and no
//! lookup by name; without the feature a `Count` is the bare atomic it always was, so
//! nothing changes. The price: a recorder installed after the limiter was built does not see
//! it (the handles were registered with no recorder, and do nothing).
//!
//! # Transitions, not calls
//!
//! The fault policy taking over (a call failed after the last one was answered) and giving
//! back (a call answered after one failed) are one event each per transition: a flag swapped
//! by the call that changes it, so that an outage of a million checks logs two lines. The
//! same holds for the breaker: a warning when it opens from closed; its re-openings after
//! failed probes, and its closing, are debug events (the giving back says Redis is back).
//!
//! # Refusals, sampled
//!
//! A refusal is a debug event, but an abusive client makes a million of them a second: the
//! first refusal after a second has passed logs (elected by a compare-and-swap on the next
//! instant allowed), and says how many came since the last one that did.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use tracing::Span;

use crate::conn::ROUTES;
use crate::fault::Unavailable;
use crate::stats::Counters;

/// A counter of [`Stats`](crate::Stats), and with the `metrics` feature the facade's
/// counter it feeds.
#[derive(Debug)]
pub(crate) struct Count {
    n: AtomicU64,
    #[cfg(feature = "metrics")]
    metric: metrics::Counter,
}

impl Count {
    /// Adds `n`.
    pub(crate) fn add(&self, n: u64) {
        // ordering: a statistic; nothing is published through it, so Relaxed.
        self.n.fetch_add(n, Relaxed);
        #[cfg(feature = "metrics")]
        self.metric.increment(n);
    }

    /// The count now.
    pub(crate) fn get(&self) -> u64 {
        // ordering: as in `add`.
        self.n.load(Relaxed)
    }
}

// The metrics' names (the crate docs list them with their labels).
const ROUND_TRIPS: &str = "tollgate_redis_round_trips_total";
#[cfg(feature = "metrics")] // only histograms and gauges: no `Count`
const ROUND_TRIP_SECONDS: &str = "tollgate_redis_round_trip_seconds";
const DECISIONS: &str = "tollgate_redis_decisions_total";
const FAULTS: &str = "tollgate_redis_faults_total";
const TIMEOUTS: &str = "tollgate_redis_timeouts_total";
const FAULT_ANSWERS: &str = "tollgate_redis_fault_answers_total";
#[cfg(feature = "metrics")] // only histograms and gauges: no `Count`
const FAULT_POLICY_ACTIVE: &str = "tollgate_redis_fault_policy_active";
#[cfg(feature = "metrics")] // only histograms and gauges: no `Count`
const CIRCUIT_OPEN: &str = "tollgate_redis_circuit_open";
const CIRCUIT_OPENED: &str = "tollgate_redis_circuit_opened_total";
const SHORT_CIRCUITED: &str = "tollgate_redis_short_circuited_total";
const RESERVATIONS: &str = "tollgate_redis_reservations_total";
const LEASE_CELLS: &str = "tollgate_redis_lease_cells_total";
const SCRIPT_RELOADS: &str = "tollgate_redis_script_reloads_total";
const RECONNECTS: &str = "tollgate_redis_reconnects_total";

/// The `operation` label's values: the script's operations, and `reset`'s `DEL`. Any other
/// name is counted as `other` (none is sent today), so the label set stays fixed.
const OPERATIONS: [&str; 11] = [
    "check",
    "peek",
    "reserve",
    "refund",
    "lease",
    "giveback",
    "penalize",
    "reset",
    "check_all",
    "check_all_refund",
    "other",
];

fn operation_index(op: &str) -> usize {
    OPERATIONS
        .iter()
        .position(|&o| o == op)
        .unwrap_or(OPERATIONS.len() - 1)
}

/// Registers a limiter's handles under its `limiter` label.
struct Meter {
    #[cfg(feature = "metrics")]
    limiter: String,
}

impl Meter {
    fn count(&self, name: &'static str, label: Option<(&'static str, &'static str)>) -> Count {
        #[cfg(not(feature = "metrics"))]
        let _ = (name, label);
        Count {
            n: AtomicU64::new(0),
            #[cfg(feature = "metrics")]
            metric: {
                let limiter = ("limiter", self.limiter.clone());
                match label {
                    Some((k, v)) => metrics::counter!(name, &[limiter, (k, v.to_owned())]),
                    None => metrics::counter!(name, &[limiter]),
                }
            },
        }
    }
}

impl Counters {
    /// A limiter's counters, its metrics registered with the recorder installed now, under
    /// the label `limiter` = its key prefix (bounded: one per limiter, never a client's key).
    pub(crate) fn new(prefix: &[u8]) -> Counters {
        let limiter = String::from_utf8_lossy(prefix).into_owned();
        #[cfg(feature = "metrics")]
        describe();
        let m = Meter {
            #[cfg(feature = "metrics")]
            limiter: limiter.clone(),
        };
        let decision = |o| Some(("outcome", o));
        let policy = |p| Some(("policy", p));
        let lease = |k| Some(("kind", k));
        Counters {
            round_trips: m.count(ROUND_TRIPS, None),
            admitted: m.count(DECISIONS, decision("admitted")),
            limited: m.count(DECISIONS, decision("limited")),
            local_refusals: m.count(DECISIONS, decision("local_refusal")),
            faults: m.count(FAULTS, None),
            timeouts: m.count(TIMEOUTS, None),
            failed_open: m.count(FAULT_ANSWERS, policy("fail_open")),
            failed_closed: m.count(FAULT_ANSWERS, policy("fail_closed")),
            fell_back: m.count(FAULT_ANSWERS, policy("local")),
            reserved: m.count(RESERVATIONS, decision("reserved")),
            refunded: m.count(RESERVATIONS, decision("refunded")),
            refunds_declined: m.count(RESERVATIONS, decision("refund_declined")),
            leased: m.count(LEASE_CELLS, lease("leased")),
            spent_locally: m.count(LEASE_CELLS, lease("spent_locally")),
            returned: m.count(LEASE_CELLS, lease("returned")),
            expired_unspent: m.count(LEASE_CELLS, lease("expired_unspent")),
            circuit_opened: m.count(CIRCUIT_OPENED, None),
            short_circuited: m.count(SHORT_CIRCUITED, None),
            script_reloads: m.count(SCRIPT_RELOADS, None),
            reconnects: m.count(RECONNECTS, None),
            observer: Observer::new(limiter),
        }
    }
}

/// Tells the recorder what each metric means (its `# HELP` line, in Prometheus).
#[cfg(feature = "metrics")]
fn describe() {
    use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    describe_counter!(ROUND_TRIPS, "Calls sent to Redis, answered or not");
    describe_histogram!(
        ROUND_TRIP_SECONDS,
        Unit::Seconds,
        "Time from sending a call to Redis to its answer, fault or timeout, per operation"
    );
    describe_counter!(
        DECISIONS,
        "Checks and waits decided by Redis (admitted, limited) or refused by the local fast path"
    );
    describe_counter!(FAULTS, "Calls to Redis that failed or timed out");
    describe_counter!(TIMEOUTS, "Calls to Redis that timed out");
    describe_counter!(
        FAULT_ANSWERS,
        "Checks answered by the fault policy, per policy"
    );
    describe_gauge!(
        FAULT_POLICY_ACTIVE,
        "Ranges of slots whose calls fail and the fault policy answers (one server: 0 or 1)"
    );
    describe_gauge!(
        CIRCUIT_OPEN,
        "Circuit breakers open or probing (one server: 0 or 1; a cluster: per 1,024 slots)"
    );
    describe_counter!(CIRCUIT_OPENED, "Times the circuit breaker opened");
    describe_counter!(
        SHORT_CIRCUITED,
        "Calls not sent because the breaker was open"
    );
    describe_counter!(
        RESERVATIONS,
        "Waits' reservations on Redis and their refunds"
    );
    describe_counter!(
        LEASE_CELLS,
        "Leased cells: granted, spent here, given back, lost"
    );
    describe_counter!(
        SCRIPT_RELOADS,
        "Times Redis answered NOSCRIPT and the script was loaded again"
    );
    describe_counter!(
        RECONNECTS,
        "Times calls timed out in a row on an open connection and a new connection was started"
    );
}

/// What the counters of [`Stats`](crate::Stats) do not hold: the round trips' latency, the
/// two states as gauges, and the flag behind the fault policy's transitions.
#[derive(Debug)]
pub(crate) struct Observer {
    /// The `limiter` label and field: the limiter's key prefix.
    limiter: String,
    /// Per range of slots ([`Route`]; one on a single server): whether the last call that
    /// finished there failed, so the fault policy answers for its keys.
    faulting: [AtomicBool; ROUTES],
    /// Refusals not logged since the last refusal event, and when the next may be logged
    /// (ns since `base`): at most one a second.
    refusals_unlogged: AtomicU64,
    next_refusal_log: AtomicU64,
    /// Per range, at its takeover: the limiter's failed and short-circuited calls so far,
    /// and when (ns since `base`).
    failed_before: [AtomicU64; ROUTES],
    failing_since: [AtomicU64; ROUTES],
    base: Instant,
    #[cfg(feature = "metrics")]
    latency: [metrics::Histogram; OPERATIONS.len()],
    #[cfg(feature = "metrics")]
    fault_policy_active: metrics::Gauge,
    #[cfg(feature = "metrics")]
    circuit_open: metrics::Gauge,
}

/// When a call was sent: an `Instant` with the `metrics` feature, nothing without (so the
/// call path reads no clock for it).
pub(crate) struct Sent {
    #[cfg(feature = "metrics")]
    at: Instant,
}

impl Observer {
    fn new(limiter: String) -> Observer {
        let observer = Observer {
            #[cfg(feature = "metrics")]
            latency: OPERATIONS.map(|op| {
                metrics::histogram!(ROUND_TRIP_SECONDS, "limiter" => limiter.clone(), "operation" => op)
            }),
            #[cfg(feature = "metrics")]
            fault_policy_active: metrics::gauge!(FAULT_POLICY_ACTIVE, "limiter" => limiter.clone()),
            #[cfg(feature = "metrics")]
            circuit_open: metrics::gauge!(CIRCUIT_OPEN, "limiter" => limiter.clone()),
            limiter,
            faulting: std::array::from_fn(|_| AtomicBool::new(false)),
            refusals_unlogged: AtomicU64::new(0),
            next_refusal_log: AtomicU64::new(0),
            failed_before: std::array::from_fn(|_| AtomicU64::new(0)),
            failing_since: std::array::from_fn(|_| AtomicU64::new(0)),
            base: Instant::now(),
        };
        // Both states start as "no": said, so that a dashboard shows them from the start.
        #[cfg(feature = "metrics")]
        {
            observer.fault_policy_active.set(0.0);
            observer.circuit_open.set(0.0);
        }
        observer
    }

    /// The span of one call to Redis (debug level).
    pub(crate) fn call_span(&self, op: &'static str) -> Span {
        tracing::debug_span!("tollgate_redis.call", limiter = %self.limiter, operation = op)
    }

    /// The span of a wait for reserved cells (debug level).
    pub(crate) fn wait_span(&self, wait: Duration) -> Span {
        tracing::debug_span!(
            "tollgate_redis.wait",
            limiter = %self.limiter,
            wait_us = u64::try_from(wait.as_micros()).unwrap_or(u64::MAX)
        )
    }

    /// Marks a call as sent.
    pub(crate) fn sent(&self) -> Sent {
        Sent {
            #[cfg(feature = "metrics")]
            at: Instant::now(),
        }
    }

    /// Records the round trip of `op` sent at `sent`, answered or not.
    pub(crate) fn round_trip(&self, op: &'static str, sent: Sent) {
        #[cfg(feature = "metrics")]
        self.latency[operation_index(op)].record(sent.at.elapsed());
        #[cfg(not(feature = "metrics"))]
        let _ = (op, sent, operation_index);
    }

    /// A call to the keys of `route` that was answered (`Ok`) or failed (`Err`, the fault
    /// policy answers): the event and gauge of a transition, if this call made one. Kept per
    /// range of slots, so that on a cluster a dead master's failures and a live master's
    /// answers do not toggle one flag call after call.
    pub(crate) fn outcome<T>(&self, c: &Counters, route: Route, result: &Result<T, Unavailable>) {
        let (faulting, failed_before, failing_since) = (
            &self.faulting[route.index],
            &self.failed_before[route.index],
            &self.failing_since[route.index],
        );
        // ordering: Relaxed: the flag only decides which call logs the transition; the swap
        // makes that exactly one call per change.
        match result {
            Ok(_) => {
                if faulting.load(Relaxed) && faulting.swap(false, Relaxed) {
                    let failed = failed_calls(c).saturating_sub(failed_before.load(Relaxed));
                    let since = Duration::from_nanos(failing_since.load(Relaxed));
                    let outage = self.base.elapsed().saturating_sub(since);
                    #[cfg(feature = "metrics")]
                    self.fault_policy_active.decrement(1.0);
                    tracing::info!(
                        limiter = %self.limiter,
                        first_slot = route.first_slot,
                        last_slot = route.last_slot,
                        failed_calls = failed,
                        outage_ms = u64::try_from(outage.as_millis()).unwrap_or(u64::MAX),
                        "tollgate-redis: Redis answers again; the fault policy hands back"
                    );
                }
            }
            Err(e) => {
                if !faulting.load(Relaxed) && !faulting.swap(true, Relaxed) {
                    // This call is counted already: the outage's count starts before it.
                    failed_before.store(failed_calls(c).saturating_sub(1), Relaxed);
                    failing_since.store(nanos(self.base.elapsed()), Relaxed);
                    #[cfg(feature = "metrics")]
                    self.fault_policy_active.increment(1.0);
                    tracing::warn!(
                        limiter = %self.limiter,
                        first_slot = route.first_slot,
                        last_slot = route.last_slot,
                        error = %e,
                        "tollgate-redis: a call to Redis failed; the fault policy answers until \
                         Redis is back"
                    );
                }
            }
        }
    }

    /// A refusal (by Redis, the fast path, or the fault policy closed), `wait` before the
    /// key admits again: a debug event, sampled to at most one a second, which says how many
    /// refusals it stands for; nothing at all (not even a clock read) unless debug events
    /// are enabled here.
    pub(crate) fn refused(&self, wait: Duration) {
        if !tracing::enabled!(tracing::Level::DEBUG) {
            return;
        }
        let now = nanos(self.base.elapsed());
        // ordering: Relaxed: the CAS only elects the one refusal of a second that logs; the
        // count is a statistic.
        let next = self.next_refusal_log.load(Relaxed);
        if now < next
            || self
                .next_refusal_log
                .compare_exchange(next, now.saturating_add(SAMPLE_NS), Relaxed, Relaxed)
                .is_err()
        {
            self.refusals_unlogged.fetch_add(1, Relaxed);
            return;
        }
        let unlogged = self.refusals_unlogged.swap(0, Relaxed);
        tracing::debug!(
            limiter = %self.limiter,
            wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
            unlogged,
            "tollgate-redis: refused (sampled: at most one such event a second; `unlogged` \
             refusals came since the last)"
        );
    }

    /// The breaker of `route` opened after `failures` failed calls in a row (`reopened`: a
    /// probe after a cool-down failed, and it was open already), for `cool_down`.
    pub(crate) fn circuit_opened(
        &self,
        route: Route,
        failures: u32,
        cool_down: Duration,
        reopened: bool,
    ) {
        let cool_down_ms = u64::try_from(cool_down.as_millis()).unwrap_or(u64::MAX);
        if reopened {
            tracing::debug!(
                limiter = %self.limiter,
                first_slot = route.first_slot,
                last_slot = route.last_slot,
                cool_down_ms,
                "tollgate-redis: the breaker's probe failed; it stays open"
            );
        } else {
            #[cfg(feature = "metrics")]
            self.circuit_open.increment(1.0);
            tracing::warn!(
                limiter = %self.limiter,
                first_slot = route.first_slot,
                last_slot = route.last_slot,
                failures,
                cool_down_ms,
                "tollgate-redis: calls to Redis failed in a row; the circuit breaker is open: \
                 calls are not sent and the fault policy answers at once"
            );
        }
    }

    /// The breaker of `route` closed: a probe was answered.
    pub(crate) fn circuit_closed(&self, route: Route) {
        #[cfg(feature = "metrics")]
        self.circuit_open.decrement(1.0);
        tracing::debug!(
            limiter = %self.limiter,
            first_slot = route.first_slot,
            last_slot = route.last_slot,
            "tollgate-redis: the circuit breaker closed"
        );
    }

    /// Redis answered `NOSCRIPT` (a restart, `SCRIPT FLUSH`, a failover): the script is
    /// loaded again.
    pub(crate) fn script_reload(&self, c: &Counters) {
        c.script_reloads.add(1);
        tracing::debug!(
            limiter = %self.limiter,
            "tollgate-redis: Redis did not know the script (NOSCRIPT); loading it again"
        );
    }

    /// Calls on `route` timed out in a row on a connection that stays open: a new one is
    /// being built to replace it (`conn.rs`, "A connection that hangs"); at most one a
    /// second.
    pub(crate) fn reconnecting(&self, c: &Counters, route: Route) {
        c.reconnects.add(1);
        tracing::warn!(
            limiter = %self.limiter,
            first_slot = route.first_slot,
            last_slot = route.last_slot,
            "tollgate-redis: calls to Redis time out in a row on a connection that stays open; \
             building a new connection to replace it"
        );
    }

    /// The server's `maxmemory-policy` may evict the limiter's keys: said once, at connect.
    pub(crate) fn evicting_policy(&self, policy: &str) {
        tracing::warn!(
            limiter = %self.limiter,
            policy,
            "tollgate-redis: the server's maxmemory-policy is {policy}, which can evict the \
             limiter's keys (they carry TTLs): an evicted key is admitted afresh, up to a \
             burst over the limit. Use a Redis of its own or set maxmemory-policy noeviction \
             (see tollgate_redis::MemoryPolicy)."
        );
    }
}

/// The range of slots a call went to, as the breaker and the transitions tell them apart
/// (`Conn::route`): its index, and its first and last slot (0 and 16,383 on one server).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Route {
    pub(crate) index: usize,
    pub(crate) first_slot: u16,
    pub(crate) last_slot: u16,
}

/// How often a refusal may be logged: once a second.
const SAMPLE_NS: u64 = 1_000_000_000;

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Calls that failed or were not sent: what the fault policy answered for.
fn failed_calls(c: &Counters) -> u64 {
    c.faults.get() + c.short_circuited.get()
}

// The integration tests' counting subscriber, one copy (lints for a test binary's module).
#[cfg(test)]
#[path = "../tests/common/events.rs"]
#[allow(dead_code, unreachable_pub)]
mod events;

#[cfg(test)]
mod tests {
    use super::*;
    use tracing::Level;

    fn route(index: usize) -> Route {
        let first_slot = u16::try_from(index * 1_024).unwrap();
        Route {
            index,
            first_slot,
            last_slot: first_slot + 1_023,
        }
    }

    /// On a cluster with a dead master, calls to its ranges fail while calls to the live
    /// masters' ranges are answered, interleaved: each range's transitions are its own, so
    /// the dead range's takeover is said once and the live range says nothing (one flag for
    /// the limiter would say both, call after call).
    #[test]
    fn a_dead_range_and_a_live_one_each_keep_their_own_state() {
        let seen = events::Events::default();
        tracing::subscriber::with_default(seen.clone(), || {
            let c = Counters::new(b"t:");
            let failed: Result<(), Unavailable> =
                Err(Unavailable::Timeout(Duration::from_millis(1)));
            for _ in 0..50 {
                c.faults.add(1);
                c.observer.outcome(&c, route(3), &failed);
                c.observer.outcome(&c, route(9), &Ok::<(), Unavailable>(()));
            }
            assert_eq!(seen.count(Level::WARN, "the fault policy answers"), 1);
            assert_eq!(seen.count(Level::INFO, "hands back"), 0);
            let warn = seen.matching(|s| s.level == Level::WARN);
            assert_eq!(warn[0].field("first_slot"), Some("3072"));
            assert_eq!(warn[0].field("last_slot"), Some("4095"));
            // The dead range answers again: said once, with the outage's 50 failed calls.
            c.observer.outcome(&c, route(3), &Ok::<(), Unavailable>(()));
            c.observer.outcome(&c, route(3), &Ok::<(), Unavailable>(()));
            let info = seen.matching(|s| s.level == Level::INFO);
            assert_eq!(info.len(), 1);
            assert_eq!(info[0].field("failed_calls"), Some("50"));
        });
    }
}
