//! Per-host counters for observability: a map from host key to counters under one mutex,
//! bounded to a capacity with the least recently used host evicted ([`Lru`]). The critical
//! sections are a few additions; no lock is held across an await.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tollgate::Timestamp;

use crate::budget::Spent;
use crate::lru::{Lru, lock};
use crate::observe::{HostHandle, Instruments, Sampler};
use crate::signal::{QuotaUnit, ServerSignal};

/// What the client knows of one host, from [`PoliteLayer::host`](crate::PoliteLayer::host).
///
/// # Examples
///
/// ```
/// use tollgate_client::{AdaptiveConfig, PoliteLayer};
///
/// let layer = PoliteLayer::new(AdaptiveConfig::new(5.0));
/// assert!(layer.host("example.com:80").is_none()); // never seen
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct HostSnapshot {
    /// The host's key.
    pub key: String,
    /// The rate it is paced at now, in requests per second.
    pub rate: f64,
    /// Whether that rate is the server's announced policy (else it is probed).
    pub announced: bool,
    /// Requests in flight now.
    pub in_flight: usize,
    /// The most requests in flight at once.
    pub in_flight_max: usize,
    /// Attempts sent (first tries and retries).
    pub requests: u64,
    /// Responses that were successes.
    pub successes: u64,
    /// 429 responses.
    pub throttled: u64,
    /// 5xx responses.
    pub server_errors: u64,
    /// Transport errors from the inner client.
    pub errors: u64,
    /// Retries sent.
    pub retries: u64,
    /// Requests given up on by the retry policy (budget refusals included).
    pub gave_up: u64,
    /// Retries the policy wanted but the host's [`RetryBudget`](crate::RetryBudget) refused.
    pub budget_refused: u64,
    /// Responses that held the host back (a `Retry-After` on a refusal, or a spent quota
    /// with its reset, on any status).
    pub holds: u64,
    /// A `RateLimit-Policy` unit the layer cannot measure (`"concurrent-requests"` or
    /// another), last seen: that policy is ignored. A policy in requests or content bytes
    /// is paced ([`RateSnapshot::byte_policy`](crate::RateSnapshot::byte_policy)).
    pub ignored_unit: Option<QuotaUnit>,
    /// Attempts that had to wait (for a permit or for the rate).
    pub waits: u64,
    /// The total time attempts waited.
    pub waited: Duration,
    /// The last response's signals.
    pub last_signal: Option<ServerSignal>,
    /// When (since the layer was made) the host's rate was last lowered by a throttle.
    pub last_decrease: Option<Duration>,
}

#[derive(Debug, Default, Clone)]
pub(crate) struct Counters {
    pub(crate) in_flight_max: usize,
    pub(crate) requests: u64,
    pub(crate) successes: u64,
    pub(crate) throttled: u64,
    pub(crate) server_errors: u64,
    pub(crate) errors: u64,
    pub(crate) retries: u64,
    pub(crate) gave_up: u64,
    pub(crate) budget_refused: u64,
    pub(crate) holds: u64,
    pub(crate) ignored_unit: Option<QuotaUnit>,
    /// The last response's `Content-Length`, the estimate of the next one's bytes.
    pub(crate) last_bytes: u64,
    /// First attempts and retries over the retry budget's window.
    pub(crate) budget: Spent,
    /// Plain 5xx answers (no `Retry-After`) in a row.
    pub(crate) server_errors_in_a_row: u32,
    pub(crate) waits: u64,
    pub(crate) waited: Duration,
    pub(crate) last_signal: Option<ServerSignal>,
    /// The metrics these counters mirror (the host's label's handles), taken when the
    /// entry is made.
    pub(crate) handle: HostHandle,
    /// The budget refusal event's sampler.
    pub(crate) budget_log: Sampler,
    /// The latest attempts' send instants on the rates' clock (a ring).
    sends: [Option<Timestamp>; SENDS],
    sent: usize,
    /// The latest send and the interval its turn was taken at.
    pub(crate) last_send: Option<(Timestamp, Duration)>,
}

/// How many recent send instants a host keeps for [`Counters::bunched`].
const SENDS: usize = 8;

