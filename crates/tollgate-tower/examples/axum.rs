//! An axum service with per-customer tiers and a per-IP limit, stacked.
//!
//! ```sh
//! cargo run -p tollgate-tower --features axum --example axum -- --listen 127.0.0.1:3000
//! curl -i http://127.0.0.1:3000/                          # anonymous: per-IP limit only
//! curl -i -H 'x-api-key: paid-42' http://127.0.0.1:3000/  # a paid customer: 20/s
//! curl -i -H 'x-api-key: paid-43' http://127.0.0.1:3000/  # no such customer: anonymous
//! ```
//!
//! * A request's `x-api-key` is looked up first ([`customer`], standing in for your
//!   authentication): a known key is limited per customer, at its tier's quota, which comes
//!   from the server's record (`quota_for_key`), never from the key's spelling, so sending
//!   `x-api-key: paid-anything` buys nothing. Paid customers get 20 per second, free ones 2.
//!   An unknown key is treated as no key.
//! * Every request is also limited per client IP to 10 per second (a stacked limit): a key
//!   cannot be shared by a botnet, and anonymous requests are limited too. A refusal by
//!   either limit costs the other nothing.
//! * A refusal says why in JSON (`{"error":"rate_limited","policy":"per-key","retry_after":1}`,
//!   `content-type: application/json`), beside the `Retry-After` and `RateLimit` fields
//!   ([`json_refusal`], the layer's refusal hook).
//!
//! `--serve-for SECONDS` stops it after that long (for smoke runs); it prints the layer's
//! counts when it stops. `--help` prints the usage.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::routing::get;
use http::header::CONTENT_TYPE;
use http::request::Parts;
use http::{HeaderValue, Response};
use tollgate::{Limiter, Quota};
use tollgate_tower::{MissingKey, PeerIp, RateLimitLayer, Refusal, RefusalReason};

const USAGE: &str = "usage: axum [--listen ADDR] [--serve-for SECONDS]";

/// A customer's tier, as the server's records have it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Tier {
    Free,
    Paid,
}

/// The customer a request authenticates as: the key source of the per-customer limit.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Customer {
    api_key: HeaderValue,
    tier: Tier,
}

/// Looks the request's API key up: a stand-in for your authentication (a database, a
/// signed token). Unknown keys are no key at all.
fn customer(parts: &Parts) -> Option<Customer> {
    let api_key = parts.headers.get("x-api-key")?;
    let tier = match api_key.as_bytes() {
        b"paid-42" => Tier::Paid,
        b"free-1" | b"free-2" => Tier::Free,
        _ => return None,
    };
    Some(Customer {
        api_key: api_key.clone(),
        tier,
    })
}

/// The answer to a refused request: why, by which policy and when to retry, as JSON, around
/// the status and fields the layer sets. Its body is axum's `Body`, the router's body type:
/// a hook that made another type would not compile.
fn json_refusal(refusal: Refusal) -> Response<Body> {
    let error = match refusal.reason() {
        RefusalReason::RateLimited => "rate_limited",
        RefusalReason::MissingKey => "missing_key",
        RefusalReason::Unavailable => "unavailable",
        RefusalReason::TooCostly => "too_costly",
        _ => "refused",
    };
    let body = serde_json::json!({
        "error": error,
        "policy": refusal.policy(),
        "retry_after": refusal.retry_after().map(|wait| wait.as_secs()),
    });
    let mut response = refusal.into_response(Body::from(body.to_string()));
    let json = HeaderValue::from_static("application/json");
    response.headers_mut().insert(CONTENT_TYPE, json);
    response
}

/// What the command line asks for.
enum Command {
    Serve {
        listen: SocketAddr,
        serve_for: Option<Duration>,
    },
    Help,
}

fn parse_args() -> Result<Command, String> {
    let mut listen = SocketAddr::from(([127, 0, 0, 1], 3000));
    let mut serve_for = None;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or(format!("{flag} needs a value\n{USAGE}"));
        match flag.as_str() {
            "--listen" => listen = value()?.parse().map_err(|e| format!("--listen: {e}"))?,
            "--serve-for" => {
                let secs: f64 = value()?.parse().map_err(|e| format!("--serve-for: {e}"))?;
                serve_for = Some(
                    Duration::try_from_secs_f64(secs).map_err(|e| format!("--serve-for: {e}"))?,
                );
            }
            "-h" | "--help" => return Ok(Command::Help),
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    Ok(Command::Serve { listen, serve_for })
}

#[tokio::main]
async fn main() -> ExitCode {
    let (listen, serve_for) = match parse_args() {
        Ok(Command::Serve { listen, serve_for }) => (listen, serve_for),
        Ok(Command::Help) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };

    let layer = RateLimitLayer::builder(Limiter::keyed(Quota::per_second(2)), customer)
        .policy_name("per-key")
        .expect("policy names are printable ASCII")
        // The quota follows the customer the key source found: the two cannot disagree.
        .quota_for_key(|customer: &Customer| match customer.tier {
            Tier::Paid => Quota::per_second(20),
            Tier::Free => Quota::per_second(2),
        })
        .on_missing_key(MissingKey::Allow) // anonymous: only the per-IP limit below
        .stack(
            "per-ip",
            Limiter::keyed(Quota::per_second(10)),
            PeerIp::new(),
        )
        .expect("policy names are printable ASCII, one a limit")
        .on_refusal(json_refusal)
        .build();

    let counted = layer.clone();
    let app = Router::new()
        .route("/", get(|| async { "hello\n" }))
        .layer(layer);

    let listener = match tokio::net::TcpListener::bind(listen).await {
        Ok(listener) => listener,
        Err(e) => {
            eprintln!("cannot listen on {listen}: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("listening on {}", listener.local_addr().unwrap());
    let server = axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    );
    let served = match serve_for {
        Some(d) => tokio::time::timeout(d, server).await.unwrap_or(Ok(())),
        None => server.await,
    };
    if let Err(e) = served {
        eprintln!("serve: {e}");
        return ExitCode::FAILURE;
    }
    let counts = counted.counts();
    println!(
        "stopped: {} admitted, {} refused, {} anonymous",
        counts.admitted, counts.rejected, counts.missing_key_allowed
    );
    ExitCode::SUCCESS
}
