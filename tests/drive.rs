//! The runtime driver ([`tollgate::timer::drive`]) on real runtimes: tokio's multi-thread
//! runtime (with its timer) and smol.
//!
//! The driver is process-wide (it drives the one global timer), so the tests of this file take
//! a lock and run one at a time; the forgotten driver, which keeps the claim for the rest of
//! its process, has a test binary of its own (`tests/drive_forgotten.rs`).
//!
//! Outcomes only: completion, FIFO order, lower bounds on elapsed time (the rate is kept, a
//! wait is never early), and which thread woke a task. Time bounds are hang guards of tens
//! of seconds, never measurements.

// The runtime driver drives the global timer, which loom builds leave out.
#![cfg(not(tollgate_loom))]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Wake, Waker};
use std::time::{Duration, Instant};

use futures_util::future::poll_fn;
use tollgate::{Limiter, Quota};

/// Serialises the tests of this file: they share the global timer's one driver slot.
fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A hang guard: far beyond anything a loaded machine needs.
const GUARD: Duration = Duration::from_secs(60);

fn tokio_rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .expect("a tokio runtime")
}

fn tokio_drive() -> impl Future<Output = ()> + Send + 'static {
    tollgate::timer::drive(|at| tokio::time::sleep_until(at.into()))
}

/// A tokio runtime with the driver spawned on it and attached.
fn attached_tokio() -> (tokio::runtime::Runtime, tokio::task::JoinHandle<()>) {
    let rt = tokio_rt();
    let driver = rt.spawn(tokio_drive());
    until_attached(true);
    (rt, driver)
}

/// Aborts the driver, drops its runtime, and waits until the claim is given up.
fn detach(rt: tokio::runtime::Runtime, driver: tokio::task::JoinHandle<()>) {
    driver.abort();
    drop(rt);
    until_attached(false);
}

fn attached() -> bool {
    tollgate::timer::is_driven()
}

