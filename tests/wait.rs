//! Waiting on fake time: `until_ready` and friends driven by hand on a `ManualClock`, whose
//! advances fire tollgate's test timer. Every instant, wake and refund is asserted exactly.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use tollgate::{DirectLimiter, Limiter, ManualClock, Quota, Timestamp, WaitError};

const MS: Duration = Duration::from_millis(1);
const NS: Duration = Duration::from_nanos(1);

/// A waker that counts its wakes.
#[derive(Default)]
struct Counter(AtomicUsize);

impl Wake for Counter {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// A future under test with its own counting waker.
struct Probe<F> {
    fut: Pin<Box<F>>,
    wakes: Arc<Counter>,
}

impl<F: Future> Probe<F> {
    fn new(fut: F) -> Self {
        Probe {
            fut: Box::pin(fut),
            wakes: Arc::default(),
        }
    }

    fn poll(&mut self) -> Poll<F::Output> {
        let waker = Waker::from(self.wakes.clone());
        self.fut.as_mut().poll(&mut Context::from_waker(&waker))
    }

    fn wakes(&self) -> usize {
        self.wakes.0.load(Ordering::SeqCst)
    }
}

/// 10 cells per second, burst 1: one cell every 100 ms.
fn limiter() -> (Limiter<str>, ManualClock) {
    let clock = ManualClock::new();
    let l = Limiter::builder(Quota::per_second(10).allow_burst(1))
        .clock(clock.clone())
        .build();
    (l, clock)
}

#[test]
fn waiters_are_admitted_fifo_each_at_its_instant_and_woken_once() {
    let (l, clock) = limiter();
    let mut waiters: Vec<_> = (0..5).map(|_| Probe::new(l.until_ready("k"))).collect();
    // The first poll of each reserves, in order: instants 0, 100, 200, 300, 400 ms.
    assert_eq!(waiters[0].poll(), Poll::Ready(Ok(())));
    for w in &mut waiters[1..] {
        assert!(w.poll().is_pending());
    }
    for (i, at) in [(1, 100), (2, 200), (3, 300), (4, 400)] {
        // Never early: one nanosecond before its instant nothing is woken.
        clock.set(Timestamp::from_nanos(at * 1_000_000 - 1));
        assert!(
            waiters[i..].iter().all(|w| w.wakes() == 0),
            "woken early at {at} ms"
        );
        assert!(waiters[i].poll().is_pending(), "waiter {i} early");
        clock.advance(NS);
        // Exactly this waiter is woken, once.
        let woken: Vec<usize> = waiters.iter().map(Probe::wakes).collect();
        let expected: Vec<usize> = (0..5).map(|j| usize::from(j >= 1 && j <= i)).collect();
        assert_eq!(woken, expected, "at {at} ms");
        assert_eq!(waiters[i].poll(), Poll::Ready(Ok(())));
    }
    assert_eq!(l.stats().admitted, 5);
}

#[test]
fn a_late_clock_admits_every_due_waiter_in_one_advance() {
    let (l, clock) = limiter();
    let mut waiters: Vec<_> = (0..4).map(|_| Probe::new(l.until_ready("k"))).collect();
    for w in &mut waiters {
        let _ = w.poll();
    }
    clock.advance(250 * MS);
    assert_eq!(
        waiters.iter().map(Probe::wakes).collect::<Vec<_>>(),
        vec![0, 1, 1, 0]
    );
    assert_eq!(waiters[1].poll(), Poll::Ready(Ok(())));
    assert_eq!(waiters[2].poll(), Poll::Ready(Ok(())));
    assert!(waiters[3].poll().is_pending());
}

#[test]
fn dropping_the_last_waiter_refunds_its_cell() {
    let (l, clock) = limiter();
    assert!(l.check("k").is_ok()); // uses the 0 ms cell
    let mut second = Probe::new(l.until_ready("k")); // 100 ms
    let mut third = Probe::new(l.until_ready("k")); // 200 ms
    assert!(second.poll().is_pending());
    assert!(third.poll().is_pending());
    drop(third); // the last reservation: refunded
    let mut again = Probe::new(l.until_ready("k"));
    assert!(again.poll().is_pending());
    clock.set(Timestamp::from_nanos(200_000_000 - 1));
    assert_eq!(again.wakes(), 0);
    clock.advance(NS);
    // It took the refunded 200 ms instant, not 300 ms.
    assert_eq!(again.wakes(), 1);
    assert_eq!(again.poll(), Poll::Ready(Ok(())));
    assert_eq!(second.poll(), Poll::Ready(Ok(())));
}

#[test]
fn dropping_a_waiter_others_depend_on_leaves_a_hole_never_an_extra_cell() {
    let (l, clock) = limiter();
    assert!(l.check("k").is_ok());
    let mut second = Probe::new(l.until_ready("k")); // 100 ms
    let mut third = Probe::new(l.until_ready("k")); // 200 ms
    assert!(second.poll().is_pending());
    assert!(third.poll().is_pending());
    drop(second); // not the last: no refund
    let mut fourth = Probe::new(l.until_ready("k"));
    assert!(fourth.poll().is_pending()); // 300 ms, not 100 ms
    clock.set(Timestamp::from_nanos(300_000_000 - 1));
    assert_eq!((third.wakes(), fourth.wakes()), (1, 0));
    clock.advance(NS);
    assert_eq!(fourth.wakes(), 1);
    // Nothing is admissible at 300 ms beyond what was reserved.
    assert!(l.check("k").is_err());
}

#[test]
fn dropping_an_unpolled_future_changes_nothing() {
    let (l, _clock) = limiter();
    drop(l.until_ready("k"));
    assert!(l.check("k").is_ok());
    assert!(l.check("k").is_err());
}

#[test]
fn bounded_waits_refuse_up_front_and_write_nothing() {
    let (l, clock) = limiter();
    assert!(l.check("k").is_ok());
    // The next cell is 100 ms out: a 99 ms bound refuses, reserving nothing.
    let mut w = Probe::new(l.until_ready_within("k", 99 * MS));
    assert_eq!(
        w.poll(),
        Poll::Ready(Err(WaitError::TooLong {
            earliest: Timestamp::from_nanos(100_000_000),
            wait: 100 * MS,
        }))
    );
    // A 100 ms bound accepts, and gets the instant nobody took.
    let mut ok = Probe::new(l.until_ready_within("k", 100 * MS));
    assert!(ok.poll().is_pending());
    // Deadlines on the limiter's clock work the same way: 200 ms is next.
    let late = l.until_ready_until("k", Timestamp::from_nanos(199_999_999));
    assert!(matches!(
        Probe::new(late).poll(),
        Poll::Ready(Err(WaitError::TooLong { .. }))
    ));
    let mut on_time = Probe::new(l.until_ready_until("k", Timestamp::from_nanos(200_000_000)));
    assert!(on_time.poll().is_pending());
    clock.advance(200 * MS);
    assert_eq!(ok.poll(), Poll::Ready(Ok(())));
    assert_eq!(on_time.poll(), Poll::Ready(Ok(())));
    assert_eq!(l.stats().denied, 2);
}

#[test]
fn n_beyond_the_burst_fails_at_once_and_n_cells_wait_together() {
    let clock = ManualClock::new();
    let l: Limiter<u32> = Limiter::builder(Quota::per_second(10).allow_burst(3))
        .clock(clock.clone())
        .build();
    assert_eq!(
        Probe::new(l.until_n_ready(&1, 4)).poll(),
        Poll::Ready(Err(WaitError::InsufficientCapacity {
            requested: 4,
            burst: 3
        }))
    );
    assert_eq!(
        Probe::new(l.until_n_ready(&1, 3)).poll(),
        Poll::Ready(Ok(()))
    );
    // Three more cells need the whole burst back: 300 ms.
    let mut w = Probe::new(l.until_n_ready(&1, 3));
    assert!(w.poll().is_pending());
    clock.advance(300 * MS - NS);
    assert_eq!(w.wakes(), 0);
    clock.advance(NS);
    assert_eq!(w.poll(), Poll::Ready(Ok(())));
    assert_eq!(
        Probe::new(l.until_n_ready(&1, 0)).poll(),
        Poll::Ready(Ok(()))
    );
}

#[test]
fn keys_wait_independently() {
    let (l, clock) = limiter();
    assert!(l.check("a").is_ok());
    let mut a = Probe::new(l.until_ready("a"));
    let mut b = Probe::new(l.until_ready("b"));
    assert!(a.poll().is_pending());
    assert_eq!(b.poll(), Poll::Ready(Ok(())));
    clock.advance(100 * MS);
    assert_eq!(a.poll(), Poll::Ready(Ok(())));
}

#[test]
fn throttle_runs_the_future_after_its_cell() {
    let (l, clock) = limiter();
    assert!(l.check("host").is_ok());
    let ran = Arc::new(AtomicUsize::new(0));
    let r = ran.clone();
    let mut t = Probe::new(l.throttle("host", async move {
        r.fetch_add(1, Ordering::SeqCst);
        7
    }));
    assert!(t.poll().is_pending());
    assert_eq!(ran.load(Ordering::SeqCst), 0);
    clock.advance(100 * MS);
    assert_eq!(t.poll(), Poll::Ready(Ok(7)));
    assert_eq!(ran.load(Ordering::SeqCst), 1);
}

#[test]
fn the_direct_limiter_waits_the_same_way() {
    let clock = ManualClock::new();
    let d = DirectLimiter::with_clock(Quota::per_second(10).allow_burst(1), clock.clone());
    assert_eq!(Probe::new(d.until_ready()).poll(), Poll::Ready(Ok(())));
    let mut w1 = Probe::new(d.until_ready());
    let mut w2 = Probe::new(d.until_ready());
    assert!(w1.poll().is_pending());
    assert!(w2.poll().is_pending());
    drop(w2); // last: refunded, so 200 ms is free again
    assert!(matches!(
        Probe::new(d.until_ready_within(199 * MS)).poll(),
        Poll::Ready(Err(WaitError::TooLong { .. }))
    ));
    assert!(
        Probe::new(d.until_ready_within(200 * MS))
            .poll()
            .is_pending()
    ); // then dropped
    clock.advance(100 * MS);
    assert_eq!((w1.wakes(), w1.poll()), (1, Poll::Ready(Ok(()))));
    assert!(matches!(
        Probe::new(d.until_n_ready(2)).poll(),
        Poll::Ready(Err(WaitError::InsufficientCapacity { .. }))
    ));
}

#[test]
fn pace_releases_one_item_per_cell() {
    use futures_core::Stream;
    let clock = ManualClock::new();
    let d = DirectLimiter::with_clock(Quota::per_second(10).allow_burst(1), clock.clone());
    let mut paced = Box::pin(d.pace(futures_util::stream::iter([1, 2, 3])));
    let wakes = Arc::new(Counter::default());
    let waker = Waker::from(wakes.clone());
    let mut cx = Context::from_waker(&waker);
    assert_eq!(paced.as_mut().poll_next(&mut cx), Poll::Ready(Some(1)));
    assert!(paced.as_mut().poll_next(&mut cx).is_pending());
    clock.advance(100 * MS - NS);
    assert!(paced.as_mut().poll_next(&mut cx).is_pending());
    clock.advance(NS);
    assert_eq!(paced.as_mut().poll_next(&mut cx), Poll::Ready(Some(2)));
    clock.advance(100 * MS);
    assert_eq!(paced.as_mut().poll_next(&mut cx), Poll::Ready(Some(3)));
    assert_eq!(paced.as_mut().poll_next(&mut cx), Poll::Ready(None));
}

#[test]
fn blocking_waits_park_until_the_clock_reaches_their_instant() {
    let (l, clock) = limiter();
    assert!(l.check("k").is_ok());
    let l2 = l.clone();
    let waiter = std::thread::spawn(move || l2.until_ready_blocking("k"));
    // Advance only once the other thread has reserved 100 ms: a zero-bound wait (which
    // reserves nothing) then reports the next free instant as 200 ms.
    loop {
        match l.until_ready_within("k", Duration::ZERO).fut_probe() {
            Some(wait) if wait == 200 * MS => break,
            _ => std::thread::yield_now(),
        }
    }
    clock.advance(100 * MS);
    assert_eq!(waiter.join().unwrap(), Ok(()));
}

/// Reads when a bounded wait would be admitted without reserving anything.
trait FutProbe {
    fn fut_probe(self) -> Option<Duration>;
}

impl<F: Future<Output = Result<(), WaitError>>> FutProbe for F {
    fn fut_probe(self) -> Option<Duration> {
        match Probe::new(self).poll() {
            Poll::Ready(Err(WaitError::TooLong { wait, .. })) => Some(wait),
            _ => None,
        }
    }
}

#[test]
fn futures_are_send_and_unpin() {
    fn check<T: Send + Sync + Unpin>(_: &T) {}
    let (l, _clock) = limiter();
    let d = DirectLimiter::new(Quota::per_second(1));
    check(&l.until_ready("k"));
    check(&d.until_ready());
    check(&tollgate::sleep(MS));
}

#[test]
fn a_refund_never_lands_on_a_reset_key_that_reached_the_same_state() {
    let (l, clock) = limiter();
    assert_eq!(Probe::new(l.until_ready("k")).poll(), Poll::Ready(Ok(()))); // 0 ms
    let mut w = Probe::new(l.until_ready("k")); // 100 ms: the state is now 200 ms
    assert!(w.poll().is_pending());
    assert!(l.reset("k"));
    // Checked back up to the very state the waiter wrote.
    assert!(l.check("k").is_ok()); // 0 ms
    clock.advance(100 * MS);
    assert!(l.check("k").is_ok()); // 100 ms: the state is 200 ms again
    drop(w); // its refund belongs to the forgotten incarnation: it must not apply
    assert!(
        l.check("k").is_err(),
        "a stale refund gave the reset key an extra cell"
    );

    // The same on a direct limiter.
    let clock = ManualClock::new();
    let d = DirectLimiter::with_clock(Quota::per_second(10).allow_burst(1), clock.clone());
    assert_eq!(Probe::new(d.until_ready()).poll(), Poll::Ready(Ok(())));
    let mut w = Probe::new(d.until_ready());
    assert!(w.poll().is_pending());
    d.reset();
    assert!(d.check().is_ok());
    clock.advance(100 * MS);
    assert!(d.check().is_ok());
    drop(w);
    assert!(
        d.check().is_err(),
        "a stale refund gave the reset limiter an extra cell"
    );
}
