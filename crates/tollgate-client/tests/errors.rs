//! Which errors of the wrapped client are retried, over hyper-util's client on real
//! sockets: a refused connection is, an unresolvable host or a URI the client cannot take
//! is not (unless a hook says so).

use std::error::Error;
use std::io;
use std::time::Duration;

use http::Request;
use http_body_util::Empty;
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tollgate_client::{AdaptiveConfig, PoliteLayer, RetryPolicy, is_transient_error};
use tower::{Layer, ServiceExt};

fn layer(policy: RetryPolicy) -> PoliteLayer {
    PoliteLayer::new(AdaptiveConfig::new(1_000.0).ceiling(10_000.0))
        .retry(policy.base(Duration::from_millis(1)).max_retries(3))
}

/// GETs `uri` through `layer` over hyper-util's client; returns the host's attempts.
async fn attempts(layer: &PoliteLayer, uri: &str, key: &str) -> u64 {
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let req = Request::get(uri).body(Empty::new()).unwrap();
    let err = layer.layer(client).oneshot(req).await.unwrap_err();
    let h = layer.host(key).expect("tracked");
    assert_eq!(h.errors, h.requests, "{err}");
    h.requests
}

/// A port on 127.0.0.1 that nothing listens on (bound, then closed).
async fn closed_port() -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    listener.local_addr().unwrap().port()
}

#[tokio::test]
async fn a_refused_connection_is_retried() {
    let port = closed_port().await;
    let l = layer(RetryPolicy::new());
    let uri = format!("http://127.0.0.1:{port}/");
    assert_eq!(attempts(&l, &uri, &format!("127.0.0.1:{port}")).await, 4);
    assert_eq!(l.host(&format!("127.0.0.1:{port}")).unwrap().gave_up, 1);
}

#[tokio::test]
async fn an_unresolvable_host_is_not_retried() {
    let l = layer(RetryPolicy::new());
    let n = attempts(
        &l,
        "http://no-such-host.invalid/",
        "no-such-host.invalid:80",
    )
    .await;
    assert_eq!(n, 1);
}

#[tokio::test]
async fn a_uri_the_client_cannot_take_is_not_retried() {
    // hyper-util's HTTP connector takes no https.
    let l = layer(RetryPolicy::new());
    assert_eq!(attempts(&l, "https://127.0.0.1:9/", "127.0.0.1:9").await, 1);
}

#[tokio::test]
async fn a_hook_retries_what_the_default_does_not() {
    let l = layer(RetryPolicy::new().retry_errors_if(|err| {
        let mut next = Some(err);
        while let Some(e) = next {
            if e.to_string().contains("dns error") {
                return true;
            }
            next = e.source();
        }
        false
    }));
    let n = attempts(
        &l,
        "http://no-such-host.invalid/",
        "no-such-host.invalid:80",
    )
    .await;
    assert_eq!(n, 4);
}

#[derive(Debug)]
struct Wrapper(io::Error);

impl std::fmt::Display for Wrapper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("wrapped")
    }
}

impl Error for Wrapper {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        Some(&self.0)
    }
}

#[test]
fn the_default_classifier_walks_the_source_chain_for_io_kinds() {
    use io::ErrorKind::*;
    for kind in [
        ConnectionRefused,
        ConnectionReset,
        ConnectionAborted,
        TimedOut,
        BrokenPipe,
        UnexpectedEof,
    ] {
        assert!(
            is_transient_error(&Wrapper(io::Error::from(kind))),
            "{kind:?}"
        );
    }
    for kind in [InvalidInput, InvalidData, PermissionDenied, NotFound, Other] {
        assert!(
            !is_transient_error(&Wrapper(io::Error::from(kind))),
            "{kind:?}"
        );
    }
    let unknown = std::fmt::Error;
    assert!(!is_transient_error(&unknown));
    assert!(!RetryPolicy::new().retries_error(&unknown));
    assert!(
        RetryPolicy::new()
            .retry_errors_if(|_| true)
            .retries_error(&unknown)
    );
}
