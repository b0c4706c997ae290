//! `ClockSource`: a limiter's clock together with the timer its waits sleep on.
//!
//! The only place that binds clocks (`time.rs`, `manual_clock.rs`) to timers (`timer/`):
//! the limiters take their clock from here, and the waiting engine asks it for the sleep
//! that ends at a timestamp of that clock.

use std::any::Any;
// `ClockSource` holds a foreign clock in std's `Arc` even under loom: the models pass time
// in explicitly or use a `ManualClock`, and loom's `Arc` cannot hold a `dyn Clock`.
use std::sync::Arc;
use std::time::Instant;

use crate::manual_clock::ManualClock;
use crate::time::{Clock, MonotonicClock, Timestamp, nanos_since_origin};
use crate::timer::{Sleep, TimerRef};
use crate::tsc_clock::TscClock;

/// The most a clock of the caller's own may read when a limiter takes it: half the horizon
/// (`MAX_NOW`), 9.1 years.
const RECENT_ORIGIN: u64 = 1 << 58;

/// The limiter's clock: the monotonic default without dynamic dispatch, or any [`Clock`].
#[derive(Debug, Clone)]
pub(crate) enum ClockSource {
    Monotonic(MonotonicClock),
    /// Waits sleep on the clock's own timer, fired by `advance`/`set`.
    Manual(ManualClock),
    /// The time-stamp counter, without dynamic dispatch; waits sleep as a custom clock's do
    /// (its readings drift from the timer's by the calibration's error).
    Tsc(TscClock),
    /// Waits sleep on the real timer, for as long as this clock says is left.
    Custom(Arc<dyn Clock>),
}

impl ClockSource {
    /// Recognises tollgate's own clocks, so checks avoid dynamic dispatch and waits on a
    /// `ManualClock` use its timer.
    ///
    /// # Panics
    ///
    /// If a clock of the caller's own already reads more than half of the limiter's
    /// horizon (2^58 ns, 9.1 years) after its origin: one counting from the Unix epoch,
    /// say. Past 2^59 ns a limiter's time saturates and stands still, so such a clock would
    /// refuse every key over its burst for good, with a `Retry-After` that never comes true;
    /// better a clear panic where the limiter is configured.
    #[track_caller]
    pub(crate) fn from_clock<C: Clock>(clock: C) -> ClockSource {
        let any: Box<dyn Any> = Box::new(clock);
        let any = match any.downcast::<MonotonicClock>() {
            Ok(c) => return ClockSource::Monotonic(*c),
            Err(any) => any,
        };
        let any = match any.downcast::<ManualClock>() {
            Ok(c) => return ClockSource::Manual(*c),
            Err(any) => any,
        };
        let any = match any.downcast::<TscClock>() {
            Ok(c) => {
                return match c.fallback() {
                    Some(monotonic) => ClockSource::Monotonic(monotonic),
                    None => ClockSource::Tsc(*c),
                };
            }
            Err(any) => any,
        };
        let Ok(clock) = any.downcast::<C>() else {
            unreachable!("the box holds a C")
        };
        let read = clock.now().as_nanos();
        assert!(
            read <= RECENT_ORIGIN,
            "tollgate: the clock reads {read} ns, {years:.1} years after its origin; a \
             limiter's time stops 2^59 ns (18.3 years) after it, so count from a recent origin \
             (the time the program started, say), not from the Unix epoch (see `Clock`)",
            years = read as f64 / 31_557_600e9,
        );
        ClockSource::Custom(Arc::new(*clock))
    }

    /// Inlined into every check with the two clocks a server runs on; the others out of
    /// line, so that the check stays short (BENCHMARKS.md, A: every instruction counts).
    #[inline(always)]
    pub(crate) fn now(&self) -> Timestamp {
        match self {
            ClockSource::Monotonic(c) => c.now(),
            ClockSource::Tsc(c) => c.now(),
            ClockSource::Manual(c) => read_out_of_line(c),
            ClockSource::Custom(c) => read_out_of_line(&**c),
        }
    }

    /// This clock's readings are the time of the timer its sleeps register with (tollgate's
    /// own clocks), so one reading serves as the other (`Sleep::poll_at`).
    pub(crate) fn is_timer_time(&self) -> bool {
        !matches!(self, ClockSource::Custom(_) | ClockSource::Tsc(_))
    }

    /// A sleep that ends when this clock reaches `at` (never before).
    pub(crate) fn sleep_until(&self, at: u64) -> Sleep {
        match self {
            // MonotonicClock counts from the timer's origin: its timestamps are timer time.
            ClockSource::Monotonic(_) => Sleep::new(TimerRef::Global, at),
            ClockSource::Manual(c) => Sleep::new(c.timer(), at),
            // A foreign clock: wait in real time for as long as it says is left. Exact for
            // clocks that run at real time's rate; documented on `Clock`.
            ClockSource::Tsc(c) => real_time_sleep(c, at),
            ClockSource::Custom(c) => real_time_sleep(&**c, at),
        }
    }
}

/// A clock read kept out of the check's inlined path ([`ClockSource::now`]).
#[inline(never)]
fn read_out_of_line(clock: &dyn Clock) -> Timestamp {
    clock.now()
}

/// A sleep in real time for as long as `clock` says is left until `at`.
fn real_time_sleep(clock: &dyn Clock, at: u64) -> Sleep {
    let left = at.saturating_sub(clock.now().as_nanos());
    let real_now = nanos_since_origin(Instant::now());
    Sleep::new(TimerRef::Global, real_now.saturating_add(left))
}
