//! Requests per second over loopback for a hello-world hyper service served several ways in
//! one process run: with no limiter, behind tollgate-tower's layer, and behind
//! tower_governor's layer; the cost of the limiter is the ratio to the no-limiter run.
//!
//! ```text
//! cargo bench -p tollgate-tower --bench http                          # full run, metrics on
//! cargo bench -p tollgate-tower --bench http --no-default-features --features foldhash  # off
//! TOLLGATE_BENCH_QUICK=1 cargo bench -p tollgate-tower --bench http   # smoke run (seconds)
//! ```
//!
//! * **The server**: hyper's HTTP/1.1 connection driver (keep-alive), `GET /` answering
//!   `200 hello` with an axum body (tower_governor only builds its refusals for axum's or
//!   tonic's body, so every subject uses axum's). Every connection's requests get the peer
//!   address as a `SocketAddr` extension (what tollgate-tower reads) and as axum's
//!   `ConnectInfo` (what tower_governor reads), whichever subject serves them. One
//!   current-thread Tokio runtime on one thread serves every subject.
//! * **The load**: 64 keep-alive connections (one request in flight on each, no
//!   pipelining) driven by a hand-rolled HTTP/1.1 client on one current-thread Tokio
//!   runtime on the main thread: it writes prebuilt requests and reads each response by its
//!   `content-length`, so it costs the server's core as little as a client can. The server
//!   and the client share the machine's cores (two here), and so does anything else running.
//! * **Limits**: every limiter gets the same quota, one cell per microsecond with bursts of
//!   1,000,000 per key, far above what a key can be sent here, so nothing is refused and the
//!   figures are the limiters' overhead; a run that sees any answer other than 200 fails.
//!   Under that quota a key of the 10,000-client mix has expired by its next visit (visits
//!   come milliseconds apart): tower_governor's map keeps every key, tollgate forgets
//!   expired keys but learns to keep the ones that come back (with `keep_expired(0)` it
//!   inserts each again). The *keys live* mix gives every limiter one
//!   cell per minute with the same burst instead: each admission moves a key's theoretical
//!   arrival time a minute ahead, so a key visited at least once a minute stays live for the
//!   whole run (its TAT only gets further ahead of the clock), and it would take a
//!   1,000,000th visit to one key to be refused, where a run makes a few thousand at most.
//! * **Mixes**: *one client*, every request from 127.0.0.1, keyed by the peer address
//!   (tollgate-tower's `PeerIp`, tower_governor's `PeerIpKeyExtractor`); *10,000 clients*,
//!   every request carrying `X-Forwarded-For: 10.a.b.c` from a pool of 10,000 addresses,
//!   cycled so that each connection walks its own stretch of the pool, keyed by the
//!   forwarded address (tollgate-tower's `ClientIp` trusting 127.0.0.0/8, which walks the
//!   header from the right; tower_governor's `SmartIpKeyExtractor`, which takes its
//!   leftmost entry and trusts no proxy list). With one entry both find the same address.
//!   Binding client sockets to distinct 127.x.y.z addresses would give as many keys as
//!   connections only (64 at a time), so the forwarded header is how 10,000 keys are seen.
//!   *10,000 clients, keys live*: the same requests and keys under the slow quota above.
//! * **Subjects**: `none`; `tollgate-tower` as built by default (the IETF `RateLimit` and
//!   `RateLimit-Policy` fields on every response); `tollgate-tower, fields off`
//!   (`.headers(false)`); `tower_governor` as built by default (no fields on success);
//!   `tower_governor, headers on` (its `use_headers()`: `x-ratelimit-limit` and
//!   `x-ratelimit-remaining` on every success, the peer of tollgate-tower's default);
//!   `ideal`, the floor: the cheapest correct per-client limiter as a tower layer (the same
//!   key, a GCRA CAS on an `AtomicU64` in a preallocated array indexed by a hash of the
//!   address, `Instant`, a 429 on refusal; see `http/ideal.rs`); two floors for the rows that
//!   miss: `no limiter, two fixed fields` (both IETF fields inserted with fixed values from
//!   static bytes: what writing the fields costs any layer, before deciding anything) and
//!   `tollgate-tower, fields off, TSC clock` (the fields-off layer on a limiter that reads
//!   tollgate's `TscClock`, a time-stamp counter as tower_governor's quanta clock, in place
//!   of the core's `Instant`); and `tollgate-tower, fields off, keep_expired(0)`, the
//!   fields-off layer on a limiter that forgets expired keys at once instead of learning to
//!   keep the ones that come back (the default), so that each of the expiring mix's
//!   returning clients is an insert again; and `tollgate-tower, fields off, presized, TSC
//!   clock`, what a server that knows its clients can pick: the fields-off layer on a limiter
//!   built with `.presize(10_000)` and `TscClock`.
//!
//! With tollgate-tower's `metrics` feature (on by default), subjects 1 and 2 run
//! with the feature on and no recorder, and two more subjects are added:
//! `tollgate-tower, Prometheus recorder` and `tollgate-tower, fields off, Prometheus
//! recorder`, the same layers built under `metrics-exporter-prometheus`'s recorder, which
//! records every decision (never rendered, as between two scrapes).
//!
//! Each round measures every subject in turn (the order rotates from round to round), for
//! each mix: connect, warm up, then count responses over a fixed window. Reported per subject
//! as the median over rounds with min–max: requests per second; the ratio to the no-limiter
//! run *of the same round*; the server thread's CPU time per request (from
//! `/proc/self/task/TID/schedstat`, in nanoseconds, which the machine's other load inflates
//! less than it does the rate) and the share of a core the server thread got in the window.
//!
//! Then the same service stacks are called in process on one thread, no sockets: CPU time
//! per request, and the limiter's cost as the difference to the no-limiter stack, which the
//! machine's other load cannot hide as it hides a few per cent of the loopback rate. Within
//! a round every stack is built, then they take turns (ten of `calls / 10` requests each,
//! the order rotating), so a slow spell of the machine falls on all of them; each
//! subject's time less tower_governor's in the same round is a column of its own. These
//! stacks are timed twice: around the bare handler (the loopback server's) and around one
//! that sets `content-type`, as a real handler does, so that the response's header map is
//! already allocated when a limiter adds its fields.
//!
//! Knobs: `TOLLGATE_BENCH_ROUNDS=n`; `TOLLGATE_BENCH_CALLS=n` in-process requests per stack
//! and round (two runs with different `n` under callgrind give exact instructions per
//! request, setup excluded); `TOLLGATE_BENCH_HEADERS=fresh` builds each in-process
//! request's `X-Forwarded-For` afresh (bytes in cache, as after parsing) instead of cloning
//! a pooled map whose bytes are cold; `TOLLGATE_BENCH_LOOPBACK=0` skips the loopback part
//! (`TOLLGATE_BENCH_SERVER_NS=ns` then stands in for the no-limiter server's CPU per request
//! in the last column); `TOLLGATE_BENCH_PROFILE=mix,app,subject` (indices, e.g. `1,0,2` for
//! 10,000 clients, bare handler, fields off; mix 2 is *keys live*, subject 4 tower_governor
//! with its headers, 5 the ideal, 6 the fixed fields, 7 the TSC clock, 8
//! `keep_expired(0)`) only calls that one stack in process, for `perf record`, on
//! `TOLLGATE_BENCH_THREADS` threads at once (1 by default; each starts at its own place in
//! the pool of clients), to see what cores sharing the layer cost.

