//! tollgate beside Pingora's own limiter (`pingora-limits`' `Rate`: a count-min sketch over
//! fixed windows, as in Pingora's `rate_limiter` example), in one run.
//!
//! * **Cost**: one Pingora proxy on loopback in front of one plain HTTP/1.1 upstream, both
//!   in this process, loaded by keep-alive clients sending `X-Forwarded-For` from behind a
//!   trusted 127.0.0.1: requests per second and CPU per request (the whole process's
//!   user + system time: client, proxy and upstream, so only the differences between rows
//!   are the limiters') with no limiter, with `Rate`, with tollgate (fields on and off),
//!   for one client and for 10,000. The quota is set out of reach, so every request goes
//!   upstream and each row pays for one check.
//! * **Accuracy**: a quota of N per second per client, through the same kind of proxy in
//!   front of an upstream that records when each request arrived: the traffic shapes go as
//!   real HTTP requests (`X-Forwarded-For` rotated per request, from the trusted 127.0.0.1),
//!   paced by the client, one limiter at a time. Admissions are counted where they land, at
//!   the upstream (the most in any one-second window slides over their arrival instants);
//!   refusals are the 429s the client received. Shapes: 2N requests just before the
//!   sketch's first window edge and 2N just after; one client at 0.9N/s; 10,000 clients at
//!   0.5N/s each, sharing the sketch's cells (with N = 2 there: at N = 100 that shape is
//!   500,000 requests a second, past loopback; the sketch's over-count depends on keys per
//!   cell, not on N). Each row also gives how late the client sent its latest request, the
//!   pacing it kept.
//! * **Decision alone**: each limiter's check in process on one thread, as `request_filter`
//!   makes it from the request's headers (the cost the proxied rows cannot resolve).
//!
//! ```text
//! cargo bench -p tollgate-pingora --bench proxy            # about a minute
//! TOLLGATE_BENCH_QUICK=1 cargo bench -p tollgate-pingora --bench proxy   # smoke run
//! TOLLGATE_BENCH_ROUNDS=9 cargo bench -p tollgate-pingora --bench proxy   # 9 rounds a row (default 5)
//! ```

#[path = "../tests/common/mod.rs"]
mod common;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use pingora_core::apps::ServerApp;
use pingora_core::protocols::l4::listener::Listener;
use pingora_core::server::configuration::ServerConf;
use pingora_core::upstreams::peer::HttpPeer;
use pingora_http::ResponseHeader;
use pingora_limits::rate::Rate;
use pingora_proxy::{ProxyHttp, Session, http_proxy};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tollgate::Quota;
use tollgate_pingora::{Checked, ClientIp, Format, ProxyLimit};

/// The limiter a proxy row runs (one per proxy: the size of a variant does not matter).
#[allow(clippy::large_enum_variant)]
enum Limit {
    Off,
    /// Pingora's: refuse when the key's count in the current window exceeds `max`.
    Sketch {
        rate: Rate,
        max: isize,
    },
    Tollgate(ProxyLimit),
}

struct BenchProxy {
    limit: Limit,
    client_ip: ClientIp,
    upstream: SocketAddr,
}

#[async_trait]
impl ProxyHttp for BenchProxy {
    type CTX = Checked;

    fn new_ctx(&self) -> Checked {
        Checked::default()
    }