/// Waits until `attached()` says `want` (the runtime may take a moment to poll or drop the
/// driver's task).
fn until_attached(want: bool) {
    let start = Instant::now();
    while attached() != want {
        assert!(start.elapsed() < GUARD, "the driver never became {want}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Wakes the inner waker and counts the wakes made from tollgate's timer thread, and from the
/// thread of [`ThreadSleep`].
struct Spy {
    inner: Waker,
    from_timer_thread: Arc<AtomicUsize>,
    from_sleep_thread: Arc<AtomicUsize>,
    wakes: Arc<AtomicUsize>,
}

impl Wake for Spy {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // ordering: counters read after the tasks are joined.
        self.wakes.fetch_add(1, Ordering::Relaxed);
        match std::thread::current().name() {
            Some("tollgate-timer") => self.from_timer_thread.fetch_add(1, Ordering::Relaxed),
            Some(SLEEP_THREAD) => self.from_sleep_thread.fetch_add(1, Ordering::Relaxed),
            _ => 0,
        };
        self.inner.wake_by_ref();
    }
}

/// Who woke the waits: all wakes, and those from the timer thread.
#[derive(Debug, Default, Clone)]
struct Wakes {
    all: Arc<AtomicUsize>,
    from_timer_thread: Arc<AtomicUsize>,
    from_sleep_thread: Arc<AtomicUsize>,
}

impl Wakes {
    /// Awaits `fut`, polling it with a waker that records who wakes it.
    async fn spy<F: Future>(&self, fut: F) -> F::Output {
        let mut fut = std::pin::pin!(fut);
        poll_fn(|cx: &mut Context<'_>| {
            let spy = Waker::from(Arc::new(Spy {
                inner: cx.waker().clone(),
                from_timer_thread: Arc::clone(&self.from_timer_thread),
                from_sleep_thread: Arc::clone(&self.from_sleep_thread),
                wakes: Arc::clone(&self.all),
            }));
            fut.as_mut().poll(&mut Context::from_waker(&spy))
        })
        .await
    }

    fn counts(&self) -> (usize, usize) {
        // ordering: read after the tasks are joined.
        (
            self.all.load(Ordering::Relaxed),
            self.from_timer_thread.load(Ordering::Relaxed),
        )
    }
}

/// `n` waits on one key at `per_second`, burst 1, all queued at once in index order (each
/// polled once before the next is created), then awaited together: returns the order they
/// completed in and the time from the first poll to the last admission.
async fn fifo_waits(n: usize, per_second: u32, wakes: &Wakes) -> (Vec<usize>, Duration) {
    let limiter = Limiter::keyed(Quota::per_second(per_second).allow_burst(1));
    let done = Mutex::new(Vec::new());
    let start = Instant::now();
    let mut waits = Vec::new();
    for i in 0..n {
        let (limiter, done) = (&limiter, &done);
        let mut wait = Box::pin(futures_util::future::maybe_done(async move {
            wakes.spy(limiter.until_ready(&"key")).await.unwrap();
            done.lock().unwrap().push(i);
        }));
        // The first poll queues it (the first one is admitted at once).
        let _ = futures_util::poll!(wait.as_mut());
        waits.push(wait);
    }
    futures_util::future::join_all(waits).await;
    let elapsed = start.elapsed();
    (done.into_inner().unwrap(), elapsed)
}

#[test]
fn attached_waits_complete_in_fifo_order_at_the_rate_woken_on_the_runtime() {
    let _serial = serial();
    let (rt, driver) = attached_tokio();
    let wakes = Wakes::default();
    let (order, elapsed) = rt.block_on(async {
        tokio::time::timeout(GUARD, fifo_waits(20, 200, &wakes))
            .await
            .expect("the waits hung")
    });
    assert_eq!(order, (0..20).collect::<Vec<_>>(), "FIFO");
    assert!(
        elapsed >= Duration::from_millis(19 * 5),
        "20 admissions at 200/s, burst 1, took only {elapsed:?}"
    );
    let (all, from_timer) = wakes.counts();
    assert!(
        all > from_timer,
        "every one of {all} wakes came from the timer thread, none from the driver's worker"
    );
    detach(rt, driver);
}

/// The control for the test above: with no driver, the timer thread wakes every wait.
#[test]
fn without_a_driver_the_thread_wakes_the_waits() {
    let _serial = serial();
    until_attached(false);
    let rt = tokio_rt();
    let wakes = Wakes::default();
    let (order, _) = rt.block_on(fifo_waits(5, 200, &wakes));
    assert_eq!(order, (0..5).collect::<Vec<_>>());
    let (all, from_timer) = wakes.counts();
    // At least one wake (nothing else wakes this task, so the waits could not end without
    // one), but not necessarily four: a wait whose instant has passed when its task is
    // polled for an earlier wait's wake completes without a wake of its own (a loaded
    // machine that runs the task late does that).
    assert!(all >= 1, "{all} wakes");
    assert_eq!(
        from_timer, all,
        "a wake from elsewhere than the timer thread"
    );
}

#[test]
fn dropping_the_driver_mid_wait_hands_the_timer_back_to_the_thread() {
    let _serial = serial();
    let (rt, driver) = attached_tokio();
    let wakes = Wakes::default();
    let (order, elapsed) = rt.block_on(async {
        let waits = fifo_waits(30, 100, &wakes);
        let abort = async {
            tokio::time::sleep(Duration::from_millis(60)).await;
            driver.abort();
            // The runtime drops the task: the claim is given up.
            let _ = driver.await;
        };
        let (result, ()) = tokio::join!(tokio::time::timeout(GUARD, waits), abort);
        result.expect("the waits hung after the driver was dropped")
    });
    assert_eq!(order, (0..30).collect::<Vec<_>>(), "FIFO across the detach");
    assert!(elapsed >= Duration::from_millis(29 * 10));
    assert!(!attached(), "the aborted driver still holds the claim");
    let (_, from_timer) = wakes.counts();
    assert!(
        from_timer > 0,
        "after the detach the thread should have woken the remaining waits"
    );
}

#[test]
fn a_second_driver_completes_at_once_and_a_new_one_attaches_after_a_detach() {
    let _serial = serial();
    let rt = tokio_rt();
    let first = rt.spawn(tokio_drive());
    until_attached(true);
    rt.block_on(async {
        tokio::time::timeout(GUARD, tokio::spawn(tokio_drive()))
            .await
            .expect("a second driver did not complete at once")
            .expect("the second driver panicked");
    });
    assert!(!first.is_finished(), "the first driver completed");
    first.abort();
    until_attached(false);
    // Re-attach, on another runtime, and wait through it.
    let rt2 = tokio_rt();
    let second = rt2.spawn(tokio_drive());
    until_attached(true);
    let wakes = Wakes::default();
    let (order, _) = rt2.block_on(async {
        tokio::time::timeout(GUARD, fifo_waits(5, 200, &wakes))
            .await
            .expect("the waits hung")
    });
    assert_eq!(order, (0..5).collect::<Vec<_>>());
    // Dropping the runtime drops the task: that detaches too.
    drop(rt2);
    drop(second);
    until_attached(false);
    drop(rt);
}

#[test]
fn plain_sleeps_fire_through_the_driver_never_early() {
    let _serial = serial();
    let (rt, driver) = attached_tokio();
    rt.block_on(async {
        let sleeps = (1..=50u64).map(|i| async move {
            let deadline = Instant::now() + Duration::from_micros(137 * i);
            tollgate::timer::sleep_until(deadline).await;
            assert!(Instant::now() >= deadline, "a sleep ended early");
        });
        tokio::time::timeout(GUARD, futures_util::future::join_all(sleeps))
            .await
            .expect("the sleeps hung");
    });
    detach(rt, driver);
}

#[test]
fn a_blocked_runtime_leaves_the_timer_to_the_backstop_thread() {
    let _serial = serial();
    // A current-thread runtime on a thread of its own, whose only worker we then block.
    let (attached_tx, attached_rx) = std::sync::mpsc::channel();
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    let runtime = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        rt.block_on(async {
            let driver = tokio::spawn(tokio_drive());
            while !attached() {
                tokio::task::yield_now().await; // let the driver attach
            }
            attached_tx.send(()).unwrap();
            // Block the runtime's only thread until the test says so: the driver cannot run.
            let _ = release_rx.recv_timeout(GUARD);
            driver.abort();
        });
    });
    attached_rx
        .recv_timeout(GUARD)
        .expect("the runtime never started");
    assert!(attached());
    // With the driver stuck, the backstop thread fires this sleep (late by at most 10 ms).
    let deadline = Instant::now() + Duration::from_millis(5);
    futures_executor::block_on(tollgate::timer::sleep_until(deadline));
    assert!(Instant::now() >= deadline);
    release_tx.send(()).unwrap();
    runtime.join().unwrap();
    until_attached(false);
}

