//! Loom models of the per-key concurrency limit ([`InFlight`], `src/inflight/table.rs`): two
//! threads racing acquire, release and cancel on one key with a limit of 1.
//!
//! ```text
//! RUSTFLAGS="--cfg tollgate_loom" LOOM_MAX_PREEMPTIONS=2 \
//!     cargo test --release -p tollgate-loom --test loom_inflight --target-dir target/loom
//! ```
//!
//! The table is one shard under loom (every key meets on one lock). Futures are polled by
//! hand with counting wakers, or driven by `loom::future::block_on`, which parks the loom
//! thread: a lost wake-up there leaves every thread parked, which loom reports as a deadlock.
//! Each thread opens with a Relaxed RMW on a shared gate, as in `race.rs`, so that loom
//! considers both orders of threads that begin with a load.
//!
//! Every model names the outcomes it allows and checks that the outcomes reached are exactly
//! those (so both orders of each race were tried).
//!
//! | model | race | injected fault that makes it fail |
//! | --- | --- | --- |
//! | poll vs release | a queued future re-polled with a new waker vs the permit's drop that grants it | the poll does not re-check the state after registering its waker; the grant takes the waker before it stores `GRANTED` (both a lost wake-up) |
//! | cancel vs release | a queued future's drop vs the permit's drop that grants it | the drop of a granted, unpolled future does not give its permit back |
//! | cancel head vs release, a waiter behind | as above, with a second waiter that must get the permit, woken once, either way | the drop of a granted, unpolled future does not give its permit back; it frees the permit but does not pass it on (runs no grant) |
//! | two acquirers | two threads each blocking on `acquire`, holding, releasing (N = 1) | a first poll takes a permit when `out <= max` (both hold one); either lost wake-up fault above (loom reports a deadlock: a first poll registers its waker after unlocking, so it races the grant too) |
//! | acquirer vs try_acquire | `acquire` vs `try_acquire` on a held key | `out <= max`, as above |
//!
//! Each fault was applied to `src/inflight/table.rs` by hand, run, and reverted. The suite
//! takes well under a second at the default bound of 2, and passes effectively unbounded
//! (`LOOM_MAX_PREEMPTIONS=100`, about 12,000 interleavings, under a second in release).
//!
//! The `cfg` below empties this file in every other build; it comes after this comment so
//! that the empty test crate still has its docs.
#![cfg(tollgate_loom)]

use std::collections::BTreeSet;
use std::fmt::Debug;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering as StdOrdering;
use std::sync::{Mutex as StdMutex, PoisonError};
use std::task::{Context, Poll, Wake, Waker};

use loom::sync::Arc;
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::thread;
use tollgate::{Acquire, InFlight, Permit};

/// The key every model uses.
const KEY: u64 = 7;

/// Runs `f` under loom (preemption bound 2 unless `LOOM_MAX_PREEMPTIONS` says otherwise)
/// and checks that the outcomes reached are exactly `expected`.
fn model<O>(name: &str, expected: &[O], f: impl Fn() -> O + Sync + Send + 'static)
where
    O: Debug + Ord + Send + 'static,
{
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(2);
    }
    let reached = std::sync::Arc::new(StdMutex::new(BTreeSet::new()));
    let count = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (r, c) = (reached.clone(), count.clone());
    builder.check(move || {
        c.fetch_add(1, StdOrdering::Relaxed);
        let outcome = f();
        r.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(outcome);
    });
    let reached = std::mem::take(&mut *reached.lock().unwrap_or_else(PoisonError::into_inner));
    assert_eq!(
        reached.iter().collect::<BTreeSet<&O>>(),
        expected.iter().collect::<BTreeSet<&O>>(),
        "loom model {name}: outcomes reached vs allowed"
    );
    eprintln!(
        "loom model {name}: {} interleavings, outcomes {reached:?}",
        count.load(StdOrdering::Relaxed)
    );
}

/// A waker that counts its wakes (read after the threads are joined).
#[derive(Default)]
struct Count(std::sync::atomic::AtomicUsize);

impl Wake for Count {
    fn wake(self: std::sync::Arc<Self>) {
        self.0.fetch_add(1, StdOrdering::SeqCst);
    }
}

fn counting() -> (std::sync::Arc<Count>, Waker) {
    let count = std::sync::Arc::new(Count::default());
    let waker = Waker::from(count.clone());
    (count, waker)
}

fn poll(fut: &mut Acquire<'_>, waker: &Waker) -> Option<Permit> {
    match Pin::new(fut).poll(&mut Context::from_waker(waker)) {
        Poll::Ready(permit) => Some(permit),
        Poll::Pending => None,
    }
}

/// A shared gate each thread passes first (see `race.rs`).
fn pass(gate: &AtomicUsize) {
    // ordering: the gate only has to be an access loom sees both threads make.
    gate.fetch_add(1, Ordering::Relaxed);
}

/// Holds `permit` while checking that nobody else holds one of the key (N = 1).
fn hold(holders: &AtomicUsize, permit: Permit) {
    // ordering: SeqCst so that two overlapping holds always see each other.
    assert_eq!(
        holders.fetch_add(1, Ordering::SeqCst),
        0,
        "two permits at once"
    );
    holders.fetch_sub(1, Ordering::SeqCst);
    drop(permit);
}

