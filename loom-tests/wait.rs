//! Loom models of waiting: the key's queue, its hand-over, and their races with drops and
//! checks (`src/wait/queue.rs`; the design record is `src/design.rs`).
//!
//! Run them in release mode with a preemption bound:
//!
//! ```text
//! RUSTFLAGS="--cfg tollgate_loom" LOOM_MAX_PREEMPTIONS=2 \
//!     cargo test --release -p tollgate-loom --test loom_wait --target-dir target/loom
//! ```
//!
//! Add `-- --nocapture` to see each model's interleaving count and time. Without
//! `LOOM_MAX_PREEMPTIONS` the models use a bound of 2.
//!
//! The models use only the public API. Each limiter (burst 1, `T` = 1 000 ns, one shard)
//! waits on a [`ManualClock`] standing at `NOW`: time moves only when a model calls
//! `clock.set`, which fires the clock's own timer on the calling thread (so a thread that
//! sets the clock runs the queue's hand-over), and futures are polled by hand with a counting
//! waker; no executor runs. The limiter and its clock live in a `loom::lazy_static!`, which
//! loom creates afresh for every execution and drops before its leak check, so that a
//! waiting future (which borrows its limiter) can be made on one loom thread and handed to
//! another.
//!
//! A key's queue is read back with a zero-bound wait, `until_ready(&key).within(ZERO)`: it
//! refuses with the instant a new waiter would be admitted at (after the queue's head and
//! the waiters behind it) and writes nothing. (A refused wait counts as `denied` in the
//! stats; the models only read `admitted`.)
//!
//! The models, and the fault each was shown to fail on (applied to `src/` by hand, run, and
//! reverted; the models that fail are listed):
//!
//! | model | race | injected fault that makes it fail |
//! | --- | --- | --- |
//! | two arrivals (held key, new key, direct) | two waiters' first polls | the state written by a store, not a CAS (held key) |
//! | cancel vs hand-over | the head's drop vs the timer firing it | the head's drop does not refund; the drop does not re-check, under the lock, that the hand-over has not admitted it |
//! | two waiters and a drop: arrival vs cancel (keyed, direct) | a new waiter vs the head's drop | the head's drop does not refund |
//! | two waiters and a drop: two cancels | the head's and the next waiter's drops | the head's drop does not refund; an emptied queue is kept (memory, and loom's leak check) |
//! | forget vs hand-over | a hand-over that admits a never-polled head and the next waiter vs that waiter's poll with a new waker | the admission takes the waker before it publishes the outcome (a lost wake-up) |
//! | check vs hand-over (at the head's instant, an interval late) | a lock-free check vs the hand-over's reservation | the state written by a store, not a CAS |
//! | refund vs check (at the refunded instant, after it) | the head's refund vs a check | the head's drop does not refund (at); the refund does not compare the TAT (after); a store, not a CAS (after) |
//! | refund vs reset (keyed, direct) | a stale refund vs checks of the reset key | the refund does not compare the removal epoch |
//!
//! Every rule of *who* is admitted *when* (FIFO, the chain instant, bounded waits) is a
//! deterministic test on the manual clock in `tests/wait.rs`; these models check that the
//! rules survive every interleaving of the threads that touch a key at once.
//!
//! As in `models.rs`, every two-thread model runs once per role assignment and each thread
//! opens with a Relaxed RMW on a shared gate: loom 0.7's partial-order reduction otherwise
//! misses interleavings of threads that load a word before CASing it (see `race` there).
//! Each model also names its allowed outcomes, and `model` checks that the outcomes reached
//! are exactly those: none other, and each of them at least once (so both orders of every
//! race were tried). The suite takes about 0.1 s at the default bound of 2, and about 20 s
//! effectively unbounded (`LOOM_MAX_PREEMPTIONS=100`), which passes too.
//!
//! The `cfg` below empties this file in every other build; it comes after this comment so
//! that the empty test crate still has its docs (`missing_docs` is on for every target).
#![cfg(tollgate_loom)]

use std::cell::Cell;
use std::collections::BTreeSet;
use std::fmt::Debug;
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Once, PoisonError};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use loom::sync::atomic::AtomicUsize;
use tollgate::{
    Admitted, Clock, DirectLimiter, DirectUntilReady, Error, Limiter, ManualClock, Quota,
    Timestamp, UntilReady,
};

#[path = "race.rs"]
mod race;
use race::{Roles, race};

/// The emission interval of every model's quota, in nanoseconds (burst 1: tolerance 0).
const T: u64 = 1_000;
/// Where every model's clock stands until the model moves it.
const NOW: u64 = 10_000;
/// The key every model waits on.
const KEY: u64 = 7;
/// Loom's limit on scheduling points per execution (default 1 000, meant to catch spin
/// loops). A `stats()` snapshot alone reads 65 counter stripes; nothing here spins.
const MAX_BRANCHES: usize = 10_000;

// ---------------------------------------------------------------------------------------
// Running models.