use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::ConnectInfo;
use http::{HeaderName, HeaderValue, Request, Response};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use ideal::{IdealKey, IdealLayer};
use tokio::net::{TcpListener, TcpStream};
use tollgate::{Limiter, Quota};
use tollgate_tower::{ClientIp, KeyExtractor, PeerIp, RateLimitLayer};
use tower::util::MapResponseLayer;
use tower::{Layer, Service, ServiceBuilder, service_fn};
use tower_governor::GovernorLayer;
use tower_governor::governor::GovernorConfigBuilder;
use tower_governor::key_extractor::{PeerIpKeyExtractor, SmartIpKeyExtractor};

// The core's bench harness: its number formatting and machine description.
#[allow(dead_code)]
#[path = "../../../benches/common/fmt.rs"]
mod fmt;
#[allow(dead_code)]
#[path = "../../../benches/common/machine.rs"]
mod machine;
// The floor: the cheapest correct per-client limiter as a tower layer.
#[path = "http/ideal.rs"]
mod ideal;

/// Cells per second, and the burst, of every limiter (per key).
const RATE: u32 = 1_000_000;
const BURST: u32 = 1_000_000;
/// The *keys live* mix's interval: one cell per minute (same burst). A key's TAT moves a
/// minute ahead per admission, so a key visited at least once a minute never expires during
/// a run, and only its 1,000,000th visit could be refused.
const LIVE_INTERVAL: Duration = Duration::from_secs(60);
/// Distinct forwarded client addresses in the many-clients mix.
const CLIENTS: usize = 10_000;
/// Turns each in-process stack takes in a round (see `main`).
const TURNS: usize = 10;
/// The subject the "minus tower_governor" column is taken against.
const TOWER_GOVERNOR: usize = 3;

/// Median, min and max of per-round figures (what `fmt` formats).
#[derive(Debug, Clone, Copy)]
struct Summary {
    median: f64,
    min: f64,
    max: f64,
}

impl Summary {
    fn of(samples: &[f64]) -> Summary {
        let mut v = samples.to_vec();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Summary {
            median,
            min: v[0],
            max: v[n - 1],
        }
    }
}

/// How big a run is: full under `cargo bench`, a smoke run with `TOLLGATE_BENCH_QUICK=1`,
/// tiny when built as a test (`cargo test --all-targets` runs bench targets without
/// `--bench`). `TOLLGATE_BENCH_ROUNDS` overrides the rounds, `TOLLGATE_BENCH_CALLS` the in-process calls.
struct Size {
    mode: &'static str,
    rounds: usize,
    connections: usize,
    warmup: Duration,
    window: Duration,
    /// Requests per subject per round in process.
    calls: usize,
    /// Whether to run the loopback part (`TOLLGATE_BENCH_LOOPBACK=0` skips it).
    loopback: bool,
    /// Without loopback: the no-limiter server's CPU per request to put the in-process
    /// costs beside (`TOLLGATE_BENCH_SERVER_NS`), if given.
    server_ns: Option<f64>,
}

