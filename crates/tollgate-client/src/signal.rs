//! Reading what a response says about the server's limits: the status, `Retry-After`
//! (delay-seconds or an HTTP-date), the IETF `RateLimit-Policy` / `RateLimit` fields
//! (draft-ietf-httpapi-ratelimit-headers-10) and the legacy `X-RateLimit-*` fields.
//!
//! Policy for malformed input: a field that does not parse is ignored as a whole (RFC 8941
//! §4.2: a structured field that fails to parse is treated as absent), and the others are
//! still read. Nothing here panics on any header value.

use std::time::{Duration, SystemTime};

use http::header::{DATE, HeaderMap, HeaderName, RETRY_AFTER};
use http::{HeaderValue, StatusCode};
use tollgate::Quota;

const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
const X_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
const X_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
const X_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");

/// What kind of answer a response is, for pacing and retries.
///
/// # Examples
///
/// ```
/// use http::StatusCode;
/// use tollgate_client::Verdict;
///
/// assert_eq!(Verdict::of(StatusCode::TOO_MANY_REQUESTS), Verdict::Throttled);
/// assert_eq!(Verdict::of(StatusCode::NOT_FOUND), Verdict::Final);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// 1xx, 2xx, 3xx: the request went through.
    Success,
    /// 429: refused for rate. [`ServerSignal::read`] also gives it to a 403 whose fields
    /// say it is a rate refusal (`X-RateLimit-Remaining: 0`, `RateLimit: r=0`, or a
    /// `Retry-After`), as GitHub sends for a spent limit; [`Verdict::of`] sees only the status.
    Throttled,
    /// 503: the server is unavailable (for rate if it sent `Retry-After`).
    Unavailable,
    /// Another 5xx: a server error that may pass.
    ServerError,
    /// A 4xx other than 429 (and other than a 403 refusing for rate): the request itself is
    /// wrong; never retried.
    Final,
}

impl Verdict {
    /// The verdict of a status code.
    ///
    /// # Examples
    ///
    /// ```
    /// use http::StatusCode;
    /// use tollgate_client::Verdict;
    ///
    /// assert_eq!(Verdict::of(StatusCode::OK), Verdict::Success);
    /// assert_eq!(Verdict::of(StatusCode::BAD_GATEWAY), Verdict::ServerError);
    /// ```
    pub fn of(status: StatusCode) -> Verdict {
        match status.as_u16() {
            429 => Verdict::Throttled,
            503 => Verdict::Unavailable,
            500..=599 => Verdict::ServerError,
            400..=499 => Verdict::Final,
            _ => Verdict::Success,
        }
    }
}

/// The unit of a `RateLimit-Policy` item's quota: its `qu` parameter.
///
/// # Examples
///
/// ```
/// use tollgate_client::QuotaUnit;
///
/// assert_eq!(QuotaUnit::parse("\"content-bytes\""), QuotaUnit::ContentBytes);
/// assert_eq!(QuotaUnit::parse("\"tokens\""), QuotaUnit::Other);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum QuotaUnit {
    /// `"requests"`, the default: each request counts one.
    Requests,
    /// `"content-bytes"`: each request counts its content's bytes.
    ContentBytes,
    /// `"concurrent-requests"`: a bound on requests in flight at once, not on a rate.
    ConcurrentRequests,
    /// Any other unit (or a `qu` that is not a string), which a client cannot measure.
    Other,
}

impl QuotaUnit {
    /// The unit of a `qu` parameter's value (an sf-string, quotes included).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate_client::QuotaUnit;
    ///
    /// assert_eq!(QuotaUnit::parse("\"requests\""), QuotaUnit::Requests);
    /// assert_eq!(QuotaUnit::parse("requests"), QuotaUnit::Other); // a token, not a string
    /// ```
    pub fn parse(value: &str) -> QuotaUnit {
        match value.trim() {
            "\"requests\"" => QuotaUnit::Requests,
            "\"content-bytes\"" => QuotaUnit::ContentBytes,
            "\"concurrent-requests\"" => QuotaUnit::ConcurrentRequests,
            _ => QuotaUnit::Other,
        }
    }
}

