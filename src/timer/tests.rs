//! The timer's behaviour on manual time (exact), and on the real timer (never early).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc as StdArc, Mutex as StdMutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use super::{Sleep, TimerCore, TimerRef, sleep, sleep_until};
use crate::ManualClock;
use crate::sync::Arc;

/// A waker that records which task it woke, and how often.
struct Probe {
    id: usize,
    log: StdArc<StdMutex<Vec<usize>>>,
}

impl Wake for Probe {
    fn wake(self: StdArc<Self>) {
        self.log.lock().unwrap().push(self.id);
    }
}

/// A waker that panics.
struct Bomb;

impl Wake for Bomb {
    fn wake(self: StdArc<Self>) {
        panic!("a waker that panics (expected in this test)");
    }
}

struct Fixture {
    timer: Arc<TimerCore>,
    log: StdArc<StdMutex<Vec<usize>>>,
}

impl Fixture {
    fn new() -> Fixture {
        Fixture {
            timer: Arc::new(TimerCore::manual()),
            log: StdArc::default(),
        }
    }

    fn sleep(&self, deadline: u64) -> Sleep {
        Sleep::new(TimerRef::Manual(Arc::clone(&self.timer)), deadline)
    }

    fn waker(&self, id: usize) -> Waker {
        Waker::from(StdArc::new(Probe {
            id,
            log: StdArc::clone(&self.log),
        }))
    }

    /// Polls `sleep` as task `id`.
    fn poll(&self, sleep: &mut Sleep, id: usize) -> Poll<()> {
        Pin::new(sleep).poll(&mut Context::from_waker(&self.waker(id)))
    }

    /// The tasks woken since the last call, in wake order.
    fn woken(&self) -> Vec<usize> {
        std::mem::take(&mut *self.log.lock().unwrap())
    }
}

#[test]
fn fires_in_deadline_then_registration_order_never_early() {
    let f = Fixture::new();
    let deadlines = [30, 10, 20, 10, 40];
    let mut sleeps: Vec<Sleep> = deadlines.iter().map(|&d| f.sleep(d)).collect();
    for (id, s) in sleeps.iter_mut().enumerate() {
        assert_eq!(f.poll(s, id), Poll::Pending);
    }
    assert_eq!(f.timer.pending(), 5);

    f.timer.advance_to(9);
    assert_eq!(f.woken(), Vec::<usize>::new(), "nothing is due at 9");
    assert_eq!(f.poll(&mut sleeps[1], 1), Poll::Pending);

    f.timer.advance_to(10);
    assert_eq!(
        f.woken(),
        [1, 3],
        "equal deadlines fire in registration order"
    );
    f.timer.advance_to(29);
    assert_eq!(f.woken(), [2]);
    f.timer.advance_to(100);
    assert_eq!(f.woken(), [0, 4]);
    assert_eq!(f.timer.pending(), 0);

    for (id, s) in sleeps.iter_mut().enumerate() {
        assert_eq!(f.poll(s, id), Poll::Ready(()));
        assert!(s.is_elapsed());
    }
}

#[test]
fn wakes_each_waiter_at_most_once() {
    let f = Fixture::new();
    let mut s = f.sleep(10);
    assert_eq!(f.poll(&mut s, 0), Poll::Pending);
    assert_eq!(
        f.poll(&mut s, 0),
        Poll::Pending,
        "a re-poll only re-registers"
    );
    f.timer.advance_to(10);
    f.timer.advance_to(20);
    assert_eq!(f.woken(), [0]);
    assert_eq!(f.poll(&mut s, 0), Poll::Ready(()));
    assert_eq!(f.poll(&mut s, 0), Poll::Ready(()), "stays complete");
    f.timer.advance_to(30);
    assert_eq!(f.woken(), Vec::<usize>::new());
}

