//! [`Reqwest`]: `reqwest::Client` as a tower service of `http` types, so that
//! [`PoliteLayer`](crate::PoliteLayer) (which reads `http::Request` and `http::Response`)
//! can wrap it. Feature `reqwest`.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::{Request, Response};
use tower_service::Service;

/// `reqwest::Client` serving `http::Request<B>` (any body reqwest takes: `String`,
/// `Vec<u8>`, `Bytes`, `&'static str`) with `http::Response<reqwest::Body>`, through
/// reqwest's own conversions. A request reqwest cannot take (a URI without a scheme or
/// host, say) is its error, not a panic.
///
/// The client's settings (timeouts, TLS, proxies, connection pool) are reqwest's: build
/// the `reqwest::Client` as usual and wrap it. Cloning is cheap (reqwest's client is an
/// `Arc`).
///
/// # Redirects
///
/// reqwest follows redirects itself by default (up to 10), inside one call: a hop to
/// another host then skips that host's permit and pace, and is counted under the first
/// host. Let the layers follow them instead: a client built with
/// `redirect(reqwest::redirect::Policy::none())` ([`Reqwest::builder`] starts from that,
/// and [`Reqwest::default`] is that), under a [`PoliteLayer`](crate::PoliteLayer), under a
/// [`RedirectLayer`](crate::RedirectLayer), so that each hop is paced and counted under
/// its own host. A client given to [`Reqwest::new`] keeps its own policy.
///
/// # Examples
///
/// ```no_run
/// use tollgate_client::{AdaptiveConfig, PoliteLayer, RedirectLayer, Reqwest};
/// use tower::{Layer, ServiceExt};
///
/// # async fn crawl() -> Result<(), tollgate_client::PoliteError<reqwest::Error>> {
/// let layer = PoliteLayer::new(AdaptiveConfig::new(5.0)).max_in_flight(4);
/// // reqwest does not follow redirects; the RedirectLayer does, through the polite layer.
/// let client = RedirectLayer::new().layer(layer.layer(Reqwest::default()));
/// let req = http::Request::get("http://example.com/").body(String::new()).unwrap();
/// let res = client.oneshot(req).await?;
/// assert!(res.status().is_success());
/// assert_eq!(layer.host("example.com:80").unwrap().successes, 1); // the layer counted it
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct Reqwest {
    client: reqwest::Client,
}

impl Reqwest {
    /// Wraps `client`, with its own redirect policy (reqwest's default follows redirects
    /// itself: see [Redirects](Reqwest#redirects)).
    ///
    /// # Examples
    ///
    /// ```
    /// let svc = tollgate_client::Reqwest::new(reqwest::Client::new());
    /// assert!(format!("{svc:?}").starts_with("Reqwest"));
    /// ```
    pub fn new(client: reqwest::Client) -> Reqwest {
        Reqwest { client }
    }

    /// A `reqwest::ClientBuilder` that does not follow redirects (so that a
    /// [`RedirectLayer`](crate::RedirectLayer) does, each hop under its own host); set the
    /// rest of the client as usual, then [`Reqwest::new`].
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate_client::Reqwest;
    ///
    /// let client = Reqwest::builder().user_agent("polite-bot/1.0").build().unwrap();
    /// let svc = Reqwest::new(client);
    /// let settings = format!("{:?}", svc.client());
    /// assert!(settings.contains("polite-bot/1.0") && settings.contains("Policy(None)"));
    /// ```
    pub fn builder() -> reqwest::ClientBuilder {
        reqwest::Client::builder().redirect(reqwest::redirect::Policy::none())
    }

    /// The wrapped client.
    ///
    /// # Examples
    ///
    /// ```
    /// let client = reqwest::Client::builder().user_agent("polite-bot/1.0").build().unwrap();
    /// let svc = tollgate_client::Reqwest::new(client);
    /// // The client given, its settings with it.
    /// assert!(format!("{:?}", svc.client()).contains("polite-bot/1.0"));
    /// ```
    pub fn client(&self) -> &reqwest::Client {
        &self.client
    }
}

/// A default reqwest client that does not follow redirects (see
/// [Redirects](Reqwest#redirects)).
///
/// # Panics
///
/// As `reqwest::Client::new`: if reqwest cannot initialise its TLS backend or read the
/// system's settings. Build the client with [`Reqwest::builder`] to get that as an error.
///
/// # Examples
///
/// ```
/// let svc = tollgate_client::Reqwest::default();
/// assert!(format!("{:?}", svc.client()).contains("Policy(None)")); // reqwest's own Debug
/// let follows = tollgate_client::Reqwest::new(reqwest::Client::new());
/// assert!(!format!("{:?}", follows.client()).contains("Policy(None)"));
/// ```
impl Default for Reqwest {
    fn default() -> Reqwest {
        let client = Reqwest::builder()
            .build()
            .expect("reqwest could not build a client (as reqwest::Client::new)");
        Reqwest::new(client)
    }
}

impl From<reqwest::Client> for Reqwest {
    fn from(client: reqwest::Client) -> Reqwest {
        Reqwest::new(client)
    }
}

impl<B: Into<reqwest::Body>> Service<Request<B>> for Reqwest {
    type Response = Response<reqwest::Body>;
    type Error = reqwest::Error;
    type Future = ReqwestFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Service::<reqwest::Request>::poll_ready(&mut self.client, cx)
    }

    fn call(&mut self, req: Request<B>) -> ReqwestFuture {
        let inner: Pin<Box<dyn Future<Output = _> + Send>> = match reqwest::Request::try_from(req) {
            Ok(req) => Box::pin(self.client.execute(req)),
            Err(e) => Box::pin(std::future::ready(Err(e))),
        };
        ReqwestFuture { inner }
    }
}

/// The future of [`Reqwest`]'s `call`: reqwest's response as an `http::Response`.
///
/// # Cancel safety
///
/// Dropping it drops reqwest's request future: the request is abandoned (its connection
/// closed or returned to the pool, as reqwest decides); nothing is leaked.
///
/// # Examples
///
/// ```
/// use tower::Service;
///
/// let mut svc = tollgate_client::Reqwest::new(reqwest::Client::new());
/// // Not a URL reqwest takes: the future resolves to reqwest's error.
/// let fut: tollgate_client::ReqwestFuture = svc.call(http::Request::new(String::new()));
/// assert!(futures_executor::block_on(fut).unwrap_err().is_builder());
/// ```
pub struct ReqwestFuture {
    inner: Pin<Box<dyn Future<Output = Result<reqwest::Response, reqwest::Error>> + Send>>,
}

impl fmt::Debug for ReqwestFuture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReqwestFuture").finish_non_exhaustive()
    }
}

impl Future for ReqwestFuture {
    type Output = Result<Response<reqwest::Body>, reqwest::Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.inner.as_mut().poll(cx).map_ok(Response::from)
    }
}
