//! Reading the forwarding headers a trusted proxy writes, element by element from the
//! right: `X-Forwarded-For`, RFC 7239 `Forwarded` (its `for=` parameters), `X-Real-IP`.
//!
//! Everything left of the last element a trusted proxy wrote is the client's to choose, so
//! nothing there may decide anything unless the walk reaches it: the raw bytes are split
//! from the right, and each element is parsed only when [`ClientIp`](crate::ClientIp)'s
//! walk asks for it. A field with a non-ASCII byte, an unterminated quote or a grammar error
//! in its leftmost element is read exactly as it would be without that element, as nginx's
//! realip module reads `X-Forwarded-For`. A hop is `Some(address)`, or `None` for an element
//! that names no usable address (malformed, `unknown`, an obfuscated `_node`, a `Forwarded`
//! element without `for=`): the walk that reaches one cannot attribute the request.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use http::header::{FORWARDED, HeaderName};
use http::{HeaderMap, HeaderValue};

/// Which header a [`ClientIp`](crate::ClientIp) walks. Configure your proxies to write
/// exactly one of them, and read only that one: a header your proxies do not write (or do
/// not overwrite) is the client's to choose.
///
/// # Examples
///
/// ```
/// use std::net::{IpAddr, SocketAddr};
/// use tollgate_http::{ClientIp, ForwardedHeader, KeyExtractor};
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
    /// one list, in order; empty elements are skipped, as nginx skips them.
    ///
    /// ```
    /// use std::net::{IpAddr, SocketAddr};
    /// use tollgate_http::{ClientIp, ForwardedHeader};
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
    /// allowed (numeric, or obfuscated as RFC 7239 allows: `"192.0.2.43:_p1"`). Elements are split from the right at commas outside quoted strings, and each
    /// is judged alone, only if the walk reaches it: `unknown`, obfuscated identifiers
    /// (`_hidden`), an element without `for=` or with two, and one that does not follow the
    /// grammar (an unterminated quote, a parameter without `=`, an unquoted IPv6 address)
    /// name no address. Several fields are read as one list, in order.
    Forwarded,
    /// `X-Real-IP: client`, one address written by the proxy in front of you (nginx's
    /// `proxy_set_header X-Real-IP $remote_addr`). Read only when the peer is trusted; two
    /// fields, or one that is not an address, name no address.
    XRealIp,
}

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_REAL_IP: HeaderName = HeaderName::from_static("x-real-ip");

impl ForwardedHeader {
    /// Hands `step` the hops the header lists, rightmost first, while it returns `true`.
    /// Each element is parsed only when it is handed over. Nothing is allocated.
    pub(crate) fn walk_back(
        self,
        headers: &HeaderMap,
        mut step: impl FnMut(Option<IpAddr>) -> bool,
    ) {
        match self {
            ForwardedHeader::XForwardedFor => {
                for value in headers.get_all(X_FORWARDED_FOR).iter().rev() {
                    let mut elements = ElementsBack::plain(value);
                    loop {
                        // Most elements are plain IPv4 addresses: read those in one pass from
                        // the right; anything else is split and parsed as below.
                        let hop = match elements.next_dotted_quad() {
                            Some(v4) => Some(IpAddr::V4(v4)),
                            None => match elements.next() {
                                Some(element) => parse_node(element),
                                None => break,
                            },
                        };
                        if !step(hop) {
                            return;
                        }
                    }
                }
            }
            ForwardedHeader::Forwarded => {
                for value in headers.get_all(FORWARDED).iter().rev() {
                    for element in ElementsBack::quoted(value) {
                        if !step(forwarded_for(element)) {
                            return;
                        }
                    }
                }
            }
            ForwardedHeader::XRealIp => {
                let mut values = headers.get_all(X_REAL_IP).iter();
                if let Some(value) = values.next() {
                    let two = values.next().is_some();
                    step(if two {
                        None
                    } else {
                        parse_node(value.as_bytes())
                    });
                }
            }
        }
    }
}