#[test]
fn the_latest_waker_is_the_one_woken() {
    let f = Fixture::new();
    let mut s = f.sleep(10);
    assert_eq!(f.poll(&mut s, 1), Poll::Pending);
    assert_eq!(f.poll(&mut s, 2), Poll::Pending);
    f.timer.advance_to(10);
    assert_eq!(f.woken(), [2]);
}

#[test]
fn a_passed_deadline_completes_without_registering() {
    let f = Fixture::new();
    f.timer.advance_to(50);
    let mut s = f.sleep(50);
    assert!(s.is_elapsed());
    assert_eq!(f.poll(&mut s, 0), Poll::Ready(()));
    assert_eq!(f.timer.pending(), 0);
    assert_eq!(f.timer.held(), 0);
}

#[test]
fn time_never_goes_backwards() {
    let f = Fixture::new();
    f.timer.advance_to(100);
    f.timer.advance_to(50);
    assert_eq!(f.timer.now(), 100);
}

#[test]
fn a_dropped_sleep_is_never_woken_and_frees_its_waker() {
    let f = Fixture::new();
    let probe = StdArc::new(Probe {
        id: 7,
        log: StdArc::clone(&f.log),
    });
    let waker = Waker::from(StdArc::clone(&probe));
    let mut s = f.sleep(10);
    assert_eq!(
        Pin::new(&mut s).poll(&mut Context::from_waker(&waker)),
        Poll::Pending
    );
    assert_eq!(
        StdArc::strong_count(&probe),
        3,
        "ours, the Waker's, the entry's"
    );
    drop(s);
    assert_eq!(
        StdArc::strong_count(&probe),
        2,
        "the entry's clone is dropped at once"
    );
    assert_eq!(f.timer.pending(), 0);
    f.timer.advance_to(10);
    assert_eq!(f.woken(), Vec::<usize>::new());
    assert_eq!(f.timer.held(), 0);
}

#[test]
fn cancelled_entries_are_compacted_away() {
    let f = Fixture::new();
    let mut live = Vec::new();
    // Constant churn: every round registers 100 sleeps with far deadlines and drops 99.
    for round in 0..200 {
        let mut batch: Vec<Sleep> = (0..100).map(|i| f.sleep(1_000_000 + i)).collect();
        for s in &mut batch {
            assert_eq!(f.poll(s, round), Poll::Pending);
        }
        live.push(batch.pop().unwrap());
        drop(batch);
        let (pending, held) = (f.timer.pending(), f.timer.held());
        assert_eq!(pending, live.len());
        assert!(
            held <= 2 * pending + 100 + super::driver::COMPACT_MIN,
            "round {round}: {held} entries held for {pending} pending"
        );
    }
    f.timer.advance_to(u64::MAX);
    assert_eq!(f.woken().len(), live.len());
    assert_eq!(f.timer.held(), 0);
}

#[test]
fn a_panicking_waker_neither_escapes_nor_skips_the_batch() {
    let f = Fixture::new();
    let mut first = f.sleep(10);
    let mut bomb = f.sleep(10);
    let mut last = f.sleep(10);
    assert_eq!(f.poll(&mut first, 1), Poll::Pending);
    let bomb_waker = Waker::from(StdArc::new(Bomb));
    assert_eq!(
        Pin::new(&mut bomb).poll(&mut Context::from_waker(&bomb_waker)),
        Poll::Pending
    );
    assert_eq!(f.poll(&mut last, 3), Poll::Pending);
    f.timer.advance_to(10);
    assert_eq!(f.woken(), [1, 3]);
    assert_eq!(f.timer.pending(), 0);
}

