//! Loom models of waiting: reservations, refunds and their races (DESIGN.md §4, "Waiting").
//!
//! Run them in release mode with a preemption bound:
//!
//! ```text
//! RUSTFLAGS="--cfg tollgate_loom" LOOM_MAX_PREEMPTIONS=2 \
//!     CARGO_TARGET_DIR=/tmp/target-loomwait cargo test --release --test loom_wait
//! ```
//!
//! Add `-- --nocapture` to see each model's interleaving count and time. Without
//! `LOOM_MAX_PREEMPTIONS` the models use a bound of 2.
//!
//! The models use only the public API. Each limiter (burst 1, `T` = 1 000 ns, one shard)
//! waits on a [`ManualClock`] standing at `NOW`: time moves only when a model calls
//! `clock.set`, which fires the clock's own timer on the calling thread, and futures are
//! polled by hand with a counting waker; no executor runs. The limiter and its clock live in
//! a `loom::lazy_static!`, which loom creates afresh for every execution and drops before its
//! leak check, so that a waiting future (which borrows its limiter) can be made on one loom
//! thread and handed to another.
//!
//! A key's state is read back with a zero-bound wait, `until_ready_within(&key, ZERO)`: it
//! refuses with the exact instant the next cell would be admitted at (`next_free`) and writes
//! nothing. (A refused wait counts as `denied` in the stats; the models only read
//! `admitted`.)
//!
//! * **Two reservations on one key** (held and new key): exactly one is ready at once, the
//!   other holds the next instant, and the key's next free instant counts both.
//! * **Reserve vs cancel**: a pending waiter is dropped (its refund CAS) while another
//!   reserves. The allowed final states are enumerated exactly: the refunded instant is
//!   reused, or it is a hole; never an extra cell. Also with the cancelled waiter not last
//!   (no refund can apply), with two cancels at once, and on the direct limiter.
//! * **Refund vs check**: a lock-free check races a refund.
//! * **Drop vs fire**: a waiter is dropped while `clock.set` fires its timer entry: at most
//!   one wake, and the window guarantee holds whichever way the refund goes.
//! * **A stale refund after a reset**: a waiter's refund must not land on the new state of
//!   a key that was reset and checked back up to the waiter's TAT (it did, and over-admitted,
//!   until refunds checked the removal epoch).
//!
//! As in `models.rs`, every two-thread model runs once per role assignment and each thread
//! opens with a Relaxed RMW on a shared gate: loom 0.7's partial-order reduction otherwise
//! misses interleavings of threads that load a word before CASing it (see `race` there).
//! Each model also names its allowed outcomes, and `model` checks that the outcomes reached
//! are exactly those: none other, and each of them at least once (so both orders of every
//! race were tried). The suite takes well under a second at any preemption bound, including
//! effectively unbounded (`LOOM_MAX_PREEMPTIONS=100`).
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
    Admitted, CheckError, DirectLimiter, DirectUntilReady, Limiter, ManualClock, Quota, Timestamp,
    UntilReady, WaitError,
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

impl<F: Future<Output = Result<(), WaitError>> + Unpin> Probe<F> {
    fn new(fut: F) -> Self {
        let count = std::sync::Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(count.clone());
        Probe { fut, count, waker }
    }

    fn poll(&mut self) -> Poll<Result<(), WaitError>> {
        Pin::new(&mut self.fut).poll(&mut Context::from_waker(&self.waker))
    }

    fn wakes(&self) -> usize {
        // ordering: read after the threads are joined.
        self.count.0.load(Ordering::Relaxed)
    }
}

/// A new `until_ready` on the model's key, polled once.
fn wait_keyed() -> (Poll<Result<(), WaitError>>, Probe<UntilReady<'static>>) {
    let mut probe = Probe::new(KEYED.0.until_ready(&KEY));
    (probe.poll(), probe)
}

/// A new `until_ready` on the direct limiter, polled once.
fn wait_direct() -> (
    Poll<Result<(), WaitError>>,
    Probe<DirectUntilReady<'static>>,
) {
    let mut probe = Probe::new(DIRECT.0.until_ready());
    (probe.poll(), probe)
}

/// When a zero-bound wait says the next cell would be admitted (it writes nothing).
fn refused_at(probe: Poll<Result<(), WaitError>>) -> u64 {
    match probe {
        Poll::Ready(Err(WaitError::TooLong { earliest, .. })) => earliest.as_nanos(),
        other => panic!("the key had a free cell: {other:?}"),
    }
}

