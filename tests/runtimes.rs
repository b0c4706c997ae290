//! Runtime independence: the same waiting scenarios, each written once as an `async fn`, run
//! under tokio's current-thread runtime, a two-worker tokio multi-thread runtime, async-std,
//! futures' `LocalPool`, and plain threads that each drive one task with
//! `futures_executor::block_on`.
//!
//! No runtime's timer is used by the scenarios: no runtime they run on enables one (tokio's
//! builders there are never asked for `enable_time()`), and every wait sleeps on tollgate's
//! own timer thread, on the real [`MonotonicClock`](tollgate::MonotonicClock) the limiters
//! use by default. The last section is the exception: issue 6's timeout loop as a user
//! writes it, under each runtime's own timeout (tokio's and async-std's timers; tollgate's
//! `sleep` on a bare executor), held to the rate and never ahead of it.
//!
//! The assertions are about outcomes that correctness guarantees whatever the scheduling:
//! counts, FIFO instants read back from the limiter, and *lower* bounds on completion times
//! (a wait is never early and the rate is never exceeded). Nothing asserts an upper bound on
//! elapsed time: a loaded machine may run late, which costs smoothness, not correctness. The
//! cancellation scenarios put their limiter on a [`ManualClock`] that only the scenario moves
//! (its waits are woken by `advance`, still from no runtime's timer), so every waiter's
//! instant and completion time is exact however slowly the machine runs.
//!
//! Each scenario takes well under a second, each timeout loop about 2.5 s. Tests are named
//! `<scenario>::<runtime>`, so `cargo test --test runtimes tokio_multi_thread` runs one
//! runtime's column (the timeout loops are `timeout_loop_under_<runtime>`).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use futures_executor::LocalSpawner;
use futures_util::future::{
    AbortHandle, Aborted, BoxFuture, Either, FutureExt, abortable, poll_fn, select,
};
use futures_util::stream::{self, StreamExt};
use futures_util::task::LocalSpawnExt;
use tollgate::{DirectLimiter, Error, Limiter, ManualClock, Quota, Timestamp};

// ---------------------------------------------------------------------------------------
// The runtimes.

/// The executors every scenario runs under.
#[derive(Debug, Clone, Copy)]
enum Runtime {
    TokioCurrentThread,
    TokioMultiThread,
    AsyncStd,
    /// futures' single-threaded `LocalPool`: the scenario and its tasks share one thread.
    LocalPool,
    /// No executor at all: the scenario runs in `futures_executor::block_on`, and each task
    /// on its own thread in another `block_on`.
    Threads,
}

impl Runtime {
    /// Runs `scenario` to completion on this runtime, giving it a way to spawn tasks there.
    fn run<F, Fut>(self, scenario: F)
    where
        F: FnOnce(Spawner) -> Fut,
        Fut: Future<Output = ()>,
    {
        match self {
            // Neither builder is asked for `enable_time()`: tokio's timer is off.
            Runtime::TokioCurrentThread => {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .build()
                    .expect("a tokio runtime");
                let spawner = Spawner::Tokio(rt.handle().clone());
                rt.block_on(scenario(spawner));
            }
            Runtime::TokioMultiThread => {
                let rt = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .build()
                    .expect("a tokio runtime");
                let spawner = Spawner::Tokio(rt.handle().clone());
                rt.block_on(scenario(spawner));
            }
            Runtime::AsyncStd => async_std::task::block_on(scenario(Spawner::AsyncStd)),
            Runtime::LocalPool => {
                let mut pool = futures_executor::LocalPool::new();
                let spawner = Spawner::Local(pool.spawner());
                pool.run_until(scenario(spawner));
            }
            Runtime::Threads => futures_executor::block_on(scenario(Spawner::Threads)),
        }
    }
}

/// Spawns tasks on the scenario's runtime.
#[derive(Clone)]
enum Spawner {
    Tokio(tokio::runtime::Handle),
    AsyncStd,
    Local(LocalSpawner),
    Threads,
}

impl Spawner {
    /// Spawns `fut` and returns a handle that resolves to its output. The same handle type
    /// for every runtime, so the scenarios need not know which one they run on.
    fn spawn<T, F>(&self, fut: F) -> Task<T>
    where
        T: Send + 'static,
        F: Future<Output = T> + Send + 'static,
    {
        let (finish, task) = task_slot();
        // `fut` (and everything it owns, such as a cancelled waiter) is dropped before the
        // output is sent: a finished task's side effects are visible to whoever awaits it.
        let job = async move {
            let out = fut.await;
            finish.send(out);
        };
        match self {
            // Dropping a join handle detaches the task on both runtimes.
            Spawner::Tokio(handle) => drop(handle.spawn(job)),
            Spawner::AsyncStd => drop(async_std::task::spawn(job)),
            Spawner::Local(spawner) => spawner.spawn_local(job).expect("the pool is running"),
            Spawner::Threads => drop(std::thread::spawn(move || futures_executor::block_on(job))),
        }
        task
    }

