//! [`RedirectLayer`] and its service [`Redirects`]: redirects followed above a
//! [`Polite`](crate::Polite) service, so that each hop is a request of its own through the
//! polite layer, keyed, permitted, paced, counted and retried under its own host.
//!
//! Why a layer of its own, above the polite one, rather than inside it: a hop to another
//! host must wait for that host's permit and turn, which is exactly what a fresh call of
//! the polite service does; and only this layer needs an empty request body to make
//! (`ReqB: Default`, for a 303), so the polite layer keeps working with any `Clone` body.
//! It works over any inner client (hyper-util's does not follow redirects; reqwest does
//! unless told not to: see `Reqwest`, feature `reqwest`).

use std::fmt;
use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::task::{Context, Poll};

use http::header::{self, HeaderMap, HeaderName};
use http::request::Parts;
use http::{Method, Request, Response, StatusCode, Uri};
use tower_layer::Layer;
use tower_service::Service;

use crate::error::PoliteError;
use crate::location;

/// The redirects a [`Redirects`] service follows when no limit is set.
const DEFAULT_MAX_REDIRECTS: u32 = 10;

/// Headers that describe a request's body: gone with the body when a redirect turns the
/// request into a GET.
const BODY_HEADERS: [HeaderName; 6] = [
    header::CONTENT_TYPE,
    header::CONTENT_LENGTH,
    header::CONTENT_ENCODING,
    header::CONTENT_LANGUAGE,
    header::CONTENT_LOCATION,
    header::TRANSFER_ENCODING,
];

/// Credentials meant for one origin, and the origin's own name: not sent to another.
const ORIGIN_HEADERS: [HeaderName; 4] = [
    header::AUTHORIZATION,
    header::PROXY_AUTHORIZATION,
    header::COOKIE,
    header::HOST,
];

/// Follows HTTP redirects above a [`PoliteLayer`](crate::PoliteLayer)'s service, each hop
/// a request of its own through it: the hop to another host waits for that host's permit
/// and turn and is counted under it ([`PoliteLayer::host`](crate::PoliteLayer::host)), as
/// if the user had sent it.
///
/// Stack it outside the polite layer:
/// `RedirectLayer::new().layer(polite_layer.layer(client))`, or with tower's
/// `ServiceBuilder`, `.layer(RedirectLayer::new()).layer(polite_layer)`. The inner client
/// must not follow redirects itself (reqwest does by default: with feature `reqwest`,
/// build it with `Reqwest::builder` or take `Reqwest::default`, which do not).
///
/// The rules, per hop:
///
/// * 301, 302, 303, 307 and 308 with a `Location` are followed; any other status, and a
///   redirect whose `Location` is missing or cannot be followed (not a URI, a scheme other
///   than `http` or `https`, a request URI without scheme and host to resolve it against),
///   is the answer, returned as it came.
/// * `Location` is resolved against the hop's URI (RFC 3986: `/path`, `../up`, `?query`,
///   `//host/path`); its fragment is dropped, and its spaces and raw non-ASCII bytes are
///   percent-encoded, as browsers do.
/// * 303 turns the request into a GET (a HEAD stays a HEAD) without a body; 301 and 302
///   turn a POST into a GET without a body (as browsers and reqwest do); 307 and 308 keep
///   the method and send the body again. A body dropped is replaced with `ReqB::default()`
///   (an empty `String`, `Full`, `Empty`, `reqwest::Body`), and the headers describing it
///   (`Content-Type`, `Content-Length`, `Content-Encoding`, `Content-Language`,
///   `Content-Location`, `Transfer-Encoding`) go with it. The body is kept for the 307/308
///   case by the clone each hop sends (the polite layer already clones it per attempt, so
///   the body must be a buffered one).
/// * A hop to another origin (scheme, host or port) drops `Authorization`,
///   `Proxy-Authorization`, `Cookie` and `Host`: credentials for one host are not sent to
///   another. Other headers and the request's extensions are kept.
/// * At most [`max_redirects`](RedirectLayer::max_redirects) hops (10 by default) are
///   followed; the next redirect is [`PoliteError::TooManyRedirects`], carrying where it
///   pointed (a redirect loop ends there too).
/// * Each intermediate response is dropped before the next hop, and with its body the
///   host's permit.
/// * A response reached through redirects carries a [`Redirected`] extension: the URI it
///   answered (to resolve its relative links against) and the hops taken.
///
/// # Examples
///
/// ```
/// use std::convert::Infallible;
/// use tollgate_client::{AdaptiveConfig, PoliteLayer, RedirectLayer};
/// use tower::{Layer, ServiceExt, service_fn};
///
/// // A stand-in client: a.example moves everything to b.example.
/// let client = service_fn(|req: http::Request<String>| async move {
///     let res = match req.uri().host() {
///         Some("a.example") => http::Response::builder()
///             .status(301)
///             .header("location", "http://b.example/new"),
///         _ => http::Response::builder().status(200),
///     };
///     Ok::<_, Infallible>(res.body(()).unwrap())
/// });
/// let polite = PoliteLayer::new(AdaptiveConfig::new(10.0));
/// let client = RedirectLayer::new().layer(polite.layer(client));
/// let req = http::Request::get("http://a.example/old").body(String::new()).unwrap();
/// let res = futures_executor::block_on(client.oneshot(req)).unwrap();
/// assert_eq!(res.status(), 200);
/// assert_eq!(polite.host("a.example:80").unwrap().requests, 1);
/// assert_eq!(polite.host("b.example:80").unwrap().requests, 1); // the hop, under its host
/// ```
#[derive(Clone, Copy, Debug)]
pub struct RedirectLayer {
    max: u32,
}

