//! The `curve` benchmark: nanoseconds per check against the number of live keys, for
//! tollgate, governor 0.10 (keyed) and the ideal array, with each check reading its clock
//! (`check`), with one clock read hoisted out of the loop (`check_at`) and, for tollgate, with
//! the keys checked 64 at a time (`check_batch_at`), in one process run. It draws the curve
//! as an SVG. Beside the times, the bytes a key tollgate's table holds at each size, grown
//! to it and presized for it.
//!
//! ```text
//! cargo bench --bench curve                                     # 1k .. 10M keys (~3 min)
//! TOLLGATE_CURVE_SVG=benches/curve.svg cargo bench --bench curve  # and redraw the plot
//! TOLLGATE_CURVE_KEYS=1000,100000 cargo bench --bench curve     # other sizes
//! TOLLGATE_BENCH_QUICK=1 cargo bench --bench curve              # smoke run (seconds)
//! TOLLGATE_BENCH_ROUNDS=9 cargo bench --bench curve             # 9 rounds a size (default 5)
//! ```
//!
//! Method, as scenario B of the `check` bench and the shared anchors harness: the live
//! quota (one cell an hour, burst 100,000: never denies, every key stays held), every key
//! checked once before timing, then a fixed sequence of keys drawn at random (with
//! replacement) from the live ones; each round times every row over that sequence, the rows
//! taking turns, starting with a different one each round; the median of the rounds, with
//! min–max. What the curve shows: a check's cost is set by where its key's slot sits in the
//! memory hierarchy (the table's footprint against the caches) and by whether the checks
//! can overlap their misses (a clock read per check keeps them from it).
//!
//! Built as a test (`cargo test --all-targets`), it runs two tiny sizes once, as a smoke
//! test of the harness.

mod common;

use std::fmt::Write as _;
use std::hint::black_box;
use std::time::Instant;

use common::machine::{cpu_model, cpus, loadavg, loadavg_line, today};
use common::subjects::{ExplicitTime, Governor, Ideal, LIVE, Subject, Tollgate, TollgatePresized};
use common::{Rng, Size, Summary};

/// One row of the curve: a name and a closure that runs the checks of one round.
type Row<'a> = (&'static str, Box<dyn FnMut(&[u64]) -> f64 + 'a>);

/// The rows, in the order of the legend.
const ROWS: [&str; 7] = [
    "tollgate check",
    "tollgate check_at",
    "tollgate check_batch_at",
    "tollgate presized check",
    "governor check",
    "ideal check",
    "ideal check_at",
];

/// Times `check` over `order`, after one untimed pass over it: the rows take turns, and a
/// row's table would otherwise start each round cold (the caches full of the previous
/// row's), which a table small enough to fit in them pays for and a large one hardly
/// notices (`check.rs`, `warm_up`).
///
/// `exact`: the limiter keeps each key apart, so no live key may be denied. The ideal does
/// not (colliding keys share a slot), and at a thousand keys a slot shared by several keys
/// can spend the live quota's burst over a run.
fn timed(order: &[u64], exact: bool, mut check: impl FnMut(u64) -> bool) -> f64 {
    for &k in order {
        black_box(check(k));
    }
    let start = Instant::now();
    let mut ok = 0u64;
    for &k in order {
        ok += u64::from(check(black_box(k)));
    }
    let ns = start.elapsed().as_nanos() as f64 / order.len() as f64;
    assert!(!exact || ok == order.len() as u64, "a live key was denied");
    ns
}

/// Keys a batch in the `check_batch_at` row: a proxy's turn of requests.
const BATCH: usize = 64;

/// [`timed`] for a row that checks [`BATCH`] keys at a time: `check(batch, admitted)`.
fn timed_batches(order: &[u64], mut check: impl FnMut(&[u64], &mut u64)) -> f64 {
    let mut ok = 0u64;
    for batch in order.chunks(BATCH) {
        check(batch, &mut ok);
    }
    let start = Instant::now();
    ok = 0;
    for batch in order.chunks(BATCH) {
        check(black_box(batch), &mut ok);
    }
    let ns = start.elapsed().as_nanos() as f64 / order.len() as f64;
    assert!(ok == order.len() as u64, "a live key was denied");
    ns
}

fn built<S: Subject>(keys: &[u64]) -> S {
    let s = S::build(LIVE, keys.len());
    for &k in keys {
        assert!(s.check(k), "{}: pre-insert denied", S::NAME);
    }
    s
}

/// Bytes a key tollgate holds (`Stats::bytes`) once every key is in: grown to them from
/// empty, and presized for them.
struct Memory {
    grown: f64,
    presized: f64,
}

