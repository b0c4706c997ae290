//! Who is the client: the built-in key sources ([`PeerIp`], [`ClientIp`], [`HeaderKey`],
//! [`ExtensionKey`], [`Global`]) and the [`Cidr`]s that name trusted proxies. What a key
//! source is ([`KeyExtractor`](crate::KeyExtractor)) is in `extract.rs`.

use std::fmt;
use std::hash::Hash;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::str::FromStr;

use http::HeaderValue;

use crate::extract::{KeyExtractor, NoKey};
use crate::forwarded::ForwardedHeader;
use http::header::HeaderName;
use http::request::Parts;

/// The peer address, or [`NoKey::NoPeerAddress`] after a warning the first time in this
/// process (a server set-up mistake makes every request keyless: say it once, loudly).
fn required_peer_addr(parts: &Parts) -> Result<IpAddr, NoKey> {
    match peer_addr(&parts.extensions) {
        Some(ip) => Ok(ip),
        None => {
            #[cfg(feature = "tracing")]
            warn_once();
            Err(NoKey::NoPeerAddress)
        }
    }
}

/// The warning for a request without a peer address, logged the first time in a process.
#[cfg(feature = "tracing")]
fn warn_once() {
    static WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    // ordering: a once-flag for a log line; it publishes nothing.
    if !WARNED.swap(true, std::sync::atomic::Ordering::Relaxed) {
        tracing::warn!(
            "tollgate-tower: a request has no peer address in its extensions, so PeerIp \
             and ClientIp cannot key it (every such request gets the missing-key \
             policy: a 400, or no limit under MissingKey::Allow). Insert the \
             connection's SocketAddr into each request's extensions, serve axum with \
             into_make_service_with_connect_info::<SocketAddr>() and the `axum` \
             feature, or enable the `tonic` feature; see tollgate_tower::NoKey. \
             Counted in Counts::no_peer_address; this warning is logged once."
        );
    }
}

/// The peer address of the connection a request came on: a [`SocketAddr`] in the request's
/// extensions (insert it when you accept the connection; hyper leaves that to you), an
/// [`IpAddr`] extension, with the `axum` feature axum's `ConnectInfo<SocketAddr>` (serve
/// with `into_make_service_with_connect_info::<SocketAddr>()`), and with the `tonic` feature
/// the `TcpConnectInfo` that tonic's server puts in every request it accepts over plain TCP.
/// Over TLS, tonic records a `TlsConnectInfo` instead, which is not read here (its type
/// exists only with tonic's TLS features, which would bring a TLS stack into this crate):
/// there, copy its `get_ref().remote_addr()` into the request's extensions as a
/// [`SocketAddr`] in a layer in front of this one.
///
/// # Examples
///
/// ```
/// use std::net::SocketAddr;
///
/// let mut req = http::Request::new(());
/// assert_eq!(tollgate_http::peer_addr(req.extensions()), None);
/// let peer: SocketAddr = "192.0.2.7:50000".parse().unwrap();
/// req.extensions_mut().insert(peer);
/// assert_eq!(tollgate_http::peer_addr(req.extensions()), Some(peer.ip()));
/// ```
pub fn peer_addr(extensions: &http::Extensions) -> Option<IpAddr> {
    if let Some(addr) = extensions.get::<SocketAddr>() {
        return Some(addr.ip());
    }
    #[cfg(feature = "axum")]
    if let Some(info) = extensions.get::<axum::extract::ConnectInfo<SocketAddr>>() {
        return Some(info.0.ip());
    }
    #[cfg(feature = "tonic")]
    if let Some(addr) = extensions
        .get::<tonic::transport::server::TcpConnectInfo>()
        .and_then(|info| info.remote_addr())
    {
        return Some(addr.ip());
    }
    extensions.get::<IpAddr>().copied()
}

/// The key of a client address: an IPv6 address that stands for an IPv4 one as the IPv4
/// address (IPv4-mapped `::ffff:a.b.c.d`; NAT64's well-known prefix `64:ff9b::/96`, RFC
/// 6052, where a translator in front of an IPv6-only server shows every IPv4 client; SIIT's
/// `::ffff:0:a.b.c.d`; the deprecated IPv4-compatible `::a.b.c.d`, but not `::` or `::1`: so an allowlist of keys
/// lists IPv4 ranges for them, while a trusted proxy's [`Cidr`] is matched against the
/// address as it arrives, IPv4-mapped ones as IPv4), IPv4 addresses masked to
/// `v4_prefix` bits and IPv6 addresses to `v6_prefix` bits (a host usually holds a whole
/// IPv6 /64, so keying by full address would give it 2^64 limits). A translator's
/// network-specific prefix is not known here: its clients share the keys of that prefix's
/// `/64`s.
///
/// # Examples
///
/// ```
/// use std::net::IpAddr;
/// use tollgate_http::ip_key;
///
/// let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
/// let b: IpAddr = "2001:db8:1:2:bbbb::9".parse().unwrap();
/// assert_eq!(ip_key(a, 32, 64), ip_key(b, 32, 64)); // one /64, one key
/// assert_eq!(ip_key(a, 32, 64), "2001:db8:1:2::".parse::<IpAddr>().unwrap());
/// let mapped: IpAddr = "::ffff:192.0.2.7".parse().unwrap();
/// assert_eq!(ip_key(mapped, 32, 64), "192.0.2.7".parse::<IpAddr>().unwrap());
/// let nat64: IpAddr = "64:ff9b::192.0.2.7".parse().unwrap();
/// assert_eq!(ip_key(nat64, 32, 64), "192.0.2.7".parse::<IpAddr>().unwrap());
/// ```
pub fn ip_key(ip: IpAddr, v4_prefix: u8, v6_prefix: u8) -> IpAddr {
    let ip = match ip.to_canonical() {
        IpAddr::V6(v6) => embedded_v4(v6).map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    };
    masked(ip, v4_prefix, v6_prefix)
}

