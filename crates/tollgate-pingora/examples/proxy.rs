//! A Pingora proxy in front of one plain HTTP/1.1 upstream, limiting each client IP to N
//! requests per second in bursts of B:
//!
//! ```text
//! cargo run --release -p tollgate-pingora --example proxy -- \
//!     --listen 127.0.0.1:8080 --upstream 127.0.0.1:3000 --rate 10 --burst 20 \
//!     [--trusted-proxy 10.0.0.0/8]...
//! ```
//!
//! Behind a load balancer, pass its range with `--trusted-proxy` (repeatable): clients are
//! then keyed by the `X-Forwarded-For` walk from the right through the trusted addresses.
//! Without one, the peer address is the client. Admitted responses carry `RateLimit-Policy`
//! and `RateLimit`; refusals are `429` with `Retry-After` and a problem+json body.

use std::process::ExitCode;

use async_trait::async_trait;
use pingora_core::server::Server;
use pingora_core::upstreams::peer::HttpPeer;
use pingora_http::ResponseHeader;
use pingora_proxy::{ProxyHttp, Session, http_proxy_service};
use tollgate::Quota;
use tollgate_pingora::{Checked, Cidr, ClientIp, ProxyLimit};

/// The proxy: one limit, one upstream.
struct Proxy {
    limit: ProxyLimit,
    upstream: String,
}

#[async_trait]
impl ProxyHttp for Proxy {
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
        Ok(Box::new(HttpPeer::new(
            self.upstream.as_str(),
            false,
            String::new(),
        )))
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

/// The command line.
struct Args {
    listen: String,
    upstream: String,
    rate: u32,
    burst: u32,
    trusted: Vec<Cidr>,
}

const USAGE: &str = "usage: proxy --listen ADDR --upstream ADDR --rate N --burst B \
                     [--trusted-proxy CIDR]...";

fn parse_args(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
    let (mut listen, mut upstream, mut rate, mut burst) = (None, None, None, None);
    let mut trusted = Vec::new();
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--listen" => listen = Some(value()?),
            "--upstream" => upstream = Some(value()?),
            "--rate" => rate = Some(positive(&flag, &value()?)?),
            "--burst" => burst = Some(positive(&flag, &value()?)?),
            "--trusted-proxy" => {
                let v = value()?;
                trusted.push(
                    v.parse::<Cidr>()
                        .map_err(|e| format!("--trusted-proxy: {e}"))?,
                );
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    let missing = |name: &str| format!("{name} is required");
    let listen = listen.ok_or_else(|| missing("--listen"))?;
    let upstream = upstream.ok_or_else(|| missing("--upstream"))?;
    // Both addresses are checked here, where a mistake gets a message, not a panic inside
    // Pingora.
    for (name, addr) in [("--listen", &listen), ("--upstream", &upstream)] {
        addr.parse::<std::net::SocketAddr>()
            .map_err(|e| format!("{name} {addr:?}: {e} (an IP:port)"))?;
    }
    Ok(Args {
        listen,
        upstream,
        rate: rate.ok_or_else(|| missing("--rate"))?,
        burst: burst.ok_or_else(|| missing("--burst"))?,
        trusted,
    })
}

fn positive(flag: &str, value: &str) -> Result<u32, String> {
    match value.parse::<u32>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!("{flag} {value:?}: a whole number above 0")),
    }
}

fn main() -> ExitCode {
    let args = match parse_args(std::env::args().skip(1)) {
        Ok(args) => args,
        Err(e) => {
            eprintln!("{e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let quota = Quota::per_second(args.rate).allow_burst(args.burst);
    let limit = ProxyLimit::new(quota, ClientIp::from_cidrs(args.trusted));

    let mut server = match Server::new(None) {
        Ok(server) => server,
        Err(e) => {
            eprintln!("cannot start Pingora: {e}");
            return ExitCode::FAILURE;
        }
    };
    server.bootstrap();
    let proxy = Proxy {
        limit,
        upstream: args.upstream,
    };
    let mut service = http_proxy_service(&server.configuration, proxy);
    service.add_tcp(&args.listen);
    server.add_service(service);
    println!("proxy listening on {}", args.listen);
    server.run_forever()
}
