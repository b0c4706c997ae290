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

/// Spin-loop hint for a CAS retry. Under loom it yields so the model explores other threads.
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