/// The elements of one comma-separated field, rightmost first, trimmed, empty ones
/// skipped. Splitting looks at commas (and, for `Forwarded`, quotes) only, so an element is
/// found without reading anything left of it beyond its own comma.
struct ElementsBack<'a> {
    /// What is left of the field, right of which everything was handed out.
    rest: &'a [u8],
    /// Whether the field's grammar has quoted strings (whose commas do not split).
    quoted: bool,
    done: bool,
}

impl<'a> ElementsBack<'a> {
    fn plain(value: &'a HeaderValue) -> ElementsBack<'a> {
        ElementsBack {
            rest: value.as_bytes(),
            quoted: false,
            done: false,
        }
    }

    fn quoted(value: &'a HeaderValue) -> ElementsBack<'a> {
        ElementsBack {
            quoted: true,
            ..ElementsBack::plain(value)
        }
    }

    /// The next element if it is a dotted-quad IPv4 address (with whitespace around it), read
    /// in one pass from the right and handed over as [`next`](Iterator::next) would hand it
    /// to [`parse_node`]; `None`, the elements untouched, for anything else (the caller then
    /// takes the general path). What it consumes is exactly what `next` would: the element,
    /// and the comma left of it or the end of the field.
    fn next_dotted_quad(&mut self) -> Option<Ipv4Addr> {
        if self.done || self.quoted {
            return None;
        }
        let bytes = self.rest;
        let mut end = bytes.len();
        while end > 0 && bytes[end - 1].is_ascii_whitespace() {
            end -= 1;
        }
        let mut octets = [0u8; 4];
        for n in (0..4).rev() {
            if n < 3 {
                end = end.checked_sub(1).filter(|&dot| bytes[dot] == b'.')?;
            }
            let (value, len) = decimal_octet_back(&bytes[..end])?;
            octets[n] = value;
            end -= len;
        }
        while end > 0 && bytes[end - 1].is_ascii_whitespace() {
            end -= 1;
        }
        match end.checked_sub(1) {
            None => self.done = true,
            Some(comma) if bytes[comma] == b',' => self.rest = &bytes[..comma],
            // A digit (a fourth, or a fifth octet), or any other byte: not a plain address.
            Some(_) => return None,
        }
        Some(Ipv4Addr::from(octets))
    }
}

/// The octet `bytes` ends with, read from the right, and its length: the last one to three
/// digits, as [`decimal_octet`] reads them from the left (no leading zero, at most 255). A
/// longer run of digits is left for the caller's test of the byte before (a dot, a comma,
/// whitespace or the start), which then fails.
fn decimal_octet_back(bytes: &[u8]) -> Option<(u8, usize)> {
    let len = bytes
        .iter()
        .rev()
        .take(3)
        .take_while(|b| b.is_ascii_digit())
        .count();
    decimal_octet(&bytes[bytes.len() - len..])
        .filter(|&(_, read)| read == len)
        .map(|(value, _)| (value, len))
}

impl<'a> Iterator for ElementsBack<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        while !self.done {
            let bytes = self.rest;
            // A byte scan from the right, by hand: the general splitter's `memrchr` set-up
            // cost more than a short field.
            let comma = if self.quoted {
                last_comma_outside_quotes(bytes)
            } else {
                bytes.iter().rposition(|&b| b == b',')
            };
            let element = match comma {
                Some(i) => {
                    self.rest = &bytes[..i];
                    &bytes[i + 1..]
                }
                None => {
                    self.done = true;
                    bytes
                }
            };
            let element = element.trim_ascii();
            if !element.is_empty() {
                return Some(element);
            }
        }
        None
    }
}

