//! [`Waiter`]: the state machine behind every waiting future.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use super::WaitError;
use super::cells::{Bound, Cells, Reserved};
use crate::timer::Sleep;

/// Reserve on first poll; sleep until the reserved instant; refund if dropped before it.
#[derive(Debug)]
pub(crate) struct Waiter<C: Cells> {
    cells: C,
    n: u32,
    bound: Bound,
    state: State,
}

#[derive(Debug)]
enum State {
    /// Not polled yet: nothing reserved.
    Start,
    /// Cells reserved; the sleep ends at `reserved.admit_at`.
    Waiting {
        sleep: Sleep,
        reserved: Reserved,
    },
    Done,
}

impl<C: Cells> Waiter<C> {
    pub(crate) fn new(cells: C, n: u32, bound: Bound) -> Waiter<C> {
        Waiter {
            cells,
            n,
            bound,
            state: State::Start,
        }
    }

    pub(crate) fn poll_wait(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), WaitError>> {
        loop {
            match &mut self.state {
                State::Start => {
                    if self.n == 0 {
                        self.state = State::Done;
                        return Poll::Ready(Ok(()));
                    }
                    match self.cells.reserve(self.n, self.bound) {
                        Err(e) => {
                            self.state = State::Done;
                            return Poll::Ready(Err(e));
                        }
                        Ok(reserved) if reserved.admit_at <= reserved.now => {
                            self.state = State::Done;
                            self.cells.count_admitted();
                            return Poll::Ready(Ok(()));
                        }
                        Ok(reserved) => {
                            let sleep = self.cells.sleep_until(reserved.admit_at);
                            self.state = State::Waiting { sleep, reserved };
                        }
                    }
                }
                State::Waiting { sleep, .. } => {
                    if Pin::new(sleep).poll(cx).is_pending() {
                        return Poll::Pending;
                    }
                    self.state = State::Done;
                    self.cells.count_admitted();
                    return Poll::Ready(Ok(()));
                }
                State::Done => panic!("a tollgate wait was polled after it completed"),
            }
        }
    }
}

impl<C: Cells> Drop for Waiter<C> {
    fn drop(&mut self) {
        if let State::Waiting { reserved, .. } = &self.state {
            // Cancelled before its instant: hand the cells back if no one stacked on them.
            self.cells.refund(reserved);
        }
    }
}
