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
}

const USAGE: &str = "usage: server --listen ADDR --rate N --burst B \
                     [--trusted-proxy CIDR]... [--serve-for SECONDS]";

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
    let layer = RateLimitLayer::new(quota, ClientIp::from_cidrs(args.trusted));
    let limiter = layer.limiter().clone();
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
