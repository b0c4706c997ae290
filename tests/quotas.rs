//! Per-call quotas, `peek`, `undo` and stacked checks (`check_all`), rule by rule on a manual
//! clock, and the window guarantee under mixed quotas by proptest (the rule is in
//! `Limiter::check_with`'s docs: over any window `W`, `sum(n·T) <= W + max(b·T)`).

use std::time::Duration;

use futures_util::FutureExt;
use proptest::prelude::*;
use tollgate::{DirectLimiter, Error, Limiter, ManualClock, Quota};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn keyed<K: std::hash::Hash + ?Sized>(quota: Quota) -> (Limiter<K>, ManualClock) {
    let clock = ManualClock::new();
    let limiter = Limiter::builder(quota).clock(clock.clone()).build();
    (limiter, clock)
}

fn retry(r: Result<tollgate::Admitted, Error>) -> Option<Duration> {
    r.unwrap_err().retry_after()
}

// ---------------------------------------------------------------------------------------------
// Per-call quotas
// ---------------------------------------------------------------------------------------------

#[test]
fn each_call_judges_the_key_by_the_quota_it_brings() {
    let (l, _clock) = keyed::<str>(Quota::per_second(1));
    let fast = Quota::per_second(10); // T = 100 ms, b = 10
    for left in (0..10).rev() {
        assert_eq!(l.check_with("k", fast).unwrap().remaining(), left);
    }
    assert_eq!(retry(l.check_with("k", fast)), Some(ms(100)));
    // The default quota (T = 1 s, b = 1) sees the same 1 s of debt.
    assert_eq!(retry(l.check("k")), Some(ms(1_000)));
    // Other keys use the default.
    assert!(l.check("other").is_ok());
    assert!(l.check("other").is_err());
}

#[test]
fn debt_carries_over_as_time_between_quotas() {
    let (l, clock) = keyed::<str>(Quota::per_second(1));
    let slow = Quota::per_minute(1); // T = 60 s, b = 1
    let fast = Quota::per_second(10);
    assert!(l.check_with("k", slow).is_ok()); // TAT = 60 s
    // Under the fast quota the key owes 60 s, minus the 900 ms its burst tolerates.
    assert_eq!(retry(l.check_with("k", fast)), Some(ms(59_100)));
    clock.advance(ms(59_100));
    assert!(l.check_with("k", fast).is_ok());
}

#[test]
fn set_quota_changes_only_the_default() {
    let (l, _clock) = keyed::<str>(Quota::per_second(1));
    let own = Quota::per_second(5);
    l.set_quota(Quota::per_minute(1));
    assert_eq!(l.check_with("a", own).unwrap().limit(), 5);
    assert_eq!(l.check("b").unwrap().limit(), 1);
}

#[test]
fn a_per_call_quota_checks_n_against_its_own_burst() {
    let (l, _clock) = keyed::<u32>(Quota::per_second(1));
    let wide = Quota::per_second(1).allow_burst(8);
    assert!(l.check_n(&1, 2).unwrap_err().is_insufficient_capacity());
    assert_eq!(l.check_n_with(&1, 8, wide).unwrap().remaining(), 0);
    assert_eq!(
        l.check_n_with(&1, 9, wide),
        Err(Error::InsufficientCapacity {
            requested: 9,
            burst: 8
        })
    );
}

#[test]
fn waiters_with_their_own_quotas_share_the_key_queue_in_order() {
    let (l, clock) = keyed::<str>(Quota::per_second(10).allow_burst(1)); // T = 100 ms
    let slow = Quota::per_second(2).allow_burst(1); // T = 500 ms
    assert!(l.check("k").is_ok()); // TAT = 100 ms
    let mut first = Box::pin(l.until_ready_with("k", slow)); // reserves: admitted at 100 ms
    let mut second = Box::pin(l.until_ready("k")); // then the default: 100 + 500 = 600 ms
    assert!(first.as_mut().now_or_never().is_none());
    assert!(second.as_mut().now_or_never().is_none());
    clock.advance(ms(100));
    assert_eq!(first.as_mut().now_or_never(), Some(Ok(())));
    clock.advance(ms(499));
    assert!(second.as_mut().now_or_never().is_none());
    clock.advance(ms(1));
    assert_eq!(second.as_mut().now_or_never(), Some(Ok(())));
}

