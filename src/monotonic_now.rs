//! The system's monotonic clock in nanoseconds, read without `Instant`'s arithmetic: what
//! [`MonotonicClock`](crate::MonotonicClock) reads on every check.
//!
//! Why: on a hot key a check is the clock read plus the instructions between two reads, and
//! the read's fence (`lfence; rdtsc` or `rdtscp` in the vDSO) makes every one of them count
//! (BENCHMARKS.md, "where a check's time goes", item 4). `Instant::now()` followed by a
//! subtraction from an origin `Instant` runs about 85 instructions of std's around the
//! kernel's read: a `Result` for the read, a validated `Timespec`, the subtraction of two
//! timespecs with its borrow and sign cases, a `Duration` built and normalised, and the
//! conversion back to nanoseconds. A check needs none of it: one `u64` of nanoseconds.
//!
//! Where it reads the kernel directly: 64-bit Linux, where std's `Instant` *is*
//! `clock_gettime(CLOCK_MONOTONIC)` (std's documentation of `Instant` lists that call for
//! Unix), so this is the same clock, read through the same vDSO entry of the C library std
//! links, and as monotonic: the kernel never lets `CLOCK_MONOTONIC` go back, on one core or
//! across cores. Everywhere else (and under loom and Miri) it is `Instant` itself.
//!
//! Agreement with `Instant`: the two scales differ by a constant. [`Origin::new`] reads this
//! clock, then the origin `Instant`, so this clock's nanoseconds since its origin lead
//! `Instant`-based nanoseconds since the origin `Instant` by the time between those two
//! reads (tens of nanoseconds), never trail them. That is the safe direction for the one
//! place the scales meet: tollgate's timer counts in `Instant`-based nanoseconds, and a
//! limiter on [`MonotonicClock`](crate::MonotonicClock) sleeps on it until its own
//! timestamps (`clock_source.rs`): a sleep fires when the timer's time has reached the
//! deadline, so the limiter's time, ahead of it, has reached it too (a waiter wakes when it
//! would have on `Instant`, at most that lead after the limiter's own time passed its
//! deadline). A timestamp turned into an `Instant` (`MonotonicClock::instant`) is at or
//! after the moment the clock read it. Were std to read another clock for `Instant` (one
//! that runs while the machine sleeps, say), the scales would drift apart by the time the
//! machine slept, which no test short of a sleep would see: this rests on std's documented
//! choice, which is why it is made only where std documents it.

use std::time::Instant;

/// Whether this build reads `CLOCK_MONOTONIC` itself (module docs).
const DIRECT: bool = cfg!(all(
    target_os = "linux",
    target_pointer_width = "64",
    not(miri),
    not(tollgate_loom)
));

/// Items for the builds that read `CLOCK_MONOTONIC` themselves ([`DIRECT`]).
macro_rules! direct {
    ($($item:item)*) => {$(
        #[cfg(all(target_os = "linux", target_pointer_width = "64", not(miri), not(tollgate_loom)))]
        $item
    )*};
}
/// Items for the other builds.
macro_rules! via_instant {
    ($($item:item)*) => {$(
        #[cfg(not(all(target_os = "linux", target_pointer_width = "64", not(miri), not(tollgate_loom))))]
        $item
    )*};
}

/// tollgate's process-wide origin, on both scales (module docs).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Origin {
    /// The clock read directly at the origin, just before `instant` (0 where it is not read
    /// directly).
    nanos: u64,
    /// The origin as an `Instant`: what the timer counts its nanoseconds from.
    pub(crate) instant: Instant,
    /// At most how far [`elapsed`](Origin::elapsed) leads `Instant`-based nanoseconds since
    /// `instant` (module docs): the time from the direct read to one after `instant`. Only
    /// the tests that hold the clock to it need it.
    #[cfg(all(test, not(tollgate_loom)))]
    pub(crate) lead: u64,
}

impl Origin {
    /// Reads the origin on both scales, the direct one first (module docs: so that it leads
    /// the `Instant` scale, never trails it).
    pub(crate) fn new() -> Origin {
        let nanos = read_direct();
        let instant = Instant::now();
        Origin {
            nanos,
            instant,
            #[cfg(all(test, not(tollgate_loom)))]
            lead: read_direct() - nanos,
        }
    }

