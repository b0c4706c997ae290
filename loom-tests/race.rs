//! The two-thread harness shared by the loom models: [`race`] runs two operations on two loom
//! threads, each opening with a relaxed RMW on a shared gate.
//!
//! Why the gate: loom 0.7's partial-order reduction remembers only the last access to each
//! atomic, so a thread that loads a word and then CASes it can have its race with the other
//! thread's earlier load hidden, and a spawned thread whose first operation is a load is never
//! run ahead of the main thread (tokio-rs/loom#166, #392). A Relaxed `fetch_add` on a shared
//! gate at the start of both threads (no happens-before edge, since Relaxed) makes loom
//! consider both orders; running every model with both [`Roles`] covers the rest. Without it a
//! copy of the crate with `Relaxed` in place of `Acquire` on `Slot::update`'s first load passed
//! every model.

use std::sync::atomic::Ordering;

use loom::sync::Arc;
use loom::sync::atomic::AtomicUsize;
use loom::thread;

/// Which thread runs which of a model's two operations.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Roles {
    /// The first operation on the main thread, the second on the spawned one.
    FirstOnMain,
    /// The other way round.
    FirstSpawned,
}

/// Runs `first` and `second` on two loom threads as `roles` says, each after passing the
/// gate, and returns both results.
pub(crate) fn race<R1, R2>(
    roles: Roles,
    first: impl FnOnce() -> R1 + Send + 'static,
    second: impl FnOnce() -> R2 + Send + 'static,
) -> (R1, R2)
where
    R1: Send + 'static,
    R2: Send + 'static,
{
    let gate = Arc::new(AtomicUsize::new(0));
    let spawned_gate = gate.clone();
    // ordering: the gate only has to be an access loom sees both threads make.
    let pass = move |g: &AtomicUsize| g.fetch_add(1, Ordering::Relaxed);
    match roles {
        Roles::FirstOnMain => {
            let other = thread::spawn(move || {
                pass(&spawned_gate);
                second()
            });
            pass(&gate);
            let r1 = first();
            (r1, other.join().unwrap())
        }
        Roles::FirstSpawned => {
            let other = thread::spawn(move || {
                pass(&spawned_gate);
                first()
            });
            pass(&gate);
            let r2 = second();
            (other.join().unwrap(), r2)
        }
    }
}