/// Runs a model under loom twice, once per [`Roles`] (preemption bound 2 unless
/// `LOOM_MAX_PREEMPTIONS` says otherwise), and reports the interleavings and time.
///
/// Each execution returns its outcome (the final state in the model's terms, after the
/// model's own assertions). The outcomes reached over both role assignments must be exactly
/// `expected`: none other is allowed, and every allowed one must be reached, which also
/// shows that loom tried both orders of the race.
///
/// A failing assertion is caught inside the execution and reported once loom returns:
/// letting it unwind out of the execution would drop the per-execution limiters (the
/// `lazy_static`s) outside loom, which aborts the whole test binary. Loom still explores
/// the remaining interleavings (it cannot be stopped early), with later failures' panic
/// messages silenced.
fn model<O>(name: &str, expected: &[O], f: impl Fn(Roles) -> O + Copy + Sync + Send + 'static)
where
    O: Debug + Ord + Send + 'static,
{
    install_quiet_panic_hook();
    let start = Instant::now();
    let mut total = 0;
    let outcomes = std::sync::Arc::new(std::sync::Mutex::new(BTreeSet::new()));
    for roles in [Roles::FirstOnMain, Roles::FirstSpawned] {
        let mut builder = loom::model::Builder::new();
        if builder.preemption_bound.is_none() {
            builder.preemption_bound = Some(2);
        }
        builder.max_branches = builder.max_branches.max(MAX_BRANCHES);
        let count = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let failure = std::sync::Arc::new(std::sync::Mutex::new(None::<String>));
        let (counter, failed, reached) = (count.clone(), failure.clone(), outcomes.clone());
        builder.check(move || {
            counter.fetch_add(1, Ordering::Relaxed);
            match catch_unwind(AssertUnwindSafe(|| f(roles))) {
                Ok(outcome) => {
                    reached
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .insert(outcome);
                }
                Err(panic) => {
                    let mut failed = failed.lock().unwrap_or_else(PoisonError::into_inner);
                    if failed.is_none() {
                        let message = panic
                            .downcast_ref::<String>()
                            .cloned()
                            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                            .unwrap_or_default();
                        *failed = Some(message);
                        QUIET.set(true);
                    }
                }
            }
        });
        QUIET.set(false);
        let failure = failure
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        total += count.load(Ordering::Relaxed);
        if let Some(message) = failure {
            panic!("loom model {name} ({roles:?}) failed after {total} interleavings: {message}");
        }
    }
    let reached = std::mem::take(&mut *outcomes.lock().unwrap_or_else(PoisonError::into_inner));
    let expected: BTreeSet<&O> = expected.iter().collect();
    assert_eq!(
        reached.iter().collect::<BTreeSet<&O>>(),
        expected,
        "loom model {name}: outcomes reached vs allowed"
    );
    eprintln!(
        "loom model {name}: {total} interleavings in {:.2?}, outcomes {reached:?}",
        start.elapsed()
    );
}

thread_local! {
    /// Set once a model has failed: its later executions' panics are not printed. (Loom
    /// runs a model's threads as coroutines on the test's own thread, so this covers them.)
    static QUIET: Cell<bool> = const { Cell::new(false) };
}

/// Installs, once per test binary, a panic hook that defers to the default one unless the
/// panicking thread is [`QUIET`].
fn install_quiet_panic_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !QUIET.get() {
                default(info);
            }
        }));
    });
}

// ---------------------------------------------------------------------------------------
// The limiters, per execution.

fn quota() -> Quota {
    Quota::with_period(Duration::from_nanos(T))
}

fn clock_at_now() -> ManualClock {
    let clock = ManualClock::new();
    clock.set(at(NOW));
    clock
}

fn keyed() -> (Limiter<u64>, ManualClock) {
    let clock = clock_at_now();
    let limiter = Limiter::builder(quota())
        .shards(1)
        .capacity(4)
        .clock(clock.clone())
        .build();
    (limiter, clock)
}

fn direct() -> (DirectLimiter, ManualClock) {
    let clock = clock_at_now();
    (DirectLimiter::with_clock(quota(), clock.clone()), clock)
}

loom::lazy_static! {
    /// A keyed limiter and its clock, fresh in every execution (dropped before loom's leak
    /// check), so that futures borrowing it are `'static` and can move between threads.
    static ref KEYED: (Limiter<u64>, ManualClock) = keyed();
    /// The same for the direct limiter.
    static ref DIRECT: (DirectLimiter, ManualClock) = direct();
}

fn at(nanos: u64) -> Timestamp {
    Timestamp::from_nanos(nanos)
}

// ---------------------------------------------------------------------------------------
// Polling by hand.

/// A waker that counts its wakes. (`Wake` needs std's `Arc`; the counter is loom's.)
struct Count(AtomicUsize);