impl Size {
    fn from_env() -> Size {
        let bench = std::env::args().any(|a| a == "--bench");
        let quick = std::env::var("TOLLGATE_BENCH_QUICK").is_ok_and(|v| !v.is_empty() && v != "0");
        let mut size = match (bench, quick) {
            (false, _) => Size {
                mode: "test",
                rounds: 1,
                connections: 8,
                warmup: Duration::from_millis(20),
                window: Duration::from_millis(50),
                calls: 2_000,
                loopback: true,
                server_ns: None,
            },
            (true, true) => Size {
                mode: "quick",
                rounds: 2,
                connections: 64,
                // Short: a smoke run (15 loopback measurements per round) proves the stacks
                // serve and admit; its figures resolve nothing.
                warmup: Duration::from_millis(60),
                window: Duration::from_millis(150),
                calls: 50_000,
                loopback: true,
                server_ns: None,
            },
            (true, false) => Size {
                mode: "full",
                // Many short windows rather than a few long ones: on a shared machine the
                // load changes within seconds, and the rotation spreads it over subjects.
                rounds: 15,
                connections: 64,
                warmup: Duration::from_millis(200),
                window: Duration::from_secs(1),
                calls: 300_000,
                loopback: true,
                server_ns: None,
            },
        };
        if let Ok(r) = std::env::var("TOLLGATE_BENCH_ROUNDS") {
            size.rounds = r.parse().ok().filter(|&r| r > 0).unwrap_or_else(|| {
                panic!("TOLLGATE_BENCH_ROUNDS={r:?}: expected a positive number of rounds")
            });
        }
        if let Some(calls) = std::env::var("TOLLGATE_BENCH_CALLS")
            .ok()
            .and_then(|n| n.parse().ok())
            .filter(|&n| n > 0)
        {
            size.calls = calls;
        }
        size.loopback = std::env::var("TOLLGATE_BENCH_LOOPBACK").map_or(true, |v| v != "0");
        size.server_ns = std::env::var("TOLLGATE_BENCH_SERVER_NS")
            .ok()
            .and_then(|n| n.parse().ok());
        size
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mix {
    OneClient,
    ManyClients,
    /// `ManyClients`' requests under the slow quota, so that keys stay live between visits.
    ManyClientsLive,
}

impl Mix {
    fn name(self) -> &'static str {
        match self {
            Mix::OneClient => "one client (peer address)",
            Mix::ManyClients => "10,000 clients (X-Forwarded-For)",
            Mix::ManyClientsLive => "10,000 clients, keys live (1/min, X-Forwarded-For)",
        }
    }

    /// Whether requests carry a forwarded client address (and are keyed by it).
    fn forwarded(self) -> bool {
        self != Mix::OneClient
    }

    /// The requests a connection cycles through.
    fn requests(self) -> Vec<Vec<u8>> {
        match self {
            Mix::OneClient => vec![b"GET / HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n".to_vec()],
            Mix::ManyClients | Mix::ManyClientsLive => (1..=CLIENTS)
                .map(|i| {
                    format!(
                        "GET / HTTP/1.1\r\nhost: 127.0.0.1\r\nx-forwarded-for: 10.{}.{}.{}\r\n\r\n",
                        i >> 16,
                        (i >> 8) & 0xff,
                        i & 0xff
                    )
                    .into_bytes()
                })
                .collect(),
        }
    }
}

/// The subjects every build measures.
const BASE_SUBJECTS: [&str; 10] = [
    "none",
    "tollgate-tower",
    "tollgate-tower, fields off",
    "tower_governor",
    "tower_governor, headers on",
    "ideal (hash-indexed GCRA cell, no fields)",
    "no limiter, two fixed fields",
    "tollgate-tower, fields off, TSC clock",
    "tollgate-tower, fields off, keep_expired(0)",
    "tollgate-tower, fields off, presized, TSC clock",
];

#[cfg(not(feature = "metrics"))]
const SUBJECTS: [&str; 10] = BASE_SUBJECTS;

/// With the `metrics` feature, subjects 1 and 2 have no recorder (their handles are the
/// facade's no-ops); 10 and 11 are the same layers with Prometheus's recorder behind their
/// handles (recording, never rendered).
#[cfg(feature = "metrics")]
const SUBJECTS: [&str; 12] = {
    let mut all = [""; 12];
    let mut i = 0;
    while i < BASE_SUBJECTS.len() {
        all[i] = BASE_SUBJECTS[i];
        i += 1;
    }
    all[10] = "tollgate-tower, Prometheus recorder";
    all[11] = "tollgate-tower, fields off, Prometheus recorder";
    all
};

/// Subjects 10 and 11's recorder: one for the process, shared by every layer built on it.
#[cfg(feature = "metrics")]
fn recorded<L>(build: impl FnOnce() -> L) -> L {
    static RECORDER: std::sync::OnceLock<metrics_exporter_prometheus::PrometheusRecorder> =
        std::sync::OnceLock::new();
    let recorder = RECORDER
        .get_or_init(|| metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder());
    metrics::with_local_recorder(recorder, build)
}

/// The handler: `200 hello`, with no header of its own (`TYPED = false`, the original
/// rows) or with a `content-type` as a realistic handler sets (`TYPED = true`: axum's `&str`
/// handlers set `text/plain; charset=utf-8`), so that the response's header map is already
/// allocated when a limiter adds its fields.
async fn hello<B, const TYPED: bool>(_req: Request<B>) -> Result<Response<Body>, Infallible> {
    let mut response = Response::new(Body::from("hello\n"));
    if TYPED {
        response.headers_mut().insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("text/plain; charset=utf-8"),
        );
    }
    Ok(response)
}

/// Which handler a stack wraps (see [`hello`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum App {
    /// No header of its own.
    Bare,
    /// Sets `content-type`.
    Typed,
}

impl App {
    fn name(self) -> &'static str {
        match self {
            App::Bare => "no header",
            App::Typed => "content-type",
        }
    }
}

/// What a subject's service is handed to: a server on a listener, or an in-process caller.
/// `B` is the request body the service takes.
trait Sink<B> {
    /// What handing the service over gives back.
    type Out;

    fn run<S>(self, svc: S) -> Self::Out
    where
        S: Service<Request<B>, Response = Response<Body>, Error = Infallible>
            + Clone
            + Send
            + 'static,
        <S as Service<Request<B>>>::Future: Send + 'static;
}

/// Serves on a listener of the server thread's runtime.
struct Serve(std::net::TcpListener);

impl Sink<Incoming> for Serve {
    type Out = ();

    fn run<S>(self, svc: S)
    where
        S: Service<Request<Incoming>, Response = Response<Body>, Error = Infallible>
            + Clone
            + Send
            + 'static,
        <S as Service<Request<Incoming>>>::Future: Send + 'static,
    {
        serve(self.0, svc);
    }
}

/// Calls the service in process, no sockets: requests of `mix`, each built with the same
/// headers and extensions the server gives it, polled once (every subject answers at
/// once), the response dropped. Gives back a [`Caller`], warmed up, to time.
struct Prepare {
    mix: Mix,
    /// Threads calling clones of the service at once (profiling only:
    /// `TOLLGATE_BENCH_THREADS`), each starting at its own place in the mix's pool.
    threads: usize,
}

