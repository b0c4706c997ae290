//! `RedirectLayer` over `PoliteLayer` over real sockets: two local servers on two ports
//! (two hosts to the layer), hyper-util's client (and reqwest's, feature `reqwest`). Each
//! hop is paced and counted under its own host; the hop limit, the method and body rules,
//! relative `Location`s and credentials across hosts.

mod serve;

use std::time::Duration;

use http::{Method, Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serve::Server;
use tollgate_client::{
    AdaptiveConfig, Polite, PoliteBody, PoliteError, PoliteLayer, RedirectLayer, Redirected,
    Redirects, RetryPolicy,
};
use tower::{Layer, ServiceExt};

type Hyper = Client<HttpConnector, Full<Bytes>>;

/// A fast layer (pacing does not hold the tests up) that refuses a host held for more than
/// a minute, and the redirect layer over it, over hyper-util's client. One request in
/// flight per host: a hop to the same host waits for the permit the redirect's body held.
fn client(redirects: RedirectLayer) -> (PoliteLayer, Redirects<Polite<Hyper>>) {
    let polite = PoliteLayer::new(AdaptiveConfig::new(1_000.0))
        .max_in_flight(1)
        .retry(RetryPolicy::never())
        .max_wait(Duration::from_secs(60));
    let hyper = Client::builder(TokioExecutor::new()).build_http();
    let svc = redirects.layer(polite.layer(hyper));
    (polite, svc)
}

/// `svc`'s answer to `req`. A minute is far past what a passing run takes: it turns a hop
/// waiting forever (for a permit its own redirect's body holds) into a failure.
async fn call(
    svc: &Redirects<Polite<Hyper>>,
    req: Request<Full<Bytes>>,
) -> Result<Response<PoliteBody<Incoming>>, PoliteError<hyper_util::client::legacy::Error>> {
    tokio::time::timeout(Duration::from_secs(60), svc.clone().oneshot(req))
        .await
        .expect("a hop waits for a permit its redirect holds")
}

fn request(method: Method, url: &str, body: &'static str) -> Request<Full<Bytes>> {
    Request::builder()
        .method(method)
        .uri(url)
        .body(Full::new(Bytes::from_static(body.as_bytes())))
        .unwrap()
}

/// Server B: answers every request 200 with `b`.
async fn b() -> Server {
    serve::serve(|_, _| serve::full(200, "b")).await
}

#[tokio::test]
async fn a_hop_to_another_host_is_paced_and_counted_under_it() {
    let b = b().await;
    let to_b = b.url("/dest");
    let a = serve::serve(move |_, _| serve::redirect(302, &to_b)).await;
    let (polite, svc) = client(RedirectLayer::new());

    let res = call(&svc, request(Method::GET, &a.url("/go"), ""))
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(
        &res.into_body().collect().await.unwrap().to_bytes()[..],
        b"b"
    );
    let (ha, hb) = (
        polite.host(&a.key()).unwrap(),
        polite.host(&b.key()).unwrap(),
    );
    assert_eq!((ha.requests, ha.successes), (1, 1));
    assert_eq!((hb.requests, hb.successes), (1, 1));
    assert_eq!(b.seen()[0].target, "/dest");

    // B is held for an hour: the hop waits for B's turn, so the request is refused unsent
    // at B (A, still open, answered its redirect).
    polite.rates().hold(&b.key(), Duration::from_secs(3_600));
    let err = call(&svc, request(Method::GET, &a.url("/go"), ""))
        .await
        .unwrap_err();
    assert!(err.is_held(), "{err}");
    assert_eq!((a.started(), b.started()), (2, 1));
    assert_eq!(polite.host(&b.key()).unwrap().requests, 1);
}

#[tokio::test]
async fn the_hop_limit_is_an_error() {
    let a = serve::serve(|_, _| serve::redirect(302, "/loop")).await;
    let (_, svc) = client(RedirectLayer::new().max_redirects(3));
    let err = call(&svc, request(Method::GET, &a.url("/loop"), ""))
        .await
        .unwrap_err();
    match err {
        PoliteError::TooManyRedirects { max, location } => {
            assert_eq!(max, 3);
            assert_eq!(location.to_string(), a.url("/loop"));
        }
        other => panic!("{other}"),
    }
    assert_eq!(a.started(), 4); // the request and 3 hops

    let a = serve::serve(|_, _| serve::redirect(307, "/loop")).await;
    let (polite, svc) = client(RedirectLayer::new());
    let err = call(&svc, request(Method::GET, &a.url("/loop"), ""))
        .await
        .unwrap_err();
    assert!(matches!(err, PoliteError::TooManyRedirects { max: 10, .. }));
    assert_eq!(a.started(), 11);
    assert_eq!(polite.host(&a.key()).unwrap().requests, 11);
}

/// A server redirecting `/303`, `/302`, `/307` and `/308` with that status to `/done`.
async fn redirecting() -> Server {
    serve::serve(|seen, _| match seen.target.as_str() {
        "/done" => serve::full(200, "done"),
        t => serve::redirect(t[1..].parse().unwrap(), "/done"),
    })
    .await
}

#[tokio::test]
async fn a_303_becomes_a_get_without_its_body_a_307_keeps_both() {
    let a = redirecting().await;
    let (_, svc) = client(RedirectLayer::new());
    for (method, status, after) in [
        (Method::POST, 303, Method::GET),
        (Method::PUT, 303, Method::GET),
        (Method::POST, 302, Method::GET),
        (Method::PUT, 302, Method::PUT),
        (Method::POST, 307, Method::POST),
        (Method::POST, 308, Method::POST),
    ] {
        let mut req = request(method.clone(), &a.url(&format!("/{status}")), "name=x");
        req.headers_mut().insert(
            "content-type",
            "application/x-www-form-urlencoded".parse().unwrap(),
        );
        let res = call(&svc, req).await.unwrap();
        assert_eq!(res.status(), 200);
        let seen = a.seen();
        let (first, hop) = (&seen[seen.len() - 2], &seen[seen.len() - 1]);
        assert_eq!((&first.method, &first.body[..]), (&method, &b"name=x"[..]));
        assert_eq!(hop.method, after, "{method} {status}");
        assert_eq!(hop.target, "/done");
        if after == Method::GET {
            assert!(hop.body.is_empty(), "{method} {status}");
            assert!(!hop.headers.contains_key("content-type"));
            assert!(
                hop.headers
                    .get("content-length")
                    .is_none_or(|v| v.as_bytes() == b"0"),
                "{:?}",
                hop.headers
            );
        } else {
            assert_eq!(&hop.body[..], b"name=x", "{method} {status}");
            assert_eq!(
                hop.headers["content-type"],
                "application/x-www-form-urlencoded"
            );
        }
    }
}

#[tokio::test]
async fn a_relative_location_is_resolved_against_the_hop() {
    let b = b().await;
    let to_b = format!("//127.0.0.1:{}/from-a?via=1", b.addr.port());
    let a = serve::serve(move |seen, _| match seen.target.as_str() {
        "/a/b/c" => serve::redirect(301, "../d?x=1"),
        "/a/d?x=1" => serve::redirect(308, &to_b),
        _ => serve::full(404, ""),
    })
    .await;
    let (polite, svc) = client(RedirectLayer::new());
    let res = call(&svc, request(Method::GET, &a.url("/a/b/c"), ""))
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let via = res.extensions().get::<Redirected>().unwrap();
    assert_eq!(via.uri().to_string(), b.url("/from-a?via=1"));
    assert_eq!(via.hops(), 2);
    let targets: Vec<_> = a.seen().into_iter().map(|s| s.target).collect();
    assert_eq!(targets, ["/a/b/c", "/a/d?x=1"]);
    assert_eq!(b.seen()[0].target, "/from-a?via=1");
    assert_eq!(polite.host(&b.key()).unwrap().requests, 1);
}

#[tokio::test]
async fn credentials_are_not_sent_to_another_host() {
    let b = b().await;
    let to_b = b.url("/x");
    let a = serve::serve(move |seen, _| match seen.target.as_str() {
        "/away" => serve::redirect(302, &to_b),
        "/stay" => serve::redirect(302, "/here"),
        _ => serve::full(200, "a"),
    })
    .await;
    let (_, svc) = client(RedirectLayer::new());
    for path in ["/away", "/stay"] {
        let mut req = request(Method::GET, &a.url(path), "");
        let h = req.headers_mut();
        h.insert("authorization", "Bearer secret".parse().unwrap());
        h.insert("proxy-authorization", "Basic c2VjcmV0".parse().unwrap());
        h.insert("cookie", "session=secret".parse().unwrap());
        h.insert("x-trace", "t-1".parse().unwrap());
        let res = call(&svc, req).await.unwrap();
        assert_eq!(res.status(), 200);
    }
    let at_b = &b.seen()[0];
    for name in ["authorization", "proxy-authorization", "cookie"] {
        assert!(!at_b.headers.contains_key(name), "{name} went to B");
    }
    assert_eq!(at_b.headers["x-trace"], "t-1");
    assert_eq!(at_b.headers["host"], b.key()); // B's own, not A's
    let here = a.seen().into_iter().find(|s| s.target == "/here").unwrap();
    assert_eq!(here.headers["authorization"], "Bearer secret"); // the same host keeps it
    assert_eq!(here.headers["cookie"], "session=secret");
}

#[tokio::test]
async fn a_redirect_without_a_usable_location_is_the_answer() {
    let a = serve::serve(|seen, _| match seen.target.as_str() {
        "/none" => serve::full(302, "no location"),
        _ => serve::redirect(301, "ftp://127.0.0.1/file"),
    })
    .await;
    let (_, svc) = client(RedirectLayer::new());
    for path in ["/none", "/ftp"] {
        let res = call(&svc, request(Method::GET, &a.url(path), ""))
            .await
            .unwrap();
        assert!(res.status().is_redirection(), "{path}");
    }
    assert_eq!(a.started(), 2);
}

/// reqwest follows redirects itself unless told not to: the hop to B then bypasses B's
/// key. With `Reqwest::default()` (no following) under the redirect layer it does not.
#[cfg(feature = "reqwest")]
#[tokio::test]
async fn over_reqwest_the_hop_is_counted_under_its_host() {
    use tollgate_client::Reqwest;

    let b = b().await;
    let to_b = b.url("/dest");
    let a = serve::serve(move |_, _| serve::redirect(302, &to_b)).await;
    let get = || {
        http::Request::get(a.url("/go"))
            .body(String::new())
            .unwrap()
    };

    // reqwest's own following: B answered, but the layer never saw B.
    let polite = PoliteLayer::new(AdaptiveConfig::new(1_000.0));
    let res = polite
        .layer(Reqwest::new(reqwest::Client::new()))
        .oneshot(get())
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(b.started(), 1);
    assert!(polite.host(&b.key()).is_none());

    let polite = PoliteLayer::new(AdaptiveConfig::new(1_000.0));
    let svc = RedirectLayer::new().layer(polite.layer(Reqwest::default()));
    let res = svc.oneshot(get()).await.unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(
        &res.into_body().collect().await.unwrap().to_bytes()[..],
        b"b"
    );
    assert_eq!(b.started(), 2);
    assert_eq!(polite.host(&a.key()).unwrap().requests, 1);
    assert_eq!(polite.host(&b.key()).unwrap().requests, 1);
}
