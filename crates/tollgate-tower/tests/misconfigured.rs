//! A server set up without peer addresses (no `SocketAddr` in the request extensions, as
//! hyper serves by default, or axum without `ConnectInfo`): every request is keyless for
//! `PeerIp` and `ClientIp`. The layer says so once, loudly (a `tracing` warning, once per
//! process), and counts those requests apart. In a binary of its own: the warning is
//! process-wide, and this test installs the process's subscriber.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use http::StatusCode;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tollgate::Quota;
use tollgate_tower::{ClientIp, MissingKey, PeerIp, RateLimitLayer};
use tower::Layer;
use tracing::subscriber::Subscriber;
use tracing::{Event, Level, Metadata};

use crate::common::*;

/// Serves `layer` over `hello()` with hyper as it comes: nothing puts the peer address in
/// the requests' extensions.
async fn serve_without_peer<L: Layer<HelloService, Service: Served>>(layer: L) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let svc = layer.layer(boxed_hello());
    tokio::spawn(async move {
        loop {
            let (stream, _peer) = listener.accept().await.unwrap();
            let svc = svc.clone();
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), TowerToHyperService::new(svc))
                    .await;
            });
        }
    });
    addr
}

/// Counts the warning events whose message names the missing peer address.
struct Warnings(Arc<AtomicUsize>);

struct Message(String);

impl tracing::field::Visit for Message {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
}

impl Subscriber for Warnings {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &Event<'_>) {
        let mut message = Message(String::new());
        event.record(&mut message);
        if *event.metadata().level() == Level::WARN && message.0.contains("no peer address") {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

#[tokio::test]
async fn a_server_without_peer_addresses_is_told_once_and_counted_apart() {
    let warnings = Arc::new(AtomicUsize::new(0));
    tracing::subscriber::set_global_default(Warnings(Arc::clone(&warnings))).unwrap();

    // PeerIp, the default missing-key policy: every request a 400, each counted as such.
    let peer_ip = RateLimitLayer::new(Quota::per_minute(100), PeerIp::new());
    let addr = serve_without_peer(peer_ip.clone()).await;
    for _ in 0..3 {
        assert_eq!(get_once(addr, &[]).await.0, StatusCode::BAD_REQUEST);
    }
    let counts = peer_ip.counts();
    assert_eq!(
        (counts.no_peer_address, counts.missing_key_rejected),
        (3, 3)
    );
    assert_eq!(counts.unattributable, 0);

    // ClientIp under MissingKey::Allow: every request passes unlimited; counted all the same.
    let client_ip = RateLimitLayer::builder(
        tollgate::Limiter::keyed(Quota::per_minute(1)),
        ClientIp::trusting(["127.0.0.1"]).unwrap(),
    )
    .on_missing_key(MissingKey::Allow)
    .build();
    let addr = serve_without_peer(client_ip.clone()).await;
    for _ in 0..3 {
        let xff = [("x-forwarded-for", &b"203.0.113.9"[..])];
        assert_eq!(get_once(addr, &xff).await.0, StatusCode::OK);
    }
    let counts = client_ip.counts();
    assert_eq!((counts.no_peer_address, counts.missing_key_allowed), (3, 3));

    // Six keyless requests, one warning.
    assert_eq!(warnings.load(Ordering::Relaxed), 1);
}
