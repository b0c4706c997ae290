//! A parser for the structured fields (RFC 9651 lists of items with parameters) the layer
//! writes, and readers for the fields the tests check. No runtime: the smol test uses it too.

// Each test file uses only some of these.
#![allow(dead_code)]

use http::HeaderMap;

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Bare {
    Int(i64),
    Str(String),
    Token(String),
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Item {
    pub value: Bare,
    pub params: Vec<(String, Bare)>,
}

impl Item {
    pub(crate) fn param(&self, key: &str) -> Option<&Bare> {
        self.params.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    pub(crate) fn int(&self, key: &str) -> i64 {
        match self.param(key) {
            Some(Bare::Int(i)) => *i,
            other => panic!("parameter {key} is not an integer: {other:?}"),
        }
    }
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn skip(&mut self, set: &[u8]) {
        while self.peek().is_some_and(|c| set.contains(&c)) {
            self.i += 1;
        }
    }

    fn bare(&mut self) -> Bare {
        match self.peek() {
            Some(b'"') => {
                self.i += 1;
                let mut out = String::new();
                loop {
                    match self.peek().expect("unterminated string") {
                        b'"' => {
                            self.i += 1;
                            return Bare::Str(out);
                        }
                        b'\\' => {
                            let c = self.s[self.i + 1];
                            assert!(c == b'"' || c == b'\\', "bad escape");
                            out.push(c as char);
                            self.i += 2;
                        }
                        c if (0x20..=0x7e).contains(&c) => {
                            out.push(c as char);
                            self.i += 1;
                        }
                        c => panic!("bad string byte {c}"),
                    }
                }
            }
            Some(c) if c == b'-' || c.is_ascii_digit() => {
                let start = self.i;
                self.i += 1;
                while self.peek().is_some_and(|c| c.is_ascii_digit()) {
                    self.i += 1;
                }
                let text = std::str::from_utf8(&self.s[start..self.i]).unwrap();
                assert!(self.peek() != Some(b'.'), "decimals are not expected here");
                assert!(text.len() <= 15, "integers have at most 15 digits");
                Bare::Int(text.parse().unwrap())
            }
            Some(c) if c.is_ascii_alphabetic() || c == b'*' => Bare::Token(self.key_like(true)),
            other => panic!(
                "unexpected {other:?} in {:?}",
                String::from_utf8_lossy(self.s)
            ),
        }
    }

    fn key_like(&mut self, token: bool) -> String {
        let start = self.i;
        while self.peek().is_some_and(|c| {
            c.is_ascii_lowercase()
                || c.is_ascii_digit()
                || b"_-.*".contains(&c)
                || (token && (c.is_ascii_alphabetic() || b":/!#$%&'+^`|~".contains(&c)))
        }) {
            self.i += 1;
        }
        assert!(self.i > start, "empty key");
        String::from_utf8(self.s[start..self.i].to_vec()).unwrap()
    }

    fn item(&mut self) -> Item {
        let value = self.bare();
        let mut params = Vec::new();
        while self.peek() == Some(b';') {
            self.i += 1;
            self.skip(b" ");
            let key = self.key_like(false);
            let value = if self.peek() == Some(b'=') {
                self.i += 1;
                self.bare()
            } else {
                Bare::Token("?1".into())
            };
            params.push((key, value));
        }
        Item { value, params }
    }
}

/// Parses a List field (every field line of `name`, joined with commas).
pub(crate) fn parse_list(headers: &HeaderMap, name: &str) -> Vec<Item> {
    let joined = headers
        .get_all(name)
        .iter()
        .map(|v| v.to_str().expect("ASCII field"))
        .collect::<Vec<_>>()
        .join(", ");
    let mut p = Parser {
        s: joined.as_bytes(),
        i: 0,
    };
    let mut items = Vec::new();
    p.skip(b" ");
    while p.peek().is_some() {
        items.push(p.item());
        p.skip(b" \t");
        if p.peek().is_none() {
            break;
        }
        assert_eq!(p.peek(), Some(b','), "items are separated by commas");
        p.i += 1;
        p.skip(b" \t");
        assert!(p.peek().is_some(), "trailing comma");
    }
    items
}

/// The one policy item of `RateLimit-Policy`: `(name, q, w)`.
pub(crate) fn policy(headers: &HeaderMap) -> (String, i64, i64) {
    one_item(headers, "ratelimit-policy", ["q", "w"])
}

/// The one item of `RateLimit`: `(name, r, t)`.
pub(crate) fn ratelimit(headers: &HeaderMap) -> (String, i64, i64) {
    one_item(headers, "ratelimit", ["r", "t"])
}

/// The one item of the list field `field`: its name (a String) and two integer parameters.
fn one_item(headers: &HeaderMap, field: &str, [a, b]: [&str; 2]) -> (String, i64, i64) {
    let items = parse_list(headers, field);
    assert_eq!(items.len(), 1, "{items:?}");
    let Bare::Str(name) = &items[0].value else {
        panic!("a policy's name is a String: {items:?}")
    };
    (name.clone(), items[0].int(a), items[0].int(b))
}

/// `Retry-After` as delay-seconds: an integer of at least 1.
pub(crate) fn retry_after(headers: &HeaderMap) -> u64 {
    let values: Vec<_> = headers.get_all("retry-after").iter().collect();
    assert_eq!(values.len(), 1);
    let text = values[0].to_str().unwrap();
    assert!(text.bytes().all(|b| b.is_ascii_digit()), "{text:?}");
    let secs: u64 = text.parse().unwrap();
    assert!(secs >= 1);
    secs
}
