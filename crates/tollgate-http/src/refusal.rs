//! What the layer decided when it answers without the inner service (`429`, `400`, `503`,
//! `413`): a [`Refusal`], its [`RefusalReason`], the RFC 9457 problem text and the gRPC
//! trailers-only form. How a refusal becomes the response a client sees, the default or a
//! hook, is in `respond.rs`.

use std::num::NonZeroU64;
use std::time::Duration;

use http::header::CONTENT_TYPE;
use http::request::Parts;
use http::{HeaderMap, HeaderName, HeaderValue, Response, StatusCode};

/// Why the layer answered a request by itself: see [`Refusal::reason`].
///
/// # Examples
///
/// ```
/// use tollgate_http::RefusalReason;
///
/// assert_eq!(RefusalReason::RateLimited.status(), 429);
/// assert_eq!(RefusalReason::MissingKey.status(), 400);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RefusalReason {
    /// `429 Too Many Requests`: over the limit of the policy that refused.
    RateLimited,
    /// `400 Bad Request`: the request has no key, under
    /// `MissingKey::Reject` (tollgate-tower).
    MissingKey,
    /// `503 Service Unavailable`: a full table refused a new key (the server is out of room,
    /// not the client over its rate).
    Unavailable,
    /// `413 Content Too Large`: the request costs more cells than the policy's burst
    /// (`Builder::cost_for` (tollgate-tower)), so it can never be admitted and
    /// retrying never helps (no `Retry-After`).
    TooCostly,
}

impl RefusalReason {
    /// The HTTP status the layer answers with.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate_http::RefusalReason;
    ///
    /// assert_eq!(RefusalReason::Unavailable.status(), 503);
    /// assert_eq!(RefusalReason::TooCostly.status(), 413);
    /// ```
    pub fn status(self) -> StatusCode {
        match self {
            RefusalReason::RateLimited => StatusCode::TOO_MANY_REQUESTS,
            RefusalReason::MissingKey => StatusCode::BAD_REQUEST,
            RefusalReason::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            RefusalReason::TooCostly => StatusCode::PAYLOAD_TOO_LARGE,
        }
    }

    /// The gRPC status code: RESOURCE_EXHAUSTED, INVALID_ARGUMENT, UNAVAILABLE,
    /// OUT_OF_RANGE.
    fn grpc_status(self) -> &'static str {
        match self {
            RefusalReason::RateLimited => "8",
            RefusalReason::MissingKey => "3",
            RefusalReason::Unavailable => "14",
            RefusalReason::TooCostly => "11",
        }
    }

    /// A one-line description (printable ASCII without `%`, `"` or `\`: a valid gRPC
    /// message and JSON string as is).
    fn message(self) -> &'static str {
        match self {
            RefusalReason::RateLimited => "rate limit exceeded",
            RefusalReason::MissingKey => "the request carries no rate-limit key",
            RefusalReason::Unavailable => "the rate limiter has no room for a new client",
            RefusalReason::TooCostly => {
                "the request costs more than the rate limit ever admits at once"
            }
        }
    }
}

/// A request the layer refused, as a refusal hook
/// (`Builder::on_refusal` (tollgate-tower)) gets it: why, which policy, when
/// to retry, and the fields prepared for the response (`Retry-After` and the rate-limit
/// fields that are on). [`into_response`](Refusal::into_response) wraps a body of yours
/// in the response the layer would send.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::Quota;
/// use tollgate_http::{Fields, Format, Policy, Refusal, RefusalReason};
///
/// let policy = Policy::new("global");
/// let quota = Quota::per_minute(1);
/// let mut headers = http::HeaderMap::new();
/// Fields::refused(&policy, quota, Duration::from_secs(60)).insert_into(&mut headers, Format::IETF);
/// let refusal = Refusal::new(RefusalReason::RateLimited, headers, Some("global"), Some(60));
/// assert_eq!(refusal.reason(), RefusalReason::RateLimited);
/// assert_eq!(refusal.policy(), Some("global"));
/// assert_eq!(refusal.retry_after(), Some(Duration::from_secs(60)));
/// let body = format!("{} {}", refusal.status().as_u16(), refusal.problem_json());
/// let refused = refusal.into_response(body);
/// assert_eq!(refused.status(), 429);
/// assert_eq!(refused.headers()["retry-after"], "60");
/// assert_eq!(refused.headers()["ratelimit-policy"], "\"global\";q=1;w=60");
/// assert!(refused.body().starts_with(r#"429 {"type":"about:blank""#));
/// ```
// Compact (`Box<str>`, `NonZeroU64`): a refusal travels in `Result`s beside what the
// stacked limits admit, and is no larger.
#[derive(Debug, Clone)]
pub struct Refusal {
    reason: RefusalReason,
    headers: HeaderMap,
    /// The refusing policy's name as given (none for a missing key or a full table).
    policy: Option<Box<str>>,
    /// `Retry-After`, in seconds (at least 1).
    retry_after: Option<NonZeroU64>,
}

const GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");
const GRPC_MESSAGE: HeaderName = HeaderName::from_static("grpc-message");

impl Refusal {
    /// A refusal for `reason`, answered with `headers` (the fields prepared for the
    /// response, see [`Fields::insert_into`](crate::Fields::insert_into)); `policy` is the refusing
    /// policy's name as given, `retry_after` the `Retry-After` seconds (`None` or 0: none).
    ///
    /// # Examples
    ///
    /// See [`Refusal`].
    pub fn new(
        reason: RefusalReason,
        headers: HeaderMap,
        policy: Option<&str>,
        retry_after: Option<u64>,
    ) -> Refusal {
        Refusal {
            reason,
            headers,
            policy: policy.map(Box::from),
            retry_after: retry_after.and_then(NonZeroU64::new),
        }
    }

    /// Why the request was refused.
    ///
    /// # Examples
    ///
    /// See [`Refusal`].
    pub fn reason(&self) -> RefusalReason {
        self.reason
    }

    /// The status the layer answers with ([`RefusalReason::status`]).
    ///
    /// # Examples
    ///
    /// See [`Refusal`].
    pub fn status(&self) -> StatusCode {
        self.reason.status()
    }

    /// The name of the policy that refused (`Builder::policy_name` (tollgate-tower), or a stacked
    /// limit's name), as given; `None` for a missing key and a full table, which no policy
    /// refused.
    ///
    ///
    /// # Examples
    ///
    /// See [`Refusal`].
    pub fn policy(&self) -> Option<&str> {
        self.policy.as_deref()
    }

