//! `FleetLimiter::check_all` on one real `redis-server` (see `common/`): all-or-nothing in
//! one script, a refusal costing the other limits nothing, per-gate quotas, a key twice,
//! the fast path, the fault policies, and exactness under concurrent calls from two nodes.

mod common;

use std::time::Duration;

use common::RedisServer;
use tollgate::Quota;
use tollgate_redis::{FaultPolicy, FleetLimiter, Gate, Source};

async fn node(server: &RedisServer, quota: Quota) -> FleetLimiter {
    FleetLimiter::builder(quota)
        .timeout(common::CALM_TIMEOUT)
        .connect(server.client())
        .await
        .unwrap()
}

/// The cells `key` has left under `quota`, spending none (a gate of 0 cells; a peek answers
/// for one more cell).
async fn left(limiter: &FleetLimiter, key: &str, quota: Quota) -> u32 {
    let [ok] = limiter
        .check_all([Gate::new(key).n(0).quota(quota)])
        .await
        .unwrap();
    ok.remaining()
}

/// One cell a day: nothing regenerates during a test, so counts are exact.
fn daily(burst: u32) -> Quota {
    Quota::with_period(Duration::from_secs(86_400)).allow_burst(burst)
}

#[tokio::test]
async fn a_refusal_by_the_global_limit_costs_the_ip_and_token_nothing() {
    let server = RedisServer::start();
    let limiter = node(&server, daily(5)).await;
    let (tier, global) = (daily(3), daily(2));
    let stack = |ip: &'static str| {
        [
            Gate::new(ip),
            Gate::new("token:t1").quota(tier),
            Gate::new("global").quota(global),
        ]
    };
    let [ip, token, g] = limiter.check_all(stack("ip:1")).await.unwrap();
    assert_eq!(
        (ip.remaining(), token.remaining(), g.remaining()),
        (4, 2, 1)
    );
    assert_eq!((ip.limit(), token.limit(), g.limit()), (5, 3, 2));
    assert_eq!(ip.source(), Source::Redis);
    limiter.check_all(stack("ip:2")).await.unwrap();
    // The global budget's last cell is in the fast path now: refused without a round trip.
    let trips = limiter.stats().round_trips;
    let refused = limiter.check_all(stack("ip:1")).await.unwrap_err();
    assert_eq!(refused.index, 2, "the global budget refused");
    assert!(refused.error.is_rate_limited());
    assert_eq!(limiter.stats().round_trips, trips);
    // A limiter without the fast path: the script refuses, in one call.
    let plain = FleetLimiter::builder(daily(5))
        .timeout(common::CALM_TIMEOUT)
        .local_cache(0)
        .connect(server.client())
        .await
        .unwrap();
    let calls = server.calls("evalsha");
    let refused = plain.check_all(stack("ip:1")).await.unwrap_err();
    assert_eq!(refused.index, 2);
    assert_eq!(
        server.calls("evalsha"),
        calls + 1,
        "one script, nothing to give back"
    );
    let s = limiter.stats();
    assert_eq!((s.admitted, s.local_refusals, s.faults), (2, 1, 0));
    // Nothing spent on the IP or the token by the refused calls.
    assert_eq!(left(&limiter, "ip:1", daily(5)).await, 4);
    assert_eq!(left(&limiter, "token:t1", tier).await, 1);
    assert_eq!(plain.stats().limited, 1);
}

#[tokio::test]
async fn a_first_gate_refusal_writes_no_key_and_a_later_call_is_refused_locally() {
    let server = RedisServer::start();
    let limiter = node(&server, daily(1)).await;
    limiter.check("ip:9").await.unwrap(); // its only cell
    let refused = limiter
        .check_all([Gate::new("ip:9"), Gate::new("token:x").quota(daily(10))])
        .await
        .unwrap_err();
    assert_eq!(refused.index, 0);
    let exists: bool = redis::cmd("EXISTS")
        .arg(limiter.redis_key("token:x"))
        .query(&mut server.conn())
        .unwrap();
    assert!(!exists, "the token's key was never written");
    // The refusal is in the fast path now: the next call never leaves the node.
    let trips = limiter.stats().round_trips;
    let refused = limiter
        .check_all([Gate::new("token:x").quota(daily(10)), Gate::new("ip:9")])
        .await
        .unwrap_err();
    assert_eq!(refused.index, 1);
    let s = limiter.stats();
    assert_eq!((s.round_trips, s.local_refusals), (trips, 2), "{s:?}");
}

#[tokio::test]
async fn a_key_twice_sees_its_own_first_cells_and_n_over_the_burst_is_refused_unsent() {
    let server = RedisServer::start();
    let limiter = node(&server, daily(3)).await;
    let [a, b] = limiter
        .check_all([Gate::new("k").n(2), Gate::new("k")])
        .await
        .unwrap();
    assert_eq!((a.remaining(), b.remaining()), (1, 0));
    let refused = limiter
        .check_all([Gate::new("other"), Gate::new("k")])
        .await
        .unwrap_err();
    assert_eq!(refused.index, 1);
    assert_eq!(left(&limiter, "other", daily(3)).await, 3);
    let trips = limiter.stats().round_trips;
    let refused = limiter
        .check_all([Gate::new("other"), Gate::new("big").n(4)])
        .await
        .unwrap_err();
    assert_eq!(refused.index, 1);
    assert!(refused.error.is_insufficient_capacity());
    assert_eq!(limiter.stats().round_trips, trips, "nothing sent");
    // n = 0 looks without spending.
    let [peeked] = limiter.check_all([Gate::new("other").n(0)]).await.unwrap();
    assert_eq!(peeked.remaining(), 3);
    let [fresh] = limiter.check_all([Gate::new("fresh").n(0)]).await.unwrap();
    assert_eq!(fresh.remaining(), 3);
    let exists: bool = redis::cmd("EXISTS")
        .arg(limiter.redis_key("fresh"))
        .query(&mut server.conn())
        .unwrap();
    assert!(!exists, "a look writes nothing");
}