#[test]
fn poll_vs_release() {
    #[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
    enum Outcome {
        ReadyAtRepoll,
        WokenLater,
    }
    model(
        "poll vs release",
        &[Outcome::ReadyAtRepoll, Outcome::WokenLater],
        || {
            let conc = InFlight::new(1);
            let held = conc.try_acquire(&KEY).unwrap();
            let (_, first) = counting();
            let mut fut = conc.acquire(&KEY);
            assert!(poll(&mut fut, &first).is_none());
            let gate = Arc::new(AtomicUsize::new(0));
            let g = gate.clone();
            let releaser = thread::spawn(move || {
                pass(&g);
                drop(held);
            });
            pass(&gate);
            let (second_count, second) = counting();
            let repolled = poll(&mut fut, &second);
            releaser.join().unwrap();
            let outcome = match repolled {
                Some(permit) => {
                    drop(permit);
                    Outcome::ReadyAtRepoll
                }
                None => {
                    // The grant came after the re-poll registered `second`: it must wake it.
                    assert!(
                        second_count.0.load(StdOrdering::SeqCst) >= 1,
                        "lost wake-up"
                    );
                    drop(poll(&mut fut, &second).expect("granted"));
                    Outcome::WokenLater
                }
            };
            drop(fut);
            assert_eq!(conc.keys(), 0);
            outcome
        },
    );
}

#[test]
fn cancel_vs_release() {
    #[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
    enum Outcome {
        CancelledQueued,
        CancelledGranted,
    }
    model(
        "cancel vs release",
        &[Outcome::CancelledQueued, Outcome::CancelledGranted],
        || {
            let conc = InFlight::new(1);
            let held = conc.try_acquire(&KEY).unwrap();
            let (woken, waker) = counting();
            let mut fut = conc.acquire(&KEY);
            assert!(poll(&mut fut, &waker).is_none());
            let gate = Arc::new(AtomicUsize::new(0));
            let g = gate.clone();
            let releaser = thread::spawn(move || {
                pass(&g);
                drop(held);
            });
            pass(&gate);
            drop(fut);
            releaser.join().unwrap();
            // Either way the permit is back and the key idle.
            assert_eq!(conc.keys(), 0, "a permit was lost");
            drop(conc.try_acquire(&KEY).expect("the permit is free"));
            if woken.0.load(StdOrdering::SeqCst) == 1 {
                Outcome::CancelledGranted
            } else {
                Outcome::CancelledQueued
            }
        },
    );
}

#[test]
fn cancel_head_vs_release_with_a_waiter_behind() {
    #[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
    enum Outcome {
        HeadCancelledQueued,
        HeadCancelledGranted,
    }
    model(
        "cancel head vs release, a waiter behind",
        &[Outcome::HeadCancelledQueued, Outcome::HeadCancelledGranted],
        || {
            let conc = InFlight::new(1);
            let held = conc.try_acquire(&KEY).unwrap();
            let (head_woken, head_waker) = counting();
            let (next_woken, next_waker) = counting();
            let mut head = conc.acquire(&KEY);
            let mut next = conc.acquire(&KEY);
            assert!(poll(&mut head, &head_waker).is_none());
            assert!(poll(&mut next, &next_waker).is_none());
            let gate = Arc::new(AtomicUsize::new(0));
            let g = gate.clone();
            let releaser = thread::spawn(move || {
                pass(&g);
                drop(held);
            });
            pass(&gate);
            drop(head);
            releaser.join().unwrap();
            // Whichever came first, the permit reaches the waiter behind, woken once.
            assert_eq!(next_woken.0.load(StdOrdering::SeqCst), 1, "next not woken");
            drop(poll(&mut next, &next_waker).expect("granted"));
            drop(next);
            assert_eq!(conc.keys(), 0);
            if head_woken.0.load(StdOrdering::SeqCst) == 1 {
                Outcome::HeadCancelledGranted
            } else {
                Outcome::HeadCancelledQueued
            }
        },
    );
}

/// Two threads on one key with N = 1: `second_tries` makes the second use `try_acquire`.
fn two_acquirers(second_tries: bool) -> (bool, bool) {
    let conc = InFlight::new(1);
    let holders = Arc::new(AtomicUsize::new(0));
    let gate = Arc::new(AtomicUsize::new(0));
    let (c, h, g) = (conc.clone(), holders.clone(), gate.clone());
    let other = thread::spawn(move || {
        pass(&g);
        if second_tries {
            c.try_acquire(&KEY).map(|p| hold(&h, p)).is_some()
        } else {
            hold(&h, loom::future::block_on(c.acquire(&KEY)));
            true
        }
    });
    pass(&gate);
    hold(&holders, loom::future::block_on(conc.acquire(&KEY)));
    let other_held = other.join().unwrap();
    assert_eq!(conc.keys(), 0);
    (true, other_held)
}

#[test]
fn two_acquirers_never_both_hold() {
    model("two acquirers", &[(true, true)], || two_acquirers(false));
}

#[test]
fn acquirer_vs_try_acquire() {
    model(
        "acquirer vs try_acquire",
        &[(true, false), (true, true)],
        || two_acquirers(true),
    );
}
