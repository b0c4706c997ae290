//! The limit a proxy checks each request against: the key (the client behind trusted
//! proxies), the decision (one clock read, `check_at`), and the refusal with its fields. What
//! it does with a Pingora session is in `session.rs`.

use std::net::IpAddr;
use std::time::Duration;

use http::header::RETRY_AFTER;
use http::{HeaderMap, HeaderValue};
use tollgate::{Error, Limiter, Quota, Timestamp};
use tollgate_http::{ClientIp, Fields, Format, Policy, PolicyNameError, Refusal, RefusalReason};

/// A per-client limit for a Pingora proxy: one [`tollgate::Limiter`] keyed by the client's
/// address ([`ClientIp`]: the peer, or the client behind the proxies it trusts), and how to
/// answer. Share one across the proxy's threads (it is `Send + Sync`; the proxy's
/// `ProxyHttp` value holds it).
///
/// * **Admitted**: the response carries `RateLimit-Policy` and `RateLimit`
///   ([`response_filter`](ProxyLimit::response_filter)).
/// * **Refused**: `429 Too Many Requests` with `Retry-After` (whole seconds, rounded up),
///   the fields, and an RFC 9457 problem+json body. In delay mode
///   ([`delay`](ProxyLimit::delay)) a request waits up to a bound for its turn first.
/// * **No key** (no peer address, as over a Unix socket; a forwarding walk that reaches an
///   element naming no address): `400 Bad Request`, never keyed as the proxy.
/// * **A full key table** (`FullPolicy::RefuseNewKeys`): `503` with `Retry-After: 1`.
///
/// # Examples
///
/// ```
/// use std::net::IpAddr;
/// use tollgate::Quota;
/// use tollgate_pingora::{ClientIp, ProxyLimit};
///
/// let limit = ProxyLimit::new(Quota::per_second(1), ClientIp::trusting(["10.0.0.0/8"]).unwrap());
/// let mut headers = http::HeaderMap::new();
/// headers.insert("x-forwarded-for", "203.0.113.9".parse().unwrap());
/// let balancer: IpAddr = "10.0.0.2".parse().unwrap();
///
/// let admitted = limit.check(Some(balancer), &headers).unwrap();
/// let refusal = limit.check(Some(balancer), &headers).unwrap_err();
/// assert_eq!(refusal.status(), 429);
/// assert_eq!(refusal.headers()["retry-after"], "1");
/// // Another client behind the same balancer has a limit of its own.
/// headers.insert("x-forwarded-for", "198.51.100.4".parse().unwrap());
/// assert!(limit.check(Some(balancer), &headers).is_ok());
/// assert_eq!(limit.limiter().stats().keys_held, 2);
/// # drop(admitted);
/// ```
#[derive(Debug)]
pub struct ProxyLimit {
    limiter: Limiter<IpAddr>,
    client_ip: ClientIp,
    policy: Policy,
    policy_name: Box<str>,
    format: Format,
    max_delay: Option<Duration>,
}

/// What [`ProxyLimit::check`] admitted: the fields to add to the response. Keep it in the
/// proxy's per-request context (`ProxyHttp::CTX`) from `request_filter` to
/// `response_filter`; the default is a request that was not checked (no fields).
#[derive(Debug, Default)]
pub struct Checked {
    pub(crate) fields: Option<Fields>,
}

impl Checked {
    /// Whether the request was checked and admitted (its response gets the fields).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::Quota;
    /// use tollgate_pingora::{Checked, ClientIp, ProxyLimit};
    ///
    /// assert!(!Checked::default().is_admitted());
    /// let limit = ProxyLimit::new(Quota::per_second(1), ClientIp::trusting::<[&str; 0]>([]).unwrap());
    /// let checked = limit.check(Some("192.0.2.1".parse().unwrap()), &http::HeaderMap::new());
    /// assert!(checked.unwrap().is_admitted());
    /// ```
    pub fn is_admitted(&self) -> bool {
        self.fields.is_some()
    }
}

