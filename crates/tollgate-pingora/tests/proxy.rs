//! The limit inside a real Pingora proxy, over real sockets: a real upstream, a client on
//! TCP. Quotas are per minute, so no refill happens while a test runs and every status is
//! exact.

mod common;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use common::{get, proxy, send, upstream};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tollgate::Quota;
use tollgate_pingora::{ClientIp, ProxyLimit};

fn peer_only() -> ClientIp {
    ClientIp::trusting::<[&str; 0]>([]).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_burst_a_429_with_the_fields_that_never_reaches_the_upstream() {
    let (up, served) = upstream().await;
    let limit = ProxyLimit::new(Quota::per_minute(1).allow_burst(2), peer_only());
    let addr = proxy(Arc::new(limit), up).await;

    let first = get(addr, None).await;
    assert_eq!(first.status, 200);
    assert_eq!(first.body, "hello");
    assert_eq!(
        first.header("ratelimit-policy"),
        Some("\"default\";q=2;w=120")
    );
    assert_eq!(first.header("ratelimit"), Some("\"default\";r=1;t=60"));
    let second = get(addr, None).await;
    assert_eq!(second.status, 200);
    assert_eq!(second.header("ratelimit"), Some("\"default\";r=0;t=120"));

    let refused = get(addr, None).await;
    assert_eq!(refused.status, 429);
    let retry: u64 = refused.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=60).contains(&retry), "retry-after {retry}");
    assert_eq!(
        refused.header("ratelimit-policy"),
        Some("\"default\";q=2;w=120")
    );
    assert!(
        refused
            .header("ratelimit")
            .unwrap()
            .starts_with("\"default\";r=0;t=")
    );
    assert_eq!(
        refused.header("content-type"),
        Some("application/problem+json")
    );
    assert!(refused.body.contains("\"status\":429"), "{}", refused.body);
    // ordering: read after the responses arrived.
    assert_eq!(
        served.load(Ordering::Relaxed),
        2,
        "the refusal went no further"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_a_trusted_proxy_each_client_has_its_own_limit() {
    let (up, served) = upstream().await;
    let trusting = ClientIp::trusting(["127.0.0.1"]).unwrap();
    let limit = Arc::new(ProxyLimit::new(Quota::per_minute(1), trusting));
    let addr = proxy(limit.clone(), up).await;

    assert_eq!(get(addr, Some("203.0.113.9")).await.status, 200);
    assert_eq!(get(addr, Some("203.0.113.9")).await.status, 429);
    // What the client wrote left of its address changes nothing: the walk from the right.
    assert_eq!(get(addr, Some("6.6.6.6, 203.0.113.9")).await.status, 429);
    assert_eq!(get(addr, Some("198.51.100.4")).await.status, 200);
    // An element naming no address: a 400, not keyed as the proxy.
    let unattributable = get(addr, Some("unknown")).await;
    assert_eq!(unattributable.status, 400);
    assert_eq!(unattributable.header("retry-after"), None);
    assert_eq!(limit.limiter().stats().keys_held, 2);
    // ordering: read after the responses arrived.
    assert_eq!(served.load(Ordering::Relaxed), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_peer_is_the_client_whatever_it_forwards() {
    let (up, _) = upstream().await;
    let limit = ProxyLimit::new(Quota::per_minute(1), peer_only());
    let addr = proxy(Arc::new(limit), up).await;

    assert_eq!(get(addr, Some("203.0.113.9")).await.status, 200);
    assert_eq!(get(addr, Some("198.51.100.4")).await.status, 429);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delay_mode_waits_for_a_turn_within_its_bound_and_refuses_beyond() {
    let (up, served) = upstream().await;
    // 20 per second, no burst: each request after the first waits about 50 ms.
    let waits = ProxyLimit::new(Quota::per_second(20).allow_burst(1), peer_only())
        .delay(Duration::from_secs(30));
    let addr = proxy(Arc::new(waits), up).await;
    for _ in 0..3 {
        let response = get(addr, None).await;
        assert_eq!(response.status, 200);
        assert!(response.header("ratelimit").is_some());
    }
    // ordering: read after the responses arrived.
    assert_eq!(served.load(Ordering::Relaxed), 3);

    // A turn a minute away is beyond a 10 ms bound: refused at once.
    let (up, _) = upstream().await;
    let short = ProxyLimit::new(Quota::per_minute(1), peer_only()).delay(Duration::from_millis(10));
    let addr = proxy(Arc::new(short), up).await;
    assert_eq!(get(addr, None).await.status, 200);
    assert_eq!(get(addr, None).await.status, 429);
}

/// Delay mode: clients that hang up while their requests wait leave the queue, their
/// cells given back: none of their requests reaches the upstream, and the next client
/// takes the first one's turn instead of waiting behind all of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delay_mode_forgets_the_requests_of_clients_that_hung_up() {
    let (up, served) = upstream().await;
    let limit = ProxyLimit::new(Quota::per_second(1).allow_burst(1), peer_only())
        .delay(Duration::from_secs(30));
    let addr = proxy(Arc::new(limit), up).await;
    assert_eq!(get(addr, None).await.status, 200);
    let mut hung_up = Vec::new();
    for _ in 0..8 {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream
            .write_all(b"GET / HTTP/1.1\r\nhost: test\r\n\r\n")
            .await
            .unwrap();
        hung_up.push(stream);
    }
    // Let them queue, then hang up well before the first one's turn (1 s out).
    tokio::time::sleep(Duration::from_millis(200)).await;
    drop(hung_up);
    let next = get(addr, None).await;
    assert_eq!(next.status, 200);
    // ordering: read after the response arrived.
    assert_eq!(
        served.load(Ordering::Relaxed),
        2,
        "requests of clients that hung up went upstream"
    );
}

/// A refused gRPC request gets the gRPC answer tollgate-tower gives: trailers-only, HTTP
/// 200 with `grpc-status: 8` (RESOURCE_EXHAUSTED) and the fields, no body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_grpc_request_gets_a_grpc_status() {
    let (up, served) = upstream().await;
    let limit = ProxyLimit::new(Quota::per_minute(1), peer_only());
    let addr = proxy(Arc::new(limit), up).await;
    let call = "POST /svc.Greeter/Hello HTTP/1.1\r\nhost: test\r\n\
                content-type: application/grpc+proto\r\ncontent-length: 0\r\n\
                connection: close\r\n\r\n";
    assert_eq!(send(addr, call).await.status, 200);
    let refused = send(addr, call).await;
    assert_eq!(refused.status, 200);
    assert_eq!(refused.header("grpc-status"), Some("8"));
    assert_eq!(
        refused.header("content-type"),
        Some("application/grpc+proto")
    );
    assert!(refused.header("grpc-message").is_some());
    assert!(refused.header("ratelimit").is_some());
    let retry: u64 = refused.header("retry-after").unwrap().parse().unwrap();
    assert!(retry >= 1);
    assert_eq!(refused.header("content-length"), Some("0"));
    assert_eq!(refused.body, "");
    // ordering: read after the responses arrived.
    assert_eq!(
        served.load(Ordering::Relaxed),
        1,
        "the refusal went no further"
    );
}

/// Delay mode: a client whose side of the connection closes while its request waits is
/// gone, as Pingora's own proxy loop takes it: the request leaves, and no error answer (a
/// 500) is written for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_request_whose_client_closed_gets_no_error_answer() {
    use tokio::io::AsyncReadExt;

    let (up, served) = upstream().await;
    let limit = ProxyLimit::new(Quota::per_second(1).allow_burst(1), peer_only())
        .delay(Duration::from_secs(30));
    let addr = proxy(Arc::new(limit), up).await;
    assert_eq!(get(addr, None).await.status, 200);
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(b"GET / HTTP/1.1\r\nhost: test\r\n\r\n")
        .await
        .unwrap();
    stream.shutdown().await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut raw))
        .await
        .expect("the proxy closes the connection")
        .unwrap();
    let text = String::from_utf8_lossy(&raw);
    assert!(!text.contains(" 500 "), "{text}");
    // ordering: read after the connection closed.
    assert_eq!(served.load(Ordering::Relaxed), 1);
}
