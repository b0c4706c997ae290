//! Reading the server's signals: statuses, `Retry-After` in both forms, the IETF fields and
//! the legacy ones, and malformed input of every kind ignored without a panic.

use std::time::{Duration, SystemTime};

use http::{HeaderMap, HeaderValue, StatusCode};
use tollgate::Quota;
use tollgate_client::{ServerSignal, Verdict, parse_policy, parse_ratelimit, parse_retry_after};

fn now() -> SystemTime {
    // Sun, 06 Nov 1994 08:49:37 GMT
    SystemTime::UNIX_EPOCH + Duration::from_secs(784_111_777)
}

fn read(status: u16, fields: &[(&str, &str)]) -> ServerSignal {
    let mut h = HeaderMap::new();
    for (k, v) in fields {
        h.append(
            http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
            HeaderValue::from_str(v).unwrap(),
        );
    }
    ServerSignal::read(StatusCode::from_u16(status).unwrap(), &h, now())
}

#[test]
fn verdicts() {
    let v = |s| Verdict::of(StatusCode::from_u16(s).unwrap());
    assert_eq!(v(200), Verdict::Success);
    assert_eq!(v(304), Verdict::Success);
    assert_eq!(v(429), Verdict::Throttled);
    assert_eq!(v(503), Verdict::Unavailable);
    assert_eq!(v(500), Verdict::ServerError);
    assert_eq!(v(404), Verdict::Final);
    assert_eq!(v(400), Verdict::Final);
}

#[test]
fn retry_after_seconds_and_dates() {
    let ra = |s: &str| parse_retry_after(&HeaderValue::from_str(s).unwrap(), now());
    assert_eq!(ra("0"), Some(Duration::ZERO));
    assert_eq!(ra(" 17 "), Some(Duration::from_secs(17)));
    assert_eq!(
        ra("99999999999999999999999"),
        Some(Duration::from_secs(u64::MAX))
    ); // saturates
    assert_eq!(
        ra("Sun, 06 Nov 1994 08:50:07 GMT"),
        Some(Duration::from_secs(30))
    );
    assert_eq!(ra("Sun, 06 Nov 1994 08:00:00 GMT"), Some(Duration::ZERO)); // in the past
    for bad in ["", "-5", "1.5", "soon", "Sun, 06 Nov 1994", "0x10", "+3"] {
        assert_eq!(ra(bad), None, "{bad:?}");
    }
    let opaque = HeaderValue::from_bytes(b"\xff\xfe").unwrap();
    assert_eq!(parse_retry_after(&opaque, now()), None);
}

