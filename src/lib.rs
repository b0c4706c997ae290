//! A lock-free, keyed rate limiter (GCRA) with no runtime dependency.
//!
//! * [`Limiter`] keeps one GCRA timestamp per key in a sharded open-addressing table: a
//!   check of a known key is a hash, a short probe and one CAS, with no lock and no
//!   allocation. Expired keys are reclaimed as a matter of course and memory has a hard cap.
//! * [`DirectLimiter`] is the unkeyed form: one atomic word.
//! * [`Quota`] says how many cells per period and how many at once; the window guarantee is
//!   on its docs.
//! * Time comes from a [`Clock`]: [`MonotonicClock`] by default, [`ManualClock`] in tests, or
//!   a [`Timestamp`] the caller passes in ([`Limiter::check_at`]): a proxy reads the clock
//!   once per event-loop turn and checks that turn's requests at it, the fast path, since
//!   the clock read is most of a `check`'s time. [`Limiter::check_batch_at`] checks the
//!   turn's keys together, their cache misses overlapped.
//! * Waiting instead of refusing: [`Limiter::until_ready`] and [`DirectLimiter::until_ready`]
//!   queue per key and are woken by tollgate's own timer ([`timer::sleep`], [`timer::sleep_until`]), so
//!   they work under any executor. Waiters on a key are admitted in FIFO order, each woken
//!   once; only the queue's head holds a reservation, so a dropped wait (a timeout, a client
//!   that hung up) costs nothing; bounded waits ([`UntilReady::within`],
//!   [`UntilReady::until`]) refuse up front; [`UntilReady::wait`] parks a thread;
//!   [`Limiter::throttle`] and [`DirectLimiter::pace`] wrap futures and streams. On a
//!   [`ManualClock`] the waits run on fake time.
//! * One limiter, many rates: [`Limiter::check_with`] and [`Limiter::until_ready_with`] bring
//!   a quota per call, and [`Limiter::penalize`] pushes a key's next admission out (a
//!   server's `Retry-After`): the primitives under tollgate-client's rates learned from the
//!   server. [`Limiter::peek`] consumes nothing, [`Limiter::undo`] gives an unused
//!   admission back, and [`check_all`] admits several stacked limits or none.
//!
//! # Examples
//!
//! ```
//! use std::time::Duration;
//! use tollgate::{Limiter, Quota};
//!
//! // 5 requests a minute per client, bursts of up to 5.
//! let limiter = Limiter::keyed(Quota::per_minute(5));
//! for left in (0..5).rev() {
//!     let ok = limiter.check("203.0.113.9").unwrap(); // serve
//!     assert_eq!(ok.remaining(), left);
//! }
//! let e = limiter.check("203.0.113.9").unwrap_err(); // 429
//! assert!(e.retry_after().unwrap() > Duration::from_secs(10)); // about 12 s: a fifth of a minute
//! ```
//!
//! Waiting, without a runtime:
//!
//! ```
//! use std::time::{Duration, Instant};
//! use tollgate::{Limiter, Quota};
//!
//! let per_host = Limiter::keyed(Quota::per_second(100).allow_burst(1));
//! let start = Instant::now();
//! futures_executor::block_on(async {
//!     for _ in 0..3 {
//!         per_host.until_ready("example.com").await.unwrap(); // 10 ms apart
//!     }
//! });
//! assert!(start.elapsed() >= Duration::from_millis(20)); // the first at once
//! ```
//!
//! The design, its invariants and where each is checked: [`design`].
//!
//! # Memory ordering
//!
//! Every admitted check is one successful CAS on the key's state word; a refused check
//! writes nothing. Checks on one key are linearisable in the order of those CASes. The
//! protocol that keeps a check on one key from touching another key's state when slots are
//! reused is described in the table's source (`src/table/slot.rs`) and model-checked with loom
//! (`loom-tests/models.rs`).

pub mod design;

mod clock_source;
mod direct;
mod engine;
mod error;
mod gcra;
pub mod hash;
mod limiter;
mod manual_clock;
mod monotonic_now;
mod outcome;
mod prefetch;
mod quota;
mod quota_cell;
mod select;
mod seq;
mod sharded;
mod stack;
mod stats;
// Not part of the stable API: tollgate-tower's decision counts follow the same per-thread
// stripe protocol as `Stats`, so that each thread owns one index across both. Public for
// that crate only, so hidden from the docs.
#[doc(hidden)]
pub mod stripe;
mod sync;
mod table;
mod time;
pub mod timer;
mod tsc_clock;
mod wait;

pub use direct::{DirectLimiter, DirectUntilReady, Paced};
pub use error::Error;
pub use limiter::LimiterBuilder;
pub use limiter::{Limiter, UntilReady};
pub use manual_clock::ManualClock;
pub use outcome::Admitted;
pub use quota::{Quota, QuotaError};
pub use stack::{Gate, Refused, check_all};
pub use stats::Stats;
pub use table::FullPolicy;
pub use time::{Clock, MonotonicClock, Timestamp};
pub use tsc_clock::TscClock;
pub use wait::Throttled;

#[cfg(tollgate_loom)]
pub use timer::__loom;

/// The README's examples, compiled and run as doc tests so they cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// Per-key concurrency limits: at most N permits out per key, FIFO, released on drop.
mod inflight;
pub use inflight::{Acquire, InFlight, Permit};
