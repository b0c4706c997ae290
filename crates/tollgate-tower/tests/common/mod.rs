//! What the tests over a real hyper server share: the server (a layer over a hello service,
//! one clone per connection), a client, a parser for the structured fields, and a limiter on
//! a `ManualClock`.

// Each test file uses only some of these.
#![allow(dead_code)]

use std::convert::Infallible;
use std::net::SocketAddr;

use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::{Bytes, Incoming};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tollgate::{Limiter, ManualClock, Quota};
use tower::util::MapRequest;
use tower::{Layer, Service, ServiceBuilder, service_fn};

pub(crate) type Body = Full<Bytes>;

/// Serves `layer` over `hello()` on 127.0.0.1:0; each connection gets its own clone of the
/// service, with the peer address in each request's extensions (or, for the IPv6 tests,
/// the address named by an `x-test-peer` header, standing in for the socket's).
pub(crate) async fn serve<L: Layer<HelloService, Service: Served>>(layer: L) -> SocketAddr {
    serve_over(layer, boxed_hello()).await
}

/// As [`serve`], over the service `inner`.
pub(crate) async fn serve_over<L: Layer<HelloService, Service: Served>>(
    layer: L,
    inner: HelloService,
) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let svc = layer.layer(inner);
    tokio::spawn(async move {
        loop {
            let (stream, peer) = listener.accept().await.unwrap();
            let svc = with_peer(svc.clone(), peer);
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), TowerToHyperService::new(svc))
                    .await;
            });
        }
    });
    addr
}

/// A service that hyper can serve, one clone per connection.
pub(crate) trait Served:
    Service<
        Request<Incoming>,
        Response = Response<Body>,
        Error = Infallible,
        Future: Send + 'static,
    > + Clone
    + Send
    + 'static
{
}

impl<S> Served for S where
    S: Service<
            Request<Incoming>,
            Response = Response<Body>,
            Error = Infallible,
            Future: Send + 'static,
        > + Clone
        + Send
        + 'static
{
}

/// `svc` with the peer address in each request's extensions (or the address named by an
/// `x-test-peer` header, standing in for the socket's).
pub(crate) fn with_peer<S>(
    svc: S,
    peer: SocketAddr,
) -> MapRequest<S, impl FnMut(Request<Incoming>) -> Request<Incoming> + Clone> {
    ServiceBuilder::new()
        .map_request(move |mut req: Request<Incoming>| {
            let peer = req
                .headers()
                .get("x-test-peer")
                .and_then(|v| v.to_str().ok()?.parse::<SocketAddr>().ok())
                .unwrap_or(peer);
            req.extensions_mut().insert(peer);
            req
        })
        .service(svc)
}

pub(crate) type HelloService =
    tower::util::BoxCloneSyncService<Request<Incoming>, Response<Body>, Infallible>;

/// The service behind the limiter: `200 hello`.
pub(crate) fn boxed_hello() -> HelloService {
    tower::util::BoxCloneSyncService::new(service_fn(|_req: Request<Incoming>| async {
        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"hello"))))
    }))
}

/// A client connection.
pub(crate) async fn connect(addr: SocketAddr) -> SendRequest<Empty<Bytes>> {
    let stream = TcpStream::connect(addr).await.unwrap();
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    sender
}

/// `GET /` with `headers` on `conn`: the status and the response's headers.
pub(crate) async fn get(
    conn: &mut SendRequest<Empty<Bytes>>,
    headers: &[(&str, &[u8])],
) -> (StatusCode, HeaderMap) {
    conn.ready().await.unwrap();
    let mut req = Request::get("/").header("host", "test");
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    let res = conn
        .send_request(req.body(Empty::new()).unwrap())
        .await
        .unwrap();
    let (parts, body) = res.into_parts();
    body.collect().await.unwrap();
    (parts.status, parts.headers)
}

/// One request on a fresh connection.
pub(crate) async fn get_once(
    addr: SocketAddr,
    headers: &[(&str, &[u8])],
) -> (StatusCode, HeaderMap) {
    get(&mut connect(addr).await, headers).await
}