    async fn request_filter(
        &self,
        session: &mut Session,
        ctx: &mut Checked,
    ) -> pingora_core::Result<bool> {
        match &self.limit {
            Limit::Off => Ok(false),
            Limit::Tollgate(limit) => limit.request_filter(session, ctx).await,
            Limit::Sketch { rate, max } => {
                // The same key as tollgate's: the client behind the trusted proxy.
                let peer = session
                    .client_addr()
                    .and_then(|a| a.as_inet())
                    .map(|a| a.ip());
                let key =
                    peer.and_then(|p| self.client_ip.key_of(p, &session.req_header().headers).ok());
                let Some(key) = key else {
                    session.respond_error(400).await?;
                    return Ok(true);
                };
                if rate.observe(&key, 1) > *max {
                    let mut header = ResponseHeader::build(429, None)?;
                    header.insert_header("retry-after", "1")?;
                    header.set_content_length(0)?;
                    session
                        .write_response_header(Box::new(header), false)
                        .await?;
                    session
                        .write_response_body(Some(Bytes::new()), true)
                        .await?;
                    return Ok(true);
                }
                Ok(false)
            }
        }
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
        match &self.limit {
            Limit::Tollgate(limit) => limit.response_filter(response, ctx),
            _ => Ok(()),
        }
    }
}

/// Serves `proxy` on a loopback port until the runtime ends.
async fn serve(proxy: BenchProxy) -> SocketAddr {
    let conf = Arc::new(ServerConf::default());
    let app = Arc::new(http_proxy(&conf, proxy));
    let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = tcp.local_addr().unwrap();
    let listener = Listener::from(tcp);
    let (shutdown_tx, shutdown) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        let _keep = shutdown_tx;
        while let Ok(mut stream) = listener.accept().await {
            // As Pingora's own listener does: a response's head and body are two writes.
            stream.set_nodelay().unwrap();
            let app = app.clone();
            let shutdown = shutdown.clone();
            tokio::spawn(async move {
                let mut stream: Option<pingora_core::protocols::Stream> = Some(Box::new(stream));
                while let Some(s) = stream.take() {
                    stream = app.process_new(s, &shutdown).await;
                }
            });
        }
    });
    addr
}

/// The `i`th of the bench's client addresses (100.64.0.0/10, shared address space).
fn client(i: u32) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(Ipv4Addr::new(100, 64, 0, 0)) + i)
}