impl RedirectLayer {
    /// A layer that follows up to 10 redirects per request.
    ///
    /// # Examples
    ///
    /// ```
    /// let layer = tollgate_client::RedirectLayer::new();
    /// assert_eq!(layer.max(), 10);
    /// ```
    pub fn new() -> RedirectLayer {
        RedirectLayer {
            max: DEFAULT_MAX_REDIRECTS,
        }
    }

    /// Follows at most `n` redirects per request; the next is
    /// [`PoliteError::TooManyRedirects`]. With 0, the first redirect is that error.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use tollgate_client::{AdaptiveConfig, PoliteError, PoliteLayer, RedirectLayer};
    /// use tower::{Layer, ServiceExt, service_fn};
    ///
    /// // A stand-in client that redirects every request to the same place.
    /// let client = service_fn(|_req: http::Request<String>| async {
    ///     let res = http::Response::builder().status(302).header("location", "/again");
    ///     Ok::<_, Infallible>(res.body(()).unwrap())
    /// });
    /// let polite = PoliteLayer::new(AdaptiveConfig::new(1_000.0));
    /// let client = RedirectLayer::new().max_redirects(2).layer(polite.layer(client));
    /// let req = http::Request::get("http://a.example/").body(String::new()).unwrap();
    /// let err = futures_executor::block_on(client.oneshot(req)).unwrap_err();
    /// let PoliteError::TooManyRedirects { max, location } = err else { panic!("{err}") };
    /// assert_eq!((max, location.to_string()), (2, "http://a.example/again".to_owned()));
    /// assert_eq!(polite.host("a.example:80").unwrap().requests, 3); // the request, 2 hops
    /// ```
    #[must_use]
    pub fn max_redirects(mut self, n: u32) -> Self {
        self.max = n;
        self
    }

    /// The most redirects followed per request.
    ///
    /// # Examples
    ///
    /// ```
    /// let layer = tollgate_client::RedirectLayer::new().max_redirects(3);
    /// assert_eq!(layer.max(), 3);
    /// ```
    pub fn max(&self) -> u32 {
        self.max
    }
}

impl Default for RedirectLayer {
    fn default() -> RedirectLayer {
        RedirectLayer::new()
    }
}

impl<S> Layer<S> for RedirectLayer {
    type Service = Redirects<S>;

    fn layer(&self, inner: S) -> Redirects<S> {
        Redirects {
            inner,
            max: self.max,
        }
    }
}

/// Where a response reached through redirects came from: in its extensions when a
/// [`Redirects`] service followed at least one redirect to it.
///
/// # Examples
///
/// ```
/// use std::convert::Infallible;
/// use tollgate_client::{AdaptiveConfig, PoliteLayer, RedirectLayer, Redirected};
/// use tower::{Layer, ServiceExt, service_fn};
///
/// // A stand-in client: /old moves to /new.
/// let client = service_fn(|req: http::Request<String>| async move {
///     let res = match req.uri().path() {
///         "/old" => http::Response::builder().status(308).header("location", "new"),
///         _ => http::Response::builder().status(200),
///     };
///     Ok::<_, Infallible>(res.body(()).unwrap())
/// });
/// let polite = PoliteLayer::new(AdaptiveConfig::new(10.0));
/// let client = RedirectLayer::new().layer(polite.layer(client));
/// let get = |path: &str| http::Request::get(format!("http://a.example{path}")).body(String::new());
/// let res = futures_executor::block_on(client.clone().oneshot(get("/old").unwrap())).unwrap();
/// let via = res.extensions().get::<Redirected>().unwrap();
/// assert_eq!((via.uri().to_string().as_str(), via.hops()), ("http://a.example/new", 1));
/// let res = futures_executor::block_on(client.oneshot(get("/new").unwrap())).unwrap();
/// assert!(res.extensions().get::<Redirected>().is_none()); // not redirected
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Redirected {
    uri: Uri,
    hops: u32,
}

