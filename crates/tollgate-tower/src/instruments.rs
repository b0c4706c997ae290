//! The `metrics` feature: the layer's counters, its delay histogram and its limiters' gauges,
//! as handles of the `metrics` facade.
//!
//! The handles are registered once, when the layer is built, against the recorder installed
//! then; a request only bumps a handle it already holds (no key built, no registry looked
//! up). Without a recorder the facade hands out no-op handles, and a bump is a load and a
//! branch. The gauges are set from [`Stats`], which scans each limiter's table, so they are
//! set where a snapshot is taken anyway ([`RateLimitLayer::stats`](crate::RateLimitLayer::stats)),
//! never from a request.

use std::time::Duration;

use metrics::{Counter, Gauge, Histogram, Unit};
use tollgate::Stats;

use crate::counts::{OUTCOMES, Outcome};

/// Every outcome, in discriminant order.
const ALL: [Outcome; OUTCOMES] = [
    Outcome::Admitted,
    Outcome::Rejected,
    Outcome::Delayed,
    Outcome::DryRunRefused,
    Outcome::Allowlisted,
    Outcome::Abandoned,
    Outcome::MissingKeyRejected,
    Outcome::MissingKeyAllowed,
    Outcome::Unavailable,
    Outcome::Skipped,
    Outcome::Unattributable,
    Outcome::NoPeerAddress,
    Outcome::NearLimit,
];

/// Each outcome's counter: its name and its help text.
fn describe(outcome: Outcome) -> (&'static str, &'static str) {
    match outcome {
        Outcome::Admitted => (
            "tollgate_admitted_total",
            "Requests admitted at once by every limit",
        ),
        Outcome::Rejected => (
            "tollgate_refused_total",
            "Requests refused with a 429 (or 413: costlier than the burst)",
        ),
        Outcome::Delayed => (
            "tollgate_delayed_total",
            "Delay mode: requests passed on after waiting their turn",
        ),
        Outcome::DryRunRefused => (
            "tollgate_dry_run_refused_total",
            "Dry-run mode: requests that would have been refused, passed on",
        ),
        Outcome::Allowlisted => (
            "tollgate_allowlisted_total",
            "Requests passed on unlimited: their key is allowlisted",
        ),
        Outcome::Abandoned => (
            "tollgate_abandoned_total",
            "Delay mode: requests dropped while they waited their turn (client gone, timeout)",
        ),
        Outcome::MissingKeyRejected => (
            "tollgate_keyless_refused_total",
            "Requests without a key, refused with a 400",
        ),
        Outcome::MissingKeyAllowed => (
            "tollgate_keyless_allowed_total",
            "Requests without a key, passed on (MissingKey::Allow)",
        ),
        Outcome::Unavailable => (
            "tollgate_table_full_total",
            "Requests refused with a 503: a full table had no room for their key",
        ),
        Outcome::Skipped => (
            "tollgate_skipped_total",
            "Requests passed on without a key looked for (skip_if)",
        ),
        Outcome::Unattributable => (
            "tollgate_unattributable_total",
            "Keyless requests whose forwarding walk reached an element naming no address",
        ),
        Outcome::NoPeerAddress => (
            "tollgate_no_peer_address_total",
            "Keyless requests with no peer address in their extensions (a set-up mistake)",
        ),
        Outcome::NearLimit => (
            "tollgate_near_limit_total",
            "Admissions that left their key less than the near-limit share of its burst",
        ),
    }
}

/// One layer's handles.
pub(crate) struct Instruments {
    /// Indexed by `Outcome as usize`.
    counters: [Counter; OUTCOMES],
    delay: Histogram,
    /// Per stacked limit: the refusals, dry-run mode's would-be refusals, and the
    /// near-limit admissions it made.
    stacked: Vec<(Counter, Counter, Counter)>,
    /// Per limiter, the layer's own first, then the stacked ones: live keys, bytes.
    gauges: Vec<(Gauge, Gauge)>,
}