impl Sink<()> for Prepare {
    type Out = Box<dyn Caller>;

    fn run<S>(self, svc: S) -> Box<dyn Caller>
    where
        S: Service<Request<()>, Response = Response<Body>, Error = Infallible>
            + Clone
            + Send
            + 'static,
        <S as Service<Request<()>>>::Future: Send + 'static,
    {
        if self.threads == 1 {
            return Box::new(Calls::new(self.mix, 0, svc));
        }
        let callers = (0..self.threads)
            .map(|t| Calls::new(self.mix, t * CLIENTS / self.threads, svc.clone()))
            .collect();
        Box::new(Threads(callers))
    }
}

/// A subject's stack, ready to be called in process.
trait Caller: Send {
    /// Calls the stack `calls` times; its CPU time per request, in nanoseconds.
    fn time(&mut self, calls: usize) -> f64;
    /// Calls it `calls` times, untimed.
    fn warm(&mut self, calls: usize);
    /// Clients in the mix's pool.
    fn clients(&self) -> usize;
}

/// A [`Caller`] over service `S`: the mix's pool of request headers and the next client.
struct Calls<S> {
    svc: S,
    headers: Vec<http::HeaderMap>,
    /// Each pooled map's `X-Forwarded-For` value (empty: none), for fresh maps.
    values: Vec<Vec<u8>>,
    fresh: bool,
    /// The next request's client, an index into the pool.
    next: usize,
}

impl<S> Calls<S>
where
    S: Service<Request<()>, Response = Response<Body>, Error = Infallible> + Send,
{
    /// A caller of `svc` with `mix`'s clients from `first` on, after two warm-up passes over
    /// every client: the figures are for keys the limiter holds, in the steady state of
    /// clients that come back. (Where keys expire between visits, tollgate's table forgets
    /// expired keys as it grows and re-inserts each under the shard lock at its first
    /// return, until it has learned that they come back: after one pass, most of a round's
    /// first 10,000 timed requests took that locked path.)
    fn new(mix: Mix, first: usize, svc: S) -> Self {
        let headers: Vec<http::HeaderMap> = match mix {
            Mix::OneClient => vec![http::HeaderMap::new()],
            Mix::ManyClients | Mix::ManyClientsLive => (1..=CLIENTS)
                .map(|i| {
                    let mut map = http::HeaderMap::new();
                    let ip = format!("10.{}.{}.{}", i >> 16, (i >> 8) & 0xff, i & 0xff);
                    map.insert("x-forwarded-for", ip.parse().expect("a header value"));
                    map
                })
                .collect(),
        };
        // `TOLLGATE_BENCH_HEADERS=fresh`: each request's `X-Forwarded-For` is built afresh
        // from its bytes (its name and value copied into new buffers, as hyper's parser
        // copies a non-standard name), so the limiter reads bytes that are in cache, as it
        // would reading a request just parsed. By default the map is cloned from the pool,
        // and the clone shares the pool's name and value bytes: 10,000 maps' worth, out of
        // cache by the time a request is read, a miss or two that only the limiters pay.
        let fresh = std::env::var("TOLLGATE_BENCH_HEADERS").is_ok_and(|v| v == "fresh");
        let values = headers
            .iter()
            .map(|map| {
                map.get("x-forwarded-for")
                    .map_or_else(Vec::new, |v| v.as_bytes().to_vec())
            })
            .collect();
        let clients = headers.len();
        let mut calls = Calls {
            svc,
            headers,
            values,
            fresh,
            next: first % clients,
        };
        calls.warm(2 * clients);
        calls
    }

    fn request_headers(&self, i: usize) -> http::HeaderMap {
        if !self.fresh || self.values[i].is_empty() {
            return self.headers[i].clone();
        }
        let mut map = http::HeaderMap::new();
        map.insert(
            http::HeaderName::from_bytes(b"x-forwarded-for").expect("a header name"),
            http::HeaderValue::from_bytes(&self.values[i]).expect("a header value"),
        );
        map
    }

    fn call(&mut self) {
        let peer = SocketAddr::from(([127, 0, 0, 1], 40_000));
        let mut req = Request::new(());
        *req.headers_mut() = self.request_headers(self.next);
        self.next = (self.next + 1) % self.headers.len();
        req.extensions_mut().insert(peer);
        req.extensions_mut().insert(ConnectInfo(peer));
        let mut cx = Context::from_waker(Waker::noop());
        assert!(
            self.svc.poll_ready(&mut cx).is_ready(),
            "every subject is ready"
        );
        let mut call = std::pin::pin!(self.svc.call(req));
        match call.as_mut().poll(&mut cx) {
            Poll::Ready(Ok(response)) => {
                assert_eq!(response.status(), 200, "the quota admits every request");
                std::hint::black_box(response);
            }
            Poll::Pending => panic!("every subject answers at once"),
        }
    }
}

impl<S> Caller for Calls<S>
where
    S: Service<Request<()>, Response = Response<Body>, Error = Infallible> + Send,
{
    fn time(&mut self, calls: usize) -> f64 {
        // The calling thread's CPU time, not the wall clock: time spent descheduled (by the
        // machine's other jobs) is not the stack's.
        let now = || (Instant::now(), this_thread_cpu_ns());
        let start = now();
        for _ in 0..calls {
            self.call();
        }
        let end = now();
        let ns = match (start.1, end.1) {
            (Some(a), Some(b)) => (b - a) as f64,
            _ => (end.0 - start.0).as_nanos() as f64,
        };
        ns / calls as f64
    }

    fn warm(&mut self, calls: usize) {
        for _ in 0..calls {
            self.call();
        }
    }

    fn clients(&self) -> usize {
        self.headers.len()
    }
}

/// Clones of one stack called on as many threads at once; the figure is their mean.
struct Threads<S>(Vec<Calls<S>>);

