//! The limit at work in a Pingora proxy: [`ProxyLimit::request_filter`] keys, checks (and in
//! delay mode waits), and writes a refusal to the session; [`ProxyLimit::response_filter`]
//! adds the fields to an admitted request's response.

use std::future::{Future, poll_fn};
use std::net::IpAddr;
use std::pin::pin;
use std::task::Poll;
use std::time::Duration;

use bytes::Bytes;
use http::HeaderMap;
use http::header::CONTENT_TYPE;
use pingora_core::protocols::http::server::Session as HttpSession;
use pingora_http::ResponseHeader;
use pingora_proxy::Session;
use tollgate_http::{Fields, Refusal, RefusalReason, grpc_content_type};

use crate::limit::{Checked, ProxyLimit};

impl ProxyLimit {
    /// Checks the session's request; call it from `ProxyHttp::request_filter` and return
    /// what it returns. `Ok(false)`: admitted (or admitted after a wait in delay mode), and
    /// `checked`, the request's context, holds the fields for
    /// [`response_filter`](Self::response_filter). `Ok(true)`: refused, and the refusal
    /// (status, `Retry-After`, the fields, a problem+json body) has been written to the
    /// session, so the proxy must not go upstream.
    ///
    /// The key is the client's address: the connection's peer, or the client behind the
    /// proxies the [`ClientIp`](crate::ClientIp) trusts (`X-Forwarded-For` walked from the
    /// right). The limiter's clock is read once per request.
    ///
    /// # Errors
    ///
    /// Pingora's error when writing the refusal to the session fails.
    ///
    /// # Cancel safety
    ///
    /// A wait in delay mode that is dropped leaves no cell spent. Pingora does not drop this
    /// future when the client hangs up, so the wait itself watches the connection of a
    /// request without a body and gives up when it closes, with Pingora's error for it made
    /// a downstream one, as Pingora's own proxy loop makes it (a closed connection is
    /// answered nothing). As there, a client that half-closes its side after its request
    /// counts as gone, and one that sends a pipelined request in a later packet while the
    /// first waits gets Pingora's error answer (400) for it. A request with a body waits its
    /// turn whatever its client does.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use async_trait::async_trait;
    /// use pingora_core::upstreams::peer::HttpPeer;
    /// use pingora_http::ResponseHeader;
    /// use pingora_proxy::{ProxyHttp, Session};
    /// use tollgate_pingora::{Checked, ProxyLimit};
    ///
    /// struct Proxy {
    ///     limit: ProxyLimit,
    ///     upstream: String,
    /// }
    ///
    /// #[async_trait]
    /// impl ProxyHttp for Proxy {
    ///     type CTX = Checked;
    ///
    ///     fn new_ctx(&self) -> Checked {
    ///         Checked::default()
    ///     }
    ///
    ///     async fn request_filter(&self, session: &mut Session, ctx: &mut Checked) -> pingora_core::Result<bool> {
    ///         self.limit.request_filter(session, ctx).await
    ///     }
    ///
    ///     async fn upstream_peer(&self, _: &mut Session, _: &mut Checked) -> pingora_core::Result<Box<HttpPeer>> {
    ///         Ok(Box::new(HttpPeer::new(self.upstream.as_str(), false, String::new())))
    ///     }
    ///
    ///     async fn response_filter(
    ///         &self,
    ///         _: &mut Session,
    ///         response: &mut ResponseHeader,
    ///         ctx: &mut Checked,
    ///     ) -> pingora_core::Result<()> {
    ///         self.limit.response_filter(response, ctx)
    ///     }
    /// }
    /// ```
    pub async fn request_filter(
        &self,
        session: &mut Session,
        checked: &mut Checked,
    ) -> pingora_core::Result<bool> {
        let peer = session
            .client_addr()
            .and_then(|addr| addr.as_inet())
            .map(|addr| addr.ip());
        let verdict = match self.key(peer, &session.req_header().headers) {
            Ok(key) => match self.check_key(&key, self.limiter().now()) {
                Err(refusal) if refusal.reason() == RefusalReason::RateLimited => {
                    match self.max_delay() {
                        Some(max) => self.wait_unless_gone(session, &key, max).await?,
                        None => Err(refusal),
                    }
                }
                verdict => verdict,
            },
            Err(refusal) => Err(refusal),
        };
        match verdict {
            Ok(admitted) => {
                *checked = admitted;
                Ok(false)
            }
            Err(refusal) => {
                write_refusal(session, refusal).await?;
                Ok(true)
            }
        }
    }

