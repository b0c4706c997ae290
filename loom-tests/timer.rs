//! Loom models of tollgate's timer (the design record, `src/design.rs`, §5 and §6).
//!
//! Run them in release mode with a preemption bound:
//!
//! ```text
//! RUSTFLAGS="--cfg tollgate_loom" LOOM_MAX_PREEMPTIONS=2 \
//!     cargo test --release -p tollgate-loom --test loom_timer --target-dir target/loom
//! ```
//!
//! Add `-- --nocapture` to see each model's interleaving count and time. Without
//! `LOOM_MAX_PREEMPTIONS` the models use a bound of 2.
//!
//! The models reach the timer's internals through `tollgate::__loom`, which exists only
//! under `--cfg tollgate_loom`: a manual timer (time is passed in with `advance_to`, never
//! read) and the registration stack on its own. Every entry is a loom `Arc`, so loom itself
//! fails a model that leaks one; each model also checks the timer's own counts.
//!
//! * **Registration stack, push vs drain**: two pushers and a drainer; every entry is
//!   drained exactly once, each pusher's in its push order.
//! * **Register vs fire**, **fire vs drop**, **register vs fire vs drop**: a `Sleep`'s poll
//!   and drop race `advance_to`; a waiter is woken at most once, a pending poll is always
//!   woken (no lost wake-up), a cancelled one never, and nothing stays pending or held.
//! * **Recycle vs fire**: a registered `Sleep` hands its entry's allocation to the next
//!   sleep (`Sleep::into_spare`, as a queue's hand-over does) while `advance_to` fires it.
//!   The allocation is reused only once the timer has let it go (otherwise the old sleep is
//!   dropped as usual and cancels its registration); the next sleep registers and is woken
//!   once. Fault tried: reusing the allocation without re-initialising the entry (the next
//!   sleep then completes at once, as if fired).
//! * **Lost wake-up at the driver**: the timer thread's protocol (turn, then park unless the
//!   turn saw a registration) against one or two registrants; if an unpark were lost the
//!   driver would park forever and loom would report a deadlock.
//!
//! * **The runtime driver's backstop**: a task driver attached but never polled again (a
//!   stalled runtime, a forgotten `Drive`) against the timer thread and a registrant; the
//!   same with the task's detach racing the registrant; and with the task's last turn
//!   draining the registration between the thread's turn and its re-check. The thread must
//!   end up knowing of the entry (within the backstop, or exactly once detached), or loom
//!   reports a deadlock. Faults tried, one per model, each reported as a deadlock: a
//!   registrant that only wakes the task, a detach without its unpark, a task turn that does
//!   not lower the thread's wake-up.
//!
//! As in `models.rs`, each thread opens with a Relaxed RMW on a shared gate, which makes loom
//! 0.7 try the threads in both orders (see `race` there), and two-sided models run with both
//! role assignments.
//!
//! The `cfg` below empties this file in every other build; it comes after this comment so
//! that the empty test crate still has its docs (`missing_docs` is on for every target).
#![cfg(tollgate_loom)]

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Instant;

use loom::sync::atomic::AtomicUsize;
use loom::sync::{Arc, Condvar, Mutex};
use loom::thread;
use tollgate::__loom::{BACKSTOP, Inbox, ManualTimer, recycle};
use tollgate::timer::Sleep;

/// Runs `f` under loom (preemption bound 2 unless `LOOM_MAX_PREEMPTIONS` says otherwise) once
/// per role assignment, and reports the interleavings and time.
fn model(name: &str, f: impl Fn(bool) + Copy + Sync + Send + 'static) {
    check(name, &[false, true], f);
}

