//! The per-key concurrency limit ([`InFlight`]): FIFO, no barging, cancellation, forgetting,
//! idle keys reclaimed, and the limit under threads. Futures are polled by hand with counting
//! wakers, so every test is deterministic; nothing reads a clock.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, Wake, Waker};

use tollgate::{Acquire, InFlight, Permit};

/// A waker that counts its wakes.
#[derive(Default)]
struct Count(AtomicUsize);

impl Wake for Count {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// A future under test with its own counting waker.
struct Polled<'a> {
    fut: Acquire<'a>,
    wakes: Arc<Count>,
}

impl<'a> Polled<'a> {
    /// Makes the future and polls it once: it must queue.
    fn queued(fut: Acquire<'a>) -> Polled<'a> {
        let mut p = Polled {
            fut,
            wakes: Arc::default(),
        };
        assert!(p.poll().is_none(), "expected to queue");
        p
    }

    fn poll(&mut self) -> Option<Permit> {
        let waker = Waker::from(Arc::clone(&self.wakes));
        match Pin::new(&mut self.fut).poll(&mut Context::from_waker(&waker)) {
            Poll::Ready(permit) => Some(permit),
            Poll::Pending => None,
        }
    }

    fn wakes(&self) -> usize {
        self.wakes.0.load(Ordering::SeqCst)
    }
}

fn ready(fut: Acquire<'_>) -> Permit {
    Polled {
        fut,
        wakes: Arc::default(),
    }
    .poll()
    .expect("expected a permit at the first poll")
}

#[test]
fn waiters_are_granted_in_fifo_order() {
    let conc = InFlight::new(1);
    let mut held = ready(conc.acquire("k"));
    let mut waiters: Vec<Polled<'_>> = (0..5).map(|_| Polled::queued(conc.acquire("k"))).collect();
    assert_eq!(conc.waiting("k"), 5);
    for i in 0..5 {
        drop(held);
        // Exactly waiter i is woken, once, and granted; the others still wait.
        for (j, w) in waiters.iter_mut().enumerate().skip(i) {
            assert_eq!(
                w.wakes(),
                usize::from(j == i),
                "waiter {j} after release {i}"
            );
        }
        held = waiters[i].poll().expect("the head is granted");
        for w in &mut waiters[i + 1..] {
            assert!(w.poll().is_none());
        }
        assert_eq!(conc.in_flight("k"), 1);
        assert_eq!(conc.waiting("k"), 4 - i);
    }
    drop(held);
    drop(waiters);
    assert_eq!(conc.keys(), 0);
}

#[test]
fn no_barging_while_waiters_queue() {
    let conc = InFlight::new(2);
    let a = conc.try_acquire("k").unwrap();
    let _b = conc.try_acquire("k").unwrap();
    let mut w = Polled::queued(conc.acquire("k"));
    assert!(conc.try_acquire("k").is_none());
    drop(a); // goes to `w`, not to the callers below
    assert!(conc.try_acquire("k").is_none());
    let mut late = Polled::queued(conc.acquire("k"));
    assert_eq!(w.wakes(), 1);
    let _w = w.poll().unwrap();
    assert!(late.poll().is_none());
    // Another key is not held back.
    assert!(conc.try_acquire("other").is_some());
}

#[test]
fn a_low_per_call_limit_at_the_head_holds_back_those_behind_it() {
    let conc = InFlight::new(3);
    let a = conc.try_acquire("k").unwrap();
    let mut strict = Polled::queued(conc.acquire_with("k", 1));
    let mut loose = Polled::queued(conc.acquire("k")); // FIFO: behind `strict`
    assert!(conc.try_acquire("k").is_none());
    drop(a);
    let s = strict.poll().unwrap();
    let _l = loose.poll().unwrap(); // 1 out < 3
    drop(s);
    // Cancelling a strict head lets the loose waiter behind it through at once.
    let _c = conc.try_acquire("k").unwrap(); // 2 out
    let strict = Polled::queued(conc.acquire_with("k", 2));
    let mut loose = Polled::queued(conc.acquire("k"));
    drop(strict);
    assert_eq!(loose.wakes(), 1);
    assert!(loose.poll().is_some());
}

/// Queues three waiters behind a held permit, drops waiter `cancelled`, and checks that the
/// other two get the permit in order and that nothing is left behind.
fn cancel_one_of_three(cancelled: usize) {
    let conc = InFlight::new(1);
    let held = ready(conc.acquire(&7u32));
    let mut waiters: Vec<Option<Polled<'_>>> = (0..3)
        .map(|_| Some(Polled::queued(conc.acquire(&7))))
        .collect();
    waiters[cancelled] = None;
    assert_eq!(conc.waiting(&7), 2);
    let mut permit = held;
    for w in waiters.iter_mut().flatten() {
        drop(permit);
        assert_eq!(w.wakes(), 1);
        permit = w.poll().unwrap();
    }
    assert_eq!(conc.in_flight(&7), 1);
    drop(permit);
    assert_eq!(conc.keys(), 0);
}

#[test]
fn cancelling_the_head_passes_its_turn_on() {
    cancel_one_of_three(0);
}

#[test]
fn cancelling_a_middle_waiter_passes_its_turn_on() {
    cancel_one_of_three(1);
}

#[test]
fn cancelling_the_last_waiter_passes_its_turn_on() {
    cancel_one_of_three(2);
}

#[test]
fn cancelling_every_waiter_reclaims_the_key() {
    let conc = InFlight::new(1);
    let held = conc.try_acquire("k").unwrap();
    // Enough to compact the cancelled nodes while they are still linked.
    let mut waiters: Vec<Option<Polled<'_>>> = (0..100)
        .map(|_| Some(Polled::queued(conc.acquire("k"))))
        .collect();
    for i in (0..100).filter(|i| i % 3 != 0) {
        waiters[i] = None;
    }
    assert_eq!(conc.waiting("k"), 34);
    drop(waiters);
    assert_eq!(conc.waiting("k"), 0);
    drop(held);
    assert_eq!(conc.keys(), 0);
}

#[test]
fn a_granted_but_unpolled_future_passes_its_permit_on() {
    let conc = InFlight::new(1);
    let held = ready(conc.acquire("k"));
    let a = Polled::queued(conc.acquire("k"));
    let mut b = Polled::queued(conc.acquire("k"));
    drop(held);
    assert_eq!(a.wakes(), 1); // granted, never polled again
    assert_eq!(conc.in_flight("k"), 1);
    assert_eq!(b.wakes(), 0);
    drop(a);
    assert_eq!(b.wakes(), 1);
    let p = b.poll().unwrap();
    assert_eq!(conc.in_flight("k"), 1);
    drop(p);
    assert_eq!(conc.keys(), 0);
}

#[test]
fn a_forgotten_waiter_costs_exactly_one_permit() {
    let conc = InFlight::new(2);
    let p1 = conc.try_acquire("k").unwrap();
    let p2 = conc.try_acquire("k").unwrap();
    std::mem::forget(Polled::queued(conc.acquire("k")));
    let mut b = Polled::queued(conc.acquire("k"));
    drop(p1); // granted to the forgotten waiter: the queue moves without its poll
    assert_eq!(conc.waiting("k"), 1);
    assert_eq!(b.wakes(), 0);
    drop(p2); // the next permit reaches `b`
    let pb = b.poll().unwrap();
    assert_eq!(conc.in_flight("k"), 2); // `b` and the forgotten one
    drop(pb);
    // From now on the key has one permit, and its state stays.
    let one = conc.try_acquire("k").unwrap();
    assert!(conc.try_acquire("k").is_none());
    drop(one);
    assert_eq!(conc.in_flight("k"), 1);
    assert_eq!(conc.keys(), 1);
}

#[test]
fn idle_keys_are_reclaimed() {
    let conc = InFlight::new(2);
    let permits: Vec<Permit> = (0..10_000u64)
        .map(|k| conc.try_acquire(&k).unwrap())
        .collect();
    assert_eq!(conc.keys(), 10_000);
    drop(permits);
    assert_eq!(conc.keys(), 0);
    // With waiters, the key stays until the last permit is back.
    let held = conc.try_acquire(&1).unwrap();
    let held2 = conc.try_acquire(&1).unwrap();
    let mut w = Polled::queued(conc.acquire(&1));
    drop(held);
    let p = w.poll().unwrap();
    drop((held2, p));
    assert_eq!(conc.keys(), 0);
}

#[test]
fn a_limit_of_one_and_a_large_limit() {
    let one = InFlight::new(1);
    let p = one.try_acquire("k").unwrap();
    assert!(one.try_acquire("k").is_none());
    drop(p);
    assert!(one.try_acquire("k").is_some());

    let large = InFlight::new(100_000);
    let permits: Vec<Permit> = (0..100_000)
        .map(|_| large.try_acquire("k").unwrap())
        .collect();
    assert!(large.try_acquire("k").is_none());
    assert_eq!(large.in_flight("k"), 100_000);
    drop(permits);
    assert_eq!(large.keys(), 0);

    let unlimited = InFlight::new(usize::MAX);
    let _p = unlimited.try_acquire("k").unwrap();
    assert!(unlimited.try_acquire("k").is_some());
}

#[test]
#[should_panic(expected = "admits nothing")]
fn a_limit_of_zero_panics() {
    let _ = InFlight::<str>::new(0);
}

#[test]
#[should_panic(expected = "admits nothing")]
fn a_per_call_limit_of_zero_panics() {
    let conc = InFlight::new(1);
    drop(conc.acquire_with("k", 0));
}

#[test]
#[should_panic(expected = "polled after")]
fn polling_after_the_permit_panics() {
    let conc = InFlight::new(1);
    let mut fut = Polled {
        fut: conc.acquire("k"),
        wakes: Arc::default(),
    };
    let _permit = fut.poll().unwrap();
    let _ = fut.poll();
}

#[test]
fn borrowed_keys_share_the_limit() {
    let conc: InFlight<String> = InFlight::new(1);
    let _p = conc.try_acquire(&"host".to_owned()).unwrap();
    assert!(conc.borrowed::<str>().try_acquire("host").is_none());
    assert_eq!(conc.borrowed::<str>().in_flight("host"), 1);
}

#[test]
fn threads_hammering_one_key_never_exceed_the_limit() {
    const N: usize = 3;
    const THREADS: usize = 8;
    const ROUNDS: usize = 2_000;
    let conc = InFlight::new(N);
    let now = AtomicUsize::new(0);
    let max = AtomicUsize::new(0);
    let held = |_permit: Permit| {
        let inside = now.fetch_add(1, Ordering::SeqCst) + 1;
        max.fetch_max(inside, Ordering::SeqCst);
        std::thread::yield_now();
        now.fetch_sub(1, Ordering::SeqCst);
    };
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (conc, held) = (&conc, &held);
            s.spawn(move || {
                for i in 0..ROUNDS {
                    if (t + i) % 4 == 0 {
                        if let Some(p) = conc.try_acquire("hot") {
                            held(p);
                        }
                    } else {
                        held(conc.acquire("hot").wait());
                    }
                }
            });
        }
    });
    let max = max.load(Ordering::SeqCst);
    assert!((1..=N).contains(&max), "max in flight {max}");
    assert_eq!(conc.keys(), 0);
}

