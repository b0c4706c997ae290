//! What an operator sees of the polite layer beyond [`HostSnapshot`](crate::HostSnapshot):
//! the `metrics` facade's handles (with the `metrics` feature), and the `tracing` span and
//! events. Every metric's name and labels, and every event's message and fields, are
//! written here and nowhere else; the crate docs list them. The layer reaches this file in
//! one line per place it counts.
//!
//! # Handles, registered when the layer is built
//!
//! The label sets are bounded: a host gets its own `host` label only if the user named it
//! ([`PoliteLayer::metrics_hosts`](crate::PoliteLayer::metrics_hosts)); every other host
//! adds into the series of `host="other"`. So the handles are known when the layer is
//! built, and are registered then, with the recorder installed then: one set for `other`
//! and one per named host ([`Instruments`]). A host's counters entry takes its set's
//! [`HostHandle`] (an `Arc`) when the host is first seen, so a request bumps a handle its
//! host already holds: no key built, no registry looked up. With no recorder the facade's
//! handles are no-ops and a bump is a load and a branch; without the feature a
//! [`HostHandle`] is empty and every bump compiles to nothing.
//!
//! The counters are bumped beside the [`Counters`](crate::hosts::Counters) fields they
//! mirror, under the same lock, so after any traffic the two agree (the fields of evicted
//! hosts are gone; their metrics are not).
//!
//! # Budget refusals, sampled
//!
//! A host failing everything under a busy crawler refuses retries by the thousand: the
//! first refusal after a second of the rates' clock logs, and says how many were left out
//! since the last one that did ([`Sampler`], per host, under the host table's lock, so no
//! atomics are needed).

use std::time::Duration;

use tollgate::Timestamp;
use tracing::{Level, Span};

#[cfg(feature = "metrics")]
use std::collections::HashMap;
#[cfg(feature = "metrics")]
use std::sync::Arc;

/// The events' target.
const TARGET: &str = "tollgate_client";

/// The `host` label of every host not named by `metrics_hosts`.
#[cfg(feature = "metrics")]
pub(crate) const OTHER: &str = "other";

/// What a host's counter counts; each mirrors a field of
/// [`HostSnapshot`](crate::HostSnapshot).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tally {
    Requests,
    Successes,
    Throttled,
    ServerErrors,
    Errors,
    Holds,
    Retries,
    BudgetRefused,
    GaveUp,
}

/// Counters per host.
#[cfg(feature = "metrics")]
const TALLIES: usize = 9;

/// Every tally, in discriminant order.
#[cfg(feature = "metrics")]
const ALL: [Tally; TALLIES] = [
    Tally::Requests,
    Tally::Successes,
    Tally::Throttled,
    Tally::ServerErrors,
    Tally::Errors,
    Tally::Holds,
    Tally::Retries,
    Tally::BudgetRefused,
    Tally::GaveUp,
];

/// Each counter's name and help text.
#[cfg(feature = "metrics")]
fn describe(tally: Tally) -> (&'static str, &'static str) {
    match tally {
        Tally::Requests => (
            "tollgate_client_requests_total",
            "Attempts sent to the host (first tries and retries)",
        ),
        Tally::Successes => (
            "tollgate_client_successes_total",
            "Responses that were successes (1xx to 3xx)",
        ),
        Tally::Throttled => (
            "tollgate_client_throttled_total",
            "Responses that refused for rate (429, or a 403 with a spent quota or Retry-After)",
        ),
        Tally::ServerErrors => ("tollgate_client_server_errors_total", "5xx responses"),
        Tally::Errors => (
            "tollgate_client_errors_total",
            "Attempts that failed in the inner client (transport errors)",
        ),
        Tally::Holds => (
            "tollgate_client_holds_total",
            "Responses that held the host back (Retry-After, or a spent quota's reset)",
        ),
        Tally::Retries => ("tollgate_client_retries_total", "Retries sent"),
        Tally::BudgetRefused => (
            "tollgate_client_budget_refused_total",
            "Retries the policy wanted but the host's retry budget refused",
        ),
        Tally::GaveUp => (
            "tollgate_client_gave_up_total",
            "Requests given up on by the retry policy (budget refusals included)",
        ),
    }
}

#[cfg(feature = "metrics")]
const WAIT_SECONDS: &str = "tollgate_client_wait_seconds";
#[cfg(feature = "metrics")]
const RATE: &str = "tollgate_client_rate";

