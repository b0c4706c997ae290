//! Number, time and markdown-table formatting shared by the benches' reports.

use super::Summary;

/// Three significant figures, enough for noisy timings.
pub(crate) fn sig(x: f64) -> String {
    if x >= 100.0 {
        format!("{x:.0}")
    } else if x >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

/// `1234567` as `1,234,567`.
pub(crate) fn thousands(n: usize) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

/// A duration in nanoseconds with a readable unit, signed: `-12.3 µs`, `1.62 ms`.
pub(crate) fn time(ns: f64) -> String {
    let (scale, unit) = unit_for(ns.abs());
    signed(ns / scale, unit)
}

fn unit_for(ns: f64) -> (f64, &'static str) {
    if ns >= 1e9 {
        (1e9, "s")
    } else if ns >= 1e6 {
        (1e6, "ms")
    } else if ns >= 1e3 {
        (1e3, "µs")
    } else {
        (1.0, "ns")
    }
}

/// [`sig`] with a sign and, unless empty, a unit: `-1.50 ms`; `n/a` for NaN.
pub(crate) fn signed(x: f64, unit: &str) -> String {
    if x.is_nan() {
        return "n/a".to_owned();
    }
    let sign = if x < 0.0 { "-" } else { "" };
    let unit = if unit.is_empty() {
        String::new()
    } else {
        format!(" {unit}")
    };
    format!("{sign}{}{unit}", sig(x.abs()))
}

/// Nanoseconds as `median unit (min–max)`; if min or max needs another unit, both bounds
/// carry their own.
pub(crate) fn time_summary(s: Summary) -> String {
    let (scale, unit) = unit_for(s.median.abs());
    let same = [s.min, s.max].iter().all(|x| unit_for(x.abs()).1 == unit);
    let bound = |x: f64| {
        if same { signed(x / scale, "") } else { time(x) }
    };
    format!(
        "{} ({}–{})",
        signed(s.median / scale, unit),
        bound(s.min),
        bound(s.max)
    )
}

/// `median unit (min–max)` in three significant figures; no unit if `unit` is empty.
pub(crate) fn plain_summary(s: Summary, unit: &str) -> String {
    format!(
        "{} ({}–{})",
        signed(s.median, unit),
        signed(s.min, ""),
        signed(s.max, "")
    )
}

/// Whole numbers: `median (min–max)`.
pub(crate) fn count_summary(s: Summary) -> String {
    format!("{:.0} ({:.0}–{:.0})", s.median, s.min, s.max)
}

/// Prints a markdown table's header row and its `| --- |` rule.
pub(crate) fn table_header(columns: &[&str]) {
    println!("| {} |", columns.join(" | "));
    println!("|{}", " --- |".repeat(columns.len()));
}