/// The last comma of `bytes` that is outside a quoted string, read from the right.
///
/// A quote is a delimiter unless an odd run of backslashes stands right before it (then it
/// is escaped, as the forward reading of RFC 9110's `quoted-pair` has it: inside a quoted
/// string a backslash run starts after a non-backslash byte, so its length decides). In a
/// well-formed element every run before a quote lies inside that element, so the split at
/// its left comma does not depend on the bytes left of it. An unterminated quote makes the
/// rest of the field one element, which then fails to parse: only that element, and only if
/// the walk reaches it. Each byte is looked at a bounded number of times (the runs before
/// successive quotes do not overlap).
fn last_comma_outside_quotes(bytes: &[u8]) -> Option<usize> {
    let mut inside = false;
    for (i, &b) in bytes.iter().enumerate().rev() {
        match b {
            b'"' => {
                let run = bytes[..i].iter().rev().take_while(|&&c| c == b'\\').count();
                if run % 2 == 0 {
                    inside = !inside;
                }
            }
            b',' if !inside => return Some(i),
            _ => {}
        }
    }
    None
}

/// One node: an address, maybe bracketed, maybe with a port. `unknown`, obfuscated
/// identifiers, non-ASCII bytes and anything else: `None`.
fn parse_node(node: &[u8]) -> Option<IpAddr> {
    let node = node.trim_ascii();
    // Most nodes are plain dotted quads: read those without std's general parser, which
    // tries every address form in turn.
    if let Some(v4) = dotted_quad(node) {
        return Some(IpAddr::V4(v4));
    }
    let node = std::str::from_utf8(node).ok()?;
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
    // Octet by octet, each octet's one to three digits read at once (fewer instructions
    // than testing every byte for both a digit and a dot).
    let mut octets = [0u8; 4];
    let mut rest = text;
    for (n, octet) in octets.iter_mut().enumerate() {
        if n > 0 {
            rest = rest.strip_prefix(b".")?;
        }
        let (value, len) = decimal_octet(rest)?;
        *octet = value;
        rest = &rest[len..];
    }
    rest.is_empty().then_some(Ipv4Addr::from(octets))
}

/// The octet `bytes` starts with, and its length: one to three decimal digits of at most 255.
/// A `0` is an octet by itself; a digit right after it, or after three, is then left for
/// [`dotted_quad`]'s dot-or-end test, which fails, as `Ipv4Addr::from_str` does on a leading
/// zero or a fourth digit.
fn decimal_octet(bytes: &[u8]) -> Option<(u8, usize)> {
    let digit = |i: usize| {
        bytes
            .get(i)
            .map(|b| b.wrapping_sub(b'0'))
            .filter(|&d| d < 10)
    };
    let first = digit(0)?;
    let Some(second) = digit(1).filter(|_| first != 0) else {
        return Some((first, 1));
    };
    let Some(third) = digit(2) else {
        return Some((first * 10 + second, 2));
    };
    let value = u16::from(first) * 100 + u16::from(second) * 10 + u16::from(third);
    Some((u8::try_from(value).ok()?, 3))
}

/// The `for=` address of one `Forwarded` element, or `None` if it names none: no `for=`,
/// two of them, a value that is not an address, or an element that does not follow RFC
/// 7239's grammar (`element = [ pair ] *( ";" [ pair ] )`,
/// `pair = token "=" ( token / quoted-string )`).
fn forwarded_for(element: &[u8]) -> Option<IpAddr> {
    let mut i = 0;
    // The `for=` value's address, once seen.
    let mut node: Option<Option<IpAddr>> = None;
    loop {
        skip_ows(element, &mut i);
        match element.get(i) {
            None => return node.flatten(),
            Some(b';') => {
                i += 1;
                continue;
            }
            Some(_) => {}
        }
        let name_start = i;
        while element.get(i).is_some_and(|&b| is_tchar(b)) {
            i += 1;
        }
        if i == name_start || element.get(i) != Some(&b'=') {
            return None;
        }
        let is_for = element[name_start..i].eq_ignore_ascii_case(b"for");
        i += 1;
        let value = if element.get(i) == Some(&b'"') {
            quoted_string(element, &mut i)?
        } else {
            let start = i;
            while element.get(i).is_some_and(|&b| is_tchar(b)) {
                i += 1;
            }
            if i == start {
                return None;
            }
            Unquoted::Plain(&element[start..i])
        };
        skip_ows(element, &mut i);
        if !matches!(element.get(i), None | Some(b';')) {
            return None;
        }
        if is_for {
            if node.is_some() {
                // Two `for=` in one element: which one is the hop is anyone's guess.
                return None;
            }
            node = Some(value.address());
        }
    }
}