#[test]
fn ietf_policy_and_ratelimit() {
    let s = read(
        200,
        &[
            ("ratelimit-policy", "\"default\";q=10;w=1"),
            ("ratelimit", "\"default\";r=7;t=1"),
        ],
    );
    assert_eq!(s.policy, Some(Quota::per_second(10)));
    assert_eq!(
        (s.remaining, s.reset),
        (Some(7), Some(Duration::from_secs(1)))
    );

    // Several items, over several lines: the most restrictive policy, the least remaining.
    let s = read(
        200,
        &[
            ("ratelimit-policy", "\"burst\";q=100;w=60"),
            ("ratelimit-policy", "day;q=1000;w=86400;pk=:abc=:"),
            ("ratelimit", "\"burst\";r=50;t=30, day;r=2;t=4000"),
        ],
    );
    assert_eq!(
        s.policy,
        Some(Quota::new(1000, Duration::from_secs(86_400)))
    );
    assert_eq!(
        (s.remaining, s.reset),
        (Some(2), Some(Duration::from_secs(4000)))
    );

    // Quoted names with separators inside.
    assert_eq!(
        parse_policy(r#""a;b,c\"";q=5;w=1"#),
        Some(Quota::per_second(5))
    );
    // An item without a window says nothing exact.
    assert_eq!(parse_policy("\"x\";q=5"), None);
}

#[test]
fn malformed_ietf_fields_are_ignored() {
    for bad in [
        "",
        ",",
        "\"a\";q=10;w=1,",
        "\"a\";q=10;w=1,,\"b\";q=1;w=1",
        "\"unterminated;q=10;w=1",
        "\"a\";q=-10;w=1",
        "\"a\";q=1.5;w=1",
        "\"a\";q=10;w=0",
        "\"a\";q=0;w=1",
        "\"a\";q=99999999999999999;w=1",
        "\"a\";q=10;w=99999999999999999999",
        "\"a\";=10",
        "\"a\";Q=10;w=1",
        "\"a\" junk;q=10;w=1",
        "\"a\";q=10;w=1 \"b\"",
    ] {
        assert_eq!(parse_policy(bad), None, "policy {bad:?}");
    }
    for bad in ["", "\"a\";r=x", "\"a\";r=1;t=-1", "\"a\";t=1", "\"a\";r=1,"] {
        assert_eq!(parse_ratelimit(bad), None, "ratelimit {bad:?}");
    }
    // A malformed field does not spoil the others.
    let s = read(
        429,
        &[
            ("ratelimit-policy", "\"a\";q=ten;w=1"),
            ("ratelimit", "\"a\";r=0;t=2"),
            ("retry-after", "2"),
        ],
    );
    assert_eq!(s.policy, None);
    assert_eq!(s.remaining, Some(0));
    assert_eq!(s.retry_after, Some(Duration::from_secs(2)));
}

#[test]
fn legacy_fields() {
    let s = read(
        200,
        &[
            ("x-ratelimit-limit", "60"),
            ("x-ratelimit-remaining", "0"),
            ("x-ratelimit-reset", "12"),
        ],
    );
    assert_eq!(s.policy, None); // a bare limit has no window
    assert_eq!(
        (s.remaining, s.reset),
        (Some(0), Some(Duration::from_secs(12)))
    );

    let s = read(200, &[("x-ratelimit-limit", "60;w=60")]);
    assert_eq!(s.policy, Some(Quota::per_minute(60)));

    // Unix seconds.
    let s = read(200, &[("x-ratelimit-reset", "1000000000")]);
    assert_eq!(s.reset, Some(Duration::from_secs(1_000_000_000)));
    let s = read(200, &[("x-ratelimit-reset", "1000000001")]);
    assert_eq!(
        s.reset,
        Some(Duration::from_secs(1_000_000_001 - 784_111_777))
    ); // a date

    // The IETF fields win over the legacy ones.
    let s = read(
        200,
        &[
            ("ratelimit-policy", "p;q=5;w=1"),
            ("x-ratelimit-limit", "50;w=1"),
        ],
    );
    assert_eq!(s.policy, Some(Quota::per_second(5)));

    // Malformed legacy fields: ignored.
    for (k, v) in [
        ("x-ratelimit-remaining", "-1"),
        ("x-ratelimit-remaining", "lots"),
        ("x-ratelimit-reset", "soon"),
        ("x-ratelimit-limit", "a;w=1"),
    ] {
        let s = read(200, &[(k, v)]);
        assert_eq!(
            (s.policy, s.remaining, s.reset),
            (None, None, None),
            "{k}: {v}"
        );
    }
    // Repeated single-valued fields are ambiguous: ignored.
    let s = read(
        200,
        &[
            ("x-ratelimit-remaining", "1"),
            ("x-ratelimit-remaining", "2"),
        ],
    );
    assert_eq!(s.remaining, None);
}

#[test]
fn a_403_refusing_for_rate_is_a_throttle_and_holds_are_read_on_every_status() {
    let spent = [("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", "600")];
    let s = read(403, &spent);
    assert_eq!(s.verdict, Verdict::Throttled);
    assert_eq!(s.hold(), Some(Duration::from_secs(600)));
    let s = read(403, &[("retry-after", "5")]); // a secondary limit
    assert_eq!(
        (s.verdict, s.hold()),
        (Verdict::Throttled, Some(Duration::from_secs(5)))
    );
    for plain in [&[][..], &[("x-ratelimit-remaining", "12")][..]] {
        let s = read(403, plain);
        assert_eq!((s.verdict, s.hold()), (Verdict::Final, None), "{plain:?}");
    }
    // A 429 with only RateLimit's t, and other statuses with a spent quota.
    let s = read(429, &[("ratelimit", "\"p\";r=0;t=9")]);
    assert_eq!(
        (s.verdict, s.hold()),
        (Verdict::Throttled, Some(Duration::from_secs(9)))
    );
    for status in [200, 404, 500, 503] {
        assert_eq!(read(status, &spent).hold(), Some(Duration::from_secs(600)));
    }
    // The later of Retry-After and the reset; a Retry-After on a redirect is no hold.
    let s = read(429, &[("retry-after", "700"), ("ratelimit", "p;r=0;t=9")]);
    assert_eq!(s.hold(), Some(Duration::from_secs(700)));
    assert_eq!(read(301, &[("retry-after", "5")]).hold(), None);
    assert_eq!(read(200, &[("ratelimit", "p;r=3;t=9")]).hold(), None); // not spent
}

#[test]
fn resets_in_every_form_and_dates_on_the_servers_clock() {
    // 2023-11-14T22:13:20Z: late enough for Unix milliseconds to pass 10^12.
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let read_at = |fields: &[(&str, &str)]| {
        let mut h = HeaderMap::new();
        for (k, v) in fields {
            h.append(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        ServerSignal::read(StatusCode::TOO_MANY_REQUESTS, &h, now)
    };
    let reset = |v: &str| read_at(&[("x-ratelimit-reset", v)]).reset;
    let ms = Duration::from_millis;
    assert_eq!(reset("30"), Some(ms(30_000))); // delta seconds
    assert_eq!(reset("30.5"), Some(ms(30_500)));
    assert_eq!(reset("0.25"), Some(ms(250)));
    assert_eq!(reset("1700000030"), Some(ms(30_000))); // Unix seconds
    assert_eq!(reset("1700000030.25"), Some(ms(30_250)));
    assert_eq!(reset("1700000030250"), Some(ms(30_250))); // Unix milliseconds
    assert_eq!(
        reset("1700000030250.5"),
        Some(Duration::from_micros(30_250_500))
    );
    assert_eq!(reset("1699999990000"), Some(Duration::ZERO)); // past
    assert_eq!(reset("1.0000000019"), Some(Duration::new(1, 1))); // cut at nanoseconds
    for bad in ["30.", ".5", "1.2.3", "3,5", "-1.5", "1e3", "30.x", " "] {
        assert_eq!(reset(bad), None, "{bad:?}");
    }

    // The server's clock is an hour ahead: its dates are read against its own Date.
    let server = now + Duration::from_secs(3_600);
    let date = httpdate::fmt_http_date(server);
    let later = httpdate::fmt_http_date(server + Duration::from_secs(30));
    let s = read_at(&[("retry-after", &later)]);
    assert_eq!(s.retry_after, Some(Duration::from_secs(3_630))); // no Date: our clock
    let s = read_at(&[("date", &date), ("retry-after", &later)]);
    assert_eq!(s.retry_after, Some(Duration::from_secs(30)));
    let epoch = (1_700_000_000 + 3_600 + 30).to_string();
    let s = read_at(&[("date", &date), ("x-ratelimit-reset", &epoch)]);
    assert_eq!(s.reset, Some(Duration::from_secs(30)));
    // An hour behind: the date is not in the past for the server.
    let server = now - Duration::from_secs(3_600);
    let s = read_at(&[
        ("date", &httpdate::fmt_http_date(server)),
        (
            "retry-after",
            &httpdate::fmt_http_date(server + Duration::from_secs(30)),
        ),
    ]);
    assert_eq!(s.retry_after, Some(Duration::from_secs(30)));
    // A malformed or repeated Date is ignored: our clock.
    for dates in [&["yesterday"][..], &[date.as_str(), date.as_str()][..]] {
        let mut fields: Vec<(&str, &str)> = dates.iter().map(|d| ("date", *d)).collect();
        fields.push(("retry-after", &later));
        assert_eq!(
            read_at(&fields).retry_after,
            Some(Duration::from_secs(3_630))
        );
    }
    // Seconds in Retry-After are not dates: Date changes nothing.
    let s = read_at(&[("date", &date), ("retry-after", "7")]);
    assert_eq!(s.retry_after, Some(Duration::from_secs(7)));
}

/// Several `RateLimit` items: the one that binds, `r` and `t` from that same item. A spent
/// minute beside a roomy day holds for the minute; two roomy ones pace at the slower.
#[test]
fn several_ratelimit_items_bind_as_the_one_that_binds() {
    let spent = [
        ("retry-after", "5"),
        ("ratelimit", "\"minute\";r=0;t=5, \"day\";r=4000;t=80000"),
    ];
    for status in [429, 200] {
        let s = read(status, &spent);
        assert_eq!(s.hold(), Some(Duration::from_secs(5)), "{status}");
        assert_eq!(
            (s.remaining, s.reset),
            (Some(0), Some(Duration::from_secs(5)))
        );
    }
    let s = read(200, &[("ratelimit", "\"m\";r=2;t=5, \"d\";r=4000;t=80000")]);
    assert_eq!(s.hold(), None);
    assert_eq!(
        (s.remaining, s.reset),
        (Some(4000), Some(Duration::from_secs(80_000)))
    );
    // In the other order, and a minute that binds the day.
    let s = read(
        200,
        &[("ratelimit", "\"d\";r=4000;t=80000, \"m\";r=1;t=60")],
    );
    assert_eq!(
        (s.remaining, s.reset),
        (Some(1), Some(Duration::from_secs(60)))
    );
}

/// A `RateLimit` item's `r` is in its policy's unit (draft-10 ties item and policy by
/// name): bytes or concurrent requests left pace nothing, but a spent one still holds.
#[test]
fn ratelimit_counts_only_in_requests_pace() {
    let policies = "\"b\";q=1000000;w=60;qu=\"content-bytes\", \"r\";q=100;w=60";
    // The request count binds, not the 30 bytes left.
    let s = read(
        200,
        &[
            ("ratelimit-policy", policies),
            ("ratelimit", "\"b\";r=30;t=60, \"r\";r=90;t=60"),
        ],
    );
    assert_eq!(
        (s.remaining, s.reset),
        (Some(90), Some(Duration::from_secs(60)))
    );
    // Bytes alone: nothing to pace by.
    let s = read(
        200,
        &[
            ("ratelimit-policy", policies),
            ("ratelimit", "\"b\";r=30;t=60"),
        ],
    );
    assert_eq!(s.remaining, None);
    // Bytes spent: the host waits for the reset whatever the unit.
    let s = read(
        200,
        &[
            ("ratelimit-policy", policies),
            ("ratelimit", "\"b\";r=0;t=45, \"r\";r=90;t=60"),
        ],
    );
    assert_eq!(s.hold(), Some(Duration::from_secs(45)));
    // Without a policy field every item counts, as requests.
    let s = read(200, &[("ratelimit", "\"b\";r=30;t=60")]);
    assert_eq!(s.remaining, Some(30));
}