    /// When the client may retry, in whole seconds rounded up (as `Retry-After` says): for a
    /// `429`, and `1` for a full table's `503`; `None` for a missing key and a request that
    /// costs more than the burst, which retrying never helps.
    ///
    /// # Examples
    ///
    /// See [`Refusal`].
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after.map(|secs| Duration::from_secs(secs.get()))
    }

    /// The fields the layer prepared for the response: `Retry-After`, and the rate-limit
    /// fields that are on (`Builder::headers` (tollgate-tower),
    /// `Builder::legacy_headers` (tollgate-tower)).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::Quota;
    /// use tollgate_http::{Fields, Format, Policy, Refusal, RefusalReason};
    ///
    /// let mut headers = http::HeaderMap::new();
    /// let fields = Fields::refused(&Policy::new("default"), Quota::per_minute(1), Duration::from_secs(60));
    /// fields.insert_into(&mut headers, Format::IETF);
    /// let refusal = Refusal::new(RefusalReason::RateLimited, headers, Some("default"), Some(60));
    /// let names: Vec<&str> = refusal.headers().keys().map(|n| n.as_str()).collect();
    /// assert_eq!(names, ["ratelimit-policy", "ratelimit", "retry-after"]);
    /// assert_eq!(refusal.headers()["retry-after"], "60");
    /// ```
    pub fn headers(&self) -> &HeaderMap {
        &self.headers
    }

    /// The RFC 9457 problem details of the refusal, as JSON text: `type` is `about:blank`,
    /// so `title` is the status phrase; `detail` says which policy refused and when to
    /// retry; `retry_after` (seconds) is there when `Retry-After` is.
    ///
    /// # Examples
    ///
    /// See [`Refusal`], and `Builder::problem_json` (tollgate-tower), which
    /// sends it.
    pub fn problem_json(&self) -> String {
        let retry_after = self.retry_after.map(NonZeroU64::get);
        problem_json(self.reason, self.policy.as_deref(), retry_after)
    }

    /// The response the layer would send, around `body`: the refusal's status and its
    /// fields. Add to it what you like (a `content-type` to go with your body, say).
    ///
    /// # Examples
    ///
    /// See `Builder::on_refusal` (tollgate-tower).
    pub fn into_response<B>(self, body: B) -> Response<B> {
        let mut response = Response::new(body);
        *response.status_mut() = self.reason.status();
        *response.headers_mut() = self.headers;
        response
    }

    /// The refusal as a gRPC answer, trailers-only: HTTP 200 whose one header block carries
    /// the gRPC status, and an empty body ending the stream.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate_http::{Refusal, RefusalReason};
    ///
    /// let refusal = Refusal::new(RefusalReason::RateLimited, http::HeaderMap::new(), None, Some(2));
    /// let response = refusal.into_grpc_response::<()>();
    /// assert_eq!(response.status(), 200);
    /// assert_eq!(response.headers()["grpc-status"], "8");
    /// ```
    pub fn into_grpc_response<B: Default>(self) -> Response<B> {
        self.into_grpc_response_as(HeaderValue::from_static("application/grpc"))
    }

    /// [`into_grpc_response`](Refusal::into_grpc_response) with `content_type`: the
    /// request's own, from [`grpc_content_type`], so that a gRPC-Web client (whose answers
    /// are `application/grpc-web...`) reads the status too.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate_http::{Refusal, RefusalReason, grpc_content_type};
    ///
    /// let (request, ()) = http::Request::post("/svc/M")
    ///     .header("content-type", "application/grpc-web+proto")
    ///     .body(())
    ///     .unwrap()
    ///     .into_parts();
    /// let content_type = grpc_content_type(&request).expect("a gRPC-Web request");
    /// let refusal = Refusal::new(RefusalReason::RateLimited, http::HeaderMap::new(), None, Some(2));
    /// let response = refusal.into_grpc_response_as::<()>(content_type);
    /// assert_eq!(response.headers()["content-type"], "application/grpc-web+proto");
    /// assert_eq!(response.headers()["grpc-status"], "8");
    /// ```
    pub fn into_grpc_response_as<B: Default>(self, content_type: HeaderValue) -> Response<B> {
        let mut response = Response::new(B::default());
        let headers = response.headers_mut();
        *headers = self.headers;
        headers.insert(CONTENT_TYPE, content_type);
        headers.insert(
            GRPC_STATUS,
            HeaderValue::from_static(self.reason.grpc_status()),
        );
        headers.insert(
            GRPC_MESSAGE,
            HeaderValue::from_static(self.reason.message()),
        );
        response
    }

    /// The status and fields, for a dry run's mark.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate_http::{Refusal, RefusalReason};
    ///
    /// let refusal = Refusal::new(RefusalReason::MissingKey, http::HeaderMap::new(), None, None);
    /// assert_eq!(refusal.into_parts().0, 400);
    /// ```
    pub fn into_parts(self) -> (StatusCode, HeaderMap) {
        (self.reason.status(), self.headers)
    }
}

/// Whether a request is gRPC or gRPC-Web: its `content-type` is `application/grpc`,
/// `application/grpc-web` or `application/grpc-web-text`, each alone or with a `+codec`
/// (`application/grpc+proto`) or parameters.
///
/// # Examples
///
/// ```
/// let (grpc, ()) = http::Request::post("/svc/M").header("content-type", "application/grpc+proto")
///     .body(()).unwrap().into_parts();
/// assert!(tollgate_http::is_grpc(&grpc));
/// let (plain, ()) = http::Request::get("/").body(()).unwrap().into_parts();
/// assert!(!tollgate_http::is_grpc(&plain));
/// ```
pub fn is_grpc(parts: &Parts) -> bool {
    grpc_type(parts).is_some()
}

