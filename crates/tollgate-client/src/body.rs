//! [`PoliteBody`]: a response body that carries its host's in-flight permit until the body
//! has been read to its end or dropped, so that
//! [`max_in_flight`](crate::PoliteLayer::max_in_flight) bounds downloads, not only the wait
//! for the headers.
//!
//! The permit is released (at most once) on the first of: the inner body's last frame (its
//! `poll_frame` answers `None`, or `is_end_stream` turns true after a frame), an error
//! frame (the transfer is over), [`PoliteBody::release`], [`PoliteBody::into_inner`], or the
//! drop of the body (and so of a response dropped whole).

use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use tollgate::Permit;

pin_project! {
    /// The body of a [`Polite`](crate::Polite) response: the inner client's body `B`, and
    /// the host's [`tollgate::InFlight`] permit, held until the body is read to its end or
    /// dropped.
    ///
    /// It implements [`http_body::Body`] when `B` does, forwarding frames, size hints and
    /// `is_end_stream`, so `BodyExt::collect`, hyper, axum and reqwest's helpers read it as
    /// they read `B`.
    ///
    /// Reading only the headers and keeping the response keeps the permit: the host counts
    /// the request as in flight until the response (or its body) is dropped. An empty body
    /// (a HEAD's, a 204's) too: the layer does not require `B: Body`, so it does not look
    /// before the body is polled. Drop it,
    /// read the body, or call [`release`](PoliteBody::release) when done with the host. A
    /// response kept for its headers while more requests to the same host go out can wait
    /// for its own permit forever (with `max_in_flight(1)`, the next request to that host).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use http_body_util::BodyExt;
    /// use tollgate_client::{AdaptiveConfig, PoliteLayer};
    /// use tower::{Layer, ServiceExt, service_fn};
    ///
    /// // A stand-in client that answers with a body of 5 bytes.
    /// let client = service_fn(|_req: http::Request<()>| async {
    ///     Ok::<_, Infallible>(http::Response::new(String::from("hello")))
    /// });
    /// let layer = PoliteLayer::new(AdaptiveConfig::new(10.0)).max_in_flight(1);
    /// let polite = layer.layer(client);
    /// futures_executor::block_on(async {
    ///     let req = http::Request::get("http://example.com/").body(()).unwrap();
    ///     let res = polite.oneshot(req).await.unwrap();
    ///     assert!(res.body().holds_permit()); // headers in, body unread: still in flight
    ///     assert_eq!(layer.host("example.com:80").unwrap().in_flight, 1);
    ///     let bytes = res.into_body().collect().await.unwrap().to_bytes();
    ///     assert_eq!(&bytes[..], b"hello");
    /// });
    /// assert_eq!(layer.host("example.com:80").unwrap().in_flight, 0); // read: released
    /// ```
    pub struct PoliteBody<B> {
        #[pin]
        inner: B,
        permit: Option<Permit>,
    }
}

impl<B> PoliteBody<B> {
    /// `inner`, holding `permit` (`None` for a request the layer did not key).
    pub(crate) fn new(inner: B, permit: Option<Permit>) -> PoliteBody<B> {
        PoliteBody { inner, permit }
    }

    /// Whether the body still holds its host's permit (not yet read to its end, released
    /// or given away). A request the layer did not key (no host) has none.
    ///
    /// # Examples
    ///
    /// See [`PoliteBody`].
    pub fn holds_permit(&self) -> bool {
        self.permit.is_some()
    }

    /// Releases the host's permit now, keeping the body: for a response kept for its
    /// headers, or a long-lived stream that should not count against the host's
    /// concurrency. What is read after it is not bounded by `max_in_flight`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use tollgate_client::{AdaptiveConfig, PoliteLayer};
    /// use tower::{Layer, ServiceExt, service_fn};
    ///
    /// let client = service_fn(|_req: http::Request<()>| async {
    ///     Ok::<_, Infallible>(http::Response::new(String::from("a long stream")))
    /// });
    /// let layer = PoliteLayer::new(AdaptiveConfig::new(10.0)).max_in_flight(1);
    /// let polite = layer.layer(client);
    /// let req = http::Request::get("http://example.com/").body(()).unwrap();
    /// let mut res = futures_executor::block_on(polite.oneshot(req)).unwrap();
    /// res.body_mut().release();
    /// assert!(!res.body().holds_permit());
    /// assert_eq!(layer.host("example.com:80").unwrap().in_flight, 0); // the response is kept
    /// ```
    pub fn release(&mut self) {
        self.permit = None;
    }

