//! "Near the limit" behind a real hyper server: admissions that left their key less than
//! the near-limit share of its burst are counted, from the admission's own figures, and
//! only admissions that stand. Limiters run on a `ManualClock`: nothing refills mid-test.

mod common;

use std::time::Duration;

use http::StatusCode;
use tollgate::{Limiter, ManualClock, Quota};
use tollgate_tower::{Global, PeerIp, RateLimitLayer};

use crate::common::*;

/// The default ratio (0.8): with a burst of 10, the admissions that leave 1 and 0 are near.
#[tokio::test]
async fn the_default_counts_admissions_that_leave_less_than_a_fifth() {
    let (_clock, limiter) = manual(Quota::per_second(1).allow_burst(10));
    let layer = RateLimitLayer::builder(limiter, PeerIp::new()).build();
    let addr = serve(layer.clone()).await;
    let mut conn = connect(addr).await;
    for i in 0..10 {
        assert_eq!(get(&mut conn, &[]).await.0, StatusCode::OK);
        let near = layer.counts().near_limit;
        assert_eq!(near, if i < 8 { 0 } else { i - 7 }, "after admission {i}");
    }
    assert_eq!(get(&mut conn, &[]).await.0, StatusCode::TOO_MANY_REQUESTS);
    let counts = layer.counts();
    assert_eq!(
        (counts.admitted, counts.near_limit, counts.rejected),
        (10, 2, 1)
    );
}

/// The ratio is the layer's; 1.0 counts nothing, 0.0 every admission short of a full burst.
#[tokio::test]
async fn the_ratio_is_configurable() {
    for (ratio, near) in [(1.0, 0), (0.0, 4), (0.5, 2)] {
        let (_clock, limiter) = manual(Quota::per_second(1).allow_burst(4));
        let layer = RateLimitLayer::builder(limiter, PeerIp::new())
            .near_limit(ratio)
            .unwrap()
            .headers(false) // the lean path: no fields, no stacked limit
            .build();
        let addr = serve(layer.clone()).await;
        let mut conn = connect(addr).await;
        for _ in 0..4 {
            assert_eq!(get(&mut conn, &[]).await.0, StatusCode::OK);
        }
        assert_eq!(layer.counts().near_limit, near, "ratio {ratio}");
    }
    let builder = RateLimitLayer::builder(Limiter::keyed(Quota::per_second(1)), Global);
    assert_eq!(
        builder.near_limit(f64::NAN).unwrap_err().to_string(),
        "near-limit ratio NaN is not between 0 and 1"
    );
}

/// An admission a stacked limit refuses is given back, so it is not near anything; a
/// stacked limit's own pressure counts too, once the request stands.
#[tokio::test]
async fn only_admissions_that_stand_are_counted() {
    let (_clock, per_ip) = manual(Quota::per_second(1).allow_burst(2));
    let global: Limiter<()> = Limiter::builder(Quota::per_second(1).allow_burst(1))
        .clock(ManualClock::new())
        .build();
    let layer = RateLimitLayer::builder(per_ip, PeerIp::new())
        .stack("global", global, Global)
        .unwrap()
        .build();
    let addr = serve(layer.clone()).await;
    let mut conn = connect(addr).await;
    // Per IP leaves 1 of 2 (not near); global leaves 0 of 1 (near): one count.
    assert_eq!(get(&mut conn, &[]).await.0, StatusCode::OK);
    // Per IP would leave 0 of 2 (near), but global refuses: given back, not counted.
    assert_eq!(get(&mut conn, &[]).await.0, StatusCode::TOO_MANY_REQUESTS);
    let counts = layer.counts();
    assert_eq!(
        (counts.admitted, counts.rejected, counts.near_limit),
        (1, 1, 1)
    );
}

/// Delay mode's waits report no cells left: its admissions are not judged (documented).
#[tokio::test]
async fn delay_mode_is_not_counted() {
    let (_clock, limiter) = manual(Quota::per_second(1).allow_burst(2));
    let layer = RateLimitLayer::builder(limiter, PeerIp::new())
        .delay(Duration::from_millis(10))
        .build();
    let addr = serve(layer.clone()).await;
    let mut conn = connect(addr).await;
    for _ in 0..2 {
        assert_eq!(get(&mut conn, &[]).await.0, StatusCode::OK);
    }
    let counts = layer.counts();
    assert_eq!((counts.admitted, counts.near_limit), (2, 0));
}
