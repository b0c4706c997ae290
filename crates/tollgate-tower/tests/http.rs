//! The layer behind a real hyper server on 127.0.0.1, asked by a real HTTP client (hyper's
//! HTTP/1 client over TCP): statuses, every field parsed, keys, policies and modes.
//!
//! Limiters run on a `ManualClock` wherever an assertion depends on time, so nothing here
//! asserts a wall-clock duration.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::{Bytes, Incoming};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tollgate::{Limiter, ManualClock, Quota};
use tollgate_tower::{
    ClientIp, DryRunRefusal, ForwardedHeader, Global, HeaderKey, MissingKey, PeerIp, RateLimitLayer,
};
use tower::{Layer, Service, ServiceBuilder, service_fn};

type Body = Full<Bytes>;

/// Serves `layer` over `hello()` on 127.0.0.1:0; each connection gets its own clone of the
/// service, with the peer address in each request's extensions (or, for the IPv6 tests,
/// the address named by an `x-test-peer` header, standing in for the socket's).
async fn serve<L>(layer: L) -> SocketAddr
where
    L: Layer<HelloService>,
    L::Service: Service<Request<Incoming>, Response = Response<Body>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    <L::Service as Service<Request<Incoming>>>::Future: Send + 'static,
{
    serve_over(layer, boxed_hello()).await
}

/// As [`serve`], over the service `inner`.
async fn serve_over<L>(layer: L, inner: HelloService) -> SocketAddr
where
    L: Layer<HelloService>,
    L::Service: Service<Request<Incoming>, Response = Response<Body>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    <L::Service as Service<Request<Incoming>>>::Future: Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let svc = layer.layer(inner);
    tokio::spawn(async move {
        loop {
            let (stream, peer) = listener.accept().await.unwrap();
            let svc = ServiceBuilder::new()
                .map_request(move |mut req: Request<Incoming>| {
                    let peer = req
                        .headers()
                        .get("x-test-peer")
                        .and_then(|v| v.to_str().ok()?.parse::<SocketAddr>().ok())
                        .unwrap_or(peer);
                    req.extensions_mut().insert(peer);
                    req
                })
                .service(svc.clone());
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), TowerToHyperService::new(svc))
                    .await;
            });
        }
    });
    addr
}

type HelloService = tower::util::BoxCloneSyncService<Request<Incoming>, Response<Body>, Infallible>;

/// The service behind the limiter: `200 hello`.
fn boxed_hello() -> HelloService {
    tower::util::BoxCloneSyncService::new(service_fn(|_req: Request<Incoming>| async {
        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"hello"))))
    }))
}

/// A client connection.
async fn connect(addr: SocketAddr) -> SendRequest<Empty<Bytes>> {
    let stream = TcpStream::connect(addr).await.unwrap();
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    sender
}

