//! How a [`Refusal`] becomes the response a client sees: the layer's `R` type parameter, a
//! [`RefusalResponse`] for the wrapped service's response body `B`. The default
//! ([`EmptyBody`]) sends the status and the fields with `B::default()`; [`OnRefusal`] runs
//! a hook of yours ([`Builder::on_refusal`](crate::Builder::on_refusal)), [`ProblemJson`]
//! sends RFC 9457 problem details ([`Builder::problem_json`](crate::Builder::problem_json)).
//!
//! The body type is checked where the layer wraps a service: `RateLimit<S, E, M, R>` is a
//! `Service` only if `R: RefusalResponse<ResBody>` for `S`'s response body `ResBody`, so a
//! hook that makes another body type is a compile error, not a refusal sent without its
//! body.

use http::header::CONTENT_TYPE;
use http::{HeaderValue, Response};

use crate::refusal::Refusal;

/// Makes the response to a refused request, with a body of type `B` (the response body of
/// the service the layer wraps): the layer's `R` type parameter. It is [`EmptyBody`] unless
/// set with [`Builder::on_refusal`](crate::Builder::on_refusal) ([`OnRefusal`]) or
/// [`Builder::problem_json`](crate::Builder::problem_json) ([`ProblemJson`]); it cannot be
/// implemented outside this crate (a closure given to `on_refusal` does all an impl could).
///
/// gRPC requests never reach it: see [`Builder::on_refusal`](crate::Builder::on_refusal).
///
/// # Examples
///
/// Code generic over the layer names it as a bound:
///
/// ```
/// use std::convert::Infallible;
/// use tollgate::{Limiter, Quota};
/// use tollgate_tower::{Global, RateLimitLayer, RefusalResponse, Reject};
/// use tower::{Layer, ServiceExt, service_fn};
///
/// /// The answer to a second request through `layer`, which refuses it.
/// fn second<R>(layer: RateLimitLayer<Global, Reject, R>) -> http::Response<String>
/// where
///     R: RefusalResponse<String>, // refusals made as the service's `String` bodies
/// {
///     let svc = layer.layer(service_fn(|_: http::Request<()>| async {
///         Ok::<_, Infallible>(http::Response::new(String::from("hello")))
///     }));
///     futures_executor::block_on(async {
///         svc.clone().oneshot(http::Request::new(())).await.unwrap();
///         svc.oneshot(http::Request::new(())).await.unwrap()
///     })
/// }
///
/// let limiter = || Limiter::keyed(Quota::per_minute(1));
/// let plain = second(RateLimitLayer::builder(limiter(), Global).build());
/// assert_eq!((plain.status().as_u16(), plain.body().as_str()), (429, ""));
/// let hooked = RateLimitLayer::builder(limiter(), Global)
///     .on_refusal(|refusal| refusal.into_response(String::from("slow down")))
///     .build();
/// let hooked = second(hooked);
/// assert_eq!((hooked.status().as_u16(), hooked.body().as_str()), (429, "slow down"));
/// ```
pub trait RefusalResponse<B>: sealed::Sealed + Send + Sync + 'static {
    /// The response to `refusal`.
    fn respond(&self, refusal: Refusal) -> Response<B>;
}

mod sealed {
    /// Keeps [`RefusalResponse`](super::RefusalResponse) to this crate's types, so that it
    /// can grow without breaking anyone.
    pub trait Sealed {}

    impl Sealed for super::EmptyBody {}
    impl<F> Sealed for super::OnRefusal<F> {}
    impl<F> Sealed for super::ProblemJson<F> {}
}

/// The default [`RefusalResponse`]: the refusal's status and fields (`Retry-After`, the
/// rate-limit fields that are on) with an empty body, `B::default()`.
///
/// # Examples
///
/// ```
/// use std::convert::Infallible;
/// use tollgate::Quota;
/// use tollgate_tower::{EmptyBody, Global, RateLimitLayer, Reject};
/// use tower::{Layer, ServiceExt, service_fn};
///
/// let layer: RateLimitLayer<Global, Reject, EmptyBody> =
///     RateLimitLayer::new(Quota::per_minute(1), Global);
/// let svc = layer.layer(service_fn(|_: http::Request<()>| async {
///     Ok::<_, Infallible>(http::Response::new(String::from("hello")))
/// }));
/// futures_executor::block_on(async {
///     svc.clone().oneshot(http::Request::new(())).await.unwrap();
///     let refused = svc.clone().oneshot(http::Request::new(())).await.unwrap();
///     assert_eq!(refused.status(), 429);
///     assert_eq!(refused.headers()["retry-after"], "60");
///     assert!(refused.headers().get("content-type").is_none());
///     assert_eq!(refused.body(), "");
/// });
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct EmptyBody;

