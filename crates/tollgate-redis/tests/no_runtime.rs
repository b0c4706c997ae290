//! `connect` outside any runtime, without the `smol-comp` feature: the `redis` crate would
//! panic there ("there is no reactor running"); the builder says what is wrong instead.
//! (With `smol-comp` the connection runs on smol's reactor: `tests/smol.rs`.)

#![cfg(not(feature = "smol-comp"))]

use std::pin::pin;
use std::task::{Context, Poll, Waker};

use tollgate::Quota;
use tollgate_redis::FleetLimiter;

/// Polls `fut` once, outside any runtime: `connect` never waits (it connects lazily).
fn poll_once<F: Future>(fut: F) -> F::Output {
    let mut cx = Context::from_waker(Waker::noop());
    match pin!(fut).poll(&mut cx) {
        Poll::Ready(v) => v,
        Poll::Pending => panic!("connect waited"),
    }
}

#[test]
fn connect_outside_a_runtime_is_a_clear_error() {
    let client = redis::Client::open("redis://127.0.0.1:1/").unwrap();
    let err = poll_once(FleetLimiter::builder(Quota::per_second(5)).connect(client)).unwrap_err();
    assert_eq!(err.kind(), redis::ErrorKind::Client, "{err}");
    assert!(err.to_string().contains("Tokio runtime"), "{err}");

    let nodes = ["redis://127.0.0.1:1/"];
    let cluster = redis::cluster::ClusterClient::new(nodes).unwrap();
    let err = poll_once(FleetLimiter::builder(Quota::per_second(5)).connect_cluster(cluster))
        .unwrap_err();
    assert_eq!(err.kind(), redis::ErrorKind::Client, "{err}");
    assert!(err.to_string().contains("Tokio runtime"), "{err}");
}
