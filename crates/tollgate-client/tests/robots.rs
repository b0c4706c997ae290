//! robots.txt `Crawl-delay` over a real socket: the crawler fetches a local host's
//! robots.txt through the polite layer, seeds the host's ceiling from it, and the host is
//! then paced at one request per delay, an announced policy above it included. On a
//! `ManualClock`: the pace is seen as the next request staying unsent until the clock
//! moves, never by timing it.

mod support;

use std::sync::atomic::Ordering;
use std::time::Duration;

use http::Request;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use support::script;
use tollgate::ManualClock;
use tollgate_client::{AdaptiveConfig, AdaptiveRate, PoliteLayer, RetryPolicy};
use tower::{Layer, ServiceExt};

const ROBOTS: &str = "\
# a site's robots.txt, with a group for another crawler and malformed lines
User-agent: otherbot
Crawl-delay: 60

User-agent: *
Disallow: /private
Crawl-delay: fast please
Crawl-delay: 5
";

#[tokio::test]
async fn a_crawl_delay_paces_the_host_at_one_request_per_delay() {
    // The pages announce 50/s: the site's crawl delay still wins.
    let (base, seen) = script::serve(|_, path| match path {
        "/robots.txt" => (200, vec![], ROBOTS.to_owned()),
        _ => (
            200,
            vec![("ratelimit-policy", "\"p\";q=50;w=1".to_owned())],
            "page\n".to_owned(),
        ),
    })
    .await;
    let clock = ManualClock::new();
    let rates = AdaptiveRate::with_clock(AdaptiveConfig::new(100.0), clock.clone());
    let layer = PoliteLayer::with_rates(rates).retry(RetryPolicy::never());
    let svc = layer.layer(Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>());
    let get = |path: &str| {
        let req = Request::get(format!("{base}{path}"))
            .body(Full::new(Bytes::new()))
            .unwrap();
        let svc = svc.clone();
        async move {
            let res = svc.oneshot(req).await.expect("the local host answers");
            let body = res.into_body().collect().await.unwrap().to_bytes();
            String::from_utf8(body.to_vec()).unwrap()
        }
    };
    let key = base.trim_start_matches("http://").to_owned();

    let robots = get("/robots.txt").await;
    let delay = layer.crawl_delay(&key, &robots, "TollgateBot/0.1 (+https://example.com)");
    assert_eq!(delay, Some(Duration::from_secs(5)));
    assert_eq!(layer.rates().rate(&key), 0.2);

    // The robots.txt fetch went at 0 with a turn of 100/s (10 ms): the next request still
    // keeps the crawl delay after it, and the ones after that 5 s apart.
    let first = tokio::spawn(get("/a"));
    clock.advance(Duration::from_millis(10));
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        seen.load(Ordering::SeqCst),
        1,
        "sent inside the crawl delay"
    );
    clock.advance(Duration::from_millis(4_990));
    let page = tokio::time::timeout(Duration::from_secs(30), first)
        .await
        .expect("sent after the crawl delay")
        .unwrap();
    assert_eq!(page, "page\n");
    let host = layer.host(&key).unwrap();
    assert_eq!(host.rate, 0.2, "{host:?}"); // the announced 50/s clamped under it
    assert!(host.announced);
    clock.advance(Duration::from_millis(4_900));
    let next = tokio::spawn(get("/b"));
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        seen.load(Ordering::SeqCst),
        2,
        "sent inside the crawl delay"
    );
    assert!(!next.is_finished());
    clock.advance(Duration::from_millis(100));
    let page = tokio::time::timeout(Duration::from_secs(30), next)
        .await
        .expect("sent after the crawl delay")
        .unwrap();
    assert_eq!(page, "page\n");
    assert_eq!(seen.load(Ordering::SeqCst), 3);
}

/// A delay too long for a `Duration` is the longest there is, not none (nor a later line's
/// 1 s): the host is paced at the slowest a quota holds, one request per 2^59 ns (about 18
/// years).
#[test]
fn an_overlong_crawl_delay_paces_the_host_at_the_slowest_quota() {
    let layer = PoliteLayer::new(AdaptiveConfig::new(10.0));
    let robots = "User-agent: *\nCrawl-delay: 99999999999999999999\nCrawl-delay: 1\n";
    assert_eq!(
        layer.crawl_delay("h:80", robots, "mybot"),
        Some(Duration::MAX)
    );
    let slowest = Duration::from_nanos(1 << 59);
    assert_eq!(layer.rates().quota("h:80").interval(), slowest);
}

#[tokio::test]
async fn a_robots_txt_without_a_delay_for_the_crawler_leaves_the_host_alone() {
    let layer = PoliteLayer::new(AdaptiveConfig::new(10.0));
    // Only another crawler's group has a delay, and the `*` group none.
    let robots = "User-agent: otherbot\nCrawl-delay: 60\n\nUser-agent: *\nDisallow: /x\n";
    assert_eq!(layer.crawl_delay("h:80", robots, "mybot"), None);
    assert_eq!(layer.rates().rate("h:80"), 10.0);
    // A delay of 0 asks nothing.
    let robots = "User-agent: *\nCrawl-delay: 0\n";
    assert_eq!(
        layer.crawl_delay("h:80", robots, "mybot"),
        Some(Duration::ZERO)
    );
    assert_eq!(layer.rates().rate("h:80"), 10.0);
}
