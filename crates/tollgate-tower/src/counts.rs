//! [`Counts`]: how many requests the layer decided which way, shared by every clone.
//!
//! Every decision bumps one counter, from whichever core serves the request. One shared
//! counter per outcome would be a cache line every core writes on every request, bouncing
//! between them: the cost grows with the cores that serve, which is the wrong way round for
//! a layer meant to cost nothing. So each outcome's counter is striped: [`OWNED`] sets of
//! counters, each on its own cache line (`CachePadded`), plus one shared set, under the
//! core's stripe-ownership protocol ([`tollgate::stripe`]): a thread that owns a stripe
//! index is that stripe's only writer, in every layer, and bumps it with a plain load and
//! store, not an atomic read-modify-write (whose `lock` prefix was the costliest instruction
//! of a counted request); threads without one share the last stripe and bump it with
//! `fetch_add`. A snapshot adds the stripes up.
//!
//! Why not derive `admitted` and `rejected` from the limiters' own [`Stats`](tollgate::Stats),
//! which the core already keeps striped: they count checks, not requests. A request the
//! layer's limit admits and a stacked limit refuses is one admission and one refusal there
//! (the admission undone) and one `rejected` here; an allowlisted request is no check at
//! all; dry run, delay mode and missing keys have no counterpart. So the counters are this
//! crate's own; the ownership protocol is the core's.
//!
//! Counters are relaxed: they publish no other memory, and a snapshot read while requests
//! run may be a few requests behind on some counters and not on others.

use std::sync::atomic::{AtomicU64, Ordering};

use crossbeam_utils::CachePadded;
use tollgate::stripe::{OWNED, owned_index};