    /// The inner client's body.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use tollgate_client::{AdaptiveConfig, PoliteLayer};
    /// use tower::{Layer, ServiceExt, service_fn};
    ///
    /// let client = service_fn(|_req: http::Request<()>| async {
    ///     Ok::<_, Infallible>(http::Response::new(String::from("page")))
    /// });
    /// let polite = PoliteLayer::new(AdaptiveConfig::new(10.0)).layer(client);
    /// let req = http::Request::get("http://example.com/").body(()).unwrap();
    /// let res = futures_executor::block_on(polite.oneshot(req)).unwrap();
    /// assert_eq!(res.body().get_ref(), "page");
    /// ```
    pub fn get_ref(&self) -> &B {
        &self.inner
    }

    /// The inner client's body, mutably.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use tollgate_client::{AdaptiveConfig, PoliteLayer};
    /// use tower::{Layer, ServiceExt, service_fn};
    ///
    /// let client = service_fn(|_req: http::Request<()>| async {
    ///     Ok::<_, Infallible>(http::Response::new(String::from("page")))
    /// });
    /// let polite = PoliteLayer::new(AdaptiveConfig::new(10.0)).layer(client);
    /// let req = http::Request::get("http://example.com/").body(()).unwrap();
    /// let mut res = futures_executor::block_on(polite.oneshot(req)).unwrap();
    /// res.body_mut().get_mut().push('!');
    /// assert_eq!(res.body().get_ref(), "page!");
    /// ```
    pub fn get_mut(&mut self) -> &mut B {
        &mut self.inner
    }

    /// The inner client's body, releasing the host's permit (the body read from here is
    /// not counted in flight); [`into_parts`](PoliteBody::into_parts) keeps it.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use tollgate_client::{AdaptiveConfig, PoliteLayer};
    /// use tower::{Layer, ServiceExt, service_fn};
    ///
    /// let client = service_fn(|_req: http::Request<()>| async {
    ///     Ok::<_, Infallible>(http::Response::new(String::from("page")))
    /// });
    /// let layer = PoliteLayer::new(AdaptiveConfig::new(10.0));
    /// let req = http::Request::get("http://example.com/").body(()).unwrap();
    /// let res = futures_executor::block_on(layer.layer(client).oneshot(req)).unwrap();
    /// let body: String = res.into_body().into_inner();
    /// assert_eq!(body, "page");
    /// assert_eq!(layer.host("example.com:80").unwrap().in_flight, 0);
    /// ```
    pub fn into_inner(self) -> B {
        self.inner
    }

    /// The inner client's body and the host's permit, if the body still holds it: to read
    /// the body some other way and release the permit when done.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use tollgate_client::{AdaptiveConfig, PoliteLayer};
    /// use tower::{Layer, ServiceExt, service_fn};
    ///
    /// let client = service_fn(|_req: http::Request<()>| async {
    ///     Ok::<_, Infallible>(http::Response::new(String::from("page")))
    /// });
    /// let layer = PoliteLayer::new(AdaptiveConfig::new(10.0));
    /// let req = http::Request::get("http://example.com/").body(()).unwrap();
    /// let res = futures_executor::block_on(layer.layer(client).oneshot(req)).unwrap();
    /// let (body, permit) = res.into_body().into_parts();
    /// assert_eq!(body, "page");
    /// assert_eq!(layer.host("example.com:80").unwrap().in_flight, 1); // the permit is held
    /// drop(permit);
    /// assert_eq!(layer.host("example.com:80").unwrap().in_flight, 0);
    /// ```
    pub fn into_parts(self) -> (B, Option<Permit>) {
        (self.inner, self.permit)
    }
}

