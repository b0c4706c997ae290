//! Waiting for cells: reservation, not retry.
//!
//! A waiter makes **one** CAS on its key's state that reserves its cells and fixes the instant
//! it may proceed (`tat' = tat0 + n·T`, `admit_at = tat0 + (n-1)·T - tau`, see `gcra.rs`),
//! then sleeps on tollgate's own timer until `admit_at`. So:
//!
//! * waiters on one key are admitted in reservation (CAS) order: FIFO, each woken once by
//!   the timer, with no thundering herd and no retry jitter;
//! * the rate holds exactly as for `check`: each reservation is a GCRA admission that takes
//!   effect at `admit_at` instead of now;
//! * a bounded wait (`_within`, `_until`) refuses up front, writing nothing, if `admit_at`
//!   is beyond its bound (nginx's `burst` queue).
//!
//! # Cancellation
//!
//! Dropping a waiter that has reserved but not completed drops its timer entry (see
//! `timer/`) and tries to **refund** its cells: one CAS from its own `tat'` back to
//! `tat' - n·T`. That succeeds only while the key's state is still exactly `tat'`, i.e. no
//! later reservation or check was stacked on top of it. Otherwise later waiters' instants
//! already count on these cells, and the refund is skipped: the cells are lost (the key runs
//! slightly under its rate), which is never an over-admission. A refund can never make the
//! state earlier than it was before this reservation, so the window guarantee holds for
//! every interleaving; the loom model "reserve vs cancel" checks it.
//!
//! The TAT alone does not identify a reservation: after `reset` (or an eviction) the key can
//! be checked back up to exactly the TAT a pending waiter wrote, and refunding then would hand
//! back a cell someone else used. So every removal bumps an epoch (per shard, or per direct
//! limiter) that the reservation records, and a refund applies only if the epoch has not
//! moved; see `Shard::removals` for why the check cannot miss a removal. The loom models
//! "stale refund after reset" check it.
//!
//! `mem::forget` of a waiter skips the refund and leaves the timer entry to fire into a
//! waker nobody polls: no lock is held and no other waiter is delayed.

mod blocking;
mod cells;
mod direct;
mod error;
mod keyed;
mod node;
mod queue;
mod throttle;
mod waiter;
mod waitlist;

pub(crate) use waitlist::{KEYED_SHARDS, Waitlists};

pub use direct::DirectUntilReady;
pub use error::WaitError;
pub use keyed::UntilReady;
pub use throttle::{Paced, Throttled};