impl Wake for Count {
    fn wake(self: std::sync::Arc<Self>) {
        // ordering: read after the threads are joined.
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

/// A waiting future with its own counting waker.
struct Probe<F> {
    fut: F,
    count: std::sync::Arc<Count>,
    waker: Waker,
}

impl<F: Future<Output = Result<(), Error>> + Unpin> Probe<F> {
    fn new(fut: F) -> Self {
        let count = std::sync::Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(count.clone());
        Probe { fut, count, waker }
    }

    fn poll(&mut self) -> Poll<Result<(), Error>> {
        Pin::new(&mut self.fut).poll(&mut Context::from_waker(&self.waker))
    }

    fn wakes(&self) -> usize {
        // ordering: read after the threads are joined.
        self.count.0.load(Ordering::Relaxed)
    }

    /// Gives the future a new counting waker from its next poll on, as a task that moved
    /// to another executor thread does; returns the old counter.
    fn new_waker(&mut self) -> std::sync::Arc<Count> {
        let count = std::sync::Arc::new(Count(AtomicUsize::new(0)));
        self.waker = Waker::from(count.clone());
        std::mem::replace(&mut self.count, count)
    }
}

/// A new `until_ready` on the model's key, polled once.
fn wait_keyed() -> (Poll<Result<(), Error>>, Probe<UntilReady<'static>>) {
    let mut probe = Probe::new(KEYED.0.until_ready(&KEY));
    (probe.poll(), probe)
}

/// A new `until_ready` on the direct limiter, polled once.
fn wait_direct() -> (Poll<Result<(), Error>>, Probe<DirectUntilReady<'static>>) {
    let mut probe = Probe::new(DIRECT.0.until_ready());
    (probe.poll(), probe)
}

/// When a zero-bound wait says the next cell would be admitted (it writes nothing).
fn refused_at(probe: Poll<Result<(), Error>>) -> u64 {
    match probe {
        Poll::Ready(Err(Error::RateLimited { earliest, .. })) => earliest.as_nanos(),
        other => panic!("the key had a free cell: {other:?}"),
    }
}

/// The instant the model's key would admit its next cell at.
fn next_free_keyed() -> u64 {
    let mut probe = Probe::new(KEYED.0.until_ready(&KEY).within(Duration::ZERO));
    refused_at(probe.poll())
}

/// The instant the direct limiter would admit its next cell at.
fn next_free_direct() -> u64 {
    let mut probe = Probe::new(DIRECT.0.until_ready().within(Duration::ZERO));
    refused_at(probe.poll())
}

/// Finds the instant a pending waiter was given, among `candidates` (ascending), by moving
/// the clock: one nanosecond before it the waiter is neither woken nor ready (never early);
/// at it, it is woken exactly once and completes. A candidate the clock has already reached
/// is checked as it stands (the waiter may have been admitted by the model's race). The
/// clock stays at the instant found.
fn admitted_at<F>(clock: &ManualClock, waiter: &mut Probe<F>, candidates: &[u64]) -> u64
where
    F: Future<Output = Result<(), Error>> + Unpin,
{
    for &instant in candidates {
        if instant > clock.now().as_nanos() {
            clock.set(at(instant - 1));
            assert_eq!(waiter.wakes(), 0, "woken before {instant}");
            assert!(waiter.poll().is_pending(), "ready before {instant}");
            clock.set(at(instant));
        }
        if waiter.wakes() > 0 {
            assert_eq!(waiter.wakes(), 1, "woken more than once");
            assert_eq!(waiter.poll(), Poll::Ready(Ok(())));
            return instant;
        }
    }
    panic!("not admitted at any of {candidates:?}");
}

/// A check's outcome in model terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Seen {
    /// Admitted; the key's TAT became this.
    Admitted(u64),
    /// Rate limited; admissible at this time.
    Limited(u64),
}

fn seen(result: Result<Admitted, Error>, now: u64) -> Seen {
    match result {
        Ok(ok) => Seen::Admitted(now + u64::try_from(ok.reset_after().as_nanos()).unwrap()),
        Err(Error::RateLimited { earliest, .. }) => Seen::Limited(earliest.as_nanos()),
        Err(e) => panic!("unexpected {e:?}"),
    }
}

/// Makes the model's key hold cell `NOW` (a waiter ready at once) and queues W1, which
/// becomes the head of the key's queue and reserves `NOW + T`; W1 is returned. The key is put
/// in the table (expired at `NOW`) first, so every check on it takes the lock-free path.
fn head() -> Probe<UntilReady<'static>> {
    assert!(KEYED.0.check_at(&KEY, at(0)).is_ok());
    let (first, _) = wait_keyed();
    assert_eq!(first, Poll::Ready(Ok(())));
    let (second, w1) = wait_keyed();
    assert!(second.is_pending());
    assert_eq!(next_free_keyed(), NOW + 2 * T);
    w1
}

/// [`head`], then W2 queued behind W1, holding nothing: a new waiter would come after both.
fn head_and_one_behind() -> (Probe<UntilReady<'static>>, Probe<UntilReady<'static>>) {
    let w1 = head();
    let (r2, w2) = wait_keyed();
    assert!(r2.is_pending());
    assert_eq!(next_free_keyed(), NOW + 3 * T);
    (w1, w2)
}

/// The window guarantee at the instant `instant` a waiter was admitted at: a check there is
/// refused until the next emission interval (burst 1).
fn no_second_cell_at(instant: u64) {
    assert_eq!(
        seen(KEYED.0.check_at(&KEY, at(instant)), instant),
        Seen::Limited(instant + T),
        "two cells at {instant}"
    );
}