impl<B: Default> RefusalResponse<B> for EmptyBody {
    fn respond(&self, refusal: Refusal) -> Response<B> {
        refusal.into_response(B::default())
    }
}

/// A refusal hook as a [`RefusalResponse`]: from
/// [`Builder::on_refusal`](crate::Builder::on_refusal), whose docs show it at work.
///
/// With a function pointer for `F`, the layer's type can be written out:
///
/// ```
/// use http::Response;
/// use tollgate::{Limiter, Quota};
/// use tollgate_tower::{OnRefusal, PeerIp, RateLimitLayer, Refusal, Reject};
///
/// type Layer = RateLimitLayer<PeerIp, Reject, OnRefusal<fn(Refusal) -> Response<String>>>;
///
/// fn refuse(refusal: Refusal) -> Response<String> {
///     let body = format!("{}\n", refusal.status());
///     refusal.into_response(body)
/// }
///
/// let layer: Layer = RateLimitLayer::builder(Limiter::keyed(Quota::per_second(5)), PeerIp::new())
///     .on_refusal(refuse as fn(Refusal) -> Response<String>)
///     .build();
/// let svc = tower::Layer::layer(&layer, tower::service_fn(|_: http::Request<()>| async {
///     Ok::<_, std::convert::Infallible>(Response::new(String::from("hello")))
/// }));
/// // A request without a peer address has no key: refused, with the hook's body.
/// let refused = tower::ServiceExt::oneshot(svc, http::Request::new(()));
/// assert_eq!(futures_executor::block_on(refused).unwrap().body(), "400 Bad Request\n");
/// ```
pub struct OnRefusal<F>(pub(crate) F);

impl<B, F> RefusalResponse<B> for OnRefusal<F>
where
    F: Fn(Refusal) -> Response<B> + Send + Sync + 'static,
{
    fn respond(&self, refusal: Refusal) -> Response<B> {
        (self.0)(refusal)
    }
}

impl<F> std::fmt::Debug for OnRefusal<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OnRefusal").finish_non_exhaustive()
    }
}

/// RFC 9457 problem details as a [`RefusalResponse`]: from
/// [`Builder::problem_json`](crate::Builder::problem_json), whose docs show it at work. The
/// body is made by `F` from [`Refusal::problem_json`], with `content-type:
/// application/problem+json`.
pub struct ProblemJson<F>(pub(crate) F);

impl<B, F> RefusalResponse<B> for ProblemJson<F>
where
    F: Fn(String) -> B + Send + Sync + 'static,
{
    fn respond(&self, refusal: Refusal) -> Response<B> {
        let body = (self.0)(refusal.problem_json());
        let mut response = refusal.into_response(body);
        response.headers_mut().insert(
            CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        response
    }
}

impl<F> std::fmt::Debug for ProblemJson<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProblemJson").finish_non_exhaustive()
    }
}

/// The answer to a refused request: `respond`'s, or, for a gRPC request, the trailers-only
/// gRPC form with an empty body.
///
/// gRPC refusals bypass `respond` on purpose. A trailers-only answer is a header block that
/// ends the stream, so its body must be empty, and gRPC clients read only `grpc-status`
/// and `grpc-message`: a body from a hook (JSON, say) would make the answer malformed for
/// every gRPC client, and a hook cannot tell from its body type whether the request was
/// gRPC. So the layer answers them itself, with `B::default()` (axum's, tonic's, `Full`
/// and `String` bodies all have one, and the layer required it before hooks too).
///
/// `grpc` is a gRPC request's `content-type` ([`grpc_content_type`]), which the answer
/// carries back (a gRPC-Web client reads only answers of its own type).
///
/// [`grpc_content_type`]: tollgate_http::grpc_content_type
pub(crate) fn answer<B, R>(refusal: Refusal, grpc: Option<HeaderValue>, respond: &R) -> Response<B>
where
    B: Default,
    R: RefusalResponse<B>,
{
    match grpc {
        Some(content_type) => refusal.into_grpc_response_as(content_type),
        None => respond.respond(refusal),
    }
}