#[test]
fn tasks_on_a_runtime_never_exceed_the_limit() {
    const N: usize = 2;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    let conc = InFlight::new(N);
    let now = Arc::new(AtomicUsize::new(0));
    let max = Arc::new(AtomicUsize::new(0));
    rt.block_on(async {
        let tasks: Vec<_> = (0..64)
            .map(|_| {
                let (conc, now, max) = (conc.clone(), now.clone(), max.clone());
                tokio::spawn(async move {
                    for _ in 0..50 {
                        let _p = conc.acquire(&1u8).await;
                        let inside = now.fetch_add(1, Ordering::SeqCst) + 1;
                        max.fetch_max(inside, Ordering::SeqCst);
                        tokio::task::yield_now().await;
                        now.fetch_sub(1, Ordering::SeqCst);
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
    });
    assert!(max.load(Ordering::SeqCst) <= N);
    assert_eq!(conc.keys(), 0);
}

/// A waker that calls back into the limiter's table: woken under a shard lock, it would
/// deadlock (std's mutex is not reentrant): with the wakes moved under the lock, the test
/// below hangs.
struct Reentrant(InFlight<str>, AtomicUsize);

impl Wake for Reentrant {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        let _ = self.0.in_flight("k");
        let _ = self.0.try_acquire("k");
        self.1.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn wakers_run_after_the_lock_is_released() {
    let conc: InFlight<str> = InFlight::new(1);
    let held = conc.try_acquire("k").unwrap();
    let reentrant = Arc::new(Reentrant(conc.clone(), AtomicUsize::new(0)));
    let waker = Waker::from(Arc::clone(&reentrant));
    let mut fut = conc.acquire("k");
    assert!(
        Pin::new(&mut fut)
            .poll(&mut Context::from_waker(&waker))
            .is_pending()
    );
    drop(held); // grants `fut` and wakes it: the wake takes the shard lock again
    assert_eq!(reentrant.1.load(Ordering::SeqCst), 1);
    drop(fut); // granted, unpolled: the permit goes back
    assert_eq!(conc.keys(), 0);
}

#[test]
fn timeouts_racing_grants_lose_no_permit() {
    const N: usize = 2;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap();
    let conc = InFlight::new(N);
    let now = Arc::new(AtomicUsize::new(0));
    let max = Arc::new(AtomicUsize::new(0));
    rt.block_on(async {
        let tasks: Vec<_> = (0..32u64)
            .map(|t| {
                let (conc, now, max) = (conc.clone(), now.clone(), max.clone());
                tokio::spawn(async move {
                    for i in 0..40u64 {
                        // Timeouts of 0 to 199 µs: many expire while queued, some just as
                        // the permit is granted.
                        let limit = std::time::Duration::from_micros((t * 37 + i * 11) % 200);
                        if let Ok(_p) = tokio::time::timeout(limit, conc.acquire("k")).await {
                            let inside = now.fetch_add(1, Ordering::SeqCst) + 1;
                            max.fetch_max(inside, Ordering::SeqCst);
                            tokio::task::yield_now().await;
                            now.fetch_sub(1, Ordering::SeqCst);
                        }
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
    });
    assert!(max.load(Ordering::SeqCst) <= N);
    // Every permit came back: the key is idle and all N are free.
    assert_eq!(conc.keys(), 0);
    let all: Vec<Permit> = (0..N).map(|_| conc.try_acquire("k").unwrap()).collect();
    assert!(conc.try_acquire("k").is_none());
    drop(all);
}

#[test]
fn auto_traits() {
    fn send_sync<T: Send + Sync>() {}
    fn unpin<T: Unpin>() {}
    send_sync::<InFlight<str>>();
    send_sync::<Acquire<'static>>();
    send_sync::<Permit>();
    unpin::<Acquire<'static>>();
    unpin::<Permit>();
}
