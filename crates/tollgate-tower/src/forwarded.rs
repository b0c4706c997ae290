//! Reading the forwarding headers a trusted proxy writes into a list of hops, leftmost
//! first: `X-Forwarded-For`, RFC 7239 `Forwarded` (its `for=` parameters), `X-Real-IP`.
//!
//! A hop is `Some(address)` or `None`: an entry that names no usable address (malformed,
//! `unknown`, an obfuscated `_node`, a `Forwarded` element without `for=`). The walk in
//! [`ClientIp`](crate::ClientIp) stops at the first `None` it meets from the right. A field
//! that cannot be parsed at all becomes one `None`, and the hops left of it are dropped:
//! nothing written before a malformed field can be attributed to a proxy.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use http::HeaderMap;
use http::header::{FORWARDED, HeaderName};

/// Which header a [`ClientIp`](crate::ClientIp) walks. Configure your proxies to write
/// exactly one of them, and read only that one: a header your proxies do not write (or do
/// not overwrite) is the client's to choose.
///
/// # Examples
///
/// ```
/// use std::net::{IpAddr, SocketAddr};
/// use tollgate_tower::{ClientIp, ForwardedHeader, KeyExtractor};
///
/// let client_ip = ClientIp::trusting(["10.0.0.0/8"]).unwrap().header(ForwardedHeader::Forwarded);
/// let mut req = http::Request::get("/")
///     .header("forwarded", r#"for=6.6.6.6, for="[2001:db8::7]:4711";proto=https"#)
///     .body(())
///     .unwrap();
/// req.extensions_mut().insert("10.0.0.2:40000".parse::<SocketAddr>().unwrap());
/// let (parts, ()) = req.into_parts();
/// assert_eq!(client_ip.client_addr(&parts), Some("2001:db8::7".parse::<IpAddr>().unwrap()));
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum ForwardedHeader {
    /// `X-Forwarded-For: client, proxy1, proxy2` (the default). Several fields are read as
    /// one list, in order.
    ///
    /// ```
    /// use std::net::{IpAddr, SocketAddr};
    /// use tollgate_tower::{ClientIp, ForwardedHeader};
    ///
    /// let client_ip = ClientIp::trusting(["10.0.0.0/8"])
    ///     .unwrap()
    ///     .header(ForwardedHeader::XForwardedFor);
    /// // The client wrote `6.6.6.6`; the first proxy appended the client's address, the
    /// // second (the peer) the first proxy's.
    /// let mut req = http::Request::get("/")
    ///     .header("x-forwarded-for", "6.6.6.6, 203.0.113.9")
    ///     .header("x-forwarded-for", "10.0.0.5")
    ///     .body(())
    ///     .unwrap();
    /// req.extensions_mut().insert("10.0.0.2:40000".parse::<SocketAddr>().unwrap());
    /// let (parts, ()) = req.into_parts();
    /// assert_eq!(client_ip.client_addr(&parts), Some("203.0.113.9".parse::<IpAddr>().unwrap()));
    /// ```
    #[default]
    XForwardedFor,
    /// RFC 7239 `Forwarded: for=client;proto=https, for="[2001:db8::1]:4711"`: the `for=`
    /// parameter of each element, tokens or quoted strings, IPv6 in brackets, ports
    /// allowed. `unknown`, obfuscated identifiers (`_hidden`) and elements without `for=`
    /// name no address and end the walk there. A field that does not parse (an unterminated
    /// quote, a parameter without `=`, an unquoted IPv6 address) ends the walk at its
    /// right-hand edge. Several fields are read as one list, in order.
    Forwarded,
    /// `X-Real-IP: client`, one address written by the proxy in front of you (nginx's
    /// `proxy_set_header X-Real-IP $remote_addr`). Read only when the peer is trusted; two
    /// fields, or one that is not an address, are malformed and leave the key at the peer.
    XRealIp,
}

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_REAL_IP: HeaderName = HeaderName::from_static("x-real-ip");