    /// Nanoseconds since this origin, now (0 if the clock reads earlier; saturating after
    /// 584 years).
    #[inline]
    pub(crate) fn elapsed(&self) -> u64 {
        if DIRECT {
            read_direct().saturating_sub(self.nanos)
        } else {
            nanos_between(self.instant, Instant::now())
        }
    }
}

/// Nanoseconds from `from` to `t` (0 if `t` is earlier). u64 arithmetic instead of
/// `as_nanos()`'s u128; it saturates after 584 years, long after a limiter's own 18-year
/// horizon.
#[inline]
pub(crate) fn nanos_between(from: Instant, t: Instant) -> u64 {
    let d = t.saturating_duration_since(from);
    d.as_secs()
        .saturating_mul(1_000_000_000)
        .saturating_add(u64::from(d.subsec_nanos()))
}

direct! {
    /// `CLOCK_MONOTONIC` in nanoseconds (since boot, on Linux).
    #[inline]
    fn read_direct() -> u64 {
        use std::ffi::{c_int, c_long};

        /// `struct timespec` on 64-bit Linux: `time_t` and `long` are both 64 bits.
        #[repr(C)]
        struct Timespec {
            tv_sec: i64,
            tv_nsec: c_long,
        }
        /// `CLOCK_MONOTONIC` on every Linux architecture (`<linux/time.h>`).
        const CLOCK_MONOTONIC: c_int = 1;
        unsafe extern "C" {
            /// The C library's `clock_gettime` (glibc and musl both have it, and std links
            /// the C library on Linux), which answers `CLOCK_MONOTONIC` from the vDSO.
            fn clock_gettime(clock: c_int, time: *mut Timespec) -> c_int;
        }

        let mut t = std::mem::MaybeUninit::<Timespec>::uninit();
        // SAFETY: `t` is writable memory for one `struct timespec` for the call's duration,
        // and the declaration above is the C library's on 64-bit Linux (this item's cfg).
        let status = unsafe { clock_gettime(CLOCK_MONOTONIC, t.as_mut_ptr()) };
        if status != 0 {
            read_failed();
        }
        // SAFETY: a call that returns 0 has filled in the whole `struct timespec`.
        let t = unsafe { t.assume_init() };
        // Seconds since boot fit in 34 bits for five centuries: neither operation wraps.
        (t.tv_sec as u64)
            .wrapping_mul(1_000_000_000)
            .wrapping_add(t.tv_nsec as u64)
    }

    /// `CLOCK_MONOTONIC` is always there on Linux; std's `Instant::now` panics here too.
    #[cold]
    #[inline(never)]
    fn read_failed() -> ! {
        panic!(
            "clock_gettime(CLOCK_MONOTONIC) failed: {}",
            std::io::Error::last_os_error()
        )
    }
}

via_instant! {
    /// Not read directly here: `Origin::elapsed` counts from the origin `Instant`.
    fn read_direct() -> u64 {
        0
    }
}

#[cfg(all(test, not(tollgate_loom)))]
mod tests {
    use super::*;

    /// The direct read keeps pace with `Instant` and leads it, never trails: between two
    /// `Instant` reads, `elapsed` is at or after the first and at most the origin's lead
    /// after the second. (An origin read in the other order fails it.)
    #[test]
    fn the_direct_read_is_instant_s_clock_leading_by_at_most_the_lead() {
        let origin = Origin::new();
        for _ in 0..100_000 {
            let before = nanos_between(origin.instant, Instant::now());
            let now = origin.elapsed();
            let after = nanos_between(origin.instant, Instant::now());
            assert!(now >= before, "trails Instant: {now} < {before}");
            assert!(
                now <= after + origin.lead,
                "leads Instant by more than {}: {now} > {after}",
                origin.lead
            );
        }
    }

    /// Readings never go back, across whole seconds of the kernel's clock too, where a
    /// wrong seconds-and-nanoseconds sum would (about 1.1 s, mostly asleep).
    #[test]
    fn it_never_goes_back_across_seconds() {
        let origin = Origin::new();
        let mut last = origin.elapsed();
        while last < 1_100_000_000 {
            for _ in 0..1_000 {
                let now = origin.elapsed();
                assert!(now >= last, "{now} < {last}");
                last = now;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
}