/// One label's handles.
#[cfg(feature = "metrics")]
struct HostMetrics {
    /// Indexed by `Tally as usize`.
    counters: [metrics::Counter; TALLIES],
    wait: metrics::Histogram,
    /// Only for a named host: the rate of a crowd of hosts under `other` is no one's.
    rate: Option<metrics::Gauge>,
}

#[cfg(feature = "metrics")]
impl HostMetrics {
    fn register(host: &str, named: bool) -> HostMetrics {
        let label = || ("host", host.to_owned());
        HostMetrics {
            counters: ALL.map(|t| metrics::counter!(describe(t).0, &[label()])),
            wait: metrics::histogram!(WAIT_SECONDS, &[label()]),
            rate: named.then(|| metrics::gauge!(RATE, &[label()])),
        }
    }
}

/// A host's handles, held in its counters entry; empty without the `metrics` feature, and
/// until the host's entry is made.
#[derive(Clone, Default)]
pub(crate) struct HostHandle {
    #[cfg(feature = "metrics")]
    metrics: Option<Arc<HostMetrics>>,
}

impl std::fmt::Debug for HostHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostHandle").finish_non_exhaustive()
    }
}

impl HostHandle {
    /// Adds one to `tally`'s counter.
    #[inline]
    pub(crate) fn count(&self, tally: Tally) {
        #[cfg(feature = "metrics")]
        if let Some(m) = &self.metrics {
            m.counters[tally as usize].increment(1);
        }
        #[cfg(not(feature = "metrics"))]
        let _ = tally;
    }

    /// An attempt waited `waited` for its turn (permit and rate).
    #[inline]
    pub(crate) fn waited(&self, waited: Duration) {
        #[cfg(feature = "metrics")]
        if let Some(m) = &self.metrics {
            m.wait.record(waited.as_secs_f64());
        }
        #[cfg(not(feature = "metrics"))]
        let _ = waited;
    }

    /// Whether the host has a rate gauge (it is a named host).
    #[inline]
    pub(crate) fn wants_rate(&self) -> bool {
        #[cfg(feature = "metrics")]
        return self.metrics.as_ref().is_some_and(|m| m.rate.is_some());
        #[cfg(not(feature = "metrics"))]
        false
    }

    /// Sets the host's rate gauge, if it has one.
    pub(crate) fn set_rate(&self, rate: f64) {
        #[cfg(feature = "metrics")]
        if let Some(gauge) = self.metrics.as_ref().and_then(|m| m.rate.as_ref()) {
            gauge.set(rate);
        }
        #[cfg(not(feature = "metrics"))]
        let _ = rate;
    }
}

/// A layer's handles: one set for `host="other"`, one per named host.
#[derive(Default)]
pub(crate) struct Instruments {
    #[cfg(feature = "metrics")]
    other: Option<Arc<HostMetrics>>,
    #[cfg(feature = "metrics")]
    named: HashMap<String, Arc<HostMetrics>>,
}

impl std::fmt::Debug for Instruments {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("Instruments");
        #[cfg(feature = "metrics")]
        {
            let mut named: Vec<&String> = self.named.keys().collect();
            named.sort();
            d.field("named", &named);
        }
        d.finish()
    }
}

impl Instruments {
    /// Registers, with the recorder installed now, the handles of `other` and of each host
    /// in `named` (keys as the layer keys them).
    pub(crate) fn register<I>(named: I) -> Instruments
    where
        I: IntoIterator<Item = String>,
    {
        #[cfg(feature = "metrics")]
        {
            describe_all();
            Instruments {
                other: Some(Arc::new(HostMetrics::register(OTHER, false))),
                named: named
                    .into_iter()
                    .map(|host| {
                        let m = Arc::new(HostMetrics::register(&host, true));
                        (host, m)
                    })
                    .collect(),
            }
        }
        #[cfg(not(feature = "metrics"))]
        {
            drop(named.into_iter());
            Instruments {}
        }
    }

    /// Sets each named host's rate gauge to `rate(host)`, so that it reads the host's rate
    /// before its first response too.
    #[cfg(feature = "metrics")]
    pub(crate) fn seed_rates(&self, rate: impl Fn(&str) -> f64) {
        for (host, m) in &self.named {
            if let Some(gauge) = &m.rate {
                gauge.set(rate(host));
            }
        }
    }

