//! The demo server: `GET /` answers `200 hello`, each client IP limited to `--rate` requests
//! per second with bursts of `--burst`, with the IETF `RateLimit` fields on.
//!
//! ```sh
//! cargo run --release -p tollgate-tower --example server -- \
//!     --listen 127.0.0.1:3000 --rate 5 --burst 10 [--trusted-proxy 10.0.0.0/8]... [--serve-for 30]
//! curl -i http://127.0.0.1:3000/
//! ```
//!
//! Behind proxies, name them with `--trusted-proxy CIDR` (repeatable): the client is then
//! the first address of `X-Forwarded-For`, from the right, that is not a trusted proxy; a
//! request whose walk reaches an element that is not an address gets a 400.
//! `--serve-for SECONDS` stops the server after that long (for smoke runs); it prints the
//! limiter's counts when it stops. `--help` prints the usage.
//!
//! `--metrics ADDR2` serves the layer's metrics in Prometheus's text format on `ADDR2` (any
//! path; `curl http://ADDR2/metrics`), through `metrics-exporter-prometheus`'s recorder:
//! `tollgate_admitted_total{policy="per-ip"}`, `tollgate_refused_total{...}` and the rest
//! listed in the crate docs (the crate's `metrics` feature, on by default):
//!
//! ```sh
//! cargo run --release -p tollgate-tower --example server -- \
//!     --listen 127.0.0.1:3000 --rate 5 --burst 10 --metrics 127.0.0.1:9000
//! curl http://127.0.0.1:9000/metrics
//! ```

use std::convert::Infallible;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tollgate::Quota;
use tollgate_tower::{Cidr, ClientIp, RateLimitLayer};
use tower::{ServiceBuilder, service_fn};

struct Args {
    listen: SocketAddr,
    rate: u32,
    burst: u32,
    trusted: Vec<Cidr>,
    serve_for: Option<Duration>,
    metrics: Option<SocketAddr>,
}

const USAGE: &str = "usage: server --listen ADDR --rate N --burst B \
                     [--trusted-proxy CIDR]... [--serve-for SECONDS] [--metrics ADDR2]";

/// What the command line asks for.
enum Command {
    Serve(Args),
    Help,
}