/// The name of the thread a [`ThreadSleep`] wakes its waker from.
const SLEEP_THREAD: &str = "runtime-timer";

/// A runtime's sleep, as far as the driver can tell: completes at `at`, and wakes the waker
/// it was last polled with from a thread of its own (as smol's reactor thread does).
struct ThreadSleep {
    at: Instant,
    waker: Arc<Mutex<Option<Waker>>>,
    started: bool,
}

impl Future for ThreadSleep {
    type Output = ();

    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> std::task::Poll<()> {
        if Instant::now() >= self.at {
            return std::task::Poll::Ready(());
        }
        *self.waker.lock().unwrap() = Some(cx.waker().clone());
        if !self.started {
            self.started = true;
            let (at, waker) = (self.at, Arc::clone(&self.waker));
            std::thread::Builder::new()
                .name(SLEEP_THREAD.to_owned())
                .spawn(move || {
                    std::thread::sleep(at.saturating_duration_since(Instant::now()));
                    if let Some(waker) = waker.lock().unwrap().take() {
                        waker.wake();
                    }
                })
                .expect("a thread");
        }
        std::task::Poll::Pending
    }
}

/// The runtime sleep's own wake runs the timer's turn, on the thread that fires it (on tokio,
/// the worker's park, where tokio batches the notifications of the tasks it wakes): the
/// admitted waits are woken from there, not from the task that polls the driver.
#[test]
fn the_runtime_sleeps_wake_runs_the_turn_where_it_fires() {
    let _serial = serial();
    let rt = tokio_rt();
    let driver = rt.spawn(tollgate::timer::drive(|at| ThreadSleep {
        at,
        waker: Arc::default(),
        started: false,
    }));
    until_attached(true);
    let wakes = Wakes::default();
    let (order, _) = rt.block_on(async {
        tokio::time::timeout(GUARD, fifo_waits(10, 100, &wakes))
            .await
            .expect("the waits hung")
    });
    assert_eq!(order, (0..10).collect::<Vec<_>>(), "FIFO");
    // ordering: read after the tasks are joined.
    let from_sleep = wakes.from_sleep_thread.load(Ordering::Relaxed);
    let (all, _) = wakes.counts();
    assert!(
        from_sleep > 0,
        "none of {all} wakes came from the thread that fired the runtime's sleep"
    );
    detach(rt, driver);
}

#[test]
fn smol_drives_the_timer_too() {
    let _serial = serial();
    let wakes = Wakes::default();
    let (order, elapsed) = smol::block_on(async {
        let driver = smol::spawn(tollgate::timer::drive(smol::Timer::at));
        // The global executor polls it on one of its threads.
        while !attached() {
            smol::Timer::after(Duration::from_millis(1)).await;
        }
        let result = fifo_waits(10, 200, &wakes).await;
        driver.cancel().await;
        result
    });
    assert_eq!(order, (0..10).collect::<Vec<_>>());
    assert!(elapsed >= Duration::from_millis(9 * 5));
    until_attached(false);
}

#[test]
fn drive_is_send_and_unpin() {
    fn check<T: Send + Unpin>(_: &T) {}
    check(&tollgate::timer::drive(|at| {
        tokio::time::sleep_until(at.into())
    }));
}
