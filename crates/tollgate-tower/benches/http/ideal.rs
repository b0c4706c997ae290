//! The *ideal* subject: the cheapest correct per-client limiter one could write as a tower
//! layer, the floor any limiter of this shape faces on this machine. No fields, no counts,
//! no options, no key type of its own:
//!
//! * **Key**: the client's address, found as tollgate-tower finds it: the peer address by
//!   tollgate-tower's public [`peer_addr`] (one client); behind the trusted proxies, the
//!   rightmost-first `X-Forwarded-For` walk with tollgate-tower's public
//!   [`ClientIp::is_trusted`] as the trust test (10,000 clients). The walk itself is
//!   crate-private in tollgate-tower, so it is written again here in its simplest correct
//!   form: entries read by std's address parser, and any entry that is not a bare address
//!   (a port, brackets, `unknown`) ends the walk at the last trusted proxy, as
//!   tollgate-tower does with garbage. Both read the request in place ([`Request`]'s
//!   headers and extensions), without taking it apart into `Parts` as a `KeyExtractor`
//!   needs. The address is masked by tollgate-tower's public [`ip_key`] (IPv6 by /64).
//! * **State**: one `AtomicU64` per slot of a preallocated array of [`SLOTS`] slots,
//!   indexed by a multiplicative hash of the key; the slot holds the GCRA theoretical
//!   arrival time (TAT) in nanoseconds since the layer was made. No key is stored, so two
//!   clients whose keys share a slot share one limit (stricter for both, never looser:
//!   about 760 pairs among 10,000 keys in 65,536 slots); a real limiter must keep keys
//!   apart, and a keyed hash against chosen collisions. This is the floor, not a product.
//! * **Clock**: `Instant::now()`, as the core reads it.
//! * **Refusal**: `429` with `Retry-After` (whole seconds, rounded up), empty body.

use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use http::{HeaderName, HeaderValue, Request, Response, StatusCode};
use pin_project_lite::pin_project;
use tollgate_tower::{ClientIp, ip_key, peer_addr};
use tower::{Layer, Service};

/// Slots of the state array (a power of two): 512 KiB of TATs.
pub(crate) const SLOTS: usize = 1 << 16;

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

/// Where the key comes from.
#[derive(Clone)]
pub(crate) enum IdealKey {
    /// The peer address.
    Peer,
    /// The client address behind these trusted proxies (`X-Forwarded-For`).
    Forwarded(ClientIp),
}

struct Shared {
    key: IdealKey,
    /// GCRA TATs, nanoseconds since `epoch`; 0 is "never seen" (a TAT in the past).
    cells: Box<[AtomicU64]>,
    epoch: Instant,
    /// The emission interval, in nanoseconds.
    interval: u64,
    /// How far ahead of now a TAT may be after an admission: burst × interval.
    tolerance: u64,
}

/// The layer: every service it makes shares one array.
#[derive(Clone)]
pub(crate) struct IdealLayer(Arc<Shared>);

impl IdealLayer {
    pub(crate) fn new(key: IdealKey, interval: Duration, burst: u32) -> IdealLayer {
        let interval = u64::try_from(interval.as_nanos()).expect("an interval under 584 years");
        IdealLayer(Arc::new(Shared {
            key,
            cells: (0..SLOTS).map(|_| AtomicU64::new(0)).collect(),
            epoch: Instant::now(),
            interval,
            tolerance: interval.saturating_mul(u64::from(burst)),
        }))
    }
}

impl<S> Layer<S> for IdealLayer {
    type Service = Ideal<S>;

    fn layer(&self, inner: S) -> Ideal<S> {
        Ideal {
            inner,
            shared: Arc::clone(&self.0),
        }
    }
}

#[derive(Clone)]
pub(crate) struct Ideal<S> {
    inner: S,
    shared: Arc<Shared>,
}

