//! A redirect's `Location` resolved against the URI it answered (RFC 3986 §5.2: absolute,
//! network-path, absolute-path and relative references, dot segments removed), for
//! [`Redirects`](crate::Redirects). `http::Uri` parses but does not resolve, and the `url`
//! crate would bring IDNA tables to every build for these forty lines.

use http::Uri;
use http::uri::Scheme;

/// `location` (a `Location` field's bytes) resolved against `base`, its fragment dropped (a
/// fragment is the client's own, never sent). Spaces, control characters and non-ASCII
/// bytes (UTF-8 that servers send raw) are percent-encoded first, as browsers do. `None`
/// when it cannot be followed: `base` has no scheme or authority, the result is not a URI
/// `http` accepts (a bad authority), or its scheme is not `http` or `https`.
pub(crate) fn resolve(base: &Uri, location: &[u8]) -> Option<Uri> {
    let location = encode(location);
    let location = location.split('#').next().unwrap_or_default();
    let (scheme, authority, path, query) = if has_scheme(location) {
        let uri: Uri = location.parse().ok()?;
        let (scheme, authority) = (uri.scheme()?.clone(), uri.authority()?.as_str().to_owned());
        let path = remove_dot_segments(uri.path());
        (scheme, authority, path, uri.query().map(str::to_owned))
    } else if let Some(rest) = location.strip_prefix("//") {
        let uri: Uri = format!("{}://{rest}", base.scheme_str()?).parse().ok()?;
        let authority = uri.authority()?.as_str().to_owned();
        let path = remove_dot_segments(uri.path());
        (
            base.scheme()?.clone(),
            authority,
            path,
            uri.query().map(str::to_owned),
        )
    } else {
        let (scheme, authority) = (
            base.scheme()?.clone(),
            base.authority()?.as_str().to_owned(),
        );
        let (path, query) = match location.split_once('?') {
            Some((p, q)) => (p, Some(q.to_owned())),
            None => (location, None),
        };
        if path.is_empty() {
            // `?q` or nothing: the base's path, the reference's query if it has one.
            let query = query.or_else(|| base.query().map(str::to_owned));
            (scheme, authority, base.path().to_owned(), query)
        } else if path.starts_with('/') {
            (scheme, authority, remove_dot_segments(path), query)
        } else {
            let dir = &base.path()[..=base.path().rfind('/').unwrap_or(0)];
            let merged = if dir.starts_with('/') {
                format!("{dir}{path}")
            } else {
                format!("/{path}")
            };
            (scheme, authority, remove_dot_segments(&merged), query)
        }
    };
    if scheme != Scheme::HTTP && scheme != Scheme::HTTPS {
        return None;
    }
    let path_and_query = match query {
        Some(q) => format!("{path}?{q}"),
        None => path,
    };
    Uri::builder()
        .scheme(scheme)
        .authority(authority)
        .path_and_query(path_and_query)
        .build()
        .ok()
}

/// `bytes` with every byte outside visible ASCII percent-encoded.
fn encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for &b in bytes {
        if b.is_ascii_graphic() {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Whether a reference starts with a scheme (`ALPHA *( ALPHA / DIGIT / "+" / "-" / "." ) ":"`,
/// before any `/`, `?`).
fn has_scheme(reference: &str) -> bool {
    let Some(colon) = reference.find(':') else {
        return false;
    };
    let scheme = &reference[..colon];
    scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
}

/// An absolute path with its `.` and `..` segments applied (RFC 3986 §5.2.4); a `..` above
/// the root stays at the root.
fn remove_dot_segments(path: &str) -> String {
    let segments: Vec<&str> = path.split('/').skip(1).collect();
    let last = segments.len().saturating_sub(1);
    let mut out: Vec<&str> = Vec::with_capacity(segments.len());
    for (i, segment) in segments.into_iter().enumerate() {
        match segment {
            "." | ".." => {
                if segment == ".." {
                    out.pop();
                }
                // A trailing `.` or `..` names a directory: keep its slash.
                if i == last {
                    out.push("");
                }
            }
            s => out.push(s),
        }
    }
    format!("/{}", out.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(base: &str, location: &str) -> Option<String> {
        resolve(&base.parse().unwrap(), location.as_bytes()).map(|u| u.to_string())
    }

    #[test]
    fn rfc_3986_examples() {
        // RFC 3986 §5.4.1 and §5.4.2, on its base, for the references a Location can be.
        let base = "http://a/b/c/d;p?q";
        let cases = [
            ("g", "http://a/b/c/g"),
            ("./g", "http://a/b/c/g"),
            ("g/", "http://a/b/c/g/"),
            ("/g", "http://a/g"),
            ("//g", "http://g/"),
            ("?y", "http://a/b/c/d;p?y"),
            ("g?y", "http://a/b/c/g?y"),
            ("#s", "http://a/b/c/d;p?q"),
            ("g#s", "http://a/b/c/g"),
            (";x", "http://a/b/c/;x"),
            ("", "http://a/b/c/d;p?q"),
            (".", "http://a/b/c/"),
            ("./", "http://a/b/c/"),
            ("..", "http://a/b/"),
            ("../", "http://a/b/"),
            ("../g", "http://a/b/g"),
            ("../..", "http://a/"),
            ("../../g", "http://a/g"),
            ("../../../g", "http://a/g"),
            ("/./g", "http://a/g"),
            ("/../g", "http://a/g"),
            ("g.", "http://a/b/c/g."),
            ("..g", "http://a/b/c/..g"),
            ("./../g", "http://a/b/g"),
            ("g/./h", "http://a/b/c/g/h"),
            ("g/../h", "http://a/b/c/h"),
            ("https://b:8443/x/../y?z", "https://b:8443/y?z"),
        ];
        for (reference, want) in cases {
            assert_eq!(at(base, reference).as_deref(), Some(want), "{reference}");
        }
    }

    #[test]
    fn a_base_without_a_path_and_schemes() {
        assert_eq!(at("http://a", "g").as_deref(), Some("http://a/g"));
        assert_eq!(at("https://a:1/x", "//b/y").as_deref(), Some("https://b/y"));
        assert_eq!(at("HTTP://A/x", "y").as_deref(), Some("http://A/y"));
    }

    #[test]
    fn bytes_outside_visible_ascii_are_percent_encoded() {
        let base = "http://a/b";
        assert_eq!(at(base, "/a b").as_deref(), Some("http://a/a%20b"));
        assert_eq!(at(base, "caf\u{e9}").as_deref(), Some("http://a/caf%C3%A9"));
        assert_eq!(at(base, "/x?q=\u{1}").as_deref(), Some("http://a/x?q=%01"));
    }

    #[test]
    fn what_cannot_be_followed() {
        let base = "http://a/b";
        assert_eq!(at(base, "ftp://a/file"), None); // not http
        assert_eq!(at(base, "mailto:x@a"), None);
        assert_eq!(at(base, "http://"), None); // no authority
        assert_eq!(at(base, "http://a b/"), None); // not a host
        assert_eq!(at("/relative", "g"), None); // a base without scheme
    }
}