// ---------------------------------------------------------------------------------------
// 1. Two arrivals on one key.

/// Which of two racing waiters was ready at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Ready {
    First,
    Second,
}

/// Of two waiters' first polls, exactly one is ready: the other is returned.
fn the_pending_one<F>(
    (r1, w1): (Poll<Result<(), Error>>, F),
    (r2, w2): (Poll<Result<(), Error>>, F),
) -> (Ready, F) {
    match (r1, r2) {
        (Poll::Ready(Ok(())), Poll::Pending) => (Ready::First, w2),
        (Poll::Pending, Poll::Ready(Ok(()))) => (Ready::Second, w1),
        other => panic!("exactly one must be ready at once: {other:?}"),
    }
}

/// Two threads each make and poll one `until_ready` on the same key, which is free at `NOW`
/// (held but expired with `held`, absent otherwise, so both insert it). Each either takes the
/// cell on the lock-free path or joins the key's queue. Exactly one is ready at once; the
/// other becomes the head and holds `NOW + T`, is never woken before it and is woken once at
/// it; a new waiter would come at `NOW + 2T` (no cell lost, none duplicated), and the table
/// holds the key once.
fn two_arrivals_on_one_key(roles: Roles, held: bool) -> Ready {
    let (l, clock) = &*KEYED;
    if held {
        assert!(l.check_at(&KEY, at(0)).is_ok());
    }
    let before = l.stats().admitted;
    let (w1, w2) = race(roles, wait_keyed, wait_keyed);

    let (ready, mut pending) = the_pending_one(w1, w2);
    assert_eq!(next_free_keyed(), NOW + 2 * T);
    let stats = l.stats();
    assert_eq!((stats.admitted, stats.keys_held), (before + 1, 1));
    assert_eq!(admitted_at(clock, &mut pending, &[NOW + T]), NOW + T);
    assert_eq!(l.stats().admitted, before + 2);
    ready
}

#[test]
fn two_arrivals_on_a_held_key() {
    model(
        "two_arrivals_on_a_held_key",
        &[Ready::First, Ready::Second],
        |roles| two_arrivals_on_one_key(roles, true),
    );
}

#[test]
fn two_arrivals_on_a_new_key() {
    model(
        "two_arrivals_on_a_new_key",
        &[Ready::First, Ready::Second],
        |roles| two_arrivals_on_one_key(roles, false),
    );
}

/// The same on a direct limiter.
#[test]
fn two_arrivals_on_a_direct_limiter() {
    model(
        "two_arrivals_on_a_direct_limiter",
        &[Ready::First, Ready::Second],
        |roles| {
            let (_, clock) = &*DIRECT;
            let (w1, w2) = race(roles, wait_direct, wait_direct);
            let (ready, mut pending) = the_pending_one(w1, w2);
            assert_eq!(next_free_direct(), NOW + 2 * T);
            assert_eq!(admitted_at(clock, &mut pending, &[NOW + T]), NOW + T);
            ready
        },
    );
}

// ---------------------------------------------------------------------------------------
// 2. Cancel vs hand-over.

/// W1 is the head (`NOW + T`) and W2 is queued behind it. One thread drops W1 while the
/// other sets the clock to `NOW + T`, which fires the head's sleep and runs the hand-over on
/// that thread. The outcome is `(W1's wakes, W2's instant)`, and exactly two are allowed:
///
/// * the drop first: W1 refunds, W2 becomes the head at W1's chain instant and gets `NOW + T`,
///   the instant W1 had, as if W1 had never asked; W1 is never woken;
/// * the hand-over first: W1 is admitted at `NOW + T` and woken once (its drop then finds it
///   settled and does nothing: the cell counts as used), and W2 gets `NOW + 2T`.
///
/// A head dropped without its refund shows as `(0, NOW + 2T)`. A drop that went on to
/// cancel W1 after the hand-over had admitted it would corrupt the queue's count of waiting
/// cells, which the prediction for a new waiter (checked after the race) reads.
fn cancel_vs_hand_over(roles: Roles) -> (usize, u64) {
    let (l, clock) = &*KEYED;
    let (w1, mut w2) = head_and_one_behind();
    let w1_wakes = w1.count.clone();
    race(roles, move || drop(w1), move || KEYED.1.set(at(NOW + T)));

    // ordering: read after the threads are joined.
    let w1_woken = w1_wakes.0.load(Ordering::Relaxed);
    // The queue's books agree with W2's place: a new waiter would come right after it.
    let w2_expected = if w1_woken == 0 { NOW + T } else { NOW + 2 * T };
    assert_eq!(next_free_keyed(), w2_expected + T);
    let w2_at = admitted_at(clock, &mut w2, &[NOW + T, NOW + 2 * T]);
    no_second_cell_at(w2_at);
    // The setup's check, the waiter ready at `NOW`, W2, and W1 if it was admitted.
    assert_eq!(l.stats().admitted, 3 + w1_woken as u64);
    (w1_woken, w2_at)
}