#[test]
fn a_bounded_wait_predicts_with_the_quotas_queued_ahead() {
    let (l, _clock) = keyed::<str>(Quota::per_second(10).allow_burst(1)); // T = 100 ms
    let slow = Quota::per_second(1); // T = 1 s, b = 1
    assert!(l.check("k").is_ok()); // TAT = 100 ms
    let mut head = Box::pin(l.until_ready("k")); // admitted at 100 ms, TAT 200 ms
    let mut slow_one = Box::pin(l.until_ready_with("k", slow)); // costs 1 s behind the head
    assert!(head.as_mut().now_or_never().is_none());
    assert!(slow_one.as_mut().now_or_never().is_none());
    // Behind them, a default waiter comes at 200 ms + 1 s = 1.2 s.
    let err = l.until_ready("k").within(ms(1_199)).now_or_never();
    assert_eq!(
        err.map(|r| r.unwrap_err().is_rate_limited()),
        Some(true),
        "predicted past its bound"
    );
    let mut fits = Box::pin(l.until_ready("k").within(ms(1_200)));
    assert!(fits.as_mut().now_or_never().is_none()); // queued, not refused
}

// ---------------------------------------------------------------------------------------------
// peek
// ---------------------------------------------------------------------------------------------

#[test]
fn peek_answers_as_check_would_and_writes_nothing() {
    let (l, clock) = keyed::<str>(Quota::per_second(2));
    assert_eq!(l.peek("new").unwrap().remaining(), 1);
    assert_eq!(l.stats().keys_held, 0, "a peek does not insert");
    assert_eq!(
        l.stats().admitted + l.stats().denied,
        0,
        "a peek is not counted"
    );
    assert!(l.check_n("k", 2).is_ok());
    let peeked = l.peek("k");
    assert_eq!(peeked, l.check("k")); // the same answer, the same retry
    assert_eq!(retry(peeked), Some(ms(500)));
    clock.advance(ms(500));
    assert_eq!(l.peek("k").unwrap().remaining(), 0);
    assert_eq!(l.peek("k").unwrap().remaining(), 0);
    assert!(l.check("k").is_ok());
}

#[test]
fn direct_peek_writes_nothing() {
    let clock = ManualClock::new();
    let d = DirectLimiter::with_clock(Quota::per_second(1), clock.clone());
    assert!(d.peek().is_ok());
    assert!(d.peek().is_ok());
    assert!(d.check().is_ok());
    assert_eq!(retry(d.peek()), Some(ms(1_000)));
    assert_eq!(d.stats().admitted, 1);
}

// ---------------------------------------------------------------------------------------------
// undo
// ---------------------------------------------------------------------------------------------

#[test]
fn undo_is_exact_when_nothing_wrote_the_key_since() {
    let (l, _clock) = keyed::<str>(Quota::per_second(3));
    let first = l.check("k").unwrap();
    let two = l.check_n("k", 2).unwrap();
    assert!(l.check("k").is_err());
    assert!(l.undo("k", two)); // the latest write: exact
    assert_eq!(l.check("k").unwrap().remaining(), 1);
    assert!(
        !l.undo("k", first),
        "another admission stacked on it: a no-op"
    );
    assert_eq!(l.check("k").unwrap().remaining(), 0, "and no extra cell");
    assert!(l.check("k").is_err());
}

#[test]
fn undo_never_lands_on_a_reset_key_checked_back_to_the_same_state() {
    let (l, _clock) = keyed::<str>(Quota::per_second(1));
    let before_reset = l.check("k").unwrap();
    assert!(l.reset("k"));
    let after_reset = l.check("k").unwrap(); // the same TAT as before the reset
    assert_eq!(after_reset.reset_after(), before_reset.reset_after());
    assert!(!l.undo("k", before_reset), "the reset moved the epoch");
    assert!(l.check("k").is_err(), "the cell after the reset stays used");
    assert!(l.undo("k", after_reset));
}