impl Shared {
    /// The request's key, read in place; `None` without a peer address.
    fn key<B>(&self, req: &Request<B>) -> Option<IpAddr> {
        let peer = peer_addr(req.extensions())?.to_canonical();
        let client = match &self.key {
            IdealKey::Peer => peer,
            IdealKey::Forwarded(trust) => {
                let mut current = peer;
                if trust.is_trusted(current) {
                    'walk: for value in req.headers().get_all(X_FORWARDED_FOR).iter().rev() {
                        let Ok(text) = value.to_str() else { break };
                        for node in text.rsplit(',') {
                            let Ok(ip) = node.trim_ascii().parse::<IpAddr>() else {
                                break 'walk;
                            };
                            current = ip.to_canonical();
                            if !trust.is_trusted(current) {
                                break 'walk;
                            }
                        }
                    }
                }
                current
            }
        };
        Some(ip_key(client, 32, 64))
    }

    /// The key's slot: a multiplicative (Fibonacci) hash of its bits.
    fn slot(&self, key: IpAddr) -> &AtomicU64 {
        let bits = match key {
            IpAddr::V4(v4) => u64::from(u32::from(v4)),
            IpAddr::V6(v6) => {
                let b = u128::from(v6);
                (b as u64) ^ ((b >> 64) as u64).rotate_left(29)
            }
        };
        let hash = bits.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - SLOTS.trailing_zeros());
        &self.cells[hash as usize]
    }

    /// GCRA: admits and moves the TAT one interval on, or returns the wait.
    fn check(&self, key: IpAddr) -> Result<(), Duration> {
        let cell = self.slot(key);
        let now = u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX);
        // ordering: the TAT is the only data the cell guards; it publishes nothing else,
        // and the CAS makes each admission a single atomic step on it.
        let mut tat = cell.load(Ordering::Relaxed);
        loop {
            let next = tat.max(now).saturating_add(self.interval);
            if next - now > self.tolerance {
                return Err(Duration::from_nanos(next - now - self.tolerance));
            }
            // ordering: as the load above.
            match cell.compare_exchange_weak(tat, next, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return Ok(()),
                Err(seen) => tat = seen,
            }
        }
    }
}

impl<S, B, R> Service<Request<B>> for Ideal<S>
where
    S: Service<Request<B>, Response = Response<R>>,
    R: Default,
{
    type Response = Response<R>;
    type Error = S::Error;
    type Future = IdealFuture<S::Future, R>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let refusal = |status: StatusCode, retry: Option<u64>| {
            let mut response = Response::new(R::default());
            *response.status_mut() = status;
            if let Some(secs) = retry {
                response
                    .headers_mut()
                    .insert(http::header::RETRY_AFTER, HeaderValue::from(secs));
            }
            IdealFuture::Refused {
                response: Some(response),
            }
        };
        let Some(key) = self.shared.key(&req) else {
            return refusal(StatusCode::BAD_REQUEST, None);
        };
        match self.shared.check(key) {
            Ok(()) => IdealFuture::Inner {
                fut: self.inner.call(req),
            },
            Err(wait) => {
                let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
                refusal(StatusCode::TOO_MANY_REQUESTS, Some(secs.max(1)))
            }
        }
    }
}

pin_project! {
    /// The inner service's future, or a refusal made without it.
    #[project = IdealProj]
    pub(crate) enum IdealFuture<F, R> {
        Inner { #[pin] fut: F },
        Refused { response: Option<Response<R>> },
    }
}

impl<F, R, E> Future for IdealFuture<F, R>
where
    F: Future<Output = Result<Response<R>, E>>,
{
    type Output = Result<Response<R>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project() {
            IdealProj::Inner { fut } => fut.poll(cx),
            IdealProj::Refused { response } => {
                Poll::Ready(Ok(response.take().expect("polled after completion")))
            }
        }
    }
}

/// Checks the subject before it is timed (a bench target runs no `#[test]`): the GCRA
/// admits a burst and refuses the next request, and keys by the forwarded client.
pub(crate) fn self_check() {
    {
        let trust = ClientIp::trusting(["127.0.0.0/8"]).expect("a valid CIDR");
        let layer = IdealLayer::new(IdealKey::Forwarded(trust), Duration::from_secs(60), 3);
        let request = |xff: &str| {
            let mut req = Request::get("/")
                .header("x-forwarded-for", xff)
                .body(())
                .expect("a request");
            req.extensions_mut()
                .insert(std::net::SocketAddr::from(([127, 0, 0, 1], 1)));
            req
        };
        let shared = &layer.0;
        let a = shared.key(&request("6.6.6.6, 10.0.0.1")).expect("a key");
        assert_eq!(a, "10.0.0.1".parse::<IpAddr>().unwrap());
        let b = shared.key(&request("10.0.0.2")).expect("a key");
        for _ in 0..3 {
            assert_eq!(shared.check(a), Ok(()));
        }
        assert!(shared.check(a).is_err());
        assert_eq!(shared.check(b), Ok(()));
        // A malformed entry ends the walk at the proxy.
        let c = shared.key(&request("10.0.0.3, x")).expect("a key");
        assert_eq!(c, "127.0.0.1".parse::<IpAddr>().unwrap());
    }
}