#[test]
fn cancel_vs_hand_over_model() {
    model(
        "cancel_vs_hand_over",
        &[(0, NOW + T), (1, NOW + 2 * T)],
        cancel_vs_hand_over,
    );
}

// ---------------------------------------------------------------------------------------
// 3. Two waiters and a drop.

/// W1 is the head (`NOW + T`). One thread drops W1 while the other makes a new waiter W2.
/// Whether W2 joins W1's queue before the drop (and inherits W1's instant when W1 hands its
/// reservation back) or after it (the queue is gone, the key's state refunded, and W2 starts a
/// new queue), W2 gets `NOW + T` and a waiter after it `NOW + 2T`: the dropped waiter cost
/// nothing. (Under the eager reservations of commit `92a5793` one order left a hole at `NOW + T`.)
/// W1 is never woken.
fn arrival_vs_cancel(roles: Roles) -> u64 {
    let (l, clock) = &*KEYED;
    let w1 = head();
    let w1_wakes = w1.count.clone();
    let ((), (r2, mut w2)) = race(roles, move || drop(w1), wait_keyed);

    assert!(r2.is_pending(), "{r2:?}");
    assert_eq!(next_free_keyed(), NOW + 2 * T);
    let w2_at = admitted_at(clock, &mut w2, &[NOW + T, NOW + 2 * T]);
    // ordering: read after the threads are joined.
    let w1_woken = w1_wakes.0.load(Ordering::Relaxed);
    assert_eq!(w1_woken, 0, "a dropped waiter was woken");
    // The setup's check, the waiter ready at `NOW`, and W2.
    assert_eq!(l.stats().admitted, 3);
    w2_at
}

#[test]
fn arrival_vs_cancel_model() {
    model("arrival_vs_cancel", &[NOW + T], arrival_vs_cancel);
}

/// [`arrival_vs_cancel`] on a direct limiter.
#[test]
fn arrival_vs_cancel_direct() {
    model("arrival_vs_cancel_direct", &[NOW + T], |roles| {
        let (_, clock) = &*DIRECT;
        assert_eq!(wait_direct().0, Poll::Ready(Ok(())));
        let (r1, w1) = wait_direct();
        assert!(r1.is_pending());
        let ((), (r2, mut w2)) = race(roles, move || drop(w1), wait_direct);

        assert!(r2.is_pending(), "{r2:?}");
        assert_eq!(next_free_direct(), NOW + 2 * T);
        admitted_at(clock, &mut w2, &[NOW + T, NOW + 2 * T])
    });
}

/// W1 is the head (`NOW + T`) and W2 queued behind it; both are dropped at once, on two
/// threads. If W2 goes first it is only marked cancelled (it holds nothing), and W1's drop
/// refunds and unlinks both; if W1 goes first, W2 becomes the head and reserves `NOW + T`,
/// then refunds it. Either way the key is left as if neither had asked (a new waiter would
/// get `NOW + T`), neither task is woken, and the key's queue is gone: the limiter holds no
/// more memory than before the waiters came.
fn two_cancels(roles: Roles) -> u64 {
    let (l, _) = &*KEYED;
    let bytes = l.stats().bytes;
    let (w1, w2) = head_and_one_behind();
    let wakes = [w1.count.clone(), w2.count.clone()];
    race(roles, move || drop(w1), move || drop(w2));

    // ordering: read after the threads are joined.
    let woken: usize = wakes.iter().map(|c| c.0.load(Ordering::Relaxed)).sum();
    assert_eq!(woken, 0, "a dropped waiter was woken");
    let stats = l.stats();
    // The setup's check and the waiter ready at `NOW`.
    assert_eq!(stats.admitted, 2);
    assert_eq!(stats.bytes, bytes, "the emptied queue kept its memory");
    next_free_keyed()
}

#[test]
fn two_cancels_model() {
    model("two_cancels", &[NOW + T], two_cancels);
}

// ---------------------------------------------------------------------------------------
// 4. Forget vs hand-over.

/// Whether a poll of a waiter returned `Ready`, and how many times the waker of that poll
/// was woken.
type PollAndWakes = (bool, usize);

/// W1 is the head (`NOW + T`) and W2 is queued behind it. W1's future is forgotten: it is
/// never polled again. (It is dropped after the race, not `mem::forget`-ed, since loom counts
/// a leaked `Arc` as a failure; dropping a waiter that was admitted does nothing.) One thread
/// sets the clock to `NOW + 2T`: the timer runs the hand-over, which admits W1 and then W2,
/// both due, with neither polled. The other thread polls W2 with a new waker (its task moved
/// to another worker). The outcome is `(that poll was Ready, the new waker's wakes)`:
///
/// * `(true, 0)`: W2 was admitted before the poll, which saw it and registered nothing;
/// * `(true, 1)`: the admission came while the poll registered, and woke the new waker too;
/// * `(false, 1)`: the poll registered first and was woken.
///
/// Never `(false, 0)`: a task left pending with nobody to wake it. W1's old waker is woken
/// once, though nobody polls W1: the queue never waits on its futures.
fn forget_vs_hand_over(roles: Roles) -> PollAndWakes {
    let (l, _) = &*KEYED;
    let (w1, mut w2) = head_and_one_behind();
    let old_waker = w2.new_waker();
    let (w2, outcome) = {
        let ((), (mut w2, ready)) = race(
            roles,
            move || KEYED.1.set(at(NOW + 2 * T)),
            move || {
                let ready = w2.poll().is_ready();
                (w2, ready)
            },
        );
        let woken = w2.wakes();
        if !ready {
            assert_eq!(w2.poll(), Poll::Ready(Ok(())), "woken but not admitted");
        }
        (w2, (ready, woken))
    };
    assert_eq!(w1.wakes(), 1, "the forgotten head was not admitted");
    // ordering: read after the threads are joined.
    assert!(old_waker.0.load(Ordering::Relaxed) <= 1);
    no_second_cell_at(NOW + 2 * T);
    // The setup's check, the waiter ready at `NOW`, W1 and W2.
    assert_eq!(l.stats().admitted, 4);
    drop((w1, w2));
    outcome
}

