//! tollgate-redis on a real Redis Cluster (three masters, a replica each: `common/cluster.rs`):
//! exact counts over keys on every master, `NOSCRIPT` on every node, a master killed
//! mid-run, a slot migrated mid-run, and `check_all` across slots.

#[path = "common/cluster.rs"]
mod cluster;
mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use cluster::RedisCluster;
use tollgate::Quota;
use tollgate_redis::{FaultPolicy, FleetLimiter, Source};

async fn node(cluster: &RedisCluster, quota: Quota) -> FleetLimiter {
    FleetLimiter::builder(quota)
        .timeout(common::CALM_TIMEOUT)
        .connect_cluster(cluster.client())
        .await
        .unwrap()
}

/// `count` keys, with at least two on every master.
fn keys_on_every_master(
    cluster: &RedisCluster,
    limiter: &FleetLimiter,
    count: usize,
) -> Vec<String> {
    let keys: Vec<String> = (0..count).map(|i| format!("user:{i}")).collect();
    let mut per_master: BTreeMap<usize, usize> = BTreeMap::new();
    for k in &keys {
        *per_master
            .entry(cluster.master_of(&limiter.redis_key(k)))
            .or_default() += 1;
    }
    assert_eq!(per_master.len(), 3, "keys on masters {per_master:?}");
    assert!(per_master.values().all(|&n| n >= 2), "{per_master:?}");
    keys
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_admit_exactly_the_burst_of_every_key_on_every_master() {
    let cluster = RedisCluster::start();
    // A burst of 5 and one cell an hour: in the test's run, exactly 5 per key, whatever
    // the machine's speed.
    let quota = Quota::per_hour(5);
    let nodes = [node(&cluster, quota).await, node(&cluster, quota).await];
    let keys = keys_on_every_master(&cluster, &nodes[0], 30);
    let mut tasks = Vec::new();
    for (i, n) in nodes.iter().enumerate() {
        let (n, keys) = (n.clone(), keys.clone());
        tasks.push(tokio::spawn(async move {
            let mut admitted: BTreeMap<String, u64> = BTreeMap::new();
            for _ in 0..8 {
                for k in &keys {
                    match n.check(k).await {
                        Ok(ok) => {
                            assert_eq!(ok.source(), Source::Redis, "node {i}");
                            *admitted.entry(k.clone()).or_default() += 1;
                        }
                        Err(e) => assert!(e.is_rate_limited(), "node {i}: {e}"),
                    }
                }
            }
            admitted
        }));
    }
    let mut total: BTreeMap<String, u64> = BTreeMap::new();
    for t in tasks {
        for (k, n) in t.await.unwrap() {
            *total.entry(k).or_default() += n;
        }
    }
    for k in &keys {
        assert_eq!(total.get(k), Some(&5), "key {k}: {total:?}");
    }
    for n in &nodes {
        let s = n.stats();
        assert_eq!(s.faults, 0, "{s:?}");
        assert!(s.local_refusals > 0, "the fast path refused locally: {s:?}");
    }
    // Each key's state is one Redis key on its slot's master, in the single-server format.
    let k = &keys[0];
    let master = cluster.master_of(&nodes[0].redis_key(k));
    let exists: bool = redis::cmd("EXISTS")
        .arg(nodes[0].redis_key(k))
        .query(&mut cluster.conn(master))
        .unwrap();
    assert!(exists, "{k} lives on node {master}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_flushed_on_every_master_is_loaded_again_without_a_fault() {
    let cluster = RedisCluster::start();
    let limiter = FleetLimiter::builder(Quota::per_hour(100))
        .timeout(common::CALM_TIMEOUT)
        .local_cache(0)
        .connect_cluster(cluster.client())
        .await
        .unwrap();
    let keys = keys_on_every_master(&cluster, &limiter, 30);
    for k in &keys {
        limiter.check(k).await.unwrap();
    }
    let loads = cluster.calls("script|load");
    for m in cluster.masters() {
        let _: () = redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query(&mut cluster.conn(m))
            .unwrap();
    }
    for k in &keys {
        let ok = limiter.check(k).await.unwrap();
        assert_eq!(
            (ok.source(), ok.remaining()),
            (Source::Redis, 98),
            "key {k}"
        );
    }
    assert_eq!(limiter.stats().faults, 0, "{:?}", limiter.stats());
    assert!(
        cluster.calls("script|load") > loads,
        "NOSCRIPT answered by loading the script again"
    );
    // And a master that never saw it: flush one master only, then check its keys.
    let m = cluster.master_of(&limiter.redis_key(&keys[0]));
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query(&mut cluster.conn(m))
        .unwrap();
    let on_m: Vec<&String> = keys
        .iter()
        .filter(|k| cluster.master_of(&limiter.redis_key(k)) == m)
        .collect();
    for k in on_m {
        assert_eq!(limiter.check(k).await.unwrap().remaining(), 97, "key {k}");
    }
    assert_eq!(limiter.stats().faults, 0);
}