impl ForwardedHeader {
    /// Hands `step` the hops the header lists, rightmost first, while it returns `true`.
    /// A field that does not parse is one `None` hop, and nothing left of it is handed
    /// over. `X-Forwarded-For` and `X-Real-IP` are walked without allocating.
    pub(crate) fn walk_back(
        self,
        headers: &HeaderMap,
        mut step: impl FnMut(Option<IpAddr>) -> bool,
    ) {
        match self {
            ForwardedHeader::XForwardedFor => {
                for value in headers.get_all(X_FORWARDED_FOR).iter().rev() {
                    let Ok(text) = value.to_str() else {
                        step(None);
                        return;
                    };
                    // `rsplit(',')` by hand: a byte scan from the right, where the
                    // general splitter's `memrchr` set-up cost more than a short field.
                    let mut rest = text;
                    loop {
                        let comma = rest.bytes().rposition(|b| b == b',');
                        let node = comma.map_or(rest, |i| &rest[i + 1..]);
                        if !step(parse_node(node)) {
                            return;
                        }
                        match comma {
                            Some(i) => rest = &rest[..i],
                            None => break,
                        }
                    }
                }
            }
            ForwardedHeader::Forwarded => {
                for value in headers.get_all(FORWARDED).iter().rev() {
                    let Some(nodes) = value.to_str().ok().and_then(forwarded_for) else {
                        step(None);
                        return;
                    };
                    for node in nodes.into_iter().rev() {
                        if !step(node) {
                            return;
                        }
                    }
                }
            }
            ForwardedHeader::XRealIp => {
                let mut values = headers.get_all(X_REAL_IP).iter();
                if let Some(value) = values.next() {
                    let ip = value.to_str().ok().and_then(parse_node);
                    step(if values.next().is_some() { None } else { ip });
                }
            }
        }
    }

    /// The hops the header lists, leftmost first (what [`walk_back`](Self::walk_back)
    /// sees, in reading order; the reference its tests compare it with).
    #[cfg(test)]
    pub(crate) fn hops(self, headers: &HeaderMap) -> Vec<Option<IpAddr>> {
        let mut hops = Vec::new();
        match self {
            ForwardedHeader::XForwardedFor => {
                for value in headers.get_all(X_FORWARDED_FOR) {
                    match value.to_str() {
                        Ok(text) => hops.extend(text.split(',').map(parse_node)),
                        Err(_) => malformed(&mut hops),
                    }
                }
            }
            ForwardedHeader::Forwarded => {
                for value in headers.get_all(FORWARDED) {
                    match value.to_str().ok().and_then(forwarded_for) {
                        Some(nodes) => hops.extend(nodes),
                        None => malformed(&mut hops),
                    }
                }
            }
            ForwardedHeader::XRealIp => {
                let mut values = headers.get_all(X_REAL_IP).iter();
                if let Some(value) = values.next() {
                    let ip = value.to_str().ok().and_then(parse_node);
                    hops.push(if values.next().is_some() { None } else { ip });
                }
            }
        }
        hops
    }
}

/// A field that does not parse: it and everything left of it become one unusable hop.
#[cfg(test)]
fn malformed(hops: &mut Vec<Option<IpAddr>>) {
    hops.clear();
    hops.push(None);
}

/// One node: an address, maybe bracketed, maybe with a port. `unknown`, obfuscated
/// identifiers and anything else: `None`.
fn parse_node(node: &str) -> Option<IpAddr> {
    // The text is visible ASCII or tab (`HeaderValue::to_str`), so ASCII trimming is
    // Unicode trimming here.
    let node = node.trim_ascii();
    // Most nodes are plain dotted quads: read those without std's general parser, which
    // tries every address form in turn.
    if let Some(v4) = dotted_quad(node.as_bytes()) {
        return Some(IpAddr::V4(v4));
    }
    if let Ok(ip) = node.parse::<IpAddr>() {
        return Some(ip.to_canonical());
    }
    if let Ok(addr) = node.parse::<SocketAddr>() {
        return Some(addr.ip().to_canonical());
    }
    let inner = node.strip_prefix('[')?.strip_suffix(']')?;
    inner
        .parse::<Ipv6Addr>()
        .ok()
        .map(|v6| IpAddr::V6(v6).to_canonical())
}