/// How many requests a [`RateLimitLayer`](crate::RateLimitLayer) (every clone of it and of
/// its services) decided each way, since it was built. Each request counts once.
///
/// Counting is cheap on many cores: each serving thread bumps counters on a cache line of its
/// own (up to 64 threads), and a snapshot adds them up, so a snapshot taken while requests
/// run may be a few requests behind on some fields and not on others.
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
///
/// The other outcomes: an allowlisted key, a request without a key (refused, or let
/// through), and a new key that a full table has no room for. (In delay mode, a request that
/// waited for its turn counts as `delayed`: see [`Delay`](crate::Delay)'s example.)
///
/// ```
/// use std::convert::Infallible;
/// use tollgate::{FullPolicy, Limiter, Quota};
/// use tollgate_tower::{HeaderKey, MissingKey, RateLimitLayer};
/// use tower::{Layer, ServiceExt, service_fn};
///
/// let hello = service_fn(|_: http::Request<()>| async {
///     Ok::<_, Infallible>(http::Response::new(String::new()))
/// });
/// let with_key = |key: Option<&str>| {
///     let mut req = http::Request::builder();
///     if let Some(key) = key {
///         req = req.header("x-api-key", key);
///     }
///     req.body(()).unwrap()
/// };
/// let api_key = || HeaderKey::new(http::HeaderName::from_static("x-api-key"));
///
/// // Room for one key; "ops" is allowlisted; no key, no entry (the default).
/// let one_key = Limiter::builder(Quota::per_minute(10))
///     .shards(1)
///     .capacity(1)
///     .full_policy(FullPolicy::RefuseNewKeys)
///     .build();
/// let strict = RateLimitLayer::builder(one_key, api_key())
///     .allow_keys([http::HeaderValue::from_static("ops")])
///     .build();
/// // No key: let through.
/// let lax = RateLimitLayer::builder(Limiter::keyed(Quota::per_minute(10)), api_key())
///     .on_missing_key(MissingKey::Allow)
///     .build();
///
/// futures_executor::block_on(async {
///     let svc = strict.layer(hello.clone());
///     for (key, status) in [(Some("alice"), 200), (Some("bob"), 503), (Some("ops"), 200), (None, 400)] {
///         assert_eq!(svc.clone().oneshot(with_key(key)).await.unwrap().status(), status);
///     }
///     let svc = lax.layer(hello);
///     assert_eq!(svc.oneshot(with_key(None)).await.unwrap().status(), 200);
/// });
/// let counts = strict.counts();
/// assert_eq!(
///     (counts.admitted, counts.unavailable, counts.allowlisted, counts.missing_key_rejected),
///     (1, 1, 1, 1)
/// );
/// assert_eq!(lax.counts().missing_key_allowed, 1);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Counts {
    /// Admitted at once by every limit, and passed to the service.
    pub admitted: u64,
    /// Refused with a `429` (in delay mode, also those whose turn would come too late or
    /// whose wait failed).
    pub rejected: u64,
    /// Delay mode: their turn came after a wait, and they went on to the service (counted
    /// when the turn comes: one dropped after it, while the inner service readies, counts
    /// here too, its cell spent).
    pub delayed: u64,
    /// Delay mode: dropped while they waited their turn (the client hung up, a timeout
    /// around the service gave up), so neither passed on nor answered; the stacked limits
    /// got their cells back, and the turn went to the next in line.
    pub abandoned: u64,
    /// Dry-run mode: would have been refused (`429`, `400`, `503` or `413`), passed to the
    /// service, marked with [`DryRunRefusal`](crate::DryRunRefusal).
    pub dry_run_refused: u64,
    /// Passed to the service unlimited because their key is on the allowlist.
    pub allowlisted: u64,
    /// Passed to the service without a key looked for, because
    /// [`Builder::skip_if`](crate::Builder::skip_if) said so (health checks, `OPTIONS`).
    pub skipped: u64,
    /// Without a key, refused with a `400` ([`MissingKey::Reject`](crate::MissingKey)).
    pub missing_key_rejected: u64,
    /// Without a key, passed on ([`MissingKey::Allow`](crate::MissingKey)); the stacked
    /// limits may still have refused some of them (counted in `rejected`, not here).
    pub missing_key_allowed: u64,
    /// Refused with a `503`: a limiter's table was full under
    /// `FullPolicy::RefuseNewKeys`.
    pub unavailable: u64,
    /// Of the requests without a key (counted above in `missing_key_rejected`,
    /// `missing_key_allowed` or `dry_run_refused`), those whose forwarding walk through
    /// trusted proxies reached an element that names no address
    /// ([`NoKey::Unattributable`](crate::NoKey::Unattributable)), for the layer's key or a
    /// stacked one.
    pub unattributable: u64,
    /// Of the requests without a key (counted above likewise), those that [`PeerIp`] or
    /// [`ClientIp`] could not key because the server put no peer address in the request's
    /// extensions ([`NoKey::NoPeerAddress`](crate::NoKey::NoPeerAddress), which says how to
    /// fix it). Anything but 0 here is a set-up mistake.
    ///
    /// [`PeerIp`]: crate::PeerIp
    /// [`ClientIp`]: crate::ClientIp
    pub no_peer_address: u64,
    /// Of the requests counted in `admitted` (or `missing_key_allowed`), the admissions
    /// that left their key with less than the near-limit share of its burst
    /// ([`Builder::near_limit`](crate::Builder::near_limit): by default, less than 20%
    /// left), once per limit that was near: the layer's own and each stacked one, so a
    /// request near two limits counts two (as the metric counts one under each policy).
    /// Pressure shows here before refusals do. Delay mode's waits report no cells
    /// left, so its admissions are not counted here.
    pub near_limit: u64,
}

/// One decision, to be counted; its discriminant is its counter's index in a stripe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Admitted = 0,
    Rejected,
    Delayed,
    DryRunRefused,
    Allowlisted,
    Abandoned,
    MissingKeyRejected,
    MissingKeyAllowed,
    Unavailable,
    Skipped,
    // Not outcomes of their own: why some of the keyless requests above had no key.
    Unattributable,
    NoPeerAddress,
    // Of the admissions: those that left their key near its limit.
    NearLimit,
}

/// One stripe: a counter per [`Outcome`], indexed by `Outcome as usize`.
type Stripe = [AtomicU64; OUTCOMES];

/// How many outcomes there are.
pub(crate) const OUTCOMES: usize = 13;

