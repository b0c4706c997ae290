//! A scripted local HTTP server for the body and redirect tests: a hyper server on
//! 127.0.0.1 answering each request by a route closure, logging what it received (method,
//! path, headers, body) and counting the responses it has under way: a response is under
//! way from the request's arrival until its body has been sent to its end or dropped.

#![allow(dead_code, unreachable_pub)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use http::{HeaderMap, Method, Request, Response};
use http_body::{Body, Frame};
use http_body_util::BodyExt;
use hyper::body::{Bytes, Incoming};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::mpsc;

/// What the server received.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: Method,
    /// The path and query.
    pub target: String,
    pub headers: HeaderMap,
    pub body: Bytes,
}

/// How a response's body is sent.
pub enum Reply {
    /// All at once.
    Full(Bytes),
    /// Each chunk as the test sends it, to the end when the test drops the sender.
    Stream(mpsc::Receiver<Bytes>),
    /// One chunk, then nothing more, ever (until the client goes away).
    Stalled(Bytes),
}

/// A response body of the server: a [`Reply`] and the server's count of responses under
/// way, given back at its end or its drop.
pub struct ServeBody {
    reply: Reply,
    under_way: Option<Arc<Counts>>,
}

impl ServeBody {
    fn done(&mut self) {
        if let Some(c) = self.under_way.take() {
            c.active.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

impl Drop for ServeBody {
    fn drop(&mut self) {
        self.done();
    }
}

impl Body for ServeBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let next = match &mut self.reply {
            Reply::Full(b) | Reply::Stalled(b) if !b.is_empty() => {
                Poll::Ready(Some(std::mem::take(b)))
            }
            Reply::Full(_) => Poll::Ready(None),
            Reply::Stalled(_) => Poll::Pending,
            Reply::Stream(rx) => rx.poll_recv(cx),
        };
        match next {
            Poll::Ready(Some(b)) => Poll::Ready(Some(Ok(Frame::data(b)))),
            Poll::Ready(None) => {
                self.done();
                Poll::Ready(None)
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

/// The server's counts.
#[derive(Debug, Default)]
pub struct Counts {
    active: AtomicUsize,
    max_active: AtomicUsize,
    log: Mutex<Vec<Seen>>,
}

/// A running server.
#[derive(Clone)]
pub struct Server {
    pub addr: SocketAddr,
    counts: Arc<Counts>,
}

impl Server {
    /// `http://127.0.0.1:port` followed by `path`.
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.addr.port())
    }
    /// The layer's key for this server (`host_key`).
    pub fn key(&self) -> String {
        format!("127.0.0.1:{}", self.addr.port())
    }
    /// The requests received, in order.
    pub fn seen(&self) -> Vec<Seen> {
        self.counts.log.lock().unwrap().clone()
    }
    /// How many requests were received.
    pub fn started(&self) -> usize {
        self.counts.log.lock().unwrap().len()
    }
    /// The most responses under way at once.
    pub fn max_active(&self) -> usize {
        self.counts.max_active.load(Ordering::SeqCst)
    }
}

/// Starts a server on the current tokio runtime, answering by `route` (given the request
/// and how many came before it); it serves until the runtime stops.
pub async fn serve<F>(route: F) -> Server
where
    F: Fn(&Seen, usize) -> Response<Reply> + Send + Sync + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let counts = Arc::new(Counts::default());
    let route = Arc::new(route);
    let server = Server {
        addr,
        counts: Arc::clone(&counts),
    };
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let (counts, route) = (Arc::clone(&counts), Arc::clone(&route));
            let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                let (counts, route) = (Arc::clone(&counts), Arc::clone(&route));
                async move {
                    let (parts, body) = req.into_parts();
                    let body = body
                        .collect()
                        .await
                        .map(|c| c.to_bytes())
                        .unwrap_or_default();
                    let seen = Seen {
                        method: parts.method,
                        target: parts
                            .uri
                            .path_and_query()
                            .map_or_else(String::new, |p| p.as_str().to_owned()),
                        headers: parts.headers,
                        body,
                    };
                    let n = {
                        let mut log = counts.log.lock().unwrap();
                        log.push(seen.clone());
                        log.len() - 1
                    };
                    let now = counts.active.fetch_add(1, Ordering::SeqCst) + 1;
                    counts.max_active.fetch_max(now, Ordering::SeqCst);
                    let res = route(&seen, n).map(|reply| ServeBody {
                        reply,
                        under_way: Some(Arc::clone(&counts)),
                    });
                    Ok::<_, Infallible>(res)
                }
            });
            tokio::spawn(async move {
                let conn = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc);
                let _ = conn.await;
            });
        }
    });
    server
}

/// A response of `status` with a whole `body`.
pub fn full(status: u16, body: &'static str) -> Response<Reply> {
    let mut res = Response::new(Reply::Full(Bytes::from_static(body.as_bytes())));
    *res.status_mut() = http::StatusCode::from_u16(status).unwrap();
    res
}

/// A redirect of `status` to `location`.
pub fn redirect(status: u16, location: &str) -> Response<Reply> {
    let mut res = full(status, "");
    res.headers_mut()
        .insert(http::header::LOCATION, location.parse().unwrap());
    res
}
