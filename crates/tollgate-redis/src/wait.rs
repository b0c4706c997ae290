//! Waiting on the fleet limit: [`UntilReady`] reserves the cells on the server, waits here on
//! tollgate's own timer, and gives them back if it is dropped before they come.
//!
//! # How a wait goes
//!
//! 1. **Reserve** (one round trip, the script's `reserve`): the server computes the
//!    admission instant from the key's TAT, refuses if it is further off than the wait's
//!    bound, and otherwise stores the TAT the cells will leave behind, *now*, as a check at
//!    that instant would, and answers the wait. From then on every node sees the cells as
//!    taken: the fleet's bound `b + floor(W / T)` holds over the server's admission instants,
//!    whatever the waiters do.
//! 2. **Wait** locally with [`tollgate::timer::sleep_until`] until `recv + wait`, where `recv`
//!    is when the answer arrived: never before the server's instant (the server read `TIME`
//!    before `recv`). No runtime timer is needed for this part.
//! 3. **Cancelled** (dropped while waiting): a refund is sent (the script's `refund`), which
//!    restores the previous TAT only if the key still holds exactly the TAT this reservation
//!    wrote — compare and restore, so a refund can never give back cells that later requests
//!    have been promised. If the key has moved on (another reservation or check came after),
//!    the cells stay spent; [`Stats::refunds_declined`](crate::Stats) counts them.
//!
//! The refund runs in the background (a `Drop` cannot await): as a task on the Tokio runtime
//! the wait was dropped in, or else on a short-lived thread of its own. A wait dropped while its
//! reservation call is still in flight cannot know what the server wrote, so its cells stay
//! spent too (for at most the call's timeout past now, the reservation's own wait).
//!
//! No FIFO order is promised across nodes: each reservation is ordered by when it reaches the
//! server.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tollgate::{Error, Quota};
use tracing::Instrument;

use crate::admitted::{Admitted, Source};
use crate::engine::{Engine, Op, within_burst};
use crate::fault::FaultPolicy;
use crate::script::interval_micros;
use crate::stats::bump;

type Waiting = Pin<Box<dyn Future<Output = Result<Admitted, Error>> + Send>>;

/// Waits until `n` cells of a key are admitted by the fleet, or fails at once. Built by
/// [`FleetLimiter::until_ready`](crate::FleetLimiter::until_ready) and its variants; bounded by
/// [`within`](UntilReady::within).
///
/// # Cancel safety
///
/// Dropping it before it completes gives its reserved cells back on the server when the key
/// still holds exactly what the reservation wrote (see the module docs for the cases where
/// the cells stay spent: the key moved on, or the reservation call was in flight).
///
/// # Examples
///
/// ```no_run
/// # async fn f(limiter: tollgate_redis::FleetLimiter) {
/// use std::time::Duration;
///
/// let ok = limiter.until_ready("alice").await.unwrap();
/// println!("admitted, {} left", ok.remaining());
/// // A bounded wait: refused at once if the cell is more than 50 ms off.
/// let r = limiter.until_ready("alice").within(Duration::from_millis(50)).await;
/// if let Err(e) = r {
///     assert!(e.retry_after().unwrap() > Duration::from_millis(50)); // further off
/// }
/// # }
/// ```
#[must_use = "futures do nothing unless polled"]
pub struct UntilReady {
    engine: Arc<Engine>,
    key: Vec<u8>,
    n: u32,
    quota: Quota,
    max: Option<Duration>,
    running: Option<Waiting>,
}

impl fmt::Debug for UntilReady {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UntilReady")
            .field("key", &String::from_utf8_lossy(&self.key))
            .field("n", &self.n)
            .field("quota", &self.quota)
            .field("max", &self.max)
            .field("started", &self.running.is_some())
            .finish()
    }
}

impl UntilReady {
    pub(crate) fn new(engine: Arc<Engine>, key: Vec<u8>, n: u32, quota: Quota) -> UntilReady {
        UntilReady {
            engine,
            key,
            n,
            quota,
            max: None,
            running: None,
        }
    }

    /// Waits no longer than `max`: if the server's admission instant is further off, it fails
    /// at once with [`Error::RateLimited`] and reserves nothing. Set it before the first poll;
    /// later it has no effect.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redis::RedisResult<()> {
    /// # use tollgate::Quota;
    /// # use tollgate_redis::{FaultPolicy, FleetLimiter};
    /// # // Nothing listens on port 1 (`connect` is lazy): the local fallback decides.
    /// # let client = redis::Client::open("redis://127.0.0.1:1/")?;
    /// # let limiter = FleetLimiter::builder(Quota::per_minute(3))
    /// #     .fault_policy(FaultPolicy::Local { nodes: 1 })
    /// #     .connect(client)
    /// #     .await?;
    /// use std::time::Duration;
    ///
    /// // `limiter` allows 3 a minute: a first batch of 3 is admitted at once...
    /// let max = Duration::from_millis(200);
    /// let ok = limiter.until_n_ready("batch", 3).within(max).await.unwrap();
    /// assert_eq!(ok.remaining(), 0);
    /// // ...and the next is a minute off: refused at once, nothing reserved.
    /// let e = limiter.until_n_ready("batch", 3).within(max).await.unwrap_err();
    /// assert!(e.retry_after().unwrap() > max);
    /// # Ok(()) }
    /// ```
    pub fn within(mut self, max: Duration) -> Self {
        if self.running.is_none() {
            self.max = Some(max);
        }
        self
    }
}

