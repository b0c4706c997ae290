//! What the tests over a real hyper server share: the server (a layer over a hello service,
//! one clone per connection), a client, a parser for the structured fields, and a limiter on
//! a `ManualClock`.

// Each test file uses only some of these.
#![allow(dead_code)]

mod fields;

#[allow(unused_imports)] // not every test file reads the fields
pub(crate) use fields::*;

use std::convert::Infallible;
use std::net::SocketAddr;

use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::{Bytes, Incoming};
use hyper::client::conn::http1::SendRequest;
use hyper::client::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo};
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
    serve_on(listener, layer, inner)
}

/// As [`serve_over`], on `listener` (bound by the caller: another address, another family).
pub(crate) fn serve_on<L: Layer<HelloService, Service: Served>>(
    listener: TcpListener,
    layer: L,
    inner: HelloService,
) -> SocketAddr {
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

/// As [`serve`], over HTTP/2 (as gRPC needs).
pub(crate) async fn serve_h2<L: Layer<HelloService, Service: Served>>(layer: L) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let svc = layer.layer(boxed_hello());
    tokio::spawn(async move {
        loop {
            let (stream, peer) = listener.accept().await.unwrap();
            let svc = with_peer(svc.clone(), peer);
            tokio::spawn(
                hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), TowerToHyperService::new(svc)),
            );
        }
    });
    addr
}

/// An HTTP/2 client connection, for gRPC calls.
pub(crate) async fn connect_h2(addr: SocketAddr) -> http2::SendRequest<Body> {
    let stream = TcpStream::connect(addr).await.unwrap();
    let (client, conn) = http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    client
}

/// A unary gRPC call (an empty message) with `headers` on `client`: the response, its body
/// unread.
pub(crate) async fn grpc_call(
    client: &mut http2::SendRequest<Body>,
    headers: &[(&str, &[u8])],
) -> Response<Incoming> {
    let mut req = Request::post("http://test/pkg.Service/Method")
        .header("content-type", "application/grpc+proto")
        .header("te", "trailers");
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    let req = req
        .body(Full::new(Bytes::from_static(b"\0\0\0\0\0")))
        .unwrap();
    client.ready().await.unwrap();
    client.send_request(req).await.unwrap()
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
    let (status, headers, _body) = fetch(conn, headers).await;
    (status, headers)
}

/// `GET /` with `headers` on `conn`: the status, the response's headers and its body.
pub(crate) async fn fetch(
    conn: &mut SendRequest<Empty<Bytes>>,
    headers: &[(&str, &[u8])],
) -> (StatusCode, HeaderMap, Bytes) {
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
    let body = body.collect().await.unwrap().to_bytes();
    (parts.status, parts.headers, body)
}

/// One request on a fresh connection.
pub(crate) async fn get_once(
    addr: SocketAddr,
    headers: &[(&str, &[u8])],
) -> (StatusCode, HeaderMap) {
    get(&mut connect(addr).await, headers).await
}

pub(crate) fn manual(quota: Quota) -> (ManualClock, Limiter<std::net::IpAddr>) {
    let clock = ManualClock::new();
    let limiter = Limiter::builder(quota).clock(clock.clone()).build();
    (clock, limiter)
}