impl Redirected {
    /// The URI the response answered: the last hop's.
    ///
    /// # Examples
    ///
    /// See [`Redirected`].
    pub fn uri(&self) -> &Uri {
        &self.uri
    }

    /// How many redirects were followed to it (at least 1).
    ///
    /// # Examples
    ///
    /// See [`Redirected`].
    pub fn hops(&self) -> u32 {
        self.hops
    }
}

/// The service of a [`RedirectLayer`], over a [`Polite`](crate::Polite) service (or any
/// service whose error is a [`PoliteError`]).
///
/// `poll_ready` is always ready: each hop takes its own clone of the inner service and
/// waits for that clone's readiness.
///
/// # Examples
///
/// ```
/// use std::convert::Infallible;
/// use tollgate_client::{AdaptiveConfig, PoliteLayer, RedirectLayer, Redirects};
/// use tower::{Layer, service_fn};
///
/// let client = service_fn(|_req: http::Request<String>| async {
///     Ok::<_, Infallible>(http::Response::new(()))
/// });
/// let polite = PoliteLayer::new(AdaptiveConfig::new(10.0)).layer(client);
/// let svc: Redirects<_> = RedirectLayer::new().layer(polite);
/// assert!(format!("{svc:?}").starts_with("Redirects"));
/// ```
#[derive(Clone)]
pub struct Redirects<S> {
    inner: S,
    max: u32,
}

impl<S> fmt::Debug for Redirects<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Redirects")
            .field("max", &self.max)
            .finish_non_exhaustive()
    }
}

/// The future of [`Redirects`]' `call`.
///
/// # Cancel safety
///
/// Dropping it drops the hop under way, as dropping the inner service's future does
/// (for a [`Polite`](crate::Polite) service: its queued waits give their places up, a
/// permit it holds is released).
#[must_use = "futures do nothing unless polled"]
pub struct RedirectFuture<T, E> {
    inner: Pin<Box<dyn Future<Output = Result<T, E>> + Send>>,
}

impl<T, E> fmt::Debug for RedirectFuture<T, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedirectFuture").finish_non_exhaustive()
    }
}

impl<T, E> Future for RedirectFuture<T, E> {
    type Output = Result<T, E>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.inner.as_mut().poll(cx)
    }
}

/// Where `res`, the answer to a request for `uri`, redirects to, if it is a redirect this
/// layer follows.
fn target<B>(uri: &Uri, res: &Response<B>) -> Option<Uri> {
    let followed = matches!(
        res.status(),
        StatusCode::MOVED_PERMANENTLY
            | StatusCode::FOUND
            | StatusCode::SEE_OTHER
            | StatusCode::TEMPORARY_REDIRECT
            | StatusCode::PERMANENT_REDIRECT
    );
    if !followed {
        return None;
    }
    let location = res.headers().get(header::LOCATION)?;
    location::resolve(uri, location.as_bytes())
}

/// Whether a redirect of `status` turns a request of `method` into a GET without a body.
fn becomes_get(status: StatusCode, method: &Method) -> bool {
    match status {
        StatusCode::SEE_OTHER => *method != Method::HEAD,
        StatusCode::MOVED_PERMANENTLY | StatusCode::FOUND => *method == Method::POST,
        _ => false,
    }
}

/// Scheme, lower-cased host and port (the scheme's default if none is given) of `uri`.
fn origin(uri: &Uri) -> (Option<&str>, Option<String>, Option<u16>) {
    let port = uri.port_u16().or(match uri.scheme_str() {
        Some("https") => Some(443),
        Some("http") => Some(80),
        _ => None,
    });
    (
        uri.scheme_str(),
        uri.host().map(str::to_ascii_lowercase),
        port,
    )
}

fn remove(headers: &mut HeaderMap, names: &[HeaderName]) {
    for name in names {
        headers.remove(name);
    }
}

/// Turns `parts` and `body` into the request of the next hop, to `next`, after a redirect
/// of `status`.
fn next_hop<B: Default>(parts: &mut Parts, body: &mut B, status: StatusCode, next: Uri) {
    if becomes_get(status, &parts.method) {
        if parts.method != Method::HEAD {
            parts.method = Method::GET;
        }
        *body = B::default();
        remove(&mut parts.headers, &BODY_HEADERS);
    }
    if origin(&parts.uri) != origin(&next) {
        remove(&mut parts.headers, &ORIGIN_HEADERS);
    }
    parts.uri = next;
}