/// The shared counters behind [`Counts`], striped (see the module docs).
pub(crate) struct Counters {
    /// `OWNED` owned stripes, then the shared one: a fixed-size array, so the index is
    /// checked against a constant, not a length loaded from the heap.
    stripes: Box<[CachePadded<Stripe>; OWNED + 1]>,
    /// The same decisions through the `metrics` facade (registered when the layer is built).
    #[cfg(feature = "metrics")]
    pub(crate) instruments: crate::instruments::Instruments,
}

impl Default for Counters {
    fn default() -> Counters {
        Counters {
            stripes: Box::new(std::array::from_fn(|_| CachePadded::new(Stripe::default()))),
            #[cfg(feature = "metrics")]
            instruments: crate::instruments::Instruments::default(),
        }
    }
}

impl std::fmt::Debug for Counters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.snapshot().fmt(f)
    }
}

impl Counters {
    #[inline]
    pub(crate) fn count(&self, outcome: Outcome) {
        self.bump(outcome);
        #[cfg(feature = "metrics")]
        self.instruments.count(outcome);
    }

    /// Counts a refusal by the stacked limit `by` (its index), or by the layer's own
    /// (`None`): one count here, and the refusing policy's counter in the metrics.
    #[cfg(feature = "metrics")]
    pub(crate) fn count_by(&self, outcome: Outcome, by: Option<usize>) {
        self.bump(outcome);
        self.instruments.count_by(outcome, by);
    }

    #[inline]
    fn bump(&self, outcome: Outcome) {
        match owned_index() {
            Some(i) => {
                let c = &self.stripes[i][outcome as usize];
                // ordering: this thread is the stripe's only writer (`tollgate::stripe`), so a
                // plain load and store lose nothing; readers only add the values up.
                c.store(c.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
            }
            None => {
                // ordering: a statistic; it publishes no other memory.
                self.stripes[OWNED][outcome as usize].fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    pub(crate) fn snapshot(&self) -> Counts {
        // ordering: statistics, read independently (see the module docs).
        let read = |outcome: Outcome| -> u64 {
            self.stripes
                .iter()
                .map(|stripe| stripe[outcome as usize].load(Ordering::Relaxed))
                .fold(0, u64::wrapping_add)
        };
        Counts {
            admitted: read(Outcome::Admitted),
            rejected: read(Outcome::Rejected),
            delayed: read(Outcome::Delayed),
            abandoned: read(Outcome::Abandoned),
            dry_run_refused: read(Outcome::DryRunRefused),
            allowlisted: read(Outcome::Allowlisted),
            skipped: read(Outcome::Skipped),
            missing_key_rejected: read(Outcome::MissingKeyRejected),
            missing_key_allowed: read(Outcome::MissingKeyAllowed),
            unavailable: read(Outcome::Unavailable),
            unattributable: read(Outcome::Unattributable),
            no_peer_address: read(Outcome::NoPeerAddress),
            near_limit: read(Outcome::NearLimit),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts from many threads (more than there are stripes) all add up.
    #[test]
    fn stripes_add_up() {
        let counters = Counters::default();
        std::thread::scope(|s| {
            for t in 0..(OWNED + 6) {
                let counters = &counters;
                s.spawn(move || {
                    for _ in 0..100 {
                        counters.count(Outcome::Admitted);
                    }
                    if t % 2 == 0 {
                        counters.count(Outcome::Unavailable);
                    }
                });
            }
        });
        let counts = counters.snapshot();
        assert_eq!(counts.admitted, 100 * (OWNED as u64 + 6));
        assert_eq!(counts.unavailable, OWNED as u64 / 2 + 3);
        assert_eq!(counts.rejected, 0);
    }

    /// Threads that exit give their stripes back to the next ones, in waves of more threads
    /// than there are owned stripes: no count is lost across the hand-overs.
    #[test]
    fn counts_survive_stripe_hand_overs() {
        let counters = Counters::default();
        for _ in 0..3 {
            std::thread::scope(|s| {
                for _ in 0..(OWNED + 6) {
                    s.spawn(|| {
                        for _ in 0..50 {
                            counters.count(Outcome::Rejected);
                        }
                    });
                }
            });
        }
        assert_eq!(counters.snapshot().rejected, 3 * 50 * (OWNED as u64 + 6));
    }
}