/// Keys of the shard forgotten as expired, by this very check's insert or by other keys'
/// inserts (as under any churn of clients), leave an undo exact: a forgotten key's next
/// incarnation starts from the shard's horizon, so it never reaches a state an old write
/// stored. One shard of 4 keys at 1/min, burst 1.
#[test]
fn undo_stays_exact_while_expired_keys_of_its_shard_are_forgotten() {
    let clock = ManualClock::new();
    let l: Limiter<u64> = Limiter::builder(Quota::per_minute(1))
        .shards(1)
        .capacity(4)
        .clock(clock.clone())
        .build();
    for k in 0..4 {
        assert!(l.check(&k).is_ok());
    }
    clock.advance(ms(70_000)); // all four expired
    // The check's own insert, at the cap, reclaims an expired key (or all four): a full
    // table never evicts while an expired key holds a slot.
    let own = l.check(&100).unwrap();
    assert!(l.stats().expired_reclaimed >= 1);
    assert!(l.undo(&100, own), "refused after its own insert's reclaim");
    assert!(l.peek(&100).is_ok(), "its cell is back");
    // Alice's check, then a key that expires long before her, then new keys until one of
    // them reclaims an expired key: her undo comes after that.
    let alice = l.check(&200).unwrap(); // live for a minute
    assert!(l.check_n_with(&250, 1, Quota::per_second(1)).is_ok()); // expired in 1 s
    clock.advance(ms(2_000));
    let before = l.stats().expired_reclaimed;
    for k in 300..310 {
        if l.stats().expired_reclaimed > before {
            break;
        }
        assert!(l.check(&k).is_ok());
    }
    assert!(l.stats().expired_reclaimed > before, "no key was reclaimed");
    assert_eq!(l.stats().forced_evictions, 0);
    assert!(l.undo(&200, alice), "refused after another key's reclaim");
    assert!(l.peek(&200).is_ok(), "alice's cell is back");
}

/// A key forgotten as expired and checked again is a new incarnation: an undo of the old
/// one's write never gives it a cell, though the new one starts where the old one ended.
#[test]
fn a_stale_undo_never_gives_a_new_incarnation_a_cell() {
    let clock = ManualClock::new();
    let l: Limiter<u64> = Limiter::builder(Quota::per_second(1))
        .shards(1)
        .keep_expired(Duration::ZERO)
        .clock(clock.clone())
        .build();
    let old = l.check(&1).unwrap(); // TAT 1 s
    assert!(l.check(&2).is_ok());
    clock.advance(ms(1_500)); // both expired
    // New keys, until keys 1 and 2 are forgotten (reclaimed, or dropped by a growth).
    for k in 3..10_000 {
        assert!(l.check(&k).is_ok());
        if l.stats().expired_reclaimed == 2 {
            break;
        }
    }
    assert_eq!(
        l.stats().expired_reclaimed,
        2,
        "keys 1 and 2 were not forgotten"
    );
    assert!(l.peek(&1).is_ok() && l.stats().keys_held >= 2);
    // Key 1 again, checked at 1 s (behind the clock, at its old TAT): it starts at the
    // horizon, 1 s, and takes its one cell.
    let behind = l.now() - ms(500);
    let again = l.check_at(&1, behind).unwrap();
    assert!(!l.undo(&1, old), "the old incarnation's write is gone");
    assert!(l.check_at(&1, behind).is_err(), "and gave no extra cell");
    // Undone to the horizon, the new incarnation holds the very state the old write left:
    // the old undo then gives back what that write took, and no more.
    assert!(l.undo(&1, again));
    assert!(l.undo(&1, old));
    assert!(l.check_at(&1, behind).is_ok());
    assert!(l.check_at(&1, behind).is_err());
    assert_eq!(l.stats().forced_evictions, 0);

    // An undo of a key the table no longer holds inserts nothing, though the shard's
    // horizon is the TAT it wrote.
    let clock = ManualClock::new();
    let l: Limiter<u64> = Limiter::builder(Quota::per_second(1))
        .shards(1)
        .capacity(2)
        .clock(clock.clone())
        .build();
    let gone = l.check(&5).unwrap();
    clock.advance(ms(1_500));
    assert!(l.check(&6).is_ok());
    assert!(l.check(&7).is_ok()); // at the cap: forgets key 5
    assert_eq!(l.stats().expired_reclaimed, 1);
    assert!(!l.undo(&5, gone));
    assert_eq!(l.stats().keys_held, 2);
    assert_eq!(l.stats().forced_evictions, 0);
}

