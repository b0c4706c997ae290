//! The global timer: the process-wide real-time `TimerCore` and the thread that drives it,
//! started lazily by the first registration that needs it, then alternating driver turns
//! and parking for the rest of the process.
//!
//! The two live together so the arrow points one way: this file builds the timer with
//! `unpark` as its way to wake the driver, and `driver.rs` knows nothing of threads.
//!
//! It parks with `park_timeout(next - now)` while anything is pending and with `park()` when
//! nothing is, so an idle timer costs no CPU. Registrants unpark it only when they move its
//! next wake-up earlier (see `driver.rs` for why no registration is lost); `park` may also
//! return spuriously, which costs one extra turn. On Linux the thread asks for a 1 µs timer
//! slack, because the default 50 µs makes every timed park oversleep by about that much.

use std::sync::OnceLock;
use std::thread::{self, Thread};
use std::time::Duration;

use super::driver::TimerCore;

/// The process-wide real timer; its thread starts on the first registration that unparks it.
pub(crate) fn global() -> &'static TimerCore {
    static GLOBAL: OnceLock<TimerCore> = OnceLock::new();
    GLOBAL.get_or_init(|| TimerCore::real(unpark))
}

/// Unparks the timer thread, starting it first if this is the first call.
///
/// # Panics
///
/// If the operating system refuses to start the thread.
fn unpark() {
    static THREAD: OnceLock<Thread> = OnceLock::new();
    THREAD.get_or_init(start).unpark();
}

fn start() -> Thread {
    thread::Builder::new()
        .name("tollgate-timer".into())
        .spawn(run)
        .expect("tollgate: failed to spawn the timer thread")
        .thread()
        .clone()
}

fn run() {
    let timer = global();
    set_timer_slack();
    loop {
        let Some(next) = timer.turn(timer.now()) else {
            continue; // Registrations arrived during the turn.
        };
        if next == u64::MAX {
            thread::park();
            continue;
        }
        // Re-read the time: waking the batch may have taken a while.
        let now = timer.now();
        if next > now {
            thread::park_timeout(Duration::from_nanos(next - now));
        }
    }
}

/// Asks Linux for a 1 µs timer slack on this thread (the default is 50 µs): timed parks then
/// oversleep by microseconds instead of tens of them. Best effort; other systems keep theirs.
#[cfg(target_os = "linux")]
fn set_timer_slack() {
    use std::ffi::{c_int, c_ulong};

    unsafe extern "C" {
        fn prctl(option: c_int, ...) -> c_int;
    }
    const PR_SET_TIMERSLACK: c_int = 29;
    const SLACK_NANOS: c_ulong = 1_000;
    // SAFETY: 1. `prctl` is the C library's, declared with its C signature (variadic after
    //    the option).
    // 2. PR_SET_TIMERSLACK takes one unsigned long and touches only the calling thread's
    //    timer slack; it reads and writes no memory of ours.
    // 3. A failure only returns -1; ignoring it keeps the default slack.
    let _ = unsafe { prctl(PR_SET_TIMERSLACK, SLACK_NANOS) };
}

#[cfg(not(target_os = "linux"))]
fn set_timer_slack() {}
