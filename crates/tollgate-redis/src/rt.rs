//! What the crate needs of a runtime, without depending on one: a timeout on tollgate's own
//! timer, and a way to run a task in the background (a refund after its waiter is gone, a
//! replacement for a hung connection).
//!
//! The connection is the `redis` crate's, which finds its runtime when it is built: Tokio if
//! built inside a Tokio runtime (`tokio-comp`), smol's otherwise (`smol-comp`, this crate's
//! feature of the same name). Nothing here assumes either.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, Thread};
use std::time::Duration;

/// `fut`, or `Err(())` once `limit` has passed, on tollgate's timer thread.
pub(crate) async fn timeout<F: Future>(limit: Duration, fut: F) -> Result<F::Output, ()> {
    let mut fut = pin!(fut);
    let mut sleep = tollgate::timer::sleep(limit);
    std::future::poll_fn(|cx| {
        if let Poll::Ready(v) = fut.as_mut().poll(cx) {
            return Poll::Ready(Ok(v));
        }
        match std::pin::Pin::new(&mut sleep).poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(())),
            Poll::Pending => Poll::Pending,
        }
    })
    .await
}

/// Runs `task` to completion in the background: on the current Tokio runtime if there is
/// one, else on a thread of its own (a refund is rare: a wait cancelled before its cell).
pub(crate) fn spawn(task: impl Future<Output = ()> + Send + 'static) {
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn(task);
        return;
    }
    spawn_thread(task);
}

/// Runs `task` to completion on a short-lived thread of its own, outside any Tokio runtime
/// (so that the `redis` crate, asked for a connection there, builds it on smol's reactor).
pub(crate) fn spawn_thread(task: impl Future<Output = ()> + Send + 'static) {
    let spawned = thread::Builder::new()
        .name("tollgate-redis".into())
        .spawn(move || block_on(task));
    // No thread to be had: the task's work is not done (a refund's cells stay spent, as
    // documented; a replacement connection is not built); never a panic here.
    drop(spawned);
}

struct Unpark(Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

fn block_on<F: Future>(fut: F) -> F::Output {
    let mut fut = pin!(fut);
    let waker = Waker::from(Arc::new(Unpark(thread::current())));
    let mut cx = Context::from_waker(&waker);
    loop {
        if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return v;
        }
        thread::park();
    }
}