/// The rows over `keys`, each with its own limiter, and tollgate's memory.
fn rows(keys: &[u64]) -> (Vec<Row<'static>>, Memory) {
    let tollgate: Tollgate = built(keys);
    let tollgate_at: Tollgate = built(keys);
    let tollgate_batch: Tollgate = built(keys);
    // Sized for the keys up front (`presize`): one segment a shard, no growth.
    let presized: TollgatePresized = built(keys);
    // Every key held: a key missing from the table would be inserted again by its checks
    // (and, at a cap, evict another), which no check reports.
    for held in [&tollgate, &tollgate_at, &tollgate_batch].map(Tollgate::keys_held) {
        assert_eq!(held, keys.len(), "tollgate holds every key");
    }
    assert_eq!(
        presized.keys_held(),
        keys.len(),
        "tollgate presized holds every key"
    );
    let per_key = |bytes: Option<usize>| {
        bytes.expect("tollgate reports its bytes") as f64 / keys.len() as f64
    };
    let memory = Memory {
        grown: per_key(tollgate.reported_bytes()),
        presized: per_key(presized.reported_bytes()),
    };
    let governor: Governor = built(keys);
    let ideal: Ideal = built(keys);
    let ideal_at: Ideal = built(keys);
    let rows: Vec<Row<'static>> = vec![
        (
            ROWS[0],
            Box::new(move |o| timed(o, true, |k| tollgate.check(k))),
        ),
        (
            ROWS[1],
            Box::new(move |o| {
                let now = tollgate_at.now_ns();
                timed(o, true, |k| tollgate_at.check_at(k, now))
            }),
        ),
        (
            ROWS[2],
            Box::new(move |o| {
                let now = tollgate::Timestamp::from_nanos(tollgate_batch.now_ns());
                timed_batches(o, |batch, ok| {
                    let limiter = tollgate_batch.limiter();
                    limiter.check_batch_at(batch, now, |_, v| *ok += u64::from(v.is_ok()));
                })
            }),
        ),
        (
            ROWS[3],
            Box::new(move |o| timed(o, true, |k| presized.check(k))),
        ),
        (
            ROWS[4],
            Box::new(move |o| timed(o, true, |k| governor.check(k))),
        ),
        (
            ROWS[5],
            Box::new(move |o| timed(o, false, |k| ideal.check(k))),
        ),
        (
            ROWS[6],
            Box::new(move |o| {
                let now = ideal_at.now_ns();
                timed(o, false, |k| ideal_at.check_at(k, now))
            }),
        ),
    ];
    (rows, memory)
}

fn summary(mut v: Vec<f64>) -> Summary {
    v.sort_by(f64::total_cmp);
    Summary {
        median: v[v.len() / 2],
        min: v[0],
        max: v[v.len() - 1],
    }
}

/// The figures of one size: per row, its summary; and tollgate's memory.
fn measure(n: usize, rounds: usize, checks: usize) -> (Vec<Summary>, Memory) {
    let mut rng = Rng::new(0xC0FFEE ^ n as u64);
    let keys = rng.keys(n);
    let order: Vec<u64> = (0..checks).map(|_| keys[rng.below(n)]).collect();
    eprintln!("{n} keys: building");
    let (mut rows, memory) = rows(&keys);
    let mut figures = vec![Vec::new(); rows.len()];
    // One untimed warm-up round, then the timed ones, each starting with another row.
    for round in 0..=rounds {
        for i in 0..rows.len() {
            let r = (i + round) % rows.len();
            let ns = (rows[r].1)(&order);
            if round > 0 {
                figures[r].push(ns);
            }
        }
    }
    (figures.into_iter().map(summary).collect(), memory)
}

