//! [`Woken`]: the wakers an operation on a queue collects under the shard lock, to wake once
//! it is released (`waitlist.rs`).
//!
//! A hand-over usually settles one waiter, so the first waker is held inline: the common case
//! allocates nothing (a `Vec` here cost one allocation and one free per hand-over).

use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::task::Waker;

/// Wakers of settled tasks, to be woken after the shard lock is released.
#[derive(Debug, Default)]
pub(crate) struct Woken {
    first: Option<Waker>,
    rest: Vec<Waker>,
}

impl Woken {
    /// Wakes every collected task, in the order they were settled. A waker that panics does
    /// not keep the others from being woken (they were admitted, and nothing else would wake
    /// them); the first panic is resumed once all are woken.
    pub(crate) fn wake(self) {
        let mut panic = None;
        for waker in self.first.into_iter().chain(self.rest) {
            if let Err(payload) = catch_unwind(AssertUnwindSafe(|| waker.wake())) {
                panic.get_or_insert(payload);
            }
        }
        if let Some(payload) = panic {
            resume_unwind(payload);
        }
    }
}

impl Extend<Waker> for Woken {
    fn extend<I: IntoIterator<Item = Waker>>(&mut self, wakers: I) {
        for waker in wakers {
            if self.first.is_none() {
                self.first = Some(waker);
            } else {
                self.rest.push(waker);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use std::task::Wake;

    struct Log(usize, Arc<Mutex<Vec<usize>>>);

    impl Wake for Log {
        fn wake(self: Arc<Self>) {
            self.1.lock().unwrap().push(self.0);
        }
    }

    #[test]
    fn wakes_each_once_in_settle_order() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let mut woken = Woken::default();
        for i in 0..4 {
            woken.extend(Some(Waker::from(Arc::new(Log(i, Arc::clone(&log))))));
            woken.extend(None);
        }
        woken.wake();
        assert_eq!(*log.lock().unwrap(), [0, 1, 2, 3]);
    }

    struct Panics;

    impl Wake for Panics {
        fn wake(self: Arc<Self>) {
            panic!("a waker panicked");
        }
    }

    #[test]
    fn a_panicking_waker_does_not_keep_the_others_asleep() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let mut woken = Woken::default();
        woken.extend(Some(Waker::from(Arc::new(Log(0, Arc::clone(&log))))));
        woken.extend(Some(Waker::from(Arc::new(Panics))));
        woken.extend(Some(Waker::from(Arc::new(Log(2, Arc::clone(&log))))));
        let result = std::panic::catch_unwind(AssertUnwindSafe(|| woken.wake()));
        assert!(result.is_err(), "the panic is passed on");
        assert_eq!(*log.lock().unwrap(), [0, 2]);
    }
}