#[test]
fn a_waker_may_reenter_the_timer() {
    struct Reenter {
        timer: Arc<TimerCore>,
        log: StdArc<StdMutex<Vec<usize>>>,
    }
    impl Wake for Reenter {
        fn wake(self: StdArc<Self>) {
            // Registering and advancing from inside a wake: the driver's lock is released.
            let mut s = Sleep::new(TimerRef::Manual(Arc::clone(&self.timer)), 1_000);
            let waker = Waker::from(StdArc::new(Probe {
                id: 9,
                log: StdArc::clone(&self.log),
            }));
            assert_eq!(
                Pin::new(&mut s).poll(&mut Context::from_waker(&waker)),
                Poll::Pending
            );
            std::mem::forget(s);
            self.timer.advance_to(1_000);
        }
    }
    let f = Fixture::new();
    let mut s = f.sleep(10);
    let waker = Waker::from(StdArc::new(Reenter {
        timer: Arc::clone(&f.timer),
        log: StdArc::clone(&f.log),
    }));
    assert_eq!(
        Pin::new(&mut s).poll(&mut Context::from_waker(&waker)),
        Poll::Pending
    );
    f.timer.advance_to(10);
    assert_eq!(f.woken(), [9]);
}

#[test]
fn a_forgotten_sleep_blocks_nothing() {
    let f = Fixture::new();
    let mut forgotten = f.sleep(10);
    assert_eq!(f.poll(&mut forgotten, 0), Poll::Pending);
    std::mem::forget(forgotten);
    let mut other = f.sleep(10);
    assert_eq!(f.poll(&mut other, 1), Poll::Pending);
    f.timer.advance_to(10);
    assert_eq!(f.woken(), [0, 1]);
    assert_eq!(f.poll(&mut other, 1), Poll::Ready(()));
}

#[test]
fn reset_moves_the_deadline_and_cancels_the_old_registration() {
    let f = Fixture::new();
    let mut s = f.sleep(10);
    assert_eq!(f.poll(&mut s, 0), Poll::Pending);
    s.reset_nanos(30);
    assert_eq!(f.timer.pending(), 0);
    assert_eq!(f.poll(&mut s, 0), Poll::Pending);
    f.timer.advance_to(20);
    assert_eq!(f.woken(), Vec::<usize>::new());
    f.timer.advance_to(30);
    assert_eq!(f.woken(), [0]);
    assert_eq!(f.poll(&mut s, 0), Poll::Ready(()));
    s.reset_nanos(40);
    assert!(!s.is_elapsed());
    assert_eq!(f.poll(&mut s, 0), Poll::Pending);
}

#[test]
fn pending_counts_registered_unfired_uncancelled() {
    let f = Fixture::new();
    let mut a = f.sleep(10);
    let mut b = f.sleep(20);
    let mut c = f.sleep(30);
    let d = f.sleep(40); // never polled: never registered
    for s in [&mut a, &mut b, &mut c] {
        assert_eq!(f.poll(s, 0), Poll::Pending);
    }
    assert_eq!(f.timer.pending(), 3);
    f.timer.advance_to(10);
    assert_eq!(f.timer.pending(), 2);
    drop(b);
    assert_eq!(f.timer.pending(), 1);
    drop(d);
    assert_eq!(f.timer.pending(), 1);
    f.timer.advance_to(30);
    assert_eq!(f.timer.pending(), 0);
    assert_eq!(f.timer.held(), 0);
}

#[test]
fn manual_clock_drives_its_timer() {
    let clock = ManualClock::new();
    let log = StdArc::default();
    let waker = Waker::from(StdArc::new(Probe {
        id: 1,
        log: StdArc::clone(&log),
    }));
    let mut s = Sleep::new(clock.timer(), 1_500);
    let mut cx = Context::from_waker(&waker);
    assert_eq!(Pin::new(&mut s).poll(&mut cx), Poll::Pending);
    clock.advance(Duration::from_nanos(1_000));
    assert!(log.lock().unwrap().is_empty());
    clock.set(crate::Timestamp::from_nanos(1_500));
    assert_eq!(*log.lock().unwrap(), [1]);
    assert_eq!(Pin::new(&mut s).poll(&mut cx), Poll::Ready(()));
}

