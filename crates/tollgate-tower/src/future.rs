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
        #[pin]
        state: State<S, B>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<S, B>
    where
        S: Service<Request<B>>,
    {
        // No fields to add (fields off, or none to give): the inner future as it is, so
        // that its poll is returned untouched and nothing of the fields is built or moved.
        Forward { #[pin] fut: S::Future },
        Call { #[pin] fut: S::Future, fields: Option<Fields>, format: Format },
        Respond { response: Option<S::Response> },
        Wait {
            wait: BoxWait<S::Response>,
            service: Option<S>,
            req: Option<Request<B>>,
            format: Format,
        },
    }
}

impl<S: Service<Request<B>>, B> ResponseFuture<S, B> {
    /// The inner call's future, adding `fields` (if any) to its response.
    pub(crate) fn call(fut: S::Future, fields: Option<Fields>, format: Format) -> Self {
        match fields {
            None => ResponseFuture::forward(fut),
            Some(fields) => ResponseFuture {
                state: State::Call {
                    fut,
                    fields: Some(fields),
                    format,
                },
            },
        }
    }

    /// The inner call's future, nothing added.
    pub(crate) fn forward(fut: S::Future) -> Self {
        ResponseFuture {
            state: State::Forward { fut },
        }
    }

    /// A refusal's response, made already.
    pub(crate) fn respond(response: S::Response) -> Self {
        ResponseFuture {
            state: State::Respond {
                response: Some(response),
            },
        }
    }

    pub(crate) fn wait(
        wait: BoxWait<S::Response>,
        service: S,
        req: Request<B>,
        format: Format,
    ) -> Self {
        ResponseFuture {
            state: State::Wait {
                wait,
                format,
                service: Some(service),
                req: Some(req),
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
        // The common state first, ahead of the loop the others need.
        if let StateProj::Forward { fut } = this.state.as_mut().project() {
            return fut.poll(cx);
        }
        loop {
            match this.state.as_mut().project() {
                StateProj::Forward { fut } => return fut.poll(cx),
                StateProj::Call {
                    fut,
                    fields,
                    format,
                } => {
                    let mut response = ready!(fut.poll(cx))?;
                    if let Some(fields) = fields.take() {
                        fields.insert_into(response.headers_mut(), *format);
                    }
                    return Poll::Ready(Ok(response));
                }
                StateProj::Respond { response } => {
                    let response = response.take().expect("polled after completion");
                    return Poll::Ready(Ok(response));
                }
                StateProj::Wait {
                    wait,
                    service,
                    req,
                    format,
                } => {
                    let format = *format;
                    let fields = match ready!(wait.as_mut().poll(cx)) {
                        Ok(fields) => fields,
                        Err(refused) => {
                            this.state.set(State::Respond { response: None });
                            return Poll::Ready(Ok(refused));
                        }
                    };
                    let mut service = service.take().expect("polled after completion");
                    let req = req.take().expect("polled after completion");
                    let fut = service.call(req);
                    this.state.set(match fields {
                        None => State::Forward { fut },
                        fields => State::Call {
                            fut,
                            fields,
                            format,
                        },
                    });
                }
            }
        }
    }
}

impl<S: Service<Request<B>>, B> fmt::Debug for ResponseFuture<S, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}