/// The IPv4 address that an IPv6 address embeds by a fixed rule, not by a network's
/// choice: NAT64's well-known prefix, SIIT's IPv4-translated addresses, and
/// IPv4-compatible addresses (whose IPv4 part is outside `0.0.0.0/8`, which no client has:
/// so `::` and `::1` stay IPv6).
fn embedded_v4(v6: Ipv6Addr) -> Option<Ipv4Addr> {
    const WELL_KNOWN_NAT64: u128 = 0x0064_ff9b_0000_0000_0000_0000;
    // SIIT's IPv4-translated addresses, `::ffff:0:a.b.c.d` (RFC 7915).
    const IPV4_TRANSLATED: u128 = 0xffff_0000;
    let bits = u128::from(v6);
    let v4 = Ipv4Addr::from(bits as u32);
    match bits >> 32 {
        WELL_KNOWN_NAT64 | IPV4_TRANSLATED => Some(v4),
        0 if v4.octets()[0] != 0 => Some(v4),
        _ => None,
    }
}

/// `ip` with its host bits cleared past the prefix of its family.
fn masked(ip: IpAddr, v4_prefix: u8, v6_prefix: u8) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => IpAddr::V4(Ipv4Addr::from(mask_u32(v4.into(), v4_prefix))),
        IpAddr::V6(v6) => IpAddr::V6(Ipv6Addr::from(mask_u128(v6.into(), v6_prefix))),
    }
}

fn mask_u32(bits: u32, prefix: u8) -> u32 {
    match prefix {
        0 => 0,
        p if p >= 32 => bits,
        p => bits & (u32::MAX << (32 - p)),
    }
}

fn mask_u128(bits: u128, prefix: u8) -> u128 {
    match prefix {
        0 => 0,
        p if p >= 128 => bits,
        p => bits & (u128::MAX << (128 - p)),
    }
}

/// The prefixes client addresses are keyed by (see [`ip_key`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Prefixes {
    v4: u8,
    v6: u8,
}

impl Default for Prefixes {
    fn default() -> Self {
        Prefixes { v4: 32, v6: 64 }
    }
}

/// Keys requests by the connection's peer address ([`peer_addr`]), IPv6 by its /64. Use it
/// when clients connect directly; behind a proxy or load balancer every request would share
/// the proxy's key: use [`ClientIp`] there.
///
/// # Examples
///
/// ```
/// use std::net::{IpAddr, SocketAddr};
/// use tollgate_http::{KeyExtractor, PeerIp};
///
/// let mut req = http::Request::new(());
/// req.extensions_mut().insert("[2001:db8::1]:443".parse::<SocketAddr>().unwrap());
/// let (parts, ()) = req.into_parts();
/// let key = PeerIp::new().ipv6_prefix(48).extract(&parts);
/// assert_eq!(key, Some("2001:db8::".parse::<IpAddr>().unwrap()));
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct PeerIp {
    prefixes: Prefixes,
}

impl PeerIp {
    /// Keys by peer address: IPv4 addresses whole, IPv6 addresses by their /64.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::net::SocketAddr;
    /// use tollgate_http::{KeyExtractor, PeerIp};
    ///
    /// let key_of = |peer: &str| {
    ///     let mut req = http::Request::new(());
    ///     req.extensions_mut().insert(peer.parse::<SocketAddr>().unwrap());
    ///     PeerIp::new().extract(&req.into_parts().0)
    /// };
    /// assert_eq!(key_of("192.0.2.7:4000"), Some("192.0.2.7".parse().unwrap()));
    /// assert_eq!(key_of("[2001:db8:1:2:3::9]:4000"), Some("2001:db8:1:2::".parse().unwrap()));
    /// ```
    pub fn new() -> PeerIp {
        PeerIp::default()
    }

    /// Keys IPv6 clients by their first `bits` bits (64 by default; 128 keys each address).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::net::SocketAddr;
    /// use tollgate_http::{KeyExtractor, PeerIp};
    ///
    /// let per_site = PeerIp::new().ipv6_prefix(48);
    /// let key_of = |peer: &str| {
    ///     let mut req = http::Request::new(());
    ///     req.extensions_mut().insert(peer.parse::<SocketAddr>().unwrap());
    ///     per_site.extract(&req.into_parts().0)
    /// };
    /// // Two networks of one /48 site: one key.
    /// assert_eq!(key_of("[2001:db8:1:2::9]:4000"), Some("2001:db8:1::".parse().unwrap()));
    /// assert_eq!(key_of("[2001:db8:1:ff::7]:4000"), key_of("[2001:db8:1:2::9]:4000"));
    /// ```
    pub fn ipv6_prefix(mut self, bits: u8) -> PeerIp {
        self.prefixes.v6 = bits.min(128);
        self
    }

    /// Keys IPv4 clients by their first `bits` bits (32 by default: each address).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::net::SocketAddr;
    /// use tollgate_http::{KeyExtractor, PeerIp};
    ///
    /// let per_slash24 = PeerIp::new().ipv4_prefix(24);
    /// let mut req = http::Request::new(());
    /// req.extensions_mut().insert("192.0.2.77:4000".parse::<SocketAddr>().unwrap());
    /// let (parts, ()) = req.into_parts();
    /// assert_eq!(per_slash24.extract(&parts), Some("192.0.2.0".parse().unwrap()));
    /// ```
    pub fn ipv4_prefix(mut self, bits: u8) -> PeerIp {
        self.prefixes.v4 = bits.min(32);
        self
    }
}

impl KeyExtractor for PeerIp {
    type Key = IpAddr;

