//! [`Counts`]: how many requests the layer decided which way, shared by every clone.
//!
//! Every decision bumps one counter, from whichever core serves the request. One shared
//! counter per outcome would be a cache line every core writes on every request, bouncing
//! between them: the cost grows with the cores that serve, which is the wrong way round for
//! a layer meant to cost nothing. So each outcome's counter is striped: [`STRIPES`] sets of
//! counters, each on its own cache line (`CachePadded`), and a thread bumps the set its
//! index picks (threads are numbered as they first count, round robin over the stripes), so
//! that up to `STRIPES` serving threads never share a line. A snapshot adds the stripes up.
//!
//! Why not derive `admitted` and `rejected` from the limiters' own [`Stats`](tollgate::Stats),
//! which the core already keeps striped: they count checks, not requests. A request the
//! layer's limit admits and a stacked limit refuses is one admission and one refusal there
//! (the admission undone) and one `rejected` here; an allowlisted request is no check at
//! all; dry run, delay mode and missing keys have no counterpart. The core's counters are
//! not public, so the stripes are this crate's own.
//!
//! Each counter is bumped with a relaxed increment: they publish no other memory, and a
//! snapshot read while requests run may be a few requests behind on some counters and not
//! on others.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crossbeam_utils::CachePadded;

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

/// One decision, to be counted; its discriminant is its counter's index in a stripe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Admitted = 0,
    Rejected,
    Delayed,
    DryRunRefused,
    Allowlisted,
    MissingKeyRejected,
    MissingKeyAllowed,
    Unavailable,
}

/// How many sets of counters a layer keeps: a power of two, enough for the threads of a
/// server on a large machine; more threads than this share stripes (still correct, only
/// less spread). 64 stripes of one 128-byte line each: 8 KiB per layer.
const STRIPES: usize = 64;

/// One stripe: a counter per [`Outcome`], indexed by `Outcome as usize`.
type Stripe = [AtomicU64; OUTCOMES];

/// How many outcomes there are.
const OUTCOMES: usize = 8;

/// The shared counters behind [`Counts`], striped (see the module docs).
pub(crate) struct Counters {
    stripes: Box<[CachePadded<Stripe>]>,
}

impl Default for Counters {
    fn default() -> Counters {
        Counters {
            stripes: (0..STRIPES)
                .map(|_| CachePadded::new(Stripe::default()))
                .collect(),
        }
    }
}

impl std::fmt::Debug for Counters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.snapshot().fmt(f)
    }
}

/// The next thread's stripe number.
static NEXT_THREAD: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// This thread's stripe number, taken on its first count.
    static THREAD_STRIPE: Cell<Option<usize>> = const { Cell::new(None) };
}

/// This thread's stripe, `0..STRIPES`.
fn thread_stripe() -> usize {
    THREAD_STRIPE.with(|stripe| match stripe.get() {
        Some(i) => i,
        None => {
            // ordering: a ticket; only its uniqueness matters, no memory is published.
            let i = NEXT_THREAD.fetch_add(1, Ordering::Relaxed) % STRIPES;
            stripe.set(Some(i));
            i
        }
    })
}

impl Counters {
    pub(crate) fn count(&self, outcome: Outcome) {
        let stripe = &self.stripes[thread_stripe()];
        // ordering: a statistic; it publishes no other memory.
        stripe[outcome as usize].fetch_add(1, Ordering::Relaxed);
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
            dry_run_refused: read(Outcome::DryRunRefused),
            allowlisted: read(Outcome::Allowlisted),
            missing_key_rejected: read(Outcome::MissingKeyRejected),
            missing_key_allowed: read(Outcome::MissingKeyAllowed),
            unavailable: read(Outcome::Unavailable),
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
            for t in 0..(STRIPES + 6) {
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
        assert_eq!(counts.admitted, 100 * (STRIPES as u64 + 6));
        assert_eq!(counts.unavailable, STRIPES as u64 / 2 + 3);
        assert_eq!(counts.rejected, 0);
    }
}