impl<S> Caller for Threads<S>
where
    S: Service<Request<()>, Response = Response<Body>, Error = Infallible> + Send,
{
    fn time(&mut self, calls: usize) -> f64 {
        let per_thread: Vec<f64> = std::thread::scope(|scope| {
            let running: Vec<_> = self
                .0
                .iter_mut()
                .map(|one| scope.spawn(move || one.time(calls)))
                .collect();
            running
                .into_iter()
                .map(|t| t.join().expect("a timing thread"))
                .collect()
        });
        per_thread.iter().sum::<f64>() / per_thread.len() as f64
    }

    fn warm(&mut self, calls: usize) {
        for one in &mut self.0 {
            one.warm(calls);
        }
    }

    fn clients(&self) -> usize {
        self.0[0].clients()
    }
}

/// Serves `svc` on `listener` until the process ends: a task per connection, the peer
/// address in each request's extensions.
fn serve<S>(listener: std::net::TcpListener, svc: S)
where
    S: Service<Request<Incoming>, Response = Response<Body>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    tokio::spawn(async move {
        let listener = TcpListener::from_std(listener).expect("listener");
        loop {
            let Ok((stream, peer)) = listener.accept().await else {
                continue;
            };
            let _ = stream.set_nodelay(true);
            let svc = ServiceBuilder::new()
                .map_request(move |mut req: Request<Incoming>| {
                    req.extensions_mut().insert(peer);
                    req.extensions_mut().insert(ConnectInfo(peer));
                    req
                })
                .service(svc.clone());
            tokio::spawn(async move {
                // A client closing its connection at the end of a window is no error here.
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), TowerToHyperService::new(svc))
                    .await;
            });
        }
    });
}

/// Every limiter's quota in `mix`.
fn quota(mix: Mix) -> Quota {
    match mix {
        Mix::ManyClientsLive => Quota::with_period(LIVE_INTERVAL),
        Mix::OneClient | Mix::ManyClients => Quota::per_second(RATE),
    }
    .allow_burst(BURST)
}

fn tollgate_layer<E: KeyExtractor>(mix: Mix, key: E, fields: bool) -> RateLimitLayer<E> {
    RateLimitLayer::builder(Limiter::keyed(quota(mix)), key)
        .headers(fields)
        .build()
}

/// Hands the subject `subject`, built for `mix` around `app`, to `sink`.
fn with_subject<B: Send + 'static, K: Sink<B>>(
    mix: Mix,
    app: App,
    subject: usize,
    sink: K,
) -> K::Out {
    match app {
        App::Bare => with_app::<B, K, false>(mix, subject, sink),
        App::Typed => with_app::<B, K, true>(mix, subject, sink),
    }
}

fn with_app<B: Send + 'static, K: Sink<B>, const TYPED: bool>(
    mix: Mix,
    subject: usize,
    sink: K,
) -> K::Out {
    let app = service_fn(hello::<B, TYPED>);
    let client_ip = || ClientIp::trusting(["127.0.0.0/8"]).expect("a valid CIDR");
    // The same quota as tollgate's: the interval, and bursts of BURST.
    let mut governor = GovernorConfigBuilder::default();
    governor.period(quota(mix).interval()).burst_size(BURST);
    match (subject, mix.forwarded()) {
        (0, _) => sink.run(app),
        (1, false) => sink.run(tollgate_layer(mix, PeerIp::new(), true).layer(app)),
        (1, true) => sink.run(tollgate_layer(mix, client_ip(), true).layer(app)),
        (2, false) => sink.run(tollgate_layer(mix, PeerIp::new(), false).layer(app)),
        (2, true) => sink.run(tollgate_layer(mix, client_ip(), false).layer(app)),
        (3, false) => {
            let config = governor.key_extractor(PeerIpKeyExtractor).finish();
            sink.run(GovernorLayer::new(config.expect("config")).layer(app))
        }
        (3, true) => {
            let config = governor.key_extractor(SmartIpKeyExtractor).finish();
            sink.run(GovernorLayer::new(config.expect("config")).layer(app))
        }
        // `use_headers()`: `x-ratelimit-limit` and `x-ratelimit-remaining` on every success.
        (4, false) => {
            let config = governor
                .key_extractor(PeerIpKeyExtractor)
                .use_headers()
                .finish();
            sink.run(GovernorLayer::new(config.expect("config")).layer(app))
        }
        (4, true) => {
            let config = governor
                .key_extractor(SmartIpKeyExtractor)
                .use_headers()
                .finish();
            sink.run(GovernorLayer::new(config.expect("config")).layer(app))
        }
        (5, forwarded) => {
            let key = if forwarded {
                IdealKey::Forwarded(client_ip())
            } else {
                IdealKey::Peer
            };
            let q = quota(mix);
            sink.run(IdealLayer::new(key, q.interval(), q.burst()).layer(app))
        }
        // The fields' own cost, what any limiter that writes them pays on top of its
        // decision: no limiter, and both IETF fields with fixed values from static bytes
        // (no allocation for the values, where a limiter must build `RateLimit` per request).
        (6, _) => sink.run(MapResponseLayer::new(fixed_fields).layer(app)),
        // The clock's share of the one-client gap: fields off, with tollgate's `TscClock`
        // (a time-stamp counter, as the quanta clock tower_governor reads) for `Instant`.
        (7, false) => sink.run(tsc_layer(mix, PeerIp::new()).layer(app)),
        (7, true) => sink.run(tsc_layer(mix, client_ip()).layer(app)),
        // Returning clients kept: fields off, expired keys held a second while there is room.
        (8, false) => sink.run(forgetting_layer(mix, PeerIp::new()).layer(app)),
        (8, true) => sink.run(forgetting_layer(mix, client_ip()).layer(app)),
        // What a server that knows about how many clients it has can pick.
        (9, false) => sink.run(tuned_layer(mix, PeerIp::new()).layer(app)),
        (9, true) => sink.run(tuned_layer(mix, client_ip()).layer(app)),
        #[cfg(feature = "metrics")]
        (10, false) => sink.run(recorded(|| tollgate_layer(mix, PeerIp::new(), true)).layer(app)),
        #[cfg(feature = "metrics")]
        (10, true) => sink.run(recorded(|| tollgate_layer(mix, client_ip(), true)).layer(app)),
        #[cfg(feature = "metrics")]
        (11, false) => sink.run(recorded(|| tollgate_layer(mix, PeerIp::new(), false)).layer(app)),
        #[cfg(feature = "metrics")]
        (11, true) => sink.run(recorded(|| tollgate_layer(mix, client_ip(), false)).layer(app)),
        _ => unreachable!("one arm per subject"),
    }
}

