//! [`TscClock`]: the CPU's time-stamp counter as a limiter's clock, where it is safe to use.
//!
//! Why a second clock: on one hot key, reading `Instant` is about half of a `check` (the
//! kernel's vDSO reads the counter too, but behind a sequence lock, a page of parameters and
//! an ordering fence), and on many keys that fence keeps one check's cache miss from
//! overlapping the next check's (BENCHMARKS.md, scenarios A and B). A bare counter read and
//! one multiply avoid both.
//!
//! When it is safe, and the argument for `now` never decreasing:
//!
//! * The counter must tick at a constant rate whatever the core's frequency or sleep state
//!   (an *invariant* TSC: CPUID leaf `0x8000_0007`, EDX bit 8), and agree across cores. The
//!   second is what Linux checks before it makes the TSC its clocksource (a synchronisation
//!   test at boot and a watchdog after), so the clock requires `current_clocksource` to be
//!   `tsc`. Anywhere else (another OS, another architecture, a VM whose kernel chose another
//!   clocksource) it is `Instant`, as the default clock.
//! * Ticks become nanoseconds by a fixed multiply calibrated once per process against
//!   `Instant` over 10 ms, on the same origin as [`MonotonicClock`](crate::MonotonicClock):
//!   non-decreasing in the counter. The calibration's error (a few parts per million) is a
//!   rate error of that size, far below any quota's precision, and readings drift from
//!   `Instant` by as much, which is why waits on this clock sleep for as long as it says is
//!   left rather than until its reading (`clock_source.rs`).
//! * A bare `rdtsc` is not ordered with the instructions around it, so two reads on one
//!   thread could in principle come back swapped by a few cycles: each thread keeps the last
//!   value it returned and never returns less. Between threads, a reading may trail a value
//!   another thread published a few nanoseconds before, as two checks a few nanoseconds apart
//!   may run in either order; GCRA takes every check at the time it reads.

use std::fmt;
use std::sync::OnceLock;

use crate::time::{Clock, MonotonicClock, Timestamp};

/// The CPU's time-stamp counter as a [`Clock`]: about a third of `Instant`'s cost a reading,
/// on x86-64 Linux where the kernel itself keeps time with it; `Instant` everywhere else.
///
/// Pick it for a limiter checked at high rates with [`check`](crate::Limiter::check) (each
/// call reads the clock), on machines you know: it is exact where the kernel's clocksource is
/// `tsc` with an invariant counter (most x86-64 servers, and cloud VMs whose hypervisor
/// exposes a stable TSC), and falls back to the default by itself where it is not
/// ([`is_tsc`](TscClock::is_tsc) says which). A caller that reads the time once per batch
/// and calls [`check_at`](crate::Limiter::check_at) gains nothing from it. The default stays
/// [`MonotonicClock`]: `Instant` is monotonic on every platform Rust supports, with no
/// condition to check.
///
/// Timestamps count from the same origin as [`MonotonicClock`]'s and agree with them to within
/// the calibration's few parts per million. The first `TscClock::new()` of a process takes
/// about 10 ms (the calibration); later ones are free.
///
/// # Examples
///
/// ```
/// use tollgate::{Clock, Limiter, Quota, TscClock};
///
/// let clock = TscClock::new();
/// let limiter = Limiter::<u64>::builder(Quota::per_second(1)).clock(clock).build();
/// assert!(limiter.check(&7).is_ok());
/// assert!(limiter.check(&7).is_err());
/// let (a, b) = (clock.now(), clock.now());
/// assert!(b >= a);
/// println!("time-stamp counter: {}", clock.is_tsc());
/// ```
#[derive(Clone, Copy)]
pub struct TscClock {
    source: Source,
}

