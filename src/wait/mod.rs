//! Waiting for cells: a FIFO queue per key, where only the head holds a reservation.
//!
//! A waiter on a key that has no queue and a free cell is admitted at once (one CAS, as a
//! check). Otherwise it joins the key's FIFO queue, in a side table that `check` never
//! touches (`waitlist.rs`), and writes nothing to the key's state. Only the queue's head
//! reserves its cells (one CAS that fixes its admission instant); the timer wakes the queue
//! at that instant, and the wake itself (the *hand-over*, `queue.rs`) admits the head and
//! reserves for the next waiter, admitting at once every waiter whose instant has already
//! come. So:
//!
//! * waiters on one key are admitted in the order they first polled: FIFO, each woken once,
//!   never before its instant, at exactly the rate (a late hand-over costs no cells: the
//!   next head reserves at the instant the previous one was admitted at);
//! * a waiter that is dropped costs nothing: a queued one held nothing, and the head
//!   refunds its reservation and the next waiter reserves the same instant. After any
//!   pattern of drops, the others are admitted as if the dropped ones had never asked;
//! * the queue moves on the timer's wake, not on its futures' polls: a forgotten or slow
//!   future stalls no one (a forgotten waiter is admitted in its turn and uses its cells);
//! * a bounded wait (`.within(d)`, `.until(t)`) refuses up front, writing nothing, if its
//!   predicted instant is past its bound, and fails holding nothing if it is not admitted by
//!   its bound after all (`waiter.rs`).
//!
//! Files: `node.rs` (one waiter's outcome word and waker), `queue.rs` (one key's queue and
//! the hand-over: the design essay), `waitlist.rs` (the sharded side table), `cells.rs` (what
//! waiting needs of a limiter beyond its state word), `waiter.rs` (the future's state
//! machine), `blocking.rs` and `throttle.rs`. This module knows no limiter: the public
//! futures over it are in `limiter/wait.rs`, `direct/wait.rs` and `direct/pace.rs`, which
//! implement [`Cells`] for a key and for the direct word.
//!
//! A refund is [`engine::undo`](crate::engine): it applies only while the key's state is
//! still the one the head wrote, in the same incarnation of the key (the removal epoch,
//! explained in `src/engine.rs`).

mod blocking;
mod cells;
mod node;
mod queue;
mod throttle;
mod waiter;
mod waitlist;
mod woken;

pub(crate) use blocking::block_on;
pub(crate) use cells::{Bound, Cells};
pub(crate) use waiter::Waiter;
pub(crate) use waitlist::{KEYED_SHARDS, WaitShard, Waitlists};

pub use throttle::Throttled;