    /// Adds the fields of an admitted request to its response; call it from
    /// `ProxyHttp::response_filter` with the context [`request_filter`](Self::request_filter)
    /// filled. A context that holds no fields (a request that was not checked) adds none.
    /// Fields the upstream's response has already are kept and combined with these, as
    /// [`Fields::insert_into`](tollgate_http::Fields::insert_into) says: this policy's items
    /// after the upstream's in the `RateLimit` lists.
    ///
    /// # Errors
    ///
    /// Pingora's error if the header refuses a field (it does not for these values).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::Quota;
    /// use tollgate_pingora::{ClientIp, ProxyLimit};
    ///
    /// let limit = ProxyLimit::new(Quota::per_second(10), ClientIp::trusting::<[&str; 0]>([]).unwrap());
    /// let mut checked = limit.check(Some("192.0.2.1".parse().unwrap()), &http::HeaderMap::new()).unwrap();
    /// let mut response = pingora_http::ResponseHeader::build(200, None).unwrap();
    /// limit.response_filter(&mut response, &mut checked).unwrap();
    /// assert_eq!(response.headers["ratelimit-policy"], "\"default\";q=10;w=1");
    /// assert_eq!(response.headers["ratelimit"], "\"default\";r=9;t=1");
    /// ```
    pub fn response_filter(
        &self,
        response: &mut ResponseHeader,
        checked: &mut Checked,
    ) -> pingora_core::Result<()> {
        let Some(fields) = checked.fields.take() else {
            return Ok(());
        };
        let format = self.format();
        let mut headers = HeaderMap::new();
        for name in Fields::names(format) {
            for value in response.headers.get_all(&name) {
                headers.append(name.clone(), value.clone());
            }
        }
        let upstream = headers.clone();
        fields.insert_into(&mut headers, format);
        for name in headers.keys() {
            // A field the upstream sent and this leaves as it was keeps its place and its
            // name's case; a changed one is written anew, every line of it.
            if headers
                .get_all(name)
                .iter()
                .eq(upstream.get_all(name).iter())
            {
                continue;
            }
            response.remove_header(name);
            for value in headers.get_all(name) {
                response.append_header(name.clone(), value.clone())?;
            }
        }
        Ok(())
    }

    /// Delay mode: [`wait`](Self::wait), unless the client hangs up first. Pingora does not
    /// drop `request_filter` when its client goes, so a request without a body watches its
    /// connection while it waits (there is nothing else on it to read) and gives up, its
    /// cell given back, when the connection closes: Pingora's error for the close. A request
    /// with a body waits unwatched: watching would read its body, which the upstream needs.
    #[allow(clippy::result_large_err)]
    async fn wait_unless_gone(
        &self,
        session: &mut Session,
        key: &IpAddr,
        max: Duration,
    ) -> pingora_core::Result<Result<Checked, Refusal>> {
        let mut wait = pin!(self.wait(key, max));
        if !session.is_body_empty() {
            return Ok(wait.await);
        }
        let mut gone = pin!(session.downstream_session.read_body_or_idle(true));
        let mut watching = true;
        poll_fn(|cx| {
            if let Poll::Ready(verdict) = wait.as_mut().poll(cx) {
                return Poll::Ready(Ok(verdict));
            }
            if watching {
                match gone.as_mut().poll(cx) {
                    // The client's side: Pingora answers nothing to a connection it has
                    // found closed (as its own proxy loop marks it), rather than a 500.
                    Poll::Ready(Err(closed)) => return Poll::Ready(Err(closed.into_down())),
                    // Not a close (nothing else is expected here): wait on, unwatched.
                    Poll::Ready(Ok(_)) => watching = false,
                    Poll::Pending => {}
                }
            }
            Poll::Pending
        })
        .await
    }

    /// Delay mode: waits up to `max` for `key`'s turn, then reads its state back for the
    /// fields (the wait returns no `Admitted`; a peek answers as a check would, one cell
    /// further on than the state is).
    #[allow(clippy::result_large_err)]
    async fn wait(&self, key: &IpAddr, max: Duration) -> Result<Checked, Refusal> {
        let limiter = self.limiter();
        if let Err(error) = limiter.until_ready(key).within(max).await {
            return Err(self.refusal(error));
        }
        Ok(Checked {
            fields: Fields::after_wait(self.policy(), limiter.quota(), limiter.peek(key)),
        })
    }
}

/// Writes `refusal` to the session: its status and fields, and its problem details; to a
/// gRPC request, the gRPC answer tollgate-tower gives (trailers-only: HTTP 200 whose one
/// header block carries `grpc-status`, the stream ended), which a gRPC client reads as its
/// status (`RESOURCE_EXHAUSTED` for a rate limit) rather than as a malformed message.
async fn write_refusal(session: &mut Session, refusal: Refusal) -> pingora_core::Result<()> {
    if let Some(content_type) = grpc_content_type(session.req_header()) {
        let answer = refusal.into_grpc_response_as::<()>(content_type);
        let mut header = ResponseHeader::build(answer.status(), Some(answer.headers().len() + 1))?;
        for (name, value) in answer.headers() {
            header.append_header(name.clone(), value.clone())?;
        }
        // Trailers-only is one HEADERS frame that ends the stream. The proxy session's
        // writer drops its end-of-stream flag on HTTP/2 (the stream would end with an empty
        // DATA frame after headers that a strict gRPC client takes for initial metadata), so
        // HTTP/2 is written to the stream itself, after the modules. Over HTTP/1.1 an
        // empty body.
        if session.downstream_session.is_http2() {
            // The proxy session's own writer, with the flag kept: its modules (a gRPC-web
            // bridge, compression) see the header first.
            session
                .downstream_modules_ctx
                .response_header_filter(&mut header, true)
                .await?;
            if let HttpSession::H2(stream) = &mut *session.downstream_session {
                return stream.write_response_header(Box::new(header), true);
            }
        }
        header.set_content_length(0)?;
        return session.write_response_header(Box::new(header), true).await;
    }
    let body = Bytes::from(refusal.problem_json());
    let mut header = ResponseHeader::build(refusal.status(), Some(refusal.headers().len() + 2))?;
    for (name, value) in refusal.headers() {
        header.insert_header(name.clone(), value.clone())?;
    }
    header.insert_header(CONTENT_TYPE, "application/problem+json")?;
    header.set_content_length(body.len())?;
    session
        .write_response_header(Box::new(header), false)
        .await?;
    session.write_response_body(Some(body), true).await
}