#[test]
fn forget_vs_hand_over_model() {
    model(
        "forget_vs_hand_over",
        &[(false, 1), (true, 0), (true, 1)],
        forget_vs_hand_over,
    );
}

// ---------------------------------------------------------------------------------------
// 5. Check vs hand-over.

/// W1 is the head (`NOW + T`) and W2 is queued behind it. One thread sets the clock to
/// `NOW + T` (the hand-over admits W1 and W2 reserves the next cell) while the other checks
/// at `check_at` (lock-free, explicit time: a check from a thread whose clock read is
/// ahead, as when the hand-over runs late). The outcome is `(the check, W2's instant)`.
///
/// At `NOW + T` the check never gets a cell: W1's reservation holds it. At `NOW + 2T` the
/// check takes that cell if it comes before the hand-over (the queue had not claimed it) and
/// W2 is then admitted at `NOW + 3T`; after the hand-over, W2 holds it and the check is
/// refused. No cell is ever given twice: the check and the reservation are CASes on one
/// word.
fn check_vs_hand_over(roles: Roles, check_at: u64) -> (Seen, u64) {
    let (l, clock) = &*KEYED;
    let (w1, mut w2) = head_and_one_behind();
    let ((), check) = race(
        roles,
        move || KEYED.1.set(at(NOW + T)),
        move || seen(KEYED.0.check_at(&KEY, at(check_at)), check_at),
    );

    assert_eq!(w1.wakes(), 1, "the head was not admitted");
    let w2_at = admitted_at(clock, &mut w2, &[NOW + 2 * T, NOW + 3 * T]);
    no_second_cell_at(w2_at);
    // The setup's check, the waiter ready at `NOW`, W1, W2, and this check if admitted.
    let checks_admitted = u64::from(matches!(check, Seen::Admitted(_)));
    assert_eq!(l.stats().admitted, 4 + checks_admitted);
    (check, w2_at)
}

#[test]
fn check_vs_hand_over_at_the_heads_instant() {
    model(
        "check_vs_hand_over_at_the_heads_instant",
        &[
            (Seen::Limited(NOW + 2 * T), NOW + 2 * T),
            (Seen::Limited(NOW + 3 * T), NOW + 2 * T),
        ],
        |roles| check_vs_hand_over(roles, NOW + T),
    );
}

#[test]
fn check_vs_hand_over_an_interval_late() {
    model(
        "check_vs_hand_over_an_interval_late",
        &[
            (Seen::Admitted(NOW + 3 * T), NOW + 3 * T),
            (Seen::Limited(NOW + 3 * T), NOW + 2 * T),
        ],
        |roles| check_vs_hand_over(roles, NOW + 2 * T),
    );
}

// ---------------------------------------------------------------------------------------
// 6. Refund vs check.

/// W1 is the head (`NOW + T`). One thread drops W1 while the other checks at `check_at`
/// (lock-free, explicit time). The outcome is `(the check, the instant a new waiter would
/// get)`. At `NOW + T` the check is admitted only if the refund came first; either way
/// `NOW + T` is used at most once:
///
/// * check first: refused (next `NOW + 2T`), then the refund frees `NOW + T`;
/// * refund first: the check takes `NOW + T`, and the key is next free at `NOW + 2T`.
///
/// At `NOW + 2T` the check is admitted either way, and the refund never applies after it.
/// A refund applied after an admitted check would show as `(Admitted(NOW + 2T), NOW + T)`.
fn refund_vs_check(roles: Roles, check_at: u64) -> (Seen, u64) {
    let (l, _) = &*KEYED;
    let w1 = head();
    let ((), check) = race(
        roles,
        move || drop(w1),
        move || seen(KEYED.0.check_at(&KEY, at(check_at)), check_at),
    );

    let free = next_free_keyed();
    // The setup's check, the waiter ready at `NOW`, and this check if admitted.
    let checks_admitted = u64::from(matches!(check, Seen::Admitted(_)));
    assert_eq!(l.stats().admitted, 2 + checks_admitted);
    (check, free)
}

