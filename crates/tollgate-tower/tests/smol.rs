//! The layer served by hyper under smol's runtime (async-io's reactor, async-executor),
//! with no tokio anywhere: the layer needs no runtime, and tollgate's waits (delay mode)
//! run on its own timer. hyper's IO traits are bridged to `futures-io` by a small adapter.

// The field parser only: the rest of tests/common serves with tokio.
#[path = "common/fields.rs"]
mod fields;

use std::convert::Infallible;
use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use async_executor::Executor;
use async_io::Async;
use futures_lite::{AsyncRead, AsyncWrite};
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::{Bytes, Incoming};
use hyper::rt::ReadBufCursor;
use hyper_util::service::TowerToHyperService;
use tollgate::{Limiter, ManualClock, Quota};
use tollgate_tower::{Global, PeerIp, RateLimitLayer};
use tower::{Layer, Service, ServiceBuilder, service_fn};

use crate::fields::{policy, retry_after};

/// hyper's `Read`/`Write` over a `futures-io` stream.
struct Io<T>(T);

impl<T: AsyncRead + Unpin> hyper::rt::Read for Io<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        mut buf: ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        // Through a stack buffer: no unsafe for a test.
        let mut tmp = [0u8; 8192];
        let len = tmp.len().min(buf.remaining());
        let n = std::task::ready!(Pin::new(&mut self.0).poll_read(cx, &mut tmp[..len]))?;
        buf.put_slice(&tmp[..n]);
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncWrite + Unpin> hyper::rt::Write for Io<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_close(cx)
    }
}

type Body = Full<Bytes>;

/// Serves `svc` on 127.0.0.1:0 on `ex`, a clone per connection, the peer address in each
/// request's extensions.
fn serve<S>(ex: &Arc<Executor<'static>>, svc: S) -> SocketAddr
where
    S: Service<Request<Incoming>, Response = Response<Body>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    let listener = Async::<TcpListener>::bind(([127, 0, 0, 1], 0)).unwrap();
    let addr = listener.get_ref().local_addr().unwrap();
    let spawner = Arc::clone(ex);
    ex.spawn(async move {
        loop {
            let (stream, peer) = listener.accept().await.unwrap();
            let svc = ServiceBuilder::new()
                .map_request(move |mut req: Request<Incoming>| {
                    req.extensions_mut().insert(peer);
                    req
                })
                .service(svc.clone());
            spawner
                .spawn(async move {
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(Io(stream), TowerToHyperService::new(svc))
                        .await;
                })
                .detach();
        }
    })
    .detach();
    addr
}

fn hello() -> impl Service<
    Request<Incoming>,
    Response = Response<Body>,
    Error = Infallible,
    Future = impl Send + 'static,
> + Clone
+ Send
+ 'static {
    service_fn(|_req: Request<Incoming>| async {
        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"hello"))))
    })
}

/// One `GET /` on a fresh connection: the status and headers.
async fn get(ex: Arc<Executor<'static>>, addr: SocketAddr) -> (StatusCode, HeaderMap) {
    let stream = Async::<TcpStream>::connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(Io(stream))
        .await
        .unwrap();
    ex.spawn(conn).detach();
    let req = Request::get("/")
        .header("host", "smol")
        .body(Empty::<Bytes>::new())
        .unwrap();
    let res = sender.send_request(req).await.unwrap();
    let (parts, body) = res.into_parts();
    body.collect().await.unwrap();
    (parts.status, parts.headers)
}

#[test]
fn serves_and_limits_under_smol() {
    let ex = Arc::new(Executor::new());
    let clock = ManualClock::new();
    let limiter = Limiter::builder(Quota::per_minute(2))
        .clock(clock.clone())
        .build();
    let layer = RateLimitLayer::builder(limiter, PeerIp::new()).build();
    let addr = serve(&ex, layer.layer(hello()));
    async_io::block_on(ex.run(async {
        let mut statuses = Vec::new();
        for _ in 0..3 {
            let (status, h) = get(Arc::clone(&ex), addr).await;
            statuses.push(status.as_u16());
            if status == StatusCode::TOO_MANY_REQUESTS {
                assert_eq!(retry_after(&h), 30);
            } else {
                assert_eq!(policy(&h), ("default".into(), 2, 60));
            }
        }
        // Three connections, three clones of the service, one limit.
        assert_eq!(statuses, [200, 200, 429]);
        clock.advance(Duration::from_secs(30));
        assert_eq!(get(Arc::clone(&ex), addr).await.0, StatusCode::OK);
    }));
    let counts = layer.counts();
    assert_eq!((counts.admitted, counts.rejected), (3, 1));
}

#[test]
fn delay_mode_waits_on_tollgates_own_timer_under_smol() {
    let ex = Arc::new(Executor::new());
    // Real time here: one cell per 250 ms, no burst, waits of up to 10 s allowed, so every
    // request is served however slow the machine. Sent at once, all but the first find the
    // cell taken and wait (none is admitted at once unless the single-threaded executor
    // stalls 250 ms between two of them).
    let layer = RateLimitLayer::builder(
        Limiter::keyed(Quota::with_period(Duration::from_millis(250))),
        Global,
    )
    .delay(Duration::from_secs(10))
    .build();
    let addr = serve(&ex, layer.layer(hello()));
    async_io::block_on(ex.run(async {
        let requests: Vec<_> = (0..4)
            .map(|_| ex.spawn(get(Arc::clone(&ex), addr)))
            .collect();
        for request in requests {
            assert_eq!(request.await.0, StatusCode::OK);
        }
    }));
    let counts = layer.counts();
    assert_eq!(counts.admitted + counts.delayed, 4);
    assert!(counts.delayed > 0, "nothing waited: {counts:?}");
    assert_eq!(counts.rejected, 0);
}