impl<B: fmt::Debug> fmt::Debug for PoliteBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PoliteBody")
            .field("inner", &self.inner)
            .field("holds_permit", &self.permit.is_some())
            .finish()
    }
}

impl<B: Body> Body for PoliteBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        let mut this = self.project();
        let frame = ready!(this.inner.as_mut().poll_frame(cx));
        // The transfer is over on the last frame, at the end, or on an error (the inner
        // body yields nothing more that the host serves).
        let over = match &frame {
            Some(Ok(_)) => this.inner.is_end_stream(),
            Some(Err(_)) | None => true,
        };
        if over {
            *this.permit = None;
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::task::Waker;

    /// A body of two data frames, then (if `fail`) an error instead of the end.
    struct Two {
        left: u8,
        fail: bool,
    }

    impl Body for Two {
        type Data = &'static [u8];
        type Error = &'static str;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
            Poll::Ready(match self.left {
                0 if self.fail => Some(Err("reset")),
                0 => None,
                _ => {
                    self.left -= 1;
                    Some(Ok(Frame::data(&b"ab"[..])))
                }
            })
        }

        fn size_hint(&self) -> SizeHint {
            SizeHint::with_exact(2 * u64::from(self.left))
        }
    }

    fn poll(body: &mut PoliteBody<Two>) -> Option<Result<Frame<&'static [u8]>, &'static str>> {
        let mut cx = Context::from_waker(Waker::noop());
        match Pin::new(body).poll_frame(&mut cx) {
            Poll::Ready(f) => f,
            Poll::Pending => unreachable!("Two is always ready"),
        }
    }

    #[test]
    fn the_permit_is_held_until_the_end_of_the_stream() {
        let conc = tollgate::InFlight::new(1);
        let permit = conc.try_acquire("h").unwrap();
        let mut body = PoliteBody::new(
            Two {
                left: 2,
                fail: false,
            },
            Some(permit),
        );
        assert_eq!(body.size_hint().exact(), Some(4));
        assert!(poll(&mut body).unwrap().is_ok());
        assert_eq!(conc.in_flight("h"), 1);
        assert!(poll(&mut body).unwrap().is_ok());
        // `Two` does not say `is_end_stream` after its last frame: the end is the `None`.
        assert_eq!(conc.in_flight("h"), 1);
        assert!(poll(&mut body).is_none());
        assert_eq!(conc.in_flight("h"), 0);
        assert!(!body.holds_permit());
    }

    #[test]
    fn an_error_frame_or_a_drop_releases_the_permit() {
        let conc = tollgate::InFlight::new(1);
        let mut body = PoliteBody::new(
            Two {
                left: 0,
                fail: true,
            },
            conc.try_acquire("h"),
        );
        assert_eq!(poll(&mut body).unwrap().unwrap_err(), "reset");
        assert_eq!(conc.in_flight("h"), 0);
        let body = PoliteBody::new(
            Two {
                left: 2,
                fail: false,
            },
            conc.try_acquire("h"),
        );
        assert_eq!(conc.in_flight("h"), 1);
        drop(body);
        assert_eq!(conc.in_flight("h"), 0);
    }

    #[test]
    fn auto_traits_follow_the_inner_body() {
        fn send_sync_unpin<T: Send + Sync + Unpin>() {}
        send_sync_unpin::<PoliteBody<String>>();
    }

    #[test]
    fn a_body_that_says_it_ended_releases_with_its_last_frame() {
        let conc = tollgate::InFlight::new(1);
        let mut body = PoliteBody::new(String::from("page"), conc.try_acquire("h"));
        let mut cx = Context::from_waker(Waker::noop());
        let frame = Pin::new(&mut body).poll_frame(&mut cx);
        assert!(matches!(frame, Poll::Ready(Some(Ok(_)))));
        assert!(body.is_end_stream());
        assert_eq!(conc.in_flight("h"), 0);
    }
}
