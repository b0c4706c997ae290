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
use tollgate_redis::{FaultPolicy, FleetLimiter, Gate, Source};

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
    let evals = cluster.calls("eval");
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
        cluster.calls("eval") > evals,
        "NOSCRIPT answered by EVAL with the text on the key's master"
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

/// One cell a day: nothing regenerates during a test, so counts are exact.
fn daily(burst: u32) -> Quota {
    Quota::with_period(Duration::from_secs(86_400)).allow_burst(burst)
}

/// Whether a refusal is Redis's (a wait of about a day's cell), not a fault policy's.
fn refused_by_redis(e: &tollgate::Error) -> bool {
    e.is_rate_limited()
        && e.retry_after()
            .is_some_and(|w| w > Duration::from_secs(3_600))
}

/// The cells `key` has left under `quota`, spending none.
async fn left(limiter: &FleetLimiter, key: &str, quota: Quota) -> u32 {
    let [ok] = limiter
        .check_all([Gate::new(key).n(0).quota(quota)])
        .await
        .unwrap();
    ok.remaining()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_killed_mid_run_costs_at_most_the_documented_failover_bound() {
    let mut cluster = RedisCluster::start();
    let burst = 6;
    // A per-call timeout shorter than the gap (node timeout plus election), so the gap shows
    // as faults and the policy answers; long enough for a healthy call on a loaded machine.
    let limiter = FleetLimiter::builder(daily(burst))
        .timeout(Duration::from_millis(300))
        .fault_policy(FaultPolicy::FailClosed {
            retry_after: Duration::from_millis(777),
        })
        .connect_cluster(cluster.client())
        .await
        .unwrap();
    let keys = keys_on_every_master(&cluster, &limiter, 30);
    let victim = cluster.master_of(&limiter.redis_key(&keys[0]));
    let on_victim: BTreeSet<String> = keys
        .iter()
        .filter(|k| cluster.master_of(&limiter.redis_key(k)) == victim)
        .cloned()
        .collect();
    let mut admitted: BTreeMap<String, u32> = BTreeMap::new();
    // Half of each burst before the kill.
    for _ in 0..burst / 2 {
        for k in &keys {
            limiter.check(k).await.unwrap();
            *admitted.entry(k.clone()).or_default() += 1;
        }
    }
    cluster.kill(victim);
    // Check every key round after round until the victim's keys are answered by a promoted
    // replica and every key has been refused by Redis (its burst spent there).
    let deadline = Instant::now() + cluster::SETTLE;
    let mut policy_answers = 0u32;
    let mut answered_after_failover = false;
    let mut spent_out: BTreeSet<String> = BTreeSet::new();
    while !(answered_after_failover && spent_out.len() == keys.len()) {
        assert!(
            Instant::now() < deadline,
            "no failover within {:?}: the victim's keys answered by Redis again: \
             {answered_after_failover}, keys spent out: {}/{}; {:?}",
            cluster::SETTLE,
            spent_out.len(),
            keys.len(),
            limiter.stats()
        );
        for k in &keys {
            match limiter.check(k).await {
                Ok(ok) => {
                    assert_eq!(ok.source(), Source::Redis, "{k}");
                    *admitted.entry(k.clone()).or_default() += 1;
                    answered_after_failover |= on_victim.contains(k);
                }
                Err(e) if refused_by_redis(&e) => {
                    spent_out.insert(k.clone());
                    answered_after_failover |= on_victim.contains(k);
                }
                Err(e) => {
                    assert_eq!(
                        e.retry_after(),
                        Some(Duration::from_millis(777)),
                        "{k}: {e}"
                    );
                    policy_answers += 1;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_ne!(
        cluster.master_of(&limiter.redis_key(&keys[0])),
        victim,
        "a replica took the victim's slots"
    );
    assert!(policy_answers > 0, "the fault policy answered in the gap");
    let s = limiter.stats();
    assert!(s.failed_closed > 0 && s.faults > 0, "{s:?}");
    for k in &keys {
        let a = admitted[k];
        // Never more than the burst on the masters that lived; on the victim's keys, at
        // most the documented failover cost on top: b + floor(lag / T) per key written in
        // the lag, and T is a day, so one burst.
        let bound = if on_victim.contains(k) {
            2 * burst
        } else {
            burst
        };
        assert!(a <= bound, "{k}: admitted {a} > {bound}");
        assert!(a >= burst / 2, "{k}: admitted {a}");
    }
    println!("policy answers in the gap: {policy_answers}; {s:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_migrated_mid_run_reaches_no_caller_as_an_error() {
    let cluster = RedisCluster::start();
    let burst = 20;
    // No fast path: every check goes to Redis, through the migration.
    let limiter = FleetLimiter::builder(daily(burst))
        .timeout(common::CALM_TIMEOUT)
        .local_cache(0)
        .connect_cluster(cluster.client())
        .await
        .unwrap();
    // Keys with one hash tag: one slot, all moving together.
    let singles: Vec<String> = (0..30).map(|i| format!("{{mig}}:k{i}")).collect();
    let pairs: Vec<(String, String)> = (0..10)
        .map(|i| (format!("{{mig}}:a{i}"), format!("{{mig}}:b{i}")))
        .collect();
    let slot = cluster.slot(&limiter.redis_key(&singles[0]));
    assert!(
        singles
            .iter()
            .all(|k| cluster.slot(&limiter.redis_key(k)) == slot)
    );
    let from = cluster.master_of_slot(slot);
    let to = *cluster.masters().iter().find(|&&m| m != from).unwrap();
    // Half the keys exist before the migration starts.
    for k in singles.iter().step_by(2) {
        limiter.check(k).await.unwrap();
    }
    let asks = cluster.calls("asking");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut tasks = Vec::new();
    for t in 0..2 {
        let (limiter, singles, pairs, stop) = (
            limiter.clone(),
            singles.clone(),
            pairs.clone(),
            stop.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut admitted: BTreeMap<String, u32> = BTreeMap::new();
            let mut rounds = 0;
            // Until the migration is done, and then a round more.
            loop {
                let last = stop.load(std::sync::atomic::Ordering::Acquire);
                for (i, k) in singles.iter().enumerate() {
                    match limiter.check(k).await {
                        Ok(ok) => {
                            assert_eq!(ok.source(), Source::Redis);
                            *admitted.entry(k.clone()).or_default() += 1;
                        }
                        Err(e) => assert!(refused_by_redis(&e), "task {t}, {k}: {e}"),
                    }
                    let (a, b) = &pairs[i % pairs.len()];
                    match limiter.check_all([Gate::new(a), Gate::new(b)]).await {
                        Ok(_) => *admitted.entry(a.clone()).or_default() += 1,
                        Err(r) => assert!(refused_by_redis(&r.error), "task {t}, {a}: {r}"),
                    }
                }
                rounds += 1;
                if last {
                    return (admitted, rounds);
                }
            }
        }));
    }
    let moved = {
        let cluster = &cluster;
        tokio::task::block_in_place(|| cluster.migrate_slot(slot, to))
    };
    stop.store(true, std::sync::atomic::Ordering::Release);
    let mut admitted: BTreeMap<String, u32> = BTreeMap::new();
    let mut rounds = Vec::new();
    for t in tasks {
        let (a, r) = t.await.unwrap();
        rounds.push(r);
        for (k, n) in a {
            *admitted.entry(k).or_default() += n;
        }
    }
    let s = limiter.stats();
    let asked = cluster.calls("asking") - asks;
    println!("moved {moved} keys; rounds {rounds:?}; ASKING {asked}; {s:?}");
    assert_eq!(cluster.master_of_slot(slot), to, "the slot moved");
    assert!(moved > 0, "keys moved with the slot");
    assert!(
        asked > 0,
        "calls met the slot mid-move (ASK), and followed it"
    );
    assert_eq!(s.faults, 0, "no call failed: {s:?}");
    // Exact counts through the move: each key its burst (once spent out), never more.
    for k in &singles {
        let a = admitted.get(k).copied().unwrap_or(0)
            + u32::from(singles.iter().step_by(2).any(|x| x == k));
        assert!(a <= burst, "{k}: admitted {a}");
        assert_eq!(
            burst - left(&limiter, k, daily(burst)).await,
            a,
            "{k}: Redis agrees"
        );
    }
    for (a, b) in &pairs {
        let n = admitted.get(a).copied().unwrap_or(0);
        assert_eq!(burst - left(&limiter, a, daily(burst)).await, n, "{a}");
        assert_eq!(
            burst - left(&limiter, b, daily(burst)).await,
            n,
            "{b}: both or neither"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_all_in_one_slot_is_one_script_and_across_slots_gives_back_exactly() {
    let cluster = RedisCluster::start();
    let limiter = node(&cluster, daily(1_000)).await;
    // One hash tag: one slot, one script per call (once the script is on the masters: the
    // first call's EVALSHA is answered NOSCRIPT, loaded and sent again).
    limiter.check_all([Gate::new("{t7}:warm")]).await.unwrap();
    let calls = cluster.calls("evalsha");
    let tagged = [
        Gate::new("{t7}:ip:1"),
        Gate::new("{t7}:token:a").quota(daily(3)),
        Gate::new("{t7}:tenant").quota(daily(2)),
    ];
    limiter.check_all(tagged).await.unwrap();
    limiter.check_all(tagged).await.unwrap();
    assert_eq!(cluster.calls("evalsha"), calls + 2, "one script per call");
    let refused = limiter.check_all(tagged).await.unwrap_err();
    assert_eq!(refused.index, 2);
    assert_eq!(left(&limiter, "{t7}:ip:1", daily(1_000)).await, 998);
    assert_eq!(left(&limiter, "{t7}:token:a", daily(3)).await, 1);

    // Across slots: IPs on every master before a global budget on one of them.
    let nodes = [
        node(&cluster, daily(1_000)).await,
        node(&cluster, daily(1_000)).await,
    ];
    let ips = keys_on_every_master(&cluster, &limiter, 12);
    let global = daily(25);
    assert!(ips.iter().all(
        |ip| cluster.slot(&limiter.redis_key(ip)) != cluster.slot(&limiter.redis_key("global"))
    ));
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
                    Err(r) => assert_eq!(r.index, 1, "{r}"),
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
    // Each IP spent its admitted calls, plus a cell per declined give-back: the bound.
    let declined: u64 = nodes.iter().map(|n| n.stats().refunds_declined).sum();
    let mut lost = 0;
    for (i, ip) in ips.iter().enumerate() {
        let spent = 1_000 - left(&limiter, ip, daily(1_000)).await;
        assert!(
            spent >= admitted[i],
            "{ip}: spent {spent} < admitted {}",
            admitted[i]
        );
        lost += u64::from(spent - admitted[i]);
    }
    assert_eq!(
        lost, declined,
        "every cell kept by a refused call is a declined give-back"
    );
    for n in &nodes {
        assert_eq!(n.stats().faults, 0);
    }
    println!("cells kept by refused calls (declined give-backs): {declined}");
}

/// Polls `limiter`'s stats until `done` holds, within [`cluster::SETTLE`].
async fn until_stats(
    limiter: &FleetLimiter,
    what: &str,
    done: impl Fn(&tollgate_redis::Stats) -> bool,
) -> tollgate_redis::Stats {
    let deadline = Instant::now() + cluster::SETTLE;
    loop {
        let s = limiter.stats();
        if done(&s) {
            return s;
        }
        assert!(Instant::now() < deadline, "{what}: {s:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_waits_presence_and_the_memory_policy_work_on_a_cluster() {
    let cluster = RedisCluster::start();
    // Leases: one round trip per 10 cells of a hot key.
    let leasing = FleetLimiter::builder(daily(100))
        .timeout(common::CALM_TIMEOUT)
        .lease(10, Duration::from_secs(60))
        .heartbeat(Duration::from_millis(50))
        .connect_cluster(cluster.client())
        .await
        .unwrap();
    for _ in 0..30 {
        assert_eq!(leasing.check("hot").await.unwrap().source(), Source::Redis);
    }
    let s = leasing.stats();
    assert_eq!((s.leased, s.spent_locally), (30, 27), "{s:?}");
    // Held leases go back to the key's master: it has its 100 cells but the 30 spent.
    assert_eq!(
        leasing.return_leases().await.unwrap(),
        0,
        "every leased cell was spent"
    );
    assert_eq!(left(&leasing, "hot", daily(100)).await, 70);

    // A wait reserves on the key's master, and a cancelled one gives its cell back there.
    let waiting = FleetLimiter::builder(Quota::per_second(1))
        .timeout(common::CALM_TIMEOUT)
        .connect_cluster(cluster.client())
        .await
        .unwrap();
    waiting.check("w").await.unwrap();
    let cancelled = tokio::time::timeout(Duration::from_millis(50), waiting.until_ready("w")).await;
    assert!(cancelled.is_err(), "the cell is 1 s off");
    let s = until_stats(&waiting, "the refund", |s| {
        s.refunded + s.refunds_declined > 0
    })
    .await;
    assert_eq!((s.reserved, s.refunded, s.refunds_declined), (1, 1, 0));
    let pttl: i64 = redis::cmd("PTTL")
        .arg(waiting.redis_key("w"))
        .query(&mut cluster.conn(cluster.master_of(&waiting.redis_key("w"))))
        .unwrap();
    assert!(pttl <= 1_001, "the reservation was given back: {pttl}");

    // Presence: the nodes count themselves in the `{fleet}` set on its master.
    until_stats(&leasing, "the fleet's count", |s| s.fleet_size >= 1).await;

    // CONFIG GET goes to a master of the cluster's choosing: each runs the default,
    // noeviction.
    assert_eq!(
        leasing.memory_policy().await.unwrap(),
        tollgate_redis::MemoryPolicy::NoEviction
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_master_opens_the_breaker_of_its_own_slots_only() {
    let mut cluster = RedisCluster::start();
    // A timeout shorter than the cluster takes to notice the death (its node timeout): the
    // two calls below fail before any replica can be promoted.
    let limiter = FleetLimiter::builder(daily(100))
        .timeout(Duration::from_millis(150))
        .circuit_breaker(2, Duration::from_secs(600))
        .fault_policy(FaultPolicy::FailClosed {
            retry_after: Duration::from_secs(1),
        })
        .connect_cluster(cluster.client())
        .await
        .unwrap();
    let keys = keys_on_every_master(&cluster, &limiter, 60);
    for k in &keys {
        limiter.check(k).await.unwrap(); // every master answers, the script is loaded
    }
    let slot_of = |k: &String| cluster.slot(&limiter.redis_key(k));
    let victim = cluster.master_of(&limiter.redis_key(&keys[0]));
    // A key on a live master whose range of 1,024 slots has none of the victim's.
    let live = keys
        .iter()
        .find(|k| {
            let range = slot_of(k) / 1_024;
            let (lo, hi) = (range * 1_024, range * 1_024 + 1_023);
            cluster.master_of_slot(lo) != victim && cluster.master_of_slot(hi) != victim
        })
        .expect("a key far from the victim's slots")
        .clone();
    cluster.kill(victim);
    // Two failures in a row open the victim's range (a few more calls if the cluster client
    // answers one with an error the breaker counts as an answer).
    for attempt in 0.. {
        assert!(limiter.check(&keys[0]).await.is_err(), "the victim's key");
        if limiter.stats().circuit_opened > 0 {
            break;
        }
        assert!(
            attempt < 20,
            "the breaker never opened: {:?}",
            limiter.stats()
        );
    }
    let s = limiter.stats();
    assert_eq!(s.circuit_opened, 1, "{s:?}");
    // The victim's range is short-circuited; the live master's is not (a single breaker
    // would short-circuit it too).
    assert!(limiter.check(&keys[0]).await.is_err());
    assert_eq!(limiter.stats().short_circuited, s.short_circuited + 1);
    let _ = limiter.check(&live).await; // answered by Redis, or late on a loaded machine
    assert_eq!(
        limiter.stats().short_circuited,
        s.short_circuited + 1,
        "{live} on a live master was not short-circuited"
    );
}

/// A master that hangs (SIGSTOP: its sockets stay open, nothing answers) is failed over by
/// the cluster, but the cluster client never learns it: the calls to it time out on
/// tollgate's timer, with no error or `MOVED` to make it read the slot map again. The
/// limiter replaces its cluster connection after timeouts in a row, and the new one finds
/// the promoted replica. Recovery within [`cluster::SETTLE`], a generous bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_master_s_keys_are_answered_by_its_promoted_replica() {
    let cluster = RedisCluster::start();
    let limiter = FleetLimiter::builder(Quota::per_second(100_000))
        .timeout(Duration::from_millis(300))
        .circuit_breaker(3, Duration::from_millis(400))
        .fault_policy(FaultPolicy::FailClosed {
            retry_after: Duration::from_millis(1),
        })
        .connect_cluster(cluster.client())
        .await
        .unwrap();
    let key = "hung";
    let answered =
        async || matches!(limiter.check(key).await, Ok(ok) if ok.source() == Source::Redis);
    let start = Instant::now();
    while !answered().await {
        assert!(start.elapsed() < cluster::SETTLE, "{:?}", limiter.stats());
    }
    let victim = cluster.master_of(&limiter.redis_key(key));
    cluster.pause(victim);
    assert!(!answered().await, "a paused master answered");
    let start = Instant::now();
    while !answered().await {
        assert!(
            start.elapsed() < cluster::SETTLE,
            "the key's slot never answered again: {:?}",
            limiter.stats()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let s = limiter.stats();
    assert!(s.reconnects >= 1 && s.timeouts >= 1, "{s:?}");
    cluster.resume(victim);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_all_gives_back_the_live_slots_cells_when_a_later_slot_faults() {
    let mut cluster = RedisCluster::start();
    // A timeout well inside the cluster's node timeout: the call on the dead master fails
    // before the cluster marks it failed (and answers CLUSTERDOWN everywhere).
    let limiter = FleetLimiter::builder(daily(10))
        .timeout(Duration::from_millis(150))
        .fault_policy(FaultPolicy::FailClosed {
            retry_after: Duration::from_secs(1),
        })
        .connect_cluster(cluster.client())
        .await
        .unwrap();
    let keys = keys_on_every_master(&cluster, &limiter, 30);
    let victim = cluster.master_of(&limiter.redis_key(&keys[0]));
    let live = keys
        .iter()
        .find(|k| cluster.master_of(&limiter.redis_key(k)) != victim)
        .unwrap()
        .clone();
    let live_master = cluster.master_of(&limiter.redis_key(&live));
    limiter.check(&keys[0]).await.unwrap(); // the script is on the masters, the map known
    cluster.kill(victim);
    let refused = limiter
        .check_all([Gate::new(&live), Gate::new(&keys[0])])
        .await
        .unwrap_err();
    assert_eq!(
        refused.index, 1,
        "the policy refused at the dead master's gate: {refused}"
    );
    let s = limiter.stats();
    assert_eq!((s.failed_closed, s.refunds_declined), (1, 0), "{s:?}");
    // The live key's cell was given back: its key is gone again (it held no state before).
    let exists: bool = redis::cmd("EXISTS")
        .arg(limiter.redis_key(&live))
        .query(&mut cluster.conn(live_master))
        .unwrap();
    assert!(!exists, "{live}'s cell was given back");
}