/// Subject 6's fields: the values tollgate-tower would write for this quota, fixed.
fn fixed_fields(mut response: Response<Body>) -> Response<Body> {
    let headers = response.headers_mut();
    headers.insert(
        HeaderName::from_static("ratelimit-policy"),
        HeaderValue::from_static("\"default\";q=1000000;w=1"),
    );
    headers.insert(
        HeaderName::from_static("ratelimit"),
        HeaderValue::from_static("\"default\";r=999999;t=1"),
    );
    response
}

/// Subject 7: fields off, on tollgate's [`TscClock`](tollgate::TscClock).
fn tsc_layer<E: KeyExtractor>(mix: Mix, key: E) -> RateLimitLayer<E> {
    let limiter = Limiter::builder(quota(mix))
        .clock(tollgate::TscClock::new())
        .build();
    RateLimitLayer::builder(limiter, key).headers(false).build()
}

/// Subject 8: fields off, forgetting expired keys at once
/// ([`keep_expired`](tollgate::LimiterBuilder::keep_expired)`(0)`).
fn forgetting_layer<E: KeyExtractor>(mix: Mix, key: E) -> RateLimitLayer<E> {
    let limiter = Limiter::builder(quota(mix))
        .keep_expired(Duration::ZERO)
        .build();
    RateLimitLayer::builder(limiter, key).headers(false).build()
}

/// Subject 9: fields off, on a limiter presized for the many-client mixes' clients and
/// reading tollgate's [`TscClock`](tollgate::TscClock).
fn tuned_layer<E: KeyExtractor>(mix: Mix, key: E) -> RateLimitLayer<E> {
    let limiter = Limiter::builder(quota(mix))
        .presize(CLIENTS)
        .clock(tollgate::TscClock::new())
        .build();
    RateLimitLayer::builder(limiter, key).headers(false).build()
}

/// This thread's CPU time so far, in nanoseconds, from its CPU-time clock: exact, where
/// `/proc/.../schedstat` of the running thread is only brought up to date at each
/// scheduler tick (4 ms here: 80 ns per request over 50,000 requests).
fn this_thread_cpu_ns() -> Option<u64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable `timespec`, and `CLOCK_THREAD_CPUTIME_ID` is a
    // clock every Linux (and POSIX) system has.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    (rc == 0).then(|| ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

/// This thread's id, from `/proc/thread-self` (`PID/task/TID`).
fn thread_id() -> Option<String> {
    let link = std::fs::read_link("/proc/thread-self").ok()?;
    Some(link.file_name()?.to_string_lossy().into_owned())
}

/// CPU time of thread `tid` of this process so far, in nanoseconds.
fn thread_cpu_ns(tid: &str) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).ok()?;
    stat.split_whitespace().next()?.parse().ok()
}

/// Starts the server thread: one current-thread runtime serving every (mix, subject) on
/// its own listener. Returns the addresses, indexed `[mix][subject]`, and the thread's id.
fn start_server(mixes: &[Mix]) -> (Vec<Vec<SocketAddr>>, Option<String>) {
    let mut listeners = Vec::new();
    let mut addrs = Vec::new();
    for &mix in mixes {
        let mut row = Vec::new();
        for subject in 0..SUBJECTS.len() {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
            listener.set_nonblocking(true).expect("nonblocking");
            row.push(listener.local_addr().expect("local address"));
            listeners.push((mix, subject, listener));
        }
        addrs.push(row);
    }
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("server".into())
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("server runtime");
            runtime.block_on(async move {
                for (mix, subject, listener) in listeners {
                    with_subject(mix, App::Bare, subject, Serve(listener));
                }
                tx.send(thread_id()).expect("main thread waits");
                std::future::pending::<()>().await;
            });
        })
        .expect("server thread");
    let tid = rx.recv().expect("server thread started");
    (addrs, tid)
}

async fn write_all(stream: &TcpStream, mut buf: &[u8]) -> io::Result<()> {
    while !buf.is_empty() {
        match stream.try_write(buf) {
            Ok(n) => buf = &buf[n..],
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => stream.writable().await?,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The whole response's length once its head is in `buf`, from its `content-length`.
fn response_len(buf: &[u8]) -> io::Result<Option<usize>> {
    let Some(head) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
        return Ok(None);
    };
    let text = std::str::from_utf8(&buf[..head])
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "non-UTF-8 response head"))?;
    let length = text
        .split("\r\n")
        .skip(1)
        .filter_map(|line| line.split_once(':'))
        .find(|(name, _)| name.trim().eq_ignore_ascii_case("content-length"))
        .and_then(|(_, value)| value.trim().parse::<usize>().ok())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no content-length"))?;
    Ok(Some(head + 4 + length))
}

/// Counters shared by one measurement's connections.
#[derive(Default)]
struct Shared {
    stop: AtomicBool,
    done: AtomicU64,
    not_ok: AtomicU64,
}

