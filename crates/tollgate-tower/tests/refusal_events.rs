//! The `tracing` side behind a real hyper server: refusals are debug events sampled per
//! policy (one per second of the limiter's clock, with the count left out since), and
//! delay-mode waits are spans. In a binary of its own: it installs the process's
//! subscriber. Each test uses its own policy names and counts only their events, so the
//! tests can share the subscriber and run in parallel.

mod common;

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use http::StatusCode;
use tollgate::{Limiter, ManualClock, Quota};
use tollgate_tower::{Global, HeaderKey, PeerIp, RateLimitLayer};
use tracing::subscriber::Subscriber;
use tracing::{Event, Level, Metadata};

use crate::common::*;

/// One event or span: its level, name (a span's) and fields, as text.
#[derive(Debug, Clone)]
struct Seen {
    level: Level,
    span: Option<&'static str>,
    fields: BTreeMap<String, String>,
}

struct Fields(BTreeMap<String, String>);

impl tracing::field::Visit for Fields {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
}

/// Records every event and span of target `tollgate_tower`.
struct Recorder(&'static Mutex<Vec<Seen>>);

impl Subscriber for Recorder {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, span: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        if span.metadata().target() == "tollgate_tower" {
            let mut fields = Fields(BTreeMap::new());
            span.record(&mut fields);
            self.0.lock().unwrap().push(Seen {
                level: *span.metadata().level(),
                span: Some(span.metadata().name()),
                fields: fields.0,
            });
        }
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &Event<'_>) {
        if event.metadata().target() == "tollgate_tower" {
            let mut fields = Fields(BTreeMap::new());
            event.record(&mut fields);
            self.0.lock().unwrap().push(Seen {
                level: *event.metadata().level(),
                span: None,
                fields: fields.0,
            });
        }
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// What the subscriber has seen of `policy` (events, or spans named `span`).
fn seen(policy: &str, span: Option<&str>) -> Vec<Seen> {
    static SEEN: OnceLock<&'static Mutex<Vec<Seen>>> = OnceLock::new();
    let all = SEEN.get_or_init(|| {
        let all: &'static Mutex<Vec<Seen>> = Box::leak(Box::default());
        tracing::subscriber::set_global_default(Recorder(all)).unwrap();
        all
    });
    let quoted = format!("{policy:?}");
    all.lock()
        .unwrap()
        .iter()
        .filter(|s| s.span == span)
        .filter(|s| {
            s.fields
                .get("policy")
                .is_some_and(|p| *p == quoted || p == policy)
        })
        .cloned()
        .collect()
}

fn field<'a>(seen: &'a Seen, name: &str) -> &'a str {
    &seen.fields[name]
}

/// A flood of refusals is one event per second of the limiter's clock, and the next event
/// says how many were left out; no event names the client.
#[tokio::test]
async fn a_flood_of_refusals_is_one_event_a_second() {
    seen("flood", None); // the subscriber, before any request
    let (clock, limiter) = manual(Quota::per_minute(1));
    let layer = RateLimitLayer::builder(limiter, PeerIp::new())
        .policy_name("flood")
        .unwrap()
        .build();
    let addr = serve(layer.clone()).await;
    let mut conn = connect(addr).await;
    assert_eq!(get(&mut conn, &[]).await.0, StatusCode::OK);
    for _ in 0..50 {
        assert_eq!(get(&mut conn, &[]).await.0, StatusCode::TOO_MANY_REQUESTS);
    }
    let events = seen("flood", None);
    assert_eq!(events.len(), 1, "{events:?}");
    let first = &events[0];
    assert_eq!(first.level, Level::DEBUG);
    assert_eq!(
        (
            field(first, "status"),
            field(first, "suppressed"),
            field(first, "dry_run")
        ),
        ("429", "0", "false")
    );
    assert_eq!(field(first, "retry_after_s"), "60");
    // Its fields, and nothing that could carry a client's key or address.
    let names: Vec<&str> = first.fields.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "dry_run",
            "message",
            "policy",
            "reason",
            "retry_after_s",
            "status",
            "suppressed"
        ]
    );

    clock.advance(Duration::from_millis(999));
    assert_eq!(get(&mut conn, &[]).await.0, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(seen("flood", None).len(), 1);
    clock.advance(Duration::from_millis(1));
    assert_eq!(get(&mut conn, &[]).await.0, StatusCode::TOO_MANY_REQUESTS);
    let events = seen("flood", None);
    assert_eq!(events.len(), 2);
    assert_eq!(field(&events[1], "suppressed"), "50");
    assert_eq!(layer.counts().rejected, 52);
}

/// Each policy samples on its own: a stacked limit's refusals do not hide the layer's own,
/// and a dry-run layer's would-be refusals are events too, marked so.
#[tokio::test]
async fn each_policy_is_sampled_apart() {
    seen("own", None);
    // Per client (an `x-client` header), bursts of 1; a global limit, bursts of 2.
    let per_client = Limiter::builder(Quota::per_minute(1))
        .clock(ManualClock::new())
        .build();
    let global: Limiter<()> = Limiter::builder(Quota::per_minute(2))
        .clock(ManualClock::new())
        .build();
    let client = HeaderKey::new(http::HeaderName::from_static("x-client"));
    let layer = RateLimitLayer::builder(per_client, client)
        .policy_name("own")
        .unwrap()
        .stack("stacked", global, Global)
        .unwrap()
        .dry_run()
        .build();
    let addr = serve(layer.clone()).await;
    let mut conn = connect(addr).await;
    // a: both admit; a again: "own" would refuse; b: both admit (global's last cell);
    // c, d: "stacked" would refuse.
    for client in ["a", "a", "b", "c", "d"] {
        let header = [("x-client", client.as_bytes())];
        assert_eq!(get(&mut conn, &header).await.0, StatusCode::OK);
    }
    let (own, stacked) = (seen("own", None), seen("stacked", None));
    assert_eq!((own.len(), stacked.len()), (1, 1), "{own:?} {stacked:?}");
    assert_eq!(field(&own[0], "dry_run"), "true");
    assert_eq!(field(&stacked[0], "dry_run"), "true");
    assert_eq!(layer.counts().dry_run_refused, 3);
}

/// Each delay-mode request's wait is a debug span with its policy, cost and bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delay_mode_waits_are_spans() {
    seen("queue", Some("rate_limit_wait"));
    let clock = ManualClock::new();
    let limiter: Limiter<()> = Limiter::builder(Quota::per_second(1).allow_burst(1))
        .clock(clock.clone())
        .build();
    let layer = RateLimitLayer::builder(limiter.clone(), Global)
        .policy_name("queue")
        .unwrap()
        .delay(Duration::from_secs(5))
        .build();
    let addr = serve(layer.clone()).await;
    assert_eq!(get_once(addr, &[]).await.0, StatusCode::OK);
    let waiting = tokio::spawn(get_once(addr, &[]));
    // Queued: its reservation puts the key 2 s out (before that, a peek says 1 s).
    let mut polls = 0;
    while limiter.peek(&()).unwrap_err().retry_after() != Some(Duration::from_secs(2)) {
        polls += 1;
        assert!(polls < 2000, "the request never queued");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    clock.advance(Duration::from_secs(1));
    assert_eq!(waiting.await.unwrap().0, StatusCode::OK);
    let spans = seen("queue", Some("rate_limit_wait"));
    assert_eq!(spans.len(), 2, "{spans:?}");
    for span in &spans {
        assert_eq!(span.level, Level::DEBUG);
        assert_eq!((field(span, "cost"), field(span, "max_ms")), ("1", "5000"));
    }
    assert_eq!(layer.counts().delayed, 1);
}