#[test]
fn undoing_zero_cells_or_an_undone_admission_does_nothing() {
    let (l, _clock) = keyed::<str>(Quota::per_second(2));
    let nothing = l.check_n("k", 0).unwrap();
    assert!(!l.undo("k", nothing));
    let ok = l.check("k").unwrap();
    assert!(l.undo("k", ok));
    assert!(
        !l.undo("k", ok),
        "a second undo finds the state it restored"
    );
    assert_eq!(l.check_n("k", 2).unwrap().remaining(), 0);
}

#[test]
fn direct_undo_is_exact_and_then_a_no_op() {
    let clock = ManualClock::new();
    let d = DirectLimiter::with_clock(Quota::per_second(1), clock);
    let ok = d.check().unwrap();
    assert!(d.undo(ok));
    let again = d.check().unwrap();
    d.reset();
    assert!(d.check().is_ok());
    assert!(!d.undo(again), "the reset moved the epoch");
    assert!(d.check().is_err());
}

// ---------------------------------------------------------------------------------------------
// Stacked checks
// ---------------------------------------------------------------------------------------------

/// New clients whose per-client keys take the slots of expired ones (a proxy's churn), each
/// refused by an exhausted global budget: their per-client limits keep every cell, though
/// each insert forgot an expired key on its way.
#[test]
fn a_global_refusal_costs_new_clients_nothing_while_expired_clients_are_forgotten() {
    let clock = ManualClock::new();
    let per_ip: Limiter<u64> = Limiter::builder(Quota::per_second(1).allow_burst(2))
        .shards(1)
        .capacity(16)
        .clock(clock.clone())
        .build();
    let global = DirectLimiter::with_clock(Quota::per_hour(1), clock.clone());
    assert!(global.check().is_ok()); // the budget is spent
    for round in 0..4u64 {
        // Sixteen clients the table holds, expired by the next round.
        for ip in round * 1_000..round * 1_000 + 16 {
            assert!(per_ip.check(&ip).is_ok());
        }
        clock.advance(ms(5_000));
        for ip in round * 1_000 + 500..round * 1_000 + 532 {
            let refused = tollgate::check_all([per_ip.gate(&ip), global.gate()]).unwrap_err();
            assert_eq!(refused.index, 1);
            assert_eq!(
                per_ip.peek(&ip).map(|a| a.remaining()),
                Ok(1),
                "client {ip} lost its cell (round {round})"
            );
        }
    }
    assert!(per_ip.stats().expired_reclaimed >= 16 * 4);
}

#[test]
fn a_refusal_by_a_later_limit_costs_the_earlier_ones_nothing() {
    let clock = ManualClock::new();
    let per_ip: Limiter<str> = Limiter::builder(Quota::per_minute(5))
        .clock(clock.clone())
        .build();
    let per_token: Limiter<u64> = Limiter::builder(Quota::per_minute(100))
        .clock(clock.clone())
        .build();
    let global = DirectLimiter::with_clock(Quota::per_second(2), clock.clone());
    let stack = || tollgate::check_all([per_ip.gate("ip"), per_token.gate(&7), global.gate()]);
    let [ip, token, all] = stack().unwrap();
    assert_eq!(
        (ip.remaining(), token.remaining(), all.remaining()),
        (4, 99, 1)
    );
    assert!(stack().is_ok());
    let refused = stack().unwrap_err();
    assert_eq!(refused.index, 2);
    assert!(refused.error.is_rate_limited());
    // Both refused stacks left the earlier limits as they were.
    assert_eq!(per_ip.peek("ip").unwrap().remaining(), 2);
    assert_eq!(per_token.peek(&7).unwrap().remaining(), 97);
    // A refusal by the first limit touches nothing after it.
    assert!(per_ip.check_n("ip", 3).is_ok());
    clock.advance(ms(500)); // the global budget has a cell again
    assert_eq!(stack().unwrap_err().index, 0);
    assert_eq!(global.peek().unwrap().remaining(), 0);
    assert_eq!(per_token.peek(&7).unwrap().remaining(), 97);
}

