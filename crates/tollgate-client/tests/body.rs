//! The per-host permit covers the response body: over real sockets (hyper's server, and
//! hyper-util's client under `PoliteLayer`), a host at `max_in_flight(1)` that streams a
//! slow body gets its next request only once the body is read to its end or dropped.

mod serve;

use std::time::Duration;

use http::Request;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serve::{Reply, Server};
use tokio::sync::mpsc;
use tollgate_client::{AdaptiveConfig, MAX_RATE, PoliteLayer, RetryPolicy};
use tower::{Layer, ServiceExt};

/// A layer that only its permits hold back (the highest rate), one request per host.
fn layer() -> PoliteLayer {
    PoliteLayer::new(AdaptiveConfig::new(MAX_RATE))
        .max_in_flight(1)
        .retry(RetryPolicy::never())
}

fn get(url: &str) -> Request<Full<Bytes>> {
    Request::get(url).body(Full::new(Bytes::new())).unwrap()
}

/// A server whose every response streams its body from a channel; the senders come out of
/// the returned receiver, one per request, in order.
async fn streaming() -> (Server, mpsc::UnboundedReceiver<mpsc::Sender<Bytes>>) {
    let (give, senders) = mpsc::unbounded_channel();
    let server = serve::serve(move |_, _| {
        let (tx, rx) = mpsc::channel(4);
        give.send(tx).unwrap();
        http::Response::new(Reply::Stream(rx))
    })
    .await;
    (server, senders)
}

/// The time a request that is free to go gets to reach the server before the test says
/// it did not: it only bounds how soon a broken layer is caught, never a passing run.
const GRACE: Duration = Duration::from_millis(300);

#[tokio::test]
async fn the_next_request_waits_for_the_body_to_be_read() {
    let (server, mut senders) = streaming().await;
    let layer = layer();
    let client = layer.layer(Client::builder(TokioExecutor::new()).build_http());
    let url = server.url("/slow");

    let first = tokio::spawn(client.clone().oneshot(get(&url)));
    let tx1 = senders.recv().await.unwrap();
    tx1.send(Bytes::from_static(b"head of the body "))
        .await
        .unwrap();
    let res1 = first.await.unwrap().unwrap();
    assert!(res1.body().holds_permit());
    let host = layer.host(&server.key()).unwrap();
    assert_eq!(host.in_flight, 1, "the body holds the host's permit");

    let second = tokio::spawn(client.clone().oneshot(get(&url)));
    tokio::time::sleep(GRACE).await;
    assert_eq!(server.started(), 1, "the second request went out mid-body");
    assert_eq!(layer.host(&server.key()).unwrap().requests, 1);

    // The rest of the body, then its end: the permit passes to the second request.
    tx1.send(Bytes::from_static(b"and its tail")).await.unwrap();
    drop(tx1);
    let body = res1.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(&body[..], b"head of the body and its tail");
    let tx2 = senders.recv().await.unwrap();
    drop(tx2);
    let res2 = second.await.unwrap().unwrap();
    assert!(
        res2.into_body()
            .collect()
            .await
            .unwrap()
            .to_bytes()
            .is_empty()
    );
    assert_eq!(server.started(), 2);
    assert_eq!(
        server.max_active(),
        1,
        "the server served the two one after the other"
    );
    let host = layer.host(&server.key()).unwrap();
    assert_eq!(
        (host.requests, host.in_flight, host.in_flight_max),
        (2, 0, 1)
    );
}

#[tokio::test]
async fn dropping_the_body_early_releases_the_permit() {
    let (server, mut senders) = streaming().await;
    let layer = layer();
    let client = layer.layer(Client::builder(TokioExecutor::new()).build_http());
    let url = server.url("/slow");

    let first = tokio::spawn(client.clone().oneshot(get(&url)));
    let tx1 = senders.recv().await.unwrap();
    tx1.send(Bytes::from_static(b"a first chunk"))
        .await
        .unwrap();
    let mut res1 = first.await.unwrap().unwrap();
    // Read one frame of it, then give the rest up: the server is still sending.
    let frame = res1.body_mut().frame().await.unwrap().unwrap();
    assert_eq!(frame.into_data().unwrap(), "a first chunk");
    assert!(res1.body().holds_permit());
    drop(res1);
    assert_eq!(layer.host(&server.key()).unwrap().in_flight, 0);

    let second = tokio::spawn(client.clone().oneshot(get(&url)));
    drop(senders.recv().await.unwrap()); // the second reached the server: its body ends
    let res2 = second.await.unwrap().unwrap();
    res2.into_body().collect().await.unwrap();
    assert_eq!(server.started(), 2);
    drop(tx1);
}

#[tokio::test]
async fn a_retried_answer_gives_its_permit_back() {
    // Two 503s whose bodies never end, then a 200: with one permit per host, the retries
    // go out only if the layer's dropped answers released theirs.
    let server = serve::serve(|_, n| {
        let mut res = if n < 2 {
            http::Response::new(Reply::Stalled(Bytes::from_static(b"busy")))
        } else {
            serve::full(200, "done")
        };
        if n < 2 {
            *res.status_mut() = http::StatusCode::SERVICE_UNAVAILABLE;
        }
        res
    })
    .await;
    let layer = layer().retry(RetryPolicy::new().base(Duration::from_millis(1)));
    let client = layer.layer(Client::builder(TokioExecutor::new()).build_http());
    let res = tokio::time::timeout(
        Duration::from_secs(60),
        client.oneshot(get(&server.url("/"))),
    )
    .await
    .expect("a retry waits on a permit its discarded answer holds")
    .unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(
        &res.into_body().collect().await.unwrap().to_bytes()[..],
        b"done"
    );
    let host = layer.host(&server.key()).unwrap();
    assert_eq!((host.requests, host.retries, host.in_flight), (3, 2, 0));
}