/// [`model`] for the given role assignments only.
fn check(name: &str, roles: &[bool], f: impl Fn(bool) + Copy + Sync + Send + 'static) {
    let start = Instant::now();
    let mut total = 0;
    for &swapped in roles {
        let mut builder = loom::model::Builder::new();
        if builder.preemption_bound.is_none() {
            builder.preemption_bound = Some(2);
        }
        let count = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = count.clone();
        builder.check(move || {
            counter.fetch_add(1, Ordering::Relaxed);
            f(swapped);
        });
        total += count.load(Ordering::Relaxed);
    }
    eprintln!(
        "loom model {name}: {total} interleavings in {:.2?}",
        start.elapsed()
    );
}

/// A shared gate every thread touches first (see the module docs).
fn gate() -> (Arc<AtomicUsize>, impl Fn(&AtomicUsize) + Copy) {
    // ordering: the gate only has to be an access loom sees both threads make.
    let pass = |g: &AtomicUsize| {
        g.fetch_add(1, Ordering::Relaxed);
    };
    (Arc::new(AtomicUsize::new(0)), pass)
}

/// Runs `a` and `b` on two loom threads (`a` on the main one unless `swapped`).
fn race<A, B>(
    swapped: bool,
    a: impl FnOnce() -> A + 'static,
    b: impl FnOnce() -> B + 'static,
) -> (A, B)
where
    A: 'static,
    B: 'static,
{
    let (g, pass) = gate();
    let g2 = g.clone();
    if swapped {
        let other = thread::spawn(move || {
            pass(&g2);
            a()
        });
        pass(&g);
        let rb = b();
        (other.join().unwrap(), rb)
    } else {
        let other = thread::spawn(move || {
            pass(&g2);
            b()
        });
        pass(&g);
        let ra = a();
        (ra, other.join().unwrap())
    }
}

/// A waker that counts its wakes. (`Wake` needs std's `Arc`; the counter is loom's.)
struct Count(AtomicUsize);

