//! What machine a run was on, how busy it was and when: for the reports' headings.

/// The 1-, 5- and 15-minute load averages, to show how busy the machine was.
pub(crate) fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| "unknown".to_owned())
}

/// `Load average (1/5/15 min) before: {before}; after: {now}.`, for a report's heading.
pub(crate) fn loadavg_line(before: &str) -> String {
    format!(
        "Load average (1/5/15 min) before: {before}; after: {}.",
        loadavg()
    )
}

/// CPUs this process may use (0 if unknown).
pub(crate) fn cpus() -> usize {
    std::thread::available_parallelism().map_or(0, |n| n.get())
}

/// The CPU's model name from `/proc/cpuinfo`, or `unknown`.
pub(crate) fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".to_owned())
}

/// `YYYY-MM-DD` (UTC) from the system clock (Howard Hinnant's civil-from-days).
pub(crate) fn today() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let z = (secs / 86_400) as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}