/// One keep-alive connection: a request, its whole response, the next, until `stop`.
async fn drive(
    addr: SocketAddr,
    requests: Arc<Vec<Vec<u8>>>,
    first: usize,
    shared: Arc<Shared>,
) -> io::Result<()> {
    let stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let mut buf = vec![0u8; 4096];
    let mut next = first;
    // ordering: `stop` and the counters carry no other data; the main task reads the
    // counters after joining (which synchronizes) or as a running estimate.
    while !shared.stop.load(Ordering::Relaxed) {
        write_all(&stream, &requests[next]).await?;
        next = (next + 1) % requests.len();
        let mut filled = 0;
        loop {
            stream.readable().await?;
            match stream.try_read(&mut buf[filled..]) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => filled += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e),
            }
            if let Some(len) = response_len(&buf[..filled])? {
                if filled >= len {
                    break;
                }
                if len > buf.len() {
                    buf.resize(len, 0);
                }
            } else if filled == buf.len() {
                buf.resize(2 * buf.len(), 0);
            }
        }
        if !buf.starts_with(b"HTTP/1.1 200 ") {
            shared.not_ok.fetch_add(1, Ordering::Relaxed); // ordering: a counter
        }
        shared.done.fetch_add(1, Ordering::Relaxed); // ordering: a counter
    }
    Ok(())
}

/// One measurement of one subject.
struct Sample {
    rps: f64,
    /// Server thread CPU nanoseconds per request (NaN if unreadable).
    cpu_ns: f64,
    /// Share of one core the server thread had in the window (NaN if unreadable).
    core_share: f64,
    not_ok: u64,
}

async fn measure(
    addr: SocketAddr,
    requests: &Arc<Vec<Vec<u8>>>,
    size: &Size,
    server: Option<&str>,
) -> Sample {
    let shared = Arc::new(Shared::default());
    let stride = requests.len() / size.connections;
    let tasks: Vec<_> = (0..size.connections)
        .map(|c| {
            let first = (c * stride) % requests.len();
            let (requests, shared) = (Arc::clone(requests), Arc::clone(&shared));
            tokio::spawn(drive(addr, requests, first, shared))
        })
        .collect();
    let cpu = || server.and_then(thread_cpu_ns);
    tokio::time::sleep(size.warmup).await;
    // ordering: counters (see `drive`).
    let (t0, done0, cpu0) = (Instant::now(), shared.done.load(Ordering::Relaxed), cpu());
    tokio::time::sleep(size.window).await;
    let (t1, done1, cpu1) = (Instant::now(), shared.done.load(Ordering::Relaxed), cpu());
    shared.stop.store(true, Ordering::Relaxed); // ordering: a flag; joined below
    for task in tasks {
        task.await
            .expect("connection task")
            .unwrap_or_else(|e| panic!("connection to {addr}: {e}"));
    }
    let requests = (done1 - done0) as f64;
    let secs = (t1 - t0).as_secs_f64();
    let (cpu_ns, core_share) = match (cpu0, cpu1) {
        (Some(a), Some(b)) => {
            let ns = (b - a) as f64;
            (ns / requests, ns / 1e9 / secs)
        }
        _ => (f64::NAN, f64::NAN),
    };
    Sample {
        rps: requests / secs,
        cpu_ns,
        core_share,
        not_ok: shared.not_ok.load(Ordering::Relaxed), // ordering: after the joins
    }
}

