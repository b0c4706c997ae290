//! [`drive`]: an opt-in runtime driver for the global timer, with the thread as its backstop.
//!
//! The global timer's thread costs one park/unpark cycle per batch it fires, and every task it
//! wakes is woken from a foreign thread (a remote wake, and the cache lines of the hand-over
//! travel between the thread and the workers). A runtime that has a timer of its own can do
//! better: [`Drive`] runs the timer's turns inside a task on the runtime, sleeping with the
//! runtime's sleep until the timer's next wake-up, so fired entries (and the waiting queues'
//! hand-overs they run) wake their tasks from a worker thread, which is a local wake (on
//! tokio; smol fires its timers on its reactor's thread).
//!
//! The runtime's sleep is polled with [`TurnOnWake`], whose wake runs the turn at once,
//! where the runtime fires its timers, and then wakes the task to re-arm the sleep. On
//! tokio that is the worker's park: tokio queues the tasks woken there and notifies an idle
//! worker once when the park ends, where each wake from inside a task's poll notifies one
//! (a futex wake of the other worker per admitted task, most of F2's gap with the turn in
//! the poll; BENCHMARKS.md).
//!
//! # States
//!
//! ```text
//!   Idle --first poll, claim won------> Attached --drop--> (detached)
//!   Idle --first poll, claim taken----> Refused (completes at once)
//! ```
//!
//! The claim is the timer's `attached` flag (`driver.rs`): one task at a time. While a task
//! holds it, registrants wake the task (through an `AtomicWaker`) instead of unparking the
//! thread, and the thread stays as a backstop: it fires only what is `BACKSTOP` overdue and
//! sleeps until then, or for good while nothing is pending. A runtime that stalls, blocks, or
//! a `Drive` that is forgotten therefore costs entries at most a backstop of lateness (10 ms),
//! never a hang. Dropping an attached `Drive` (the runtime shutting down, the task aborted)
//! gives the claim up and unparks the thread, which drives alone again from its next turn.
//! The lost-wakeup argument for both drivers, and for the detach, is in `driver.rs`.
//!
//! Only the global real-time timer can be driven this way; a [`ManualClock`]'s timer moves
//! only when it is advanced.
//!
//! [`ManualClock`]: crate::ManualClock

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Instant;

use super::thread::global;
use crate::time::instant_at;

/// Turns in a row that found new registrations before the task yields to its runtime.
const TURNS_BEFORE_YIELD: usize = 8;

/// Runtime sleeps in a row that end before their instant after which [`Drive`] detaches:
/// more than one, so that a sleep that ends a hair early once costs nothing.
const EARLY_SLEEPS: u8 = 2;

