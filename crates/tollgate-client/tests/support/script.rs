//! A scripted local server for the signal tests: hyper on 127.0.0.1, answering each
//! request with what a handler says for its index and path, and counting the requests.

#![allow(dead_code, unreachable_pub)]

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use http::{Request, Response};
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

/// An answer: a status, its fields and its body.
pub type Answer = (u16, Vec<(&'static str, String)>, String);

/// Starts a server on the current tokio runtime answering request `n` (counted from 0) for
/// `path` with `handler(n, path)`; returns its base URL (`http://127.0.0.1:PORT`, no
/// trailing slash) and the count of requests it saw.
pub async fn serve<F>(handler: F) -> (String, Arc<AtomicUsize>)
where
    F: Fn(usize, &str) -> Answer + Send + Sync + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("local address");
    let seen = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&seen);
    let handler = Arc::new(handler);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let count = Arc::clone(&count);
            let handler = Arc::clone(&handler);
            let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                let n = count.fetch_add(1, Ordering::SeqCst);
                let (status, fields, body) = handler(n, req.uri().path());
                let mut res = Response::builder().status(status);
                for (k, v) in fields {
                    res = res.header(k, v);
                }
                let res = res
                    .body(Full::new(Bytes::from(body)))
                    .expect("a valid answer");
                async move { Ok::<_, Infallible>(res) }
            });
            tokio::spawn(async move {
                let conn = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc);
                let _ = conn.await;
            });
        }
    });
    (format!("http://127.0.0.1:{}", addr.port()), seen)
}