/// The instant the model's key would admit its next cell at.
fn next_free_keyed() -> u64 {
    let mut probe = Probe::new(KEYED.0.until_ready_within(&KEY, Duration::ZERO));
    refused_at(probe.poll())
}

/// The instant the direct limiter would admit its next cell at.
fn next_free_direct() -> u64 {
    let mut probe = Probe::new(DIRECT.0.until_ready_within(Duration::ZERO));
    refused_at(probe.poll())
}

/// Finds the instant a pending waiter was given, among `candidates` (ascending), by moving
/// the clock: one nanosecond before it the waiter is neither woken nor ready (never early);
/// at it, it is woken exactly once and completes. The clock stays at the instant found.
fn admitted_at<F>(clock: &ManualClock, waiter: &mut Probe<F>, candidates: &[u64]) -> u64
where
    F: Future<Output = Result<(), WaitError>> + Unpin,
{
    for &instant in candidates {
        clock.set(at(instant - 1));
        assert_eq!(waiter.wakes(), 0, "woken before {instant}");
        assert!(waiter.poll().is_pending(), "ready before {instant}");
        clock.set(at(instant));
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

fn seen(result: Result<Admitted, CheckError>, now: u64) -> Seen {
    match result {
        Ok(ok) => Seen::Admitted(now + u64::try_from(ok.reset_after().as_nanos()).unwrap()),
        Err(CheckError::RateLimited { earliest, .. }) => Seen::Limited(earliest.as_nanos()),
        Err(e) => panic!("unexpected {e:?}"),
    }
}

/// Makes the model's key hold cell `NOW` (a waiter that is ready at once) and reserve
/// `NOW + T` for a pending waiter, which is returned. The key is put in the table (expired at
/// `NOW`) first, so every later operation on it takes the lock-free path.
fn one_admitted_one_pending() -> Probe<UntilReady<'static>> {
    assert!(KEYED.0.check_at(&KEY, at(0)).is_ok());
    let (first, _) = wait_keyed();
    assert_eq!(first, Poll::Ready(Ok(())));
    let (second, pending) = wait_keyed();
    assert!(second.is_pending());
    assert_eq!(next_free_keyed(), NOW + 2 * T);
    pending
}

// ---------------------------------------------------------------------------------------
// 1. Two reservations on one key.

/// Which of two racing waiters was ready at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Ready {
    First,
    Second,
}

/// Of two waiters' first polls, exactly one is ready: the other is returned.
fn the_pending_one<F>(
    (r1, w1): (Poll<Result<(), WaitError>>, F),
    (r2, w2): (Poll<Result<(), WaitError>>, F),
) -> (Ready, F) {
    match (r1, r2) {
        (Poll::Ready(Ok(())), Poll::Pending) => (Ready::First, w2),
        (Poll::Pending, Poll::Ready(Ok(()))) => (Ready::Second, w1),
        other => panic!("exactly one must be ready at once: {other:?}"),
    }
}