/// The name of the policy the fields announce unless [`ProxyLimit::policy_name`] says.
const DEFAULT_POLICY: &str = "default";

impl ProxyLimit {
    /// A limit of `quota` per client, found by `client_ip`, on a new keyed limiter.
    ///
    /// # Examples
    ///
    /// See [`ProxyLimit`].
    pub fn new(quota: Quota, client_ip: ClientIp) -> ProxyLimit {
        ProxyLimit::with_limiter(Limiter::keyed(quota), client_ip)
    }

    /// A limit on `limiter` (built with your clock, table size and full-table policy), per
    /// client found by `client_ip`.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Limiter, Quota, TscClock};
    /// use tollgate_pingora::{ClientIp, ProxyLimit};
    ///
    /// let limiter = Limiter::builder(Quota::per_second(100)).clock(TscClock::new()).build();
    /// let limit = ProxyLimit::with_limiter(limiter, ClientIp::trusting(["127.0.0.1"]).unwrap());
    /// assert_eq!(limit.limiter().quota(), Quota::per_second(100));
    /// ```
    pub fn with_limiter(limiter: Limiter<IpAddr>, client_ip: ClientIp) -> ProxyLimit {
        ProxyLimit {
            limiter,
            client_ip,
            policy: Policy::new(DEFAULT_POLICY),
            policy_name: DEFAULT_POLICY.into(),
            format: Format::IETF,
            max_delay: None,
        }
    }

    /// Delay mode: a request over the limit waits for its turn, up to `max`, before it is
    /// refused (nginx's `burst` with `delay`); only [`request_filter`](Self::request_filter)
    /// waits, [`check`](Self::check) never does. A wait takes no thread: it parks the
    /// request's task on tollgate's timer.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::Quota;
    /// use tollgate_pingora::{ClientIp, ProxyLimit};
    ///
    /// let peer_only = ClientIp::trusting::<[&str; 0]>([]).unwrap();
    /// let limit = ProxyLimit::new(Quota::per_second(10), peer_only).delay(Duration::from_millis(500));
    /// assert_eq!(limit.max_delay(), Some(Duration::from_millis(500)));
    /// ```
    pub fn delay(mut self, max: Duration) -> ProxyLimit {
        self.max_delay = Some(max);
        self
    }

    /// The longest a request waits in delay mode; `None` outside it.
    ///
    /// # Examples
    ///
    /// See [`delay`](Self::delay).
    pub fn max_delay(&self) -> Option<Duration> {
        self.max_delay
    }

    /// Names the policy in the fields (`"default"` unless set).
    ///
    /// # Errors
    ///
    /// [`PolicyNameError`] for a name with a byte outside printable ASCII.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::Quota;
    /// use tollgate_pingora::{ClientIp, ProxyLimit};
    ///
    /// let peer_only = || ClientIp::trusting::<[&str; 0]>([]).unwrap();
    /// let limit = ProxyLimit::new(Quota::per_second(10), peer_only()).policy_name("per-ip").unwrap();
    /// let checked = limit.check(Some("192.0.2.1".parse().unwrap()), &http::HeaderMap::new());
    /// assert!(checked.is_ok());
    /// assert!(ProxyLimit::new(Quota::per_second(10), peer_only()).policy_name("é").is_err());
    /// ```
    pub fn policy_name(mut self, name: &str) -> Result<ProxyLimit, PolicyNameError> {
        self.policy = Policy::try_new(name)?;
        self.policy_name = name.into();
        Ok(self)
    }

    /// Which rate-limit fields responses carry ([`Format::IETF`] unless set; `Retry-After`
    /// goes on every `429` whatever this says).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::Quota;
    /// use tollgate_pingora::{ClientIp, Format, ProxyLimit};
    ///
    /// let peer_only = ClientIp::trusting::<[&str; 0]>([]).unwrap();
    /// let legacy = Format { ietf: false, legacy: true };
    /// let limit = ProxyLimit::new(Quota::per_minute(1), peer_only).fields(legacy);
    /// let peer = Some("192.0.2.1".parse().unwrap());
    /// limit.check(peer, &http::HeaderMap::new()).unwrap();
    /// let refusal = limit.check(peer, &http::HeaderMap::new()).unwrap_err();
    /// assert_eq!(refusal.headers()["x-ratelimit-remaining"], "0");
    /// assert!(refusal.headers().get("ratelimit").is_none());
    /// ```
    pub fn fields(mut self, format: Format) -> ProxyLimit {
        self.format = format;
        self
    }

