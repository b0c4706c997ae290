//! [`Waiter`]: the state machine behind every waiting future, keyed or direct.
//!
//! ```text
//!   Start --cells free, no queue------------------------------> Done (admitted at once)
//!   Start --queued (Queue::push)------------------------------> Queued
//!   Start --refused up front (bound, burst, full table)-------> Done (error)
//!   Queued --a hand-over settles its node---------------------> Done (admitted or error)
//!   Queued --its bound passes while still queued--------------> Done (TooLong, holds nothing)
//!   Queued --dropped-----------------------------------------> node cancelled (queue.rs)
//! ```
//!
//! A queued future is polled only to learn its node's outcome; the queue moves without it.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use super::cells::{Bound, Cells};
use super::node::{Failure, Node, Outcome};
use crate::engine;
use crate::error::Error;
use crate::gcra::Gcra;
use crate::sync::Arc;
use crate::time::Timestamp;
use crate::timer::Sleep;

/// Queue on first poll; complete when the hand-over settles the node; cancel it if dropped.
#[derive(Debug)]
pub(crate) struct Waiter<C: Cells> {
    cells: C,
    n: u32,
    /// A quota of the call's own; `None`: the limiter's.
    quota: Option<Gcra>,
    bound: Bound,
    state: State,
}

#[derive(Debug)]
enum State {
    /// Not polled yet: nothing queued, nothing reserved.
    Start,
    /// In its key's queue.
    Queued {
        node: Arc<Node>,
        /// For a bounded wait: a sleep until its bound, made on the first pending poll.
        deadline: Option<Sleep>,
    },
    Done,
}

impl<C: Cells> Waiter<C> {
    /// An unbounded wait for `n` cells under `quota` (or the limiter's).
    pub(crate) fn new(cells: C, n: u32, quota: Option<Gcra>) -> Waiter<C> {
        Waiter {
            cells,
            n,
            quota,
            bound: Bound::Unbounded,
            state: State::Start,
        }
    }

    /// Bounds a wait that has not been polled yet (the futures' `within` and `until`).
    pub(crate) fn bounded(mut self, bound: Bound) -> Waiter<C> {
        debug_assert!(matches!(self.state, State::Start));
        self.bound = bound;
        self
    }

    pub(crate) fn poll_wait(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        let outcome = match &mut self.state {
            State::Start => {
                if self.n == 0 {
                    self.state = State::Done;
                    return Poll::Ready(Ok(()));
                }
                let gcra = self.quota.unwrap_or_else(|| self.cells.quota());
                if self.n > gcra.burst {
                    self.state = State::Done;
                    return Poll::Ready(Err(Error::InsufficientCapacity {
                        requested: self.n,
                        burst: gcra.burst,
                    }));
                }
                let now = self.cells.now();
                let latest = self.bound.latest(now);
                let (shard, key) = self.cells.waitlist();
                // No queue in the shard: try the cells lock-free, as a check would. If a
                // queue appeared meanwhile, its head's reservation is in the key's state and a
                // check cannot take the head's cell, so FIFO holds either way (queue.rs).
                if shard.is_idle() {
                    match engine::reserve(&self.cells, self.n, gcra, now, now) {
                        Ok(_) => {
                            self.cells.count(true);
                            self.state = State::Done;
                            return Poll::Ready(Ok(()));
                        }
                        // A new key the full table refused (and counted): queued, it would be
                        // refused and counted again.
                        Err(Failure::TableFull) => {
                            self.state = State::Done;
                            return Poll::Ready(self.result(Outcome::Failed(Failure::TableFull)));
                        }
                        Err(_) => {}
                    }
                }
                let cost = u64::from(self.n) * gcra.interval;
                let node = Arc::new(Node::new(self.n, latest, now, self.quota, cost));
                match shard.push(&self.cells, key, &node, now) {
                    Outcome::Queued => {
                        self.state = State::Queued {
                            node,
                            deadline: None,
                        };
                        return self.poll_wait(cx);
                    }
                    settled => settled,
                }
            }
            State::Queued { node, deadline } => match node.poll_outcome(cx) {
                Outcome::Queued => {
                    if node.latest == u64::MAX {
                        return Poll::Pending;
                    }
                    let sleep = deadline.get_or_insert_with(|| self.cells.sleep_until(node.latest));
                    loop {
                        if Pin::new(&mut *sleep).poll(cx).is_pending() {
                            return Poll::Pending;
                        }
                        // The timer's deadline passed. The limiter's clock agrees for
                        // tollgate's own clocks; a custom clock may be behind real time: the
                        // bound is on the limiter's clock, so sleep for what it says is left
                        // (as the queue's head does).
                        if node.latest <= self.cells.now() {
                            break;
                        }
                        *sleep = self.cells.sleep_again(node.latest);
                    }
                    let (shard, key) = self.cells.waitlist();
                    shard.expire(&self.cells, key, node)
                }
                settled => settled,
            },
            State::Done => panic!("a tollgate wait was polled after it completed"),
        };
        self.state = State::Done;
        Poll::Ready(self.result(outcome))
    }

    fn result(&self, outcome: Outcome) -> Result<(), Error> {
        let failure = match outcome {
            Outcome::Admitted => return Ok(()),
            Outcome::Failed(failure) => failure,
            Outcome::Queued | Outcome::Cancelled => unreachable!("a settled node: {outcome:?}"),
        };
        Err(match failure {
            Failure::TooLong { admit_at } => {
                let now = self.cells.now();
                Error::RateLimited {
                    earliest: Timestamp::from_nanos(admit_at),
                    wait: Duration::from_nanos(admit_at.saturating_sub(now)),
                    limit: self.quota.unwrap_or_else(|| self.cells.quota()).burst,
                }
            }
            Failure::TableFull => Error::TableFull {
                capacity: self.cells.capacity(),
            },
            Failure::OverBurst { burst } => Error::InsufficientCapacity {
                requested: self.n,
                burst,
            },
        })
    }
}

impl<C: Cells> Drop for Waiter<C> {
    fn drop(&mut self) {
        if let State::Queued { node, .. } = &self.state {
            if node.is_queued() {
                // Cancelled while queued: unlink, handing on the reservation if it is the head.
                let (shard, key) = self.cells.waitlist();
                shard.cancel(&self.cells, key, node);
            }
        }
    }
}