/// What a response said about the server's limits.
///
/// # Examples
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use http::{HeaderMap, StatusCode};
/// use tollgate::Quota;
/// use tollgate_client::{ServerSignal, Verdict};
///
/// let mut headers = HeaderMap::new();
/// headers.insert("retry-after", "2".parse().unwrap());
/// headers.insert("ratelimit-policy", "\"default\";q=10;w=1".parse().unwrap());
/// headers.insert("ratelimit", "\"default\";r=0;t=2".parse().unwrap());
/// let s = ServerSignal::read(StatusCode::TOO_MANY_REQUESTS, &headers, SystemTime::now());
/// assert_eq!(s.verdict, Verdict::Throttled);
/// assert_eq!(s.retry_after, Some(Duration::from_secs(2)));
/// assert_eq!(s.policy, Some(Quota::per_second(10)));
/// assert_eq!((s.remaining, s.reset), (Some(0), Some(Duration::from_secs(2))));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerSignal {
    /// The status code.
    pub status: StatusCode,
    /// The kind of answer.
    pub verdict: Verdict,
    /// `Retry-After`, as a wait from now (an HTTP-date is measured from the response's
    /// `Date` if it has one; one in the past is zero).
    pub retry_after: Option<Duration>,
    /// The server's policy in requests: from `RateLimit-Policy` (the most restrictive of
    /// its items in requests, `qu` absent or `"requests"`), or from `X-RateLimit-Limit` with
    /// a `w` parameter. A bare `X-RateLimit-Limit: 100` does not say its window, so it
    /// announces nothing.
    pub policy: Option<Quota>,
    /// The server's policy in content bytes (`qu="content-bytes"`, the most restrictive such
    /// item): `q` bytes per `w` seconds.
    pub byte_policy: Option<Quota>,
    /// The response's `Content-Length`, if it has a valid one (for a content-bytes policy).
    pub content_length: Option<u64>,
    /// A policy item in a unit the client cannot measure (`"concurrent-requests"`, or
    /// another), which is ignored: the first such unit, if any.
    pub ignored_unit: Option<QuotaUnit>,
    /// Requests left (`RateLimit`'s `r`, or `X-RateLimit-Remaining`): of several `RateLimit`
    /// items, the one that binds ([`parse_ratelimit`](crate::parse_ratelimit)), whose `t` is
    /// `reset`. An item whose policy (`RateLimit-Policy`, by name) counts another unit than
    /// requests (`qu="content-bytes"`, ...) counts only when spent (`r=0`: it holds).
    pub remaining: Option<u64>,
    /// When the quota is back in full (`RateLimit`'s `t`, or `X-RateLimit-Reset`: delta
    /// seconds, Unix seconds above 10⁹, Unix milliseconds above 10¹², each with an optional
    /// decimal fraction).
    pub reset: Option<Duration>,
}

