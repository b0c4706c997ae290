//! What the tests serve over real sockets on loopback: a plain HTTP/1.1 upstream, a Pingora
//! proxy in front of it that calls the limit from its filters (as the `proxy` example does),
//! and a client that speaks HTTP/1.1 over TCP.

#![allow(dead_code, unreachable_pub)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use pingora_core::apps::ServerApp;
use pingora_core::protocols::l4::listener::Listener;
use pingora_core::server::configuration::ServerConf;
use pingora_core::upstreams::peer::HttpPeer;
use pingora_http::ResponseHeader;
use pingora_proxy::{ProxyHttp, Session, http_proxy};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tollgate_pingora::{Checked, ProxyLimit};

/// A plain HTTP/1.1 upstream answering every request `200 hello`, keeping connections
/// alive; counts the requests it served.
pub async fn upstream() -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let served = Arc::new(AtomicUsize::new(0));
    let count = served.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            stream.set_nodelay(true).unwrap();
            let count = count.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    // Requests without bodies: each ends at its blank line.
                    while let Some(end) = find(&buf, b"\r\n\r\n") {
                        buf.drain(..end + 4);
                        // ordering: a count read after the responses arrived.
                        count.fetch_add(1, Ordering::Relaxed);
                        let reply = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello";
                        if stream.write_all(reply).await.is_err() {
                            return;
                        }
                    }
                    match stream.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
            });
        }
    });
    (addr, served)
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// The proxy the tests run: the limit in `request_filter` and `response_filter`.
struct TestProxy {
    limit: Arc<ProxyLimit>,
    upstream: SocketAddr,
}

#[async_trait]
impl ProxyHttp for TestProxy {
    type CTX = Checked;

    fn new_ctx(&self) -> Checked {
        Checked::default()
    }

    async fn request_filter(
        &self,
        session: &mut Session,
        ctx: &mut Checked,
    ) -> pingora_core::Result<bool> {
        self.limit.request_filter(session, ctx).await
    }

    async fn upstream_peer(
        &self,
        _session: &mut Session,
        _ctx: &mut Checked,
    ) -> pingora_core::Result<Box<HttpPeer>> {
        Ok(Box::new(HttpPeer::new(self.upstream, false, String::new())))
    }

    async fn response_filter(
        &self,
        _session: &mut Session,
        response: &mut ResponseHeader,
        ctx: &mut Checked,
    ) -> pingora_core::Result<()> {
        self.limit.response_filter(response, ctx)
    }
}

/// Serves a Pingora proxy with `limit` in front of `upstream` on a loopback port of its own,
/// accepting as Pingora's own listener does (the peer address recorded in the connection's
/// digest), for the life of the test's runtime.
pub async fn proxy(limit: Arc<ProxyLimit>, upstream: SocketAddr) -> SocketAddr {
    let conf = Arc::new(ServerConf::default());
    let app = Arc::new(http_proxy(&conf, TestProxy { limit, upstream }));
    let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = tcp.local_addr().unwrap();
    let listener = Listener::from(tcp);
    let (shutdown_tx, shutdown) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        let _keep = shutdown_tx;
        loop {
            let Ok(mut stream) = listener.accept().await else {
                return;
            };
            // As Pingora's own listener does: a response's head and body are two writes.
            stream.set_nodelay().unwrap();
            let app = app.clone();
            let shutdown = shutdown.clone();
            tokio::spawn(async move {
                // A kept-alive connection comes back for its next request.
                let mut stream: Option<pingora_core::protocols::Stream> = Some(Box::new(stream));
                while let Some(s) = stream.take() {
                    stream = app.process_new(s, &shutdown).await;
                }
            });
        }
    });
    addr
}

/// A response as the client read it.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Response {
    /// The first field named `name` (lowercase).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// `GET /` through the proxy at `addr` on a connection of its own, with `X-Forwarded-For`
/// if given.
pub async fn get(addr: SocketAddr, forwarded_for: Option<&str>) -> Response {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let xff = forwarded_for
        .map(|v| format!("x-forwarded-for: {v}\r\n"))
        .unwrap_or_default();
    let request = format!("GET / HTTP/1.1\r\nhost: test\r\n{xff}connection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.unwrap();
    parse(&raw)
}

/// Sends `head` (a request's head, ending in its blank line) through the proxy at `addr` on
/// a connection of its own, and reads the response to the connection's close.
pub async fn send(addr: SocketAddr, head: &str) -> Response {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.unwrap();
    parse(&raw)
}

fn parse(raw: &[u8]) -> Response {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .expect("a complete response head");
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    Response {
        status,
        headers,
        body: body.to_owned(),
    }
}