    fn extract(&self, parts: &Parts) -> Option<IpAddr> {
        self.try_extract(parts).ok()
    }

    fn try_extract(&self, parts: &Parts) -> Result<IpAddr, NoKey> {
        let peer = required_peer_addr(parts)?;
        Ok(ip_key(peer, self.prefixes.v4, self.prefixes.v6))
    }
}

/// The client address behind trusted proxies, as nginx's `set_real_ip_from` with
/// `real_ip_recursive on`: starting from the peer address, while the address in hand is a
/// trusted proxy, step to the next `X-Forwarded-For` entry from the right. The first
/// address that is not a trusted proxy is the client. Entries left of it were written by
/// the client itself, so a client cannot choose its key by sending `X-Forwarded-For`.
///
/// * A peer that is not trusted is the client, whatever the headers say.
/// * If every address is trusted, the leftmost one is the client (a trusted peer without
///   the header, such as the proxy's own health check, is keyed as itself).
/// * The field is split from the right on its raw bytes, and an element is judged only if
///   the walk reaches it: whatever a client writes left of the address its proxy appended
///   (non-ASCII bytes, quotes, grammar errors) changes nothing.
/// * A walk that reaches an element that is not an address (malformed, `unknown`,
///   non-ASCII) cannot attribute the request ([`NoKey::Unattributable`]): it is keyed
///   neither as the proxy nor as anything the client wrote, but gets the layer's
///   `MissingKey` (tollgate-tower) policy (a 400 by default), and is counted in
///   `Counts::unattributable` (tollgate-tower).
/// * Empty elements are skipped, and several `X-Forwarded-For` fields are read as one
///   list, in order.
/// * [`ClientIp::header`] walks RFC 7239 `Forwarded` or `X-Real-IP` instead (see
///   [`ForwardedHeader`]); only one header is read, so a client cannot slip an address in
///   through a header your proxies do not write.
///
/// Entries may carry a port (`192.0.2.1:4711`, `[2001:db8::1]:4711`) or brackets. Keys are
/// masked as [`ip_key`] says (IPv6 by /64 by default).
///
/// # Examples
///
/// ```
/// use std::net::{IpAddr, SocketAddr};
/// use tollgate_http::{ClientIp, KeyExtractor};
///
/// let client_ip = ClientIp::trusting(["10.0.0.0/8"]).unwrap();
/// let mut req = http::Request::get("/")
///     .header("x-forwarded-for", "6.6.6.6, 198.51.100.4, 10.1.1.1")
///     .body(())
///     .unwrap();
/// req.extensions_mut().insert("10.0.0.2:40000".parse::<SocketAddr>().unwrap());
/// let (parts, ()) = req.into_parts();
/// // 10.0.0.2 and 10.1.1.1 are proxies; 6.6.6.6 was written by the client: ignored.
/// assert_eq!(client_ip.extract(&parts), Some("198.51.100.4".parse::<IpAddr>().unwrap()));
/// ```
#[derive(Debug, Clone, Default)]
pub struct ClientIp {
    trusted: Vec<Cidr>,
    prefixes: Prefixes,
    header: ForwardedHeader,
}

