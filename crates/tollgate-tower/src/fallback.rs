//! A key source with a fallback: [`KeyExtractor::or`], and the key it yields, [`KeyOr`].

use http::request::Parts;

use crate::key::{KeyExtractor, NoKey};

/// The key source `first`, or `fallback` for a request that `first` finds no key in: from
/// [`KeyExtractor::or`].
///
/// A request that `first` cannot attribute ([`NoKey::Unattributable`]: a [`ClientIp`]
/// walk that reached a forwarding element naming no address) does not fall back: it gets
/// the missing-key policy, so `ClientIp::trusting(..).or(PeerIp::new())` never keys such a
/// request as the proxy it came through.
///
/// [`ClientIp`]: crate::ClientIp
///
/// # Examples
///
/// ```
/// use tollgate_tower::{HeaderKey, KeyExtractor, KeyOr, PeerIp};
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
/// use tollgate_tower::KeyOr;
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