impl ServerSignal {
    /// Reads a response's status and fields; `now` turns HTTP-dates into waits.
    ///
    /// Dates are the server's clock: when the response has a `Date` field, an HTTP-date
    /// `Retry-After` and a Unix-time `X-RateLimit-Reset` are measured from it instead of from
    /// `now`, so a server whose clock is off by minutes still gets the wait it meant.
    ///
    /// The fields are read whatever the status. A 403 that carries a rate refusal (a
    /// remaining count of 0, or a `Retry-After`) is [`Verdict::Throttled`], as GitHub's
    /// spent limits are; a 403 without them is an ordinary [`Verdict::Final`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::SystemTime;
    /// use http::{HeaderMap, StatusCode};
    /// use tollgate_client::ServerSignal;
    ///
    /// let mut headers = HeaderMap::new();
    /// headers.insert("ratelimit-policy", "\"x\";q=oops".parse().unwrap()); // malformed
    /// let s = ServerSignal::read(StatusCode::OK, &headers, SystemTime::now());
    /// assert_eq!(s.policy, None); // ignored, no panic
    /// ```
    pub fn read(status: StatusCode, headers: &HeaderMap, now: SystemTime) -> ServerSignal {
        let policy_field = field(headers, &RATELIMIT_POLICY);
        let policies = policy_field.as_deref().and_then(parse_policies);
        // A `RateLimit` item's `r` is in its policy's unit (draft-10 ties them by name): a
        // count of bytes or of concurrent requests left says nothing of how many requests
        // may follow, so only a spent one (r=0, which holds the host) counts there.
        let other_units = policy_field
            .as_deref()
            .map(named_other_units)
            .unwrap_or_default();
        let ietf = field(headers, &RATELIMIT)
            .and_then(|v| binding_item(&v, |name, r| r == 0 || !other_units.contains(&name)));
        // The server's own clock, if it said it.
        let now = single(headers, &DATE)
            .and_then(|d| httpdate::parse_http_date(d.trim()).ok())
            .unwrap_or(now);
        let retry_after = headers
            .get(RETRY_AFTER)
            .and_then(|v| parse_retry_after(v, now));
        let remaining = ietf
            .map(|(r, _)| r)
            .or_else(|| single(headers, &X_REMAINING).and_then(|v| parse_integer(v.trim())));
        let verdict = match Verdict::of(status) {
            Verdict::Final
                if status == StatusCode::FORBIDDEN
                    && (remaining == Some(0) || retry_after.is_some()) =>
            {
                Verdict::Throttled
            }
            v => v,
        };
        ServerSignal {
            status,
            verdict,
            retry_after,
            policy: policies
                .as_ref()
                .and_then(|p| most_restrictive(p, QuotaUnit::Requests))
                .or_else(|| field(headers, &X_LIMIT).and_then(|v| parse_legacy_limit(&v))),
            byte_policy: policies
                .as_ref()
                .and_then(|p| most_restrictive(p, QuotaUnit::ContentBytes)),
            content_length: content_length(headers),
            ignored_unit: policies.as_ref().and_then(|p| {
                p.iter()
                    .map(|&(unit, _)| unit)
                    .find(|u| matches!(u, QuotaUnit::ConcurrentRequests | QuotaUnit::Other))
            }),
            remaining,
            reset: ietf.map(|(_, t)| t).or_else(|| {
                single(headers, &X_RESET).and_then(|v| parse_legacy_reset(v.trim(), now))
            }),
        }
    }
}

impl ServerSignal {
    /// How long the server says to send nothing more: the `Retry-After` of a refusal (429,
    /// 503, or a 403 that is [`Verdict::Throttled`]) and the reset of a spent quota (a
    /// remaining count of 0 with a reset, on any status), the later of the two. `None` if it
    /// said neither. A `Retry-After` on another status (a redirect, a 500) is not a hold.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::{Duration, SystemTime};
    /// use http::{HeaderMap, StatusCode};
    /// use tollgate_client::{ServerSignal, Verdict};
    ///
    /// // GitHub's spent primary limit: a 403 with remaining 0 and the reset.
    /// let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    /// let mut headers = HeaderMap::new();
    /// headers.insert("x-ratelimit-remaining", "0".parse().unwrap());
    /// headers.insert("x-ratelimit-reset", "1700000600".parse().unwrap());
    /// let s = ServerSignal::read(StatusCode::FORBIDDEN, &headers, now);
    /// assert_eq!(s.verdict, Verdict::Throttled);
    /// assert_eq!(s.hold(), Some(Duration::from_secs(600)));
    ///
    /// // A 429 whose RateLimit field says when, with no Retry-After.
    /// let mut headers = HeaderMap::new();
    /// headers.insert("ratelimit", "\"p\";r=0;t=30".parse().unwrap());
    /// let s = ServerSignal::read(StatusCode::TOO_MANY_REQUESTS, &headers, now);
    /// assert_eq!(s.hold(), Some(Duration::from_secs(30)));
    ///
    /// // A 403 without rate-limit fields is an ordinary 403.
    /// let s = ServerSignal::read(StatusCode::FORBIDDEN, &HeaderMap::new(), now);
    /// assert_eq!((s.verdict, s.hold()), (Verdict::Final, None));
    /// ```
    pub fn hold(&self) -> Option<Duration> {
        let asked = match self.verdict {
            Verdict::Throttled | Verdict::Unavailable => self.retry_after,
            Verdict::Success | Verdict::ServerError | Verdict::Final => None,
        };
        let spent = match (self.remaining, self.reset) {
            (Some(0), Some(reset)) => Some(reset),
            _ => None,
        };
        asked.max(spent)
    }
}

/// All lines of a field joined with ", " (as RFC 9110 §5.3 allows for list fields), or
/// `None` if absent or not visible ASCII.
fn field(headers: &HeaderMap, name: &HeaderName) -> Option<String> {
    let mut out: Option<String> = None;
    for v in headers.get_all(name) {
        let s = v.to_str().ok()?;
        match &mut out {
            Some(o) => {
                o.push_str(", ");
                o.push_str(s);
            }
            None => out = Some(s.to_owned()),
        }
    }
    out
}

