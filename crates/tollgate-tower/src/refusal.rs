//! Answers made without the inner service (`429`, `400`, `503`, `413`), and how they are rendered:
//! plain HTTP with an empty body, with an RFC 9457 `application/problem+json` body, or, for
//! a gRPC request, a trailers-only gRPC response.

use std::any::Any;
use std::sync::Arc;

use http::header::CONTENT_TYPE;
use http::request::Parts;
use http::{HeaderMap, HeaderName, HeaderValue, Response, StatusCode};

/// Why the layer answers by itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `429`: over the limit.
    RateLimited,
    /// `400`: no key, under `MissingKey::Reject`.
    MissingKey,
    /// `503`: a full table refused a new key.
    Unavailable,
    /// `413`: the request costs more cells than the limit's burst
    /// ([`Builder::cost_for`](crate::Builder::cost_for)): it can never be admitted, so
    /// retrying never helps (no `Retry-After`).
    TooCostly,
}

/// Makes a response body of type `B` from a problem+json text; stored type-erased as
/// `Arc<dyn Any>` holding a `MakeBody<B>`.
pub(crate) type MakeBody<B> = Box<dyn Fn(String) -> B + Send + Sync>;

/// A response decided without the inner service.
pub(crate) struct Rejection {
    pub(crate) kind: Kind,
    pub(crate) headers: HeaderMap,
    /// The request was gRPC: answer as gRPC does.
    pub(crate) grpc: bool,
    /// The problem+json text and the body maker, if problem bodies are on (boxed: a
    /// rejection travels in `Result`s).
    pub(crate) problem: Option<Box<(String, Arc<dyn Any + Send + Sync>)>>,
}

impl std::fmt::Debug for Rejection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rejection")
            .field("kind", &self.kind)
            .field("headers", &self.headers)
            .field("grpc", &self.grpc)
            .finish_non_exhaustive()
    }
}

const GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");
const GRPC_MESSAGE: HeaderName = HeaderName::from_static("grpc-message");

/// Whether a request is gRPC (`content-type: application/grpc`, `application/grpc+proto`,
/// ...).
pub(crate) fn is_grpc(parts: &Parts) -> bool {
    parts
        .headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| {
            let ct = ct.trim_start();
            ct.get(..16)
                .is_some_and(|p| p.eq_ignore_ascii_case("application/grpc"))
                && matches!(ct.as_bytes().get(16), None | Some(b'+' | b';'))
        })
}

impl Kind {
    pub(crate) fn status(self) -> StatusCode {
        match self {
            Kind::RateLimited => StatusCode::TOO_MANY_REQUESTS,
            Kind::MissingKey => StatusCode::BAD_REQUEST,
            Kind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            Kind::TooCostly => StatusCode::PAYLOAD_TOO_LARGE,
        }
    }

    /// The gRPC status code: RESOURCE_EXHAUSTED, INVALID_ARGUMENT, UNAVAILABLE,
    /// OUT_OF_RANGE.
    fn grpc_status(self) -> &'static str {
        match self {
            Kind::RateLimited => "8",
            Kind::MissingKey => "3",
            Kind::Unavailable => "14",
            Kind::TooCostly => "11",
        }
    }

    /// A one-line description (printable ASCII without `%`, `"` or `\`: a valid gRPC
    /// message and JSON string as is).
    pub(crate) fn message(self) -> &'static str {
        match self {
            Kind::RateLimited => "rate limit exceeded",
            Kind::MissingKey => "the request carries no rate-limit key",
            Kind::Unavailable => "the rate limiter has no room for a new client",
            Kind::TooCostly => "the request costs more than the rate limit ever admits at once",
        }
    }
}

/// The RFC 9457 problem details of a refusal: `type` is `about:blank`, so `title` is the
/// status phrase; `detail` says which policy refused and when to retry.
pub(crate) fn problem_json(kind: Kind, policy: Option<&str>, retry_after: Option<u64>) -> String {
    let status = kind.status();
    let mut detail = String::from(kind.message());
    if let Some(name) = policy {
        // `name` is a structured-field String: quoted printable ASCII, `"` and `\` escaped.
        let raw = name.get(1..name.len() - 1).unwrap_or("");
        detail.push_str(" (policy ");
        let mut escaped = false;
        for c in raw.chars() {
            if c == '\\' && !escaped {
                escaped = true;
                continue;
            }
            escaped = false;
            if c == '"' || c == '\\' {
                detail.push('\\');
            }
            detail.push(c);
        }
        detail.push(')');
    }
    let mut json = format!(
        "{{\"type\":\"about:blank\",\"title\":\"{}\",\"status\":{},\"detail\":\"{detail}",
        status.canonical_reason().unwrap_or(""),
        status.as_u16(),
    );
    if let Some(secs) = retry_after {
        json.push_str(&format!(
            "; retry after {secs} s\",\"retry_after\":{secs}}}"
        ));
    } else {
        json.push_str("\"}");
    }
    json
}

impl Rejection {
    pub(crate) fn into_response<B: Default + 'static>(self) -> Response<B> {
        let mut response = Response::new(B::default());
        *response.headers_mut() = self.headers;
        if self.grpc {
            // Trailers-only: HTTP 200 whose header block carries the gRPC status, and an
            // empty body ending the stream.
            let headers = response.headers_mut();
            headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
            headers.insert(
                GRPC_STATUS,
                HeaderValue::from_static(self.kind.grpc_status()),
            );
            headers.insert(GRPC_MESSAGE, HeaderValue::from_static(self.kind.message()));
            return response;
        }
        *response.status_mut() = self.kind.status();
        if let Some((json, make)) = self.problem.map(|p| *p) {
            if let Some(make) = make.downcast_ref::<MakeBody<B>>() {
                *response.body_mut() = make(json);
                response.headers_mut().insert(
                    CONTENT_TYPE,
                    HeaderValue::from_static("application/problem+json"),
                );
            }
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(ct: &str) -> Parts {
        http::Request::get("/")
            .header("content-type", ct)
            .body(())
            .unwrap()
            .into_parts()
            .0
    }

    #[test]
    fn grpc_content_types() {
        for ct in [
            "application/grpc",
            "application/grpc+proto",
            "Application/GRPC;x=1",
        ] {
            assert!(is_grpc(&parts(ct)), "{ct}");
        }
        for ct in ["application/grpcx", "application/json", "text/grpc", ""] {
            assert!(!is_grpc(&parts(ct)), "{ct}");
        }
    }

    #[test]
    fn problem_texts() {
        assert_eq!(
            problem_json(Kind::RateLimited, Some(r#""per \"ip\\\"""#), Some(3)),
            r#"{"type":"about:blank","title":"Too Many Requests","status":429,"detail":"rate limit exceeded (policy per \"ip\\\"); retry after 3 s","retry_after":3}"#
        );
        assert_eq!(
            problem_json(Kind::MissingKey, None, None),
            r#"{"type":"about:blank","title":"Bad Request","status":400,"detail":"the request carries no rate-limit key"}"#
        );
    }
}
