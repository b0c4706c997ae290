//! The layer in a tonic server (`Server::builder().layer(..)`), called by a real HTTP/2
//! client: the peer address comes from tonic's `TcpConnectInfo`, and a refusal is a gRPC
//! status.

mod common;

use std::convert::Infallible;
use std::future::{Ready, ready};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};

use tokio::net::TcpListener;
use tollgate::{Limiter, ManualClock, Quota};
use tollgate_tower::{PeerIp, RateLimitLayer};
use tonic::transport::Server;
use tonic::transport::server::TcpIncoming;

use crate::common::{connect_h2, grpc_call, policy, ratelimit};

/// The gRPC service `pkg.Service`: every call succeeds with no message (a trailers-only
/// answer, `grpc-status: 0`), so the test needs no generated code.
#[derive(Clone)]
struct Hello;

impl tonic::server::NamedService for Hello {
    const NAME: &'static str = "pkg.Service";
}

impl tower::Service<http::Request<tonic::body::Body>> for Hello {
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
            .unwrap();
        ready(Ok(answer))
    }
}

fn grpc_status(res: &http::Response<hyper::body::Incoming>) -> u32 {
    res.headers()["grpc-status"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap()
}

#[tokio::test]
async fn tonic_server_keys_calls_by_the_tcp_peer_and_refuses_as_grpc() {
    let clock = ManualClock::new();
    let limiter = Limiter::builder(Quota::per_minute(2)).clock(clock).build();
    let layer = RateLimitLayer::builder(limiter, PeerIp::new())
        .policy_name("per-ip")
        .unwrap()
        .build();

    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = Server::builder()
        .layer(layer.clone())
        .add_service(Hello)
        .serve_with_incoming(TcpIncoming::from(listener));
    tokio::spawn(server);

    let mut client = connect_h2(addr).await;
    for left in [1, 0] {
        let admitted = grpc_call(&mut client, &[]).await;
        assert_eq!(admitted.status(), 200);
        assert_eq!(grpc_status(&admitted), 0); // the service answered
        assert_eq!(policy(admitted.headers()), ("per-ip".to_owned(), 2, 60));
        assert_eq!(ratelimit(admitted.headers()).1, left);
    }
    let refused = grpc_call(&mut client, &[]).await;
    assert_eq!(refused.status(), 200); // gRPC carries its refusals in grpc-status
    assert_eq!(grpc_status(&refused), 8); // RESOURCE_EXHAUSTED, not 3 (no key)

    // Keyed by the TCP peer (127.0.0.1): the limiter holds that key, spent.
    let peer = "127.0.0.1".parse().unwrap();
    assert!(layer.limiter().peek(&peer).unwrap_err().is_rate_limited());
    assert_eq!(layer.limiter().count_live_keys(), 1);
    let counts = layer.counts();
    assert_eq!((counts.admitted, counts.rejected), (2, 1));
    assert_eq!(counts.missing_key_rejected, 0);
}

/// A refusal hook on a tonic server (it makes tonic's bodies, as the server's services do)
/// never answers a gRPC call: the refusal is trailers-only, as without a hook.
#[tokio::test]
async fn a_refusal_hook_never_answers_grpc_calls() {
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&calls);
    let limiter = Limiter::builder(Quota::per_minute(1))
        .clock(ManualClock::new())
        .build();
    let layer = RateLimitLayer::builder(limiter, PeerIp::new())
        .on_refusal(move |refusal| {
            counted.fetch_add(1, Ordering::Relaxed);
            let body = http_body_util::Full::new(hyper::body::Bytes::from("slow down"));
            refusal.into_response(tonic::body::Body::new(body))
        })
        .build();

    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = Server::builder()
        .layer(layer)
        .add_service(Hello)
        .serve_with_incoming(TcpIncoming::from(listener));
    tokio::spawn(server);

    let mut client = connect_h2(addr).await;
    assert_eq!(grpc_status(&grpc_call(&mut client, &[]).await), 0);
    let refused = grpc_call(&mut client, &[]).await;
    assert_eq!(refused.status(), 200);
    assert_eq!(grpc_status(&refused), 8);
    assert!(hyper::body::Body::is_end_stream(refused.body()));
    assert_eq!(calls.load(Ordering::Relaxed), 0);
}