/// A parameter's value with its quoting undone, without allocating.
enum Unquoted<'a> {
    /// A token, or a quoted string without escapes: the bytes as they stand.
    Plain(&'a [u8]),
    /// A quoted string with escapes, unescaped into a buffer as long as the longest address
    /// text (`[v6]:port`); `None` if it did not fit, so it is no address.
    Escaped(Option<([u8; 64], usize)>),
}

impl Unquoted<'_> {
    fn address(&self) -> Option<IpAddr> {
        match self {
            Unquoted::Plain(bytes) => forwarded_node(bytes),
            Unquoted::Escaped(buf) => buf.as_ref().and_then(|(b, n)| forwarded_node(&b[..*n])),
        }
    }
}

/// A `for=` value's address: [`parse_node`], after dropping an obfuscated port. RFC 7239
/// (§6) lets a proxy hide the port but name the address (`"192.0.2.43:_p1"`,
/// `"[2001:db8::1]:_p1"`: `node-port = port / obfport`, `obfport = "_" 1*(ALPHA / DIGIT /
/// "." / "_" / "-")`); the address is what the key needs. Only after an IPv4 address or a
/// bracketed IPv6 one: an obfuscated node (`_hidden`) still names no address.
fn forwarded_node(node: &[u8]) -> Option<IpAddr> {
    let node = node.trim_ascii();
    let Some(colon) = node.iter().rposition(|&b| b == b':') else {
        return parse_node(node);
    };
    let (name, port) = (&node[..colon], &node[colon + 1..]);
    let obfport = port.len() > 1
        && port[0] == b'_'
        && port[1..]
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    // The port follows the address at once (`1.2.3.4 :_p1` is as malformed as `1.2.3.4 :80`).
    let address_then_port = (name.ends_with(b"]") || !name.contains(&b':'))
        && !name.last().is_some_and(u8::is_ascii_whitespace);
    if obfport && address_then_port {
        parse_node(name)
    } else {
        parse_node(node)
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

/// A quoted string starting at `bytes[*i] == '"'`; `None` if unterminated.
fn quoted_string<'a>(bytes: &'a [u8], i: &mut usize) -> Option<Unquoted<'a>> {
    *i += 1;
    let start = *i;
    let mut buf = Some(([0u8; 64], 0));
    let mut escaped = false;
    loop {
        let b = match *bytes.get(*i)? {
            b'"' => {
                *i += 1;
                return Some(if escaped {
                    Unquoted::Escaped(buf)
                } else {
                    Unquoted::Plain(&bytes[start..*i - 1])
                });
            }
            b'\\' => {
                escaped = true;
                *i += 1;
                *bytes.get(*i)?
            }
            b => b,
        };
        *i += 1;
        buf = buf.and_then(|(mut b_, n)| {
            *b_.get_mut(n)? = b;
            Some((b_, n + 1))
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> Option<IpAddr> {
        Some(s.parse().unwrap())
    }

    /// Every hop `header` hands over for these field values, rightmost first.
    fn hops_back(header: ForwardedHeader, values: &[&[u8]]) -> Vec<Option<IpAddr>> {
        let name = match header {
            ForwardedHeader::XForwardedFor => X_FORWARDED_FOR,
            ForwardedHeader::Forwarded => FORWARDED,
            ForwardedHeader::XRealIp => X_REAL_IP,
        };
        let mut h = HeaderMap::new();
        for v in values {
            h.append(name.clone(), HeaderValue::from_bytes(v).unwrap());
        }
        let mut back = Vec::new();
        header.walk_back(&h, |hop| {
            back.push(hop);
            true
        });
        back
    }

    #[test]
    fn x_forwarded_for_from_the_right() {
        let xff = |values: &[&[u8]]| hops_back(ForwardedHeader::XForwardedFor, values);
        assert_eq!(xff(&[]), vec![]);
        assert_eq!(
            xff(&[b"1.1.1.1, 2.2.2.2", b"3.3.3.3"]),
            vec![ip("3.3.3.3"), ip("2.2.2.2"), ip("1.1.1.1")]
        );
        // A bad element is one `None` hop, where it stands; the rest are read.
        assert_eq!(
            xff(&[b"1.1.1.1", b"\xff, 2.2.2.2", b"3.3.3.3, x"]),
            vec![None, ip("3.3.3.3"), ip("2.2.2.2"), None, ip("1.1.1.1")]
        );
        // Empty elements name nothing and are skipped.
        assert_eq!(xff(&[b",,", b""]), vec![]);
        assert_eq!(
            xff(&[b" 1.1.1.1 ,, ,2.2.2.2,"]),
            vec![ip("2.2.2.2"), ip("1.1.1.1")]
        );
        assert_eq!(
            xff(&[b"unknown, [2001:db8::1]:80, 192.0.2.1:4711, ::ffff:10.0.0.1"]),
            vec![ip("10.0.0.1"), ip("192.0.2.1"), ip("2001:db8::1"), None]
        );
    }

    /// The issue's attack: whatever the client writes left of what the trusted proxy
    /// appended (non-ASCII, quotes, grammar errors, huge runs of backslashes) changes
    /// nothing about the hops right of it.
    #[test]
    fn what_the_client_writes_cannot_change_the_hops_right_of_it() {
        let garbage: &[&[u8]] = &[
            b"\x80\xff",
            b"\"",
            b"for=\"",
            b"for=\"\\",
            b"\\\\\\\"",
            b"for=1.1.1.1;for=2.2.2.2",
            b"=,=,;,",
            b"for=\"a,b\\\"",
            b"\xc3\xa9, 6.6.6.6",
            b"\t",
        ];
        for g in garbage {
            // X-Forwarded-For: the proxies appended `203.0.113.50, 10.0.0.1`.
            let mut field = g.to_vec();
            field.extend_from_slice(b", 203.0.113.50, 10.0.0.1");
            let hops = hops_back(ForwardedHeader::XForwardedFor, &[&field]);
            assert_eq!(hops[..2], [ip("10.0.0.1"), ip("203.0.113.50")], "{g:?}");
            // Forwarded: the proxies appended two well-formed elements.
            let mut field = g.to_vec();
            field.extend_from_slice(b", for=\"[2001:db8::5]:4711\";proto=https, for=10.0.0.1");
            let hops = hops_back(ForwardedHeader::Forwarded, &[&field]);
            assert_eq!(hops[..2], [ip("10.0.0.1"), ip("2001:db8::5")], "{g:?}");
            // In a field of its own, left of the proxies' field: likewise.
            let hops = hops_back(ForwardedHeader::Forwarded, &[g, b"for=203.0.113.50"]);
            assert_eq!(hops[0], ip("203.0.113.50"), "{g:?}");
        }
    }

    /// The walk stops when told to: elements left of where it stopped are never parsed
    /// (nor even split off).
    #[test]
    fn the_walk_stops_where_it_is_told_to() {
        for (header, name, value) in [
            (
                ForwardedHeader::XForwardedFor,
                X_FORWARDED_FOR,
                &b"x, 1.1.1.1, 2.2.2.2"[..],
            ),
            (
                ForwardedHeader::Forwarded,
                FORWARDED,
                b"x, for=1.1.1.1, for=2.2.2.2",
            ),
            (ForwardedHeader::XRealIp, X_REAL_IP, b"2.2.2.2"),
        ] {
            let mut h = HeaderMap::new();
            h.append(name, HeaderValue::from_bytes(value).unwrap());
            let mut seen = Vec::new();
            header.walk_back(&h, |hop| {
                seen.push(hop);
                false
            });
            assert_eq!(seen, [ip("2.2.2.2")]);
        }
    }

    #[test]
    fn forwarded_elements() {
        let fwd = |value: &[u8]| hops_back(ForwardedHeader::Forwarded, &[value]);
        assert_eq!(fwd(b"for=192.0.2.43"), vec![ip("192.0.2.43")]);
        assert_eq!(
            fwd(br#"For="[2001:db8:cafe::17]:4711""#),
            vec![ip("2001:db8:cafe::17")]
        );
        assert_eq!(
            fwd(br#"for=192.0.2.60;proto=http;by=203.0.113.43"#),
            vec![ip("192.0.2.60")]
        );
        assert_eq!(
            fwd(br#"for=192.0.2.43, for=198.51.100.17 ; proto=https"#),
            vec![ip("198.51.100.17"), ip("192.0.2.43")]
        );
        assert_eq!(
            fwd(br#"for="192.0.2.43:80", for="[2001:db8::1]""#),
            vec![ip("2001:db8::1"), ip("192.0.2.43")]
        );
        // Escapes inside a quoted string are undone (`\1` is `1`).
        assert_eq!(fwd(br#"for="192.0.2.\1""#), vec![ip("192.0.2.1")]);
        // Unknown, obfuscated, or no `for=`: a hop without an address.
        assert_eq!(
            fwd(b"for=unknown, for=_hidden, proto=https, for=1.2.3.4"),
            vec![ip("1.2.3.4"), None, None, None]
        );
        assert_eq!(fwd(br#"for="_gazonk""#), vec![None]);
        // An obfuscated port hides the port, not the address (RFC 7239, §6.3).
        assert_eq!(fwd(br#"for="192.0.2.43:_p1""#), vec![ip("192.0.2.43")]);
        assert_eq!(
            fwd(br#"for="[2001:db8::1]:_p-1.x_y""#),
            vec![ip("2001:db8::1")]
        );
        assert_eq!(fwd(br#"for="192.0.2.\43:_p1""#), vec![ip("192.0.2.43")]);
        for hidden in [
            &br#"for="_hidden:_p1""#[..],
            br#"for="unknown:_p1""#,
            br#"for="192.0.2.43:_""#,
            br#"for="192.0.2.43:_p 1""#,
            br#"for="192.0.2.43:p1""#,
            br#"for="2001:db8::1:_p1""#,
            br#"for="[2001:db8::1]:_p1:_p2""#,
            br#"for="192.0.2.43 :_p1""#,
        ] {
            let text = String::from_utf8_lossy(hidden);
            assert_eq!(fwd(hidden), vec![None], "{text}");
        }
        // A comma inside a quoted string does not split elements, escaped quotes included.
        assert_eq!(fwd(br#"by="a,b";for=1.2.3.4"#), vec![ip("1.2.3.4")]);
        assert_eq!(
            fwd(br#"by="a\",b\\", for=1.2.3.4"#),
            vec![ip("1.2.3.4"), None]
        );
        assert_eq!(fwd(br#"by="a,b", for=1.2.3.4"#), vec![ip("1.2.3.4"), None]);
        // Empty elements are skipped.
        assert_eq!(fwd(b""), vec![]);
        assert_eq!(fwd(b" , ,for=1.2.3.4"), vec![ip("1.2.3.4")]);
        // Elements that do not follow the grammar name no address, each on its own.
        for bad in [
            &b"for"[..],
            b"for=",
            b"=1.2.3.4",
            br#"for="1.2.3.4"#,
            b"for=[2001:db8::1]",
            b"for=2001:db8::1",
            b"for=1.2.3.4 5.6.7.8",
            b"for=1.2.3.4;for=5.6.7.8",
            br#"for="1.2.3.4"x"#,
            b"for=\xff",
            br#"for="[2001:db8:aaaa:bbbb:cccc:dddd:eeee:ffff]:65535\000000000000000000000000000000000""#,
        ] {
            assert_eq!(fwd(bad), vec![None], "{:?}", String::from_utf8_lossy(bad));
            let mut right = bad.to_vec();
            right.extend_from_slice(b", for=9.9.9.9");
            assert_eq!(fwd(&right)[0], ip("9.9.9.9"));
        }
    }

    #[test]
    fn x_real_ip() {
        let real = |values: &[&[u8]]| hops_back(ForwardedHeader::XRealIp, values);
        assert_eq!(real(&[]), vec![]);
        assert_eq!(real(&[b"192.0.2.1"]), vec![ip("192.0.2.1")]);
        assert_eq!(real(&[b" 192.0.2.1 "]), vec![ip("192.0.2.1")]);
        assert_eq!(real(&[b"192.0.2.1", b"192.0.2.2"]), vec![None]);
        assert_eq!(real(&[b"nope"]), vec![None]);
        assert_eq!(real(&[b""]), vec![None]);
    }

    /// `X-Forwarded-For`'s one-pass reading of plain IPv4 elements hands over exactly the
    /// hops that splitting the field and parsing each element do: every field of up to five
    /// bytes over an alphabet of digits, separators and other address characters, and
    /// generated lists of addresses, valid and not, with whitespace and one-byte changes.
    #[test]
    fn plain_addresses_read_in_one_pass_as_split_and_parsed() {
        let general = |value: &[u8]| -> Vec<Option<IpAddr>> {
            let value = HeaderValue::from_bytes(value).unwrap();
            ElementsBack::plain(&value).map(parse_node).collect()
        };
        let check = |value: &[u8]| {
            assert_eq!(
                hops_back(ForwardedHeader::XForwardedFor, &[value]),
                general(value),
                "{:?}",
                String::from_utf8_lossy(value)
            );
        };
        let alphabet = b"019.,\t :f";
        let mut value = Vec::new();
        for len in 0..=5u32 {
            for mut n in 0..alphabet.len().pow(len) {
                value.clear();
                for _ in 0..len {
                    value.push(alphabet[n % alphabet.len()]);
                    n /= alphabet.len();
                }
                check(&value);
            }
        }
        let mut x = 0x9E37_79B9_7F4A_7C15_u64;
        let mut next = move |below: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % below
        };
        for _ in 0..20_000 {
            let mut field = String::new();
            for e in 0..=next(4) {
                if e > 0 {
                    field.push(',');
                }
                field.push_str(["", " ", "\t", "  "][next(4) as usize]);
                match next(8) {
                    0 => field.push_str("::1"),
                    1 => field.push_str("1.2.3.4:80"),
                    2 => {}
                    _ => {
                        let octets: Vec<String> = (0..3 + next(3))
                            .map(|_| match next(6) {
                                0 => format!("0{}", next(10)),
                                1 => format!("{}", 250 + next(10)),
                                2 => format!("{}", 1000 + next(100)),
                                _ => format!("{}", next(256)),
                            })
                            .collect();
                        field.push_str(&octets.join("."));
                    }
                }
                field.push_str(["", " ", "\t "][next(3) as usize]);
            }
            let mut bytes = field.into_bytes();
            check(&bytes);
            if !bytes.is_empty() {
                let at = next(bytes.len() as u64) as usize;
                bytes[at] = b"0123456789., :x"[next(15) as usize];
                check(&bytes);
            }
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
}