    /// [`spawn`](Self::spawn), with a runtime-independent way to cancel the task: aborting
    /// drops `fut` where it stands, on whichever thread polls the task next.
    fn spawn_abortable<T, F>(&self, fut: F) -> (Task<Result<T, Aborted>>, AbortHandle)
    where
        T: Send + 'static,
        F: Future<Output = T> + Send + 'static,
    {
        let (fut, abort) = abortable(fut);
        (self.spawn(fut), abort)
    }
}

/// Runs blocking code on a new thread, as a task the scenario can await without blocking its
/// executor.
fn on_thread<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Task<T> {
    let (finish, task) = task_slot();
    drop(std::thread::spawn(move || finish.send(f())));
    task
}

/// A spawned task's output, written once by the task and read by whoever awaits [`Task`].
struct Slot<T> {
    out: Option<T>,
    waker: Option<Waker>,
    /// The task is gone: it sent its output, or panicked.
    finished: bool,
}

/// Awaits a spawned task's output. Panics if the task panicked.
struct Task<T>(Arc<Mutex<Slot<T>>>);

/// The task's end of the slot.
struct Finish<T>(Arc<Mutex<Slot<T>>>);

fn task_slot<T>() -> (Finish<T>, Task<T>) {
    let slot = Arc::new(Mutex::new(Slot {
        out: None,
        waker: None,
        finished: false,
    }));
    (Finish(slot.clone()), Task(slot))
}

fn lock<T>(slot: &Mutex<Slot<T>>) -> std::sync::MutexGuard<'_, Slot<T>> {
    slot.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<T> Finish<T> {
    fn send(self, out: T) {
        lock(&self.0).out = Some(out);
        // `drop` marks the task finished and wakes the reader.
    }
}