/// `Content-Length`, if it appears once and is a plain integer.
pub(crate) fn content_length(headers: &HeaderMap) -> Option<u64> {
    single(headers, &http::header::CONTENT_LENGTH).and_then(|v| parse_integer(v.trim()))
}

/// A field that must appear once.
fn single<'a>(headers: &'a HeaderMap, name: &HeaderName) -> Option<&'a str> {
    let mut all = headers.get_all(name).iter();
    let first = all.next()?;
    if all.next().is_some() {
        return None;
    }
    first.to_str().ok()
}

/// `Retry-After`: delay-seconds (saturating on huge values) or an HTTP-date, measured from
/// `now` (the response's `Date` where it has one: the date is on the server's clock, and
/// [`ServerSignal::read`] passes it).
///
/// # Examples
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use http::HeaderValue;
/// use tollgate_client::parse_retry_after;
///
/// let now = SystemTime::UNIX_EPOCH + Duration::from_secs(784_111_777);
/// assert_eq!(parse_retry_after(&HeaderValue::from_static("120"), now), Some(Duration::from_secs(120)));
/// let date = HeaderValue::from_static("Sun, 06 Nov 1994 08:49:37 GMT"); // 784111777 + 0
/// assert_eq!(parse_retry_after(&date, now), Some(Duration::ZERO));
/// assert_eq!(parse_retry_after(&HeaderValue::from_static("-1"), now), None);
/// ```
pub fn parse_retry_after(value: &HeaderValue, now: SystemTime) -> Option<Duration> {
    let s = value.to_str().ok()?.trim();
    if s.is_empty() {
        return None;
    }
    if s.bytes().all(|b| b.is_ascii_digit()) {
        let secs = s.parse::<u64>().unwrap_or(u64::MAX);
        return Some(Duration::from_secs(secs));
    }
    let date = httpdate::parse_http_date(s).ok()?;
    Some(date.duration_since(now).unwrap_or(Duration::ZERO))
}

/// A non-negative sf-integer (at most 15 digits, RFC 8941 §3.3.1).
fn parse_integer(s: &str) -> Option<u64> {
    if s.is_empty() || s.len() > 15 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// One list member: the item (a String or Token, not checked further) and its parameters.
struct Member<'a> {
    item: &'a str,
    params: Vec<(&'a str, &'a str)>,
}

/// Splits a structured-field list into members, honouring quoted strings. `None` on any
/// syntax error (an unterminated string, an empty member, a parameter without a key).
fn parse_list(s: &str) -> Option<Vec<Member<'_>>> {
    let mut members = Vec::new();
    let mut rest = s.trim();
    if rest.is_empty() {
        return None;
    }
    loop {
        // The item: a quoted string, or a token up to ';' or ','.
        let end = if let Some(body) = rest.strip_prefix('"') {
            let mut escaped = false;
            let mut close = None;
            for (i, c) in body.char_indices() {
                match (escaped, c) {
                    (true, _) => escaped = false,
                    (false, '\\') => escaped = true,
                    (false, '"') => {
                        close = Some(i);
                        break;
                    }
                    _ => {}
                }
            }
            close? + 2
        } else {
            rest.find([';', ',']).unwrap_or(rest.len())
        };
        let item = rest[..end].trim();
        if item.is_empty() {
            return None;
        }
        rest = &rest[end..];
        let mut params = Vec::new();
        while let Some(p) = rest.strip_prefix(';') {
            let stop = p.find([';', ',']).unwrap_or(p.len());
            let (kv, tail) = p.split_at(stop);
            let (k, v) = kv.split_once('=').unwrap_or((kv, "?1"));
            let k = k.trim();
            if k.is_empty()
                || !k
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b"_-.*0123456789".contains(&b))
            {
                return None;
            }
            params.push((k, v.trim()));
            rest = tail;
        }
        members.push(Member { item, params });
        rest = rest.trim_start();
        match rest.strip_prefix(',') {
            Some(r) => rest = r.trim_start(),
            None if rest.is_empty() => return Some(members),
            None => return None,
        }
        if rest.is_empty() {
            return None; // a trailing comma
        }
    }
}

