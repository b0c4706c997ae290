//! A gRPC server (tonic) with a per-client-IP limit: `N` calls per second with bursts of
//! `B`, refused as gRPC (`grpc-status: 8`, RESOURCE_EXHAUSTED) with the IETF fields.
//!
//! ```sh
//! cargo run -p tollgate-tower --features tonic --example tonic -- --listen 127.0.0.1:50051 --rate 5 --burst 10
//! curl -si --http2-prior-knowledge -X POST -H 'content-type: application/grpc' \
//!     --data-binary '' http://127.0.0.1:50051/pkg.Service/Hello
//! ```
//!
//! The `tonic` feature reads the peer address tonic's server records for each call over
//! plain TCP (`TcpConnectInfo`); over TLS, copy `TlsConnectInfo`'s `remote_addr()` into the
//! request's extensions as a `SocketAddr` in a layer in front of this one. The service below
//! answers every call with an empty message and `grpc-status: 0`, so the example needs no
//! generated code: put your own `add_service(...)` there.
//!
//! `--serve-for SECONDS` stops it after that long (for smoke runs); it prints the layer's
//! counts when it stops. `--help` prints the usage.

use std::convert::Infallible;
use std::future::{Ready, ready};
use std::net::SocketAddr;
use std::process::ExitCode;
use std::task::{Context, Poll};
use std::time::Duration;

use tollgate_tower::{Limiter, PeerIp, Quota, RateLimitLayer};
use tonic::transport::Server;
use tonic::transport::server::TcpIncoming;

const USAGE: &str = "usage: tonic --listen ADDR --rate N --burst B [--serve-for SECONDS]";

/// The gRPC service `pkg.Service`: every call succeeds, with no message.
#[derive(Clone)]
struct Hello;

impl tonic::server::NamedService for Hello {
    const NAME: &'static str = "pkg.Service";
}

impl tower_service::Service<http::Request<tonic::body::Body>> for Hello {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = Ready<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: http::Request<tonic::body::Body>) -> Self::Future {
        let answer = http::Response::builder()
            .header("content-type", "application/grpc")
            .header("grpc-status", "0")
            .body(tonic::body::Body::empty())
            .expect("a valid response");
        ready(Ok(answer))
    }
}

struct Args {
    listen: SocketAddr,
    rate: u32,
    burst: u32,
    serve_for: Option<Duration>,
}

fn parse_args() -> Result<Option<Args>, String> {
    let (mut listen, mut rate, mut burst, mut serve_for) = (None, None, None, None);
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or(format!("{flag} needs a value\n{USAGE}"));
        match flag.as_str() {
            "--listen" => listen = Some(value()?.parse().map_err(|e| format!("--listen: {e}"))?),
            "--rate" => rate = Some(value()?.parse().map_err(|e| format!("--rate: {e}"))?),
            "--burst" => burst = Some(value()?.parse().map_err(|e| format!("--burst: {e}"))?),
            "--serve-for" => {
                let secs: f64 = value()?.parse().map_err(|e| format!("--serve-for: {e}"))?;
                serve_for = Some(
                    Duration::try_from_secs_f64(secs).map_err(|e| format!("--serve-for: {e}"))?,
                );
            }
            "-h" | "--help" => return Ok(None),
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    let required = |name: &str| format!("{name} is required\n{USAGE}");
    Ok(Some(Args {
        listen: listen.ok_or_else(|| required("--listen"))?,
        rate: rate.ok_or_else(|| required("--rate"))?,
        burst: burst.ok_or_else(|| required("--burst"))?,
        serve_for,
    }))
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(Some(args)) => args,
        Ok(None) => {
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
    let layer = RateLimitLayer::builder(Limiter::keyed(quota), PeerIp::new())
        .policy_name("per-ip")
        .expect("policy names are printable ASCII")
        .build();

    let listener = match tokio::net::TcpListener::bind(args.listen).await {
        Ok(listener) => listener,
        Err(e) => {
            eprintln!("cannot listen on {}: {e}", args.listen);
            return ExitCode::FAILURE;
        }
    };
    println!(
        "listening on {}",
        listener.local_addr().expect("a bound address")
    );
    let server = Server::builder()
        .layer(layer.clone())
        .add_service(Hello)
        .serve_with_incoming(TcpIncoming::from(listener));
    let served = match args.serve_for {
        Some(d) => tokio::time::timeout(d, server).await.unwrap_or(Ok(())),
        None => server.await,
    };
    if let Err(e) = served {
        eprintln!("serve: {e}");
        return ExitCode::FAILURE;
    }
    let counts = layer.counts();
    println!(
        "stopped: {} admitted, {} refused",
        counts.admitted, counts.rejected
    );
    ExitCode::SUCCESS
}
