//! What the process takes from the machine, from `/proc` and `getrusage`: resident memory,
//! CPU time and context switches (of the process, of named threads, of the calling thread).

use std::sync::OnceLock;

/// The page size in bytes, read once from the kernel (`AT_PAGESZ` in `/proc/self/auxv`, the
/// value `sysconf(_SC_PAGESIZE)` returns): 4 KiB on most x86-64 Linux, but 16 or 64 KiB on
/// some arm64 and ppc64 kernels. `None` where `/proc` is unavailable.
pub(crate) fn page_size() -> Option<usize> {
    static PAGE_SIZE: OnceLock<Option<usize>> = OnceLock::new();
    *PAGE_SIZE.get_or_init(|| {
        const AT_PAGESZ: usize = 6;
        const WORD: usize = size_of::<usize>();
        let auxv = std::fs::read("/proc/self/auxv").ok()?;
        // `(type, value)` pairs of native words, ended by `AT_NULL`.
        auxv.chunks_exact(2 * WORD).find_map(|pair| {
            let word = |i: usize| usize::from_ne_bytes(pair[i..i + WORD].try_into().unwrap());
            (word(0) == AT_PAGESZ).then(|| word(WORD))
        })
    })
}

/// Resident set size in bytes, from the second field of `/proc/self/statm` (pages) times
/// [`page_size`]. `None` where `/proc` is unavailable.
pub(crate) fn rss_bytes() -> Option<usize> {
    let page = page_size()?;
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: usize = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * page)
}

/// Peak resident set size in bytes (`VmHWM` in `/proc/self/status`).
pub(crate) fn peak_rss_bytes() -> Option<usize> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: usize = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Process CPU time (all threads) and context switches so far.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Usage {
    pub(crate) cpu_ns: u64,
    pub(crate) switches: u64,
}

/// `getrusage(RUSAGE_SELF)`: std has no wrapper, so the C library's is declared here.
#[cfg(target_os = "linux")]
pub(crate) fn usage() -> Option<Usage> {
    use std::ffi::{c_int, c_long};

    /// `struct timeval` on 64-bit Linux.
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Timeval {
        sec: c_long,
        usec: c_long,
    }
    /// `struct rusage` on Linux: two timevals, then 14 `long`s (`ru_maxrss` .. `ru_nivcsw`).
    #[repr(C)]
    struct Rusage {
        utime: Timeval,
        stime: Timeval,
        longs: [c_long; 14],
    }
    unsafe extern "C" {
        fn getrusage(who: c_int, usage: *mut Rusage) -> c_int;
    }
    const RUSAGE_SELF: c_int = 0;
    const NVCSW: usize = 12;
    const NIVCSW: usize = 13;

    let mut r = Rusage {
        utime: Timeval { sec: 0, usec: 0 },
        stime: Timeval { sec: 0, usec: 0 },
        longs: [0; 14],
    };
    // SAFETY: 1. `getrusage` is the C library's, declared with its C signature.
    // 2. `r` is a live, writable `struct rusage` with Linux's layout (declared above), and
    //    `getrusage` writes only that struct.
    let rc = unsafe { getrusage(RUSAGE_SELF, &mut r) };
    if rc != 0 {
        return None;
    }
    let ns = |t: Timeval| t.sec as u64 * 1_000_000_000 + t.usec as u64 * 1_000;
    Some(Usage {
        cpu_ns: ns(r.utime) + ns(r.stime),
        switches: (r.longs[NVCSW] + r.longs[NIVCSW]) as u64,
    })
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn usage() -> Option<Usage> {
    None
}

/// What the scheduler counted for some threads so far (`/proc/self/task/<tid>/schedstat`).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Sched {
    /// Time on a CPU.
    pub(crate) cpu_ns: u64,
    /// Time runnable but waiting for a CPU.
    pub(crate) runqueue_ns: u64,
    /// Times scheduled in: one per wake-up for a thread that sleeps between turns.
    pub(crate) runs: u64,
    /// Context switches: the thread slept (`voluntary_ctxt_switches` in its `status`), and
    /// it was preempted (`nonvoluntary_ctxt_switches`).
    pub(crate) voluntary: u64,
    pub(crate) preempted: u64,
}

/// [`Sched`] summed over the threads named `name`; all zero if no such thread runs yet,
/// `None` where `/proc` or schedstat is unavailable.
pub(crate) fn thread_sched(name: &str) -> Option<Sched> {
    let mut total = Sched::default();
    for entry in std::fs::read_dir("/proc/self/task").ok()? {
        let dir = entry.ok()?.path();
        let Ok(comm) = std::fs::read_to_string(dir.join("comm")) else {
            continue; // The thread exited meanwhile.
        };
        if comm.trim_end() != name {
            continue;
        }
        let stat = std::fs::read_to_string(dir.join("schedstat")).ok()?;
        let mut fields = stat.split_whitespace().map(|f| f.parse::<u64>().ok());
        total.cpu_ns += fields.next()??;
        total.runqueue_ns += fields.next()??;
        total.runs += fields.next()??;
        let status = std::fs::read_to_string(dir.join("status")).ok()?;
        let field = |name: &str| -> Option<u64> {
            let line = status.lines().find(|l| l.starts_with(name))?;
            line.split_whitespace().nth(1)?.parse().ok()
        };
        total.voluntary += field("voluntary_ctxt_switches:")?;
        total.preempted += field("nonvoluntary_ctxt_switches:")?;
    }
    Some(total)
}

/// CPU time of the calling thread (`/proc/thread-self/schedstat`).
pub(crate) fn own_cpu_ns() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    stat.split_whitespace().next()?.parse().ok()
}