impl Member<'_> {
    fn int(&self, key: &str) -> Result<Option<u64>, ()> {
        match self.params.iter().find(|(k, _)| *k == key) {
            None => Ok(None),
            Some((_, v)) => parse_integer(v).map(Some).ok_or(()),
        }
    }
}

/// `RateLimit-Policy`: the most restrictive item's `q` per `w` seconds, among the items in
/// requests (`qu` absent or `"requests"`; an item in another unit is not a request rate).
/// An item without both `q` and `w` is skipped (the draft's default window is the server's
/// to choose, so it says nothing exact); `None` if the field is malformed or no item has
/// both.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::Quota;
/// use tollgate_client::parse_policy;
///
/// let q = parse_policy("\"burst\";q=100;w=60, \"day\";q=1000;w=86400").unwrap();
/// assert_eq!(q, Quota::new(1000, Duration::from_secs(86_400))); // the slower one
/// assert_eq!(parse_policy("\"a\";q=10;w=1,"), None); // a trailing comma: malformed
/// ```
pub fn parse_policy(value: &str) -> Option<Quota> {
    most_restrictive(&parse_policies(value)?, QuotaUnit::Requests)
}

/// Every item of a `RateLimit-Policy` with its unit (`None` if the field is malformed); an
/// item in another unit than requests and content bytes is listed without a quota, so that
/// it can be reported as ignored.
fn parse_policies(value: &str) -> Option<Vec<(QuotaUnit, Option<Quota>)>> {
    let members = parse_list(value)?;
    let mut out = Vec::with_capacity(members.len());
    for m in &members {
        let (Ok(q), Ok(w)) = (m.int("q"), m.int("w")) else {
            return None;
        };
        let unit = m
            .params
            .iter()
            .find(|(k, _)| *k == "qu")
            .map_or(QuotaUnit::Requests, |(_, v)| QuotaUnit::parse(v));
        let quota = match (q, w) {
            (Some(q), Some(w)) => u32::try_from(q)
                .ok()
                .and_then(|q| Quota::try_new(q, Duration::from_secs(w)).ok()),
            _ => None,
        };
        out.push((unit, quota));
    }
    Some(out)
}

/// The names (as written, quoted) of a `RateLimit-Policy`'s items in a unit other than
/// requests; none if the field is malformed.
fn named_other_units(value: &str) -> Vec<&str> {
    let Some(members) = parse_list(value) else {
        return Vec::new();
    };
    members
        .iter()
        .filter(|m| {
            m.params
                .iter()
                .any(|(k, v)| *k == "qu" && QuotaUnit::parse(v) != QuotaUnit::Requests)
        })
        .map(|m| m.item)
        .collect()
}

/// The slowest quota among the items in `unit`.
fn most_restrictive(items: &[(QuotaUnit, Option<Quota>)], unit: QuotaUnit) -> Option<Quota> {
    let mut best: Option<Quota> = None;
    for &(u, quota) in items {
        let Some(quota) = quota.filter(|_| u == unit) else {
            continue;
        };
        if best.is_none_or(|b| quota.interval() > b.interval()) {
            best = Some(quota);
        }
    }
    best
}

/// `RateLimit`: the one item that binds, as `(r, t)` (`t` in seconds), `r` and `t` from that
/// same item. An item with no quota left (`r=0`) and a reset to wait for (`t > 0`) binds,
/// the longest `t` of those if there are several; otherwise the item whose `r` lasts least
/// a second among those resetting in more than a second (the least `r/t`: the slowest pace
/// its `r` allows, and the only items a pace is spread over); otherwise the least `r`. The
/// least `r` of one policy with the longest `t` of another would hold a client for a day
/// where a minute's quota is spent, or pace it far below every policy. `None` if malformed
/// or no item has `r`.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate_client::parse_ratelimit;
///
/// assert_eq!(parse_ratelimit("\"a\";r=5;t=1, \"b\";r=0;t=30"), Some((0, Duration::from_secs(30))));
/// // The minute's quota is spent: wait 5 s, not the day's 80,000.
/// let spent = "\"minute\";r=0;t=5, \"day\";r=4000;t=80000";
/// assert_eq!(parse_ratelimit(spent), Some((0, Duration::from_secs(5))));
/// // 2 in 5 s is 0.4 a second, 4,000 in 80,000 s is 0.05: the day's pace binds.
/// let both = "\"minute\";r=2;t=5, \"day\";r=4000;t=80000";
/// assert_eq!(parse_ratelimit(both), Some((4000, Duration::from_secs(80_000))));
/// // A second's quota resets too soon to pace by: the minute's binds.
/// let second = "\"s\";r=1;t=1, \"m\";r=90;t=60";
/// assert_eq!(parse_ratelimit(second), Some((90, Duration::from_secs(60))));
/// assert_eq!(parse_ratelimit("\"a\";r=-1"), None);
/// ```
pub fn parse_ratelimit(value: &str) -> Option<(u64, Duration)> {
    binding_item(value, |_, _| true)
}