/// A key twice whose second gate refuses on cells the first gate took in the same call:
/// Redis stores nothing, so the fast path must not learn the TAT the first gate moved (it
/// would refuse the key here for as long as those cells span, while Redis admits it).
#[tokio::test]
async fn a_key_twice_refused_on_its_own_first_cells_leaves_the_fast_path_unpoisoned() {
    let server = RedisServer::start();
    let limiter = node(&server, daily(5)).await;
    let refused = limiter
        .check_all([Gate::new("d").n(3), Gate::new("d").n(3)])
        .await
        .unwrap_err();
    assert_eq!(refused.index, 1);
    assert!(refused.error.is_rate_limited());
    let exists: bool = redis::cmd("EXISTS")
        .arg(limiter.redis_key("d"))
        .query(&mut server.conn())
        .unwrap();
    assert!(!exists, "a refused call writes nothing");
    // Redis holds nothing for `d`: 3 of its 5 cells are admitted, by Redis, on this node.
    let ok = limiter.check_n("d", 3).await.unwrap();
    assert_eq!((ok.remaining(), ok.source()), (2, Source::Redis));
    assert_eq!(limiter.stats().local_refusals, 0);
    // A key already spent is still remembered from what Redis holds: 2 left, so 3 more
    // plus 3 is refused, and then 3 alone is refused too (by Redis or the fast path).
    let refused = limiter
        .check_all([Gate::new("d").n(1), Gate::new("d").n(3)])
        .await
        .unwrap_err();
    assert_eq!(refused.index, 1);
    let [ok] = limiter.check_all([Gate::new("d").n(2)]).await.unwrap();
    assert_eq!(ok.remaining(), 0);
}

#[tokio::test]
async fn with_redis_away_the_fault_policy_decides_the_whole_call() {
    // Nothing listens on port 1.
    let client = || redis::Client::open("redis://127.0.0.1:1/").unwrap();
    let build = |policy| {
        FleetLimiter::builder(daily(5))
            .fault_policy(policy)
            .circuit_breaker(0, Duration::ZERO)
            .connect(client())
    };
    let open = build(FaultPolicy::FailOpen).await.unwrap();
    let [a, b] = open
        .check_all([Gate::new("ip"), Gate::new("global").quota(daily(1))])
        .await
        .unwrap();
    assert_eq!(
        (a.source(), b.source()),
        (Source::FailOpen, Source::FailOpen)
    );
    let closed = build(FaultPolicy::FailClosed {
        retry_after: Duration::from_secs(1),
    })
    .await
    .unwrap();
    let refused = closed
        .check_all([Gate::new("ip"), Gate::new("global")])
        .await
        .unwrap_err();
    assert_eq!(refused.index, 0);
    // The local fallback decides all the gates together, all-or-nothing, as the core does.
    let local = build(FaultPolicy::Local { nodes: 1 }).await.unwrap();
    let stack = |ip| [Gate::new(ip), Gate::new("global").quota(daily(1))];
    let [a, _] = local.check_all(stack("ip:1")).await.unwrap();
    assert_eq!((a.source(), a.remaining()), (Source::Local, 4));
    let refused = local.check_all(stack("ip:1")).await.unwrap_err();
    assert_eq!(refused.index, 1, "the local global budget is spent");
    // ...and cost the IP nothing in the fallback either.
    let [a, _] = local
        .check_all([Gate::new("ip:1"), Gate::new("g2").quota(daily(1))])
        .await
        .unwrap();
    assert_eq!(a.remaining(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_stacking_ips_on_a_global_budget_spend_both_or_neither() {
    let server = RedisServer::start();
    let nodes = [
        node(&server, daily(1_000)).await,
        node(&server, daily(1_000)).await,
    ];
    let global = daily(25);
    let ips: Vec<String> = (0..4).map(|i| format!("ip:{i}")).collect();
    let mut tasks = Vec::new();
    for (t, n) in nodes.iter().cycle().take(6).enumerate() {
        let (n, ips) = (n.clone(), ips.clone());
        tasks.push(tokio::spawn(async move {
            let mut admitted = vec![0u32; ips.len()];
            for round in 0..20 {
                let i = (t + round) % ips.len();
                match n
                    .check_all([Gate::new(&ips[i]), Gate::new("global").quota(global)])
                    .await
                {
                    Ok(_) => admitted[i] += 1,
                    Err(r) => {
                        assert_eq!(r.index, 1, "{r}");
                        assert!(r.error.is_rate_limited(), "{r}");
                    }
                }
            }
            admitted
        }));
    }
    let mut admitted = vec![0u32; ips.len()];
    for t in tasks {
        for (i, a) in t.await.unwrap().into_iter().enumerate() {
            admitted[i] += a;
        }
    }
    assert_eq!(
        admitted.iter().sum::<u32>(),
        25,
        "the global budget, exactly"
    );
    // One script per call: each IP spent exactly the calls admitted with it.
    for (i, ip) in ips.iter().enumerate() {
        let left = left(&nodes[0], ip, daily(1_000)).await;
        assert_eq!(1_000 - left, admitted[i], "{ip}");
    }
}