impl ClientIp {
    /// Trusts the proxies in `cidrs` (`"10.0.0.0/8"`, `"2001:db8::/32"`, or a bare address).
    ///
    /// # Errors
    ///
    /// [`CidrError`] for the first entry that does not parse.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate_http::ClientIp;
    ///
    /// assert!(ClientIp::trusting(["127.0.0.1", "10.0.0.0/8", "fd00::/8"]).is_ok());
    /// assert!(ClientIp::trusting(["10.0.0.0/33"]).is_err());
    /// ```
    pub fn trusting<I>(cidrs: I) -> Result<ClientIp, CidrError>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        let trusted = cidrs
            .into_iter()
            .map(|c| c.as_ref().parse())
            .collect::<Result<_, _>>()?;
        Ok(ClientIp::from_cidrs(trusted))
    }

    /// Trusts the proxies in `cidrs`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::net::SocketAddr;
    /// use tollgate_http::{Cidr, ClientIp, KeyExtractor};
    ///
    /// let lb: Cidr = "192.168.0.0/16".parse().unwrap();
    /// let client_ip = ClientIp::from_cidrs(vec![lb]);
    /// let mut req = http::Request::get("/")
    ///     .header("x-forwarded-for", "203.0.113.9")
    ///     .body(())
    ///     .unwrap();
    /// req.extensions_mut().insert("192.168.4.2:40000".parse::<SocketAddr>().unwrap());
    /// let (parts, ()) = req.into_parts();
    /// assert_eq!(client_ip.extract(&parts), Some("203.0.113.9".parse().unwrap()));
    /// ```
    pub fn from_cidrs(cidrs: Vec<Cidr>) -> ClientIp {
        ClientIp {
            trusted: cidrs,
            prefixes: Prefixes::default(),
            header: ForwardedHeader::default(),
        }
    }

    /// Which forwarding header to walk ([`ForwardedHeader::XForwardedFor`] by default).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::net::SocketAddr;
    /// use tollgate_http::{ClientIp, ForwardedHeader};
    ///
    /// let behind_nginx = ClientIp::trusting(["127.0.0.1"]).unwrap().header(ForwardedHeader::XRealIp);
    /// let mut req = http::Request::get("/")
    ///     .header("x-real-ip", "203.0.113.9")
    ///     .header("x-forwarded-for", "6.6.6.6") // not read: the client may have written it
    ///     .body(())
    ///     .unwrap();
    /// req.extensions_mut().insert("127.0.0.1:40000".parse::<SocketAddr>().unwrap());
    /// let (parts, ()) = req.into_parts();
    /// assert_eq!(behind_nginx.client_addr(&parts), Some("203.0.113.9".parse().unwrap()));
    /// ```
    pub fn header(mut self, header: ForwardedHeader) -> ClientIp {
        self.header = header;
        self
    }

    /// Keys IPv6 clients by their first `bits` bits (64 by default).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::net::SocketAddr;
    /// use tollgate_http::{ClientIp, KeyExtractor};
    ///
    /// let client_ip = ClientIp::trusting(["10.0.0.0/8"]).unwrap().ipv6_prefix(56);
    /// let mut req = http::Request::get("/")
    ///     .header("x-forwarded-for", "2001:db8:0:ab12::1")
    ///     .body(())
    ///     .unwrap();
    /// req.extensions_mut().insert("10.0.0.2:40000".parse::<SocketAddr>().unwrap());
    /// let (parts, ()) = req.into_parts();
    /// assert_eq!(client_ip.extract(&parts), Some("2001:db8:0:ab00::".parse().unwrap()));
    /// assert_eq!(client_ip.client_addr(&parts), Some("2001:db8:0:ab12::1".parse().unwrap()));
    /// ```
    pub fn ipv6_prefix(mut self, bits: u8) -> ClientIp {
        self.prefixes.v6 = bits.min(128);
        self
    }

    /// Keys IPv4 clients by their first `bits` bits (32 by default).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::net::SocketAddr;
    /// use tollgate_http::{ClientIp, KeyExtractor};
    ///
    /// let client_ip = ClientIp::trusting(["10.0.0.0/8"]).unwrap().ipv4_prefix(24);
    /// let mut req = http::Request::get("/")
    ///     .header("x-forwarded-for", "198.51.100.77")
    ///     .body(())
    ///     .unwrap();
    /// req.extensions_mut().insert("10.0.0.2:40000".parse::<SocketAddr>().unwrap());
    /// let (parts, ()) = req.into_parts();
    /// assert_eq!(client_ip.extract(&parts), Some("198.51.100.0".parse().unwrap()));
    /// ```
    pub fn ipv4_prefix(mut self, bits: u8) -> ClientIp {
        self.prefixes.v4 = bits.min(32);
        self
    }

    /// Whether `ip` is a trusted proxy.
    ///
    /// # Examples
    ///
    /// ```
    /// let client_ip = tollgate_http::ClientIp::trusting(["10.0.0.0/8"]).unwrap();
    /// assert!(client_ip.is_trusted("10.9.9.9".parse().unwrap()));
    /// assert!(client_ip.is_trusted("::ffff:10.9.9.9".parse().unwrap())); // IPv4-mapped
    /// assert!(!client_ip.is_trusted("11.0.0.1".parse().unwrap()));
    /// ```
    pub fn is_trusted(&self, ip: IpAddr) -> bool {
        // The address's family first, once, rather than in every range's test.
        match ip.to_canonical() {
            IpAddr::V4(ip) => {
                let ip = u32::from(ip);
                self.trusted.iter().any(|c| c.contains_v4(ip))
            }
            IpAddr::V6(ip) => {
                let ip = u128::from(ip);
                self.trusted.iter().any(|c| c.contains_v6(ip))
            }
        }
    }

    /// The client's full address (unmasked), or `None` without a peer address or when the
    /// walk cannot attribute the request ([`try_client_addr`](Self::try_client_addr) says
    /// which).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::net::{IpAddr, SocketAddr};
    ///
    /// let client_ip = tollgate_http::ClientIp::trusting(["127.0.0.1"]).unwrap();
    /// let request = |xff: &[u8]| {
    ///     let mut req = http::Request::get("/").header("x-forwarded-for", xff).body(()).unwrap();
    ///     req.extensions_mut().insert("127.0.0.1:9999".parse::<SocketAddr>().unwrap());
    ///     req.into_parts().0
    /// };
    /// // What the client wrote left of the address the proxy appended is never read.
    /// let client = client_ip.client_addr(&request(b"\x80\xff, 203.0.113.50"));
    /// assert_eq!(client, Some("203.0.113.50".parse::<IpAddr>().unwrap()));
    /// // A walk that reaches an element that is no address has no client: not the proxy.
    /// assert_eq!(client_ip.client_addr(&request(b"not-an-ip")), None);
    /// ```
    pub fn client_addr(&self, parts: &Parts) -> Option<IpAddr> {
        self.try_client_addr(parts).ok()
    }

    /// The client's full address (unmasked), or why there is none.
    ///
    /// # Errors
    ///
    /// [`NoKey::NoPeerAddress`] without a peer address; [`NoKey::Unattributable`] when the
    /// walk from a trusted peer reaches an element that is not an address.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::net::SocketAddr;
    /// use tollgate_http::{ClientIp, NoKey};
    ///
    /// let client_ip = ClientIp::trusting(["127.0.0.1"]).unwrap();
    /// let mut req = http::Request::get("/").header("x-forwarded-for", "unknown").body(()).unwrap();
    /// req.extensions_mut().insert("127.0.0.1:9999".parse::<SocketAddr>().unwrap());
    /// let (parts, ()) = req.into_parts();
    /// assert_eq!(client_ip.try_client_addr(&parts), Err(NoKey::Unattributable));
    /// ```
    pub fn try_client_addr(&self, parts: &Parts) -> Result<IpAddr, NoKey> {
        self.client_of(required_peer_addr(parts)?, &parts.headers)
    }

    /// The client's full address (unmasked) behind `peer`, the address the request came
    /// from, as a proxy that holds it outside the request knows it: the walk of
    /// [`try_client_addr`](Self::try_client_addr) over `headers`.
    ///
    /// # Errors
    ///
    /// [`NoKey::Unattributable`] when the walk from a trusted peer reaches an element that
    /// is not an address.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::net::IpAddr;
    /// use tollgate_http::{ClientIp, NoKey};
    ///
    /// let client_ip = ClientIp::trusting(["10.0.0.0/8"]).unwrap();
    /// let mut headers = http::HeaderMap::new();
    /// headers.insert("x-forwarded-for", "6.6.6.6, 198.51.100.4".parse().unwrap());
    /// let from_balancer: IpAddr = "10.0.0.2".parse().unwrap();
    /// let client = client_ip.client_of(from_balancer, &headers);
    /// assert_eq!(client, Ok("198.51.100.4".parse::<IpAddr>().unwrap()));
    /// // An untrusted peer is the client, whatever it wrote.
    /// let stranger: IpAddr = "192.0.2.1".parse().unwrap();
    /// assert_eq!(client_ip.client_of(stranger, &headers), Ok(stranger));
    /// headers.insert("x-forwarded-for", "unknown".parse().unwrap());
    /// assert_eq!(client_ip.client_of(from_balancer, &headers), Err(NoKey::Unattributable));
    /// ```
    pub fn client_of(&self, peer: IpAddr, headers: &http::HeaderMap) -> Result<IpAddr, NoKey> {
        let mut current = peer.to_canonical();
        if !self.is_trusted(current) {
            return Ok(current);
        }
        let mut attributed = true;
        self.header.walk_back(headers, |hop| match hop {
            Some(ip) => {
                current = ip;
                self.is_trusted(current)
            }
            None => {
                attributed = false;
                false
            }
        });
        if attributed {
            Ok(current)
        } else {
            Err(NoKey::Unattributable)
        }
    }

    /// The key of the client behind `peer` (see [`client_of`](Self::client_of)), masked
    /// to this source's prefixes as [`ip_key`] says: what [`KeyExtractor::try_extract`]
    /// answers, for a proxy that holds the peer address outside the request.
    ///
    /// # Errors
    ///
    /// As [`client_of`](Self::client_of).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::net::IpAddr;
    /// use tollgate_http::ClientIp;
    ///
    /// let client_ip = ClientIp::trusting(["127.0.0.1"]).unwrap();
    /// let mut headers = http::HeaderMap::new();
    /// headers.insert("x-forwarded-for", "2001:db8:1:2:aaaa::1".parse().unwrap());
    /// let key = client_ip.key_of("127.0.0.1".parse().unwrap(), &headers);
    /// assert_eq!(key, Ok("2001:db8:1:2::".parse::<IpAddr>().unwrap())); // its /64
    /// ```
    pub fn key_of(&self, peer: IpAddr, headers: &http::HeaderMap) -> Result<IpAddr, NoKey> {
        let ip = self.client_of(peer, headers)?;
        Ok(ip_key(ip, self.prefixes.v4, self.prefixes.v6))
    }
}

