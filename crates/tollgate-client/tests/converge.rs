//! Against real local servers (hyper, guarded by tollgate-tower): the crawl converges to
//! within 5 % under each hidden rate, and after convergence fewer than 1 % of requests draw
//! a 429. Measured over request counts, with a generous time limit, so a loaded machine
//! only makes it slower.

mod support;

use std::time::Duration;

use support::crawl::{self, HostReport};
use support::hosts::{self, HostSpec};

/// Requests each host must see in band before the test judges it.
const AFTER: u64 = 400;

/// The most the test waits for that.
const LIMIT: Duration = Duration::from_secs(150);

fn table(reports: &[HostReport]) -> String {
    let mut out = String::new();
    for r in reports {
        out.push_str(&format!(
            "{} ({}, true {}): rate {:.2}, converged at {:?}, 429s after {}/{}, retries {}, \
             429s {}\n",
            r.host.spec.name,
            r.host.spec.kind(),
            r.host.spec.rate,
            r.client.rate,
            r.converged_at,
            r.throttled_after,
            r.requests_after,
            r.client.retries,
            r.client.throttled,
        ));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_crawl_converges_under_each_hidden_rate() {
    let specs = [
        HostSpec {
            name: "slow",
            rate: 40,
            burst: 3,
            ietf: false,
            flaky: 0.0,
        },
        HostSpec {
            name: "fast",
            rate: 80,
            burst: 3,
            ietf: false,
            flaky: 0.0,
        },
        HostSpec {
            name: "ietf",
            rate: 50,
            burst: 50,
            ietf: true,
            flaky: 0.0,
        },
        HostSpec {
            name: "flaky",
            rate: 40,
            burst: 40,
            ietf: true,
            flaky: 0.1,
        },
    ];
    let mut hosts = Vec::new();
    for spec in specs {
        hosts.push(hosts::start(spec).await);
    }
    let layer = crawl::layer(6);
    let mut timed_out = false;
    let reports = crawl::crawl(&hosts, &layer, 6, false, |t, reports| {
        timed_out = t > LIMIT;
        timed_out || reports.iter().all(|r| r.requests_after >= AFTER)
    })
    .await;
    let table = table(&reports);
    eprintln!("{table}");
    assert!(
        !timed_out,
        "not every host converged within {LIMIT:?}:\n{table}"
    );
    for r in &reports {
        let hidden = f64::from(r.host.spec.rate);
        assert!(
            crawl::in_band(r.client.rate, hidden),
            "{} not within 5 % under {hidden}:\n{table}",
            r.host.spec.name
        );
        assert!(
            r.throttled_after * 100 < r.requests_after,
            "{}: 429s after convergence are 1 % or more:\n{table}",
            r.host.spec.name
        );
        // The server's count agrees that the client kept under the rate: 200s per second
        // since convergence, with one burst of slack.
        let window = r.window.as_secs_f64();
        let allowed = hidden * window + f64::from(r.host.spec.burst) + 1.0;
        assert!(
            (r.ok_after as f64) <= allowed,
            "{}: {} 200s in {window:.1} s:\n{table}",
            r.host.spec.name,
            r.ok_after
        );
    }
    let flaky = reports
        .iter()
        .find(|r| r.host.spec.name == "flaky")
        .unwrap();
    assert!(
        flaky.client.retries > 0,
        "the flaky host's 503s were not retried:\n{table}"
    );
    assert!(flaky.client.announced && !reports[0].client.announced);
}
