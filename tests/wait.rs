//! Waiting on fake time: `until_ready` and friends driven by hand on a `ManualClock`, whose
//! advances fire tollgate's test timer. Every instant, wake and refund is asserted exactly.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use tollgate::{DirectLimiter, Error, FullPolicy, Limiter, ManualClock, Quota, Timestamp};

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
    // The late hand-over cost the key nothing: the next waiter keeps its 300 ms instant.
    clock.set(Timestamp::from_nanos(300_000_000 - 1));
    assert!(waiters[3].poll().is_pending());
    clock.advance(NS);
    assert_eq!(waiters[3].poll(), Poll::Ready(Ok(())));
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
fn dropping_the_head_passes_its_instant_to_the_next_waiter() {
    let (l, clock) = limiter();
    assert!(l.check("k").is_ok());
    let mut second = Probe::new(l.until_ready("k")); // the head: 100 ms
    let mut third = Probe::new(l.until_ready("k")); // queued behind it, holding nothing
    assert!(second.poll().is_pending());
    assert!(third.poll().is_pending());
    drop(second); // refunded, and the head's instant goes to the next waiter
    let mut fourth = Probe::new(l.until_ready("k"));
    assert!(fourth.poll().is_pending()); // 200 ms, not 300 ms
    clock.set(Timestamp::from_nanos(100_000_000 - 1));
    assert_eq!((third.wakes(), fourth.wakes()), (0, 0));
    clock.advance(NS);
    assert_eq!((third.wakes(), fourth.wakes()), (1, 0));
    assert_eq!(third.poll(), Poll::Ready(Ok(())));
    clock.set(Timestamp::from_nanos(200_000_000));
    assert_eq!(fourth.poll(), Poll::Ready(Ok(())));
    // Nothing is admissible at 200 ms beyond the three cells the rate allows.
    assert!(l.check("k").is_err());
    assert_eq!(l.stats().admitted, 3);
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
    let mut w = Probe::new(l.until_ready("k").within(99 * MS));
    assert_eq!(
        w.poll(),
        Poll::Ready(Err(Error::RateLimited {
            earliest: Timestamp::from_nanos(100_000_000),
            wait: 100 * MS,
            limit: 1,
        }))
    );
    // A 100 ms bound accepts, and gets the instant nobody took.
    let mut ok = Probe::new(l.until_ready("k").within(100 * MS));
    assert!(ok.poll().is_pending());
    // Deadlines on the limiter's clock work the same way: 200 ms is next.
    let late = l.until_ready("k").until(Timestamp::from_nanos(199_999_999));
    assert!(matches!(
        Probe::new(late).poll(),
        Poll::Ready(Err(Error::RateLimited { .. }))
    ));
    let mut on_time = Probe::new(l.until_ready("k").until(Timestamp::from_nanos(200_000_000)));
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
        Poll::Ready(Err(Error::InsufficientCapacity {
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
        Probe::new(d.until_ready().within(199 * MS)).poll(),
        Poll::Ready(Err(Error::RateLimited { .. }))
    ));
    assert!(
        Probe::new(d.until_ready().within(200 * MS))
            .poll()
            .is_pending()
    ); // then dropped
    clock.advance(100 * MS);
    assert_eq!((w1.wakes(), w1.poll()), (1, Poll::Ready(Ok(()))));
    assert!(matches!(
        Probe::new(d.until_n_ready(2)).poll(),
        Poll::Ready(Err(Error::InsufficientCapacity { .. }))
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
    let waiter = std::thread::spawn(move || l2.until_ready("k").wait());
    // Advance only once the other thread has reserved 100 ms: a zero-bound wait (which
    // reserves nothing) then reports the next free instant as 200 ms.
    loop {
        match l.until_ready("k").within(Duration::ZERO).fut_probe() {
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

impl<F: Future<Output = Result<(), Error>>> FutProbe for F {
    fn fut_probe(self) -> Option<Duration> {
        match Probe::new(self).poll() {
            Poll::Ready(Err(Error::RateLimited { wait, .. })) => Some(wait),
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
    check(&tollgate::timer::sleep(MS));
}

#[test]
fn a_refund_never_lands_on_a_reset_key_that_reached_the_same_state() {
    let (l, clock) = limiter();
    assert_eq!(Probe::new(l.until_ready("k")).poll(), Poll::Ready(Ok(()))); // 0 ms
    let mut w = Probe::new(l.until_ready("k")); // the head, at 100 ms: the state is 200 ms
    assert!(w.poll().is_pending());
    assert!(l.reset("k"));
    // Brought back to the very state the waiter wrote, before its instant.
    assert!(l.check("k").is_ok()); // 0 ms: the state is 100 ms
    l.penalize("k", 200 * MS).unwrap(); // the state is 200 ms again
    drop(w); // its refund belongs to the forgotten incarnation: it must not apply
    clock.set(Timestamp::from_nanos(100_000_000));
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
    d.penalize(200 * MS);
    drop(w);
    clock.set(Timestamp::from_nanos(100_000_000));
    assert!(
        d.check().is_err(),
        "a stale refund gave the reset limiter an extra cell"
    );
}

// ---------------------------------------------------------------------------------------
// Cancellation: a dropped wait costs nothing (src/wait/queue.rs). Five waiters queue on a key
// whose next cell is at 100 ms; whichever of them are dropped before their turn, the others
// are admitted at 100, 200, 300 ms... in FIFO order, as if the dropped ones had never asked.

/// Queues five waiters behind a check, on a keyed or (`direct`) a direct limiter, drops
/// those in `dropped`, then runs the clock to 1 s in 1 ms steps, returning each survivor's
/// admission instant (in ms).
fn admissions_after_dropping(dropped: &[usize], direct: bool) -> Vec<(usize, u64)> {
    let (l, clock) = limiter();
    let d = DirectLimiter::with_clock(Quota::per_second(10).allow_burst(1), clock.clone());
    type Wait<'a> = Pin<Box<dyn Future<Output = Result<(), Error>> + 'a>>;
    let wait = || -> Wait<'_> {
        if direct {
            Box::pin(d.until_ready())
        } else {
            Box::pin(l.until_ready("k"))
        }
    };
    let stats = || if direct { d.stats() } else { l.stats() };
    assert!(if direct {
        d.check().is_ok()
    } else {
        l.check("k").is_ok()
    });
    let mut waiters: Vec<_> = (0..5).map(|_| Some(Probe::new(wait()))).collect();
    for w in waiters.iter_mut().flatten() {
        assert!(w.poll().is_pending());
    }
    for &i in dropped {
        waiters[i] = None;
    }
    let mut admitted = Vec::new();
    for ms in 1..=1_000 {
        clock.set(Timestamp::from_nanos(ms * 1_000_000));
        for (i, slot) in waiters.iter_mut().enumerate() {
            if let Some(w) = slot {
                if w.wakes() > 0 {
                    assert_eq!(w.poll(), Poll::Ready(Ok(())), "waiter {i}");
                    assert_eq!(w.wakes(), 1, "waiter {i} woken twice");
                    admitted.push((i, ms));
                    *slot = None;
                }
            }
        }
    }
    assert_eq!(stats().admitted, 1 + admitted.len() as u64);
    // Nothing left behind: the key's cells are free again at 1 s.
    let free_now = if direct {
        d.until_ready().within(Duration::ZERO).fut_probe()
    } else {
        l.until_ready("k").within(Duration::ZERO).fut_probe()
    };
    assert_eq!(free_now, None);
    admitted
}

#[test]
fn dropping_the_first_a_middle_the_last_or_every_waiter_costs_nothing() {
    for dropped in [
        &[][..],
        &[0],
        &[2],
        &[4],
        &[0, 1],
        &[1, 3],
        &[0, 2, 4],
        &[0, 1, 2, 3, 4],
    ] {
        let survivors = (0..5).filter(|i| !dropped.contains(i));
        let expected: Vec<(usize, u64)> = survivors.zip((1..).map(|k| k * 100)).collect();
        for direct in [false, true] {
            assert_eq!(
                admissions_after_dropping(dropped, direct),
                expected,
                "dropped {dropped:?}, direct limiter: {direct}"
            );
        }
    }
}

/// A head dropped while other keys of its shard come and go (new clients taking the slots of
/// expired ones, as under any churn) still costs nothing: its refund is exact, and the next
/// waiter is admitted at the head's instant, 100 ms, not a cell later.
#[test]
fn a_dropped_head_costs_nothing_while_expired_keys_of_its_shard_are_forgotten() {
    let clock = ManualClock::new();
    let l: Limiter<str> = Limiter::builder(Quota::per_second(10).allow_burst(1))
        .shards(1)
        .capacity(4)
        .clock(clock.clone())
        .build();
    assert!(l.check("k").is_ok()); // the next cell at 100 ms
    for other in ["a", "b", "c"] {
        // Other clients, at a quota of their own: expired after 1 ms.
        assert!(l.check_n_with(other, 1, Quota::per_second(1_000)).is_ok());
    }
    let mut head = Probe::new(l.until_ready("k")); // reserves 100 ms
    let mut next = Probe::new(l.until_ready("k"));
    assert!(head.poll().is_pending() && next.poll().is_pending());
    clock.set(Timestamp::from_nanos(10_000_000));
    // A new client at the cap takes an expired client's slot.
    assert!(l.check_n_with("d", 1, Quota::per_second(1_000)).is_ok());
    assert!(l.stats().expired_reclaimed >= 1);
    assert_eq!(l.stats().forced_evictions, 0);
    drop(head);
    clock.set(Timestamp::from_nanos(100_000_000 - 1));
    assert!(next.poll().is_pending());
    clock.advance(NS);
    assert_eq!(
        next.wakes(),
        1,
        "the next waiter was not admitted at 100 ms"
    );
    assert_eq!(next.poll(), Poll::Ready(Ok(())));
}

#[test]
fn a_dropped_queue_leaves_no_lockout() {
    let (l, clock) = limiter();
    assert!(l.check("k").is_ok());
    let mut waiters: Vec<_> = (0..300).map(|_| Probe::new(l.until_ready("k"))).collect();
    for w in &mut waiters {
        assert!(w.poll().is_pending());
    }
    // A bounded wait sees the 300-deep queue ahead of it: 30 s.
    assert_eq!(
        l.until_ready("k").within(Duration::ZERO).fut_probe(),
        Some(Duration::from_secs(30) + 100 * MS)
    );
    clock.set(Timestamp::from_nanos(50_000_000));
    drop(waiters);
    // The key is exactly as if nobody had waited: its next cell is at 100 ms.
    assert_eq!(
        l.until_ready("k").within(Duration::ZERO).fut_probe(),
        Some(50 * MS)
    );
    clock.set(Timestamp::from_nanos(100_000_000));
    assert!(l.check("k").is_ok());
    assert_eq!(l.stats().admitted, 2);
}

#[test]
fn a_drop_during_a_hand_over_costs_nothing() {
    let (l, clock) = limiter();
    assert!(l.check("k").is_ok());
    let mut a = Probe::new(l.until_ready("k")); // head: 100 ms
    let mut b = Probe::new(l.until_ready("k")); // 200 ms once it is the head
    let mut c = Probe::new(l.until_ready("k")); // 300 ms
    for w in [&mut a, &mut b, &mut c] {
        assert!(w.poll().is_pending());
    }
    // The hand-over at 100 ms admits A and makes B the head (reserving 200 ms). A's drop
    // after its admission but before its poll changes nothing: its cell was used.
    clock.set(Timestamp::from_nanos(100_000_000));
    assert_eq!((a.wakes(), b.wakes()), (1, 0));
    drop(a);
    // B, the new head, is dropped before its instant: C gets 200 ms.
    drop(b);
    clock.set(Timestamp::from_nanos(200_000_000 - 1));
    assert_eq!(c.wakes(), 0);
    clock.advance(NS);
    assert_eq!(c.poll(), Poll::Ready(Ok(())));
    assert!(l.check("k").is_err());
    assert_eq!(l.stats().admitted, 3);
}

#[test]
fn a_forgotten_waiter_is_admitted_in_its_turn_and_stalls_nobody() {
    let (l, clock) = limiter();
    assert!(l.check("k").is_ok());
    let mut a = Probe::new(l.until_ready("k"));
    let mut forgotten = Probe::new(l.until_ready("k"));
    let mut c = Probe::new(l.until_ready("k"));
    for w in [&mut a, &mut forgotten, &mut c] {
        assert!(w.poll().is_pending());
    }
    std::mem::forget(forgotten);
    // A at 100 ms; the forgotten waiter takes its cell at 200 ms without being polled; C
    // follows at 300 ms. Nobody waits for the forgotten future.
    clock.set(Timestamp::from_nanos(100_000_000));
    assert_eq!(a.poll(), Poll::Ready(Ok(())));
    clock.set(Timestamp::from_nanos(300_000_000 - 1));
    assert!(c.poll().is_pending());
    clock.advance(NS);
    assert_eq!(c.poll(), Poll::Ready(Ok(())));
    assert_eq!(l.stats().admitted, 4);
}

#[test]
fn checks_cannot_take_the_cells_of_queued_waiters() {
    let (l, clock) = limiter();
    assert!(l.check("k").is_ok());
    let mut a = Probe::new(l.until_ready("k"));
    let mut b = Probe::new(l.until_ready("k"));
    assert!(a.poll().is_pending());
    assert!(b.poll().is_pending());
    for ms in [50, 100, 150, 199] {
        clock.set(Timestamp::from_nanos(ms * 1_000_000));
        // A's cell (100 ms) is reserved in the key's state; at 100 ms the hand-over gives
        // it to A and reserves B's (200 ms) at once.
        assert!(
            l.check("k").is_err(),
            "a check took a waiter's cell at {ms} ms"
        );
    }
    clock.set(Timestamp::from_nanos(200_000_000));
    assert_eq!(
        (a.poll(), b.poll()),
        (Poll::Ready(Ok(())), Poll::Ready(Ok(())))
    );
    // With the queue gone, checks share the key again: 300 ms is the next cell.
    assert!(l.check("k").is_err());
    clock.set(Timestamp::from_nanos(300_000_000));
    assert!(l.check("k").is_ok());
    // A new waiter on an idle key is admitted at once when a cell is free.
    clock.set(Timestamp::from_nanos(400_000_000));
    assert_eq!(Probe::new(l.until_ready("k")).poll(), Poll::Ready(Ok(())));
}

#[test]
fn a_bounded_wait_whose_prediction_is_upset_fails_by_its_bound_holding_nothing() {
    let (l, clock) = limiter();
    assert!(l.check("k").is_ok());
    let mut head = Probe::new(l.until_ready("k")); // 100 ms
    let mut unbounded = Probe::new(l.until_ready("k")); // predicted 200 ms
    let mut bounded = Probe::new(l.until_ready("k").within(350 * MS)); // predicted 300 ms
    for w in [&mut head, &mut unbounded, &mut bounded] {
        assert!(w.poll().is_pending());
    }
    // A penalty pushes the key's next admission out to 1 s: the head, which reserved 100 ms
    // before it, reserves again after it, and the others follow.
    l.penalize("k", Duration::from_secs(1)).unwrap();
    clock.set(Timestamp::from_nanos(100_000_000));
    assert_eq!(head.wakes(), 0);
    assert!(head.poll().is_pending(), "admitted inside the penalty");
    clock.set(Timestamp::from_nanos(350_000_000 - 1));
    assert_eq!(bounded.wakes(), 0);
    assert!(bounded.poll().is_pending());
    // At its bound it is still queued (behind a head sleeping until 1 s): it fails, with
    // the instant it would have had, and it held nothing.
    clock.advance(NS);
    assert_eq!(bounded.wakes(), 1);
    assert_eq!(
        bounded.poll(),
        Poll::Ready(Err(Error::RateLimited {
            earliest: Timestamp::from_nanos(1_200_000_000),
            wait: 850 * MS,
            limit: 1,
        }))
    );
    clock.set(Timestamp::from_nanos(1_000_000_000));
    assert_eq!(head.poll(), Poll::Ready(Ok(())));
    clock.set(Timestamp::from_nanos(1_100_000_000));
    assert_eq!(unbounded.poll(), Poll::Ready(Ok(())));
    // The next cell is 1.2 s: the bounded waiter's would-be cell, free.
    clock.set(Timestamp::from_nanos(1_200_000_000));
    assert!(l.check("k").is_ok());

    // The other way an upset prediction shows: the hand-over finds the bound cannot be met
    // when it is the bounded waiter's turn, and refuses it then, before its bound.
    let (l, clock) = limiter();
    assert!(l.check("k").is_ok());
    let mut head = Probe::new(l.until_ready("k")); // 100 ms
    let mut bounded = Probe::new(l.until_ready("k").within(250 * MS)); // predicted 200 ms
    assert!(head.poll().is_pending());
    assert!(bounded.poll().is_pending());
    // A check under a per-call quota of a larger burst takes a cell behind the head's
    // reservation: the bounded waiter's turn moves to 300 ms, past its bound.
    assert!(
        l.check_with("k", Quota::per_second(10).allow_burst(5))
            .is_ok()
    );
    clock.set(Timestamp::from_nanos(100_000_000));
    assert_eq!(bounded.wakes(), 1);
    assert!(matches!(
        bounded.poll(),
        Poll::Ready(Err(Error::RateLimited { .. }))
    ));
    assert_eq!(head.poll(), Poll::Ready(Ok(())));
}

#[test]
fn waiters_asking_for_different_n_keep_fifo_and_the_rate() {
    // Burst 3, one cell every 100 ms: tolerance 200 ms.
    let clock = ManualClock::new();
    let l: Limiter<str> = Limiter::builder(Quota::per_second(10).allow_burst(3))
        .clock(clock.clone())
        .build();
    assert!(l.check_n("k", 3).is_ok()); // the whole burst: the state is 300 ms
    let mut two = Probe::new(l.until_n_ready("k", 2)); // head: admitted at 200 ms
    let mut three = Probe::new(l.until_n_ready("k", 3)); // then 500 ms
    let mut one = Probe::new(l.until_ready("k")); // then 600 ms
    for w in [&mut two, &mut three, &mut one] {
        assert!(w.poll().is_pending());
    }
    // A single cell frees at 100 ms, but FIFO keeps it for the head (which needs two).
    clock.set(Timestamp::from_nanos(100_000_000));
    assert!(one.poll().is_pending());
    assert!(l.check("k").is_err());
    drop(three); // queued, holding nothing: the single-cell waiter moves up to 300 ms
    clock.set(Timestamp::from_nanos(200_000_000));
    assert_eq!(two.poll(), Poll::Ready(Ok(())));
    clock.set(Timestamp::from_nanos(300_000_000 - 1));
    assert!(one.poll().is_pending());
    clock.advance(NS);
    assert_eq!(one.poll(), Poll::Ready(Ok(())));
    assert_eq!(l.stats().admitted, 3);
}

#[test]
fn blocking_waits_cancel_nothing_and_queue_fifo_with_async_waiters() {
    let (l, clock) = limiter();
    assert!(l.check("k").is_ok());
    let mut first = Probe::new(l.until_ready("k")); // the head: 100 ms
    assert!(first.poll().is_pending());
    let l2 = l.clone();
    let blocked = std::thread::spawn(move || {
        let out = l2.until_ready("k").wait();
        (out, l2.now())
    });
    // Wait until the blocking waiter has queued (a zero-bound wait then predicts 300 ms).
    while l.until_ready("k").within(Duration::ZERO).fut_probe() != Some(300 * MS) {
        std::thread::yield_now();
    }
    clock.set(Timestamp::from_nanos(100_000_000));
    assert_eq!(first.poll(), Poll::Ready(Ok(())));
    clock.set(Timestamp::from_nanos(200_000_000));
    let (out, at) = blocked.join().unwrap();
    assert_eq!((out, at), (Ok(()), Timestamp::from_nanos(200_000_000)));
}

// ---------------------------------------------------------------------------------------
// Properties of cancellation, on random schedules.

mod properties {
    use super::*;
    use proptest::prelude::*;
    use std::collections::VecDeque;

    /// Emission interval of the property tests' quotas, in nanoseconds.
    const T: u64 = 100;

    fn quota(burst: u32) -> Quota {
        Quota::with_period(Duration::from_nanos(T)).allow_burst(burst)
    }

    /// A waiter in a schedule: it arrives at step `arrive` asking for `n` cells; if `leave`
    /// is `Some(k)`, then `k` steps later it is dropped (or forgotten, if `forget`) unless
    /// it was admitted by then.
    #[derive(Debug, Clone)]
    struct Spec {
        arrive: usize,
        n: u32,
        leave: Option<usize>,
        forget: bool,
    }

    /// Runs the schedule with the waiters `include` picks, returning each waiter's
    /// admission time (the clock step at which its future first completed), `None` if it was
    /// never seen admitted, and the ids of the waiters dropped while still pending.
    fn run(
        burst: u32,
        specs: &[Spec],
        steps: &[u64],
        include: impl Fn(usize) -> bool,
    ) -> (Vec<Option<u64>>, Vec<usize>, u64) {
        let clock = ManualClock::new();
        let l: Limiter<u32> = Limiter::builder(quota(burst)).clock(clock.clone()).build();
        let mut live: Vec<Option<Probe<_>>> = specs.iter().map(|_| None).collect();
        let mut admitted = vec![None; specs.len()];
        let mut dropped = Vec::new();
        let mut now = 0;
        for (k, &step) in steps.iter().enumerate() {
            now += step;
            clock.set(Timestamp::from_nanos(now));
            for (i, spec) in specs.iter().enumerate() {
                if spec.arrive == k && include(i) {
                    // Arriving is the first poll: that is when a waiter takes its place.
                    let mut w = Probe::new(l.until_n_ready(&7, spec.n));
                    if let Poll::Ready(out) = w.poll() {
                        assert_eq!(out, Ok(()), "waiter {i}");
                        admitted[i] = Some(now);
                        continue;
                    }
                    live[i] = Some(w);
                }
                let Some(w) = &mut live[i] else { continue };
                if spec.leave.is_none_or(|d| spec.arrive + d != k) {
                    continue;
                }
                if let Poll::Ready(out) = w.poll() {
                    assert_eq!(out, Ok(()), "waiter {i}");
                    admitted[i] = Some(now);
                } else if spec.forget {
                    std::mem::forget(live[i].take());
                } else {
                    dropped.push(i);
                }
                live[i] = None;
            }
            // Then see who is admitted at this step (a drop above may have admitted a waiter
            // polled before it in the loop).
            for (i, slot) in live.iter_mut().enumerate() {
                if let Some(w) = slot {
                    if let Poll::Ready(out) = w.poll() {
                        assert_eq!(out, Ok(()), "waiter {i}");
                        admitted[i] = Some(now);
                        *slot = None;
                    }
                }
            }
        }
        let probe = l.until_ready(&7).within(Duration::ZERO).fut_probe();
        (admitted, dropped, probe.map_or(0, |d| d.as_nanos() as u64))
    }

    fn schedule() -> impl Strategy<Value = (u32, Vec<Spec>, Vec<u64>)> {
        (1u32..=3).prop_flat_map(|burst| {
            let spec = (
                0usize..20,
                1..=burst,
                proptest::option::of(0usize..12),
                any::<bool>(),
            )
                .prop_map(|(arrive, n, leave, forget)| Spec {
                    arrive,
                    n,
                    leave,
                    forget,
                });
            (
                Just(burst),
                proptest::collection::vec(spec, 1..12),
                proptest::collection::vec(1u64..3 * T, 40),
            )
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        /// After any pattern of drops, what follows each drop is what would have happened had
        /// the dropped waiters never asked: every other waiter is admitted when it would have
        /// been without them, or, if that was earlier, as soon as the last dropped waiter
        /// ahead of it in the queue left (FIFO held it behind that waiter until then); and
        /// the key ends in the same state.
        #[test]
        fn dropped_waiters_change_nothing_for_the_others((burst, specs, steps) in schedule()) {
            let (with, dropped, next_with) = run(burst, &specs, &steps, |_| true);
            let (without, none, next_without) =
                run(burst, &specs, &steps, |i| !dropped.contains(&i));
            prop_assert!(none.is_empty());
            let time_at = |k: usize| steps[..=k].iter().sum::<u64>();
            for (j, spec) in specs.iter().enumerate() {
                if dropped.contains(&j) {
                    continue;
                }
                // Waiters arrive in (step, index) order.
                let held_until = dropped
                    .iter()
                    .filter(|&&i| (specs[i].arrive, i) < (spec.arrive, j))
                    .map(|&i| time_at(specs[i].arrive + specs[i].leave.unwrap()))
                    .max();
                let mut expected = without[j].map(|t| held_until.map_or(t, |h| t.max(h)));
                // A forgotten waiter is seen admitted only if it was admitted by the poll
                // before its future was forgotten, at its leave step. At that step waiters
                // are handled in index order, so a dropped waiter ahead of it with a higher
                // index that leaves at the same step releases it only after the forget.
                if let (true, Some(d)) = (spec.forget, spec.leave) {
                    let forgotten_at = spec.arrive + d;
                    let released_after_the_forget = dropped.iter().any(|&i| {
                        i > j
                            && (specs[i].arrive, i) < (spec.arrive, j)
                            && specs[i].arrive + specs[i].leave.unwrap() == forgotten_at
                    });
                    let t_forgotten = time_at(forgotten_at);
                    expected = expected.filter(|&t| {
                        t < t_forgotten || (t == t_forgotten && !released_after_the_forget)
                    });
                }
                prop_assert_eq!(with[j], expected, "waiter {}", j);
            }
            prop_assert_eq!(next_with, next_without);
        }
    }

    /// One event of a mixed schedule.
    #[derive(Debug, Clone)]
    enum Event {
        /// A new waiter for `n` cells, bounded to `bound` ns if `Some`.
        Wait { n: u32, bound: Option<u64> },
        /// A check of `n` cells.
        Check { n: u32 },
        /// Drop (or forget) the `i`-th waiter still pending, counted modulo their number.
        Leave { i: usize, forget: bool },
        /// Move the clock forward.
        Step(u64),
    }

    fn events() -> impl Strategy<Value = (u32, Vec<Event>)> {
        (1u32..=3).prop_flat_map(|burst| {
            let event = prop_oneof![
                3 => (1..=burst, proptest::option::of(0..10 * T))
                    .prop_map(|(n, bound)| Event::Wait { n, bound }),
                1 => (1..=burst).prop_map(|n| Event::Check { n }),
                1 => (any::<usize>(), any::<bool>())
                    .prop_map(|(i, forget)| Event::Leave { i, forget }),
                3 => (1..2 * T).prop_map(Event::Step),
            ];
            (Just(burst), proptest::collection::vec(event, 1..80))
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        /// Checks, bounded and unbounded waits, drops and forgets, in any mix: waiters are
        /// admitted in FIFO order, never before a cell is free, and in any window of length
        /// `W` at most `b + floor((W + S) / T)` cells are admitted, where `S` is the largest
        /// clock step (a waiter is seen admitted at the first step at or after its instant).
        #[test]
        fn waits_keep_fifo_and_the_window_guarantee((burst, events) in events()) {
            let clock = ManualClock::new();
            let l: Limiter<u32> = Limiter::builder(quota(burst)).clock(clock.clone()).build();
            let mut pending: Vec<(usize, u32, Probe<_>)> = Vec::new();
            let mut next_id = 0;
            let mut cells: Vec<(u64, u32)> = Vec::new(); // (time, cells) of each admission
            let mut waiter_times: Vec<(usize, u64)> = Vec::new();
            let mut now = 0;
            let mut max_step = 0;
            for event in events {
                match event {
                    Event::Wait { n, bound } => {
                        let fut = match bound {
                            Some(b) => l.until_n_ready(&7, n).within(Duration::from_nanos(b)),
                            None => l.until_n_ready(&7, n),
                        };
                        pending.push((next_id, n, Probe::new(fut)));
                        next_id += 1;
                    }
                    Event::Check { n } => {
                        if l.check_n(&7, n).is_ok() {
                            cells.push((now, n));
                        }
                    }
                    Event::Leave { i, forget } if !pending.is_empty() => {
                        let (_, _, w) = pending.remove(i % pending.len());
                        if forget {
                            std::mem::forget(w);
                        }
                    }
                    Event::Leave { .. } => {}
                    Event::Step(d) => {
                        now += d;
                        max_step = max_step.max(d);
                        clock.set(Timestamp::from_nanos(now));
                    }
                }
                let mut still = Vec::new();
                for (id, n, mut w) in pending.drain(..) {
                    match w.poll() {
                        Poll::Pending => still.push((id, n, w)),
                        Poll::Ready(Ok(())) => {
                            cells.push((now, n));
                            waiter_times.push((id, now));
                        }
                        Poll::Ready(Err(e)) => prop_assert!(e.is_rate_limited(), "{e:?}"),
                    }
                }
                pending = still;
            }
            // FIFO: admissions come in arrival order (ties: admitted at the same step).
            for pair in waiter_times.windows(2) {
                prop_assert!(pair[0].0 < pair[1].0, "out of order: {:?}", waiter_times);
            }
            // The window guarantee, give or take one clock step.
            for (i, &(start, _)) in cells.iter().enumerate() {
                for &(end, _) in &cells[i..] {
                    let w = end - start;
                    let admitted: u64 = cells
                        .iter()
                        .filter(|(t, _)| (start..=end).contains(t))
                        .map(|&(_, n)| u64::from(n))
                        .sum();
                    let bound = u64::from(burst) + (w + max_step) / T;
                    prop_assert!(
                        admitted <= bound,
                        "{admitted} cells in [{start}, {end}], bound {bound}: {cells:?}"
                    );
                }
            }
            // Every admission is counted.
            prop_assert!(l.stats().admitted >= cells.len() as u64);
        }
    }

    /// The waiting design of `src/design.rs` §1 and §4 written out plainly, for one key: its
    /// TAT, the chain instant, and a FIFO of waiters whose front alone holds a reservation.
    /// Nothing here is taken from the limiter's code; each rule cites the documented one.
    #[derive(Debug)]
    struct Model {
        burst: u32,
        tat: u64,
        /// Where the next head reserves (`queue.rs`, "The chain instant").
        chain: u64,
        /// Waiters in arrival order; the front is the head once it has reserved.
        queue: VecDeque<Queued>,
        head: Option<Reservation>,
        /// Every admission, checks included, in the order they happened.
        admissions: Vec<Admission>,
    }

    #[derive(Debug)]
    struct Queued {
        id: usize,
        n: u32,
        forgotten: bool,
    }

    /// The head's reservation: where it reserved, its instant, and the TAT it replaced.
    #[derive(Debug)]
    struct Reservation {
        at: u64,
        admit_at: u64,
        tat_before: u64,
    }

    #[derive(Debug, Clone, Copy)]
    struct Admission {
        /// The waiter's id; `None` for a check.
        id: Option<usize>,
        forgotten: bool,
        n: u32,
        /// GCRA's instant for the cells (§1: `admit_at`, or `now` for a check).
        instant: u64,
        /// The clock reading at which the limiter admits them.
        seen: u64,
    }

    impl Model {
        fn new(burst: u32) -> Model {
            Model {
                burst,
                tat: 0,
                chain: 0,
                queue: VecDeque::new(),
                head: None,
                admissions: Vec::new(),
            }
        }

        /// §1: `(admit_at, new tat)` for `n` cells asked at `at`.
        fn gcra(&self, at: u64, n: u32) -> (u64, u64) {
            let tau = u64::from(self.burst - 1) * T;
            let tat0 = self.tat.max(at);
            (
                (tat0 + u64::from(n - 1) * T).saturating_sub(tau),
                tat0 + u64::from(n) * T,
            )
        }

        /// A check never looks at the queue: plain GCRA on the key's state, which holds the
        /// head's reservation (§4, "Checks and waiters share a key").
        fn check(&mut self, now: u64, n: u32) -> bool {
            let (admit_at, tat) = self.gcra(now, n);
            if admit_at > now {
                return false;
            }
            self.tat = tat;
            self.admissions.push(Admission {
                id: None,
                forgotten: false,
                n,
                instant: now,
                seen: now,
            });
            true
        }

        /// A waiter's first poll: with no queue it takes a free cell at once, else a new queue
        /// starts at `now`; with a queue it joins the back (§4).
        fn wait(&mut self, now: u64, id: usize, n: u32) {
            if self.queue.is_empty() {
                self.chain = now;
            }
            self.queue.push_back(Queued {
                id,
                n,
                forgotten: false,
            });
            self.hand_over(now);
        }

        /// A pending waiter's future is dropped. Behind the head it held nothing; the head
        /// refunds exactly and the next waiter reserves where the head did ("Cancellation
        /// costs nothing").
        fn drop_waiter(&mut self, now: u64, id: usize) {
            let at = self
                .queue
                .iter()
                .position(|w| w.id == id)
                .expect("a queued waiter");
            self.queue.remove(at);
            if at == 0 {
                let head = self.head.take().expect("the front holds a reservation");
                self.tat = head.tat_before;
                self.chain = head.at;
                self.hand_over(now);
            }
        }

        /// A forgotten future stays queued and is admitted in its turn, unpolled.
        fn forget(&mut self, id: usize) {
            let waiter = self
                .queue
                .iter_mut()
                .find(|w| w.id == id)
                .expect("a queued waiter");
            waiter.forgotten = true;
        }

        /// The hand-over at `now`: admit the head if due, the next reserves at the chain
        /// instant (never after `now`), and so on while heads are due.
        fn hand_over(&mut self, now: u64) {
            while let Some(front) = self.queue.front() {
                let (id, n, forgotten) = (front.id, front.n, front.forgotten);
                if self.head.is_none() {
                    let at = self.chain.min(now);
                    let (admit_at, tat) = self.gcra(at, n);
                    self.head = Some(Reservation {
                        at,
                        admit_at,
                        tat_before: self.tat,
                    });
                    self.tat = tat;
                }
                let head = self.head.as_ref().expect("just reserved");
                if head.admit_at > now {
                    return;
                }
                // The instant a head is admitted at, which the next head chains from: its
                // `admit_at`, or when it reserved if that was later (`Reserved::instant`).
                self.chain = head.admit_at.max(head.at);
                self.admissions.push(Admission {
                    id: Some(id),
                    forgotten,
                    n,
                    instant: head.admit_at,
                    seen: now,
                });
                self.head = None;
                self.queue.pop_front();
            }
        }

        /// When the head is due, if there is one.
        fn next_instant(&self) -> Option<u64> {
            self.head.as_ref().map(|head| head.admit_at)
        }
    }

    /// `b + floor(W / T)`, with no slack, for every window `[start, end]` whose ends are
    /// admission times in `times` (`(time, cells)` pairs).
    fn assert_window(
        burst: u32,
        mut times: Vec<(u64, u32)>,
        what: &str,
    ) -> Result<(), TestCaseError> {
        times.sort_unstable();
        let mut prefix = vec![0u64];
        for &(_, n) in &times {
            prefix.push(prefix.last().unwrap() + u64::from(n));
        }
        for i in (0..times.len()).filter(|&i| i == 0 || times[i - 1].0 < times[i].0) {
            for j in
                (i..times.len()).filter(|&j| j + 1 == times.len() || times[j + 1].0 > times[j].0)
            {
                let (start, end) = (times[i].0, times[j].0);
                let cells = prefix[j + 1] - prefix[i];
                let bound = u64::from(burst) + (end - start) / T;
                prop_assert!(
                    cells <= bound,
                    "{what}: {cells} cells in [{start}, {end}], bound {bound}: {times:?}"
                );
            }
        }
        Ok(())
    }

    /// One operation of [`admissions_match_a_fifo_reference_model`]'s schedules.
    #[derive(Debug, Clone)]
    enum Op {
        /// A new unbounded waiter for `n` cells.
        Wait(u32),
        /// A check of `n` cells.
        Check(u32),
        /// Drop (or forget) the `i`-th waiter still pending, counted modulo their number.
        Leave { i: usize, forget: bool },
        /// Move the clock forward, stopping at every instant the model predicts.
        Step(u64),
        /// Move the clock forward at once: the hand-overs run late, at the end.
        Late(u64),
    }

    fn ops() -> impl Strategy<Value = (u32, Vec<Op>)> {
        (1u32..=3).prop_flat_map(|burst| {
            let op = prop_oneof![
                3 => (1..=burst).prop_map(Op::Wait),
                1 => (1..=burst).prop_map(Op::Check),
                2 => (any::<usize>(), any::<bool>())
                    .prop_map(|(i, forget)| Op::Leave { i, forget }),
                3 => (1..3 * T).prop_map(Op::Step),
                1 => (1..6 * T).prop_map(Op::Late),
            ];
            (Just(burst), proptest::collection::vec(op, 1..80))
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        /// Unbounded waits, checks, drops, forgets and clock moves against [`Model`], a plain
        /// statement of the documented design: every admission happens at exactly the clock
        /// reading the model gives it.
        ///
        /// How an instant is observed exactly: a `Step` moves the clock through `t - 1` and
        /// `t` for each instant `t` the model predicts, then to the step's end, and every
        /// pending future is polled at each reading (and after every operation). A waiter
        /// first seen ready at `t` after being pending at `t - 1` was admitted at `t` to the
        /// nanosecond (the manual timer fires exactly, never early). So each waiter must be
        /// seen at the model's reading of its admission: its GCRA instant when a `Step`
        /// reached it; the operation's time when that admitted it at once (an arrival on an
        /// idle key, or a smaller request that fits once the head before it is dropped); or
        /// the end of a `Late` move, the first reading at or after its instant, when the
        /// hand-over ran late (then the next heads reserve at the chain instant, which only
        /// matters after a late hand-over). Forgotten waiters cannot be polled: the admission
        /// count and the key's TAT, compared after every reading, see them admitted in their
        /// turn, and the others' readings see that they stalled no one. The window guarantee
        /// is checked on the model's admissions (equal to the limiter's), with no slack: on
        /// the GCRA instants always, and on the clock readings before the first `Late` move
        /// (a late hand-over releases what it owes together, as documented).
        #[test]
        fn admissions_match_a_fifo_reference_model((burst, ops) in ops()) {
            let clock = ManualClock::new();
            let l: Limiter<u32> = Limiter::builder(quota(burst)).clock(clock.clone()).build();
            let mut model = Model::new(burst);
            // Polled waiters not yet seen admitted, by id.
            let mut pending: Vec<(usize, Probe<_>)> = Vec::new();
            let mut seen: Vec<(usize, u64)> = Vec::new();
            let mut dropped: Vec<usize> = Vec::new();
            let mut reported = 0; // model admissions already compared
            let mut next_id = 0;
            let mut now = 0;
            // The clock reading after the first `Late` move.
            let mut first_late = None;
            // Polls every pending waiter at `now` and compares who completed, the admission
            // count and the key's state with the model's.
            let mut observe = |now: u64,
                               model: &Model,
                               pending: &mut Vec<(usize, Probe<_>)>,
                               seen: &mut Vec<(usize, u64)>|
             -> Result<(), TestCaseError> {
                let mut real = Vec::new();
                let mut i = 0;
                while i < pending.len() {
                    match pending[i].1.poll() {
                        Poll::Pending => {
                            let (id, w) = &pending[i];
                            prop_assert_eq!(w.wakes(), 0, "waiter {} woken early", id);
                            i += 1;
                        }
                        Poll::Ready(out) => {
                            let (id, w) = pending.remove(i);
                            prop_assert_eq!(out, Ok(()), "waiter {}", id);
                            prop_assert_eq!(w.wakes(), 1, "waiter {} wakes", id);
                            real.push(id);
                        }
                    }
                }
                // Those the model admitted since the last reading, but for forgotten ones and
                // those seen at once by their first poll.
                let mut expected: Vec<usize> = model.admissions[reported..]
                    .iter()
                    .filter(|a| !a.forgotten)
                    .filter_map(|a| a.id)
                    .filter(|id| !seen.iter().any(|&(s, _)| s == *id))
                    .collect();
                real.sort_unstable();
                expected.sort_unstable();
                prop_assert_eq!(&real, &expected, "admitted at {}: {:?}", now, model);
                seen.extend(real.iter().map(|&id| (id, now)));
                reported = model.admissions.len();
                let count = model.admissions.len() as u64;
                prop_assert_eq!(l.stats().admitted, count, "count at {}", now);
                // The key's state: a one-cell peek under burst 1 at the same interval is
                // refused exactly until the TAT.
                let retry = l.peek_with(&7, quota(1)).err().and_then(|e| e.retry_after());
                let tat = (model.tat > now).then(|| Duration::from_nanos(model.tat - now));
                prop_assert_eq!(retry, tat, "TAT at {}: {:?}", now, model);
                Ok(())
            };
            for op in ops {
                match op {
                    Op::Wait(n) => {
                        let id = next_id;
                        next_id += 1;
                        let mut w = Probe::new(l.until_n_ready(&7, n));
                        let first = w.poll();
                        model.wait(now, id, n);
                        let at_once = model.admissions.last().is_some_and(|a| a.id == Some(id));
                        match first {
                            Poll::Ready(out) => {
                                prop_assert_eq!(out, Ok(()), "waiter {}", id);
                                prop_assert!(at_once, "{} admitted at {}: {:?}", id, now, model);
                                seen.push((id, now));
                            }
                            Poll::Pending => {
                                prop_assert!(!at_once, "{} pending at {}: {:?}", id, now, model);
                                pending.push((id, w));
                            }
                        }
                    }
                    Op::Check(n) => {
                        let real = l.check_n(&7, n).is_ok();
                        let expected = model.check(now, n);
                        prop_assert_eq!(real, expected, "check of {} at {}: {:?}", n, now, model);
                    }
                    Op::Leave { i, forget } if !pending.is_empty() => {
                        let (id, w) = pending.remove(i % pending.len());
                        if forget {
                            std::mem::forget(w);
                            model.forget(id);
                        } else {
                            drop(w);
                            model.drop_waiter(now, id);
                            dropped.push(id);
                        }
                    }
                    Op::Leave { .. } => {}
                    Op::Step(d) => {
                        let end = now + d;
                        while let Some(t) = model.next_instant().filter(|&t| t <= end) {
                            if t - 1 > now {
                                clock.set(Timestamp::from_nanos(t - 1));
                                model.hand_over(t - 1);
                                observe(t - 1, &model, &mut pending, &mut seen)?;
                            }
                            clock.set(Timestamp::from_nanos(t));
                            model.hand_over(t);
                            now = t;
                            observe(now, &model, &mut pending, &mut seen)?;
                        }
                        now = end;
                        clock.set(Timestamp::from_nanos(now));
                        model.hand_over(now);
                    }
                    Op::Late(d) => {
                        now += d;
                        clock.set(Timestamp::from_nanos(now));
                        model.hand_over(now);
                        first_late.get_or_insert(now);
                    }
                }
                observe(now, &model, &mut pending, &mut seen)?;
            }
            // Every waiter seen admitted was admitted by the model at that clock reading. No
            // dropped waiter was admitted: not by the model, and the limiter's count and TAT
            // agreed with the model's after every reading.
            for &(id, at) in &seen {
                let a = model.admissions.iter().find(|a| a.id == Some(id));
                prop_assert_eq!(a.map(|a| a.seen), Some(at), "waiter {}", id);
            }
            for id in &dropped {
                let admitted = model.admissions.iter().any(|a| a.id == Some(*id));
                prop_assert!(!admitted, "dropped {} admitted", id);
            }
            // FIFO: waiters are admitted in arrival order.
            let order: Vec<usize> = model.admissions.iter().filter_map(|a| a.id).collect();
            prop_assert!(order.windows(2).all(|p| p[0] < p[1]), "out of order: {:?}", order);
            let instants = model.admissions.iter().map(|a| (a.instant, a.n)).collect();
            assert_window(burst, instants, "GCRA instants")?;
            // Until a late hand-over releases the waiters it owes together, the clock
            // readings keep the guarantee too.
            let readings = model
                .admissions
                .iter()
                .filter(|a| first_late.is_none_or(|late| a.seen < late))
                .map(|a| (a.seen, a.n))
                .collect();
            assert_window(burst, readings, "clock readings")?;
        }
    }
}

#[test]
fn queues_free_their_memory_when_they_empty() {
    let (l, _clock) = limiter();
    let keys: Vec<String> = (0..10_000).map(|k| format!("key-{k}")).collect();
    for key in &keys {
        assert!(l.check(key.as_str()).is_ok());
    }
    let before = l.stats().bytes;
    // Two waiters on each of 10,000 keys: a head and one queued behind it.
    let mut waiters: Vec<_> = keys
        .iter()
        .flat_map(|key| {
            [
                Probe::new(l.until_ready(key.as_str())),
                Probe::new(l.until_ready(key.as_str())),
            ]
        })
        .collect();
    for w in &mut waiters {
        assert!(w.poll().is_pending());
    }
    let queued = l.stats().bytes;
    assert!(
        queued > before + 10_000 * 2 * 32,
        "20,000 waiters held in {} bytes?",
        queued - before
    );
    drop(waiters);
    let after = l.stats().bytes;
    // Every queue was removed, and the shards' maps shrank back.
    assert!(
        after <= before + 4_096,
        "{after} bytes after, {before} before"
    );
}

/// A million keys with a waiter each: the waiting memory is bounded per waiter (a queue, its
/// node and its map entry: about 450 bytes here), and all of it is given back when they go.
#[test]
fn a_million_keys_with_waiters_hold_bounded_memory_and_give_it_back() {
    const KEYS: u64 = 1_000_000;
    let clock = ManualClock::new();
    let l: Limiter<u64> = Limiter::builder(Quota::per_second(1).allow_burst(1))
        .clock(clock.clone())
        .build();
    for key in 0..KEYS {
        assert!(l.check(&key).is_ok()); // each key's burst spent: the waits below queue
    }
    let before = l.stats().bytes;
    let mut waiters: Vec<_> = (0..KEYS)
        .map(|key| Probe::new(l.until_ready(&key)))
        .collect();
    for w in &mut waiters {
        assert!(w.poll().is_pending());
    }
    let per_waiter = (l.stats().bytes - before) / KEYS as usize;
    assert!(
        (100..=512).contains(&per_waiter),
        "{per_waiter} bytes per waiter"
    );
    drop(waiters);
    assert_eq!(
        l.stats().bytes,
        before,
        "every queue freed, every map shrunk back"
    );
}

/// A deadline already past is a wait of zero: a free cell is admitted, as a check would be,
/// whether or not other keys have queues (the lock-free first try and the queued path
/// agree); a key without a free cell is refused, holding nothing.
#[test]
fn a_deadline_already_past_admits_a_free_cell_whatever_else_waits() {
    let (l, clock) = limiter();
    clock.set(Timestamp::from_nanos(1_000_000_000));
    let past = Timestamp::from_nanos(500_000_000);
    assert_eq!(
        Probe::new(l.until_ready("a").until(past)).poll(),
        Poll::Ready(Ok(()))
    );

    // Queues on 256 keys: every wait shard has one, so no wait takes the lock-free path.
    let keys: Vec<String> = (0..256).map(|k| format!("queued-{k}")).collect();
    let mut queued: Vec<_> = keys
        .iter()
        .map(|key| {
            assert!(l.check(key.as_str()).is_ok());
            Probe::new(l.until_ready(key.as_str()))
        })
        .collect();
    for w in &mut queued {
        assert!(w.poll().is_pending());
    }
    assert_eq!(
        Probe::new(l.until_ready("b").until(past)).poll(),
        Poll::Ready(Ok(()))
    );
    let refused = Probe::new(l.until_ready("b").until(past)).poll();
    assert!(
        matches!(refused, Poll::Ready(Err(Error::RateLimited { .. }))),
        "{refused:?}"
    );
    // The refusal held nothing: "b"'s next cell is where the admission left it.
    clock.set(Timestamp::from_nanos(1_100_000_000));
    assert!(l.check("b").is_ok());
}

/// A reset with waiters queued forgets the key's history, the head's reservation with it: a
/// check may take the fresh burst at once. The head keeps its place and is admitted at its
/// instant (its cell was the old incarnation's); the waiters behind it reserve in the new
/// incarnation, after the check, in order, none early.
#[test]
fn a_reset_with_waiters_queued_frees_the_burst_and_keeps_the_queue_on_time() {
    let (l, clock) = limiter();
    assert!(l.check("k").is_ok());
    let mut waiters: Vec<_> = (0..3).map(|_| Probe::new(l.until_ready("k"))).collect();
    for w in &mut waiters {
        assert!(w.poll().is_pending());
    }
    assert!(l.reset("k"));
    assert!(l.check("k").is_ok(), "the reset gave the burst back");
    assert!(l.check("k").is_err());
    // The new incarnation: the check at 0, waiter 1 at 100 ms, waiter 2 at 200 ms.
    assert_eq!(
        run_clock(&clock, &mut waiters, 500),
        [(0, 100, Ok(())), (1, 100, Ok(())), (2, 200, Ok(()))]
    );
}

// ---------------------------------------------------------------------------------------
// A full table under waiters: a key evicted while its waiters queue, and a hand-over that
// finds no room for its key.

/// One shard of 16 keys at 10 cells per second, burst 1, under `policy`: key 0 has taken
/// its cell at 0 ms, keys 1 to 15 fill the table with states that last a minute, so that key
/// 0 is the closest to expiry.
fn full_table(policy: FullPolicy) -> (Limiter<u64>, ManualClock) {
    let clock = ManualClock::new();
    let l = Limiter::builder(Quota::per_second(10).allow_burst(1))
        .shards(1)
        .capacity(16)
        .full_policy(policy)
        .clock(clock.clone())
        .build();
    assert!(l.check(&0).is_ok());
    for k in 1..16 {
        assert!(l.check_with(&k, Quota::per_minute(1)).is_ok());
    }
    assert_eq!(l.stats().keys_held, 16);
    (l, clock)
}

/// Runs the clock from 1 ms to `until_ms` in 1 ms steps, polling each waiter once it is
/// woken; returns each waiter's result and the millisecond it came at, in the order they came.
fn run_clock<T: std::fmt::Debug, F: Future<Output = T>>(
    clock: &ManualClock,
    waiters: &mut [Probe<F>],
    until_ms: u64,
) -> Vec<(usize, u64, T)> {
    let mut done = Vec::new();
    for ms in 1..=until_ms {
        clock.set(Timestamp::from_nanos(ms * 1_000_000));
        for (i, w) in waiters.iter_mut().enumerate() {
            if w.wakes() > 0 && !done.iter().any(|&(j, _, _)| j == i) {
                match w.poll() {
                    Poll::Ready(out) => done.push((i, ms, out)),
                    Poll::Pending => panic!("waiter {i} woken at {ms} ms but not ready"),
                }
            }
        }
    }
    for (i, w) in waiters.iter().enumerate() {
        assert_eq!(w.wakes(), 1, "waiter {i} woken once");
    }
    done
}

#[test]
fn a_key_evicted_while_its_waiters_queue_is_forgotten_as_by_a_reset() {
    let (l, clock) = full_table(FullPolicy::EvictClosestToExpiry);
    let mut waiters: Vec<_> = (0..3).map(|_| Probe::new(l.until_ready(&0))).collect();
    for w in &mut waiters {
        assert!(w.poll().is_pending());
    }
    // The head's reservation makes key 0's state 200 ms: still the closest to expiry. A new
    // key evicts it.
    assert!(l.check(&16).is_ok());
    assert_eq!(l.stats().forced_evictions, 1);
    // The head keeps the instant it reserved (100 ms). The next waiter reserves in a key with
    // no history, which has its burst: it is admitted at once, at 100 ms, as a check on the
    // forgotten key would be; the last follows one interval later. The eviction's price is
    // the one of any eviction (one burst), and the queue keeps moving, each waiter woken once.
    let admitted = run_clock(&clock, &mut waiters, 250);
    assert_eq!(
        admitted,
        [(0, 100, Ok(())), (1, 100, Ok(())), (2, 200, Ok(()))]
    );
    // The hand-over stored key 0 again (evicting key 16, now the closest to expiry), and its
    // state counts the waiters' cells: the next is at 300 ms.
    assert_eq!(l.stats().forced_evictions, 2);
    assert!(l.check(&0).is_err());
    clock.set(Timestamp::from_nanos(300_000_000));
    assert!(l.check(&0).is_ok());
}

#[test]
fn a_hand_over_that_finds_no_room_for_its_key_fails_its_waiters_with_table_full() {
    let (l, clock) = full_table(FullPolicy::RefuseNewKeys);
    let full = Error::TableFull { capacity: 16 };
    // A new key cannot wait: it is refused at its first poll, and counted once.
    let refused = l.stats().refused_keys;
    assert_eq!(
        Probe::new(l.until_ready(&99)).poll(),
        Poll::Ready(Err(full))
    );
    assert_eq!(l.stats().refused_keys, refused + 1);
    let mut waiters: Vec<_> = (0..3).map(|_| Probe::new(l.until_ready(&0))).collect();
    for w in &mut waiters {
        assert!(w.poll().is_pending());
    }
    // Key 0 is forgotten and its slot taken by another key: the table is full again.
    assert!(l.reset(&0));
    assert!(l.check(&16).is_ok());
    // The head keeps its reservation (100 ms); the waiters behind it need key 0 stored, and
    // there is no room: they fail with the error, at the hand-over that reaches them, woken
    // once, instead of waiting for room that may never come.
    let done = run_clock(&clock, &mut waiters, 500);
    assert_eq!(
        done,
        [(0, 100, Ok(())), (1, 100, Err(full)), (2, 100, Err(full))]
    );
    // Room made (key 16 has expired by now: `reset` forgets it, and says it held nothing
    // live), the key waits again.
    assert!(!l.reset(&16));
    assert_eq!(Probe::new(l.until_ready(&0)).poll(), Poll::Ready(Ok(())));
}

/// A waiting future's `Debug` shows its limiter's quota, not the limiter's insides: the
/// table's shards and stripes (tens of kilobytes a future), nor the identity hasher's
/// secret seed, which a log line must not carry.
#[test]
fn a_waiting_futures_debug_is_short_and_leaves_the_seed_out() {
    let limiter = Limiter::keyed(Quota::per_second(5));
    let direct = DirectLimiter::new(Quota::per_second(5));
    let texts = [
        format!("{:?}", limiter.until_ready("k")),
        format!("{:?}", limiter.throttle("k", async {})),
        format!("{:?}", direct.until_ready()),
        format!("{:?}", direct.throttle(async {})),
    ];
    for text in texts {
        assert!(text.len() < 2_000, "{} bytes: {text}", text.len());
        assert!(!text.to_lowercase().contains("seed"), "{text}");
        assert!(text.contains("quota"), "{text}");
        // Neither the key's hashes (made with that seed) nor the quota's seqlock.
        for inside in ["route", "fp:", "SeqCount", "writer"] {
            assert!(!text.contains(inside), "{inside}: {text}");
        }
    }
}

/// A clock of the caller's, set by hand: waits on it sleep on tollgate's real-time timer.
#[derive(Debug, Clone, Default)]
struct HandClock(Arc<std::sync::atomic::AtomicU64>);

impl tollgate::Clock for HandClock {
    fn now(&self) -> Timestamp {
        Timestamp::from_nanos(self.0.load(Ordering::SeqCst))
    }
}

/// Waits until `probe` has been woken more than `wakes` times (by tollgate's real-time
/// timer), failing after 10 s.
fn woken_after<F: Future>(probe: &Probe<F>, wakes: usize) {
    let start = std::time::Instant::now();
    while probe.wakes() <= wakes {
        assert!(start.elapsed() < Duration::from_secs(10), "never woken");
        std::thread::sleep(MS);
    }
}

/// A bounded waiter behind the head, on a clock that runs slower than real time (here: not
/// at all): its bound is on the limiter's clock, so the timer's deadline passing in real time
/// does not end it (it was refused there, with its turn inside the bound); its turn comes
/// on the limiter's clock, within the bound, and it is admitted.
#[test]
fn a_bound_is_kept_on_the_limiters_clock_even_when_it_runs_slow() {
    let clock = HandClock::default();
    let l: Limiter<str> = Limiter::builder(Quota::per_second(100).allow_burst(1))
        .clock(clock.clone())
        .build();
    assert!(l.check("k").is_ok()); // the next cell at 10 ms
    let mut head = Probe::new(l.until_ready("k")); // reserves 10 ms
    let mut bounded = Probe::new(l.until_ready("k").within(25 * MS)); // its turn: 20 ms
    assert!(head.poll().is_pending() && bounded.poll().is_pending());
    // 25 ms of real time pass, none on the limiter's clock.
    woken_after(&bounded, 0);
    assert!(
        bounded.poll().is_pending(),
        "ended by real time, not its clock"
    );
    assert!(head.poll().is_pending());
    // The limiter's clock reaches its turn, inside the bound.
    clock.0.store(20_000_000, Ordering::SeqCst);
    let admitted = loop {
        let wakes = bounded.wakes();
        match bounded.poll() {
            Poll::Ready(result) => break result,
            Poll::Pending => woken_after(&bounded, wakes),
        }
    };
    assert_eq!(admitted, Ok(()));
    assert_eq!(head.poll(), Poll::Ready(Ok(())));
}

/// `penalize` pushes the next admission at least its delay out, the head of the queue's
/// too: the head, whose cell was reserved before, reserves again after the penalty (and a
/// bounded one whose bound that passes fails). A penalty that moves nothing (the state is
/// later already) leaves the head its instant. Keyed and direct.
#[test]
fn a_penalty_holds_back_the_waiter_at_the_head_of_the_queue() {
    let s = |ms: u64| Timestamp::from_nanos(ms * 1_000_000);
    for direct in [false, true] {
        let clock = ManualClock::new();
        let quota = Quota::per_second(1).allow_burst(1);
        let l: Limiter<str> = Limiter::builder(quota).clock(clock.clone()).build();
        let d = DirectLimiter::with_clock(quota, clock.clone());
        type Wait<'a> = Pin<Box<dyn Future<Output = Result<(), Error>> + 'a>>;
        let wait = |max: Option<Duration>| -> Wait<'_> {
            match (direct, max) {
                (false, None) => Box::pin(l.until_ready("k")),
                (false, Some(max)) => Box::pin(l.until_ready("k").within(max)),
                (true, None) => Box::pin(d.until_ready()),
                (true, Some(max)) => Box::pin(d.until_ready().within(max)),
            }
        };
        let penalize = |delay: Duration| {
            if direct {
                d.penalize(delay);
            } else {
                l.penalize("k", delay).unwrap();
            }
        };
        assert_eq!(Probe::new(wait(None)).poll(), Poll::Ready(Ok(()))); // at 0
        let mut head = Probe::new(wait(None)); // its cell at 1 s
        assert!(head.poll().is_pending());
        clock.set(s(500));
        penalize(Duration::from_millis(100)); // the state (2 s) is later: nothing moves
        penalize(Duration::from_secs(30));
        clock.set(s(1_000));
        assert_eq!(head.wakes(), 0, "direct {direct}");
        assert!(
            head.poll().is_pending(),
            "admitted inside the penalty (direct {direct})"
        );
        clock.set(s(30_500 - 1));
        assert!(head.poll().is_pending());
        clock.set(s(30_500));
        assert_eq!(head.poll(), Poll::Ready(Ok(())), "direct {direct}");
        // A bounded head whose bound the penalty passes fails, with its new instant.
        let mut bounded = Probe::new(wait(Some(Duration::from_secs(5)))); // its cell at 31.5 s
        assert!(bounded.poll().is_pending());
        penalize(Duration::from_secs(60));
        assert_eq!(bounded.wakes(), 1, "direct {direct}");
        assert_eq!(
            bounded.poll(),
            Poll::Ready(Err(Error::RateLimited {
                earliest: s(90_500),
                wait: Duration::from_secs(60),
                limit: 1,
            })),
            "direct {direct}"
        );
    }
}

/// A bounded waiter behind the head whose clock stands a hair short of its bound, past its
/// real-time deadline: its poll sleeps again (at least a little real time) and returns,
/// rather than spinning on sleeps of the nanoseconds left, each elapsed at once.
#[test]
fn a_bound_a_hair_away_on_a_standing_clock_never_spins() {
    let ms = |n: u64| n * 1_000_000;
    let clock = HandClock::default();
    clock.0.store(ms(1_000), Ordering::SeqCst);
    // Leaked, so that a poll that spins can be left on its own thread when the test fails.
    let l: &'static Limiter<u64> = Box::leak(Box::new(
        Limiter::builder(Quota::with_period(100 * MS).allow_burst(3))
            .clock(clock.clone())
            .build(),
    ));
    assert!(l.check_n(&0, 3).is_ok()); // the next cell at +100 ms, the burst back at +300
    let mut head = Probe::new(l.until_n_ready(&0, 3)); // at +300 ms
    assert!(head.poll().is_pending());
    clock.0.store(ms(1_250), Ordering::SeqCst);
    // Its turn at +400 ms, its bound at +401 ms (151 ms of real time from here).
    let mut bounded = Probe::new(l.until_ready(&0).within(151 * MS));
    assert!(bounded.poll().is_pending());
    clock.0.store(ms(1_401) - 1, Ordering::SeqCst); // stands 1 ns short of the bound
    woken_after(&bounded, 0); // the real-time deadline passed
    let (done, polled) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        loop {
            let wakes = bounded.wakes();
            if let Poll::Ready(result) = bounded.poll() {
                done.send(result).unwrap();
                return;
            }
            // Woken by the hand-over that admits it: its turn has come on its clock.
            woken_after(&bounded, wakes);
        }
    });
    let result = polled
        .recv_timeout(Duration::from_secs(20))
        .expect("the poll spun");
    assert_eq!(result, Ok(()));
    assert_eq!(head.poll(), Poll::Ready(Ok(())));
}

/// Runs `f` on a thread of its own and returns what it returns, failing the test if it has
/// not returned within 20 s (a wait that spins), rather than hanging the suite.
fn returns<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (done, returned) = std::sync::mpsc::channel();
    std::thread::spawn(move || done.send(f()).unwrap());
    returned
        .recv_timeout(Duration::from_secs(20))
        .unwrap_or_else(|_| panic!("{what} never returned"))
}

/// Past 2^59 ns a limiter's time stands still (`Clock`), while a `ManualClock` goes on to
/// `u64::MAX`: a wait for an instant after that point is refused at once if it has a bound
/// and pends, asleep, if it has none. Both used to spin for ever in their first poll (the
/// timer's time had passed the instant, the limiter's never would), holding the key's queue
/// lock, on a keyed and a direct limiter alike.
#[test]
fn waits_past_the_end_of_time_are_refused_or_sleep_but_never_spin() {
    returns("a wait past the end of time", || {
        let clock = ManualClock::new();
        let l: Limiter<&str> = Limiter::builder(Quota::per_second(1))
            .clock(clock.clone())
            .build();
        let d = DirectLimiter::with_clock(Quota::per_second(1), clock.clone());
        clock.advance(Duration::MAX);
        assert!(l.check(&"k").is_ok() && d.check().is_ok()); // the next cell: never
        let mut bounded = Probe::new(l.until_ready(&"k").within(Duration::from_secs(5)));
        let Poll::Ready(Err(Error::RateLimited { wait, .. })) = bounded.poll() else {
            panic!("a bounded wait past the end of time was not refused");
        };
        assert_eq!(wait, Duration::from_secs(1));
        let mut forever = Probe::new(l.until_ready(&"k"));
        assert!(forever.poll().is_pending());
        clock.advance(Duration::from_secs(10)); // runs no hand-over that could admit it
        assert!(forever.poll().is_pending());
        let mut bounded = Probe::new(d.until_ready().within(Duration::from_secs(5)));
        assert!(matches!(
            bounded.poll(),
            Poll::Ready(Err(Error::RateLimited { .. }))
        ));
        let mut forever = Probe::new(d.until_ready());
        assert!(forever.poll().is_pending());
        // A bound of `Duration::MAX` is no bound, at the end of time as before it.
        let mut unbounded = Probe::new(d.until_ready().within(Duration::MAX));
        assert!(unbounded.poll().is_pending());
    });
}

/// The longest window a quota allows (2^59 ns) puts a waiter's instant one nanosecond past
/// the limiter's last one: the clock's advance to it, which hands over on the advancing
/// thread, returns, and the waiter sleeps on (it used to spin inside `advance`).
#[test]
fn an_advance_to_the_end_of_time_returns() {
    returns("ManualClock::advance", || {
        let clock = ManualClock::new();
        let l: Limiter<u8> = Limiter::builder(Quota::with_period(Duration::from_nanos(1 << 59)))
            .clock(clock.clone())
            .build();
        clock.advance(NS);
        assert!(l.check(&0).is_ok());
        let mut head = Probe::new(l.until_ready(&0)); // at 2^59 + 1 ns
        assert!(head.poll().is_pending());
        clock.advance(Duration::from_nanos(1 << 59));
        assert!(head.poll().is_pending());
        assert_eq!(l.count_live_keys(), 1); // on the limiter's saturated time too
    });
}