impl KeyExtractor for ClientIp {
    type Key = IpAddr;

    fn extract(&self, parts: &Parts) -> Option<IpAddr> {
        self.try_extract(parts).ok()
    }

    fn try_extract(&self, parts: &Parts) -> Result<IpAddr, NoKey> {
        self.key_of(required_peer_addr(parts)?, &parts.headers)
    }
}

/// Keys requests by the value of a header (an API key, a token). A request without it, or
/// with an empty value, has no key. With several fields of that name, the first counts.
///
/// The value is the client's to choose: keyed by it alone, a client that sends a new value
/// with each request gets a fresh limit each time (the table holds each such key until it
/// expires, within its cap). So limit by a header only where unknown values are refused
/// before the limit is checked (an authentication layer outside the rate limit), or key by
/// the identity that layer verified ([`ExtensionKey`]), or put a limit keyed by the peer
/// ([`PeerIp`], [`ClientIp`]) around this one.
///
/// # Examples
///
/// ```
/// use tollgate_http::{HeaderKey, KeyExtractor};
///
/// let api_key = HeaderKey::new(http::HeaderName::from_static("x-api-key"));
/// let (parts, ()) = http::Request::get("/").header("x-api-key", "k-123").body(()).unwrap().into_parts();
/// assert_eq!(api_key.extract(&parts).unwrap(), "k-123");
/// let (parts, ()) = http::Request::get("/").body(()).unwrap().into_parts();
/// assert_eq!(api_key.extract(&parts), None);
/// ```
#[derive(Debug, Clone)]
pub struct HeaderKey {
    name: HeaderName,
}

impl HeaderKey {
    /// Keys by the header `name`: a [`HeaderName`], or a `&'static str` literal.
    ///
    /// # Panics
    ///
    /// If a string `name` is not a valid lower-case header name (as
    /// [`HeaderName::from_static`], which it is for: a literal in the program, checked on the
    /// first run).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate_http::{HeaderKey, KeyExtractor};
    ///
    /// let by_token = HeaderKey::new(http::header::AUTHORIZATION);
    /// let by_api_key = HeaderKey::new("x-api-key");
    /// let (parts, ()) = http::Request::get("/")
    ///     .header("authorization", "Bearer t-1")
    ///     .header("x-api-key", "k-2")
    ///     .body(())
    ///     .unwrap()
    ///     .into_parts();
    /// assert_eq!(by_token.extract(&parts).unwrap(), "Bearer t-1");
    /// assert_eq!(by_api_key.extract(&parts).unwrap(), "k-2");
    /// ```
    ///
    /// A name that is not lower case panics, as [`HeaderName::from_static`] does:
    ///
    /// ```should_panic
    /// tollgate_http::HeaderKey::new("X-Api-Key");
    /// ```
    pub fn new(name: impl Into<HeaderKeyName>) -> HeaderKey {
        HeaderKey {
            name: name.into().0,
        }
    }
}

