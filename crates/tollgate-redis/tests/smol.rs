//! A smoke test under smol (`--features smol-comp`): no Tokio runtime anywhere, the
//! connection on smol's reactor, timeouts and waits on tollgate's timer, a refund on a
//! thread of its own; and the cluster connection with `check_all` on it.

mod common;

use std::time::Duration;

use common::RedisServer;
use tollgate::Quota;
use tollgate_redis::{FaultPolicy, FleetLimiter, Source};

#[test]
fn checks_waits_and_faults_run_under_smol() {
    let mut server = RedisServer::start();
    smol::block_on(async {
        let quota = Quota::per_second(4).allow_burst(2); // T = 250 ms
        let l = FleetLimiter::builder(quota)
            .timeout(common::CALM_TIMEOUT)
            .fault_policy(FaultPolicy::FailClosed {
                retry_after: Duration::from_secs(1),
            })
            .connect(server.client())
            .await
            .unwrap();
        assert_eq!(l.check("k").await.unwrap().source(), Source::Redis);
        assert_eq!(l.check("k").await.unwrap().remaining(), 0);
        assert!(l.check("k").await.unwrap_err().is_rate_limited());
        // A wait reserves and completes on tollgate's timer.
        let ok = l.until_ready("k").await.unwrap();
        assert_eq!(ok.source(), Source::Redis);
        // A cancelled wait is refunded from a thread of its own.
        // Dropped once its reservation has landed (a wait dropped while its reservation call
        // is in flight cannot refund; a loaded machine can make that call slow).
        let reserved = l.stats().reserved;
        let waiting = l.until_ready("k");
        let cancelled = smol::future::or(async { Some(waiting.await) }, async {
            while l.stats().reserved == reserved {
                smol::Timer::after(Duration::from_millis(1)).await;
            }
            None
        })
        .await;
        assert!(cancelled.is_none(), "the next cell is 250 ms off");
        let start = std::time::Instant::now();
        while l.stats().refunded + l.stats().refunds_declined == 0 {
            assert!(start.elapsed() < Duration::from_secs(5), "no refund");
            smol::Timer::after(Duration::from_millis(5)).await;
        }
        assert_eq!(l.stats().refunded, 1);
        assert_eq!(l.stats().faults, 0);
    });
    server.kill();
    smol::block_on(async {
        let l = FleetLimiter::builder(Quota::per_second(1))
            .timeout(Duration::from_millis(50))
            .fault_policy(FaultPolicy::FailClosed {
                retry_after: Duration::from_secs(1),
            })
            .connect(server.client())
            .await
            .unwrap();
        let err = l.check("k").await.unwrap_err();
        assert_eq!(err.retry_after(), Some(Duration::from_secs(1)));
        assert_eq!(l.stats().faults, 1);
    });
}

#[path = "common/cluster.rs"]
mod cluster;

#[test]
fn a_cluster_and_check_all_run_under_smol() {
    let cluster = cluster::RedisCluster::start();
    smol::block_on(async {
        let l = FleetLimiter::builder(Quota::per_hour(2))
            .timeout(common::CALM_TIMEOUT)
            .connect_cluster(cluster.client())
            .await
            .unwrap();
        for key in ["a", "b", "c", "d"] {
            assert_eq!(l.check(key).await.unwrap().source(), Source::Redis);
        }
        let gates = [
            tollgate_redis::Gate::new("a"),
            tollgate_redis::Gate::new("{t}x"),
        ];
        assert!(l.check_all(gates).await.is_ok());
        let refused = l.check_all(gates).await.unwrap_err();
        assert_eq!(refused.index, 0, "a's two cells are spent");
        assert_eq!(l.stats().faults, 0);
    });
}