#[test]
fn refund_vs_check_at_the_refunded_instant() {
    model(
        "refund_vs_check_at_the_refunded_instant",
        &[
            (Seen::Limited(NOW + 2 * T), NOW + T),
            (Seen::Admitted(NOW + 2 * T), NOW + 2 * T),
        ],
        |roles| refund_vs_check(roles, NOW + T),
    );
}

#[test]
fn refund_vs_check_after_it() {
    model(
        "refund_vs_check_after_it",
        &[(Seen::Admitted(NOW + 3 * T), NOW + 3 * T)],
        |roles| refund_vs_check(roles, NOW + 2 * T),
    );
}

// ---------------------------------------------------------------------------------------
// 7. Refund vs reset.

/// W1 is the head (`NOW + T`; the key's TAT is `NOW + 2T`); then the key is reset ("its next
/// request is treated as its first"). One thread drops W1 while the other checks the reset
/// key at `NOW` and at `NOW + T`: both are admitted, and the second leaves the TAT at
/// `NOW + 2T` again. Since the reset the key has admitted cells at `NOW` and `NOW + T`; with
/// burst 1 a third at `NOW + T` exceeds the quota.
///
/// W1's refund must not apply to the new incarnation of the key. It does if it runs after
/// the second check: it finds the TAT equal to the one W1 wrote and hands back the new
/// incarnation's cell, so a third check at `NOW + T` is admitted (it was, until refunds
/// checked the removal epoch).
///
/// The reset happens before the race rather than in it, so this model checks what the queue
/// adds: the head's refund, racing checks, against a key that a reset gave a new
/// incarnation. The refund is `engine::undo`, the same function as `Limiter::undo`; an undo
/// racing the reset itself (both limiters, the removal epoch's begin/end around the new
/// incarnation's CAS) is modelled in `loom-tests/models.rs`: `undo_vs_reset_keyed`,
/// `undo_vs_reset_direct`, `undo_during_reset_direct`.
fn stale_refund_after_reset(roles: Roles) -> Seen {
    let (l, _) = &*KEYED;
    let w1 = head();
    assert!(l.reset(&KEY));
    let ((), checks) = race(
        roles,
        move || drop(w1),
        move || [NOW, NOW + T].map(|now| seen(KEYED.0.check_at(&KEY, at(now)), now)),
    );

    assert_eq!(
        checks,
        [Seen::Admitted(NOW + T), Seen::Admitted(NOW + 2 * T)]
    );
    let third = seen(l.check_at(&KEY, at(NOW + T)), NOW + T);
    assert_eq!(
        third,
        Seen::Limited(NOW + 2 * T),
        "a stale refund gave the reset key an extra cell"
    );
    third
}

#[test]
fn stale_refund_after_reset_model() {
    model(
        "stale_refund_after_reset",
        &[Seen::Limited(NOW + 2 * T)],
        stale_refund_after_reset,
    );
}

/// [`stale_refund_after_reset`] on a direct limiter, whose `reset` stores TAT 0.
fn stale_refund_after_reset_direct(roles: Roles) -> Seen {
    let (d, _) = &*DIRECT;
    assert_eq!(wait_direct().0, Poll::Ready(Ok(())));
    let (r1, w1) = wait_direct();
    assert!(r1.is_pending());
    d.reset();
    let ((), checks) = race(
        roles,
        move || drop(w1),
        move || [NOW, NOW + T].map(|now| seen(DIRECT.0.check_at(at(now)), now)),
    );

    assert_eq!(
        checks,
        [Seen::Admitted(NOW + T), Seen::Admitted(NOW + 2 * T)]
    );
    let third = seen(d.check_at(at(NOW + T)), NOW + T);
    assert_eq!(
        third,
        Seen::Limited(NOW + 2 * T),
        "a stale refund gave the reset limiter an extra cell"
    );
    third
}

#[test]
fn stale_refund_after_reset_direct_model() {
    model(
        "stale_refund_after_reset_direct",
        &[Seen::Limited(NOW + 2 * T)],
        stale_refund_after_reset_direct,
    );
}

// ---------------------------------------------------------------------------------------
// 8. Penalty vs hand-over.

/// W1 is the head (`NOW + T`; the key's TAT is `NOW + 2T`). One thread penalizes the key by
/// `10T` (from the clock it reads: `NOW`, or `NOW + T` once the other thread moved it) while
/// the other moves the clock to `NOW + T`, which runs W1's hand-over. The outcome is `(the
/// instant W1 is admitted at, the instant a new waiter would get)`:
///
/// * hand-over first: W1 is admitted at `NOW + T`, and the penalty then pushes the key to
///   `NOW + 11T` (read at `NOW + T`) or `NOW + 10T` (read at `NOW`);
/// * penalty first: W1's reservation is older than the penalty, so W1 reserves again after
///   it and is admitted where the penalty ends, `NOW + 10T` (read at `NOW`) or `NOW + 11T`
///   (read at `NOW + T`, the clock moved but its hand-over not yet run), the key next free
///   an interval later.
///
/// Never both: W1 admitted inside a penalty that came before its hand-over (it was, until
/// a penalty made the head reserve again), nor a lost wake (W1 never admitted).
fn penalty_vs_hand_over(roles: Roles) -> (u64, u64) {
    let (_, clock) = &*KEYED;
    let mut w1 = head();
    let ((), ()) = race(
        roles,
        move || {
            KEYED
                .0
                .penalize(&KEY, Duration::from_nanos(10 * T))
                .unwrap();
        },
        move || KEYED.1.set(at(NOW + T)),
    );
    let w1_at = admitted_at(clock, &mut w1, &[NOW + T, NOW + 10 * T, NOW + 11 * T]);
    (w1_at, next_free_keyed())
}