#[test]
fn monotonic_clocks_share_the_global_origin() {
    use crate::{Clock, MonotonicClock};
    let a = MonotonicClock::new();
    let b = MonotonicClock::new();
    let t = Instant::now();
    assert_eq!(
        a.instant(crate::Timestamp::ZERO),
        b.instant(crate::Timestamp::ZERO)
    );
    assert_eq!(a.instant(crate::Timestamp::ZERO), crate::time::origin());
    let before = crate::time::nanos_since_origin(t);
    let now = a.now().as_nanos();
    assert!(now >= before);
    // The clock may lead the timer's `Instant`-based time by the origin's lead, never more
    // (`monotonic_now.rs`).
    assert!(super::thread::global().now() + crate::time::origins().lead >= now);
}

#[test]
fn sleep_is_send_sync_unpin() {
    fn check<T: Send + Sync + Unpin>() {}
    check::<Sleep>();
}

// Real time: these only assert "never early", never how late.

#[test]
fn real_sleeps_never_complete_early() {
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            std::thread::spawn(move || {
                for i in 0..20u64 {
                    let d = Duration::from_micros(50 + (t * 37 + i * 113) % 2_000);
                    let deadline = Instant::now() + d;
                    let s = sleep_until(deadline);
                    assert_eq!(s.deadline(), deadline);
                    futures_executor::block_on(s);
                    assert!(Instant::now() >= deadline, "woke early");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let start = Instant::now();
    futures_executor::block_on(sleep(Duration::from_millis(3)));
    assert!(start.elapsed() >= Duration::from_millis(3));
}

#[test]
fn real_timer_survives_a_panicking_waker() {
    let mut bomb = sleep(Duration::from_millis(1));
    let waker = Waker::from(StdArc::new(Bomb));
    if Pin::new(&mut bomb)
        .poll(&mut Context::from_waker(&waker))
        .is_pending()
    {
        std::mem::forget(bomb); // keep it registered until the timer fires it
    }
    std::thread::sleep(Duration::from_millis(5));
    let deadline = Instant::now() + Duration::from_millis(1);
    futures_executor::block_on(sleep_until(deadline));
    assert!(Instant::now() >= deadline);
}

#[test]
fn real_sleep_in_the_past_is_ready_at_once() {
    let s = sleep_until(Instant::now() - Duration::from_millis(1));
    assert!(s.is_elapsed());
    futures_executor::block_on(s);
    futures_executor::block_on(sleep(Duration::ZERO));
}

#[test]
fn dropping_real_sleeps_leaves_nothing_pending() {
    let far: Vec<Sleep> = (0..100)
        .map(|_| sleep(Duration::from_secs(3_600)))
        .collect();
    let waker = Waker::noop();
    let mut far = far;
    for s in &mut far {
        assert!(
            Pin::new(s)
                .poll(&mut Context::from_waker(waker))
                .is_pending()
        );
    }
    // Other tests share the global timer, so only our own entries can be reasoned about:
    // they were pending, and dropping them cancels every one.
    assert!(super::thread::global().pending() >= 100);
    drop(far);
    futures_executor::block_on(sleep(Duration::from_millis(1)));
}

#[test]
fn the_timer_thread_compacts_cancelled_entries() {
    let timer = super::thread::global();
    let mut far: Vec<Sleep> = (0..1_000)
        .map(|_| sleep(Duration::from_secs(3_600)))
        .collect();
    for s in &mut far {
        assert!(
            Pin::new(s)
                .poll(&mut Context::from_waker(Waker::noop()))
                .is_pending()
        );
    }
    // Move them into the heap, as the thread's next turn would, so only compaction (not the
    // drain of the inbox) can free them once they are cancelled.
    let held = timer.held();
    assert!(held >= 1_000);
    // Give the thread time to park until its next deadline, an hour away (if it has not,
    // the test passes without exercising the unpark, but never fails for it).
    std::thread::sleep(Duration::from_millis(20));
    drop(far);
    // The cancel that made most entries dead unparked the thread, parked until a far
    // deadline; it compacts on its own. (Other tests share the timer: allow for their few.)
    let start = Instant::now();
    while timer.held() > held - 500 {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the timer thread never compacted"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}