impl Default for Instruments {
    /// No-op handles, until the layer is built.
    fn default() -> Instruments {
        Instruments {
            counters: std::array::from_fn(|_| Counter::noop()),
            delay: Histogram::noop(),
            stacked: Vec::new(),
            gauges: Vec::new(),
        }
    }
}

impl Instruments {
    /// Registers the handles of a layer whose policy is `policy` and whose stacked
    /// limits' policies are `stacked`, with the recorder installed now.
    pub(crate) fn register<'a>(
        policy: &'a str,
        stacked: impl Iterator<Item = &'a str> + Clone,
    ) -> Instruments {
        let counters = ALL.map(|outcome| {
            let (name, help) = describe(outcome);
            metrics::describe_counter!(name, Unit::Count, help);
            metrics::counter!(name, "policy" => policy.to_owned())
        });
        metrics::describe_histogram!(
            "tollgate_delay_seconds",
            Unit::Seconds,
            "Delay mode: how long the requests that waited their turn waited"
        );
        let delay = metrics::histogram!("tollgate_delay_seconds", "policy" => policy.to_owned());
        metrics::describe_gauge!(
            "tollgate_live_keys",
            Unit::Count,
            "Keys whose limit state has not expired, per limiter (set when stats are taken)"
        );
        metrics::describe_gauge!(
            "tollgate_bytes",
            Unit::Bytes,
            "Bytes a limiter holds (set when stats are taken)"
        );
        let refused = |name: &str| {
            let policy = || ("policy", name.to_owned());
            (
                metrics::counter!(describe(Outcome::Rejected).0, &[policy()]),
                metrics::counter!(describe(Outcome::DryRunRefused).0, &[policy()]),
                metrics::counter!(describe(Outcome::NearLimit).0, &[policy()]),
            )
        };
        let gauges = std::iter::once(policy)
            .chain(stacked.clone())
            .map(|name| {
                (
                    metrics::gauge!("tollgate_live_keys", "policy" => name.to_owned()),
                    metrics::gauge!("tollgate_bytes", "policy" => name.to_owned()),
                )
            })
            .collect();
        Instruments {
            counters,
            delay,
            stacked: stacked.map(refused).collect(),
            gauges,
        }
    }

    #[inline]
    pub(crate) fn count(&self, outcome: Outcome) {
        self.counters[outcome as usize].increment(1);
    }

    /// A refusal or a near-limit admission by the stacked limit `by` (its index), or by
    /// the layer's own (`None`).
    pub(crate) fn count_by(&self, outcome: Outcome, by: Option<usize>) {
        match (by.and_then(|i| self.stacked.get(i)), outcome) {
            (Some((refused, _, _)), Outcome::Rejected) => refused.increment(1),
            (Some((_, dry_run, _)), Outcome::DryRunRefused) => dry_run.increment(1),
            (Some((_, _, near)), Outcome::NearLimit) => near.increment(1),
            _ => self.count(outcome),
        }
    }

    /// A delay-mode request waited `waited` for its turn.
    pub(crate) fn waited(&self, waited: Duration) {
        self.delay.record(waited.as_secs_f64());
    }

    /// Sets the gauges from the limiters' stats (in the order registered).
    pub(crate) fn set_gauges(&self, stats: &[(String, Stats)]) {
        for ((live, bytes), (_, stats)) in self.gauges.iter().zip(stats) {
            live.set(stats.live_keys as f64);
            bytes.set(stats.bytes as f64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `ALL` lists each outcome at its discriminant, and the names are distinct and
    /// prefixed.
    #[test]
    fn every_outcome_once_with_its_own_name() {
        let mut names = Vec::new();
        for (i, outcome) in ALL.into_iter().enumerate() {
            assert_eq!(outcome as usize, i);
            let (name, _) = describe(outcome);
            assert!(
                name.starts_with("tollgate_") && name.ends_with("_total"),
                "{name}"
            );
            names.push(name);
        }
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), OUTCOMES);
    }
}
