//! `fleet --cluster`: the fleet on a Redis Cluster of its own (three masters, a replica
//! each), nodes x keys x limits: every call checks the key's own limit and a global budget
//! together ([`FleetLimiter::check_all`]), and the master of some keys is killed a third of
//! the way in. Printed against the bounds: per key `b + floor(W / T)` (plus, on the killed
//! master's keys, the documented failover cost of one burst), the global budget's, and what
//! the fault policy admitted in the gap.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tollgate::Quota;
use tollgate_redis::{FleetLimiter, Gate, Source};

use crate::Args;
use crate::cluster_harness::RedisCluster;

#[derive(Default, Clone, Copy)]
struct Count {
    redis: u64,
    local: u64,
    refused: u64,
}

pub(crate) async fn run(a: &Args) {
    let mut cluster = RedisCluster::start();
    let per_key = Quota::per_second(a.rate).allow_burst(a.burst);
    // The global budget: half of what the keys could take together.
    let keys = 12usize;
    let global_rate = (a.rate * keys as u32 / 2).max(1);
    let global = Quota::per_second(global_rate).allow_burst(a.burst * 4);
    let (t_key, t_global) = (
        tollgate_redis::interval_micros(per_key),
        tollgate_redis::interval_micros(global),
    );
    let mut nodes = Vec::new();
    for _ in 0..a.nodes {
        let limiter = FleetLimiter::builder(per_key)
            .timeout(Duration::from_millis(100))
            .connect_cluster(cluster.client())
            .await
            .unwrap();
        nodes.push(limiter);
    }
    let names: Vec<String> = (0..keys).map(|i| format!("user:{i}")).collect();
    let master_of: Vec<usize> = names
        .iter()
        .map(|k| cluster.master_of(&nodes[0].redis_key(k)))
        .collect();
    let global_master = cluster.master_of(&nodes[0].redis_key("global"));
    // The victim: a master with user keys but not the global budget.
    let victim = *master_of
        .iter()
        .find(|&&m| m != global_master)
        .expect("a user key off the global budget's master");
    let witness = *cluster.masters().iter().find(|&&m| m != victim).unwrap();
    println!(
        "\n--cluster: {} nodes x {} tasks, {keys} keys at {}/s burst {} each, and a global \
         budget of {global_rate}/s burst {} checked with every key (check_all); 3 masters \
         with a replica each; the master of {} keys killed at {:.1} s",
        a.nodes,
        a.tasks,
        a.rate,
        a.burst,
        a.burst * 4,
        master_of.iter().filter(|&&m| m == victim).count(),
        a.seconds / 3.0
    );
    let counts = Arc::new(Mutex::new(vec![Count::default(); keys]));
    let global_redis = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let run = Duration::from_secs_f64(a.seconds);
    let t0 = cluster.time_us(witness);
    let deadline = Instant::now() + run;
    let mut handles = Vec::new();
    for (n, node) in nodes.iter().enumerate() {
        for t in 0..a.tasks {
            let (node, names, counts, global_redis) = (
                node.clone(),
                names.clone(),
                Arc::clone(&counts),
                Arc::clone(&global_redis),
            );
            handles.push(tokio::spawn(async move {
                let mut i = (n * 7 + t) % names.len();
                while Instant::now() < deadline {
                    let r = node
                        .check_all([Gate::new(&names[i]), Gate::new("global").quota(global)])
                        .await;
                    {
                        let mut c = counts.lock().unwrap();
                        match r {
                            Ok([k, g]) => {
                                if k.source() == Source::Redis {
                                    c[i].redis += 1;
                                } else {
                                    c[i].local += 1;
                                }
                                if g.source() == Source::Redis {
                                    global_redis.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                                }
                            }
                            Err(_) => c[i].refused += 1,
                        }
                    }
                    i = (i + 1) % names.len();
                    tokio::task::yield_now().await;
                }
            }));
        }
    }
    tokio::time::sleep(run / 3).await;
    cluster.kill(victim);
    let killed_at = Instant::now();
    for h in handles {
        h.await.unwrap();
    }
    let t1 = cluster.time_us(witness);
    let window = t1 - t0;
    let c = counts.lock().unwrap().clone();
    let mut per_master: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for (i, &m) in master_of.iter().enumerate() {
        per_master.entry(m).or_default().push(i);
    }
    println!(
        "  {:>6} {:>5} {:>9} {:>9} {:>9} {:>16}",
        "master", "keys", "by redis", "local", "refused", "bound per key"
    );
    let mut kept = true;
    for (m, idx) in &per_master {
        let victim_mark = if *m == victim { " (killed)" } else { "" };
        let (r, l, f) = idx.iter().fold((0, 0, 0), |(r, l, f), &i| {
            (r + c[i].redis, l + c[i].local, f + c[i].refused)
        });
        let cost = if *m == victim { u64::from(a.burst) } else { 0 };
        let bound = u64::from(a.burst) + window / t_key + cost;
        let worst = idx.iter().map(|&i| c[i].redis).max().unwrap_or(0);
        kept &= worst <= bound;
        println!(
            "  {m:>6} {:>5} {r:>9} {l:>9} {f:>9} {worst:>7} <= {bound}{victim_mark}",
            idx.len()
        );
    }
    let g = global_redis.load(std::sync::atomic::Ordering::Relaxed);
    let g_bound = u64::from(a.burst * 4) + window / t_global;
    kept &= g <= g_bound;
    println!(
        "  global budget: {g} admitted by Redis <= b + floor(W/T) = {g_bound} over W = {window} us"
    );
    let s = nodes
        .iter()
        .map(|n| n.stats())
        .fold((0, 0, 0, 0), |acc, s| {
            (
                acc.0 + s.round_trips,
                acc.1 + s.faults,
                acc.2 + s.fell_back,
                acc.3 + s.refunds_declined,
            )
        });
    println!(
        "  round trips {}, faults {}, decided by the local fallback {}, give-backs declined {} \
         (killed {:.2?} before the end)",
        s.0,
        s.1,
        s.2,
        s.3,
        deadline.saturating_duration_since(killed_at)
    );
    println!(
        "  per-key bound (Redis's admissions; the fallback's are its share's): {}",
        if kept { "kept" } else { "EXCEEDED" }
    );
    assert!(kept, "the cluster admitted more than the bounds allow");
}
