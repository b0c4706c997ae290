//! [`ResponseFuture`]: the inner service's future with the rate-limit fields added, a
//! refusal answered at once, or (in delay mode) a bounded wait before the inner call.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use http::{Request, Response};
use pin_project_lite::pin_project;
use tower_service::Service;

use crate::fields::{Fields, Format};

/// What a delay-mode wait ends in: the fields for the response, or the response to its
/// refusal (`T`, the inner service's response type).
pub(crate) type WaitOutcome<T> = Result<Option<Fields>, T>;

/// A delay-mode wait (boxed: it borrows the limiter it owns; and it makes its refusal's
/// response itself, so that the layer's `RefusalResponse` type is erased here and the
/// response future does not carry it).
pub(crate) type BoxWait<T> = Pin<Box<dyn Future<Output = WaitOutcome<T>> + Send + 'static>>;

pin_project! {
    /// The response future of [`RateLimit`](crate::RateLimit): the inner service's response
    /// with the rate-limit fields added, or a refusal (`429`, `400`, `503`, `413`) made
    /// without calling it.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use tollgate::Quota;
    /// use tollgate_tower::{Global, RateLimitLayer, ResponseFuture};
    /// use tower::{Layer, Service, service_fn};
    ///
    /// let hello = service_fn(|_: http::Request<()>| async {
    ///     Ok::<_, Infallible>(http::Response::new(String::from("hello")))
    /// });
    /// let mut svc = RateLimitLayer::new(Quota::per_minute(1), Global).layer(hello);
    /// let fut: ResponseFuture<_, ()> = svc.call(http::Request::new(()));
    /// let response = futures_executor::block_on(fut).unwrap();
    /// assert_eq!(response.status(), 200);
    /// ```
    pub struct ResponseFuture<S, B>
    where
        S: Service<Request<B>>,
    {
        // The inner call's future, a field of its own rather than a field of an enum's
        // variants, so that the common call builds it in place: as a variant's field it was
        // built aside and then moved in, a copy of the future (and the request it holds, for
        // a handler that has not run yet) on every call.
        #[pin]
        fut: Option<S::Future>,
        rest: Rest<S, B>,
    }
}

/// What goes with the inner future (`Forward`, `Call`), or stands for it (`Respond`,
/// `Wait`, which have none).
enum Rest<S, B>
where
    S: Service<Request<B>>,
{
    // No fields to add (fields off, or none to give): the inner future's poll is returned
    // untouched.
    Forward,
    Call {
        fields: Option<Fields>,
        format: Format,
    },
    Respond {
        response: Option<S::Response>,
    },
    Wait {
        wait: BoxWait<S::Response>,
        // Boxed: the request is large, and only delay mode waits. The service is a clone
        // that nothing has readied: a request asleep holds none of the inner service's
        // capacity (a `ConcurrencyLimit`'s permit, a `Buffer`'s slot), which other clients
        // need meanwhile; it is readied once the wait is over.
        call: Option<Box<(S, Request<B>)>>,
        format: Format,
    },
    /// Delay mode, the wait over: readying the service for the call.
    Readying {
        call: Option<Box<(S, Request<B>)>>,
        fields: Option<Fields>,
        format: Format,
    },
}

impl<S: Service<Request<B>>, B> ResponseFuture<S, B> {
    /// The inner call's future, adding `fields` (if any) to its response.
    pub(crate) fn call(fut: S::Future, fields: Option<Fields>, format: Format) -> Self {
        match fields {
            None => ResponseFuture::forward(fut),
            Some(fields) => ResponseFuture {
                fut: Some(fut),
                rest: Rest::Call {
                    fields: Some(fields),
                    format,
                },
            },
        }
    }

    /// The inner call's future, nothing added.
    pub(crate) fn forward(fut: S::Future) -> Self {
        ResponseFuture {
            fut: Some(fut),
            rest: Rest::Forward,
        }
    }

    /// A refusal's response, made already.
    pub(crate) fn respond(response: S::Response) -> Self {
        ResponseFuture {
            fut: None,
            rest: Rest::Respond {
                response: Some(response),
            },
        }
    }

    /// Delay mode: `wait`, then ready `service` (a clone not readied yet) and call it.
    pub(crate) fn wait(
        wait: BoxWait<S::Response>,
        service: S,
        req: Request<B>,
        format: Format,
    ) -> Self {
        ResponseFuture {
            fut: None,
            rest: Rest::Wait {
                wait,
                format,
                call: Some(Box::new((service, req))),
            },
        }
    }
}

impl<S, B, ResBody> Future for ResponseFuture<S, B>
where
    S: Service<Request<B>, Response = Response<ResBody>>,
{
    type Output = Result<Response<ResBody>, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            if let Some(fut) = this.fut.as_mut().as_pin_mut() {
                // The common case first: the inner poll returned untouched.
                if let Rest::Forward = this.rest {
                    return fut.poll(cx);
                }
                let mut response = ready!(fut.poll(cx))?;
                if let Rest::Call { fields, format } = this.rest {
                    if let Some(fields) = fields.take() {
                        fields.insert_into(response.headers_mut(), *format);
                    }
                }
                return Poll::Ready(Ok(response));
            }
            match this.rest {
                Rest::Respond { response } => {
                    let response = response.take().expect("polled after completion");
                    return Poll::Ready(Ok(response));
                }
                Rest::Wait { wait, call, format } => {
                    let format = *format;
                    let fields = match ready!(wait.as_mut().poll(cx)) {
                        Ok(fields) => fields,
                        Err(refused) => {
                            *this.rest = Rest::Respond { response: None };
                            return Poll::Ready(Ok(refused));
                        }
                    };
                    *this.rest = Rest::Readying {
                        call: call.take(),
                        fields,
                        format,
                    };
                }
                Rest::Readying {
                    call,
                    fields,
                    format,
                } => {
                    let (service, _) = &mut **call.as_mut().expect("polled after completion");
                    ready!(service.poll_ready(cx))?;
                    let (mut service, req) = *call.take().expect("polled after completion");
                    this.fut.set(Some(service.call(req)));
                    *this.rest = match fields.take() {
                        None => Rest::Forward,
                        fields => Rest::Call {
                            fields,
                            format: *format,
                        },
                    };
                }
                Rest::Forward | Rest::Call { .. } => unreachable!("a call has its future"),
            }
        }
    }
}

impl<S: Service<Request<B>>, B> fmt::Debug for ResponseFuture<S, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}