/// A header name for [`HeaderKey::new`]: from a [`HeaderName`] or a `&'static str` literal.
#[derive(Debug, Clone)]
pub struct HeaderKeyName(HeaderName);

impl From<HeaderName> for HeaderKeyName {
    fn from(name: HeaderName) -> HeaderKeyName {
        HeaderKeyName(name)
    }
}

impl From<&'static str> for HeaderKeyName {
    fn from(name: &'static str) -> HeaderKeyName {
        HeaderKeyName(HeaderName::from_static(name))
    }
}

/// Keys requests by a value an earlier layer put in the request's extensions: the user or
/// tenant an authentication layer resolved (`req.extensions_mut().insert(UserId(42))`), so
/// the limit follows who the request is from, as that layer decided, not a header the
/// client wrote. A request without it has no key (the layer's
/// `MissingKey` (tollgate-tower) policy: put the authentication layer outside this
/// one, so that it runs first).
///
/// # Examples
///
/// ```
/// use tollgate_http::{ExtensionKey, KeyExtractor};
///
/// #[derive(Clone, Hash, PartialEq, Eq, Debug)]
/// struct UserId(u64);
///
/// let by_user = ExtensionKey::<UserId>::new();
/// let mut req = http::Request::get("/").body(()).unwrap();
/// req.extensions_mut().insert(UserId(42)); // what the auth layer did
/// let (parts, ()) = req.into_parts();
/// assert_eq!(by_user.extract(&parts), Some(UserId(42)));
/// let (anonymous, ()) = http::Request::get("/").body(()).unwrap().into_parts();
/// assert_eq!(by_user.extract(&anonymous), None);
/// ```
pub struct ExtensionKey<T> {
    // `fn() -> T`: the key source holds no `T`, so it is `Send + Sync` whatever `T` is.
    _key: std::marker::PhantomData<fn() -> T>,
}

impl<T> ExtensionKey<T> {
    /// Keys by the request's extension of type `T`.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate_http::{ExtensionKey, KeyExtractor};
    ///
    /// let by_tenant = ExtensionKey::<String>::new();
    /// let mut req = http::Request::get("/").body(()).unwrap();
    /// req.extensions_mut().insert(String::from("acme")); // what the tenant layer resolved
    /// let (parts, ()) = req.into_parts();
    /// assert_eq!(by_tenant.extract(&parts).as_deref(), Some("acme"));
    /// ```
    pub fn new() -> ExtensionKey<T> {
        ExtensionKey {
            _key: std::marker::PhantomData,
        }
    }
}

impl<T> Default for ExtensionKey<T> {
    fn default() -> Self {
        ExtensionKey::new()
    }
}

impl<T> Clone for ExtensionKey<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for ExtensionKey<T> {}

impl<T> fmt::Debug for ExtensionKey<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ExtensionKey<{}>", std::any::type_name::<T>())
    }
}

impl<T> KeyExtractor for ExtensionKey<T>
where
    T: Clone + Hash + Send + Sync + 'static,
{
    type Key = T;

    fn extract(&self, parts: &Parts) -> Option<T> {
        parts.extensions.get::<T>().cloned()
    }
}

impl KeyExtractor for HeaderKey {
    type Key = HeaderValue;

    fn extract(&self, parts: &Parts) -> Option<HeaderValue> {
        parts
            .headers
            .get(&self.name)
            .filter(|v| !v.is_empty())
            .cloned()
    }
}

/// One key for every request: a global limit on the service.
///
/// # Examples
///
/// ```
/// use tollgate_http::{Global, KeyExtractor};
///
/// let (parts, ()) = http::Request::new(()).into_parts();
/// assert_eq!(Global.extract(&parts), Some(()));
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct Global;

impl KeyExtractor for Global {
    type Key = ();

    fn extract(&self, _: &Parts) -> Option<()> {
        Some(())
    }
}

/// An address range: `10.0.0.0/8`, `2001:db8::/32`, or one address (`/32` or `/128`
/// implied). IPv4-mapped IPv6 addresses are matched as the IPv4 addresses they map.
///
/// # Examples
///
/// ```
/// use tollgate_http::Cidr;
///
/// let net: Cidr = "192.168.0.0/16".parse().unwrap();
/// assert!(net.contains("192.168.44.1".parse().unwrap()));
/// assert!(!net.contains("192.169.0.1".parse().unwrap()));
/// assert!("2001:db8::/129".parse::<Cidr>().is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    addr: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// Whether `ip` is in the range.
    ///
    /// # Examples
    ///
    /// ```
    /// let lo: tollgate_http::Cidr = "::1".parse().unwrap();
    /// assert!(lo.contains("::1".parse().unwrap()));
    /// assert!(!lo.contains("::2".parse().unwrap()));
    /// ```
    pub fn contains(&self, ip: IpAddr) -> bool {
        match ip.to_canonical() {
            IpAddr::V4(ip) => self.contains_v4(ip.into()),
            IpAddr::V6(ip) => self.contains_v6(ip.into()),
        }
    }

    /// [`contains`](Self::contains) for an IPv4 address (canonical), as bits.
    #[inline]
    fn contains_v4(&self, ip: u32) -> bool {
        match self.addr {
            IpAddr::V4(net) => mask_u32(ip, self.prefix) == u32::from(net),
            IpAddr::V6(_) => false,
        }
    }

    /// [`contains`](Self::contains) for an IPv6 address that maps no IPv4 one, as bits.
    #[inline]
    fn contains_v6(&self, ip: u128) -> bool {
        match self.addr {
            IpAddr::V6(net) => mask_u128(ip, self.prefix) == u128::from(net),
            IpAddr::V4(_) => false,
        }
    }
}

impl FromStr for Cidr {
    type Err = CidrError;

