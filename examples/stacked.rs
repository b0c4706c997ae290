//! An API gateway's admission path, in a few hundred simulated requests: three stacked limits
//! (per client IP, per API token with a quota that depends on the token's tier, and a global
//! budget), `peek` for the headers of a request that is not admitted, and `undo` when the
//! upstream turns a request away before doing any work.
//!
//! Checked one after another, a request refused by the global budget would still spend the
//! client's own cells; with `check_all` it spends nothing, which the last column shows.
//!
//! ```text
//! cargo run --example stacked
//! ```

use std::time::Duration;

use tollgate::{DirectLimiter, Limiter, ManualClock, Quota};

/// A client: its IP, its token, and whether the token is on the paid tier.
struct Client {
    ip: [u8; 4],
    token: &'static str,
    paid: bool,
}

const CLIENTS: [Client; 3] = [
    Client {
        ip: [198, 51, 100, 7],
        token: "free-alice",
        paid: false,
    },
    Client {
        ip: [198, 51, 100, 8],
        token: "paid-bob",
        paid: true,
    },
    Client {
        ip: [198, 51, 100, 9],
        token: "paid-carol",
        paid: true,
    },
];

/// What one client saw in a run.
#[derive(Default, Clone, Copy)]
struct Seen {
    admitted: u32,
    /// Refusals by each limit: per-IP, per-token, global.
    refused: [u32; 3],
    undone: u32,
}

/// Runs 2 s of simulated traffic through the three limits: with `check_all`, or checked one
/// after another, as a gateway without stacked checks would.
fn run(stacked: bool) -> [Seen; CLIENTS.len()] {
    // Simulated time: the run is deterministic and instant.
    let clock = ManualClock::new();
    let per_ip = Limiter::builder(Quota::per_second(20))
        .clock(clock.clone())
        .build();
    let per_token = Limiter::builder(Quota::per_second(2))
        .clock(clock.clone())
        .build();
    let global = DirectLimiter::with_clock(Quota::per_second(15), clock.clone());
    let (free, paid) = (Quota::per_second(2), Quota::per_second(15));

    let mut seen = [Seen::default(); CLIENTS.len()];
    for tick in 0..200u32 {
        clock.advance(Duration::from_millis(10));
        for (i, c) in CLIENTS.iter().enumerate() {
            // Alice and bob send 10 requests a second, carol 50.
            let every = if c.token == "paid-carol" { 2 } else { 10 };
            if tick % every != 0 {
                continue;
            }
            let ip = std::net::IpAddr::from(c.ip);
            let tier = if c.paid { paid } else { free };
            let verdict = if stacked {
                let gates = [
                    per_ip.gate(&ip),
                    per_token.gate(c.token).quota(tier),
                    global.gate(),
                ];
                tollgate::check_all(gates)
                    .map(|[_, token, _]| token)
                    .map_err(|refused| refused.index)
            } else {
                per_ip
                    .check(&ip)
                    .map_err(|_| 0)
                    .and_then(|_| per_token.check_with(c.token, tier).map_err(|_| 1))
                    .and_then(|token| global.check().map(|_| token).map_err(|_| 2))
            };
            match verdict {
                Ok(token) => {
                    seen[i].admitted += 1;
                    // One admission in five finds the upstream down before any work is done:
                    // the client should not pay for that request.
                    if seen[i].admitted % 5 == 0 && per_token.undo(c.token, token) {
                        seen[i].undone += 1;
                    }
                }
                Err(index) => {
                    seen[i].refused[index] += 1;
                    // The 429's headers for the client's own limit, consuming nothing.
                    let _headers = per_token.peek_with(c.token, tier);
                }
            }
        }
    }
    seen
}

fn main() {
    let stacked = run(true);
    let one_by_one = run(false);
    println!("2 s of simulated traffic through three limits: per IP (20/s), per token (free 2/s,");
    println!("paid 15/s, each a quota of the call) and global (15/s).\n");
    println!(
        "{:<12} {:>27} {:>27}",
        "", "check_all", "checked one by one"
    );
    println!(
        "{:<12} {:>9} {:>17} {:>9} {:>17}",
        "token", "admitted", "refused ip/tok/gl", "admitted", "refused ip/tok/gl"
    );
    for (i, c) in CLIENTS.iter().enumerate() {
        let cols = |s: Seen| {
            let [ip, token, global] = s.refused;
            (s.admitted, format!("{ip}/{token}/{global}"))
        };
        let (a, r) = cols(stacked[i]);
        let (b, q) = cols(one_by_one[i]);
        println!("{:<12} {a:>9} {r:>17} {b:>9} {q:>17}", c.token);
    }
    let undone: u32 = stacked.iter().map(|s| s.undone).sum();
    println!(
        "\n{undone} admissions were given back to their token (undo) when the upstream was down."
    );
    let token_refusals = |run: &[Seen]| run.iter().map(|s| s.refused[1]).sum::<u32>();
    println!(
        "Per-token refusals: {} with check_all, {} one by one: checked one by one, a request",
        token_refusals(&stacked),
        token_refusals(&one_by_one)
    );
    println!("the global budget refused had already spent a cell of its client's token.");
}
