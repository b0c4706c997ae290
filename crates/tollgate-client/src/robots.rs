//! robots.txt `Crawl-delay`: the seconds a site asks a crawler to leave between requests,
//! read from the group of rules that applies to the crawler (RFC 9309 §2.2.1 for how a
//! group is found; `Crawl-delay` itself is an extension outside the RFC, so its value is
//! read leniently and judged alone).
//!
//! Policy for bad input: a robots.txt is untrusted text. A line that is not `key: value`,
//! an unknown key, and a `Crawl-delay` that is not a non-negative finite number of seconds
//! are each skipped, and the rest is still read; nothing here panics on any input.

use std::time::Duration;

/// The `Crawl-delay` that `robots_txt` asks of the crawler `user_agent`, or `None` if it
/// asks none (or only malformed ones).
///
/// The groups whose `User-agent` lines name the crawler's product token (the part of
/// `user_agent` before the first `/` or space, compared case-insensitively, as RFC 9309
/// §2.2.1 matches) apply, all of them combined; if none does, the `User-agent: *` groups
/// apply. Among their `Crawl-delay` lines the longest valid one wins (a site that says two
/// things is taken at its most cautious). A value is a decimal number of seconds (`10`,
/// `0.5`); a negative, non-numeric or non-finite value is ignored, and one too long for a
/// `Duration` is [`Duration::MAX`], the longest delay there is (not no delay).
///
/// A group is its `User-agent` lines, then its rules: `Allow`, `Disallow` and
/// `Crawl-delay`. A `User-agent` line after a rule starts the next group; other records
/// (`Sitemap`, `Host`, keys the parser does not know) belong to no group (RFC 9309 §2.2.4),
/// so they neither end the `User-agent` lines nor the group. Comments (`#` to the end of a
/// line) and blank lines are skipped; keys are case-insensitive; lines end at LF, CRLF or
/// CR, and a leading byte-order mark is skipped.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate_client::crawl_delay;
///
/// let robots = "\
/// User-agent: *
/// Crawl-delay: 2
///
/// User-agent: slowbot
/// User-agent: OtherBot
/// Disallow: /private
/// Crawl-delay: 10 # be gentle
/// ";
/// assert_eq!(crawl_delay(robots, "SlowBot/1.0 (+https://example.com/bot)"), Some(Duration::from_secs(10)));
/// assert_eq!(crawl_delay(robots, "anybot"), Some(Duration::from_secs(2))); // the `*` group
/// assert_eq!(crawl_delay("Crawl-delay: soon", "anybot"), None); // malformed: ignored
/// ```
pub fn crawl_delay(robots_txt: &str, user_agent: &str) -> Option<Duration> {
    let product = product_token(user_agent);
    // The longest delay of the groups naming the crawler, and of the `*` groups.
    let mut named: Option<Duration> = None;
    let mut any: Option<Duration> = None;
    let mut named_seen = false;
    // The current group: whether it names the crawler, and `*`; and whether its
    // user-agent lines are over (a user-agent line after a rule starts a new group; a
    // record of no group, such as `Sitemap`, leaves them open).
    let (mut names_us, mut names_all, mut in_rules) = (false, false, false);
    // A byte-order mark before the first line (files saved on Windows) is no part of it;
    // a line ends at LF, CRLF or a lone CR (RFC 9309, §2.2: EOL).
    let robots_txt = robots_txt.strip_prefix('\u{feff}').unwrap_or(robots_txt);
    for line in robots_txt.split(['\r', '\n']) {
        let line = line.split('#').next().unwrap_or("").trim();
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let (key, value) = (key.trim(), value.trim());
        if key.eq_ignore_ascii_case("user-agent") {
            if in_rules {
                (names_us, names_all, in_rules) = (false, false, false);
            }
            if value == "*" {
                names_all = true;
            } else if !product.is_empty() && product_token(value).eq_ignore_ascii_case(product) {
                names_us = true;
                named_seen = true;
            }
            continue;
        }
        let delay = key.eq_ignore_ascii_case("crawl-delay");
        if !delay && !key.eq_ignore_ascii_case("allow") && !key.eq_ignore_ascii_case("disallow") {
            continue; // a record of no group
        }
        in_rules = true;
        if !delay {
            continue;
        }
        let Some(delay) = parse_delay(value) else {
            continue;
        };
        if names_us {
            named = named.max(Some(delay));
        }
        if names_all {
            any = any.max(Some(delay));
        }
    }
    if named_seen { named } else { any }
}

/// A crawler's product token: its user-agent up to the first `/` or whitespace.
fn product_token(user_agent: &str) -> &str {
    let s = user_agent.trim();
    s.split(|c: char| c == '/' || c.is_whitespace())
        .next()
        .unwrap_or("")
}