/// A dotted-quad IPv4 address exactly as `Ipv4Addr::from_str` reads one (four decimal
/// octets of at most 255, no leading zeros, nothing else), or `None` for anything else,
/// which [`parse_node`] then hands to the general parser.
fn dotted_quad(text: &[u8]) -> Option<Ipv4Addr> {
    // One pass over the bytes (a split iterator per octet cost several times more).
    let mut octets = [0u8; 4];
    let mut done = 0; // octets finished
    let mut value = 0u32; // the current octet's value so far
    let mut digits = 0; // and its digits
    for &b in text {
        if b.is_ascii_digit() {
            // A fourth digit, or a second after a leading zero.
            if digits == 3 || (digits == 1 && value == 0) {
                return None;
            }
            value = value * 10 + u32::from(b - b'0');
            digits += 1;
        } else if b == b'.' && digits > 0 && done < 3 {
            *octets.get_mut(done)? = u8::try_from(value).ok()?;
            done += 1;
            (value, digits) = (0, 0);
        } else {
            return None;
        }
    }
    if done != 3 || digits == 0 {
        return None;
    }
    octets[3] = u8::try_from(value).ok()?;
    Some(Ipv4Addr::from(octets))
}

/// The `for=` node of each element of one `Forwarded` field, or `None` if the field does
/// not follow RFC 7239's grammar:
/// `element *( "," element )`, `element = [ pair ] *( ";" [ pair ] )`,
/// `pair = token "=" ( token / quoted-string )`.
fn forwarded_for(field: &str) -> Option<Vec<Option<IpAddr>>> {
    let bytes = field.as_bytes();
    let mut i = 0;
    let mut nodes = Vec::new();
    // The current element's `for=` value: None while not seen.
    let mut node: Option<Option<IpAddr>> = None;
    let mut seen_for = false;
    // Whether the current element has any pair (one without `for=` still names a hop).
    let mut any_pair = false;
    loop {
        skip_ows(bytes, &mut i);
        match bytes.get(i) {
            None | Some(b',') => {
                // The end of an element (empty elements are allowed by the list syntax and
                // name nothing: they are skipped).
                if let Some(n) = node.take() {
                    nodes.push(n);
                } else if any_pair {
                    nodes.push(None);
                }
                seen_for = false;
                any_pair = false;
                if i >= bytes.len() {
                    return Some(nodes);
                }
                i += 1;
                continue;
            }
            Some(b';') => {
                i += 1;
                continue;
            }
            Some(_) => {}
        }
        let name_start = i;
        while bytes.get(i).is_some_and(|&b| is_tchar(b)) {
            i += 1;
        }
        if i == name_start || bytes.get(i) != Some(&b'=') {
            return None;
        }
        let name = &field[name_start..i];
        i += 1;
        let value = if bytes.get(i) == Some(&b'"') {
            quoted_string(bytes, &mut i)?
        } else {
            let start = i;
            while bytes.get(i).is_some_and(|&b| is_tchar(b)) {
                i += 1;
            }
            if i == start {
                return None;
            }
            field[start..i].to_owned()
        };
        skip_ows(bytes, &mut i);
        if !matches!(bytes.get(i), None | Some(b',' | b';')) {
            return None;
        }
        any_pair = true;
        if name.eq_ignore_ascii_case("for") {
            if seen_for {
                // Two `for=` in one element: which one is the hop is anyone's guess.
                return None;
            }
            seen_for = true;
            node = Some(parse_node(&value));
        }
    }
}