/// Two threads each make and poll one `until_ready` on the same key, which is free at `NOW`
/// (held but expired with `held`, absent otherwise, so both insert it). Exactly one is ready
/// at once; the other holds `NOW + T`, is never woken before it and is woken once at it; the
/// key's next free instant is `NOW + 2T` (no reservation lost, none duplicated), and the
/// table holds the key once.
fn two_reservations_on_one_key(roles: Roles, held: bool) -> Ready {
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
fn two_reservations_on_a_held_key() {
    model(
        "two_reservations_on_a_held_key",
        &[Ready::First, Ready::Second],
        |roles| two_reservations_on_one_key(roles, true),
    );
}

#[test]
fn two_reservations_on_a_new_key() {
    model(
        "two_reservations_on_a_new_key",
        &[Ready::First, Ready::Second],
        |roles| two_reservations_on_one_key(roles, false),
    );
}

/// The same on a direct limiter.
#[test]
fn two_reservations_on_a_direct_limiter() {
    model(
        "two_reservations_on_a_direct_limiter",
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
// 2. Reserve vs cancel.

/// Cell `NOW` is taken and waiter W1 holds `NOW + T` (the last reservation). One thread
/// drops W1 (its refund CAS, `NOW + 2T -> NOW + T`) while the other reserves with a new
/// waiter W2. The outcome is `(W2's instant, the key's next free instant)`, and exactly two
/// are allowed ([`RESERVE_VS_CANCEL`]):
///
/// * the refund lands first: W2 reuses `NOW + T` and the key is next free at `NOW + 2T`;
/// * W2 reserves first: the refund finds W2's state and gives nothing back, so W2 holds
///   `NOW + 2T`, `NOW + T` is a hole, and the key is next free at `NOW + 3T`.
///
/// A refund applied on top of W2's reservation would show as `(NOW + 2T, NOW + 2T)`: two
/// cells at one instant. The dropped W1 is never woken.
fn reserve_vs_cancel(roles: Roles) -> (u64, u64) {
    let (l, clock) = &*KEYED;
    let w1 = one_admitted_one_pending();
    let w1_wakes = w1.count.clone();
    let ((), (r2, mut w2)) = race(roles, move || drop(w1), wait_keyed);

    assert!(r2.is_pending(), "{r2:?}");
    let free = next_free_keyed();
    let w2_at = admitted_at(clock, &mut w2, &[NOW + T, NOW + 2 * T]);
    // ordering: read after the threads are joined.
    assert_eq!(
        w1_wakes.0.load(Ordering::Relaxed),
        0,
        "a dropped waiter was woken"
    );
    // The setup's check, the waiter ready at `NOW`, and W2.
    assert_eq!(l.stats().admitted, 3);
    (w2_at, free)
}

/// The allowed outcomes of [`reserve_vs_cancel`].
const RESERVE_VS_CANCEL: [(u64, u64); 2] = [(NOW + T, NOW + 2 * T), (NOW + 2 * T, NOW + 3 * T)];

#[test]
fn reserve_vs_cancel_model() {
    model("reserve_vs_cancel", &RESERVE_VS_CANCEL, reserve_vs_cancel);
}

/// As [`reserve_vs_cancel`], but W2 already holds `NOW + 2T` behind W1 when W1 is dropped
/// and W3 reserves: no refund can apply, so W3 always gets `NOW + 3T`, the key is next free
/// at `NOW + 4T`, and W1's `NOW + T` stays a hole (a check there is refused).
fn cancel_not_last_vs_reserve(roles: Roles) -> (u64, u64) {
    let (l, clock) = &*KEYED;
    let w1 = one_admitted_one_pending();
    let (r2, mut w2) = wait_keyed();
    assert!(r2.is_pending());
    let ((), (r3, mut w3)) = race(roles, move || drop(w1), wait_keyed);

    assert!(r3.is_pending(), "{r3:?}");
    let free = next_free_keyed();
    assert_eq!(
        seen(l.check_at(&KEY, at(NOW + T)), NOW + T),
        Seen::Limited(free),
        "the hole was given away"
    );
    assert_eq!(admitted_at(clock, &mut w2, &[NOW + 2 * T]), NOW + 2 * T);
    let w3_at = admitted_at(clock, &mut w3, &[NOW + 3 * T]);
    // The setup's check, the waiter ready at `NOW`, W2 and W3.
    assert_eq!(l.stats().admitted, 4);
    (w3_at, free)
}

#[test]
fn cancel_not_last_vs_reserve_model() {
    model(
        "cancel_not_last_vs_reserve",
        &[(NOW + 3 * T, NOW + 4 * T)],
        cancel_not_last_vs_reserve,
    );
}

/// Cell `NOW` is taken, W1 holds `NOW + T` and W2 `NOW + 2T`; both are dropped at once, on
/// two threads. The outcome is the key's next free instant: if W2 (the last) refunds first,
/// W1 is then the last and refunds too (`NOW + T`); if W1 tries first, W2 is on top of it
/// and only W2's refund applies (`NOW + 2T`, a hole at `NOW + T`). Nothing is refunded
/// twice, and nothing is handed out that is still reserved. Neither task is woken.
fn two_cancels(roles: Roles) -> u64 {
    let (l, _) = &*KEYED;
    let w1 = one_admitted_one_pending();
    let (r2, w2) = wait_keyed();
    assert!(r2.is_pending());
    let wakes = [w1.count.clone(), w2.count.clone()];
    race(roles, move || drop(w1), move || drop(w2));

    // ordering: read after the threads are joined.
    let woken: usize = wakes.iter().map(|c| c.0.load(Ordering::Relaxed)).sum();
    assert_eq!(woken, 0, "a dropped waiter was woken");
    // The setup's check and the waiter ready at `NOW`.
    assert_eq!(l.stats().admitted, 2);
    next_free_keyed()
}

#[test]
fn two_cancels_model() {
    model("two_cancels", &[NOW + T, NOW + 2 * T], two_cancels);
}

/// [`reserve_vs_cancel`] on a direct limiter: the same two outcomes.
#[test]
fn reserve_vs_cancel_direct() {
    model("reserve_vs_cancel_direct", &RESERVE_VS_CANCEL, |roles| {
        let (_, clock) = &*DIRECT;
        assert_eq!(wait_direct().0, Poll::Ready(Ok(())));
        let (r1, w1) = wait_direct();
        assert!(r1.is_pending());
        let ((), (r2, mut w2)) = race(roles, move || drop(w1), wait_direct);

        assert!(r2.is_pending(), "{r2:?}");
        let free = next_free_direct();
        (admitted_at(clock, &mut w2, &[NOW + T, NOW + 2 * T]), free)
    });
}

// ---------------------------------------------------------------------------------------
// 3. Refund vs check.

/// Cell `NOW` is taken and W1 holds `NOW + T`. One thread drops W1 while the other checks at
/// `check_at` (lock-free, explicit time). The outcome is `(the check, the key's next free
/// instant)`. At `NOW + T` the check is admitted only if the refund came first; either way
/// `NOW + T` is used at most once:
///
/// * check first: refused (next `NOW + 2T`), then the refund frees `NOW + T`;
/// * refund first: the check takes `NOW + T`, and the key is next free at `NOW + 2T`.
///
/// At `NOW + 2T` the check is admitted either way, and the refund never applies after it.
/// A refund applied after an admitted check would show as `(Admitted(NOW + 2T), NOW + T)`.
fn refund_vs_check(roles: Roles, check_at: u64) -> (Seen, u64) {
    let (l, _) = &*KEYED;
    let w1 = one_admitted_one_pending();
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
// 4. Drop vs fire.

/// Cell `NOW` is taken and W1 holds `NOW + T`. One thread drops W1 while the other sets the
/// clock to `NOW + T`, firing W1's timer entry. The outcome is how many times W1's task was
/// woken: 0 (dropped first) or 1 (fired first), never more.
///
/// Whether the dropped W1 refunds is a design choice (it does while it is the last
/// reservation, even once its instant has passed, which is harmless: it never proceeded);
/// the window guarantee is not: at `NOW + T` at most one more cell is admitted, and
/// afterwards the key is next free at `NOW + 2T` either way (refunded and taken again, or
/// kept).
fn drop_vs_fire(roles: Roles) -> usize {
    let (l, _) = &*KEYED;
    let w1 = one_admitted_one_pending();
    let w1_wakes = w1.count.clone();
    race(roles, move || drop(w1), move || KEYED.1.set(at(NOW + T)));

    assert_eq!(l.now(), at(NOW + T));
    let first = seen(l.check(&KEY), NOW + T);
    let second = seen(l.check(&KEY), NOW + T);
    assert!(
        matches!(
            (first, second),
            (Seen::Admitted(_), Seen::Limited(_)) | (Seen::Limited(_), Seen::Limited(_))
        ),
        "two cells at one instant: {first:?} {second:?}"
    );
    assert_eq!(second, Seen::Limited(NOW + 2 * T));
    // ordering: read after the threads are joined.
    w1_wakes.0.load(Ordering::Relaxed)
}

#[test]
fn drop_vs_fire_model() {
    model("drop_vs_fire", &[0, 1], drop_vs_fire);
}

// ---------------------------------------------------------------------------------------
// 5. A stale refund after a reset (a known bug).

/// Cell `NOW` is taken and W1 holds `NOW + T` (the key's TAT is `NOW + 2T`); then the key is
/// reset ("its next request is treated as its first"). One thread drops W1 while the other
/// checks the reset key at `NOW` and at `NOW + T`: both are admitted, and the second leaves
/// the TAT at `NOW + 2T` again. Since the reset the key has admitted cells at `NOW` and
/// `NOW + T`; with burst 1 a third at `NOW + T` exceeds the quota.
///
/// W1's refund must not apply to the new incarnation of the key. It does if it runs after
/// the second check: it finds the TAT equal to the one W1 wrote and hands back the new
/// incarnation's cell, so a third check at `NOW + T` is admitted.
///
/// The reset happens before the race rather than in it: the direct limiter's reset is a
/// plain store, and loom 0.7 keeps modification order only partially, so a store racing a
/// CAS lets it show outcomes the memory model forbids (a thread reading the CAS's value
/// after its own later store). Every write in the race below is a CAS.
fn stale_refund_after_reset(roles: Roles) -> Seen {
    let (l, _) = &*KEYED;
    let w1 = one_admitted_one_pending();
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
