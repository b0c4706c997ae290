//! `PoliteLayer` over reqwest: starts two local hosts guarded by tollgate-tower (one
//! announcing 30/s in the IETF fields, one at a hidden 40/s answering only 429 with
//! `Retry-After`), fetches from both with a few tasks each through
//! `PoliteLayer` + [`tollgate_client::Reqwest`], and prints what the layer learned per host.
//!
//! ```sh
//! cargo run --release -p tollgate-client --features reqwest --example reqwest -- [--seconds 5] [--tasks 4]
//! ```

#[path = "common/args.rs"]
mod args;

#[path = "../tests/support/hosts.rs"]
mod hosts;

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use hosts::HostSpec;
use http_body_util::BodyExt;
use tollgate_client::{AdaptiveConfig, PoliteLayer, RedirectLayer, Reqwest, RetryPolicy};
use tower::{Layer, ServiceExt};

const HOSTS: [HostSpec; 2] = [
    // 33,333,334 ns per cell: announced as `q=29;w=1`, a little under, never over.
    HostSpec {
        name: "ietf",
        rate: 30,
        burst: 30,
        ietf: true,
        flaky: 0.0,
    },
    HostSpec {
        name: "quiet",
        rate: 40,
        burst: 3,
        ietf: false,
        flaky: 0.0,
    },
];

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    let (seconds, tasks) = match args::parse("reqwest", 5.0, 4) {
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

    // The polite layer over reqwest: 4 in flight per host, a first guess of 10/s, retries
    // that honour Retry-After.
    let config = AdaptiveConfig::new(10.0)
        .floor(1.0)
        .ceiling(1_000.0)
        .max_retry_after(Duration::from_secs(5));
    let layer = PoliteLayer::new(config).max_in_flight(4).retry(
        RetryPolicy::new()
            .max_retries(3)
            .base(Duration::from_millis(50)),
    );
    // reqwest's own redirect following off (`Reqwest::default`): the redirect layer above
    // follows them, each hop through the polite layer under its own host.
    let client = RedirectLayer::new().layer(layer.layer(Reqwest::default()));

    println!(
        "fetching from {} local hosts through reqwest + PoliteLayer for {:.1} s, {} tasks each",
        hosts.len(),
        seconds.as_secs_f64(),
        tasks
    );
    let stop = Arc::new(AtomicBool::new(false));
    let mut workers = Vec::new();
    for host in &hosts {
        for _ in 0..tasks {
            let (client, stop, url) = (client.clone(), Arc::clone(&stop), host.url());
            workers.push(tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let req = http::Request::get(&url).body(String::new()).unwrap();
                    match client.clone().oneshot(req).await {
                        Ok(res) => {
                            let _ = res.into_body().collect().await;
                        }
                        Err(e) => {
                            eprintln!("{url}: {e}");
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                    }
                }
            }));
        }
    }
    tokio::time::sleep(seconds).await;
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        let _ = w.await;
    }

    println!(
        "{:<6} {:>5} {:>8} {:>10} {:>9} {:>6} {:>8} {:>6}",
        "host", "true", "learned", "how", "requests", "429s", "retries", "in-fl"
    );
    let mut ok = true;
    for host in &hosts {
        let Some(h) = layer.host(&host.key()) else {
            println!("{:<6} never reached", host.spec.name);
            ok = false;
            continue;
        };
        ok &= host.served.ok() > 0;
        println!(
            "{:<6} {:>5} {:>8.1} {:>10} {:>9} {:>6} {:>8} {:>6}",
            host.spec.name,
            host.spec.rate,
            h.rate,
            if h.announced { "announced" } else { "probed" },
            h.requests,
            h.throttled,
            h.retries,
            h.in_flight_max,
        );
    }
    println!(
        "true: the server's rate; learned: the client's pace at the end (announced by \
         RateLimit-Policy, or probed from 429s)"
    );
    if ok {
        ExitCode::SUCCESS
    } else {
        eprintln!("a host answered no request");
        ExitCode::FAILURE
    }
}