#[derive(Clone, Copy)]
enum Source {
    Tsc(&'static Calibration),
    Fallback(MonotonicClock),
}

/// Ticks to nanoseconds: `base + (ticks - tsc0) · mult / 2^32`.
#[derive(Debug)]
struct Calibration {
    tsc0: u64,
    base: u64,
    /// Nanoseconds per tick, as a 32.32 fixed-point number.
    mult: u64,
}

impl TscClock {
    /// The counter if it is usable here (see the type's docs), else `Instant`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Clock, MonotonicClock, TscClock};
    ///
    /// let (tsc, monotonic) = (TscClock::new(), MonotonicClock::new());
    /// let (a, b) = (tsc.now(), monotonic.now());
    /// let gap = a.as_nanos().abs_diff(b.as_nanos());
    /// assert!(gap < Duration::from_secs(1).as_nanos() as u64); // one origin, one rate
    /// ```
    pub fn new() -> TscClock {
        static CALIBRATION: OnceLock<Option<Calibration>> = OnceLock::new();
        let source = match CALIBRATION.get_or_init(calibrate) {
            Some(calibration) => Source::Tsc(calibration),
            None => Source::Fallback(MonotonicClock::new()),
        };
        TscClock { source }
    }

    /// Whether this clock reads the time-stamp counter (`false`: it reads `Instant`).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::TscClock;
    ///
    /// if !TscClock::new().is_tsc() {
    ///     eprintln!("no usable time-stamp counter here: TscClock reads Instant");
    /// }
    /// # #[cfg(not(target_arch = "x86_64"))]
    /// # assert!(!TscClock::new().is_tsc());
    /// ```
    pub fn is_tsc(&self) -> bool {
        matches!(self.source, Source::Tsc(_))
    }

    /// The default clock this one stands in for, when it does (the limiter reads that one
    /// without going through this type).
    pub(crate) fn fallback(&self) -> Option<MonotonicClock> {
        match self.source {
            Source::Tsc(_) => None,
            Source::Fallback(clock) => Some(clock),
        }
    }
}

impl Default for TscClock {
    fn default() -> Self {
        TscClock::new()
    }
}

impl fmt::Debug for TscClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TscClock")
            .field("tsc", &self.is_tsc())
            .finish()
    }
}

impl Clock for TscClock {
    #[inline]
    fn now(&self) -> Timestamp {
        match self.source {
            Source::Tsc(c) => Timestamp::from_nanos(monotonic_per_thread(c.nanos(rdtsc()))),
            Source::Fallback(clock) => clock.now(),
        }
    }
}

impl Calibration {
    #[inline]
    fn nanos(&self, ticks: u64) -> u64 {
        // A reading below `tsc0` (another core's counter a hair behind) counts as `tsc0`.
        let elapsed = ticks.saturating_sub(self.tsc0);
        let ns = (u128::from(elapsed) * u128::from(self.mult)) >> 32;
        self.base
            .saturating_add(u64::try_from(ns).unwrap_or(u64::MAX))
    }
}

/// `nanos`, or the last value this thread returned if that is later (two unordered counter
/// reads may come back swapped by a few cycles).
#[inline]
fn monotonic_per_thread(nanos: u64) -> u64 {
    thread_local! {
        static LAST: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    }
    LAST.with(|last| {
        let now = nanos.max(last.get());
        last.set(now);
        now
    })
}

/// Measures the counter's rate against `Instant`, if the counter is usable here.
fn calibrate() -> Option<Calibration> {
    if !tsc_is_usable() {
        return None;
    }
    let clock = MonotonicClock::new();
    // A pair read close together: the counter bracketed by two `Instant` reads, taken at
    // their midpoint (each read is tens of nanoseconds; the error over 10 ms is ppm).
    let pair = || {
        let before = clock.now().as_nanos();
        let ticks = rdtsc();
        let after = clock.now().as_nanos();
        (ticks, before + (after - before) / 2)
    };
    let (tsc0, base) = pair();
    std::thread::sleep(std::time::Duration::from_millis(10));
    let (tsc1, end) = pair();
    let ticks = tsc1.checked_sub(tsc0).filter(|&t| t > 0)?;
    let mult = (u128::from(end - base) << 32) / u128::from(ticks);
    Some(Calibration {
        tsc0,
        base,
        mult: u64::try_from(mult).ok().filter(|&m| m > 0)?,
    })
}

