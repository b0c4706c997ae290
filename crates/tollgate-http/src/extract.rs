//! What a key source is: [`KeyExtractor`] (implemented by the sources of `key.rs` and by
//! closures), why it may find no key ([`NoKey`]), and a source with a fallback ([`Or`],
//! made by [`KeyExtractor::or`], and the key it yields, [`KeyOr`]).

use std::hash::Hash;

use http::request::Parts;

/// Finds the key a request is limited by: its client's address, an API key, anything
/// hashable. `None` means the request carries no key; the layer then follows its
/// `MissingKey` (tollgate-tower) policy (a 400 by default), never a 500.
///
/// Implemented by the built-in sources and by every closure
/// `Fn(&http::request::Parts) -> Option<K>`.
///
/// # Examples
///
/// ```
/// use tollgate_http::KeyExtractor;
///
/// // A custom key: the tenant named in the path, `/t/{tenant}/...`.
/// let tenant = |parts: &http::request::Parts| {
///     parts.uri.path().strip_prefix("/t/")?.split('/').next().map(str::to_owned)
/// };
/// let (parts, ()) = http::Request::get("/t/acme/orders").body(()).unwrap().into_parts();
/// assert_eq!(tenant.extract(&parts), Some("acme".to_owned()));
/// ```
pub trait KeyExtractor: Send + Sync + 'static {
    /// The key type the limiter is keyed by.
    type Key: Hash + Send + Sync + 'static;

    /// The request's key, or `None` if it has none.
    fn extract(&self, parts: &Parts) -> Option<Self::Key>;

    /// The request's key, or why it has none: what the layer calls, so that it can count
    /// the requests that no source could attribute ([`NoKey::Unattributable`]) and those
    /// a misconfigured server sent without a peer address ([`NoKey::NoPeerAddress`]) apart
    /// from those that simply carry no key. The default says [`NoKey::Absent`] whenever
    /// [`extract`](Self::extract) finds nothing; a source that can tell more overrides it,
    /// and then its `extract` is `try_extract(parts).ok()`.
    ///
    /// # Errors
    ///
    /// [`NoKey`]: why the request has no key.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate_http::{KeyExtractor, NoKey, PeerIp};
    ///
    /// // A request served without its peer address in the extensions (a set-up mistake).
    /// let (parts, ()) = http::Request::get("/").body(()).unwrap().into_parts();
    /// assert_eq!(PeerIp::new().try_extract(&parts), Err(NoKey::NoPeerAddress));
    /// ```
    fn try_extract(&self, parts: &Parts) -> Result<Self::Key, NoKey> {
        self.extract(parts).ok_or(NoKey::Absent)
    }

    /// This source's key, or for a request that has none, `fallback`'s: an API key, else the
    /// peer address, is `HeaderKey::new(name).or(PeerIp::new())`. A request that neither
    /// source finds a key in gets the layer's `MissingKey` (tollgate-tower) policy.
    ///
    /// The first source must be one a client cannot make up: a header's value is the
    /// client's to choose, so with a bare `HeaderKey` first, a client that sends a new
    /// made-up API key with each request gets a fresh limit each time and never meets the
    /// peer address's. Reject unknown keys before the limit sees them (an authentication
    /// layer outside it, then key by the identity it verified,
    /// [`ExtensionKey`](crate::ExtensionKey)), as [`HeaderKey`](crate::HeaderKey) says.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::net::{IpAddr, SocketAddr};
    /// use tollgate_http::{HeaderKey, KeyExtractor, KeyOr, NoKey, PeerIp};
    ///
    /// let by_key_or_peer = HeaderKey::new(http::HeaderName::from_static("x-api-key"))
    ///     .or(PeerIp::new());
    /// let from_peer = |req: http::request::Builder| {
    ///     let mut req = req.body(()).unwrap();
    ///     req.extensions_mut().insert("192.0.2.7:4000".parse::<SocketAddr>().unwrap());
    ///     req.into_parts().0
    /// };
    /// let with_key = from_peer(http::Request::get("/").header("x-api-key", "k-1"));
    /// assert!(matches!(by_key_or_peer.extract(&with_key), Some(KeyOr::First(k)) if k == "k-1"));
    /// // Keyed by the peer address instead.
    /// let peer: IpAddr = "192.0.2.7".parse().unwrap();
    /// let without = from_peer(http::Request::get("/"));
    /// assert_eq!(by_key_or_peer.extract(&without), Some(KeyOr::Fallback(peer)));
    /// // Neither an API key nor a peer address: no key (a layer's missing-key policy).
    /// let (bare, ()) = http::Request::new(()).into_parts();
    /// assert_eq!(by_key_or_peer.try_extract(&bare), Err(NoKey::NoPeerAddress));
    /// ```
    fn or<B: KeyExtractor>(self, fallback: B) -> Or<Self, B>
    where
        Self: Sized,
    {
        Or::new(self, fallback)
    }
}