impl Wake for Count {
    fn wake(self: std::sync::Arc<Self>) {
        // ordering: read after the threads are joined.
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

fn counter() -> (std::sync::Arc<Count>, Waker) {
    let count = std::sync::Arc::new(Count(AtomicUsize::new(0)));
    let waker = Waker::from(count.clone());
    (count, waker)
}

fn wakes(count: &Count) -> usize {
    count.0.load(Ordering::Relaxed)
}

fn poll(sleep: &mut Sleep, waker: &Waker) -> Poll<()> {
    Pin::new(sleep).poll(&mut Context::from_waker(waker))
}

const DEADLINE: u64 = 10;

/// A registered sleep's allocation is handed to the next sleep (`recycle`) while
/// `advance_to(DEADLINE)` fires it. The old task is woken at most once, the new sleep
/// registers (in the old allocation or a fresh one) and is woken exactly once by a later
/// advance, and nothing stays pending or held, nor any waker kept.
#[test]
fn recycle_vs_fire() {
    model("recycle_vs_fire", |swapped| {
        let timer = std::sync::Arc::new(ManualTimer::new());
        let (old_count, old_waker) = counter();
        let mut old = timer.sleep(DEADLINE);
        assert_eq!(poll(&mut old, &old_waker), Poll::Pending);
        drop(old_waker);
        let next = timer.sleep(2 * DEADLINE);
        let (t, c) = (timer.clone(), old_count.clone());
        let (mut next, ()) = race(
            swapped,
            move || {
                let (next, _) = recycle(old, next);
                assert!(wakes(&c) <= 1);
                next
            },
            move || t.advance_to(DEADLINE),
        );
        let (next_count, next_waker) = counter();
        assert_eq!(poll(&mut next, &next_waker), Poll::Pending);
        timer.advance_to(2 * DEADLINE);
        assert_eq!(wakes(&next_count), 1, "the new sleep is woken once");
        assert_eq!(poll(&mut next, &next_waker), Poll::Ready(()));
        // A fire whose CAS beat the drop may wake the old task after it (as in
        // `fire_vs_drop`); a drop that won cancels, and a cancelled entry is never woken.
        assert!(wakes(&old_count) <= 1, "the old task was woken twice");
        assert_eq!(timer.pending(), 0);
        drop(next);
        assert_eq!(timer.held(), 0);
        assert_eq!(
            std::sync::Arc::strong_count(&old_count),
            1,
            "the timer kept the old waker"
        );
    });
}

// ---------------------------------------------------------------------------------------
// 1. The registration stack: two pushers and a drainer.

/// Pusher A pushes 1 then 2, pusher B pushes 3, and the main thread drains once while they
/// run and once after. Every entry comes out exactly once, A's in order.
#[test]
fn stack_push_vs_drain() {
    check("stack_push_vs_drain", &[false], |_| {
        let inbox = Arc::new(Inbox::new());
        let (g, pass) = gate();
        let (ia, ga) = (inbox.clone(), g.clone());
        let a = thread::spawn(move || {
            pass(&ga);
            ia.push(1);
            ia.push(2);
        });
        let (ib, gb) = (inbox.clone(), g.clone());
        let b = thread::spawn(move || {
            pass(&gb);
            ib.push(3);
        });
        pass(&g);
        let mut seen = inbox.drain();
        a.join().unwrap();
        b.join().unwrap();
        seen.extend(inbox.drain());
        let mut sorted = seen.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, [1, 2, 3], "lost or duplicated: {seen:?}");
        let pos = |id| seen.iter().position(|&x| x == id).unwrap();
        assert!(pos(1) < pos(2), "a pusher's entries out of order: {seen:?}");
        assert!(inbox.drain().is_empty());
    });
}

// ---------------------------------------------------------------------------------------
// 2. A Sleep against the manual timer's driver.

/// A first poll (which registers) races `advance_to(DEADLINE)`. A poll that returned
/// `Pending` has been woken exactly once by the time both are done (no lost wake-up); one
/// that returned `Ready` was woken at most once. Nothing is left pending or held.
#[test]
fn register_vs_fire() {
    model("register_vs_fire", |swapped| {
        let timer = std::sync::Arc::new(ManualTimer::new());
        let (count, waker) = counter();
        let mut sleep = timer.sleep(DEADLINE);
        let t = timer.clone();
        let (polled, ()) = race(
            swapped,
            move || {
                let r = poll(&mut sleep, &waker);
                (r, sleep)
            },
            move || t.advance_to(DEADLINE),
        );
        let (first, mut sleep) = polled;
        match first {
            Poll::Pending => assert_eq!(wakes(&count), 1, "a pending poll must be woken"),
            Poll::Ready(()) => assert!(wakes(&count) <= 1),
        }
        let (_, waker) = counter();
        assert_eq!(poll(&mut sleep, &waker), Poll::Ready(()));
        assert_eq!(timer.pending(), 0);
        drop(sleep);
        assert_eq!(timer.held(), 0);
        assert_eq!(
            std::sync::Arc::strong_count(&count),
            1,
            "the timer kept a waker"
        );
    });
}

/// A registered `Sleep` is dropped while `advance_to(DEADLINE)` fires it: the CAS decides,
/// the task is woken at most once, and the entry and waker are freed either way.
#[test]
fn fire_vs_drop() {
    model("fire_vs_drop", |swapped| {
        let timer = std::sync::Arc::new(ManualTimer::new());
        let (count, waker) = counter();
        let mut sleep = timer.sleep(DEADLINE);
        assert_eq!(poll(&mut sleep, &waker), Poll::Pending);
        drop(waker);
        assert_eq!(timer.pending(), 1);
        let t = timer.clone();
        race(swapped, move || drop(sleep), move || t.advance_to(DEADLINE));
        assert!(wakes(&count) <= 1);
        assert_eq!(timer.pending(), 0);
        assert_eq!(timer.held(), 0);
        assert_eq!(
            std::sync::Arc::strong_count(&count),
            1,
            "the timer kept a waker"
        );
    });
}

/// Register, then drop, on one thread, while `advance_to(DEADLINE)` runs on the other.
#[test]
fn register_vs_fire_vs_drop() {
    model("register_vs_fire_vs_drop", |swapped| {
        let timer = std::sync::Arc::new(ManualTimer::new());
        let (count, waker) = counter();
        let mut sleep = timer.sleep(DEADLINE);
        let t = timer.clone();
        race(
            swapped,
            move || {
                let _ = poll(&mut sleep, &waker);
                drop(sleep);
            },
            move || t.advance_to(DEADLINE),
        );
        assert!(wakes(&count) <= 1);
        assert_eq!(timer.pending(), 0);
        assert_eq!(timer.held(), 0);
        assert_eq!(
            std::sync::Arc::strong_count(&count),
            1,
            "the timer kept a waker"
        );
    });
}

// ---------------------------------------------------------------------------------------
// 3. Lost wake-ups at the driver (the timer thread's park protocol).

/// A driver thread runs the timer thread's loop at time `now`: a turn, then park unless the
/// turn saw a registration, where parking until a deadline later than `LIMIT` counts as
/// parking for good (a registration must unpark it). It stops once it knows of a deadline at
/// or before `LIMIT`. Each registrant polls a `Sleep` until its deadline once. `known` is
/// registered, and taken in by a turn at time 0, before any of this starts.
///
/// The driver is a spawned thread, not the main one: loom 0.7 trips an internal assertion
/// when a thread blocked in `join` receives an `unpark`, which a late registrant may send.
fn driver_vs_registrants(now: u64, known: Option<u64>, deadlines: &'static [u64]) {
    const LIMIT: u64 = DEADLINE;
    let timer = std::sync::Arc::new(ManualTimer::new());
    let mut old = known.map(|deadline| timer.sleep(deadline));
    if let Some(old) = &mut old {
        assert_eq!(poll(old, Waker::noop()), Poll::Pending);
        assert_eq!(timer.turn(0), known);
    }
    let (g, pass) = gate();
    let (t, gd) = (timer.clone(), g.clone());
    let driver = thread::spawn(move || {
        pass(&gd);
        loop {
            match t.turn(now) {
                None => continue,
                Some(next) if next <= LIMIT => break,
                Some(_) => thread::park(),
            }
        }
    });
    timer.set_driver(driver.thread().clone());
    let registrants: Vec<_> = deadlines
        .iter()
        .map(|&deadline| {
            let (t, g) = (timer.clone(), g.clone());
            thread::spawn(move || {
                pass(&g);
                let mut sleep = t.sleep(deadline);
                assert_eq!(poll(&mut sleep, Waker::noop()), Poll::Pending);
                sleep
            })
        })
        .collect();
    pass(&g);
    let sleeps: Vec<Sleep> = registrants.into_iter().map(|r| r.join().unwrap()).collect();
    driver.join().unwrap();
    assert_eq!(timer.pending(), deadlines.len());
    drop((sleeps, old));
    assert_eq!(timer.pending(), 0);
    // The cancelled entries leave the heap when their deadlines pass.
    timer.advance_to(LIMIT * 10);
    assert_eq!(timer.held(), 0);
}

/// One registrant against a driver that may already be parked with nothing pending.
#[test]
fn lost_wakeup_one_registrant() {
    check("lost_wakeup_one_registrant", &[false], |_| {
        driver_vs_registrants(0, None, &[DEADLINE])
    });
}

/// A registrant with a later deadline, then one that must move the driver's wake-up earlier.
#[test]
fn lost_wakeup_earlier_registration() {
    check("lost_wakeup_earlier_registration", &[false], |_| {
        driver_vs_registrants(0, None, &[2 * DEADLINE, DEADLINE])
    });
}

/// The driver fires the only known entry (deadline 5, which `earliest` still shows) while a
/// registrant arrives with a later deadline: the registrant sees no need to unpark, so the
/// driver's re-check of the inbox after publishing `earliest` is what must catch it.
#[test]
fn lost_wakeup_after_fire() {
    check("lost_wakeup_after_fire", &[false], |_| {
        driver_vs_registrants(5, Some(5), &[DEADLINE])
    });
}

// ---------------------------------------------------------------------------------------
// 4. The runtime driver (`src/timer/runtime.rs`): a task attached, the thread its backstop.

/// One thread's part in a model beside the timer thread: a registrant (returning its pending
/// `Sleep`), a detach, a task turn.
type Other = Box<dyn FnOnce(&ManualTimer) -> Option<Sleep> + Send>;

/// The timer thread's loop at time 0 beside an attached task driver that never runs (a
/// stalled runtime, a forgotten `Drive`): a turn, then park unless the turn saw a
/// registration, until it knows it will wake by `limit` by itself. If the backstop could lose
/// a registration, it would park for good and loom would report a deadlock. Each of
/// `others` runs once on a thread of its own beside it: a registrant (returning its pending
/// `Sleep`), a detach, a task turn.
///
/// The thread's turns run at time `now`. `known` are deadlines registered and taken in by a
/// thread turn at time 0 before any of this starts (so the thread's wake-up stands at the
/// earliest of them, plus the backstop if a task is attached). `attached`: whether a task
/// holds the claim (`backstop_vs` alone always attaches one).
fn backstop_vs(now: u64, known: Option<u64>, limit: u64, others: Vec<Other>) {
    thread_vs(true, now, known.as_slice(), limit, others);
}

fn thread_vs(attached: bool, now: u64, known: &[u64], limit: u64, others: Vec<Other>) {
    let timer = std::sync::Arc::new(ManualTimer::new());
    if attached {
        assert!(timer.attach());
    }
    let mut old: Vec<Sleep> = known
        .iter()
        .map(|&deadline| timer.sleep(deadline))
        .collect();
    for old in &mut old {
        assert_eq!(poll(old, Waker::noop()), Poll::Pending);
    }
    if let Some(&first) = known.iter().min() {
        let backstop = if attached { BACKSTOP } else { 0 };
        assert_eq!(timer.turn(0), Some(first + backstop));
    }
    // The thread parks on a condition variable, not with `thread::park` (see `set_unpark`).
    let parker = Arc::new((Mutex::new(false), Condvar::new()));
    let p = parker.clone();
    timer.set_unpark(move || {
        *p.0.lock().unwrap() = true;
        p.1.notify_one();
    });
    let (g, pass) = gate();
    let (t, gd, p) = (timer.clone(), g.clone(), parker.clone());
    let driver = thread::spawn(move || {
        pass(&gd);
        loop {
            match t.turn(now) {
                None => continue,
                Some(next) if next <= limit => break,
                Some(_) => {
                    let mut token = p.0.lock().unwrap();
                    while !*token {
                        token = p.1.wait(token).unwrap();
                    }
                    *token = false;
                }
            }
        }
    });
    let others: Vec<_> = others
        .into_iter()
        .map(|f| {
            let (t, g) = (timer.clone(), g.clone());
            thread::spawn(move || {
                pass(&g);
                f(&t)
            })
        })
        .collect();
    pass(&g);
    let sleeps: Vec<Option<Sleep>> = others.into_iter().map(|o| o.join().unwrap()).collect();
    driver.join().unwrap();
    drop((sleeps, old));
    if attached {
        timer.detach();
    }
    timer.advance_to(10 * BACKSTOP);
    assert_eq!(timer.pending(), 0);
    assert_eq!(timer.held(), 0);
}

/// A registration, leaving its `Sleep` pending.
fn register(timer: &ManualTimer) -> Option<Sleep> {
    let mut sleep = timer.sleep(DEADLINE);
    assert_eq!(poll(&mut sleep, Waker::noop()), Poll::Pending);
    Some(sleep)
}

/// A registrant that sees the task attached wakes the task and lowers the thread's backstop
/// wake-up; with the task stalled, the thread must still learn of it within a backstop.
/// (Fault tried: a registrant that only wakes the task when one is attached, skipping the
/// backstop's `fetch_min`: loom reports the deadlock.)
#[test]
fn backstop_registrant_vs_stalled_task() {
    check("backstop_registrant_vs_stalled_task", &[false], |_| {
        backstop_vs(0, None, DEADLINE + BACKSTOP, vec![Box::new(register)])
    });
}

/// A registrant races the task's detach: whether it saw the task attached or not, the thread
/// ends up knowing of its entry at its exact deadline, not a backstop later. (Fault tried: a
/// detach that does not unpark the thread: the thread, parked until the backstop, never
/// learns that it drives alone, and loom reports the deadlock.)
#[test]
fn backstop_registrant_vs_detach() {
    check("backstop_registrant_vs_detach", &[false], |_| {
        backstop_vs(
            0,
            None,
            DEADLINE,
            vec![
                Box::new(register),
                Box::new(|t: &ManualTimer| {
                    t.detach();
                    None
                }),
            ],
        )
    });
}

/// The task's last turn (then it stalls) races a registrant and the thread, which fires the
/// only known entry (deadline 5, which the thread's wake-up still shows) and so stores a later
/// wake-up: the registrant may read the old one and notify nobody, and the task may drain the
/// registration out of the inbox between the thread's turn and its re-check, so the thread's
/// re-check sees nothing. The task's turn must then lower the thread's backstop wake-up
/// itself. (Fault tried: a task turn that only stores its own wake-up: loom reports the
/// deadlock.)
#[test]
fn backstop_task_drains_before_the_thread_rechecks() {
    check(
        "backstop_task_drains_before_the_thread_rechecks",
        &[false],
        |_| {
            backstop_vs(
                5 + BACKSTOP,
                Some(5),
                DEADLINE + BACKSTOP,
                vec![
                    Box::new(register),
                    Box::new(|t: &ManualTimer| {
                        while t.task_turn(0).is_none() {}
                        None
                    }),
                ],
            )
        },
    );
}

/// Two task-role turns at once (the runtime sleep's wake runs one where the runtime fires it,
/// while the task's poll may run another: `runtime.rs`, `TurnOnWake`), beside a registrant
/// and the thread, as in the model above: whichever turn drains the registration, the
/// thread still learns of it within a backstop. (Fault tried: as above, task turns that only
/// store their own wake-up: loom reports the deadlock.)
#[test]
fn backstop_two_task_turns_at_once() {
    let task_turn = || -> Other {
        Box::new(|t: &ManualTimer| {
            while t.task_turn(0).is_none() {}
            None
        })
    };
    check("backstop_two_task_turns_at_once", &[false], move |_| {
        backstop_vs(
            5 + BACKSTOP,
            Some(5),
            DEADLINE + BACKSTOP,
            vec![Box::new(register), task_turn(), task_turn()],
        )
    });
}

/// A task turn with no task attached (a runtime sleep's wake after its `Drive` was dropped:
/// `runtime.rs`, `TurnOnWake`) races a registrant and the thread, which drives alone: its
/// turn at 5 fires the entry at 5 and stores its wake-up at the entry left, `DEADLINE + 1`.
/// The registrant (deadline `DEADLINE`) may read the old wake-up, 5, and unpark nobody, and
/// the stray turn may drain its entry between the thread's turn and its re-check; the thread
/// must still learn of it at `DEADLINE`, not a backstop later. (Fault tried: a task turn that
/// does not unpark the thread when it reads no task attached: loom reports the deadlock.)
#[test]
fn stray_task_turn_vs_registrant() {
    check("stray_task_turn_vs_registrant", &[false], |_| {
        thread_vs(
            false,
            5,
            &[5, DEADLINE + 1],
            DEADLINE,
            vec![
                Box::new(register),
                Box::new(|t: &ManualTimer| {
                    while t.task_turn(0).is_none() {}
                    None
                }),
            ],
        )
    });
}
