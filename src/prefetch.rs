//! A software prefetch: asks the CPU to start loading a cache line, and goes on at once.
//!
//! Why a check uses one: reading the clock (`Instant::now`, through the vDSO) starts with a
//! fence (`lfence; rdtsc` or `rdtscp`) that waits until every earlier load has *completed*. A
//! check that reads the clock and then loads its slot therefore runs the clock read and the
//! slot's cache miss one after the other, and a check that loaded the slot first would make the
//! clock read wait for the miss. A prefetch is the one kind of load the fence does not wait
//! for (Intel's SDM, `PREFETCHh`: prefetches are not ordered with respect to the fence
//! instructions), so a check that prefetches its home slot before the clock read has the
//! miss under way during it. Measured on the Intel host this project benchmarks on
//! (BENCHMARKS.md, B and E); where a CPU's clock read does wait for prefetches, the prefetch
//! only starts the load a little earlier, which costs about a nanosecond on a hot key.
//!
//! It has no effect on what any thread observes: it is a hint, not a memory access in the
//! language's sense, so no ordering argument is needed and the loom build leaves it out.

/// Starts loading the cache line holding `address` into every level of the cache. Any
/// address will do, inside an allocation or not: a prefetch never faults.
#[inline(always)]
pub(crate) fn prefetch<T>(address: *const T) {
    let _address = address.cast::<i8>();
    #[cfg(all(target_arch = "x86_64", not(tollgate_loom)))]
    // SAFETY: a prefetch never faults, whatever the address, and reads nothing the program
    // sees. (`_mm_prefetch` needs SSE, which every x86_64 CPU has.)
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(_address);
    }
    #[cfg(all(target_arch = "aarch64", not(tollgate_loom)))]
    // SAFETY: as above; `prfm` only hints, and the options say it touches no memory, stack
    // or flags the compiler tracks.
    unsafe {
        std::arch::asm!(
            "prfm pldl1keep, [{address}]",
            address = in(reg) _address,
            options(nostack, readonly, preserves_flags),
        );
    }
}