fn parse_args() -> Result<Command, String> {
    let mut listen = None;
    let mut rate = None;
    let mut burst = None;
    let mut trusted = Vec::new();
    let mut serve_for = None;
    let mut metrics = None;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or(format!("{flag} needs a value\n{USAGE}"));
        match flag.as_str() {
            "--listen" => listen = Some(value()?.parse().map_err(|e| format!("--listen: {e}"))?),
            "--rate" => rate = Some(value()?.parse().map_err(|e| format!("--rate: {e}"))?),
            "--burst" => burst = Some(value()?.parse().map_err(|e| format!("--burst: {e}"))?),
            "--trusted-proxy" => trusted.push(
                value()?
                    .parse()
                    .map_err(|e| format!("--trusted-proxy: {e}"))?,
            ),
            "--serve-for" => {
                let secs: f64 = value()?.parse().map_err(|e| format!("--serve-for: {e}"))?;
                serve_for = Some(
                    Duration::try_from_secs_f64(secs).map_err(|e| format!("--serve-for: {e}"))?,
                );
            }
            "--metrics" => {
                metrics = Some(value()?.parse().map_err(|e| format!("--metrics: {e}"))?);
            }
            "-h" | "--help" => return Ok(Command::Help),
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    let required = |flag: &str| format!("{flag} is required\n{USAGE}");
    Ok(Command::Serve(Args {
        listen: listen.ok_or_else(|| required("--listen"))?,
        rate: rate.ok_or_else(|| required("--rate"))?,
        burst: burst.ok_or_else(|| required("--burst"))?,
        trusted,
        serve_for,
        metrics,
    }))
}

async fn hello(req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let mut response = Response::new(Full::new(Bytes::from_static(b"hello\n")));
    if req.uri().path() != "/" {
        *response.status_mut() = StatusCode::NOT_FOUND;
        *response.body_mut() = Full::new(Bytes::from_static(b"not found\n"));
    }
    Ok(response)
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(Command::Serve(args)) => args,
        Ok(Command::Help) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let quota = match Quota::try_new(args.rate, Duration::from_secs(1))
        .and_then(|q| q.try_allow_burst(args.burst))
    {
        Ok(quota) => quota,
        Err(e) => {
            eprintln!("bad --rate/--burst: {e}");
            return ExitCode::from(2);
        }
    };
    // The recorder first: a layer registers its metrics with the recorder installed when
    // it is built.
    let scrape = match args.metrics.map(|_| prometheus::install()) {
        Some(Ok(scrape)) => Some(scrape),
        Some(Err(e)) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
        None => None,
    };
    let layer = RateLimitLayer::builder(
        tollgate::Limiter::keyed(quota),
        ClientIp::from_cidrs(args.trusted),
    )
    .policy_name("per-ip")
    .expect("a valid policy name")
    .build();
    let limiter = layer.limiter().clone();
    if let (Some(scrape), Some(addr)) = (scrape, args.metrics) {
        match prometheus::serve(addr, scrape, layer.clone()).await {
            Ok(bound) => println!("metrics on {bound}"),
            Err(e) => {
                eprintln!("cannot serve metrics on {addr}: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    let svc = ServiceBuilder::new()
        .layer(layer)
        .service(service_fn(hello));

    let listener = match TcpListener::bind(args.listen).await {
        Ok(listener) => listener,
        Err(e) => {
            eprintln!("cannot listen on {}: {e}", args.listen);
            return ExitCode::FAILURE;
        }
    };
    println!("listening on {}", listener.local_addr().unwrap());

    let stop = async {
        match args.serve_for {
            Some(d) => tokio::time::sleep(d).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(stop);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(conn) => conn,
                Err(e) => {
                    eprintln!("accept: {e}");
                    // Out of file descriptors, say: retrying at once would spin.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut stop => break,
        };
        // The peer address goes into each request's extensions: the key source reads it.
        let svc = ServiceBuilder::new()
            .map_request(move |mut req: Request<Incoming>| {
                req.extensions_mut().insert(peer);
                req
            })
            .service(svc.clone());
        tokio::spawn(async move {
            let conn = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), TowerToHyperService::new(svc));
            if let Err(e) = conn.await {
                eprintln!("connection from {peer}: {e}");
            }
        });
    }
    let stats = limiter.stats();
    println!(
        "stopped: {} admitted, {} refused, {} live keys",
        stats.admitted,
        stats.denied,
        limiter.count_live_keys()
    );
    ExitCode::SUCCESS
}

/// `--metrics`: the Prometheus recorder, and the scrape endpoint.
#[cfg(feature = "metrics")]
mod prometheus {
    use std::convert::Infallible;
    use std::net::SocketAddr;

    use http::Response;
    use http_body_util::Full;
    use hyper::body::Bytes;
    use hyper_util::rt::TokioIo;
    use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
    use tokio::net::TcpListener;
    use tollgate_tower::{ClientIp, RateLimitLayer};

    /// Installs Prometheus's recorder as the process's; its handle renders the scrape.
    pub(crate) fn install() -> Result<PrometheusHandle, String> {
        PrometheusBuilder::new()
            .install_recorder()
            .map_err(|e| format!("--metrics: {e}"))
    }

    /// Serves the scrape on `addr` (any path): the layer's gauges set from a fresh snapshot
    /// (a table scan, once per scrape rather than per request), then the text format.
    pub(crate) async fn serve(
        addr: SocketAddr,
        scrape: PrometheusHandle,
        layer: RateLimitLayer<ClientIp>,
    ) -> std::io::Result<SocketAddr> {
        let listener = TcpListener::bind(addr).await?;
        let bound = listener.local_addr()?;
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let (scrape, layer) = (scrape.clone(), layer.clone());
                let render = hyper::service::service_fn(move |_req| {
                    layer.stats();
                    scrape.run_upkeep();
                    let mut response = Response::new(Full::new(Bytes::from(scrape.render())));
                    response.headers_mut().insert(
                        http::header::CONTENT_TYPE,
                        http::HeaderValue::from_static("text/plain; version=0.0.4"),
                    );
                    std::future::ready(Ok::<_, Infallible>(response))
                });
                tokio::spawn(async move {
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), render)
                        .await;
                });
            }
        });
        Ok(bound)
    }
}

/// `--metrics` without the `metrics` feature: the layer records nothing to serve.
#[cfg(not(feature = "metrics"))]
mod prometheus {
    use std::net::SocketAddr;

    use tollgate_tower::{ClientIp, RateLimitLayer};

    pub(crate) enum Never {}

    pub(crate) fn install() -> Result<Never, String> {
        Err(String::from(
            "--metrics needs tollgate-tower's `metrics` feature, which this build turned \
             off (it is on by default): build without --no-default-features",
        ))
    }

    pub(crate) async fn serve(
        _: SocketAddr,
        never: Never,
        _: RateLimitLayer<ClientIp>,
    ) -> std::io::Result<SocketAddr> {
        match never {}
    }
}
