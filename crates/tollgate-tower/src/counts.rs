//! [`Counts`]: how many requests the layer decided which way, shared by every clone.
//!
//! Plain counters, each bumped once per decision with a relaxed increment: they publish no
//! other memory, and a snapshot read while requests run may be a few requests behind on
//! some counters and not on others.

use std::sync::atomic::{AtomicU64, Ordering};

/// How many requests a [`RateLimitLayer`](crate::RateLimitLayer) (every clone of it and of
/// its services) decided each way, since it was built. Each request counts once.
///
/// # Examples
///
/// ```
/// use std::convert::Infallible;
/// use tollgate::Quota;
/// use tollgate_tower::{Global, RateLimitLayer};
/// use tower::{Layer, ServiceExt, service_fn};
///
/// let layer = RateLimitLayer::new(Quota::per_minute(1), Global);
/// let svc = layer.layer(service_fn(|_: http::Request<()>| async {
///     Ok::<_, Infallible>(http::Response::new(String::new()))
/// }));
/// futures_executor::block_on(async {
///     svc.clone().oneshot(http::Request::new(())).await.unwrap();
///     svc.clone().oneshot(http::Request::new(())).await.unwrap();
/// });
/// let counts = layer.counts();
/// assert_eq!((counts.admitted, counts.rejected), (1, 1));
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Counts {
    /// Admitted at once by every limit, and passed to the service.
    pub admitted: u64,
    /// Refused with a `429` (in delay mode, also those whose turn would come too late or
    /// whose wait failed).
    pub rejected: u64,
    /// Delay mode: passed to the service after waiting their turn.
    pub delayed: u64,
    /// Dry-run mode: would have been refused (`429`, `400` or `503`), passed to the
    /// service, marked with [`DryRunRefusal`](crate::DryRunRefusal).
    pub dry_run_refused: u64,
    /// Passed to the service unlimited because their key is on the allowlist.
    pub allowlisted: u64,
    /// Without a key, refused with a `400` ([`MissingKey::Reject`](crate::MissingKey)).
    pub missing_key_rejected: u64,
    /// Without a key, passed on ([`MissingKey::Allow`](crate::MissingKey)); the stacked
    /// limits may still have refused some of them (counted in `rejected`, not here).
    pub missing_key_allowed: u64,
    /// Refused with a `503`: a limiter's table was full under
    /// `FullPolicy::RefuseNewKeys`.
    pub unavailable: u64,
}

/// One decision, to be counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Admitted,
    Rejected,
    Delayed,
    DryRunRefused,
    Allowlisted,
    MissingKeyRejected,
    MissingKeyAllowed,
    Unavailable,
}

/// The shared counters behind [`Counts`].
#[derive(Debug, Default)]
pub(crate) struct Counters {
    admitted: AtomicU64,
    rejected: AtomicU64,
    delayed: AtomicU64,
    dry_run_refused: AtomicU64,
    allowlisted: AtomicU64,
    missing_key_rejected: AtomicU64,
    missing_key_allowed: AtomicU64,
    unavailable: AtomicU64,
}

impl Counters {
    pub(crate) fn count(&self, outcome: Outcome) {
        let counter = match outcome {
            Outcome::Admitted => &self.admitted,
            Outcome::Rejected => &self.rejected,
            Outcome::Delayed => &self.delayed,
            Outcome::DryRunRefused => &self.dry_run_refused,
            Outcome::Allowlisted => &self.allowlisted,
            Outcome::MissingKeyRejected => &self.missing_key_rejected,
            Outcome::MissingKeyAllowed => &self.missing_key_allowed,
            Outcome::Unavailable => &self.unavailable,
        };
        // ordering: a statistic; it publishes no other memory.
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> Counts {
        // ordering: statistics, read independently (see the module docs).
        let read = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Counts {
            admitted: read(&self.admitted),
            rejected: read(&self.rejected),
            delayed: read(&self.delayed),
            dry_run_refused: read(&self.dry_run_refused),
            allowlisted: read(&self.allowlisted),
            missing_key_rejected: read(&self.missing_key_rejected),
            missing_key_allowed: read(&self.missing_key_allowed),
            unavailable: read(&self.unavailable),
        }
    }
}
