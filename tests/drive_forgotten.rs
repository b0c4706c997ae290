//! A forgotten runtime driver: [`tollgate::timer::drive`] polled once (so it holds the claim)
//! and then `mem::forget`-ten. It keeps the claim for the rest of the process, so this test
//! has a binary of its own; the backstop thread must still fire every sleep, at most 10 ms
//! late (not asserted: the bound here is a hang guard).

// The runtime driver drives the global timer, which loom builds leave out.
#![cfg(not(tollgate_loom))]

use std::time::{Duration, Instant};

use futures_util::FutureExt;
use tollgate::{Limiter, Quota};

#[test]
fn a_forgotten_driver_leaves_the_timer_to_the_backstop_thread() {
    let mut driver = tollgate::timer::drive(|_| std::future::pending::<()>());
    assert!((&mut driver).now_or_never().is_none(), "it attached");
    std::mem::forget(driver);
    assert!(tollgate::timer::is_driven());
    // A second driver is refused: the forgotten one holds the claim.
    assert!(
        tollgate::timer::drive(|_| std::future::pending::<()>())
            .now_or_never()
            .is_some()
    );
    let guard = Duration::from_secs(60);
    let start = Instant::now();
    let deadline = start + Duration::from_millis(3);
    futures_executor::block_on(tollgate::timer::sleep_until(deadline));
    assert!(Instant::now() >= deadline);
    // Waiting on a queue: the hand-overs run on the backstop thread.
    let limiter = Limiter::keyed(Quota::per_second(500).allow_burst(1));
    futures_executor::block_on(async {
        for _ in 0..10 {
            limiter.until_ready(&1u8).await.unwrap();
        }
    });
    assert!(start.elapsed() >= Duration::from_millis(9 * 2));
    assert!(start.elapsed() < guard, "hang guard");
}
