//! The polite crawler demo: starts several local HTTP hosts, each guarded by tollgate-tower
//! with its own hidden rate (some send the IETF RateLimit fields, some only 429 with
//! `Retry-After`, one fails at random with 503), crawls them all with many tasks through
//! `PoliteLayer` over hyper-util's client, and prints per host the true rate, the rate the
//! client converged to, the 429s, retries, holds, retries the budget refused, in-flight
//! maximum and time to converge. Progress goes to stderr: one line redrawn in place on a
//! terminal, plain lines when piped.
//!
//! ```sh
//! cargo run --release -p tollgate-client --example crawl -- [--seconds 15] [--tasks 8]
//! ```

#[path = "common/args.rs"]
mod args;

#[path = "../tests/support/hosts.rs"]
mod hosts;

#[path = "../tests/support/crawl.rs"]
mod crawl;

#[cfg(feature = "metrics")]
#[path = "../tests/support/recorder.rs"]
mod recorder;

use std::process::ExitCode;

use hosts::HostSpec;

// The IETF hosts' rates divide a second into whole nanoseconds, so their policies are exact
// (`q=50;w=1`); a rate that does not (30/s: 33,333,334 ns per cell) is announced a little
// under it (`q=29;w=1`), never over.
const HOSTS: [HostSpec; 6] = [
    probing("a", 80),
    probing("b", 120),
    probing("c", 160),
    ietf("d", 50, 0.0),
    ietf("e", 100, 0.0),
    ietf("f", 40, 0.1),
];

/// A host that sends only 429 with `Retry-After`, with a small burst (3).
const fn probing(name: &'static str, rate: u32) -> HostSpec {
    HostSpec {
        name,
        rate,
        burst: 3,
        ietf: false,
        flaky: 0.0,
    }
}

/// A host that sends the IETF fields (burst = rate: `q=rate;w=1`), failing `flaky` of its
/// admitted requests with 503.
const fn ietf(name: &'static str, rate: u32, flaky: f64) -> HostSpec {
    HostSpec {
        name,
        rate,
        burst: rate,
        ietf: true,
        flaky,
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    let (seconds, tasks) = match args::parse("crawl", 15.0, 8) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let mut hosts = Vec::new();
    for spec in HOSTS {
        hosts.push(hosts::start(spec).await);
    }
    println!(
        "crawling {} local hosts for {:.1} s with {} tasks each (rates hidden from the client)",
        hosts.len(),
        seconds.as_secs_f64(),
        tasks
    );
    // The layer registers its metrics with the recorder current when it is built.
    #[cfg(feature = "metrics")]
    let recorder = recorder::Recorder::default();
    #[cfg(feature = "metrics")]
    let layer = metrics::with_local_recorder(&recorder, || crawl::layer(6));
    #[cfg(not(feature = "metrics"))]
    let layer = crawl::layer(6);
    let reports = crawl::crawl(&hosts, &layer, tasks, true, |t, _| t >= seconds).await;

    println!(
        "{:<4} {:<9} {:>6} {:>10} {:>9} {:>6} {:>9} {:>8} {:>6} {:>7} {:>6} {:>9}",
        "host",
        "kind",
        "true",
        "converged",
        "measured",
        "429s",
        "429s/aft",
        "retries",
        "holds",
        "budget",
        "in-fl",
        "converge"
    );
    for r in &reports {
        let c = &r.client;
        println!(
            "{:<4} {:<9} {:>6} {:>10.1} {:>9} {:>6} {:>9} {:>8} {:>6} {:>7} {:>6} {:>9}",
            r.host.spec.name,
            r.host.spec.kind(),
            r.host.spec.rate,
            c.rate,
            r.recent_rate.map_or("-".into(), |m| format!("{m:.1}")),
            c.throttled,
            if r.converged_at.is_some() {
                format!("{}/{}", r.throttled_after, r.requests_after)
            } else {
                "-".into()
            },
            c.retries,
            c.holds,
            c.budget_refused,
            c.in_flight_max,
            r.converged_at
                .map_or("not yet".into(), |t| format!("{:.1} s", t.as_secs_f64())),
        );
    }
    println!(
        "true: the server's hidden rate; converged: the client's rate at the end; measured: \
         the server's 200s per second over the last {} s;\n429s/aft: 429s / attempts since \
         the rate came within 5 % under the true rate (converge: when); holds: answers that \
         held the host back (Retry-After, a spent quota);\nbudget: retries the host's retry \
         budget refused.",
        crawl::RECENT.as_secs()
    );
    #[cfg(feature = "metrics")]
    print_metrics(&recorder);
    ExitCode::SUCCESS
}

/// The totals the `metrics` facade saw (every host is `host="other"`: none was named), as
/// a recorder would export them; they add up the table's columns.
#[cfg(feature = "metrics")]
fn print_metrics(r: &recorder::Recorder) {
    let other = [("host", "other")];
    let total = |name: &str| r.counter(name, &other).unwrap_or(0);
    let waits = r
        .samples("tollgate_client_wait_seconds", &other)
        .unwrap_or_default();
    let mean_ms = if waits.is_empty() {
        0.0
    } else {
        waits.iter().sum::<f64>() / waits.len() as f64 * 1e3
    };
    println!(
        "metrics, host=\"other\": {} requests, {} throttled, {} retries, {} holds, {} budget \
         refusals; tollgate_client_wait_seconds: {} samples, mean {mean_ms:.1} ms",
        total("tollgate_client_requests_total"),
        total("tollgate_client_throttled_total"),
        total("tollgate_client_retries_total"),
        total("tollgate_client_holds_total"),
        total("tollgate_client_budget_refused_total"),
        waits.len(),
    );
}