fn skip_ows(bytes: &[u8], i: &mut usize) {
    while bytes.get(*i).is_some_and(|&b| b == b' ' || b == b'\t') {
        *i += 1;
    }
}

/// RFC 9110 `tchar`.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// A quoted string starting at `bytes[*i] == '"'`, unescaped; `None` if unterminated.
fn quoted_string(bytes: &[u8], i: &mut usize) -> Option<String> {
    *i += 1;
    let mut out = String::new();
    loop {
        match *bytes.get(*i)? {
            b'"' => {
                *i += 1;
                return Some(out);
            }
            b'\\' => {
                out.push(char::from(*bytes.get(*i + 1)?));
                *i += 2;
            }
            b => {
                out.push(char::from(b));
                *i += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The walk from the right sees the hops in reverse, and stops when told to.
    #[test]
    fn walk_back_is_hops_reversed() {
        let cases: &[(ForwardedHeader, HeaderName, &[&[u8]])] = &[
            (ForwardedHeader::XForwardedFor, X_FORWARDED_FOR, &[]),
            (
                ForwardedHeader::XForwardedFor,
                X_FORWARDED_FOR,
                &[b"1.1.1.1, 2.2.2.2", b"3.3.3.3"],
            ),
            (
                ForwardedHeader::XForwardedFor,
                X_FORWARDED_FOR,
                &[b"1.1.1.1", b"\xff, 2.2.2.2", b"3.3.3.3, x"],
            ),
            (
                ForwardedHeader::XForwardedFor,
                X_FORWARDED_FOR,
                &[b",,", b""],
            ),
            (
                ForwardedHeader::Forwarded,
                FORWARDED,
                &[b"for=1.1.1.1", b"for=\"2.2", b"for=3.3.3.3, by=x"],
            ),
            (ForwardedHeader::XRealIp, X_REAL_IP, &[b"1.1.1.1"]),
            (
                ForwardedHeader::XRealIp,
                X_REAL_IP,
                &[b"1.1.1.1", b"2.2.2.2"],
            ),
        ];
        for (header, name, values) in cases {
            let mut h = HeaderMap::new();
            for v in *values {
                h.append(name.clone(), http::HeaderValue::from_bytes(v).unwrap());
            }
            let mut back = Vec::new();
            header.walk_back(&h, |hop| {
                back.push(hop);
                true
            });
            back.reverse();
            assert_eq!(back, header.hops(&h), "{values:?}");
            let mut seen = 0;
            header.walk_back(&h, |_| {
                seen += 1;
                false
            });
            assert_eq!(seen, usize::from(!values.is_empty()), "{values:?}");
        }
    }

    /// The dotted-quad fast path reads exactly what std's parser reads.
    #[test]
    fn dotted_quads_as_std_reads_them() {
        let mut cases: Vec<String> = [
            "",
            ".",
            "1.2.3",
            "1.2.3.4.",
            ".1.2.3.4",
            "1..2.3",
            "1.2.3.4.5",
            "01.2.3.4",
            "1.2.3.04",
            "0.0.0.0",
            "255.255.255.255",
            "256.1.1.1",
            "1.2.3.256",
            "999.1.1.1",
            "1.2.3.4 ",
            "1.2.3.+4",
            "1.2.3.-4",
            "1.2.3.4:80",
            "1.2.3.0x1",
            "1.2.3.1000",
            "10.0.39.16",
            "::1",
            "1.2.3.٣",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        for a in [
            "0", "00", "1", "9", "10", "99", "100", "199", "255", "256", "300", "0255",
        ] {
            cases.push(format!("{a}.{a}.{a}.{a}"));
            cases.push(format!("1.2.3.{a}"));
            cases.push(format!("{a}.2.3.4"));
        }
        for case in &cases {
            assert_eq!(
                dotted_quad(case.as_bytes()),
                case.parse::<Ipv4Addr>().ok(),
                "{case:?}"
            );
        }
    }

    fn ip(s: &str) -> Option<IpAddr> {
        Some(s.parse().unwrap())
    }

    #[test]
    fn forwarded_elements() {
        assert_eq!(
            forwarded_for("for=192.0.2.43"),
            Some(vec![ip("192.0.2.43")])
        );
        assert_eq!(
            forwarded_for(r#"For="[2001:db8:cafe::17]:4711""#),
            Some(vec![ip("2001:db8:cafe::17")])
        );
        assert_eq!(
            forwarded_for(r#"for=192.0.2.60;proto=http;by=203.0.113.43"#),
            Some(vec![ip("192.0.2.60")])
        );
        assert_eq!(
            forwarded_for(r#"for=192.0.2.43, for=198.51.100.17 ; proto=https"#),
            Some(vec![ip("192.0.2.43"), ip("198.51.100.17")])
        );
        assert_eq!(
            forwarded_for(r#"for="192.0.2.43:80", for="[2001:db8::1]""#),
            Some(vec![ip("192.0.2.43"), ip("2001:db8::1")])
        );
        // Unknown, obfuscated, or no `for=`: a hop without an address.
        assert_eq!(
            forwarded_for("for=unknown, for=_hidden, proto=https, for=1.2.3.4"),
            Some(vec![None, None, None, ip("1.2.3.4")])
        );
        assert_eq!(forwarded_for(r#"for="_gazonk""#), Some(vec![None]));
        // A comma inside a quoted string does not split elements.
        assert_eq!(
            forwarded_for(r#"by="a,b";for=1.2.3.4"#),
            Some(vec![ip("1.2.3.4")])
        );
        assert_eq!(
            forwarded_for(r#"by="a,b", for=1.2.3.4"#),
            Some(vec![None, ip("1.2.3.4")])
        );
        // Empty elements are skipped.
        assert_eq!(forwarded_for(""), Some(vec![]));
        assert_eq!(forwarded_for(" , ,for=1.2.3.4"), Some(vec![ip("1.2.3.4")]));
        // Malformed fields.
        for bad in [
            "for",
            "for=",
            "=1.2.3.4",
            r#"for="1.2.3.4"#,
            "for=[2001:db8::1]",
            "for=2001:db8::1",
            "for=1.2.3.4 5.6.7.8",
            "for=1.2.3.4;for=5.6.7.8",
            r#"for="1.2.3.4"x"#,
        ] {
            assert_eq!(forwarded_for(bad), None, "{bad}");
        }
    }

    #[test]
    fn malformed_fields_drop_what_is_left_of_them() {
        let mut h = HeaderMap::new();
        h.append(FORWARDED, "for=1.1.1.1".parse().unwrap());
        h.append(FORWARDED, "for=\"2.2.2.2".parse().unwrap());
        h.append(FORWARDED, "for=3.3.3.3".parse().unwrap());
        assert_eq!(
            ForwardedHeader::Forwarded.hops(&h),
            vec![None, ip("3.3.3.3")]
        );
    }

    #[test]
    fn x_real_ip() {
        let mut h = HeaderMap::new();
        assert_eq!(ForwardedHeader::XRealIp.hops(&h), vec![]);
        h.append(X_REAL_IP, "192.0.2.1".parse().unwrap());
        assert_eq!(ForwardedHeader::XRealIp.hops(&h), vec![ip("192.0.2.1")]);
        h.append(X_REAL_IP, "192.0.2.2".parse().unwrap());
        assert_eq!(ForwardedHeader::XRealIp.hops(&h), vec![None]);
        let mut h = HeaderMap::new();
        h.append(X_REAL_IP, "nope".parse().unwrap());
        assert_eq!(ForwardedHeader::XRealIp.hops(&h), vec![None]);
    }
}