impl<T> Drop for Finish<T> {
    fn drop(&mut self) {
        let waker = {
            let mut slot = lock(&self.0);
            slot.finished = true;
            slot.waker.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

impl<T> Future for Task<T> {
    type Output = T;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        let mut slot = lock(&self.0);
        if let Some(out) = slot.out.take() {
            return Poll::Ready(out);
        }
        assert!(!slot.finished, "a spawned task panicked");
        slot.waker = Some(cx.waker().clone());
        Poll::Pending
    }
}

impl<T> Task<T> {
    /// Whether the task has finished (its output may already have been taken).
    fn is_finished(&self) -> bool {
        let slot = lock(&self.0);
        slot.out.is_some() || slot.finished
    }
}

/// Awaits every task, in order.
async fn join_all<T>(tasks: Vec<Task<T>>) -> Vec<T> {
    let mut out = Vec::with_capacity(tasks.len());
    for task in tasks {
        out.push(task.await);
    }
    out
}

/// Lets the runtime run other tasks, without any timer: wakes itself and returns `Pending`
/// once.
async fn yield_now() {
    let mut yielded = false;
    poll_fn(|cx| {
        if yielded {
            Poll::Ready(())
        } else {
            yielded = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    })
    .await;
}

// ---------------------------------------------------------------------------------------
// What every scenario asserts.

/// Asserts that admissions never outran `quota`: `times` are the completion times of
/// admissions on one key (or one direct limiter) whose state was fresh at `start`, one entry
/// per cell. GCRA admits the k-th cell (k from 1, in reservation order) no earlier than
/// `start + (k - burst)·T`, and a wait completes at or after its admission instant, so the
/// k-th *smallest* completion time obeys the same bound whatever the order of completions.
fn assert_paced(what: &str, start: Timestamp, mut times: Vec<Timestamp>, quota: Quota) {
    times.sort_unstable();
    let burst = quota.burst() as usize;
    for (i, &t) in times.iter().enumerate() {
        let k = i + 1;
        let cells_ahead = u32::try_from(k.saturating_sub(burst)).unwrap();
        let earliest = start + quota.interval() * cells_ahead;
        assert!(
            t >= earliest,
            "{what}: cell {k} of {} completed at {t:?}, before {earliest:?} (start {start:?}, \
             interval {:?}, burst {burst})",
            times.len(),
            quota.interval(),
        );
    }
}

/// The instant `key`'s next cell would be admitted at, read with a zero-bound wait, which
/// reserves nothing when it refuses. Panics if the key is free now (the zero-bound wait was
/// then admitted and took a cell).
fn next_free(l: &Limiter<str>, key: &str) -> Timestamp {
    let probe = l
        .until_ready(key)
        .within(Duration::ZERO)
        .now_or_never()
        .expect("a zero-bound wait never waits");
    match probe {
        Err(Error::RateLimited { earliest, .. }) => earliest,
        other => panic!("{key:?} was free at {:?} ({other:?})", l.now()),
    }
}

/// Yields until `key`'s next free instant is `want`, i.e. until a spawned waiter made the
/// reservation the scenario expects.
async fn wait_for_next_free(l: &Limiter<str>, key: &str, want: Timestamp) {
    let give_up = Instant::now() + Duration::from_secs(10);
    loop {
        let seen = next_free(l, key);
        if seen == want {
            return;
        }
        assert!(
            seen < want,
            "{key:?}: next free instant {seen:?}, expected {want:?}"
        );
        assert!(
            Instant::now() < give_up,
            "a spawned waiter never reserved its cell"
        );
        yield_now().await;
    }
}

// ---------------------------------------------------------------------------------------
// The scenarios.

/// 20 tasks wait on one key of a 200/s, burst-1 limiter: every one is admitted, counted once,
/// and never faster than the rate.
async fn one_key_many_tasks(rt: Spawner) {
    const TASKS: usize = 20;
    let quota = Quota::per_second(200).allow_burst(1);
    let l: Limiter<str> = Limiter::keyed(quota);
    let start = l.now();
    let tasks = (0..TASKS)
        .map(|_| {
            let l = l.clone();
            rt.spawn(async move { l.until_ready("host").await.map(|()| l.now()) })
        })
        .collect();
    let times = join_all(tasks)
        .await
        .into_iter()
        .collect::<Result<Vec<_>, _>>()
        .expect("an unbounded wait for one cell cannot fail");
    assert_eq!(times.len(), TASKS);
    assert_paced("one key", start, times, quota);
    assert_eq!(l.stats().admitted, TASKS as u64);
}

/// 6 keys × 6 tasks, half of them asking for 2 cells at once (burst 2, 200/s): every key is
/// paced on its own cells, and every wait is admitted once.
async fn many_keys_many_tasks(rt: Spawner) {
    const KEYS: u32 = 6;
    const PER_KEY: u32 = 6;
    let quota = Quota::per_second(200).allow_burst(2);
    let l: Limiter<u32> = Limiter::keyed(quota);
    let start = l.now();
    let mut tasks = Vec::new();
    for task in 0..PER_KEY {
        for key in 0..KEYS {
            let l = l.clone();
            let n = 1 + task % 2;
            tasks.push(rt.spawn(async move {
                let out = l.until_n_ready(&key, n).await.map(|()| l.now());
                (key, n, out)
            }));
        }
    }
    let mut per_key: Vec<Vec<Timestamp>> = vec![Vec::new(); KEYS as usize];
    for (key, n, out) in join_all(tasks).await {
        let t = out.expect("n <= burst: the wait cannot fail");
        // An n-cell admission takes its n cells at once.
        per_key[key as usize].extend(std::iter::repeat_n(t, n as usize));
    }
    for (key, times) in per_key.into_iter().enumerate() {
        assert_eq!(times.len(), (PER_KEY + PER_KEY / 2) as usize);
        assert_paced(&format!("key {key}"), start, times, quota);
    }
    assert_eq!(l.stats().admitted, u64::from(KEYS * PER_KEY));
}

/// Four waiters queue on one key behind a check, one at a time (the head holds instant
/// `e0`, the others nothing yet); then waiters 1 and 3 are aborted while pending. Neither
/// costs anything: waiter 2 moves up to `e0 + T`, and a new waiter takes `e0 + 2T`. Each
/// completes exactly when the clock reaches its instant.
async fn cancelled_waiters_cost_nothing(rt: Spawner) {
    const T: Duration = Duration::from_millis(20);
    let clock = ManualClock::new();
    let l: Limiter<str> = Limiter::builder(Quota::with_period(T))
        .clock(clock.clone())
        .build();
    assert!(l.check("k").is_ok());
    let e0 = next_free(&l, "k");
    let at = |i: u32| e0 + T * i;

    let mut waiters = Vec::new();
    for i in 0..4 {
        let w = l.clone();
        waiters.push(rt.spawn_abortable(async move { w.until_ready("k").await.map(|()| w.now()) }));
        // One at a time, so that waiter i is the i-th in the queue.
        wait_for_next_free(&l, "k", at(i + 1)).await;
    }
    let mut waiters = waiters.into_iter();
    let mut next = || waiters.next().unwrap();
    let (w0, (w1, abort1), w2, (w3, abort3)) = (next().0, next(), next().0, next());

    abort1.abort();
    assert_eq!(w1.await, Err(Aborted));
    assert_eq!(next_free(&l, "k"), at(3), "a dropped waiter still counted");
    abort3.abort();
    assert_eq!(w3.await, Err(Aborted));
    assert_eq!(next_free(&l, "k"), at(2), "a dropped waiter still counted");

    // A new waiter queues behind waiter 2.
    let w = l.clone();
    let (w4, _) = rt.spawn_abortable(async move { w.until_ready("k").await.map(|()| w.now()) });
    wait_for_next_free(&l, "k", at(3)).await;

    // Move the clock to each instant in turn: that waiter completes then, with the clock
    // reading exactly its instant, and the later ones not before (given the executor a few
    // turns to show otherwise).
    let mut pending = vec![("0", w0, at(0)), ("2", w2, at(1)), ("4", w4, at(2))];
    while !pending.is_empty() {
        for _ in 0..10 {
            yield_now().await;
        }
        for (name, task, _) in &pending {
            assert!(!task.is_finished(), "waiter {name} completed early");
        }
        let (name, task, instant) = pending.remove(0);
        clock.set(instant);
        let done = task.await.expect("not aborted").expect("an unbounded wait");
        assert_eq!(done, instant, "waiter {name}");
    }
    assert_eq!(l.stats().admitted, 4);
}

/// A user's loop that must not livelock the key: 50 tasks on a 200/s, burst-1 key, each
/// waiting for a cell under a 100 ms timeout (tollgate's own `sleep`, so that no runtime
/// timer is needed) and trying again when it fires. The queue is 50 deep (250 ms), so most
/// waits time out; those drops must cost nothing. Over 1 s the key admits at least half its
/// rate (eager reservations admitted a tenth and falling) and never more than the window
/// guarantee allows.
async fn timeouts_keep_the_rate(rt: Spawner) {
    const TASKS: usize = 50;
    let quota = Quota::per_second(200).allow_burst(1);
    let l: Limiter<str> = Limiter::keyed(quota);
    let start = l.now();
    let stop = start + Duration::from_secs(1);
    let tasks = (0..TASKS)
        .map(|_| {
            let l = l.clone();
            rt.spawn(async move {
                let mut admitted = Vec::new();
                while l.now() < stop {
                    let wait = l.until_ready("k");
                    let timeout = tollgate::timer::sleep(Duration::from_millis(100));
                    if let Either::Left((out, _)) = select(wait, timeout).await {
                        out.expect("an unbounded wait");
                        admitted.push(l.now());
                    }
                }
                admitted
            })
        })
        .collect();
    let times: Vec<Timestamp> = join_all(tasks).await.into_iter().flatten().collect();
    let in_window = times.iter().filter(|&&t| t <= stop).count() as u64;
    let cells = (stop.as_nanos() - start.as_nanos()) / quota.interval().as_nanos() as u64;
    assert!(
        in_window <= 1 + cells,
        "{in_window} admissions in 1 s, over the bound of {}",
        1 + cells
    );
    assert!(
        in_window >= cells / 2,
        "{in_window} admissions in 1 s at a rate of {cells}: cancelled waits wasted the key"
    );
    assert_paced("timeouts", start, times, quota);
}

/// A timeout built from tollgate's own `sleep` (no runtime timer): the wait loses the race,
/// is dropped while pending as the queue's head, and refunds its cell.
async fn timeout_by_tollgate_sleep_refunds(rt: Spawner) {
    // The limiter's clock stands still, so only the (real-time) sleep can finish.
    let l: Limiter<str> = Limiter::builder(Quota::with_period(Duration::from_millis(10)))
        .clock(ManualClock::new())
        .build();
    assert!(l.check("k").is_ok());
    let e0 = next_free(&l, "k");
    let w = l.clone();
    let timed_out = rt.spawn(async move {
        let wait = w.until_ready("k");
        let timeout = tollgate::timer::sleep(Duration::from_millis(2));
        // `select` drops the loser: here the pending wait.
        matches!(select(wait, timeout).await, Either::Right(_))
    });
    assert!(
        timed_out.await,
        "the wait beat a timeout on a stopped clock"
    );
    assert_eq!(
        next_free(&l, "k"),
        e0,
        "the timed-out wait was not refunded"
    );
    assert_eq!(l.stats().admitted, 1);
}

/// A waiter that is polled once (joining the queue) and then `mem::forget`ten stalls
/// nobody: the queue admits it in its turn without it being polled, and later waiters
/// complete, paced behind its cell.
async fn forgotten_waiter_stalls_nobody(rt: Spawner) {
    const TASKS: usize = 5;
    let quota = Quota::per_second(200).allow_burst(1);
    let l: Limiter<str> = Limiter::keyed(quota);
    // Take the key's cell, then poll a wait once and forget it. On a loaded machine the task
    // may first run after the cell came back (5 ms), and its poll is admitted at once: then
    // take the cell again and retry, counting what was admitted, until the wait queues.
    let mut admitted = 0;
    let mut attempts = 0;
    let start = loop {
        attempts += 1;
        assert!(
            attempts <= 100,
            "100 spawned tasks each first ran more than 5 ms after the check"
        );
        // Take the cell (it may not be back yet after a retry). A check that passes at or
        // after `start` leaves the key's TAT at start + T or later.
        let start = loop {
            let start = l.now();
            if l.check("k").is_ok() {
                break start;
            }
            tollgate::timer::sleep(Duration::from_millis(1)).await;
        };
        admitted += 1;
        let f = l.clone();
        let forgotten = rt.spawn(async move {
            let mut wait = Box::pin(f.until_ready("k"));
            let first = futures_util::poll!(wait.as_mut());
            std::mem::forget(wait);
            first.is_pending()
        });
        if forgotten.await {
            break start;
        }
        admitted += 1;
    };
    let tasks = (0..TASKS)
        .map(|_| {
            let l = l.clone();
            rt.spawn(async move { l.until_ready("k").await.map(|()| l.now()) })
        })
        .collect();
    let mut times = join_all(tasks)
        .await
        .into_iter()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    // The cell up to start + T is taken and the forgotten wait holds the next one: waiter j
    // (from 0, by completion) is admitted no earlier than start + (j + 2)·T.
    times.sort_unstable();
    for (j, &t) in (2u32..).zip(&times) {
        let earliest = start + quota.interval() * j;
        assert!(
            t >= earliest,
            "{t:?} < {earliest:?}: the forgotten cell was reused"
        );
    }
    // The checks and early polls, the forgotten waiter (admitted in its turn, though nobody
    // will know), and every task.
    assert_eq!(l.stats().admitted, admitted + 1 + TASKS as u64);
}

/// `tollgate::timer::sleep` and `sleep_until` complete, never early, from spawned tasks and from
/// the scenario's own task; zero and past deadlines complete at once.
async fn sleep_is_never_early(rt: Spawner) {
    let sleepers = (0..24u64)
        .map(|i| {
            rt.spawn(async move {
                let d = Duration::from_micros(250 * (i % 8 + 1));
                let start = Instant::now();
                tollgate::timer::sleep(d).await;
                (d, start.elapsed())
            })
        })
        .collect();
    let deadline = Instant::now() + Duration::from_millis(3);
    let until = (0..8)
        .map(|_| {
            rt.spawn(async move {
                tollgate::timer::sleep_until(deadline).await;
                Instant::now()
            })
        })
        .collect();

    let start = Instant::now();
    tollgate::timer::sleep(Duration::from_millis(2)).await;
    assert!(start.elapsed() >= Duration::from_millis(2));
    tollgate::timer::sleep(Duration::ZERO).await;
    tollgate::timer::sleep_until(start).await;

    for (d, elapsed) in join_all(sleepers).await {
        assert!(elapsed >= d, "a sleep of {d:?} ended after {elapsed:?}");
    }
    for woke in join_all(until).await {
        assert!(
            woke >= deadline,
            "sleep_until woke {:?} early",
            deadline - woke
        );
    }
}

/// `throttle` runs each wrapped future once, after its cell, and passes its output through:
/// on a keyed limiter and on a direct one.
async fn throttle_runs_each_future_after_its_cell(rt: Spawner) {
    const TASKS: u32 = 12;
    let quota = Quota::per_second(400).allow_burst(2);
    let l: Limiter<u32> = Limiter::keyed(quota);
    let d = DirectLimiter::new(quota);
    let (start, direct_start) = (l.now(), d.now());
    let keyed = (0..TASKS)
        .map(|i| {
            let l = l.clone();
            rt.spawn(async move { l.throttle(&9, async { (i, l.now()) }).await })
        })
        .collect();
    let direct = (0..TASKS)
        .map(|i| {
            let d = d.clone();
            rt.spawn(async move { d.throttle(async { (i, d.now()) }).await })
        })
        .collect();

    for (name, tasks, start) in [("keyed", keyed, start), ("direct", direct, direct_start)] {
        let (mut ids, times): (Vec<u32>, Vec<Timestamp>) = join_all(tasks)
            .await
            .into_iter()
            .map(|out| out.expect("one cell: the wait cannot fail"))
            .unzip();
        ids.sort_unstable();
        assert_eq!(ids, (0..TASKS).collect::<Vec<_>>(), "{name}");
        assert_paced(name, start, times, quota);
    }
    assert_eq!(l.stats().admitted, u64::from(TASKS));
}

/// Two paced streams (one spawned, one on the scenario's task) and 8 waiting tasks share one
/// direct limiter: items keep their order and every admission respects the shared rate.
async fn pace_shares_a_direct_limiter_with_waiters(rt: Spawner) {
    let quota = Quota::per_second(200).allow_burst(1);
    let d = DirectLimiter::new(quota);
    let start = d.now();
    let waiters = (0..8)
        .map(|_| {
            let d = d.clone();
            rt.spawn(async move { d.until_ready().await.map(|()| d.now()) })
        })
        .collect();
    let p = d.clone();
    let spawned = rt.spawn(async move {
        p.pace(stream::iter(0..8))
            .map(|item| (item, p.now()))
            .collect::<Vec<_>>()
            .await
    });
    let mine: Vec<(i32, Timestamp)> = d
        .pace(stream::iter(100..108))
        .map(|item| (item, d.now()))
        .collect()
        .await;

    let spawned = spawned.await;
    assert_eq!(
        spawned.iter().map(|&(i, _)| i).collect::<Vec<_>>(),
        (0..8).collect::<Vec<_>>()
    );
    assert_eq!(
        mine.iter().map(|&(i, _)| i).collect::<Vec<_>>(),
        (100..108).collect::<Vec<_>>()
    );
    let mut times: Vec<Timestamp> = spawned.into_iter().chain(mine).map(|(_, t)| t).collect();
    for t in join_all(waiters).await {
        times.push(t.expect("one cell: the wait cannot fail"));
    }
    assert_eq!(times.len(), 24);
    assert_paced("direct", start, times, quota);
}

/// Plain threads in `until_ready(..).wait()` and async tasks wait on the same key: one FIFO
/// queue of reservations, one rate.
async fn blocking_and_async_waiters_share_a_key(rt: Spawner) {
    let quota = Quota::per_second(200).allow_burst(1);
    let l: Limiter<u64> = Limiter::keyed(quota);
    let start = l.now();
    let threads: Vec<_> = (0..3)
        .map(|_| {
            let l = l.clone();
            on_thread(move || {
                (0..3)
                    .map(|_| l.until_ready(&1).wait().map(|()| l.now()))
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let tasks = (0..8)
        .map(|_| {
            let l = l.clone();
            rt.spawn(async move { l.until_ready(&1).await.map(|()| l.now()) })
        })
        .collect();
    let mut times = Vec::new();
    for out in join_all(tasks).await {
        times.push(out.unwrap());
    }
    for out in join_all(threads).await.into_iter().flatten() {
        times.push(out.unwrap());
    }
    assert_eq!(times.len(), 17);
    assert_paced("blocking and async", start, times, quota);
    assert_eq!(l.stats().admitted, 17);
}

// ---------------------------------------------------------------------------------------
// Every scenario under every runtime.

macro_rules! on_every_runtime {
    ($($scenario:ident),* $(,)?) => {$(
        mod $scenario {
            use super::Runtime;

            #[test]
            fn tokio_current_thread() {
                Runtime::TokioCurrentThread.run(super::$scenario);
            }

            #[test]
            fn tokio_multi_thread() {
                Runtime::TokioMultiThread.run(super::$scenario);
            }

            #[test]
            fn async_std() {
                Runtime::AsyncStd.run(super::$scenario);
            }

            #[test]
            fn futures_local_pool() {
                Runtime::LocalPool.run(super::$scenario);
            }

            #[test]
            fn block_on_threads() {
                Runtime::Threads.run(super::$scenario);
            }
        }
    )*};
}

on_every_runtime!(
    one_key_many_tasks,
    many_keys_many_tasks,
    cancelled_waiters_cost_nothing,
    timeouts_keep_the_rate,
    timeout_by_tollgate_sleep_refunds,
    forgotten_waiter_stalls_nobody,
    sleep_is_never_early,
    throttle_runs_each_future_after_its_cell,
    pace_shares_a_direct_limiter_with_waiters,
    blocking_and_async_waiters_share_a_key,
);

// ---------------------------------------------------------------------------------------
// The timeout loop, under each runtime's own timeout.
//
// Unlike the scenarios above, these use the runtime's own timer where it has one: the loop
// of issue 6 as a user writes it. 200 tasks on one key at 100/s, burst 1, each waiting for a
// cell under a 500 ms timeout and trying again when it fires, for 2 s. The queue is 200
// deep (2 s of cells) and each wait gives up after 500 ms, so about three waits in four are
// dropped, mostly as the queue's head (eager reservations admitted a tenth of the rate in
// the measurement, and falling). Each test takes about 2.5 s: the load, then the
// queue draining.

/// The number of tasks, the quota, the timeout and how long tasks keep starting waits: the
/// issue's parameters, with 2 s of load in place of its 5 s.
const LOOP_TASKS: usize = 200;
const LOOP_TIMEOUT: Duration = Duration::from_millis(500);
const LOOP_LOAD: Duration = Duration::from_secs(2);

fn loop_quota() -> Quota {
    Quota::per_second(100).allow_burst(1)
}

/// A wait for one cell, resolving to the instant it was admitted at (see [`Stamped`]).
type StampedWait<'a> = BoxFuture<'a, Result<Instant, Error>>;

/// What a wait under a timeout resolves to: `None` if the timeout fired first (and dropped
/// the wait).
type TimedWait<'a> = BoxFuture<'a, Option<Result<Instant, Error>>>;

/// Wraps one wait in a runtime's timeout of [`LOOP_TIMEOUT`].
type Timeout = for<'a> fn(StampedWait<'a>) -> TimedWait<'a>;

fn tokio_timeout(wait: StampedWait<'_>) -> TimedWait<'_> {
    Box::pin(tokio::time::timeout(LOOP_TIMEOUT, wait).map(Result::ok))
}

fn async_std_timeout(wait: StampedWait<'_>) -> TimedWait<'_> {
    Box::pin(async_std::future::timeout(LOOP_TIMEOUT, wait).map(Result::ok))
}

/// A bare executor has no timer: tollgate's own `sleep` races the wait, and `select` drops
/// the loser.
fn tollgate_sleep_timeout(wait: StampedWait<'_>) -> TimedWait<'_> {
    Box::pin(
        select(wait, tollgate::timer::sleep(LOOP_TIMEOUT)).map(|raced| match raced {
            Either::Left((out, _)) => Some(out),
            Either::Right(_) => None,
        }),
    )
}

/// A wait that reports when it was admitted: `Instant::now()` read by the waker the
/// hand-over wakes (on the thread that admitted it, before the executor's turn), or at the
/// poll that finds it admitted without a wake (admitted on arrival). Reading at the task's
/// next poll instead adds the executor's scheduling delay, which on a loaded 2-core machine
/// reaches several intervals (a stalled tokio worker was seen to poll three admitted tasks
/// within 25 µs). Either reading comes after the admission, never before.
struct Stamped<F> {
    wait: F,
    /// The instant of the last wake since the last `Pending`.
    woken_at: Arc<Mutex<Option<Instant>>>,
}

/// The waker [`Stamped`] polls its wait with: stamps the wake, then wakes the task.
struct StampOnWake {
    woken_at: Arc<Mutex<Option<Instant>>>,
    task: Waker,
}

impl std::task::Wake for StampOnWake {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let now = Instant::now();
        *self.woken_at.lock().unwrap_or_else(PoisonError::into_inner) = Some(now);
        self.task.wake_by_ref();
    }
}

impl<F: Future<Output = Result<(), Error>> + Unpin> Future for Stamped<F> {
    type Output = Result<Instant, Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let waker = Waker::from(Arc::new(StampOnWake {
            woken_at: self.woken_at.clone(),
            task: cx.waker().clone(),
        }));
        let polled = Pin::new(&mut self.wait).poll(&mut Context::from_waker(&waker));
        let mut woken_at = self.woken_at.lock().unwrap_or_else(PoisonError::into_inner);
        match polled {
            // A wake that raced this poll is forgotten: the admission is then read at the
            // next poll, later than it was, never earlier.
            Poll::Pending => {
                *woken_at = None;
                Poll::Pending
            }
            Poll::Ready(out) => Poll::Ready(out.map(|()| woken_at.unwrap_or_else(Instant::now))),
        }
    }
}

/// One task of the loop: waits for a cell of `"k"` under `timeout`, again and again, until
/// `stop`; returns the instants of its admissions.
async fn timeout_loop(l: Limiter<str>, stop: Instant, timeout: Timeout) -> Vec<Instant> {
    let mut admitted = Vec::new();
    while Instant::now() < stop {
        let wait = Stamped {
            wait: Box::pin(l.until_ready("k")),
            woken_at: Arc::default(),
        };
        if let Some(out) = timeout(Box::pin(wait)).await {
            admitted.push(out.expect("an unbounded wait for one cell cannot fail"));
        }
    }
    admitted
}

/// Asserts that the loop kept the rate and never exceeded it. `times` are every task's
/// admission instants (see [`Stamped`]) on a key that was fresh at `start`, and `stop` is
/// when tasks stopped starting waits.
///
/// **Kept the rate.** From the first admission to `stop` the queue never runs dry (200
/// tasks, each back in the queue as soon as its wait ends), so a limiter that loses nothing
/// to cancellation admits a cell at the first admission and then one per interval: exactly
/// `burst + floor((stop - first) / T)` (the first admission takes the burst of 1). Counting
/// the instants read at or before `stop` can miss at most the one cell admitted just before
/// `stop` and read after it; the tail after `stop` is left out because the queue drains
/// then. The test asks for 90 % of that, not 99 %: on a loaded 2-core CI machine threads
/// are descheduled, and a timeout that fires after its head's instant has passed leaves that
/// cell used (`src/wait/queue.rs`), so wall-clock noise costs cells that the limiter cannot
/// win back. Twenty rounds of two copies of these tests at once never fell below 198 of
/// 200, which leaves no margin at 99 %. The 99 % target is the benchmark's (scenario G, on a
/// quiet machine); 90 % still fails by a wide margin if cancellation wastes cells (eager
/// reservations admitted about 10 %; a head's drop that does not refund, about 25 %).
///
/// **Never exceeded it, from the start.** The k-th admission (k from 1) comes no earlier
/// than `start + (k - burst)·T`, and every instant here is read at or after its admission,
/// so the k-th smallest instant obeys the same bound: exact, whatever the delays. With the
/// queue full from the first admission the loop runs at this bound (give or take the first
/// admission's and the reads' delays), so an extra cell fails it unless cells were lost
/// before it.
///
/// **Not a sliding window.** The window guarantee (at most `burst + floor(W/T)` in any
/// window W) holds on the limiter's admission instants and is asserted exactly on the
/// manual clock (`tests/wait.rs`, the reference-model property). It cannot be asserted on
/// instants read from the wall clock: a stall of the timer's thread releases the cells that
/// came due meanwhile together, by design (`src/wait/queue.rs`, the chain instant), and a
/// loaded machine stalls it. A version of this test that held read instants to the window
/// bound plus one failed 3 runs in 20 with four test binaries sharing two cores.
fn assert_loop_kept_the_rate(
    runtime: &str,
    mut times: Vec<Instant>,
    start: Instant,
    stop: Instant,
) {
    let quota = loop_quota();
    let interval = quota.interval().as_nanos();
    let burst = u128::from(quota.burst());
    times.sort_unstable();
    let first = *times.first().expect("the first wait is admitted at once");

    let in_window = times.iter().filter(|&&t| t <= stop).count() as u128;
    let ideal = burst + (stop - first).as_nanos() / interval;
    assert!(
        in_window * 10 >= ideal * 9,
        "{runtime}: {in_window} admissions in {:?} where the rate allows {ideal}: cancelled \
         waits wasted cells",
        stop - first,
    );

    for (k, &t) in (1u32..).zip(&times) {
        let earliest = start + quota.interval() * k.saturating_sub(quota.burst());
        assert!(
            t >= earliest,
            "{runtime}: admission {k} at {:?} after the start, before the rate allows ({:?})",
            t - start,
            earliest - start,
        );
    }
}

/// The loop on a two-worker tokio runtime with its timer on, under `tokio::time::timeout`.
#[test]
fn timeout_loop_under_tokio_timeout() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .expect("a tokio runtime");
    let l: Limiter<str> = Limiter::keyed(loop_quota());
    let start = Instant::now();
    let stop = start + LOOP_LOAD;
    let times = rt.block_on(async {
        let tasks: Vec<_> = (0..LOOP_TASKS)
            .map(|_| tokio::spawn(timeout_loop(l.clone(), stop, tokio_timeout)))
            .collect();
        let mut times = Vec::new();
        for task in tasks {
            times.extend(task.await.expect("a loop task panicked"));
        }
        times
    });
    assert_loop_kept_the_rate("tokio", times, start, stop);
}

/// The loop on async-std, under `async_std::future::timeout`.
#[test]
fn timeout_loop_under_async_std_timeout() {
    let l: Limiter<str> = Limiter::keyed(loop_quota());
    let start = Instant::now();
    let stop = start + LOOP_LOAD;
    let times = async_std::task::block_on(async {
        let tasks: Vec<_> = (0..LOOP_TASKS)
            .map(|_| async_std::task::spawn(timeout_loop(l.clone(), stop, async_std_timeout)))
            .collect();
        let mut times = Vec::new();
        for task in tasks {
            times.extend(task.await);
        }
        times
    });
    assert_loop_kept_the_rate("async-std", times, start, stop);
}

/// The loop with no executor: each task on its own thread in `futures_executor::block_on`,
/// under a timeout made of tollgate's own `sleep`.
#[test]
fn timeout_loop_under_block_on_threads() {
    let l: Limiter<str> = Limiter::keyed(loop_quota());
    let start = Instant::now();
    let stop = start + LOOP_LOAD;
    let threads: Vec<_> = (0..LOOP_TASKS)
        .map(|_| {
            let l = l.clone();
            std::thread::spawn(move || {
                futures_executor::block_on(timeout_loop(l, stop, tollgate_sleep_timeout))
            })
        })
        .collect();
    let times = threads
        .into_iter()
        .flat_map(|thread| thread.join().expect("a loop thread panicked"))
        .collect();
    assert_loop_kept_the_rate("block_on threads", times, start, stop);
}