/// Why a request has no key ([`KeyExtractor::try_extract`]). Every reason leads to the
/// layer's `MissingKey` (tollgate-tower) policy (a 400 by default); the layer counts
/// the last two apart (`Counts` (tollgate-tower)), since each means something other than a
/// client without a key.
///
/// # Examples
///
/// ```
/// use std::net::SocketAddr;
/// use tollgate_http::{ClientIp, KeyExtractor, NoKey};
///
/// // A trusted proxy forwards a field whose rightmost element is not an address.
/// let client_ip = ClientIp::trusting(["10.0.0.0/8"]).unwrap();
/// let mut req = http::Request::get("/").header("x-forwarded-for", "unknown").body(()).unwrap();
/// req.extensions_mut().insert("10.0.0.2:40000".parse::<SocketAddr>().unwrap());
/// let (parts, ()) = req.into_parts();
/// assert_eq!(client_ip.try_extract(&parts), Err(NoKey::Unattributable));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
// Exhaustive: the integrations match on it across the crate boundary (tollgate-tower
// answers each case with its own status and count).
pub enum NoKey {
    /// The request carries no key: no API key header, a closure that found nothing.
    Absent,
    /// A [`ClientIp`](crate::ClientIp) walk from the peer through trusted proxies reached a forwarding element
    /// that names no address (malformed, non-ASCII, `unknown`, obfuscated, a `Forwarded`
    /// element without `for=`), or an `X-Real-IP` that is not one address. The request
    /// cannot be attributed: keying it by the proxy would let anyone behind that proxy
    /// spend the proxy's own limit (and share one bucket with every other such sender), and
    /// keying it by anything left of that element would let the client choose its key.
    /// Seen often, it means a trusted proxy that does not write the header it is trusted
    /// for (check [`ClientIp::header`](crate::ClientIp::header) and the proxy's configuration).
    Unattributable,
    /// [`PeerIp`](crate::PeerIp) or [`ClientIp`](crate::ClientIp) found no peer address in the request's extensions: the
    /// server was set up without one, so no request can be keyed by its client. Insert the
    /// connection's [`SocketAddr`](std::net::SocketAddr) into each request's extensions when you accept it (hyper
    /// leaves that to you); under axum serve with
    /// `into_make_service_with_connect_info::<SocketAddr>()` and enable this crate's `axum`
    /// feature; under tonic enable the `tonic` feature, and over TLS copy the
    /// `TlsConnectInfo`'s `remote_addr()` into the extensions as a `SocketAddr` (see
    /// [`peer_addr`](crate::peer_addr)). The first such request in a process logs a `tracing` warning
    /// that says so.
    NoPeerAddress,
}

impl std::fmt::Display for NoKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            NoKey::Absent => "the request carries no key",
            NoKey::Unattributable => {
                "a forwarding header reached through trusted proxies names no address"
            }
            NoKey::NoPeerAddress => {
                "no peer address in the request's extensions: the server does not record it"
            }
        })
    }
}

impl std::error::Error for NoKey {}

impl<F, K> KeyExtractor for F
where
    F: Fn(&Parts) -> Option<K> + Send + Sync + 'static,
    K: Hash + Send + Sync + 'static,
{
    type Key = K;

    fn extract(&self, parts: &Parts) -> Option<K> {
        self(parts)
    }
}

/// The key source `first`, or `fallback` for a request that `first` finds no key in: from
/// [`KeyExtractor::or`].
///
/// A request that `first` cannot attribute ([`NoKey::Unattributable`]: a [`ClientIp`](crate::ClientIp)
/// walk that reached a forwarding element naming no address) does not fall back: it gets
/// the missing-key policy, so `ClientIp::trusting(..).or(PeerIp::new())` never keys such a
/// request as the proxy it came through.
///
/// [`ClientIp`]: crate::ClientIp
///
/// # Examples
///
/// ```
/// use tollgate_http::{HeaderKey, KeyExtractor, KeyOr, PeerIp};
///
/// // Limit by API key; a request without one is limited by its peer address instead.
/// let key = HeaderKey::new(http::HeaderName::from_static("x-api-key")).or(PeerIp::new());
///
/// let mut req = http::Request::get("/").body(()).unwrap();
/// req.extensions_mut().insert("192.0.2.7:50000".parse::<std::net::SocketAddr>().unwrap());
/// let (parts, ()) = req.into_parts();
/// assert_eq!(key.extract(&parts), Some(KeyOr::Fallback("192.0.2.7".parse().unwrap())));
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Or<A, B> {
    first: A,
    fallback: B,
}

impl<A, B> Or<A, B> {
    pub(crate) fn new(first: A, fallback: B) -> Or<A, B> {
        Or { first, fallback }
    }
}

impl<A: KeyExtractor, B: KeyExtractor> KeyExtractor for Or<A, B> {
    type Key = KeyOr<A::Key, B::Key>;

    fn extract(&self, parts: &Parts) -> Option<Self::Key> {
        self.try_extract(parts).ok()
    }

    fn try_extract(&self, parts: &Parts) -> Result<Self::Key, NoKey> {
        match self.first.try_extract(parts) {
            Ok(key) => Ok(KeyOr::First(key)),
            // A request whose forwarding walk reached garbage is not one without a key: a
            // fallback to the peer address would key it as the proxy.
            Err(NoKey::Unattributable) => Err(NoKey::Unattributable),
            Err(first) => self
                .fallback
                .try_extract(parts)
                .map(KeyOr::Fallback)
                // The more telling reason: a set-up mistake over a plain absence.
                .map_err(|fallback| match fallback {
                    NoKey::Absent => first,
                    other => other,
                }),
        }
    }
}

/// The key of an [`Or`] key source: the first source's key, or the fallback's.
///
/// The variant is part of the key, so a first key never shares a limit with a fallback key
/// that happens to hash alike (an API key spelled `192.0.2.7` and the address
/// `192.0.2.7` are two clients).
///
/// # Examples
///
/// ```
/// use std::net::IpAddr;
/// use tollgate_http::KeyOr;
///
/// let ip: IpAddr = "192.0.2.7".parse().unwrap();
/// let by_key: KeyOr<String, IpAddr> = KeyOr::First("192.0.2.7".to_owned());
/// assert_ne!(by_key, KeyOr::Fallback(ip));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KeyOr<A, B> {
    /// The first source found this key.
    First(A),
    /// The first source found none; the fallback found this one.
    Fallback(B),
}