/// A non-negative decimal number of seconds, [`Duration::MAX`] if it is longer; `None` for
/// anything else.
fn parse_delay(value: &str) -> Option<Duration> {
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return None; // no sign, exponent, `inf` or `NaN`
    }
    let secs: f64 = value.parse().ok()?;
    // Digits and a dot: a number, so the only error left is its size (too long for a
    // `Duration`, or for an `f64`, which parses it as infinity). The site asked for more
    // than can be waited: the longest wait, never none (a later, shorter line would win).
    Some(Duration::try_from_secs_f64(secs).unwrap_or(Duration::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_and_fallback() {
        let robots = "user-agent: a\nuser-agent: b\ncrawl-delay: 3\n\
                      user-agent: *\ncrawl-delay: 1\nuser-agent: a\ncrawl-delay: 5\n";
        assert_eq!(crawl_delay(robots, "A/2"), Some(Duration::from_secs(5))); // combined
        assert_eq!(crawl_delay(robots, "b"), Some(Duration::from_secs(3)));
        assert_eq!(crawl_delay(robots, "c"), Some(Duration::from_secs(1)));
        // A group naming the crawler without a delay: no delay, not the `*` one.
        assert_eq!(
            crawl_delay(
                "user-agent: *\ncrawl-delay: 1\nuser-agent: a\nallow: /\n",
                "a"
            ),
            None
        );
        assert_eq!(crawl_delay("crawl-delay: 4\n", "a"), None); // outside any group
        assert_eq!(crawl_delay("", ""), None);
    }

    #[test]
    fn records_of_no_group_neither_end_the_user_agent_lines_nor_the_group() {
        // RFC 9309 §2.2.4: a `Sitemap` (or any record the protocol does not define) is
        // outside the groups. `a` and `b` are one group.
        let robots = "User-agent: a\nSitemap: https://example.com/s.xml\n\
                      User-agent: b\nCrawl-delay: 5\n";
        assert_eq!(crawl_delay(robots, "a"), Some(Duration::from_secs(5)));
        assert_eq!(crawl_delay(robots, "b"), Some(Duration::from_secs(5)));
        let robots = "User-agent: a\nHost: example.com\nx-unknown: 1\nUser-agent: b\n\
                      Disallow: /x\nSitemap: https://example.com/s.xml\nCrawl-delay: 5\n\
                      User-agent: c\nCrawl-delay: 1\n";
        assert_eq!(crawl_delay(robots, "a"), Some(Duration::from_secs(5)));
        assert_eq!(crawl_delay(robots, "c"), Some(Duration::from_secs(1))); // a new group
        // A rule ends the user-agent lines: `allow`, `disallow` and `crawl-delay` alike.
        for rule in ["Allow: /", "Disallow: /x", "Crawl-delay: 2"] {
            let robots = format!("User-agent: a\n{rule}\nUser-agent: b\nCrawl-delay: 9\n");
            assert_ne!(
                crawl_delay(&robots, "a"),
                Some(Duration::from_secs(9)),
                "{rule}"
            );
        }
    }

    #[test]
    fn a_delay_too_long_for_a_duration_is_the_longest_not_none() {
        for long in [
            "99999999999999999999",
            "99999999999999999999.5",
            &"9".repeat(400),
        ] {
            let robots = format!("User-agent: *\nCrawl-delay: {long}\nCrawl-delay: 1\n");
            assert_eq!(crawl_delay(&robots, "x"), Some(Duration::MAX), "{long}");
        }
        // The longest that fits is read as it is.
        let robots = "User-agent: *\nCrawl-delay: 18446744073\n";
        assert_eq!(
            crawl_delay(robots, "x"),
            Some(Duration::from_secs(18_446_744_073))
        );
    }

    #[test]
    fn malformed_values_are_skipped() {
        for bad in ["-1", "1e3", "inf", "NaN", "", "ten", "1.2.3", "."] {
            let robots = format!("User-agent: *\nCrawl-delay: {bad}\nCrawl-delay: 0.25\n");
            assert_eq!(
                crawl_delay(&robots, "x"),
                Some(Duration::from_millis(250)),
                "{bad}"
            );
        }
        assert_eq!(
            crawl_delay("User-agent: *\r\nCRAWL-DELAY :\t7\r\n", "x"),
            Some(Duration::from_secs(7))
        );
        assert_eq!(
            crawl_delay("\u{feff}garbage\0\nUser-agent *\n::::\n", "x"),
            None
        );
        // A byte-order mark does not hide the first line; a lone CR ends a line.
        for robots in [
            "\u{feff}User-agent: *\nCrawl-delay: 5\n",
            "\u{feff}User-agent: bot\r\nCrawl-delay: 5\r\n",
            "User-agent: *\rCrawl-delay: 5\r",
            "User-agent: other\rCrawl-delay: 9\r\rUser-agent: bot\rCrawl-delay: 5",
        ] {
            assert_eq!(
                crawl_delay(robots, "bot/1.0"),
                Some(Duration::from_secs(5)),
                "{robots:?}"
            );
        }
    }
}