    /// The handles of `key`'s label: its own if named, else `other`'s.
    pub(crate) fn for_host(&self, key: &str) -> HostHandle {
        #[cfg(feature = "metrics")]
        return HostHandle {
            metrics: self.named.get(key).or(self.other.as_ref()).cloned(),
        };
        #[cfg(not(feature = "metrics"))]
        {
            let _ = key;
            HostHandle {}
        }
    }
}

/// Tells the recorder what each metric means (its `# HELP` line, in Prometheus).
#[cfg(feature = "metrics")]
fn describe_all() {
    use metrics::Unit;
    for tally in ALL {
        let (name, help) = describe(tally);
        metrics::describe_counter!(name, Unit::Count, help);
    }
    metrics::describe_histogram!(
        WAIT_SECONDS,
        Unit::Seconds,
        "How long each attempt waited for its turn: its host's in-flight permit, then its rate"
    );
    metrics::describe_gauge!(
        RATE,
        "The rate a named host is paced at, in requests per second (set after each response)"
    );
}

/// The debug span around an attempt's wait for its turn (`attempt` 0 is the first try).
pub(crate) fn wait_span(host: &str, attempt: u32) -> Span {
    tracing::debug_span!(target: TARGET, "polite_wait", host, attempt)
}

/// A response held `host` back for `hold`.
pub(crate) fn held(host: &str, hold: Duration, status: u16) {
    tracing::info!(
        target: TARGET,
        host,
        hold_ms = u64::try_from(hold.as_millis()).unwrap_or(u64::MAX),
        status,
        "host held by the server"
    );
}

/// Whether anyone listens for the rate events (checked before the rate is read).
#[inline]
pub(crate) fn rate_events_wanted() -> bool {
    tracing::enabled!(target: TARGET, Level::DEBUG)
}

/// `host`'s rate moved from `from` to `to` after a response with `status`.
pub(crate) fn rate_changed(host: &str, from: f64, to: f64, status: u16) {
    tracing::debug!(target: TARGET, host, from, to, status, "host's rate changed");
}

/// Whether anyone listens for the budget refusal events (checked before sampling).
#[inline]
pub(crate) fn budget_events_wanted() -> bool {
    tracing::enabled!(target: TARGET, Level::WARN)
}

/// The retry budget refused a retry of `host`; `suppressed` refusals were left out since
/// the last event.
pub(crate) fn budget_refused(host: &str, suppressed: u64) {
    tracing::warn!(
        target: TARGET,
        host,
        suppressed,
        "retry refused by the host's retry budget"
    );
}

/// Events per host: one per this long at most, on the rates' clock.
const EVERY: Duration = Duration::from_secs(1);

/// One host's sampler of an event: at most one per [`EVERY`], with the count left out.
/// Kept in the host's counters entry, under the host table's lock.
#[derive(Debug, Default, Clone)]
pub(crate) struct Sampler {
    /// Before this instant nothing logs; `None`: never logged.
    next: Option<Timestamp>,
    suppressed: u64,
}

impl Sampler {
    /// An occurrence at `now`: `Some(occurrences left out since the last event)` if this
    /// one is to be logged.
    pub(crate) fn sample(&mut self, now: Timestamp) -> Option<u64> {
        if self.next.is_some_and(|next| now < next) {
            self.suppressed += 1;
            return None;
        }
        self.next = Some(now + EVERY);
        Some(std::mem::take(&mut self.suppressed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_event_per_second_with_the_count_left_out() {
        let ms = |n: u64| Timestamp::from_nanos(n * 1_000_000);
        let mut s = Sampler::default();
        assert_eq!(s.sample(ms(5_000)), Some(0));
        for t in 5_000..5_999 {
            assert_eq!(s.sample(ms(t)), None);
        }
        assert_eq!(s.sample(ms(6_000)), Some(999));
        assert_eq!(s.sample(ms(6_500)), None);
        assert_eq!(s.sample(ms(60_000)), Some(1)); // a quiet spell: at once
    }

    /// `ALL` lists each tally at its discriminant, and the names are distinct and prefixed.
    #[cfg(feature = "metrics")]
    #[test]
    fn every_tally_once_with_its_own_name() {
        let mut names = Vec::new();
        for (i, tally) in ALL.into_iter().enumerate() {
            assert_eq!(tally as usize, i);
            let (name, _) = describe(tally);
            assert!(
                name.starts_with("tollgate_client_") && name.ends_with("_total"),
                "{name}"
            );
            names.push(name);
        }
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), TALLIES);
    }
}
