//! What the `metrics` feature costs a request: times `--requests` requests, one after the
//! other, through `PoliteLayer` over an in-process service that answers 200 at once (no
//! socket: the layer's own work is all there is to time), unpaced (`MAX_RATE`), one host.
//! Rows: the layer built with no recorder installed (the facade's no-op handles), then
//! with Prometheus's recorder, the host under `host="other"`, then named (its rate gauge
//! set after each response). Each row is the best of `--rounds` rounds, the rows
//! interleaved. Built without the feature (`--no-default-features --features foldhash`),
//! only the first row runs, and is the baseline of the others.
//!
//! ```sh
//! cargo run --release -p tollgate-client --example overhead -- [--requests 200000] [--rounds 5]
//! ```

use std::convert::Infallible;
use std::time::{Duration, Instant};

use tollgate_client::{AdaptiveConfig, MAX_RATE, PoliteLayer};
use tower::{Layer, ServiceExt, service_fn};

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map_or(default, |v| v.parse().expect("a whole number"))
}

/// The time per request of `n` requests through `layer`.
fn run(layer: &PoliteLayer, n: u64) -> Duration {
    let polite = layer.layer(service_fn(|_req: http::Request<()>| async {
        Ok::<_, Infallible>(http::Response::new(()))
    }));
    let start = Instant::now();
    futures_executor::block_on(async {
        for _ in 0..n {
            let req = http::Request::get("http://example.com/").body(()).unwrap();
            let res = polite.clone().oneshot(req).await.unwrap();
            assert_eq!(res.status(), 200);
        }
    });
    start.elapsed() / u32::try_from(n).expect("at most 2³² requests")
}

fn layer() -> PoliteLayer {
    PoliteLayer::new(AdaptiveConfig::new(MAX_RATE))
}

fn main() {
    let n = arg("--requests", 200_000);
    let rounds = arg("--rounds", 5);
    #[cfg_attr(not(feature = "metrics"), allow(unused_mut))] // only the baseline row
    let mut rows: Vec<(&str, PoliteLayer)> = vec![("no recorder", layer())];
    #[cfg(feature = "metrics")]
    {
        let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
        let (other, named) = metrics::with_local_recorder(&recorder, || {
            (layer(), layer().metrics_hosts(["example.com:80"]))
        });
        rows.push(("Prometheus, host=\"other\"", other));
        rows.push(("Prometheus, named host", named));
    }
    let mut best = vec![Duration::MAX; rows.len()];
    for _ in 0..rounds {
        for (i, (_, layer)) in rows.iter().enumerate() {
            best[i] = best[i].min(run(layer, n));
        }
    }
    let feature = if cfg!(feature = "metrics") {
        "on"
    } else {
        "off"
    };
    println!("{n} requests, best of {rounds} rounds, metrics feature {feature}");
    for ((name, layer), t) in rows.iter().zip(best) {
        let requests = layer.host("example.com:80").map_or(0, |h| h.requests);
        println!(
            "  {name:<28} {:>7.0} ns/request  ({requests} sent)",
            t.as_nanos()
        );
    }
}