    fn from_str(s: &str) -> Result<Cidr, CidrError> {
        let err = || CidrError {
            input: s.to_owned(),
        };
        let (addr, prefix) = match s.trim().split_once('/') {
            Some((addr, prefix)) => (addr, Some(prefix)),
            None => (s.trim(), None),
        };
        let raw = addr.parse::<IpAddr>().map_err(|_| err())?;
        let max = if raw.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            // Decimal digits only, as written in CIDR notation (`u8`'s parser would take
            // `+8` and `08`).
            Some(p) if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) => return Err(err()),
            Some(p) if p.len() > 1 && p.starts_with('0') => return Err(err()),
            Some(p) => p.parse::<u8>().ok().filter(|&p| p <= max).ok_or_else(err)?,
        };
        let addr = raw.to_canonical();
        // A mapped IPv6 range (`::ffff:10.0.0.0/104`) is the IPv4 range it maps.
        let prefix = if raw.is_ipv6() && addr.is_ipv4() {
            prefix.checked_sub(96).ok_or_else(err)?
        } else {
            prefix
        };
        let addr = masked(addr, prefix, prefix);
        Ok(Cidr { addr, prefix })
    }
}

/// The range in its normal form: the network address (host bits cleared) and the prefix,
/// an IPv4-mapped range as the IPv4 range it maps, one address with its full prefix.
///
/// ```
/// use tollgate_http::Cidr;
///
/// let show = |text: &str| text.parse::<Cidr>().unwrap().to_string();
/// assert_eq!(show("10.1.2.3/8"), "10.0.0.0/8");
/// assert_eq!(show("::ffff:10.1.2.3/112"), "10.1.0.0/16");
/// assert_eq!(show("2001:db8:1:2:3::/48"), "2001:db8:1::/48");
/// assert_eq!(show("192.0.2.7"), "192.0.2.7/32");
/// ```
impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

/// A trusted-proxy range that does not parse.
///
/// # Examples
///
/// ```
/// let err = "10.0.0.0/99".parse::<tollgate_http::Cidr>().unwrap_err();
/// assert_eq!(err.to_string(), "not an address range: \"10.0.0.0/99\"");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CidrError {
    input: String,
}

impl fmt::Display for CidrError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "not an address range: {:?}", self.input)
    }
}