fn main() {
    ideal::self_check();
    let size = Size::from_env();
    let mixes = [Mix::OneClient, Mix::ManyClients, Mix::ManyClientsLive];
    let before = machine::loadavg();
    println!(
        "# tollgate-tower http bench ({} run, {}): {} CPUs ({}), {} rounds, {} keep-alive \
         connections, {} ms warm-up + {} ms window per measurement",
        size.mode,
        machine::today(),
        machine::cpus(),
        machine::cpu_model(),
        size.rounds,
        size.connections,
        size.warmup.as_millis(),
        size.window.as_millis(),
    );
    println!(
        "Server: one current-thread Tokio runtime on one thread; client: one current-thread \
         runtime on the main thread. Quota for every limiter: {RATE}/s per key, burst {BURST}; \
         in the keys-live mix one per {} s, burst {BURST}.",
        LIVE_INTERVAL.as_secs()
    );
    // Profiling one stack: `TOLLGATE_BENCH_PROFILE=mix,app,subject` (indices) calls only it,
    // `rounds` times `calls` requests, and prints its median time per request.
    if let Ok(which) = std::env::var("TOLLGATE_BENCH_PROFILE") {
        let i: Vec<usize> = which
            .split(',')
            .filter_map(|n| n.trim().parse().ok())
            .collect();
        let [m, a, subject] = i[..] else {
            panic!("TOLLGATE_BENCH_PROFILE=mix,app,subject, got {which:?}");
        };
        let (mix, app) = (mixes[m], [App::Bare, App::Typed][a]);
        let threads = std::env::var("TOLLGATE_BENCH_THREADS")
            .ok()
            .and_then(|n| n.parse().ok())
            .filter(|&n| n > 0)
            .unwrap_or(1);
        // One fresh stack per round, as in the full run: a single stack called
        // `rounds * calls` times in a row would exhaust the one-client mix's burst.
        let mut per_round: Vec<f64> = (0..size.rounds)
            .map(|_| with_subject(mix, app, subject, Prepare { mix, threads }).time(size.calls))
            .collect();
        per_round.sort_by(f64::total_cmp);
        let ns = per_round[per_round.len() / 2];
        println!(
            "{} / {} / {}: {ns:.1} ns per request",
            mix.name(),
            app.name(),
            SUBJECTS[subject]
        );
        return;
    }
    // In process first, on this thread, while nothing else of the bench runs.
    // in_process[mix][app][subject][round], nanoseconds per request.
    let apps = [App::Bare, App::Typed];
    let mut in_process: Vec<Vec<Vec<Vec<f64>>>> = mixes
        .iter()
        .map(|_| {
            apps.iter()
                .map(|_| SUBJECTS.iter().map(|_| Vec::new()).collect())
                .collect()
        })
        .collect();
    // Each round builds every subject's stack for a (mix, handler) and times them in turns
    // of `calls / TURNS` requests, so that a slow spell of the shared machine (they come
    // and go within a second) falls on all of them rather than on the one it meets. Before
    // each turn a stack takes an untimed pass over its clients (at most a turn's worth of
    // requests): the other stacks' turns have pushed its table out of the caches, as a
    // server's own state stays in them.
    let per_turn = size.calls.div_ceil(TURNS);
    for round in 0..size.rounds {
        for (m, &mix) in mixes.iter().enumerate() {
            for (a, &app) in apps.iter().enumerate() {
                let mut callers: Vec<Box<dyn Caller>> = (0..SUBJECTS.len())
                    .map(|subject| with_subject(mix, app, subject, Prepare { mix, threads: 1 }))
                    .collect();
                let mut ns = vec![0.0; SUBJECTS.len()];
                for turn in 0..TURNS {
                    for k in 0..SUBJECTS.len() {
                        let subject = (k + turn + round) % SUBJECTS.len();
                        let caller = &mut callers[subject];
                        caller.warm(caller.clients().min(per_turn));
                        ns[subject] += caller.time(per_turn) / TURNS as f64;
                    }
                }
                let line: Vec<String> = ns.iter().map(|ns| format!("{ns:.1}")).collect();
                eprintln!(
                    "round {round}, {} / {}: {}",
                    mix.name(),
                    app.name(),
                    line.join(" ")
                );
                for (subject, ns) in ns.into_iter().enumerate() {
                    in_process[m][a][subject].push(ns);
                }
            }
        }
    }

    // samples[mix][subject][round]
    let mut samples: Vec<Vec<Vec<Sample>>> = mixes
        .iter()
        .map(|_| SUBJECTS.iter().map(|_| Vec::new()).collect())
        .collect();
    if size.loopback {
        let (addrs, server_tid) = start_server(&mixes);
        let client = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("client runtime");
        let requests: Vec<Arc<Vec<Vec<u8>>>> =
            mixes.iter().map(|m| Arc::new(m.requests())).collect();
        client.block_on(async {
            for round in 0..size.rounds {
                for (m, _) in mixes.iter().enumerate() {
                    for k in 0..SUBJECTS.len() {
                        let subject = (k + round) % SUBJECTS.len();
                        let sample = measure(
                            addrs[m][subject],
                            &requests[m],
                            &size,
                            server_tid.as_deref(),
                        )
                        .await;
                        samples[m][subject].push(sample);
                    }
                }
            }
        });
    }

    let mut refused = 0;
    for (m, mix) in mixes.iter().enumerate() {
        if !size.loopback {
            break;
        }
        println!("\n## {} (handler: {})\n", mix.name(), App::Bare.name());
        fmt::table_header(&[
            "limiter",
            "requests/s",
            "% of no limiter",
            "server CPU per request",
            "server's share of a core",
            "not 200",
        ]);
        let base: Vec<f64> = samples[m][0].iter().map(|s| s.rps).collect();
        for (subject, name) in SUBJECTS.iter().enumerate() {
            let runs = &samples[m][subject];
            let rps: Vec<f64> = runs.iter().map(|s| s.rps).collect();
            let ratio: Vec<f64> = rps.iter().zip(&base).map(|(r, b)| 100.0 * r / b).collect();
            let cpu: Vec<f64> = runs.iter().map(|s| s.cpu_ns).collect();
            let share: Vec<f64> = runs.iter().map(|s| 100.0 * s.core_share).collect();
            let not_ok: u64 = runs.iter().map(|s| s.not_ok).sum();
            refused += not_ok;
            println!(
                "| {name} | {} | {} | {} | {} | {} |",
                fmt::plain_summary(Summary::of(&rps), ""),
                fmt::plain_summary(Summary::of(&ratio), "%"),
                fmt::time_summary(Summary::of(&cpu)),
                fmt::plain_summary(Summary::of(&share), "%"),
                not_ok
            );
        }
    }
    println!(
        "\n## In process: the same service stacks called directly, no sockets \
         ({} requests per subject per round)\n",
        size.calls
    );
    fmt::table_header(&[
        "clients",
        "handler",
        "limiter",
        "time per request",
        "limiter's cost",
        "minus tower_governor's time",
        "loopback server CPU + cost: % of no limiter",
    ]);
    for (m, mix) in mixes.iter().enumerate() {
        // The no-limiter server's CPU per request over loopback (the bare handler's), to
        // put the cost beside; without a loopback run, `TOLLGATE_BENCH_SERVER_NS`.
        let server_cpu = if size.loopback {
            Some(Summary::of(&samples[m][0].iter().map(|s| s.cpu_ns).collect::<Vec<_>>()).median)
        } else {
            size.server_ns
        };
        for (a, app) in apps.iter().enumerate() {
            // Both per round: each subject against the no-limiter stack and against
            // tower_governor, timed in turns with it.
            let base = &in_process[m][a][0];
            let governor = &in_process[m][a][TOWER_GOVERNOR];
            for (subject, name) in SUBJECTS.iter().enumerate() {
                let runs = &in_process[m][a][subject];
                let cost: Vec<f64> = runs.iter().zip(base).map(|(r, b)| r - b).collect();
                let beside: Vec<f64> = runs.iter().zip(governor).map(|(r, g)| r - g).collect();
                let predicted = match server_cpu {
                    Some(server) => {
                        let ratios: Vec<f64> =
                            cost.iter().map(|c| 100.0 * server / (server + c)).collect();
                        fmt::plain_summary(Summary::of(&ratios), "%")
                    }
                    None => "—".to_owned(),
                };
                println!(
                    "| {} | {} | {name} | {} | {} | {} | {predicted} |",
                    mix.name(),
                    app.name(),
                    fmt::time_summary(Summary::of(runs)),
                    fmt::time_summary(Summary::of(&cost)),
                    fmt::time_summary(Summary::of(&beside)),
                );
            }
        }
    }
    println!("\n{}", machine::loadavg_line(&before));
    assert_eq!(
        refused, 0,
        "some requests were not answered 200: the quota must admit everything for the \
         figures to be the limiters' overhead"
    );
}
