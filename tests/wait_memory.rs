//! What waiting costs in memory, counted by the allocator itself rather than by the
//! limiter's own `stats().bytes` (which sums the structures it knows of): every `Arc`
//! header, node, queue, hand-over waker, timer entry and registered waker included.
//!
//! Its own test binary, with one test, so that the counting allocator sees nothing else.

use std::alloc::{GlobalAlloc, Layout, System};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::task::{Context, Wake, Waker};

use tollgate::{Limiter, ManualClock, Quota, Timestamp};

/// The system allocator, counting the bytes it holds live.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call is forwarded to `System` unchanged; the counter is a side effect.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract for `alloc`, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract for `dealloc`, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
}

struct NoWake;

impl Wake for NoWake {
    fn wake(self: Arc<Self>) {}
}

/// One round: two waiters on each of `KEYS` keys (a head and one behind it), dropped heads
/// first on even keys and queued ones first on odd keys, then the clock past every
/// instant. Returns the bytes a waiter held beyond its own future.
fn round(l: &Limiter<u64>, clock: &ManualClock, round: u64) -> isize {
    clock.set(Timestamp::from_nanos(round * 10_000_000_000));
    for key in 0..KEYS {
        assert!(l.check(&key).is_ok()); // each key's burst spent: the waits below queue
    }
    let waker = Waker::from(Arc::new(NoWake));
    let before = live();
    let mut waiters: Vec<Pin<Box<_>>> = Vec::with_capacity(2 * KEYS as usize);
    for key in 0..KEYS {
        for _ in 0..2 {
            waiters.push(Box::pin(l.until_ready(&key)));
        }
    }
    for w in &mut waiters {
        assert!(
            w.as_mut()
                .poll(&mut Context::from_waker(&waker))
                .is_pending()
        );
    }
    let futures = (waiters.capacity() * size_of::<Pin<Box<()>>>()) as isize
        + waiters.len() as isize * size_of_val(&*waiters[0]) as isize;
    let per_waiter = (live() - before - futures) / (2 * KEYS as isize);
    for pair in waiters.chunks_mut(2).skip(1).step_by(2) {
        pair.swap(0, 1);
    }
    drop(waiters);
    clock.set(Timestamp::from_nanos(
        round * 10_000_000_000 + 5_000_000_000,
    ));
    per_waiter
}

const KEYS: u64 = 100_000;

/// 100,000 keys with two waiters each hold a bounded number of bytes a waiter, and give
/// them all back: a second round ends with exactly the bytes the first ended with (what
/// the first left is the waiting structures' fixed part, allocated once).
#[test]
fn waiting_memory_is_bounded_per_waiter_and_all_given_back() {
    let clock = ManualClock::new();
    let l: Limiter<u64> = Limiter::builder(Quota::per_second(1).allow_burst(1))
        .clock(clock.clone())
        .build();
    let start = live();
    let first = round(&l, &clock, 1);
    let after_first = live();
    let second = round(&l, &clock, 2);
    let after_second = live();
    eprintln!(
        "{first} and {second} bytes a waiter; {} bytes kept by the first round, {} by the second",
        after_first - start,
        after_second - after_first
    );
    for per_waiter in [first, second] {
        assert!(
            (64..=512).contains(&per_waiter),
            "{per_waiter} bytes a waiter beyond its future"
        );
    }
    assert_eq!(
        after_second, after_first,
        "the second round kept bytes: a leak"
    );
}
