//! The loom shim: every atomic, lock, `Arc` and spin hint in tollgate comes from here.
//!
//! Under `--cfg tollgate_loom` these are loom's model-checked types; otherwise std's. The cfg is
//! namespaced so that building our loom models never flips the loom branches of dependencies.

#[cfg(not(tollgate_loom))]
pub(crate) use std::sync::{
    Arc, Mutex, MutexGuard,
    atomic::{AtomicPtr, AtomicU64, Ordering},
};

#[cfg(tollgate_loom)]
pub(crate) use loom::sync::{
    Arc, Mutex, MutexGuard,
    atomic::{AtomicPtr, AtomicU64, Ordering},
};

/// Hint for a CAS retry loop. A CAS only fails after another thread wrote the word, so the
/// loop always makes progress and needs no yield under loom; yielding there would even hide
/// interleavings (after a yield loom stops offering a thread values it saw before).
#[inline]
pub(crate) fn cas_retry_hint() {
    std::hint::spin_loop();
}

/// Hint for a loop that waits on another thread (the quota seqlock's reader). Under loom it
/// yields, so the model lets the writer finish.
#[inline]
pub(crate) fn spin_hint() {
    #[cfg(not(tollgate_loom))]
    std::hint::spin_loop();
    #[cfg(tollgate_loom)]
    loom::thread::yield_now();
}

/// Locks a mutex, treating poisoning as harmless: every critical section in tollgate leaves its
/// data consistent at each step (a panic can only come from a user hasher before we lock).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(not(tollgate_loom))]
pub(crate) use std::sync::atomic::fence;

#[cfg(tollgate_loom)]
pub(crate) use loom::sync::atomic::fence;

#[cfg(not(tollgate_loom))]
pub(crate) use std::sync::atomic::{AtomicBool, AtomicUsize};

#[cfg(tollgate_loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicUsize};

/// A slot for one task's waker, written by the task and taken by whoever wakes it.
#[cfg(not(tollgate_loom))]
pub(crate) use atomic_waker::AtomicWaker;

#[cfg(tollgate_loom)]
pub(crate) use loom_waker::AtomicWaker;

/// `atomic-waker` has no loom support, so models get loom's mock behind `atomic-waker`'s API
/// (`register` by reference, `take`).
#[cfg(tollgate_loom)]
mod loom_waker {
    use std::task::Waker;

    #[derive(Debug, Default)]
    pub(crate) struct AtomicWaker(loom::future::AtomicWaker);

    impl AtomicWaker {
        pub(crate) fn new() -> AtomicWaker {
            AtomicWaker(loom::future::AtomicWaker::new())
        }

        pub(crate) fn register(&self, waker: &Waker) {
            self.0.register_by_ref(waker);
        }

        pub(crate) fn take(&self) -> Option<Waker> {
            self.0.take_waker()
        }

        pub(crate) fn wake(&self) {
            if let Some(waker) = self.take() {
                waker.wake();
            }
        }
    }
}
