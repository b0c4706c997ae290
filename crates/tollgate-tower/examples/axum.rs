//! An axum service with per-API-key tiers and a per-IP limit, stacked.
//!
//! ```sh
//! cargo run -p tollgate-tower --features axum --example axum -- --listen 127.0.0.1:3000
//! curl -i http://127.0.0.1:3000/                          # anonymous: per-IP limit only
//! curl -i -H 'x-api-key: paid-42' http://127.0.0.1:3000/  # 20/s for paid keys, 2/s for others
//! ```
//!
//! * Requests with an `x-api-key` are limited per key: `paid-*` keys to 20 per second,
//!   other keys to 2 per second (one limiter, a quota per request).
//! * Every request is also limited per client IP to 10 per second (a stacked limit): a key
//!   cannot be shared by a botnet, and anonymous requests are limited too. A refusal by
//!   either limit costs the other nothing.
//!
//! `--serve-for SECONDS` stops it after that long.

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use tollgate::{Limiter, Quota};
use tollgate_tower::{HeaderKey, MissingKey, PeerIp, RateLimitLayer};

#[tokio::main]
async fn main() {
    let mut listen: SocketAddr = "127.0.0.1:3000".parse().unwrap();
    let mut serve_for = None;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().expect("every flag takes a value");
        match flag.as_str() {
            "--listen" => listen = value.parse().expect("--listen ADDR"),
            "--serve-for" => serve_for = Some(Duration::from_secs(value.parse().expect("seconds"))),
            other => panic!("unknown flag {other}; flags: --listen ADDR --serve-for SECONDS"),
        }
    }

    let layer = RateLimitLayer::builder(
        Limiter::keyed(Quota::per_second(2)),
        HeaderKey::new(http::HeaderName::from_static("x-api-key")),
    )
    .policy_name("per-key")
    .quota_for(|parts| match parts.headers.get("x-api-key") {
        Some(key) if key.as_bytes().starts_with(b"paid-") => Quota::per_second(20),
        _ => Quota::per_second(2),
    })
    .on_missing_key(MissingKey::Allow) // anonymous: only the per-IP limit below
    .stack(
        "per-ip",
        Limiter::keyed(Quota::per_second(10)),
        PeerIp::new(),
    )
    .build();

    let app = Router::new()
        .route("/", get(|| async { "hello\n" }))
        .layer(layer);

    let listener = tokio::net::TcpListener::bind(listen).await.unwrap();
    println!("listening on {}", listener.local_addr().unwrap());
    let server = axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    );
    match serve_for {
        Some(d) => {
            let _ = tokio::time::timeout(d, server).await;
        }
        None => server.await.unwrap(),
    }
}