#[test]
fn penalty_vs_hand_over_model() {
    model(
        "penalty_vs_hand_over",
        &[
            (NOW + T, NOW + 10 * T),
            (NOW + T, NOW + 11 * T),
            (NOW + 10 * T, NOW + 11 * T),
            (NOW + 11 * T, NOW + 12 * T),
        ],
        penalty_vs_hand_over,
    );
}

/// [`penalty_vs_hand_over`] with W2 queued behind W1. Whatever the order, each waiter is
/// admitted where the penalty ends or after the one ahead, never an interval later: a head
/// that reserved on the penalized state (W2, handed over between the penalty's write and its
/// call on the queue) keeps its reservation, and only a head that reserved before reserves
/// again (it once reserved again on top of its own reservation, W2 at `NOW + 12T`).
fn penalty_vs_hand_over_with_one_behind(roles: Roles) -> (u64, u64, u64) {
    let (_, clock) = &*KEYED;
    let (mut w1, mut w2) = head_and_one_behind();
    let ((), ()) = race(
        roles,
        move || {
            KEYED
                .0
                .penalize(&KEY, Duration::from_nanos(10 * T))
                .unwrap();
        },
        move || KEYED.1.set(at(NOW + T)),
    );
    let candidates = [
        NOW + T,
        NOW + 10 * T,
        NOW + 11 * T,
        NOW + 12 * T,
        NOW + 13 * T,
    ];
    let w1_at = admitted_at(clock, &mut w1, &candidates);
    let w2_at = admitted_at(clock, &mut w2, &candidates);
    (w1_at, w2_at, next_free_keyed())
}

#[test]
fn penalty_vs_hand_over_with_one_behind_model() {
    model(
        "penalty_vs_hand_over_with_one_behind",
        &[
            (NOW + T, NOW + 10 * T, NOW + 11 * T),
            (NOW + T, NOW + 11 * T, NOW + 12 * T),
            (NOW + 10 * T, NOW + 11 * T, NOW + 12 * T),
            (NOW + 11 * T, NOW + 12 * T, NOW + 13 * T),
        ],
        penalty_vs_hand_over_with_one_behind,
    );
}

/// The key holds cell `NOW` and no queue. One thread penalizes it by `10T` while W arrives:
/// W becomes the head before the penalty (and reserves again after it) or after (on the
/// penalized state, keeping its reservation); either way it is admitted at `NOW + 10T`,
/// where the penalty ends, and the key is next free an interval later.
fn penalty_vs_arrival(roles: Roles) -> (u64, u64) {
    assert!(KEYED.0.check_at(&KEY, at(0)).is_ok());
    let penalize = || {
        KEYED
            .0
            .penalize(&KEY, Duration::from_nanos(10 * T))
            .unwrap();
    };
    penalty_vs_arrival_on(roles, &KEYED.1, penalize, wait_keyed, next_free_keyed)
}

/// A new wait, polled once, and the wait.
type FirstPoll<F> = (Poll<Result<(), Error>>, Probe<F>);

/// [`penalty_vs_arrival`] on either limiter: `penalize` it by `10T`, `wait` on it, and the
/// instant its `next_free` cell is at.
fn penalty_vs_arrival_on<F>(
    roles: Roles,
    clock: &ManualClock,
    penalize: fn(),
    wait: fn() -> FirstPoll<F>,
    next_free: fn() -> u64,
) -> (u64, u64)
where
    F: Future<Output = Result<(), Error>> + Unpin + Send + 'static,
{
    let (first, _) = wait();
    assert_eq!(first, Poll::Ready(Ok(())));
    let ((), (polled, mut w)) = race(roles, penalize, wait);
    assert!(polled.is_pending());
    let w_at = admitted_at(clock, &mut w, &[NOW + 10 * T, NOW + 11 * T]);
    (w_at, next_free())
}

#[test]
fn penalty_vs_arrival_model() {
    model(
        "penalty_vs_arrival",
        &[(NOW + 10 * T, NOW + 11 * T)],
        penalty_vs_arrival,
    );
}

/// [`penalty_vs_arrival`] on a direct limiter.
fn penalty_vs_arrival_direct(roles: Roles) -> (u64, u64) {
    let penalize = || DIRECT.0.penalize(Duration::from_nanos(10 * T));
    penalty_vs_arrival_on(roles, &DIRECT.1, penalize, wait_direct, next_free_direct)
}

#[test]
fn penalty_vs_arrival_direct_model() {
    model(
        "penalty_vs_arrival_direct",
        &[(NOW + 10 * T, NOW + 11 * T)],
        penalty_vs_arrival_direct,
    );
}