/// Drives tollgate's global timer from a task on an async runtime, while polled.
///
/// `sleep_until` is the runtime's timer: given an instant, it returns a future that completes
/// at (or after) it. Spawn the returned future on the runtime; it never completes while it
/// drives the timer. From then on the timer's turns (firing due sleeps, and so the waiting
/// queues' hand-overs) run inside that task, and in the wake of the runtime's sleep, on the
/// thread where the runtime fires its timers: on tokio, a worker's park, so tasks admitted by
/// [`until_ready`](crate::Limiter::until_ready) are woken from a worker (a local wake)
/// instead of from tollgate's timer thread, which saves a thread wake-up per batch and a
/// cross-thread wake per admission (BENCHMARKS.md, F1/F2). (smol fires its timers on its
/// reactor's thread, or a thread in `block_on`, under the reactor's lock: the turns run
/// there, and the wakes are remote as the timer thread's are.)
///
/// The waker the sleep is polled with runs a timer turn, which wakes tasks: a runtime must
/// not call it while holding a lock that its own task wakers take (tokio and smol do not).
///
/// Attaching is optional and only changes who runs the timer's turns: what fires when, and in
/// which order, stays the same, and lateness gains at most the runtime timer's own rounding
/// (tokio's is 1 ms). The timer thread stays as a backstop: while a driver is attached it
/// fires only what the driver is 10 ms late for, so a stalled or blocked runtime, or a
/// forgotten `Drive`, delays sleeps by at most that much, never forever.
///
/// A runtime whose sleeps end before their instants on the real clock (tokio's paused clock,
/// a simulated one) cannot drive the timer: the `Drive` detaches and completes as soon as
/// two in a row do, and the thread drives alone, as without it.
///
/// At most one driver is attached at a time: the first poll of a `Drive` claims the timer,
/// and a `Drive` that finds it claimed completes at once (so spawning one per runtime, or one
/// per test, is harmless: the first one drives). Dropping the attached `Drive` (its runtime
/// shuts down, its task is aborted) detaches it: the thread drives alone again at once, and
/// a later `drive` may attach.
///
/// # Examples
///
/// On tokio (with its `time` feature):
///
/// ```
/// use std::time::{Duration, Instant};
///
/// # fn main() {
/// let rt = tokio::runtime::Builder::new_multi_thread()
///     .worker_threads(2)
///     .enable_time()
///     .build()
///     .unwrap();
/// rt.block_on(async {
///     let driver = tokio::spawn(tollgate::timer::drive(|at| {
///         tokio::time::sleep_until(at.into())
///     }));
///     let limiter = tollgate::Limiter::keyed(tollgate::Quota::per_second(100).allow_burst(1));
///     let start = Instant::now();
///     for _ in 0..3 {
///         limiter.until_ready(&"client").await.unwrap(); // woken on a worker thread
///     }
///     assert!(start.elapsed() >= Duration::from_millis(20)); // 10 ms apart
///     driver.abort(); // detaches: the timer thread drives alone again
/// });
/// # }
/// ```
///
/// On smol: `smol::spawn(tollgate::timer::drive(smol::Timer::at)).detach();`
///
/// # Cancel safety
///
/// Dropping an attached `Drive` at any point detaches it; nothing waiting on the timer is
/// lost or delayed beyond the thread's own lateness. [`mem::forget`](std::mem::forget) of an
/// attached `Drive` keeps the claim for the rest of the process, and the timer's sleeps then
/// fire up to 10 ms late (from the backstop thread).
///
/// # Panics
///
/// A panic of `sleep_until` or of the future it returns propagates out of `poll`; the runtime
/// then drops the task, which detaches it.
pub fn drive<F, S>(sleep_until: F) -> Drive<F, S>
where
    F: FnMut(Instant) -> S,
    S: Future,
{
    Drive {
        sleep_until,
        turn_on_wake: Waker::from(Arc::new(TurnOnWake)),
        sleep: None,
        at: 0,
        armed: false,
        fired: false,
        early: 0,
        state: State::Idle,
    }
}

/// Whether a [`drive`] future is attached to the global timer (polled at least once, not yet
/// dropped). Only a snapshot: a driver may attach or detach at any moment.
///
/// # Examples
///
/// ```
/// use futures_util::FutureExt;
///
/// let mut driver = tollgate::timer::drive(|_| std::future::pending::<()>());
/// // The first poll attaches it, unless another driver is attached (then it completes).
/// let attached = (&mut driver).now_or_never().is_none();
/// assert!(!attached || tollgate::timer::is_driven());
/// drop(driver); // detaches it, if it was attached
/// ```
// Not part of the stable API: the core's tests (`tests/drive.rs`, `tests/drive_forgotten.rs`)
// watch the claim with it. Public for them only, so hidden from the docs.
#[doc(hidden)]
pub fn is_driven() -> bool {
    global().is_attached()
}

/// The future [`drive`] returns: drives tollgate's global timer from the task that polls it.
///
/// # Examples
///
/// ```
/// use tollgate::timer::{Drive, drive};
///
/// // Spawned on a runtime in a real program; here only its type is shown.
/// let driver: Drive<_, _> = drive(|_deadline| std::future::pending::<()>());
/// drop(driver); // never polled, never attached: the timer thread keeps the timer
/// ```
#[must_use = "futures do nothing unless polled: spawn it on the runtime"]
pub struct Drive<F, S> {
    sleep_until: F,
    /// The waker the runtime's sleep is polled with: its wake runs a turn at once, on the
    /// thread that fires the runtime's timers, then wakes this task (see [`TurnOnWake`]).
    turn_on_wake: Waker,
    /// The runtime's sleep until `at`; the box is made once and reused (`Pin::set`).
    sleep: Option<Pin<Box<S>>>,
    /// The wake-up (timer nanoseconds) `sleep` was made for.
    at: u64,
    /// `sleep` is for the current wake-up and has not completed.
    armed: bool,
    /// `sleep` completed for `at`: if a turn then finds `at` still not due, the runtime's
    /// sleep ended before its instant.
    fired: bool,
    /// Sleeps in a row that ended before their instant.
    early: u8,
    state: State,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Not yet polled.
    Idle,
    /// Holds the claim: drives the timer until dropped.
    Attached,
    /// Another `Drive` held the claim at the first poll: completed.
    Refused,
}