/// Keep-alive connections sending `GET /` one at a time for `secs`, as `clients` clients
/// (round robin over the requests); the requests answered, and of those the 429s.
async fn load(addr: SocketAddr, conns: usize, clients: u32, run: Duration) -> (u64, u64) {
    let done = Arc::new(AtomicU64::new(0));
    let refused = Arc::new(AtomicU64::new(0));
    let next = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + run;
    let mut tasks = Vec::new();
    for _ in 0..conns {
        let (done, refused, next) = (done.clone(), refused.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            let mut stream = TcpStream::connect(addr).await.unwrap();
            stream.set_nodelay(true).unwrap();
            let mut buf = Vec::with_capacity(4096);
            while Instant::now() < deadline {
                // ordering: a ticket counter; it publishes nothing.
                let i = (next.fetch_add(1, Ordering::Relaxed) % u64::from(clients)) as u32;
                let request = format!(
                    "GET / HTTP/1.1\r\nhost: b\r\nx-forwarded-for: {}\r\n\r\n",
                    client(i)
                );
                stream.write_all(request.as_bytes()).await.unwrap();
                let status = read_response(&mut stream, &mut buf).await;
                // ordering: totals read after every task is joined.
                done.fetch_add(1, Ordering::Relaxed);
                if status == 429 {
                    refused.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    (
        done.load(Ordering::Relaxed),
        refused.load(Ordering::Relaxed),
    )
}

/// Reads one response (its head, then `content-length` bytes); its status.
async fn read_response(stream: &mut TcpStream, buf: &mut Vec<u8>) -> u16 {
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let status = head[9..12].parse().unwrap();
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map_or(0, |v| v.trim().parse().unwrap());
            while buf.len() < end + 4 + length {
                let n = stream.read(&mut chunk).await.unwrap();
                assert!(n > 0, "the proxy closed the connection");
                buf.extend_from_slice(&chunk[..n]);
            }
            buf.drain(..end + 4 + length);
            return status;
        }
        let n = stream.read(&mut chunk).await.unwrap();
        assert!(n > 0, "the proxy closed the connection");
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// This process's CPU time so far (user + system).
fn cpu_time() -> Duration {
    // SAFETY: `getrusage` writes one `rusage` into the zeroed value it is given; RUSAGE_SELF
    // is a valid target.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

fn trusting_loopback() -> ClientIp {
    ClientIp::trusting(["127.0.0.1"]).unwrap()
}

/// A quota no row reaches: every request is checked and admitted.
fn out_of_reach() -> Quota {
    Quota::per_second(1_000_000_000)
}

fn cost_rows(quick: bool) {
    // Rounds alternate the rows, so that what else the machine does falls on all of them;
    // each row's figure is its median round.
    let (rounds, run) = if quick {
        (1, Duration::from_millis(300))
    } else {
        (5, Duration::from_secs(1))
    };
    let rounds = match std::env::var("TOLLGATE_BENCH_ROUNDS") {
        Err(_) => rounds,
        Ok(r) => r
            .parse()
            .ok()
            .filter(|&r: &usize| r > 0)
            .unwrap_or_else(|| {
                panic!("TOLLGATE_BENCH_ROUNDS={r:?}: expected a positive number of rounds")
            }),
    };
    let conns = 16;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (upstream, _) = common::upstream().await;
        println!(
            "cost: {conns} keep-alive connections; proxy, upstream and client in one process on 2 \
             worker threads; median of {rounds} rounds of {} s per row (CPU: min-max)",
            run.as_secs_f64()
        );
        type Row = (&'static str, fn() -> Limit);
        let rows: Vec<Row> = vec![
            ("none", || Limit::Off),
            ("pingora-limits Rate (1 s window)", || Limit::Sketch {
                rate: Rate::new(Duration::from_secs(1)),
                max: isize::MAX,
            }),
            ("tollgate, fields on", || {
                Limit::Tollgate(ProxyLimit::new(out_of_reach(), trusting_loopback()))
            }),
            ("tollgate, fields off", || {
                Limit::Tollgate(ProxyLimit::new(out_of_reach(), trusting_loopback()).fields(
                    Format {
                        ietf: false,
                        legacy: false,
                    },
                ))
            }),
        ];
        let mut cells = Vec::new();
        for clients in [1, 10_000] {
            for (name, make) in &rows {
                let addr = serve(BenchProxy {
                    limit: make(),
                    client_ip: trusting_loopback(),
                    upstream,
                })
                .await;
                // Warm up: connections to the upstream, the keys in the table.
                load(addr, conns, clients, run / 5).await;
                cells.push((*name, clients, addr, Vec::new()));
            }
        }
        for _ in 0..rounds {
            for (name, clients, addr, results) in &mut cells {
                let cpu = cpu_time();
                let start = Instant::now();
                let (done, refused) = load(*addr, conns, *clients, run).await;
                let wall = start.elapsed();
                let cpu = cpu_time() - cpu;
                assert_eq!(refused, 0, "{name}: the quota is out of reach");
                results.push((
                    done as f64 / wall.as_secs_f64(),
                    cpu.as_secs_f64() * 1e6 / done as f64,
                ));
            }
        }
        println!(
            "{:<34} {:>8} {:>12} {:>14} {:>12}",
            "limiter", "clients", "requests/s", "CPU µs/req", "CPU range"
        );
        for (name, clients, _, results) in &mut cells {
            let median = |mut v: Vec<f64>| {
                v.sort_by(f64::total_cmp);
                (v[v.len() / 2], v[0], v[v.len() - 1])
            };
            let (rps, _, _) = median(results.iter().map(|r| r.0).collect());
            let (cpu, lo, hi) = median(results.iter().map(|r| r.1).collect());
            println!(
                "{name:<34} {clients:>8} {rps:>12.0} {cpu:>14.1} {:>12}",
                format!("{lo:.1}-{hi:.1}")
            );
        }
    });
}

/// When each request reached the upstream (the instant its head was complete there).
type Arrivals = Arc<Mutex<Vec<Instant>>>;

/// A plain HTTP/1.1 upstream answering every request `200`, keeping connections alive, that
/// records when each request arrived: where the accuracy rows count admissions.
async fn recording_upstream() -> (SocketAddr, Arrivals) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let arrivals = Arrivals::default();
    let log = arrivals.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            stream.set_nodelay(true).unwrap();
            let log = log.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    // Requests without bodies: each ends at its blank line.
                    while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        log.lock().unwrap().push(Instant::now());
                        buf.drain(..end + 4);
                        let reply = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n";
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
    (addr, arrivals)
}

/// The most admissions in any window of `w` among sorted instants.
fn most_in_window(times: &[Instant], w: Duration) -> usize {
    let mut best = 0;
    let mut lo = 0;
    for hi in 0..times.len() {
        while times[hi] - times[lo] >= w {
            lo += 1;
        }
        best = best.max(hi - lo + 1);
    }
    best
}

/// A traffic shape: `total` requests over `conns` keep-alive connections, the `j`th from
/// client `j % clients`, due at `due(start, j)` where `start` is when the limiter was made
/// (the sketch's first window ends 1 s after it).
struct Shape {
    conns: usize,
    clients: u32,
    total: u64,
    due: Box<dyn Fn(Instant, u64) -> Instant + Send + Sync>,
}

/// What one limiter did with a shape, seen from outside the proxy.
struct Outcome {
    /// When each admitted request reached the upstream, sorted.
    admitted: Vec<Instant>,
    /// The 429s the client received.
    refused: u64,
    /// How late the client sent its latest request (the pacing it kept).
    lag: Duration,
}

/// Runs `shape` through a fresh proxy with `limit` in front of the recording upstream, the
/// client pacing each request to its due instant (at once when the connections fall behind).
async fn through_proxy(
    limit: Limit,
    start: Instant,
    upstream: SocketAddr,
    arrivals: &Arrivals,
    shape: Shape,
) -> Outcome {
    let addr = serve(BenchProxy {
        limit,
        client_ip: trusting_loopback(),
        upstream,
    })
    .await;
    // Warm up the proxy's pool of upstream connections, as a proxy under load has it, so that
    // the shape's first requests do not also open them; from clients outside the shape
    // (198.18.0.0/15, the benchmarking range), whose keys are not the shape's.
    let warm: Vec<_> = (0..shape.conns as u32)
        .map(|i| {
            let from = Ipv4Addr::from(u32::from(Ipv4Addr::new(198, 18, 0, 0)) + i).to_string();
            tokio::spawn(async move { common::get(addr, Some(&from)).await.status })
        })
        .collect();
    for w in warm {
        assert_eq!(w.await.unwrap(), 200);
    }
    // Shapes run one after another, each to its last response: what arrives now is this one's.
    arrivals.lock().unwrap().clear();
    let shape = Arc::new(shape);
    let next = Arc::new(AtomicU64::new(0));
    let refused = Arc::new(AtomicU64::new(0));
    let lag_ns = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..shape.conns {
        let (shape, next, refused, lag_ns) =
            (shape.clone(), next.clone(), refused.clone(), lag_ns.clone());
        tasks.push(tokio::spawn(async move {
            let mut stream = TcpStream::connect(addr).await.unwrap();
            stream.set_nodelay(true).unwrap();
            let mut buf = Vec::with_capacity(4096);
            loop {
                // ordering: a ticket counter; it publishes nothing.
                let j = next.fetch_add(1, Ordering::Relaxed);
                if j >= shape.total {
                    return;
                }
                let due = (shape.due)(start, j);
                tokio::time::sleep_until(due.into()).await;
                let late = Instant::now().saturating_duration_since(due);
                // ordering: read after every task is joined.
                lag_ns.fetch_max(late.as_nanos() as u64, Ordering::Relaxed);
                // A client per request, rotating: the forwarded address, not the connection.
                let request = format!(
                    "GET / HTTP/1.1\r\nhost: b\r\nx-forwarded-for: {}\r\n\r\n",
                    client((j % u64::from(shape.clients)) as u32)
                );
                stream.write_all(request.as_bytes()).await.unwrap();
                match read_response(&mut stream, &mut buf).await {
                    200 => {}
                    // ordering: read after every task is joined.
                    429 => _ = refused.fetch_add(1, Ordering::Relaxed),
                    other => panic!("the proxy answered {other}"),
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let mut admitted = std::mem::take(&mut *arrivals.lock().unwrap());
    admitted.sort();
    let refused = refused.load(Ordering::Relaxed);
    assert_eq!(
        admitted.len() as u64 + refused,
        shape.total,
        "every request either reached the upstream or was refused"
    );
    Outcome {
        admitted,
        refused,
        lag: Duration::from_nanos(lag_ns.load(Ordering::Relaxed)),
    }
}

/// `Rate` refusing past `quota` a window (`sketch`), or tollgate at `quota` per second,
/// with the instant it was made (made just before its shape runs: the shapes are timed from it).
fn limiter(sketch: bool, quota: u32) -> (Limit, Instant) {
    let limit = if sketch {
        Limit::Sketch {
            rate: Rate::new(Duration::from_secs(1)),
            max: quota as isize,
        }
    } else {
        Limit::Tollgate(ProxyLimit::new(
            Quota::per_second(quota),
            trusting_loopback(),
        ))
    };
    (limit, Instant::now())
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

fn accuracy_rows() {
    let n: u32 = 100;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (upstream, arrivals) = recording_upstream().await;
        println!();
        println!(
            "accuracy through the proxy, one limiter at a time in front of one recording \
             upstream: a quota of N per second per client (tollgate: burst b = N, T = 1/N s); \
             admissions counted at the upstream, refusals as the client's 429s"
        );
        println!(
            "{:<62} {:>10} {:>10} {:>12} {:>12}",
            "shape (N)", "sketch", "tollgate", "sketch lag", "tollgate lag"
        );

        // The burst: 2N from one client 50 ms before the sketch's first window ends, 2N 50 ms
        // after, each half as fast as 32 connections carry it.
        let mut burst = Vec::new();
        for sketch in [true, false] {
            let (limit, start) = limiter(sketch, n);
            let shape = Shape {
                conns: 32,
                clients: 1,
                total: 4 * u64::from(n),
                due: Box::new(move |start, j| {
                    let ms = if j < 2 * u64::from(n) { 950 } else { 1050 };
                    start + Duration::from_millis(ms)
                }),
            };
            burst.push(through_proxy(limit, start, upstream, &arrivals, shape).await);
        }
        let most = |o: &Outcome| most_in_window(&o.admitted, Duration::from_secs(1));
        println!(
            "{:<62} {:>10} {:>10} {:>12} {:>12}",
            format!("2N 50 ms each side of the window edge: most in any 1 s ({n})"),
            most(&burst[0]),
            most(&burst[1]),
            ms(burst[0].lag),
            ms(burst[1].lag)
        );
        // tollgate's bound over the span W its admissions actually took at the upstream.
        let t = &burst[1].admitted;
        let w = t[t.len() - 1] - t[0];
        println!(
            "{:<62} {:>10} {:>10}",
            format!(
                "  (bound: 2N; b + floor(W/T), W = {} at the upstream)",
                ms(w)
            ),
            2 * n,
            n + (w.as_secs_f64() * f64::from(n)) as u32
        );

        // Clients within their quota, paced evenly: any refusal is under-admission. 10,000
        // clients at 0.5N/s with N = 100 would be 500,000 requests a second, past what loopback
        // carries here; the sketch's over-count depends on keys per cell (about 10 here), not
        // on N, so that row runs N = 2.
        for (clients, quota, conns) in [(1u32, n, 4), (10_000, 2, 64)] {
            let per_sec = if clients == 1 {
                quota * 9 / 10
            } else {
                quota / 2
            };
            let secs = 2;
            let total = u64::from(clients) * u64::from(per_sec) * secs;
            let gap = Duration::from_secs(1) / (clients * per_sec);
            let mut row = Vec::new();
            for sketch in [true, false] {
                let (limit, start) = limiter(sketch, quota);
                let shape = Shape {
                    conns,
                    clients,
                    total,
                    due: Box::new(move |start, j| {
                        start + Duration::from_millis(100) + gap * j as u32
                    }),
                };
                row.push(through_proxy(limit, start, upstream, &arrivals, shape).await);
            }
            let who = |c: u32| match c {
                1 => "one client".to_owned(),
                c => format!("{c} clients, each"),
            };
            let pct = |o: &Outcome| format!("{:.1}%", 100.0 * o.refused as f64 / total as f64);
            println!(
                "{:<62} {:>10} {:>10} {:>12} {:>12}",
                format!(
                    "{} at {per_sec}/s for {secs} s: refused ({quota})",
                    who(clients)
                ),
                pct(&row[0]),
                pct(&row[1]),
                ms(row[0].lag),
                ms(row[1].lag)
            );
        }
    });
}

/// The decision alone, in process on one thread, as `request_filter` makes it from the
/// request's headers: nanoseconds per request, the quota out of reach.
fn decision_rows(quick: bool) {
    let calls: u32 = if quick { 200_000 } else { 3_000_000 };
    let peer = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let client_ip = trusting_loopback();
    println!();
    println!("decision in process ({calls} requests, one thread): ns per request");
    println!("{:<58} {:>10} {:>10}", "limiter", "1 client", "10,000");
    type Decide = Box<dyn Fn(&http::HeaderMap) -> bool>;
    let rows: Vec<(&str, Decide)> = vec![
        ("pingora-limits Rate: key, observe", {
            let rate = Rate::new(Duration::from_secs(1));
            let client_ip = client_ip.clone();
            let max = std::hint::black_box(isize::MAX);
            Box::new(move |h| rate.observe(&client_ip.key_of(peer, h).unwrap(), 1) <= max)
        }),
        (
            "no limiter: a response header built (as the last row does)",
            { Box::new(|_| ResponseHeader::build(200, None).is_ok()) },
        ),
        ("tollgate: key, check_at, fields prepared", {
            let limit = ProxyLimit::new(out_of_reach(), trusting_loopback());
            Box::new(move |h| limit.check(Some(peer), h).is_ok())
        }),
        ("tollgate: the same, fields written to the response", {
            let limit = ProxyLimit::new(out_of_reach(), trusting_loopback());
            Box::new(move |h| {
                let mut checked = limit.check(Some(peer), h).unwrap();
                let mut response = ResponseHeader::build(200, None).unwrap();
                limit.response_filter(&mut response, &mut checked).is_ok()
            })
        }),
    ];
    let headers: Vec<http::HeaderMap> = (0..10_000)
        .map(|i| {
            let mut h = http::HeaderMap::new();
            h.insert("x-forwarded-for", client(i).to_string().parse().unwrap());
            h
        })
        .collect();
    for (name, decide) in &rows {
        let mut cols = Vec::new();
        for clients in [1usize, 10_000] {
            let start = Instant::now();
            for i in 0..calls as usize {
                assert!(decide(&headers[i % clients]));
            }
            cols.push(start.elapsed().as_nanos() as f64 / f64::from(calls));
        }
        println!("{name:<58} {:>10.0} {:>10.0}", cols[0], cols[1]);
    }
}

fn main() {
    let quick = std::env::var_os("TOLLGATE_BENCH_QUICK").is_some();
    cost_rows(quick);
    decision_rows(quick);
    accuracy_rows();
}