impl std::error::Error for CidrError {}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(peer: &str, xff: &[&str]) -> Parts {
        let mut req = http::Request::get("/");
        for v in xff {
            req = req.header("x-forwarded-for", *v);
        }
        let mut req = req.body(()).unwrap();
        req.extensions_mut()
            .insert(peer.parse::<SocketAddr>().unwrap());
        req.into_parts().0
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn cidr_parsing() {
        let c: Cidr = "10.1.2.3/8".parse().unwrap();
        assert_eq!(c.to_string(), "10.0.0.0/8");
        assert!(c.contains(ip("10.200.0.1")));
        assert!(c.contains(ip("::ffff:10.200.0.1")));
        assert!(!c.contains(ip("2001:db8::1")));
        let all: Cidr = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains(ip("1.2.3.4")));
        let mapped: Cidr = "::ffff:10.0.0.0/104".parse().unwrap();
        assert_eq!(mapped, c);
        for bad in [
            "",
            "10.0.0.0/",
            "10.0.0.0/33",
            "::/129",
            "x",
            "10.0.0.0/-1",
            "10.0.0.0/+8",
            "10.0.0.0/08",
            "10.0.0.0/ 8",
            "1.2.3/8",
        ] {
            assert!(bad.parse::<Cidr>().is_err(), "{bad}");
        }
    }

    #[test]
    fn ipv6_keyed_by_prefix() {
        let a = ip("2001:db8:aa:bb:1::1");
        let b = ip("2001:db8:aa:bb:ffff:ffff:ffff:ffff");
        let c = ip("2001:db8:aa:bc::1");
        assert_eq!(ip_key(a, 32, 64), ip_key(b, 32, 64));
        assert_ne!(ip_key(a, 32, 64), ip_key(c, 32, 64));
        assert_eq!(ip_key(a, 32, 48), ip_key(c, 32, 48));
        assert_ne!(ip_key(a, 32, 128), ip_key(b, 32, 128));
        assert_eq!(ip_key(ip("::ffff:1.2.3.4"), 32, 64), ip("1.2.3.4"));
        // Addresses that stand for an IPv4 client: keyed as it, each its own.
        assert_eq!(ip_key(ip("64:ff9b::1.2.3.4"), 32, 64), ip("1.2.3.4"));
        assert_eq!(ip_key(ip("64:ff9b::1.2.3.4"), 24, 64), ip("1.2.3.0"));
        assert_eq!(ip_key(ip("::1.2.3.4"), 32, 64), ip("1.2.3.4"));
        assert_eq!(ip_key(ip("::ffff:0:1.2.3.4"), 32, 64), ip("1.2.3.4"));
        assert_ne!(
            ip_key(ip("64:ff9b::1.2.3.4"), 32, 64),
            ip_key(ip("64:ff9b::1.2.3.5"), 32, 64)
        );
        // Not those: loopback, unspecified, a neighbour of the NAT64 prefix.
        assert_eq!(ip_key(ip("::1"), 32, 128), ip("::1"));
        assert_eq!(ip_key(ip("::"), 32, 128), ip("::"));
        assert_eq!(
            ip_key(ip("64:ff9b:0:1::1.2.3.4"), 32, 64),
            ip("64:ff9b:0:1::")
        );
        assert_eq!(
            "64:ff9b::/96".parse::<Cidr>().unwrap().to_string(),
            "64:ff9b::/96"
        );
        assert_eq!(ip_key(ip("1.2.3.4"), 24, 64), ip("1.2.3.0"));

        let peer = PeerIp::new();
        let key = |p: &str| peer.extract(&parts(p, &[]));
        assert_eq!(
            key("[2001:db8:aa:bb:1::1]:1"),
            key("[2001:db8:aa:bb:2::2]:2")
        );
        assert_ne!(key("[2001:db8:aa:bb::1]:1"), key("[2001:db8:aa:bc::1]:1"));
        assert_eq!(key("[::ffff:192.0.2.1]:1"), key("192.0.2.1:2"));
    }

    #[test]
    fn trusted_proxy_walk() {
        let c = ClientIp::trusting(["10.0.0.0/8", "2001:db8:ffff::/48"]).unwrap();
        let addr = |peer, xff: &[&str]| c.client_addr(&parts(peer, xff)).unwrap();
        // Untrusted peer: headers ignored.
        assert_eq!(addr("1.1.1.1:1", &["2.2.2.2"]), ip("1.1.1.1"));
        // Trusted peer without a header: the peer.
        assert_eq!(addr("10.0.0.1:1", &[]), ip("10.0.0.1"));
        // Right to left, skipping trusted hops; leftmost spoof ignored.
        assert_eq!(
            addr("10.0.0.1:1", &["9.9.9.9, 3.3.3.3, 10.2.2.2"]),
            ip("3.3.3.3")
        );
        // Several fields are one list.
        assert_eq!(
            addr("10.0.0.1:1", &["9.9.9.9, 3.3.3.3", "10.2.2.2"]),
            ip("3.3.3.3")
        );
        // All trusted: the leftmost.
        assert_eq!(addr("10.0.0.1:1", &["10.3.3.3, 10.2.2.2"]), ip("10.3.3.3"));
        // Ports, brackets, IPv6, mapped.
        assert_eq!(addr("10.0.0.1:1", &["3.3.3.3:80"]), ip("3.3.3.3"));
        assert_eq!(addr("10.0.0.1:1", &["[2001:db8::5]:80"]), ip("2001:db8::5"));
        assert_eq!(addr("10.0.0.1:1", &["[2001:db8::5]"]), ip("2001:db8::5"));
        assert_eq!(addr("10.0.0.1:1", &["::ffff:3.3.3.3"]), ip("3.3.3.3"));
        assert_eq!(addr("[::ffff:10.0.0.1]:1", &["3.3.3.3"]), ip("3.3.3.3"));
        // Empty elements name nothing: skipped.
        assert_eq!(addr("10.0.0.1:1", &[""]), ip("10.0.0.1"));
        assert_eq!(addr("10.0.0.1:1", &[",,,"]), ip("10.0.0.1"));
        assert_eq!(addr("10.0.0.1:1", &["3.3.3.3, ,"]), ip("3.3.3.3"));
        // Malformed elements right of the client are never reached.
        assert_eq!(addr("10.0.0.1:1", &["garbage, 3.3.3.3"]), ip("3.3.3.3"));
        assert_eq!(
            addr("10.0.0.1:1", &["unknown, 3.3.3.3, 10.5.5.5"]),
            ip("3.3.3.3")
        );
        // One that is reached: unattributable, whoever stands right or left of it.
        let why = |peer, xff: &[&str]| c.try_client_addr(&parts(peer, xff));
        for xff in [
            "3.3.3.3, garbage",
            "3.3.3.3, 10.5.5.5, unknown",
            "garbage, 10.5.5.5",
            "3.3.3.3, 4.4.4.4:99999",
            "_hidden",
        ] {
            assert_eq!(
                why("10.0.0.1:1", &[xff]),
                Err(NoKey::Unattributable),
                "{xff}"
            );
            assert_eq!(c.extract(&parts("10.0.0.1:1", &[xff])), None, "{xff}");
            assert_eq!(c.client_addr(&parts("10.0.0.1:1", &[xff])), None, "{xff}");
        }
        // No peer address at all: no key, and that is what it says.
        let (no_peer, ()) = http::Request::new(()).into_parts();
        assert_eq!(c.client_addr(&no_peer), None);
        assert_eq!(c.try_extract(&no_peer), Err(NoKey::NoPeerAddress));
        assert_eq!(
            PeerIp::new().try_extract(&no_peer),
            Err(NoKey::NoPeerAddress)
        );
        // Keys are masked.
        let key = c.extract(&parts("10.0.0.1:1", &["2001:db8:1:2:3::4"]));
        assert_eq!(key, Some(ip("2001:db8:1:2::")));
    }

    /// A non-ASCII byte is judged where it stands, and only if the walk reaches it: left of
    /// the client it is never read; reached, it makes the request unattributable (never the
    /// proxy's key).
    #[test]
    fn non_ascii_forwarded_for_is_judged_per_element() {
        let c = ClientIp::trusting(["10.0.0.0/8"]).unwrap();
        let with = |xff: &[u8]| {
            let mut req = http::Request::new(());
            req.headers_mut().append(
                HeaderName::from_static("x-forwarded-for"),
                HeaderValue::from_bytes(xff).unwrap(),
            );
            req.extensions_mut()
                .insert("10.0.0.1:1".parse::<SocketAddr>().unwrap());
            c.try_client_addr(&req.into_parts().0)
        };
        assert_eq!(with(b"\x80\xff, 203.0.113.50"), Ok(ip("203.0.113.50")));
        assert_eq!(
            with(b"\x80\xff, 203.0.113.50, 10.9.9.9"),
            Ok(ip("203.0.113.50"))
        );
        assert_eq!(with(b"3.3.3.3, \xff"), Err(NoKey::Unattributable));
        assert_eq!(with(b"\xff, 10.9.9.9"), Err(NoKey::Unattributable));
    }
}