impl Counters {
    /// Records an attempt sent at `at`, its turn taken at one per `interval`.
    pub(crate) fn sent(&mut self, at: Timestamp, interval: Duration) {
        self.sends[self.sent % SENDS] = Some(at);
        self.sent = self.sent.wrapping_add(1);
        if self.last_send.is_none_or(|(last, _)| at >= last) {
            self.last_send = Some((at, interval));
        }
    }

    /// Whether the client's own sends up to `at` (the latest [`SENDS`]) broke its pacing
    /// at one per `interval`: replayed through a GCRA of that interval and burst 1, one of
    /// them came more than half an interval early. The client then let them go bunched (its
    /// turns came due during a stall and left together), and a server's small burst refuses
    /// such a clump at any rate.
    pub(crate) fn bunched(&self, at: Timestamp, interval: Duration) -> bool {
        let slack = interval / 2;
        let mut sent: Vec<Timestamp> = self
            .sends
            .iter()
            .flatten()
            .copied()
            .filter(|&t| t <= at + slack)
            .collect();
        sent.sort_unstable();
        let mut due: Option<Timestamp> = None;
        for t in sent {
            if due.is_some_and(|d| t + slack < d) {
                return true;
            }
            due = Some(due.map_or(t, |d| d.max(t)) + interval);
        }
        false
    }
}

#[derive(Debug)]
pub(crate) struct Hosts {
    inner: Mutex<Lru<String, Counters>>,
    #[cfg(feature = "metrics")] // read only when the metrics' hosts are named
    capacity: usize,
    /// The handles a new host's entry takes.
    instruments: Arc<Instruments>,
}

impl Hosts {
    pub(crate) fn new(capacity: usize, instruments: Arc<Instruments>) -> Hosts {
        Hosts {
            inner: Mutex::new(Lru::new(capacity)),
            #[cfg(feature = "metrics")]
            capacity,
            instruments,
        }
    }

    /// The most hosts it holds.
    #[cfg(feature = "metrics")]
    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// Runs `f` on the host's counters, adding it (and evicting the least recently used
    /// host of a full table) if new.
    pub(crate) fn with<R>(&self, key: &str, f: impl FnOnce(&mut Counters) -> R) -> R {
        let new = || Counters {
            handle: self.instruments.for_host(key),
            ..Counters::default()
        };
        lock(&self.inner).with(key, new, f)
    }

    pub(crate) fn get(&self, key: &str) -> Option<Counters> {
        lock(&self.inner).get(key).cloned()
    }

    pub(crate) fn all(&self) -> Vec<(String, Counters)> {
        let mut v: Vec<_> = lock(&self.inner)
            .iter()
            .map(|(k, c)| (k.clone(), c.clone()))
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_and_sorted() {
        let h = Hosts::new(2, Arc::default());
        h.with("b", |c| c.requests += 1);
        h.with("a", |c| c.requests += 1);
        h.with("b", |c| c.requests += 1);
        h.with("c", |c| c.requests += 1); // evicts a
        assert!(h.get("a").is_none());
        let all = h.all();
        let keys: Vec<&str> = all.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["b", "c"]);
        assert_eq!(all[0].1.requests, 2);
    }

    #[test]
    fn bunched_sends_break_the_clients_own_pacing() {
        let ms = |n: u64| Timestamp::from_nanos(n * 1_000_000);
        let paced = Duration::from_millis(100);
        let mut c = Counters::default();
        for t in [0, 100, 240, 300] {
            c.sent(ms(t), paced); // late, then 60 ms after: within half an interval of its turn
        }
        assert!(!c.bunched(ms(300), paced));
        c.sent(ms(500), paced);
        c.sent(ms(500), paced); // two at once after a stall
        c.sent(ms(530), paced);
        assert!(c.bunched(ms(530), paced)); // the clump is before it
        assert!(c.bunched(ms(500), paced)); // and around it
        assert!(!c.bunched(ms(300), paced)); // sends after it left later are not its cause
        for i in 0..SENDS as u64 {
            c.sent(ms(1_000 + 100 * i), paced);
        }
        assert!(!c.bunched(ms(1_700), paced)); // the clump is out of the ring
    }
}