// `Drive` never pins `F`, and holds `S` in a box of its own: it may move freely.
impl<F, S> Unpin for Drive<F, S> {}

impl<F, S> Future for Drive<F, S>
where
    F: FnMut(Instant) -> S,
    S: Future,
{
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        let timer = global();
        match this.state {
            State::Attached => {}
            State::Refused => return Poll::Ready(()),
            State::Idle if timer.attach() => this.state = State::Attached,
            State::Idle => {
                this.state = State::Refused;
                return Poll::Ready(());
            }
        }
        // Register, then turn: a registration that lowers our wake-up after the turn stored
        // it wakes this waker (driver.rs).
        timer.register_task(cx.waker());
        for _ in 0..TURNS_BEFORE_YIELD {
            let Some(next) = timer.task_turn(timer.now()) else {
                continue; // Registrations arrived during the turn.
            };
            if next == u64::MAX {
                this.armed = false;
                return Poll::Pending; // Nothing pending: a registration wakes us.
            }
            if this.fired && this.at == next {
                // The runtime's sleep ended, and the wake-up it was for is not due: its clock
                // is not real time (tokio's paused clock, a simulated one), and re-arming it
                // would spin. Such a runtime cannot drive the timer: give the claim up, as a
                // drop does, and complete; the thread drives alone again at once.
                this.early += 1;
                if this.early >= EARLY_SLEEPS {
                    timer.detach();
                    this.state = State::Refused;
                    return Poll::Ready(());
                }
            } else {
                this.early = 0;
            }
            if !this.armed || this.at != next {
                let sleep = (this.sleep_until)(instant_at(next));
                match &mut this.sleep {
                    Some(slot) => slot.set(sleep),
                    None => this.sleep = Some(Box::pin(sleep)),
                }
                this.at = next;
                this.armed = true;
                this.fired = false;
            }
            let Some(sleep) = &mut this.sleep else {
                unreachable!("armed above")
            };
            match sleep
                .as_mut()
                .poll(&mut Context::from_waker(&this.turn_on_wake))
            {
                Poll::Pending => return Poll::Pending,
                // The wake-up came: turn again.
                Poll::Ready(_) => {
                    this.armed = false;
                    this.fired = true;
                }
            }
        }
        // Busy: let the runtime run other tasks, and come back.
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

/// The waker of the runtime's sleep: runs a turn of the task driver where the runtime fires
/// its timers, then wakes the attached task, which re-arms the sleep for the next wake-up.
///
/// On tokio that is the worker's park, where tokio's own timer wakes its tasks: tasks woken
/// there are queued on that worker and tokio notifies an idle worker once when the park ends,
/// where a wake from inside a task's poll notifies one per wake (`schedule_local`). Running the
/// turn (and the hand-overs it fires) here rather than in the task's poll saves those
/// notifications: a futex wake of the other worker per admitted task (BENCHMARKS.md, F2).
///
/// The turn is one more task-role turn, which is always safe (`driver.rs`, "A second
/// driver"): turns serialise on the queue lock, each leaves both drivers' wake-ups covering
/// the heap, and a turn fires only what is due. The task's own poll still turns and re-arms
/// as before, so nothing depends on this one having run.
struct TurnOnWake;

impl Wake for TurnOnWake {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let timer = global();
        // A hint only: a wake after the `Drive` was dropped skips its turn. One that reads
        // `true` just before a detach still turns, and that turn unparks the thread if it
        // finds no task attached (driver.rs, "Extra task turns").
        if timer.is_attached() {
            // `None`: registrations arrived during the turn; the task's poll goes round.
            let _ = timer.task_turn(timer.now());
        }
        timer.wake_task();
    }
}

impl<F, S> Drop for Drive<F, S> {
    fn drop(&mut self) {
        if self.state == State::Attached {
            global().detach();
        }
    }
}

impl<F, S> fmt::Debug for Drive<F, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Drive")
            .field("state", &self.state)
            .field("armed", &self.armed)
            .finish_non_exhaustive()
    }
}