/// A gRPC or gRPC-Web request's `content-type` ([`is_grpc`]) as its refusal carries it back
/// ([`Refusal::into_grpc_response_as`]): the type and its `+codec`, in lower case, without
/// parameters (gRPC's response grammar has none, and clients compare it case-sensitively);
/// `None` for any other request.
///
/// # Examples
///
/// ```
/// let (request, ()) = http::Request::post("/svc/M")
///     .header("content-type", "Application/GRPC-Web+Proto; charset=utf-8")
///     .body(())
///     .unwrap()
///     .into_parts();
/// let answer = tollgate_http::grpc_content_type(&request).unwrap();
/// assert_eq!(answer, "application/grpc-web+proto");
/// ```
pub fn grpc_content_type(parts: &Parts) -> Option<HeaderValue> {
    let value = grpc_type(parts)?;
    let text = value.to_str().ok()?;
    let bare = text.split(';').next().unwrap_or(text).trim();
    if bare.len() == text.len() && !bare.bytes().any(|b| b.is_ascii_uppercase()) {
        return Some(value.clone()); // The usual request: as it is.
    }
    HeaderValue::from_str(&bare.to_ascii_lowercase()).ok()
}

fn grpc_type(parts: &Parts) -> Option<&HeaderValue> {
    let value = parts.headers.get(CONTENT_TYPE)?;
    let ct = value.to_str().ok()?.trim_start().as_bytes();
    let rest = strip(ct, b"application/grpc")?;
    // After the type: the end, a `+codec` or parameters; gRPC-Web's `-web` and
    // `-web-text` first.
    fn strip<'a>(rest: &'a [u8], suffix: &[u8]) -> Option<&'a [u8]> {
        rest.get(..suffix.len())
            .filter(|p| p.eq_ignore_ascii_case(suffix))
            .map(|_| &rest[suffix.len()..])
    }
    let rest = strip(rest, b"-web")
        .map(|web| strip(web, b"-text").unwrap_or(web))
        .unwrap_or(rest);
    matches!(rest.first(), None | Some(b'+' | b';')).then_some(value)
}

/// The RFC 9457 problem details of a refusal ([`Refusal::problem_json`]); `policy` is the
/// name as given (printable ASCII: a policy name is checked).
fn problem_json(reason: RefusalReason, policy: Option<&str>, retry_after: Option<u64>) -> String {
    let status = reason.status();
    let mut detail = String::from(reason.message());
    if let Some(name) = policy {
        detail.push_str(" (policy ");
        for c in name.chars() {
            if c == '"' || c == '\\' {
                detail.push('\\');
            }
            detail.push(c);
        }
        detail.push(')');
    }
    let mut json = format!(
        "{{\"type\":\"about:blank\",\"title\":\"{}\",\"status\":{},\"detail\":\"{detail}",
        // RFC 9110's names: `http` still calls 413 by RFC 7231's ("Payload Too Large").
        match status {
            StatusCode::PAYLOAD_TOO_LARGE => "Content Too Large",
            status => status.canonical_reason().unwrap_or(""),
        },
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
            "application/grpc-web",
            "application/grpc-web+proto",
            "application/grpc-web-text",
            "application/grpc-Web-Text+json",
        ] {
            assert!(is_grpc(&parts(ct)), "{ct}");
            let bare = ct.split(';').next().unwrap().to_ascii_lowercase();
            assert_eq!(grpc_content_type(&parts(ct)).unwrap(), bare.as_str());
        }
        for ct in [
            "application/grpcx",
            "application/grpc-webx",
            "application/grpc-web-textx",
            "application/grpc-text",
            "application/json",
            "text/grpc",
            "",
        ] {
            assert!(!is_grpc(&parts(ct)), "{ct}");
            assert_eq!(grpc_content_type(&parts(ct)), None, "{ct}");
        }
    }

    #[test]
    fn problem_texts() {
        assert_eq!(
            problem_json(RefusalReason::RateLimited, Some(r#"per "ip\""#), Some(3)),
            r#"{"type":"about:blank","title":"Too Many Requests","status":429,"detail":"rate limit exceeded (policy per \"ip\\\"); retry after 3 s","retry_after":3}"#
        );
        assert_eq!(
            problem_json(RefusalReason::MissingKey, None, None),
            r#"{"type":"about:blank","title":"Bad Request","status":400,"detail":"the request carries no rate-limit key"}"#
        );
        // RFC 9110's name for 413.
        let too_costly = problem_json(RefusalReason::TooCostly, None, None);
        assert!(
            too_costly
                .starts_with(r#"{"type":"about:blank","title":"Content Too Large","status":413,"#),
            "{too_costly}"
        );
    }
}