/// `GET /` with `headers` on `conn`: the status and the response's headers.
async fn get(
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
async fn get_once(addr: SocketAddr, headers: &[(&str, &[u8])]) -> (StatusCode, HeaderMap) {
    get(&mut connect(addr).await, headers).await
}

// --- A parser for the structured fields (RFC 9651 lists of items with parameters) ---

#[derive(Debug, Clone, PartialEq)]
enum Bare {
    Int(i64),
    Str(String),
    Token(String),
}

#[derive(Debug, Clone, PartialEq)]
struct Item {
    value: Bare,
    params: Vec<(String, Bare)>,
}

impl Item {
    fn param(&self, key: &str) -> Option<&Bare> {
        self.params.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    fn int(&self, key: &str) -> i64 {
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
fn parse_list(headers: &HeaderMap, name: &str) -> Vec<Item> {
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
fn policy(headers: &HeaderMap) -> (String, i64, i64) {
    let items = parse_list(headers, "ratelimit-policy");
    assert_eq!(items.len(), 1, "{items:?}");
    let Bare::Str(name) = &items[0].value else {
        panic!("a policy's name is a String: {items:?}")
    };
    (name.clone(), items[0].int("q"), items[0].int("w"))
}

/// The one item of `RateLimit`: `(name, r, t)`.
fn ratelimit(headers: &HeaderMap) -> (String, i64, i64) {
    let items = parse_list(headers, "ratelimit");
    assert_eq!(items.len(), 1, "{items:?}");
    let Bare::Str(name) = &items[0].value else {
        panic!("a policy's name is a String: {items:?}")
    };
    (name.clone(), items[0].int("r"), items[0].int("t"))
}

/// `Retry-After` as delay-seconds: an integer of at least 1.
fn retry_after(headers: &HeaderMap) -> u64 {
    let values: Vec<_> = headers.get_all("retry-after").iter().collect();
    assert_eq!(values.len(), 1);
    let text = values[0].to_str().unwrap();
    assert!(text.bytes().all(|b| b.is_ascii_digit()), "{text:?}");
    let secs: u64 = text.parse().unwrap();
    assert!(secs >= 1);
    secs
}

fn manual(quota: Quota) -> (ManualClock, Limiter<std::net::IpAddr>) {
    let clock = ManualClock::new();
    let limiter = Limiter::builder(quota).clock(clock.clone()).build();
    (clock, limiter)
}

#[tokio::test]
async fn statuses_and_every_field() {
    let (clock, limiter) = manual(Quota::per_minute(3)); // one cell per 20 s, bursts of 3
    let addr = serve(RateLimitLayer::builder(limiter, PeerIp::new()).build()).await;
    let mut conn = connect(addr).await;

    for (r, t) in [(2, 20), (1, 40), (0, 60)] {
        let (status, h) = get(&mut conn, &[]).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(policy(&h), ("default".into(), 3, 60));
        assert_eq!(ratelimit(&h), ("default".into(), r, t));
        assert!(h.get("retry-after").is_none());
    }
    let (status, h) = get(&mut conn, &[]).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(retry_after(&h), 20);
    assert_eq!(policy(&h), ("default".into(), 3, 60));
    assert_eq!(ratelimit(&h), ("default".into(), 0, 60));

    // 18.5 s left: Retry-After rounds up, never down.
    clock.advance(Duration::from_millis(1500));
    let (status, h) = get(&mut conn, &[]).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(retry_after(&h), 19);
    assert_eq!(ratelimit(&h), ("default".into(), 0, 59));

    // 1 ns short: still refused, and told to wait a whole second, not 0.
    clock.advance(Duration::from_millis(18_500) - Duration::from_nanos(1));
    let (status, h) = get(&mut conn, &[]).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(retry_after(&h), 1);

    // Obeying Retry-After is admitted.
    clock.advance(Duration::from_nanos(1));
    let (status, h) = get(&mut conn, &[]).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(ratelimit(&h), ("default".into(), 0, 60));
}

#[tokio::test]
async fn fields_can_be_switched_off_and_renamed() {
    let (_clock, limiter) = manual(Quota::per_second(1));
    let quiet = RateLimitLayer::builder(limiter, PeerIp::new())
        .headers(false)
        .build();
    let addr = serve(quiet).await;
    let (status, h) = get_once(addr, &[]).await;
    assert_eq!(status, StatusCode::OK);
    assert!(h.get("ratelimit").is_none() && h.get("ratelimit-policy").is_none());
    let (status, h) = get_once(addr, &[]).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(retry_after(&h), 1); // always sent on a 429
    assert!(h.get("ratelimit").is_none() && h.get("ratelimit-policy").is_none());

    let (_clock, limiter) = manual(Quota::per_second(10));
    let named = RateLimitLayer::builder(limiter, PeerIp::new())
        .policy_name("per \"ip\"")
        .build();
    let (_, h) = get_once(serve(named).await, &[]).await;
    assert_eq!(policy(&h), ("per \"ip\"".into(), 10, 1));
    assert_eq!(ratelimit(&h), ("per \"ip\"".into(), 9, 1));
}

fn behind_proxy(quota: Quota) -> (ManualClock, RateLimitLayer<ClientIp>) {
    behind_proxy_reading(quota, ForwardedHeader::XForwardedFor)
}

fn behind_proxy_reading(
    quota: Quota,
    header: ForwardedHeader,
) -> (ManualClock, RateLimitLayer<ClientIp>) {
    let clock = ManualClock::new();
    let limiter = Limiter::builder(quota).clock(clock.clone()).build();
    let key = ClientIp::trusting(["127.0.0.0/8", "10.0.0.0/8", "2001:db8:ffff::/48"])
        .unwrap()
        .header(header);
    (clock, RateLimitLayer::builder(limiter, key).build())
}

#[tokio::test]
async fn spoofed_leftmost_forwarded_for_does_not_change_the_key() {
    let (_clock, layer) = behind_proxy(Quota::per_minute(2));
    let addr = serve(layer).await;
    // The proxy (127.0.0.1, trusted) appends the client's address to what the client sent.
    let spoofs = [
        "1.1.1.1",
        "2.2.2.2",
        "10.9.9.9",
        "garbage",
        "3.3.3.3, 4.4.4.4",
    ];
    let mut statuses = Vec::new();
    for spoof in spoofs {
        let xff = format!("{spoof}, 203.0.113.5");
        let (status, _) = get_once(addr, &[("x-forwarded-for", xff.as_bytes())]).await;
        statuses.push(status);
    }
    assert_eq!(
        statuses,
        [200, 200, 429, 429, 429].map(|s| StatusCode::from_u16(s).unwrap())
    );
    // Through two trusted proxies, the same client is the same key.
    let xff = b"9.9.9.9, 203.0.113.5, 10.0.0.7";
    let (status, _) = get_once(addr, &[("x-forwarded-for", xff)]).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
}

#[tokio::test]
async fn clients_behind_a_trusted_proxy_are_limited_apart() {
    let (_clock, layer) = behind_proxy(Quota::per_minute(2));
    let addr = serve(layer).await;
    let mut conn = connect(addr).await; // one proxy connection carries both clients
    let a: &[(&str, &[u8])] = &[("x-forwarded-for", b"198.51.100.1")];
    let b: &[(&str, &[u8])] = &[("x-forwarded-for", b"198.51.100.2")];
    for _ in 0..2 {
        assert_eq!(get(&mut conn, a).await.0, StatusCode::OK);
    }
    assert_eq!(get(&mut conn, a).await.0, StatusCode::TOO_MANY_REQUESTS);
    for _ in 0..2 {
        let (status, h) = get(&mut conn, b).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(policy(&h).1, 2);
    }
    assert_eq!(get(&mut conn, b).await.0, StatusCode::TOO_MANY_REQUESTS);
    // The proxy itself, without a header, is a third client.
    assert_eq!(get(&mut conn, &[]).await.0, StatusCode::OK);
}

#[tokio::test]
async fn malformed_forwarding_headers_key_by_the_proxy() {
    let (_clock, layer) = behind_proxy(Quota::per_minute(3));
    let addr = serve(layer).await;
    let malformed: [&[u8]; 6] = [
        b"garbage",
        b"unknown",
        b"203.0.113.9, nonsense",
        b"203.0.113.9:99999",
        b",,,",
        b"203.0.113.9, \xff\xfe",
    ];
    let mut statuses = Vec::new();
    for xff in malformed {
        let (status, h) = get_once(addr, &[("x-forwarded-for", xff)]).await;
        assert!(status == StatusCode::OK || status == StatusCode::TOO_MANY_REQUESTS);
        if status == StatusCode::OK {
            ratelimit(&h); // the fields parse
        }
        statuses.push(status.as_u16());
    }
    // All six keyed by the proxy (127.0.0.1): its burst of 3, then refusals; no 400, no 500.
    assert_eq!(statuses, [200, 200, 200, 429, 429, 429]);
    // A well-formed client is still its own key.
    let (status, _) = get_once(addr, &[("x-forwarded-for", b"203.0.113.9")]).await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn ipv6_clients_are_keyed_by_their_64() {
    let (_clock, limiter) = manual(Quota::per_minute(2));
    let addr = serve(RateLimitLayer::builder(limiter, PeerIp::new()).build()).await;
    let peer = |p: &'static str| [("x-test-peer", p.as_bytes())];
    assert_eq!(get_once(addr, &peer("[2001:db8:1:2::1]:1")).await.0, 200);
    assert_eq!(
        get_once(addr, &peer("[2001:db8:1:2:ffff::9]:2")).await.0,
        200
    );
    // Same /64: refused.
    assert_eq!(
        get_once(addr, &peer("[2001:db8:1:2:abcd::7]:3")).await.0,
        429
    );
    // The next /64 is another client.
    assert_eq!(get_once(addr, &peer("[2001:db8:1:3::1]:1")).await.0, 200);
    // IPv4-mapped IPv6 is the IPv4 address.
    assert_eq!(get_once(addr, &peer("192.0.2.1:1")).await.0, 200);
    assert_eq!(get_once(addr, &peer("[::ffff:192.0.2.1]:1")).await.0, 200);
    assert_eq!(get_once(addr, &peer("192.0.2.1:2")).await.0, 429);
}

#[tokio::test]
async fn the_missing_key_policy() {
    let api_key = || HeaderKey::new(http::HeaderName::from_static("x-api-key"));
    let reject = RateLimitLayer::new(Quota::per_minute(1), api_key());
    let addr = serve(reject).await;
    let (status, h) = get_once(addr, &[]).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(h.get("ratelimit").is_none());
    let (status, _) = get_once(addr, &[("x-api-key", b"")]).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, _) = get_once(addr, &[("x-api-key", b"k1")]).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = get_once(addr, &[("x-api-key", b"k1")]).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);

    let allow = RateLimitLayer::builder(Limiter::keyed(Quota::per_minute(1)), api_key())
        .on_missing_key(MissingKey::Allow)
        .build();
    let addr = serve(allow).await;
    for _ in 0..3 {
        let (status, h) = get_once(addr, &[]).await;
        assert_eq!(status, StatusCode::OK);
        assert!(h.get("ratelimit").is_none()); // not limited, so no fields
    }
    let (status, _) = get_once(addr, &[("x-api-key", b"k1")]).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = get_once(addr, &[("x-api-key", b"k1")]).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);

    // A custom key that is missing gets the policy too.
    let custom = |parts: &http::request::Parts| {
        parts
            .uri
            .query()
            .and_then(|q| q.strip_prefix("user="))
            .map(str::to_owned)
    };
    let addr = serve(RateLimitLayer::new(Quota::per_minute(1), custom)).await;
    assert_eq!(get_once(addr, &[]).await.0, StatusCode::BAD_REQUEST);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_connections_share_one_limit_exactly() {
    let clock = ManualClock::new(); // no time passes: exactly the burst is admitted
    let limiter = Limiter::builder(Quota::per_minute(50)).clock(clock).build();
    let layer = RateLimitLayer::builder(limiter.clone(), Global).build();
    let addr = serve(layer).await;
    let mut tasks = Vec::new();
    for _ in 0..20 {
        tasks.push(tokio::spawn(async move {
            let mut conn = connect(addr).await;
            let mut statuses = Vec::new();
            for _ in 0..5 {
                statuses.push(get(&mut conn, &[]).await.0);
            }
            statuses
        }));
    }
    let mut ok = 0;
    let mut refused = 0;
    for task in tasks {
        for status in task.await.unwrap() {
            match status {
                StatusCode::OK => ok += 1,
                StatusCode::TOO_MANY_REQUESTS => refused += 1,
                other => panic!("unexpected {other}"),
            }
        }
    }
    assert_eq!((ok, refused), (50, 50));
    let stats = limiter.stats();
    assert_eq!((stats.admitted, stats.denied), (50, 50));
}

#[tokio::test]
async fn tiers_from_the_request() {
    let limiter = Limiter::builder(Quota::per_minute(1))
        .clock(ManualClock::new())
        .build();
    let layer = RateLimitLayer::builder(
        limiter,
        HeaderKey::new(http::HeaderName::from_static("x-api-key")),
    )
    .quota_for(|parts| match parts.headers.get("x-api-key") {
        Some(k) if k.as_bytes().starts_with(b"paid-") => Quota::per_minute(5),
        _ => Quota::per_minute(1),
    })
    .build();
    let addr = serve(layer).await;
    let paid: &[(&str, &[u8])] = &[("x-api-key", b"paid-1")];
    let free: &[(&str, &[u8])] = &[("x-api-key", b"free-1")];
    for r in (0..5).rev() {
        let (status, h) = get_once(addr, paid).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(policy(&h), ("default".into(), 5, 60));
        assert_eq!(ratelimit(&h).1, r);
    }
    let (status, h) = get_once(addr, paid).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(retry_after(&h), 12);
    let (status, h) = get_once(addr, free).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(policy(&h), ("default".into(), 1, 60));
    let (status, h) = get_once(addr, free).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(retry_after(&h), 60);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delay_mode_waits_up_to_its_bound_then_refuses() {
    let clock = ManualClock::new();
    let limiter: Limiter<()> = Limiter::builder(Quota::per_second(1).allow_burst(1))
        .clock(clock.clone())
        .build();
    let layer = RateLimitLayer::builder(limiter.clone(), Global)
        .delay(Duration::from_millis(1500))
        .build();
    let addr = serve(layer.clone()).await;

    let (status, h) = get_once(addr, &[]).await;
    assert_eq!(status, StatusCode::OK); // a free cell: no wait
    assert_eq!(ratelimit(&h), ("default".into(), 0, 1));

    // The next one waits 1 s (within the bound) at the head of the queue, which reserves its
    // cell: a peek then sees the key 2 s out.
    let waiting = tokio::spawn(get_once(addr, &[]));
    let mut polls = 0;
    while limiter.peek(&()).unwrap_err().retry_after() != Some(Duration::from_secs(2)) {
        polls += 1;
        assert!(polls < 2000, "the request never queued");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Its turn would come 2 s out, past the bound: refused at once.
    let (status, h) = get_once(addr, &[]).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(retry_after(&h), 2);
    assert!(!waiting.is_finished());

    clock.advance(Duration::from_secs(1));
    let (status, h) = waiting.await.unwrap();
    assert_eq!(status, StatusCode::OK);
    assert_eq!(policy(&h), ("default".into(), 1, 1));
    assert_eq!(ratelimit(&h), ("default".into(), 0, 1));
    let counts = layer.counts();
    assert_eq!(
        (counts.admitted, counts.delayed, counts.rejected),
        (1, 1, 1)
    );
}

#[tokio::test]
async fn stacked_limits_consume_nothing_on_rejection() {
    let clock = ManualClock::new();
    let per_ip: Limiter<std::net::IpAddr> = Limiter::builder(Quota::per_minute(100))
        .clock(clock.clone())
        .build();
    let per_key: Limiter<http::HeaderValue> = Limiter::builder(Quota::per_minute(2))
        .clock(clock.clone())
        .build();
    let global: Limiter<()> = Limiter::builder(Quota::per_minute(3))
        .clock(clock.clone())
        .build();
    let layer = RateLimitLayer::builder(per_ip.clone(), PeerIp::new())
        .policy_name("per-ip")
        .stack(
            "per-key",
            per_key.clone(),
            HeaderKey::new(http::HeaderName::from_static("x-api-key")),
        )
        .stack("global", global.clone(), Global)
        .build();
    let addr = serve(layer).await;
    let a: &[(&str, &[u8])] = &[("x-api-key", b"a")];
    let b: &[(&str, &[u8])] = &[("x-api-key", b"b")];

    let (status, h) = get_once(addr, a).await;
    assert_eq!(status, StatusCode::OK);
    let policies = parse_list(&h, "ratelimit-policy");
    let names: Vec<_> = policies.iter().map(|i| i.value.clone()).collect();
    let s = |n: &str| Bare::Str(n.into());
    assert_eq!(names, [s("per-ip"), s("per-key"), s("global")]);
    assert_eq!(
        policies
            .iter()
            .map(|i| (i.int("q"), i.int("w")))
            .collect::<Vec<_>>(),
        [(100, 60), (2, 60), (3, 60)]
    );
    let limits = parse_list(&h, "ratelimit");
    assert_eq!(
        limits.iter().map(|i| i.int("r")).collect::<Vec<_>>(),
        [99, 1, 2]
    );

    assert_eq!(get_once(addr, a).await.0, StatusCode::OK);
    // Refused by a's own limit: the per-IP cell is given back, the global one never taken.
    let (status, h) = get_once(addr, a).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(ratelimit(&h).0, "per-key");
    assert_eq!(retry_after(&h), 30);

    assert_eq!(get_once(addr, b).await.0, StatusCode::OK); // the global budget's last cell
    // Refused by the global budget: b's own cell and the per-IP cell are given back.
    let (status, h) = get_once(addr, b).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(policy(&h), ("global".into(), 3, 60));
    assert_eq!(retry_after(&h), 20);

    // b used one cell of two: a check would leave 0. Without the undo it would be refused.
    let b_key = http::HeaderValue::from_static("b");
    assert_eq!(per_key.peek(&b_key).unwrap().remaining(), 0);
    // Three requests served, so the IP used 3 cells of 100: a check would leave 96.
    let ip = "127.0.0.1".parse().unwrap();
    assert_eq!(per_ip.peek(&ip).unwrap().remaining(), 96);
    // No API key: the per-key limit does not apply, the global one does.
    let (status, h) = get_once(addr, &[]).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(ratelimit(&h).0, "global");
    clock.advance(Duration::from_secs(20));
    let (status, h) = get_once(addr, &[]).await;
    assert_eq!(status, StatusCode::OK);
    let names: Vec<_> = parse_list(&h, "ratelimit")
        .into_iter()
        .map(|i| i.value)
        .collect();
    assert_eq!(names, [s("per-ip"), s("global")]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delay_mode_gives_stacked_limits_back_when_it_refuses() {
    let clock = ManualClock::new();
    let per_ip: Limiter<std::net::IpAddr> = Limiter::builder(Quota::per_second(1).allow_burst(1))
        .clock(clock.clone())
        .build();
    let global: Limiter<()> = Limiter::builder(Quota::per_minute(10))
        .clock(clock.clone())
        .build();
    let layer = RateLimitLayer::builder(per_ip, PeerIp::new())
        .stack("global", global.clone(), Global)
        .delay(Duration::from_millis(500))
        .build();
    let addr = serve(layer).await;
    let (status, h) = get_once(addr, &[]).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(parse_list(&h, "ratelimit").len(), 2);
    // The next cell is 1 s out, past the bound: refused, and the global cell given back.
    let (status, h) = get_once(addr, &[]).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(retry_after(&h), 1);
    assert_eq!(global.peek(&()).unwrap().remaining(), 8); // one used of ten
}

#[test]
fn layers_services_and_futures_are_send_and_sync() {
    use tollgate_tower::{Delay, RateLimit, ResponseFuture};
    fn shared<T: Clone + Send + Sync + 'static>() {}
    fn send<T: Send + 'static>() {}
    shared::<RateLimitLayer<PeerIp>>();
    shared::<RateLimitLayer<ClientIp, Delay>>();
    shared::<RateLimit<HelloService, ClientIp>>();
    shared::<RateLimit<HelloService, Global, Delay>>();
    send::<ResponseFuture<HelloService, Incoming>>();
}

#[tokio::test]
async fn a_delayed_request_dropped_while_waiting_gives_stacked_cells_back() {
    let clock = ManualClock::new();
    let per_ip: Limiter<std::net::IpAddr> = Limiter::builder(Quota::per_second(1).allow_burst(1))
        .clock(clock.clone())
        .build();
    let global: Limiter<()> = Limiter::builder(Quota::per_minute(10))
        .clock(clock.clone())
        .build();
    let layer = RateLimitLayer::builder(per_ip, PeerIp::new())
        .stack("global", global.clone(), Global)
        .delay(Duration::from_secs(5))
        .build();
    let svc = layer.layer(service_fn(|_: Request<()>| async {
        Ok::<_, Infallible>(Response::new(String::from("hello")))
    }));
    let request = || {
        let mut req = Request::new(());
        req.extensions_mut()
            .insert("192.0.2.1:1".parse::<SocketAddr>().unwrap());
        req
    };
    use tower::ServiceExt;
    let ok = svc.clone().oneshot(request()).await.unwrap();
    assert_eq!(ok.status(), StatusCode::OK);
    // The next waits 1 s of manual time, which never passes: the client gives up.
    let gave_up = tokio::time::timeout(Duration::from_millis(20), svc.clone().oneshot(request()));
    assert!(gave_up.await.is_err());
    assert_eq!(global.peek(&()).unwrap().remaining(), 8); // only the served request's cell
}

/// Sends each `Forwarded` value (one field, or several fields where split by `|`) on a
/// fresh connection from 127.0.0.1 (a trusted proxy): the statuses.
async fn statuses_for(addr: SocketAddr, name: &str, values: &[&[u8]]) -> Vec<u16> {
    let mut statuses = Vec::new();
    for value in values {
        let fields: Vec<(&str, &[u8])> = value.split(|&b| b == b'|').map(|v| (name, v)).collect();
        let (status, h) = get_once(addr, &fields).await;
        if status == StatusCode::OK {
            ratelimit(&h); // the fields parse
        }
        statuses.push(status.as_u16());
    }
    statuses
}

#[tokio::test]
async fn forwarded_is_walked_right_to_left() {
    let (_clock, layer) = behind_proxy_reading(Quota::per_minute(2), ForwardedHeader::Forwarded);
    let addr = serve(layer).await;
    // One client, 203.0.113.5, behind up to two trusted proxies, whatever it puts in front
    // (the leftmost entries are its own), in every spelling RFC 7239 allows.
    let same_client: [&[u8]; 6] = [
        b"for=203.0.113.5",
        b"for=1.1.1.1, For=\"203.0.113.5:4711\";proto=https",
        b"for=\"[2001:db8::1]\", for=203.0.113.5;by=10.0.0.1, for=10.0.0.7",
        b"for=unknown|for=203.0.113.5",
        b"for=_spoof;proto=http, for=203.0.113.5 ; host=example.com",
        b"for=203.0.113.5, for=203.0.113.6", // another client
    ];
    assert_eq!(
        statuses_for(addr, "forwarded", &same_client).await,
        [200, 200, 429, 429, 429, 200]
    );
    // IPv6 clients in quoted brackets, keyed by their /64: two addresses, one key.
    let v6: [&[u8]; 3] = [
        b"for=\"[2001:db8:1:2::a]:4711\"",
        b"for=\"[2001:db8:1:2::b]\"",
        b"for=\"[2001:db8:1:2::c]\", for=\"[2001:db8:ffff::1]:80\"",
    ];
    assert_eq!(statuses_for(addr, "forwarded", &v6).await, [200, 200, 429]);
    // X-Forwarded-For is not read when Forwarded is: it cannot choose a key.
    let xff: [&[u8]; 1] = [b"198.51.100.77"];
    assert_eq!(statuses_for(addr, "x-forwarded-for", &xff).await, [200]);
    assert_eq!(statuses_for(addr, "x-forwarded-for", &xff).await, [200]);
    // ... those two were the proxy's own two cells: the third is refused.
    assert_eq!(statuses_for(addr, "x-forwarded-for", &xff).await, [429]);
}

#[tokio::test]
async fn malformed_forwarded_fields_key_by_the_proxy() {
    let (_clock, layer) = behind_proxy_reading(Quota::per_minute(3), ForwardedHeader::Forwarded);
    let addr = serve(layer).await;
    // Each names no address right of the proxy: the key is 127.0.0.1's.
    let malformed: [&[u8]; 9] = [
        b"for=unknown",
        b"for=_hidden",
        b"proto=https",
        b"for=\"203.0.113.9",
        b"for=[2001:db8::1]",
        b"for=2001:db8::1",
        b"for=203.0.113.9;for=203.0.113.10",
        b"for=203.0.113.9, =x",
        b"for=203.0.113.9|for=\xff",
    ];
    assert_eq!(
        statuses_for(addr, "forwarded", &malformed).await,
        [200, 200, 200, 429, 429, 429, 429, 429, 429]
    );
    // A well-formed client right of a malformed field is still its own key.
    let fine: [&[u8]; 2] = [b"for=203.0.113.9", b"garbage=\"|for=203.0.113.9"];
    assert_eq!(statuses_for(addr, "forwarded", &fine).await, [200, 200]);
}

#[tokio::test]
async fn x_real_ip_from_a_trusted_proxy() {
    let (_clock, layer) = behind_proxy_reading(Quota::per_minute(1), ForwardedHeader::XRealIp);
    let addr = serve(layer).await;
    let clients: [&[u8]; 4] = [
        b"198.51.100.1",
        b"198.51.100.2",
        b"198.51.100.1",
        b" 198.51.100.2 ",
    ];
    assert_eq!(
        statuses_for(addr, "x-real-ip", &clients).await,
        [200, 200, 429, 429]
    );
    // Malformed, or two fields: the proxy's key (one cell, then refused).
    let malformed: [&[u8]; 3] = [b"nope", b"198.51.100.3|198.51.100.4", b""];
    assert_eq!(
        statuses_for(addr, "x-real-ip", &malformed).await,
        [200, 429, 429]
    );
    // From a peer that is not trusted, X-Real-IP is ignored.
    let (_clock, limiter) = manual(Quota::per_minute(1));
    let key = ClientIp::trusting(["10.0.0.0/8"])
        .unwrap()
        .header(ForwardedHeader::XRealIp);
    let addr = serve(RateLimitLayer::builder(limiter, key).build()).await;
    assert_eq!(
        statuses_for(addr, "x-real-ip", &clients[..2]).await,
        [200, 429]
    );
}

/// `GET /` from the IPv4 client `ip` (standing in for the socket's address).
async fn get_from(
    addr: SocketAddr,
    ip: &str,
    headers: &[(&str, &[u8])],
) -> (StatusCode, HeaderMap) {
    let peer = format!("{ip}:4000");
    let mut all = vec![("x-test-peer", peer.as_bytes())];
    all.extend_from_slice(headers);
    get_once(addr, &all).await
}

#[tokio::test]
async fn allowlisted_clients_bypass_every_limit() {
    let (_clock, limiter) = manual(Quota::per_minute(1));
    let global: Limiter<()> = Limiter::builder(Quota::per_minute(2)).build();
    let layer = RateLimitLayer::builder(limiter, PeerIp::new())
        .stack("global", global.clone(), Global)
        .allow_cidrs(["192.0.2.0/24"])
        .unwrap()
        .allow_if(|ip: &std::net::IpAddr| {
            *ip == "198.51.100.200".parse::<std::net::IpAddr>().unwrap()
        })
        .build();
    let addr = serve(layer.clone()).await;
    for ip in ["192.0.2.1", "192.0.2.254", "198.51.100.200"] {
        for _ in 0..3 {
            let (status, h) = get_from(addr, ip, &[]).await;
            assert_eq!(status, StatusCode::OK, "{ip}");
            assert!(h.get("ratelimit").is_none() && h.get("ratelimit-policy").is_none());
        }
    }
    // Nothing was taken from the global budget: two other clients still get a cell each.
    assert_eq!(get_from(addr, "192.0.3.1", &[]).await.0, StatusCode::OK);
    assert_eq!(
        get_from(addr, "198.51.100.201", &[]).await.0,
        StatusCode::OK
    );
    assert_eq!(
        get_from(addr, "192.0.3.2", &[]).await.0,
        StatusCode::TOO_MANY_REQUESTS
    );
    let counts = layer.counts();
    assert_eq!(
        (counts.allowlisted, counts.admitted, counts.rejected),
        (9, 2, 1)
    );
    let stats = layer.stats();
    assert_eq!(stats[1].0, "global");
    assert_eq!((stats[1].1.admitted, stats[1].1.denied), (2, 1));
    assert_eq!(stats[0].1.admitted, 3); // the third was given back when global refused

    // Allowlisted API keys.
    let by_key: Limiter<http::HeaderValue> = Limiter::builder(Quota::per_minute(1)).build();
    let layer = RateLimitLayer::builder(
        by_key,
        HeaderKey::new(http::HeaderName::from_static("x-api-key")),
    )
    .allow_keys([http::HeaderValue::from_static("monitoring")])
    .build();
    let addr = serve(layer).await;
    for _ in 0..3 {
        assert_eq!(
            get_once(addr, &[("x-api-key", b"monitoring")]).await.0,
            StatusCode::OK
        );
    }
    assert_eq!(
        get_once(addr, &[("x-api-key", b"user")]).await.0,
        StatusCode::OK
    );
    assert_eq!(
        get_once(addr, &[("x-api-key", b"user")]).await.0,
        StatusCode::TOO_MANY_REQUESTS
    );
    // No key is not an allowlisted key.
    assert_eq!(get_once(addr, &[]).await.0, StatusCode::BAD_REQUEST);
}

/// The hello service, answering with the status a dry-run layer would have refused with
/// in `x-would-be` (none if admitted).
fn dry_run_reporter() -> HelloService {
    tower::util::BoxCloneSyncService::new(service_fn(|req: Request<Incoming>| async move {
        let mut res = Response::new(Full::new(Bytes::from_static(b"hello")));
        if let Some(refusal) = req.extensions().get::<DryRunRefusal>() {
            res.headers_mut()
                .insert("x-would-be", refusal.status().as_u16().into());
            if let Some(retry) = refusal.headers().get("retry-after") {
                res.headers_mut()
                    .insert("x-would-retry-after", retry.clone());
            }
        }
        Ok::<_, Infallible>(res)
    }))
}

#[tokio::test]
async fn dry_run_decides_counts_and_marks_but_never_refuses() {
    let (clock, limiter) = manual(Quota::per_minute(2));
    let layer = RateLimitLayer::builder(limiter.clone(), PeerIp::new())
        .dry_run()
        .build();
    let addr = serve_over(layer.clone(), dry_run_reporter()).await;
    let mut conn = connect(addr).await;
    for r in [1, 0] {
        let (status, h) = get(&mut conn, &[]).await;
        assert_eq!(status, StatusCode::OK);
        assert!(h.get("x-would-be").is_none());
        assert_eq!(ratelimit(&h).1, r);
    }
    for _ in 0..3 {
        let (status, h) = get(&mut conn, &[]).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(h["x-would-be"], "429");
        assert_eq!(h["x-would-retry-after"], "30");
        // Nothing tells the client.
        assert!(h.get("retry-after").is_none() && h.get("ratelimit").is_none());
    }
    // The would-be refusals consumed nothing: after one interval, one cell again.
    clock.advance(Duration::from_secs(30));
    let (_, h) = get(&mut conn, &[]).await;
    assert!(h.get("x-would-be").is_none());
    let (_, h) = get(&mut conn, &[]).await;
    assert_eq!(h["x-would-be"], "429");
    let counts = layer.counts();
    assert_eq!(
        (counts.admitted, counts.dry_run_refused, counts.rejected),
        (3, 4, 0)
    );
    assert_eq!(limiter.stats().denied, 4);

    // A request without a key would have been a 400.
    let api_key = HeaderKey::new(http::HeaderName::from_static("x-api-key"));
    let layer = RateLimitLayer::builder(Limiter::keyed(Quota::per_minute(2)), api_key)
        .dry_run()
        .build();
    let addr = serve_over(layer.clone(), dry_run_reporter()).await;
    let (status, h) = get_once(addr, &[]).await;
    assert_eq!(
        (status, &h["x-would-be"]),
        (StatusCode::OK, &http::HeaderValue::from_static("400"))
    );
    assert_eq!(layer.counts().dry_run_refused, 1);
    assert_eq!(layer.counts().missing_key_rejected, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_are_shared_by_every_connection() {
    let (_clock, limiter) = manual(Quota::per_minute(10));
    let layer = RateLimitLayer::builder(limiter, PeerIp::new())
        .on_missing_key(MissingKey::Reject)
        .build();
    let addr = serve(layer.clone()).await;
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            tokio::spawn(async move {
                let mut conn = connect(addr).await;
                for _ in 0..4 {
                    get(&mut conn, &[]).await;
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let counts = layer.counts();
    assert_eq!((counts.admitted, counts.rejected), (10, 22));
    assert_eq!(layer.stats()[0].1.admitted, 10);
    assert_eq!(counts.missing_key_rejected + counts.missing_key_allowed, 0);
}

#[tokio::test]
async fn missing_key_outcomes_are_counted() {
    let api_key = || HeaderKey::new(http::HeaderName::from_static("x-api-key"));
    let strict = RateLimitLayer::new(Quota::per_minute(10), api_key());
    let lax = RateLimitLayer::builder(Limiter::keyed(Quota::per_minute(10)), api_key())
        .on_missing_key(MissingKey::Allow)
        .build();
    let (a, b) = (serve(strict.clone()).await, serve(lax.clone()).await);
    for _ in 0..2 {
        assert_eq!(get_once(a, &[]).await.0, StatusCode::BAD_REQUEST);
        assert_eq!(get_once(b, &[]).await.0, StatusCode::OK);
    }
    assert_eq!(strict.counts().missing_key_rejected, 2);
    assert_eq!(lax.counts().missing_key_allowed, 2);
    assert_eq!(strict.counts().admitted + lax.counts().admitted, 0);
}

#[tokio::test]
async fn legacy_fields_and_problem_bodies() {
    let (_clock, limiter) = manual(Quota::per_minute(2));
    let global: Limiter<()> = Limiter::builder(Quota::per_minute(100)).build();
    let layer = RateLimitLayer::builder(limiter, PeerIp::new())
        .stack("global", global, Global)
        .legacy_headers(true)
        .problem_json(|json: String| Full::new(Bytes::from(json)))
        .build();
    let addr = serve(layer).await;
    let mut conn = connect(addr).await;
    let int = |h: &HeaderMap, name: &str| -> u64 {
        let values: Vec<_> = h.get_all(name).iter().collect();
        assert_eq!(values.len(), 1, "{name}");
        values[0].to_str().unwrap().parse().unwrap()
    };
    for (remaining, reset) in [(1, 30), (0, 60)] {
        let (status, h) = get(&mut conn, &[]).await;
        assert_eq!(status, StatusCode::OK);
        // The policy with the fewest cells left: per IP, not global.
        assert_eq!(int(&h, "x-ratelimit-limit"), 2);
        assert_eq!(int(&h, "x-ratelimit-remaining"), remaining);
        assert_eq!(int(&h, "x-ratelimit-reset"), reset);
        assert_eq!(parse_list(&h, "ratelimit").len(), 2); // the IETF fields too
        assert!(h.get("content-type").is_none());
    }
    conn.ready().await.unwrap();
    let res = conn
        .send_request(
            Request::get("/")
                .header("host", "t")
                .body(Empty::new())
                .unwrap(),
        )
        .await
        .unwrap();
    let (parts, body) = res.into_parts();
    assert_eq!(parts.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(parts.headers["content-type"], "application/problem+json");
    assert_eq!(int(&parts.headers, "x-ratelimit-remaining"), 0);
    assert_eq!(int(&parts.headers, "x-ratelimit-reset"), 60);
    let retry = retry_after(&parts.headers);
    let body = body.collect().await.unwrap().to_bytes();
    let problem: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(problem["type"], "about:blank");
    assert_eq!(problem["title"], "Too Many Requests");
    assert_eq!(problem["status"], 429);
    assert_eq!(problem["retry_after"], retry);
    assert!(problem["detail"].as_str().unwrap().contains("default"));

    // A maker of another body type: the refusal keeps the empty default body.
    let (_clock, limiter) = manual(Quota::per_minute(1));
    let layer = RateLimitLayer::builder(limiter, PeerIp::new())
        .problem_json(|json: String| json)
        .build();
    let addr = serve(layer).await;
    get_once(addr, &[]).await;
    let (status, h) = get_once(addr, &[]).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert!(h.get("content-type").is_none());
}

#[tokio::test]
async fn grpc_requests_are_refused_as_grpc() {
    use hyper_util::rt::TokioExecutor;
    let (_clock, limiter) = manual(Quota::per_minute(1));
    let layer = RateLimitLayer::builder(limiter, PeerIp::new())
        .problem_json(|json: String| Full::new(Bytes::from(json)))
        .build();
    // An HTTP/2 server, as gRPC needs.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let svc = layer.layer(boxed_hello());
    tokio::spawn(async move {
        loop {
            let (stream, peer) = listener.accept().await.unwrap();
            let svc = ServiceBuilder::new()
                .map_request(move |mut req: Request<Incoming>| {
                    req.extensions_mut().insert(peer);
                    req
                })
                .service(svc.clone());
            tokio::spawn(
                hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), TowerToHyperService::new(svc)),
            );
        }
    });
    let stream = TcpStream::connect(addr).await.unwrap();
    let (mut client, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(conn);
    let mut call = async || {
        let req = Request::post("http://test/pkg.Service/Method")
            .header("content-type", "application/grpc+proto")
            .header("te", "trailers")
            .body(Full::new(Bytes::from_static(b"\0\0\0\0\0")))
            .unwrap();
        client.ready().await.unwrap();
        client.send_request(req).await.unwrap()
    };
    let admitted = call().await;
    assert_eq!(admitted.status(), StatusCode::OK);
    assert!(admitted.headers().get("grpc-status").is_none());
    admitted.into_body().collect().await.unwrap();

    let refused = call().await;
    // Trailers-only: HTTP 200, the gRPC status in the one header block, which ends the
    // stream (no data, no trailers).
    assert_eq!(refused.status(), StatusCode::OK);
    assert_eq!(refused.version(), http::Version::HTTP_2);
    let h = refused.headers();
    assert_eq!(h["content-type"], "application/grpc");
    assert_eq!(h["grpc-status"], "8");
    assert_eq!(h["grpc-message"], "rate limit exceeded");
    assert_eq!(retry_after(h), 60);
    assert_eq!(ratelimit(h).1, 0);
    assert!(hyper::body::Body::is_end_stream(refused.body()));
    let collected = refused.into_body().collect().await.unwrap();
    assert!(collected.trailers().is_none());
    assert!(collected.to_bytes().is_empty());
}