impl<S, ReqB, ResB, E> Service<Request<ReqB>> for Redirects<S>
where
    S: Service<Request<ReqB>, Response = Response<ResB>, Error = PoliteError<E>>
        + Clone
        + Send
        + 'static,
    S::Future: Send,
    ReqB: Clone + Default + Send + 'static,
    ResB: Send + 'static,
    E: Send + 'static,
{
    type Response = Response<ResB>;
    type Error = PoliteError<E>;
    type Future = RedirectFuture<Response<ResB>, PoliteError<E>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        let inner = self.inner.clone();
        let max = self.max;
        let (mut parts, mut body) = req.into_parts();
        RedirectFuture {
            inner: Box::pin(async move {
                let mut hops = 0;
                loop {
                    let mut svc = inner.clone();
                    poll_fn(|cx| svc.poll_ready(cx)).await?;
                    let res = svc
                        .call(Request::from_parts(parts.clone(), body.clone()))
                        .await?;
                    let Some(next) = target(&parts.uri, &res) else {
                        let mut res = res;
                        if hops > 0 {
                            res.extensions_mut().insert(Redirected {
                                uri: parts.uri,
                                hops,
                            });
                        }
                        return Ok(res);
                    };
                    if hops == max {
                        return Err(PoliteError::TooManyRedirects {
                            max,
                            location: next,
                        });
                    }
                    hops += 1;
                    let status = res.status();
                    // Its body, and with it this host's permit, goes before the next hop
                    // waits for its own (the same host's, perhaps).
                    drop(res);
                    next_hop(&mut parts, &mut body, status, next);
                }
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(method: Method, uri: &str, headers: &[(&str, &str)]) -> Parts {
        let mut req = Request::builder().method(method).uri(uri);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        req.body(()).unwrap().into_parts().0
    }

    #[test]
    fn which_redirects_turn_into_a_get() {
        for (status, method, get) in [
            (303, Method::POST, true),
            (303, Method::PUT, true),
            (303, Method::GET, true),
            (303, Method::HEAD, false),
            (301, Method::POST, true),
            (302, Method::POST, true),
            (301, Method::PUT, false),
            (302, Method::DELETE, false),
            (307, Method::POST, false),
            (308, Method::POST, false),
        ] {
            let status = StatusCode::from_u16(status).unwrap();
            assert_eq!(becomes_get(status, &method), get, "{status} {method}");
        }
    }

    #[test]
    fn a_303_drops_the_body_and_its_headers_a_307_keeps_them() {
        let headers = [("content-type", "text/plain"), ("content-length", "4")];
        let mut p = parts(Method::POST, "http://a/form", &headers);
        let mut body = String::from("data");
        let next: Uri = "http://a/done".parse().unwrap();
        next_hop(
            &mut p,
            &mut body,
            StatusCode::TEMPORARY_REDIRECT,
            next.clone(),
        );
        assert_eq!((&p.method, body.as_str()), (&Method::POST, "data"));
        assert_eq!(p.headers.len(), 2);
        next_hop(&mut p, &mut body, StatusCode::SEE_OTHER, next);
        assert_eq!((&p.method, body.as_str()), (&Method::GET, ""));
        assert!(p.headers.is_empty());
    }

    #[test]
    fn credentials_stay_with_their_origin() {
        let headers = [
            ("authorization", "Bearer t"),
            ("cookie", "s=1"),
            ("proxy-authorization", "Basic x"),
            ("host", "a"),
            ("accept", "*/*"),
        ];
        let mut body = ();
        for (to, kept) in [
            ("http://A:80/other", 5), // the same origin, spelt otherwise
            ("http://b/", 1),
            ("https://a/", 1),
            ("http://a:8080/", 1),
        ] {
            let mut p = parts(Method::GET, "http://a/", &headers);
            next_hop(&mut p, &mut body, StatusCode::FOUND, to.parse().unwrap());
            assert_eq!(p.headers.len(), kept, "{to}");
            assert!(p.headers.contains_key("accept"));
        }
    }

    #[test]
    fn only_redirects_with_a_location_are_followed() {
        let uri: Uri = "http://a/x/y".parse().unwrap();
        let res = |status: u16, location: Option<&str>| {
            let mut r = Response::builder().status(status);
            if let Some(l) = location {
                r = r.header("location", l);
            }
            r.body(()).unwrap()
        };
        for status in [301, 302, 303, 307, 308] {
            let to = target(&uri, &res(status, Some("../z"))).unwrap();
            assert_eq!(to.to_string(), "http://a/z");
            assert_eq!(target(&uri, &res(status, None)), None);
        }
        for status in [200, 300, 304, 305, 306, 404] {
            assert_eq!(target(&uri, &res(status, Some("/z"))), None, "{status}");
        }
        assert_eq!(target(&uri, &res(302, Some("ftp://a/z"))), None);
    }
}