/// A line chart: x the keys (log scale), y ns per check.
fn svg(sizes: &[usize], figures: &[Vec<Summary>], caption: &str) -> String {
    const W: f64 = 720.0;
    const H: f64 = 420.0;
    // Margins: left, right (the legend), top, bottom.
    const L: f64 = 60.0;
    const R: f64 = 190.0;
    const T: f64 = 30.0;
    const B: f64 = 50.0;
    let colours = [
        "#d62728", "#ff9896", "#ff7f0e", "#9467bd", "#1f77b4", "#2ca02c", "#98df8a",
    ];
    let dashes = ["", "6,3", "8,3,2,3", "2,2", "", "", "6,3"];
    let x_lo = (sizes[0] as f64).log10();
    let x_hi = (sizes[sizes.len() - 1] as f64).log10().max(x_lo + 1.0);
    let y_hi = figures
        .iter()
        .flatten()
        .map(|s| s.median)
        .fold(1.0, f64::max);
    let step = [10.0, 20.0, 25.0, 50.0, 100.0, 200.0, 250.0, 500.0]
        .into_iter()
        .find(|s| y_hi / s <= 8.0)
        .unwrap_or(1000.0);
    let y_top = (y_hi / step).ceil() * step;
    let x = |n: usize| L + ((n as f64).log10() - x_lo) / (x_hi - x_lo) * (W - L - R);
    let y = |ns: f64| H - B - ns / y_top * (H - T - B);
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="{W}" height="{H}" fill="white"/>"#);
    let _ = writeln!(s, r#"<text x="{L}" y="18">{caption}</text>"#);
    let mut tick = 0.0;
    while tick <= y_top {
        let ty = y(tick);
        let _ = writeln!(
            s,
            "<line x1=\"{L}\" x2=\"{}\" y1=\"{ty:.1}\" y2=\"{ty:.1}\" stroke=\"#ddd\"/><text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{tick}</text>",
            W - R,
            L - 6.0,
            ty + 4.0
        );
        tick += step;
    }
    for &n in sizes {
        let tx = x(n);
        let label = match n {
            n if n >= 1_000_000 => format!("{}M", n / 1_000_000),
            n if n >= 1_000 => format!("{}k", n / 1_000),
            n => n.to_string(),
        };
        let _ = writeln!(
            s,
            "<line x1=\"{tx:.1}\" x2=\"{tx:.1}\" y1=\"{T}\" y2=\"{}\" stroke=\"#eee\"/><text x=\"{tx:.1}\" y=\"{}\" text-anchor=\"middle\">{label}</text>",
            H - B,
            H - B + 16.0
        );
    }
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">live keys (log scale)</text>"#,
        (L + W - R) / 2.0,
        H - 10.0
    );
    let _ = writeln!(
        s,
        r#"<text transform="rotate(-90)" x="{}" y="16" text-anchor="middle">ns per check (median)</text>"#,
        -(T + H - B) / 2.0
    );
    for (r, name) in ROWS.iter().enumerate() {
        let points: Vec<String> = sizes
            .iter()
            .zip(figures)
            .map(|(&n, f)| format!("{:.1},{:.1}", x(n), y(f[r].median)))
            .collect();
        let _ = writeln!(
            s,
            r#"<polyline fill="none" stroke="{}" stroke-width="2" stroke-dasharray="{}" points="{}"/>"#,
            colours[r],
            dashes[r],
            points.join(" ")
        );
        let ly = T + 16.0 + 20.0 * r as f64;
        let _ = writeln!(
            s,
            r#"<line x1="{}" x2="{}" y1="{ly}" y2="{ly}" stroke="{}" stroke-width="2" stroke-dasharray="{}"/><text x="{}" y="{}">{name}</text>"#,
            W - R + 10.0,
            W - R + 34.0,
            colours[r],
            dashes[r],
            W - R + 40.0,
            ly + 4.0
        );
    }
    s.push_str("</svg>\n");
    s
}

fn main() {
    // `cargo test --all-targets` runs benches as tests, without `--bench`: a smoke run, as
    // is `TOLLGATE_BENCH_QUICK=1` (CI).
    let smoke = !std::env::args().any(|a| a == "--bench")
        || std::env::var_os("TOLLGATE_BENCH_QUICK").is_some();
    let sizes: Vec<usize> = match std::env::var("TOLLGATE_CURVE_KEYS") {
        Ok(list) => list
            .split(',')
            .map(|n| {
                n.trim()
                    .parse()
                    .expect("TOLLGATE_CURVE_KEYS: numbers, comma-separated")
            })
            .collect(),
        Err(_) if smoke => vec![1_000, 10_000],
        Err(_) => vec![1_000, 10_000, 100_000, 1_000_000, 10_000_000],
    };
    assert!(!sizes.is_empty(), "no sizes");
    let (rounds, checks) = if smoke { (1, 20_000) } else { (5, 1 << 21) };
    let rounds = Size::rounds_or(rounds);
    let before = loadavg();
    let (figures, memory): (Vec<Vec<Summary>>, Vec<Memory>) =
        sizes.iter().map(|&n| measure(n, rounds, checks)).unzip();

    let machine = format!("{} ({} CPUs)", cpu_model(), cpus());
    println!(
        "\n### ns per check against live keys — {}, {machine}, {rounds} rounds of {checks} checks\n",
        today()
    );
    println!("{}\n", loadavg_line(&before));
    let mut header = String::from("| live keys |");
    for name in ROWS {
        let _ = write!(header, " {name} |");
    }
    header.push_str(" tollgate bytes a key, grown; presized |");
    println!("{header}\n|{}", " --- |".repeat(ROWS.len() + 2));
    for ((&n, f), m) in sizes.iter().zip(&figures).zip(&memory) {
        let mut line = format!("| {n} |");
        for s in f {
            let _ = write!(line, " {:.0} ({:.0}–{:.0}) |", s.median, s.min, s.max);
        }
        let _ = write!(line, " {:.1}; {:.1} |", m.grown, m.presized);
        println!("{line}");
    }
    if let Ok(path) = std::env::var("TOLLGATE_CURVE_SVG") {
        let caption = format!(
            "ns per check, live quota, 1 thread — {machine}, {}",
            today()
        );
        std::fs::write(&path, svg(&sizes, &figures, &caption)).expect("writing the SVG");
        eprintln!("wrote {path}");
    }
}