impl Future for UntilReady {
    type Output = Result<Admitted, Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let running = this.running.get_or_insert_with(|| {
            Box::pin(wait(
                Arc::clone(&this.engine),
                std::mem::take(&mut this.key),
                this.n,
                this.quota,
                this.max,
            ))
        });
        running.as_mut().poll(cx)
    }
}

/// Gives a reservation back when dropped armed.
struct Refund {
    engine: Arc<Engine>,
    key: Vec<u8>,
    quota: Quota,
    n: u32,
    prev: u64,
    written: u64,
    armed: bool,
}

impl Drop for Refund {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let (l, key, quota, n) = (
            Arc::clone(&self.engine),
            std::mem::take(&mut self.key),
            self.quota,
            self.n,
        );
        let (prev, written) = (self.prev, self.written);
        crate::rt::spawn(async move {
            let r = l.run_script(&key, "refund", quota, n, prev, written).await;
            let c = &l.counters;
            match r {
                Ok(reply) if reply.admitted => {
                    bump(&c.refunded);
                    // The TAT moved earlier: the cached bound may be too late now.
                    if let Some(cache) = &l.cache {
                        cache.remove(&key);
                    }
                }
                _ => bump(&c.refunds_declined),
            }
        });
    }
}

async fn wait(
    l: Arc<Engine>,
    key: Vec<u8>,
    n: u32,
    quota: Quota,
    max: Option<Duration>,
) -> Result<Admitted, Error> {
    let burst = within_burst(n, quota)?;
    // No cells: nothing to wait for, whatever the key's state, as in the core. Answered as
    // `check_n(key, 0)` is (the key's state, nothing spent), never by the script's
    // `reserve`, whose wait would be the distance to the key's TAT.
    if n == 0 {
        return l.decide(&key, 0, quota, Op::Check).await;
    }
    let key = l.redis_key(&key);
    let interval_us = interval_micros(quota);
    // A bounded wait the fast path already knows to be too long is refused here.
    if let (Some(max), Some(cache), Some(now)) =
        (max, &l.cache, l.server.clock.upper(Instant::now()))
        && let Some(wait) = cache.wait(&key, now, n.max(1), interval_us, burst)
        && wait > max
    {
        bump(&l.counters.local_refusals);
        return Err(l.limited(wait, burst));
    }
    // The longest wait in whole µs, rounded down so the server never exceeds it.
    let max_us = max.map_or(u64::MAX, |m| {
        u64::try_from(m.as_micros()).unwrap_or(u64::MAX)
    });
    let max_us = max_us.min(1 << 52);
    let c = &l.counters;
    match l.run_script(&key, "reserve", quota, n, max_us, 0).await {
        Ok(reply) if reply.admitted => {
            let recv = Instant::now();
            bump(&c.admitted);
            let wait = Duration::from_micros(reply.after_us);
            let mut refund = Refund {
                engine: Arc::clone(&l),
                key: key.clone(),
                quota,
                n,
                prev: 0,
                written: 0,
                armed: false,
            };
            if let Some((prev, written)) = reply.reserved {
                bump(&c.reserved);
                l.remember(&key, &reply);
                (refund.prev, refund.written) = (prev, written);
                refund.armed = !wait.is_zero();
            }
            if !wait.is_zero() {
                let span = l.counters.observer.wait_span(wait);
                tollgate::timer::sleep_until(recv + wait)
                    .instrument(span)
                    .await;
            }
            refund.armed = false;
            Ok(Admitted {
                limit: burst,
                remaining: reply.remaining,
                reset_after: Duration::from_micros(
                    reply.tat_ahead_us.saturating_sub(reply.after_us),
                ),
                source: Source::Redis,
            })
        }
        Ok(reply) => {
            bump(&c.limited);
            l.remember(&key, &reply);
            Err(l.limited(Duration::from_micros(reply.after_us), burst))
        }
        Err(_) => on_fault(&l, &key, n, quota, max).await,
    }
}

async fn on_fault(
    l: &Engine,
    key: &[u8],
    n: u32,
    quota: Quota,
    max: Option<Duration>,
) -> Result<Admitted, Error> {
    match l.policy {
        FaultPolicy::Local { .. } | FaultPolicy::LocalShare => {
            let (fallback, share) = l.fallback_share(quota, n)?;
            let waiting = fallback.until_n_ready_with(key, n, share);
            match max {
                Some(max) => waiting.within(max).await?,
                None => waiting.await?,
            }
            // The key's values after the admission just made. A peek answers for one more
            // cell, so it reads one cell (one interval) past them: take that back.
            let (remaining, reset_after) = match fallback.peek_with(key, share) {
                Ok(next) => (
                    (next.remaining() + 1).min(share.burst()),
                    next.reset_after().saturating_sub(share.interval()),
                ),
                // No cell free now: the next comes `wait` on, and the key is full again
                // `burst - 1` intervals after that.
                Err(tollgate::Error::RateLimited { wait, .. }) => (
                    0,
                    wait.saturating_add(share.interval().saturating_mul(share.burst() - 1)),
                ),
                Err(_) => (0, share.interval()),
            };
            Ok(Admitted {
                limit: share.burst(),
                remaining,
                reset_after,
                source: Source::Local,
            })
        }
        // Fail open or closed, as a check would.
        _ => l.on_fault(key, n, quota, Op::Check),
    }
}