// --- A parser for the structured fields (RFC 9651 lists of items with parameters) ---

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Bare {
    Int(i64),
    Str(String),
    Token(String),
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Item {
    pub value: Bare,
    pub params: Vec<(String, Bare)>,
}

impl Item {
    pub(crate) fn param(&self, key: &str) -> Option<&Bare> {
        self.params.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    pub(crate) fn int(&self, key: &str) -> i64 {
        match self.param(key) {
            Some(Bare::Int(i)) => *i,
            other => panic!("parameter {key} is not an integer: {other:?}"),
        }
    }
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn skip(&mut self, set: &[u8]) {
        while self.peek().is_some_and(|c| set.contains(&c)) {
            self.i += 1;
        }
    }

    fn bare(&mut self) -> Bare {
        match self.peek() {
            Some(b'"') => {
                self.i += 1;
                let mut out = String::new();
                loop {
                    match self.peek().expect("unterminated string") {
                        b'"' => {
                            self.i += 1;
                            return Bare::Str(out);
                        }
                        b'\\' => {
                            let c = self.s[self.i + 1];
                            assert!(c == b'"' || c == b'\\', "bad escape");
                            out.push(c as char);
                            self.i += 2;
                        }
                        c if (0x20..=0x7e).contains(&c) => {
                            out.push(c as char);
                            self.i += 1;
                        }
                        c => panic!("bad string byte {c}"),
                    }
                }
            }
            Some(c) if c == b'-' || c.is_ascii_digit() => {
                let start = self.i;
                self.i += 1;
                while self.peek().is_some_and(|c| c.is_ascii_digit()) {
                    self.i += 1;
                }
                let text = std::str::from_utf8(&self.s[start..self.i]).unwrap();
                assert!(self.peek() != Some(b'.'), "decimals are not expected here");
                assert!(text.len() <= 15, "integers have at most 15 digits");
                Bare::Int(text.parse().unwrap())
            }
            Some(c) if c.is_ascii_alphabetic() || c == b'*' => Bare::Token(self.key_like(true)),
            other => panic!(
                "unexpected {other:?} in {:?}",
                String::from_utf8_lossy(self.s)
            ),
        }
    }

    fn key_like(&mut self, token: bool) -> String {
        let start = self.i;
        while self.peek().is_some_and(|c| {
            c.is_ascii_lowercase()
                || c.is_ascii_digit()
                || b"_-.*".contains(&c)
                || (token && (c.is_ascii_alphabetic() || b":/!#$%&'+^`|~".contains(&c)))
        }) {
            self.i += 1;
        }
        assert!(self.i > start, "empty key");
        String::from_utf8(self.s[start..self.i].to_vec()).unwrap()
    }

    fn item(&mut self) -> Item {
        let value = self.bare();
        let mut params = Vec::new();
        while self.peek() == Some(b';') {
            self.i += 1;
            self.skip(b" ");
            let key = self.key_like(false);
            let value = if self.peek() == Some(b'=') {
                self.i += 1;
                self.bare()
            } else {
                Bare::Token("?1".into())
            };
            params.push((key, value));
        }
        Item { value, params }
    }
}

/// Parses a List field (every field line of `name`, joined with commas).
pub(crate) fn parse_list(headers: &HeaderMap, name: &str) -> Vec<Item> {
    let joined = headers
        .get_all(name)
        .iter()
        .map(|v| v.to_str().expect("ASCII field"))
        .collect::<Vec<_>>()
        .join(", ");
    let mut p = Parser {
        s: joined.as_bytes(),
        i: 0,
    };
    let mut items = Vec::new();
    p.skip(b" ");
    while p.peek().is_some() {
        items.push(p.item());
        p.skip(b" \t");
        if p.peek().is_none() {
            break;
        }
        assert_eq!(p.peek(), Some(b','), "items are separated by commas");
        p.i += 1;
        p.skip(b" \t");
        assert!(p.peek().is_some(), "trailing comma");
    }
    items
}

/// The one policy item of `RateLimit-Policy`: `(name, q, w)`.
pub(crate) fn policy(headers: &HeaderMap) -> (String, i64, i64) {
    let items = parse_list(headers, "ratelimit-policy");
    assert_eq!(items.len(), 1, "{items:?}");
    let Bare::Str(name) = &items[0].value else {
        panic!("a policy's name is a String: {items:?}")
    };
    (name.clone(), items[0].int("q"), items[0].int("w"))
}

/// The one item of `RateLimit`: `(name, r, t)`.
pub(crate) fn ratelimit(headers: &HeaderMap) -> (String, i64, i64) {
    let items = parse_list(headers, "ratelimit");
    assert_eq!(items.len(), 1, "{items:?}");
    let Bare::Str(name) = &items[0].value else {
        panic!("a policy's name is a String: {items:?}")
    };
    (name.clone(), items[0].int("r"), items[0].int("t"))
}

/// `Retry-After` as delay-seconds: an integer of at least 1.
pub(crate) fn retry_after(headers: &HeaderMap) -> u64 {
    let values: Vec<_> = headers.get_all("retry-after").iter().collect();
    assert_eq!(values.len(), 1);
    let text = values[0].to_str().unwrap();
    assert!(text.bytes().all(|b| b.is_ascii_digit()), "{text:?}");
    let secs: u64 = text.parse().unwrap();
    assert!(secs >= 1);
    secs
}

pub(crate) fn manual(quota: Quota) -> (ManualClock, Limiter<std::net::IpAddr>) {
    let clock = ManualClock::new();
    let limiter = Limiter::builder(quota).clock(clock.clone()).build();
    (clock, limiter)
}