#[test]
fn gates_carry_their_own_cells_and_quotas() {
    let (l, _clock) = keyed::<str>(Quota::per_second(1));
    let wide = Quota::per_second(10);
    let [ok] = tollgate::check_all([l.gate("k").n(4).quota(wide)]).unwrap();
    assert_eq!(ok.remaining(), 6);
    let refused = tollgate::check_all([l.gate("j"), l.gate("k").n(11).quota(wide)]).unwrap_err();
    assert_eq!(refused.index, 1);
    assert!(refused.error.is_insufficient_capacity());
    assert!(l.check("j").is_ok(), "the refused stack gave j's cell back");
}

// ---------------------------------------------------------------------------------------------
// The window guarantee under mixed quotas
// ---------------------------------------------------------------------------------------------

/// Quotas a key is checked under, by index: (interval in ms, burst).
const QUOTAS: [(u64, u32); 3] = [(10, 1), (25, 4), (100, 2)];

fn quota(i: usize) -> Quota {
    let (interval, burst) = QUOTAS[i];
    Quota::with_period(ms(interval)).allow_burst(burst)
}

/// One step: advance the clock, check under a quota, then perhaps undo the admission `back`
/// places from the latest (0: the one just made), which is exact only if it is the latest
/// write.
#[derive(Debug, Clone, Copy)]
struct Step {
    gap_ms: u64,
    quota: usize,
    n: u32,
    undo_back: Option<usize>,
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    let undo = prop::option::weighted(0.3, 0..3usize);
    let step =
        (0..40u64, 0..QUOTAS.len(), 0..=4u32, undo).prop_map(|(gap_ms, quota, n, undo_back)| {
            Step {
                gap_ms,
                quota,
                n,
                undo_back,
            }
        });
    prop::collection::vec(step, 1..200)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Over any window between two admissions, the cells admitted (and not undone) cost at
    /// most the window plus the largest `b·T` of the quotas used.
    #[test]
    fn mixed_quotas_keep_the_window_in_time(steps in steps()) {
        let (l, clock) = keyed::<str>(quota(0));
        let max_bt = QUOTAS.iter().map(|&(t, b)| t * 1_000_000 * u64::from(b)).max().unwrap();
        // (instant, n·T in ns, the admission, still counted)
        let mut admitted = Vec::new();
        let mut now = 0;
        for step in steps {
            clock.advance(ms(step.gap_ms));
            now += step.gap_ms * 1_000_000;
            let q = quota(step.quota);
            if let Ok(ok) = l.check_n_with("k", step.n, q) {
                let cost = u64::from(step.n) * QUOTAS[step.quota].0 * 1_000_000;
                admitted.push((now, cost, ok, true));
            }
            if let Some(back) = step.undo_back {
                if let Some(i) = admitted.len().checked_sub(back + 1) {
                    if admitted[i].3 && l.undo("k", admitted[i].2) {
                        admitted[i].3 = false;
                    }
                }
            }
        }
        let counted: Vec<(u64, u64)> =
            admitted.iter().filter(|a| a.3).map(|&(t, c, _, _)| (t, c)).collect();
        for i in 0..counted.len() {
            let mut cost = 0;
            for &(t, c) in &counted[i..] {
                cost += c;
                let window = t - counted[i].0;
                prop_assert!(
                    cost <= window + max_bt,
                    "cells costing {cost} ns in a window of {window} ns from {}", counted[i].0
                );
            }
        }
    }
}