#[cfg(all(target_arch = "x86_64", target_os = "linux", not(tollgate_loom)))]
fn tsc_is_usable() -> bool {
    // CPUID leaf 0x8000_0007 exists (the highest extended leaf is at least that) and says
    // the counter is invariant.
    let highest = std::arch::x86_64::__cpuid(0x8000_0000).eax;
    let invariant =
        highest >= 0x8000_0007 && std::arch::x86_64::__cpuid(0x8000_0007).edx & (1 << 8) != 0;
    invariant
        && std::fs::read_to_string(
            "/sys/devices/system/clocksource/clocksource0/current_clocksource",
        )
        .is_ok_and(|source| source.trim() == "tsc")
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux", not(tollgate_loom))))]
fn tsc_is_usable() -> bool {
    false
}

#[cfg(target_arch = "x86_64")]
#[inline]
fn rdtsc() -> u64 {
    // SAFETY: `rdtsc` exists on every x86-64 CPU and only reads the counter; the unsafety
    // of the intrinsic is that of executing an instruction the CPU may lack, which cannot
    // happen here.
    unsafe { std::arch::x86_64::_rdtsc() }
}

#[cfg(not(target_arch = "x86_64"))]
fn rdtsc() -> u64 {
    unreachable!("the time-stamp counter is read only where tsc_is_usable() said yes")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readings_never_decrease_on_a_thread() {
        let clock = TscClock::new();
        let mut last = clock.now();
        for _ in 0..1_000_000 {
            let now = clock.now();
            assert!(now >= last, "{now:?} < {last:?}");
            last = now;
        }
    }

    #[test]
    fn it_runs_at_real_time_rate() {
        let (tsc, monotonic) = (TscClock::new(), MonotonicClock::new());
        // Each counter reading bracketed by two `Instant` readings, so a thread descheduled
        // between reads widens the bracket instead of failing the test.
        let bracket = || {
            let before = monotonic.now().as_nanos();
            let t = tsc.now().as_nanos();
            (before, t, monotonic.now().as_nanos())
        };
        let (b0, t0, a0) = bracket();
        std::thread::sleep(std::time::Duration::from_millis(50));
        let (b1, t1, a1) = bracket();
        let dt = t1 - t0;
        // The counter's span lies within the widest and narrowest `Instant` spans, give or
        // take 1 % (the calibration is ppm; the rest is reading cost).
        let (least, most) = (b1 - a0, a1 - b0);
        assert!(
            dt >= least - least / 100 && dt <= most + most / 100,
            "tsc {dt} ns against Instant between {least} and {most} ns"
        );
    }

    #[test]
    fn a_limiter_on_it_checks_and_waits() {
        use crate::{Limiter, Quota};
        let clock = TscClock::new();
        let limiter = Limiter::<u64>::builder(Quota::per_second(20).allow_burst(1))
            .clock(clock)
            .build();
        assert!(limiter.check(&1).is_ok());
        let wait = limiter.check(&1).unwrap_err().retry_after().unwrap();
        let start = clock.now();
        limiter.until_ready(&1).wait().unwrap();
        let waited = clock.now().saturating_duration_since(start);
        // The cell came back 50 ms after the first check; allow the calibration's ppm early.
        assert!(
            waited + std::time::Duration::from_micros(100) >= wait,
            "{waited:?} < {wait:?}"
        );
        assert!(limiter.check(&1).is_err());
    }

    #[test]
    fn a_reading_below_the_calibration_point_is_clamped() {
        let c = Calibration {
            tsc0: 1_000,
            base: 5,
            mult: 1 << 31, // half a nanosecond a tick
        };
        assert_eq!(c.nanos(0), 5);
        assert_eq!(c.nanos(1_000), 5);
        assert_eq!(c.nanos(3_000), 1_005);
        assert_eq!(c.nanos(u64::MAX), 5 + ((u64::MAX - 1_000) >> 1));
    }

    #[test]
    fn the_thread_guard_returns_the_later_value() {
        std::thread::spawn(|| {
            assert_eq!(monotonic_per_thread(10), 10);
            assert_eq!(monotonic_per_thread(7), 10);
            assert_eq!(monotonic_per_thread(12), 12);
        })
        .join()
        .unwrap();
    }

    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    #[test]
    fn it_reads_the_counter_only_where_the_kernel_does() {
        let kernel = std::fs::read_to_string(
            "/sys/devices/system/clocksource/clocksource0/current_clocksource",
        )
        .unwrap_or_default();
        let invariant = std::arch::x86_64::__cpuid(0x8000_0007).edx & (1 << 8) != 0;
        assert_eq!(
            TscClock::new().is_tsc(),
            kernel.trim() == "tsc" && invariant
        );
    }
}