    /// The limiter behind the limit (its [`stats`](Limiter::stats), its quota).
    ///
    /// # Examples
    ///
    /// See [`ProxyLimit`].
    pub fn limiter(&self) -> &Limiter<IpAddr> {
        &self.limiter
    }

    /// Checks a request from `peer` (the connection's address; `None` over a Unix socket)
    /// with `headers`, at the limiter's clock read once: the fields to answer with, or the
    /// refusal. Never waits (see [`request_filter`](Self::request_filter) for delay mode).
    ///
    /// # Errors
    ///
    /// The [`Refusal`]: `429` over the limit, `400` without a key, `503` for a full table.
    ///
    /// # Examples
    ///
    /// See [`ProxyLimit`].
    // A refusal is returned by value, as tollgate-tower's decisions carry it: boxing it
    // would add an allocation per refusal.
    #[allow(clippy::result_large_err)]
    pub fn check(&self, peer: Option<IpAddr>, headers: &HeaderMap) -> Result<Checked, Refusal> {
        let key = self.key(peer, headers)?;
        self.check_key(&key, self.limiter.now())
    }

    /// The key of a request from `peer`, or the `400` for one without.
    #[allow(clippy::result_large_err)]
    pub(crate) fn key(&self, peer: Option<IpAddr>, headers: &HeaderMap) -> Result<IpAddr, Refusal> {
        let missing = || Refusal::new(RefusalReason::MissingKey, HeaderMap::new(), None, None);
        let peer = peer.ok_or_else(missing)?;
        self.client_ip.key_of(peer, headers).map_err(|_| missing())
    }

    /// Checks `key` at `now`.
    #[allow(clippy::result_large_err)]
    pub(crate) fn check_key(&self, key: &IpAddr, now: Timestamp) -> Result<Checked, Refusal> {
        match self.limiter.check_at(key, now) {
            Ok(admitted) => Ok(self.admitted(admitted.remaining(), admitted.reset_after())),
            Err(error) => Err(self.refusal(error)),
        }
    }

    /// The fields of an admission that leaves `remaining` cells, all back after `reset`.
    pub(crate) fn admitted(&self, remaining: u32, reset: Duration) -> Checked {
        let quota = self.limiter.quota();
        Checked {
            fields: Some(Fields::admitted(&self.policy, quota, remaining, reset)),
        }
    }

    /// The answer to `error`.
    pub(crate) fn refusal(&self, error: Error) -> Refusal {
        let mut headers = HeaderMap::new();
        match error {
            Error::RateLimited { wait, .. } => {
                let fields = Fields::refused(&self.policy, self.limiter.quota(), wait);
                let retry = fields.retry_after();
                fields.insert_into(&mut headers, self.format);
                let name = Some(&*self.policy_name);
                Refusal::new(RefusalReason::RateLimited, headers, name, retry)
            }
            // One cell never exceeds a burst (at least 1); kept for completeness.
            Error::InsufficientCapacity { .. } => {
                let name = Some(&*self.policy_name);
                Refusal::new(RefusalReason::TooCostly, headers, name, None)
            }
            // A full table that refuses new keys: the proxy is out of room, not the client
            // over its rate.
            _ => {
                headers.insert(RETRY_AFTER, HeaderValue::from_static("1"));
                Refusal::new(RefusalReason::Unavailable, headers, None, Some(1))
            }
        }
    }

    /// The fields format.
    pub(crate) fn format(&self) -> Format {
        self.format
    }

    /// The policy the fields name.
    pub(crate) fn policy(&self) -> &Policy {
        &self.policy
    }
}
