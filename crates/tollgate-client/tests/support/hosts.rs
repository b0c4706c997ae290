//! Local HTTP hosts for the crawl demo and the convergence test: hyper servers on
//! 127.0.0.1, each guarded by tollgate-tower with its own hidden rate (one limit for all
//! clients), some sending the IETF RateLimit fields, some only 429 with `Retry-After`, some
//! failing at random with 503. Each counts its answers by status.

#![allow(dead_code, unreachable_pub)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tollgate::{Limiter, Quota};
use tollgate_tower::{Global, RateLimitLayer};
use tower::{ServiceBuilder, service_fn};

/// What a host is like.
#[derive(Debug, Clone, Copy)]
pub struct HostSpec {
    /// A short name for the table.
    pub name: &'static str,
    /// The hidden rate, per second.
    pub rate: u32,
    /// The server's burst (cells).
    pub burst: u32,
    /// Whether it sends `RateLimit-Policy` and `RateLimit` (else only 429 + `Retry-After`).
    pub ietf: bool,
    /// The share of admitted requests answered 503 (without `Retry-After`) instead of 200.
    pub flaky: f64,
}

impl HostSpec {
    /// How the host talks, for the table.
    pub fn kind(&self) -> &'static str {
        match (self.ietf, self.flaky > 0.0) {
            (true, false) => "ietf",
            (true, true) => "ietf+503",
            (false, false) => "429 only",
            (false, true) => "429+503",
        }
    }
}

/// The server's counts of its answers.
#[derive(Debug, Default)]
pub struct Served {
    pub ok: AtomicU64,
    pub throttled: AtomicU64,
    pub unavailable: AtomicU64,
}

impl Served {
    pub fn ok(&self) -> u64 {
        self.ok.load(Ordering::Relaxed)
    }
    pub fn throttled(&self) -> u64 {
        self.throttled.load(Ordering::Relaxed)
    }
}

/// A running host.
#[derive(Debug, Clone)]
pub struct Host {
    pub spec: HostSpec,
    pub addr: SocketAddr,
    pub served: Arc<Served>,
}

impl Host {
    /// The client's key for it (`host_key` of its URL).
    pub fn key(&self) -> String {
        format!("127.0.0.1:{}", self.addr.port())
    }
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/", self.addr.port())
    }
}

/// Starts a host on the current tokio runtime; it serves until the runtime stops.
pub async fn start(spec: HostSpec) -> Host {
    let quota = Quota::per_second(spec.rate).allow_burst(spec.burst);
    let limit = RateLimitLayer::builder(Limiter::keyed(quota), Global)
        .headers(spec.ietf)
        .policy_name(spec.name)
        .unwrap()
        .build();
    let served = Arc::new(Served::default());
    let counts = Arc::clone(&served);
    let flaky = spec.flaky;
    let svc = ServiceBuilder::new()
        .map_response(move |res: Response<Full<Bytes>>| {
            let counter = match res.status() {
                StatusCode::OK => &counts.ok,
                StatusCode::TOO_MANY_REQUESTS => &counts.throttled,
                _ => &counts.unavailable,
            };
            counter.fetch_add(1, Ordering::Relaxed);
            res
        })
        .layer(limit)
        .service(service_fn(move |_req: Request<Incoming>| async move {
            let mut res = Response::new(Full::new(Bytes::from_static(b"page\n")));
            if flaky > 0.0 && fastrand::f64() < flaky {
                *res.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
            }
            Ok::<_, Infallible>(res)
        }));
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind 127.0.0.1:0");
    let addr = listener.local_addr().expect("local address");
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            };
            let svc = svc.clone();
            tokio::spawn(async move {
                let conn = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), TowerToHyperService::new(svc));
                let _ = conn.await;
            });
        }
    });
    Host { spec, addr, served }
}

/// A server answering every request with `status`; returns its port and its request count.
pub async fn answering(status: StatusCode) -> (u16, Arc<AtomicU64>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(AtomicU64::new(0));
    let count = Arc::clone(&seen);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let count = Arc::clone(&count);
            let svc = hyper::service::service_fn(move |_req: Request<Incoming>| {
                count.fetch_add(1, Ordering::Relaxed);
                let mut res = Response::new(Full::new(Bytes::new()));
                *res.status_mut() = status;
                async move { Ok::<_, Infallible>(res) }
            });
            tokio::spawn(async move {
                let conn = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc);
                let _ = conn.await;
            });
        }
    });
    (port, seen)
}