/// [`parse_ratelimit`] over the items `counts(name, r)` keeps (the others are skipped, not
/// malformed).
fn binding_item(value: &str, counts: impl Fn(&str, u64) -> bool) -> Option<(u64, Duration)> {
    let members = parse_list(value)?;
    // Which rule an item falls under (the lower binds first): a spent quota with a reset
    // ahead, a pace (reset more than a second ahead), anything else.
    let class = |r: u64, t: u64| match (r, t) {
        (0, 1..) => 0,
        (_, 2..) => 1,
        _ => 2,
    };
    let mut out: Option<(u64, u64)> = None;
    for m in &members {
        let (Ok(r), Ok(t)) = (m.int("r"), m.int("t")) else {
            return None;
        };
        let Some(r) = r else { continue };
        if !counts(m.item, r) {
            continue;
        }
        let t = t.unwrap_or(0);
        let binds = match out {
            None => true,
            Some((r0, t0)) => match class(r, t).cmp(&class(r0, t0)) {
                std::cmp::Ordering::Less => true,
                std::cmp::Ordering::Greater => false,
                std::cmp::Ordering::Equal => match class(r, t) {
                    0 => t > t0,
                    // r/t < r0/t0, without division.
                    1 => u128::from(r) * u128::from(t0) < u128::from(r0) * u128::from(t),
                    _ => r < r0,
                },
            },
        };
        if binds {
            out = Some((r, t));
        }
    }
    out.map(|(r, t)| (r, Duration::from_secs(t)))
}

/// `X-RateLimit-Limit` as a list of `N;w=SECONDS` items (some APIs send the policy
/// there, as the drafts before RateLimit-Policy did): the most restrictive. A bare number
/// does not say its window and gives `None`, as does anything malformed.
fn parse_legacy_limit(value: &str) -> Option<Quota> {
    let mut best: Option<Quota> = None;
    for m in parse_list(value)? {
        let Ok(Some(w)) = m.int("w") else { continue };
        let Some(q) = parse_integer(m.item.trim()).and_then(|q| u32::try_from(q).ok()) else {
            continue;
        };
        let Ok(quota) = Quota::try_new(q, Duration::from_secs(w)) else {
            continue;
        };
        if best.is_none_or(|b| quota.interval() > b.interval()) {
            best = Some(quota);
        }
    }
    best
}

/// `X-RateLimit-Reset`, as servers send it: delta seconds, Unix seconds above 10⁹ (GitHub),
/// Unix milliseconds above 10¹², each with an optional decimal fraction (Discord's
/// `1470173023.123`). A time in the past is a wait of zero.
fn parse_legacy_reset(value: &str, now: SystemTime) -> Option<Duration> {
    let (whole, fraction) = match value.split_once('.') {
        Some((w, f)) => (w, Some(f)),
        None => (value, None),
    };
    let n = parse_integer(whole)?;
    let nanos = match fraction {
        None => 0,
        // Up to nanoseconds; a finer fraction is cut, not refused.
        Some(f) if !f.is_empty() && f.bytes().all(|b| b.is_ascii_digit()) => {
            let digits = &f[..f.len().min(9)];
            let scale = 10u32.pow(9 - digits.len() as u32);
            digits.parse::<u32>().ok()? * scale
        }
        Some(_) => return None,
    };
    let value = Duration::new(n, nanos);
    let at = if n > 1_000_000_000_000 {
        value / 1_000
    } else if n > 1_000_000_000 {
        value
    } else {
        return Some(value);
    };
    let at = SystemTime::UNIX_EPOCH.checked_add(at)?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}
