//! A runtime whose sleeps end before their instants (tokio's paused clock, a simulated one)
//! given to [`tollgate::timer::drive`]: re-arming its sleep would spin, so the driver
//! detaches and completes, and the thread drives. A binary of its own: the driver's claim is
//! process-wide.

// The runtime driver drives the global timer, which loom builds leave out.
#![cfg(not(tollgate_loom))]

use futures_util::FutureExt;
use tollgate::{Limiter, Quota};

#[test]
fn a_runtime_whose_sleeps_end_early_gives_the_timer_back() {
    let limiter = Limiter::keyed(Quota::per_second(100).allow_burst(1));
    assert!(limiter.check(&1u8).is_ok());
    // Its sleep completes at once, whatever the instant.
    let mut driver = tollgate::timer::drive(|_| std::future::ready(()));
    assert!((&mut driver).now_or_never().is_none(), "it attached");
    assert!(tollgate::timer::is_driven());
    // A wait 10 ms out: the driver's sleep for it ends at once, before its instant.
    let mut wait = Box::pin(limiter.until_ready(&1u8));
    assert!((&mut wait).now_or_never().is_none());
    assert!(
        (&mut driver).now_or_never().is_some(),
        "the driver spins on sleeps that end early instead of detaching"
    );
    assert!(!tollgate::timer::is_driven());
    // The thread drives again: the wait completes.
    futures_executor::block_on(wait).unwrap();
}
