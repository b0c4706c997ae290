//! The crawl: many tasks fetching from local hosts through one `PoliteLayer` over
//! hyper-util's client, sampling each host's rate to see when it converged. Shared by the
//! `crawl` example and the convergence test.

#![allow(dead_code, unreachable_pub)]

use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use http::Request;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tollgate_client::{AdaptiveConfig, HostSnapshot, PoliteLayer, RetryPolicy};
use tower::{Layer, ServiceExt};

use super::hosts::Host;

/// The client's settings for the demo and the test.
pub fn layer(max_in_flight: usize) -> PoliteLayer {
    let config = AdaptiveConfig::new(10.0)
        .floor(1.0)
        .ceiling(1_000.0)
        .increase(1.0)
        .decrease(0.8)
        .band(0.03)
        .confirm(200)
        .max_retry_after(Duration::from_secs(10));
    PoliteLayer::new(config).max_in_flight(max_in_flight).retry(
        RetryPolicy::new()
            .max_retries(3)
            .base(Duration::from_millis(50)),
    )
}

/// A host's rate is converged while it is within 5 % of the hidden rate and not above it.
pub fn in_band(rate: f64, hidden: f64) -> bool {
    rate >= 0.95 * hidden && rate <= hidden * (1.0 + 1e-9)
}

/// What the crawl saw of one host.
#[derive(Debug, Clone)]
pub struct HostReport {
    pub host: Host,
    pub client: HostSnapshot,
    /// Since when (from the start) the rate has been in band, if it is at the end.
    pub converged_at: Option<Duration>,
    /// Client attempts and 429s, and server 200s, since convergence.
    pub requests_after: u64,
    pub throttled_after: u64,
    pub ok_after: u64,
    /// The time since convergence.
    pub window: Duration,
    /// The server's 200s per second over the last `RECENT` of the crawl.
    pub recent_rate: Option<f64>,
}

/// The span of [`HostReport::recent_rate`].
pub const RECENT: Duration = Duration::from_secs(3);

impl HostReport {
    /// Requests per second the server answered 200 since convergence.
    pub fn measured_rate(&self) -> Option<f64> {
        let secs = self.window.as_secs_f64();
        (self.converged_at.is_some() && secs >= 1.0).then(|| self.ok_after as f64 / secs)
    }
}

/// When a host's current streak in band started, and the counts then.
#[derive(Clone, Copy)]
struct Streak {
    at: Duration,
    requests: u64,
    throttled: u64,
    ok: u64,
}

/// Crawls `hosts` with `tasks_per_host` tasks each until `done` says so (given the elapsed
/// time and the reports so far; asked every 100 ms), printing progress to stderr if asked:
/// one line redrawn in place on a terminal, plain lines otherwise.
pub async fn crawl(
    hosts: &[Host],
    layer: &PoliteLayer,
    tasks_per_host: usize,
    progress: bool,
    mut done: impl FnMut(Duration, &[HostReport]) -> bool,
) -> Vec<HostReport> {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let svc = layer.layer(client);
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for host in hosts {
        for _ in 0..tasks_per_host {
            let svc = svc.clone();
            let stop = Arc::clone(&stop);
            let url = host.url();
            tasks.push(tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let req = Request::get(&url).body(Full::new(Bytes::new())).unwrap();
                    match svc.clone().oneshot(req).await {
                        Ok(res) => {
                            let _ = res.into_body().collect().await;
                        }
                        Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
                    }
                }
            }));
        }
    }

    let terminal = std::io::stderr().is_terminal();
    let start = Instant::now();
    let mut streaks: Vec<Option<Streak>> = vec![None; hosts.len()];
    let mut history: Vec<std::collections::VecDeque<(Duration, u64)>> =
        vec![Default::default(); hosts.len()];
    let mut last_print = Duration::ZERO;
    let reports = loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = start.elapsed();
        let mut reports = Vec::with_capacity(hosts.len());
        for ((host, streak), past) in hosts.iter().zip(&mut streaks).zip(&mut history) {
            let Some(client) = layer.host(&host.key()) else {
                continue;
            };
            let ok = host.served.ok();
            past.push_back((now, ok));
            while past.len() > 1 && now - past[1].0 >= RECENT {
                past.pop_front();
            }
            let (then, ok_then) = past[0];
            let recent_rate =
                (now - then >= RECENT).then(|| (ok - ok_then) as f64 / (now - then).as_secs_f64());
            if !in_band(client.rate, f64::from(host.spec.rate)) {
                *streak = None;
            } else if streak.is_none() {
                *streak = Some(Streak {
                    at: now,
                    requests: client.requests,
                    throttled: client.throttled,
                    ok,
                });
            }
            let s = *streak;
            reports.push(HostReport {
                host: host.clone(),
                converged_at: s.map(|s| s.at),
                requests_after: s.map_or(0, |s| client.requests - s.requests),
                throttled_after: s.map_or(0, |s| client.throttled - s.throttled),
                ok_after: s.map_or(0, |s| ok - s.ok),
                window: s.map_or(Duration::ZERO, |s| now - s.at),
                recent_rate,
                client,
            });
        }
        // On a terminal the line is redrawn in place; piped (a CI log), each is a line of
        // its own, and fewer of them.
        let every = if terminal {
            Duration::from_millis(500)
        } else {
            Duration::from_secs(1)
        };
        if progress && now - last_print >= every {
            last_print = now;
            let mut line = format!("{:5.1}s ", now.as_secs_f64());
            for r in &reports {
                let mark = if r.converged_at.is_some() { '*' } else { ' ' };
                line.push_str(&format!(
                    " {} {:6.1}/s{} in {}",
                    r.host.spec.name, r.client.rate, mark, r.client.in_flight
                ));
            }
            let mut err = std::io::stderr();
            let _ = if terminal {
                write!(err, "\r{line}  ")
            } else {
                writeln!(err, "{line}")
            };
            let _ = err.flush();
        }
        if reports.len() == hosts.len() && done(now, &reports) {
            break reports;
        }
        if now > Duration::from_secs(600) {
            break reports; // a safety net: never hang
        }
    };
    if progress && terminal {
        eprintln!(); // end the line redrawn in place
    }
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.abort();
    }
    reports
}
