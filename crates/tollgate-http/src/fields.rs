//! The response fields: `Retry-After` and the IETF `RateLimit-Policy` / `RateLimit` fields
//! (draft-ietf-httpapi-ratelimit-headers-10, structured-field lists of items whose value is
//! the policy's name as a String, with the parameters `q`, `w` and `r`, `t`).

use std::collections::HashSet;
use std::fmt;
use std::num::NonZeroU64;
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use http::header::{Entry, HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};
use tollgate::Quota;

/// `RateLimit-Policy`.
pub(crate) const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
/// `RateLimit`.
pub(crate) const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");

/// Whole seconds, rounded up.
pub(crate) fn ceil_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

/// `Retry-After` in whole seconds: rounded up, and at least 1 (a 0 invites an instant retry
/// that would be refused again).
pub(crate) fn retry_after_secs(wait: Duration) -> u64 {
    ceil_secs(wait).max(1)
}

/// The policy's name as a structured-field String: printable ASCII, with `"` and `\`
/// escaped.
///
/// # Panics
///
/// If `name` has a byte outside printable ASCII (`0x20..=0x7e`).
/// A policy name the IETF fields cannot carry, or one another limit of the layer has
/// already ([`taken`](PolicyNameError::taken)): from `Builder::policy_name` and
/// `Builder::stack` (tollgate-tower).
///
///
/// # Examples
///
/// ```
/// use tollgate_http::Policy;
///
/// let err = Policy::try_new("tab\there").unwrap_err();
/// assert_eq!(err.to_string(), r#"a rate-limit policy name must be printable ASCII: "tab\there""#);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyNameError {
    name: String,
    /// Another limit of the same layer has the name already.
    taken: bool,
}

impl PolicyNameError {
    /// The error for a name another limit of the same layer has already: each policy's
    /// items, gauges and refusals are told apart by their names.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate_http::PolicyNameError;
    ///
    /// let err = PolicyNameError::taken("api");
    /// assert_eq!(err.to_string(), r#"the rate-limit policy name "api" is taken by another limit of the layer"#);
    /// ```
    pub fn taken(name: &str) -> PolicyNameError {
        PolicyNameError {
            name: name.to_owned(),
            taken: true,
        }
    }
}

impl fmt::Display for PolicyNameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.taken {
            return write!(
                f,
                "the rate-limit policy name {:?} is taken by another limit of the layer",
                self.name
            );
        }
        write!(
            f,
            "a rate-limit policy name must be printable ASCII: {:?}",
            self.name
        )
    }
}

impl std::error::Error for PolicyNameError {}

/// `name` as a structured-field String, or the error for a name it cannot carry.
pub(crate) fn try_sf_string(name: &str) -> Result<SfString, PolicyNameError> {
    if name.bytes().all(|b| (0x20..=0x7e).contains(&b)) {
        Ok(sf_string(name))
    } else {
        Err(PolicyNameError {
            name: name.to_owned(),
            taken: false,
        })
    }
}

pub(crate) fn sf_string(name: &str) -> SfString {
    assert!(
        name.bytes().all(|b| (0x20..=0x7e).contains(&b)),
        "a RateLimit policy name must be printable ASCII, got {name:?}"
    );
    let mut out = String::with_capacity(name.len() + 2);
    out.push('"');
    for c in name.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    SfString(out)
}

/// A structured-field String, quotes included, made only by [`sf_string`]: every byte is
/// printable ASCII (`0x20..=0x7e`), which [`item`] relies on to skip the `http` crate's
/// validation of each `RateLimit` value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SfString(String);

impl SfString {
    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

/// The policy a quota announces, `(q, w)`: `q` cells per `w` whole seconds, never looser
/// than the quota enforces and as close to it as whole seconds allow.
///
/// The rule: `q <= burst` (a client may spend its `q` at once) and `q / w <=` the enforced
/// rate, exactly (`q * interval <= w` seconds, in integer nanoseconds, so the rounded-up
/// interval of a rate that does not divide a second is honoured). Then a client that spends
/// at most `q` in any `w` seconds is never refused: over any span it has spent at most one
/// `q` more than the quota has refilled, and `q` fits in the burst. Among such pairs the one
/// with the highest rate wins, searched over `w = ceil(burst * interval)` (with `q = burst`)
/// and the [`SEARCH`] whole seconds at or below `burst * interval` (with the largest `q`
/// that fits); ties go to the larger window. When `burst * interval` is whole seconds (10/s,
/// 100/min, ...) that is `(burst, burst * interval)`, exact. A 30/s quota (interval
/// 33,333,334 ns) announces `q=29;w=1`: 30 per second would be 20 ns per second too fast.
pub(crate) fn policy_window(quota: Quota) -> (u32, u64) {
    const SEC: u128 = 1_000_000_000;
    let burst = quota.burst();
    let interval = quota.interval().as_nanos().max(1);
    let refill = interval * u128::from(burst);
    let secs = |n: u128| u64::try_from(n).unwrap_or(u64::MAX);
    // The full burst per its refill time, rounded up: always safe.
    let mut best = (burst, secs(refill.div_ceil(SEC)).max(1));
    if refill % SEC == 0 {
        return best;
    }
    let top = refill / SEC;
    for w in (top.saturating_sub(SEARCH - 1).max(1)..=top).rev() {
        // `w <= refill / SEC`, so `q <= burst`.
        let q = (w * SEC / interval) as u32;
        // Higher rate: q / w > best.0 / best.1.
        if q > 0 && u128::from(q) * u128::from(best.1) > u128::from(best.0) * w {
            best = (q, secs(w));
        }
    }
    best
}

/// How many whole-second windows below a quota's refill time [`policy_window`] tries.
const SEARCH: u128 = 8;

/// A policy as the fields name it: its name as a structured-field String, and its
/// `RateLimit-Policy` items, rendered once per quota. A request's `RateLimit-Policy` value
/// is then a clone of a `HeaderValue` over static bytes (`static_value`): a pointer copy,
/// where a clone of a value over heap bytes would bump a reference count that every core
/// serving the layer writes. Make one per policy, once, and keep it.
///
/// # Examples
///
/// See [`Fields`].
pub struct Policy {
    name: SfString,
    /// The items of the quotas seen so far, with their `q`, first come first served: a
    /// quota that finds every slot taken by others (more than [`POLICY_SLOTS`] tiers) is
    /// rendered afresh.
    rendered: [OnceLock<(Quota, HeaderValue, u32)>; POLICY_SLOTS],
}

/// How many quotas a [`Policy`] keeps its items for (tiers of one policy).
const POLICY_SLOTS: usize = 8;

impl Policy {
    /// The policy named `name`, quoted as a structured-field String.
    ///
    /// # Panics
    ///
    /// If `name` has a byte outside printable ASCII; [`try_new`](Self::try_new) returns the
    /// error instead.
    ///
    /// # Examples
    ///
    /// ```
    /// let policy = tollgate_http::Policy::new("per-ip");
    /// assert_eq!(format!("{policy:?}"), "\"per-ip\"");
    /// ```
    pub fn new(name: &str) -> Policy {
        Policy {
            name: sf_string(name),
            rendered: Default::default(),
        }
    }

    /// A policy named `name`, or the error for a name the fields cannot carry.
    ///
    /// # Errors
    ///
    /// [`PolicyNameError`] for a byte outside printable ASCII.
    ///
    /// # Examples
    ///
    /// See [`PolicyNameError`].
    pub fn try_new(name: &str) -> Result<Policy, PolicyNameError> {
        Ok(Policy {
            name: try_sf_string(name)?,
            rendered: Default::default(),
        })
    }

    /// The `RateLimit-Policy` item under `quota`, and its `q`.
    fn item(&self, quota: Quota) -> (HeaderValue, u32) {
        for slot in &self.rendered {
            // ordering: `OnceLock` publishes its value with release/acquire itself.
            let (of, item, q) = slot.get_or_init(|| {
                let (item, q) = policy_item(&self.name, quota);
                (quota, static_value(item), q)
            });
            if *of == quota {
                return (item.clone(), *q);
            }
        }
        policy_item(&self.name, quota)
    }
}

/// How many distinct values [`static_value`] keeps for the life of the process.
const STATIC_VALUES: usize = 1024;

/// `value` over bytes that live as long as the process, so that its clones copy a pointer
/// and touch no shared reference count: each distinct value is leaked once and reused by
/// every policy (and every layer) that renders it again. The values are a process's policy
/// items (`"name";q=10;w=1`, one per policy and quota, filled in the few slots of a
/// [`Policy`]), so they are few; past [`STATIC_VALUES`] of them (a process that makes up
/// policy names without end), `value` is returned as it is, and its clones count references
/// as before.
fn static_value(value: HeaderValue) -> HeaderValue {
    static VALUES: Mutex<Option<HashSet<&'static str>>> = Mutex::new(None);
    // Policy items are printable ASCII (`sf_string` checks the name).
    let Ok(text) = value.to_str() else {
        return value;
    };
    // A poisoned set is still a set of leaked values: keep using it.
    let mut values = VALUES.lock().unwrap_or_else(PoisonError::into_inner);
    let values = values.get_or_insert_with(HashSet::new);
    let text = match values.get(text) {
        Some(&text) => text,
        None if values.len() < STATIC_VALUES => {
            let text: &'static str = Box::leak(text.into());
            values.insert(text);
            text
        }
        None => return value,
    };
    HeaderValue::from_static(text)
}

impl std::fmt::Debug for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name.as_str())
    }
}

/// `X-RateLimit-Limit`.
const X_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
/// `X-RateLimit-Remaining`.
const X_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
/// `X-RateLimit-Reset`.
const X_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");

/// Which rate-limit fields a response carries (`Retry-After` always, on a refusal).
///
/// # Examples
///
/// ```
/// use tollgate_http::Format;
///
/// assert!(Format::IETF.any());
/// assert!(!Format { ietf: false, legacy: false }.any());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Format {
    /// `RateLimit-Policy` and `RateLimit` (the IETF draft).
    pub ietf: bool,
    /// `X-RateLimit-Limit`, `X-RateLimit-Remaining` and `X-RateLimit-Reset`.
    pub legacy: bool,
}

impl Format {
    /// The IETF fields only: what an integration sends by default.
    pub const IETF: Format = Format {
        ietf: true,
        legacy: false,
    };

    /// Whether any field describes the limits.
    pub fn any(self) -> bool {
        self.ietf || self.legacy
    }
}

/// The fields to add to a response: one list item per policy in each IETF field, and the
/// most restrictive policy in the legacy ones.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::Quota;
/// use tollgate_http::{Fields, Format, Policy};
///
/// let (per_ip, global) = (Policy::new("per-ip"), Policy::new("global"));
/// let mut fields = Fields::admitted(&per_ip, Quota::per_second(10), 9, Duration::from_millis(100));
/// fields.append(Fields::admitted(&global, Quota::per_minute(600), 599, Duration::from_millis(100)));
/// let mut headers = http::HeaderMap::new();
/// fields.insert_into(&mut headers, Format { ietf: true, legacy: true });
/// assert_eq!(headers["ratelimit-policy"], "\"per-ip\";q=10;w=1, \"global\";q=600;w=60");
/// assert_eq!(headers["ratelimit"], "\"per-ip\";r=9;t=1, \"global\";r=599;t=1");
/// assert_eq!(headers["x-ratelimit-remaining"], "9"); // the policy with the fewest left
/// assert!(headers.get("retry-after").is_none());
///
/// let refused = Fields::refused(&per_ip, Quota::per_second(10), Duration::from_millis(30));
/// assert_eq!(refused.retry_after(), Some(1)); // whole seconds, rounded up
/// ```
#[derive(Debug, Clone)]
pub struct Fields {
    policy: HeaderValue,
    ratelimit: HeaderValue,
    /// After a refusal (`retry_after_secs` is at least 1; non-zero keeps `Fields` 8 bytes
    /// smaller, and a copy of it fewer on the way to the response: 36 instructions).
    retry_after: Option<NonZeroU64>,
    /// `(limit, remaining, reset seconds)` of the policy with the fewest cells left.
    legacy: (u32, u32, u64),
}

impl Fields {
    /// After an admission: `remaining` cells left, the burst back in full after `reset`.
    ///
    /// `RateLimit`'s `r` is at most the policy's `q`: where the quota's refill time is not
    /// whole seconds, `RateLimit-Policy` announces fewer than the burst (never looser than
    /// enforced), and a client is not told more are left than its policy grants (30 in 7.8 s
    /// is `q=23;w=6`, so a fresh key's first admission says `r=23`, not 29). The legacy
    /// `X-RateLimit-Remaining` counts the burst, as its `X-RateLimit-Limit` does.
    ///
    /// # Examples
    ///
    /// See [`Fields`].
    pub fn admitted(policy: &Policy, quota: Quota, remaining: u32, reset: Duration) -> Fields {
        let (item, q) = policy.item(quota);
        Fields {
            policy: item,
            ratelimit: ratelimit_item(&policy.name, remaining.min(q), ceil_secs(reset)),
            retry_after: None,
            legacy: (quota.burst(), remaining, ceil_secs(reset)),
        }
    }

    /// After an admission by a wait (`until_ready`, which returns no `Admitted`), from a
    /// peek at the key afterwards: a peek answers as a check would, one cell further on
    /// than the key is, so the cell is given back here. `None` if the peek failed for
    /// another reason than the rate (no fields are better than wrong ones).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Limiter, Quota};
    /// use tollgate_http::{Fields, Format, Policy};
    ///
    /// let quota = Quota::per_second(10); // burst 10
    /// let limiter = Limiter::keyed(quota);
    /// for _ in 0..3 {
    ///     limiter.check("k").unwrap(); // as three waits would have admitted
    /// }
    /// let fields = Fields::after_wait(&Policy::new("p"), quota, limiter.peek("k")).unwrap();
    /// let mut headers = http::HeaderMap::new();
    /// fields.insert_into(&mut headers, Format::IETF);
    /// assert_eq!(headers["ratelimit"], "\"p\";r=7;t=1"); // 7 left, as the last check said
    /// ```
    pub fn after_wait(
        policy: &Policy,
        quota: Quota,
        peek: Result<tollgate::Admitted, tollgate::Error>,
    ) -> Option<Fields> {
        match peek {
            Ok(after) => Some(Fields::admitted(
                policy,
                quota,
                after.remaining().saturating_add(1).min(quota.burst()),
                after.reset_after().saturating_sub(quota.interval()),
            )),
            Err(tollgate::Error::RateLimited { wait, .. }) => {
                let tolerance = quota.interval() * quota.burst().saturating_sub(1);
                Some(Fields::admitted(
                    policy,
                    quota,
                    0,
                    wait.saturating_add(tolerance),
                ))
            }
            Err(_) => None,
        }
    }

    /// After a refusal of one cell: the next cell comes in `wait`. The same as
    /// [`refused_n`](Fields::refused_n) with `n` 1.
    ///
    /// # Examples
    ///
    /// See [`Fields`].
    pub fn refused(policy: &Policy, quota: Quota, wait: Duration) -> Fields {
        Fields::refused_n(policy, quota, 1, wait)
    }

    /// After a refusal of `n` cells (`check_n`, `until_n_ready`): the `n` cells are there in
    /// `wait`, the error's. Fewer than `n` may be left now, and the burst is back in full
    /// `burst - n` intervals after `wait`, so `RateLimit`'s `r` and `t` (and the legacy
    /// fields) say what the key holds, as an admission's do, and `Retry-After` when this
    /// request would pass. `n` above the burst is taken as the burst (such a request is
    /// never admitted, and refused as too costly, not with these fields).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Limiter, ManualClock, Quota};
    /// use tollgate_http::{Fields, Format, Policy};
    ///
    /// let quota = Quota::per_minute(5); // a cell every 12 s, burst 5
    /// let limiter = Limiter::builder(quota).clock(ManualClock::new()).build();
    /// limiter.check_n("k", 4).unwrap(); // one cell left, all five back in 48 s
    /// let refusal = limiter.check_n("k", 2).unwrap_err();
    /// let wait = refusal.retry_after().unwrap(); // the second cell comes in 12 s
    /// let fields = Fields::refused_n(&Policy::new("p"), quota, 2, wait);
    /// let mut headers = http::HeaderMap::new();
    /// fields.insert_into(&mut headers, Format::IETF);
    /// assert_eq!(headers["ratelimit"], "\"p\";r=1;t=48");
    /// assert_eq!(headers["retry-after"], "12");
    /// ```
    pub fn refused_n(policy: &Policy, quota: Quota, n: u32, wait: Duration) -> Fields {
        let interval = quota.interval();
        let n = n.clamp(1, quota.burst());
        // The key's TAT is `wait` past the moment `n` cells conform: `n - 1` intervals short
        // of the tolerance (`burst - 1` intervals), so `burst - n` intervals before it.
        let reset = ceil_secs(wait.saturating_add(interval * (quota.burst() - n)));
        // Cells left now: `n` less the intervals `wait` spans, counting a part as one.
        let short = wait.as_nanos().div_ceil(interval.as_nanos().max(1));
        let remaining = u32::try_from(u128::from(n).saturating_sub(short)).unwrap_or(0);
        let retry = retry_after_secs(wait);
        let (item, q) = policy.item(quota);
        Fields {
            policy: item,
            ratelimit: ratelimit_item(&policy.name, remaining.min(q), reset.max(retry)),
            retry_after: NonZeroU64::new(retry).or(Some(NonZeroU64::MIN)),
            legacy: (quota.burst(), remaining, reset.max(retry)),
        }
    }

    /// Adds another policy's items (stacked limits).
    ///
    /// # Examples
    ///
    /// See [`Fields`].
    pub fn append(&mut self, other: Fields) {
        self.policy = join(&self.policy, &other.policy);
        self.ratelimit = join(&self.ratelimit, &other.ratelimit);
        self.retry_after = self.retry_after.max(other.retry_after);
        if other.legacy.1 < self.legacy.1 {
            self.legacy = other.legacy;
        }
    }

    /// Adds the fields `format` asks for, and `Retry-After` after a refusal.
    ///
    /// Fields already in `headers` are kept, as from a limiting layer nested inside this
    /// one or an upstream that answered with its own: these policies' items are appended to
    /// the IETF lists, and where a policy of the same name is there already (two nested
    /// layers both left at the default name), the one with fewer cells left is kept, both
    /// of its items (on a tie the one with the later reset, then the one present; give
    /// nested limits names of their own to announce both), the legacy fields describe
    /// whichever policy has
    /// fewer cells left (the ones present, if they are a whole set and their
    /// `X-RateLimit-Remaining` is not above this one's), and `Retry-After` is the later of
    /// the two (a present value that is not in seconds, an HTTP date, stays).
    ///
    /// # Examples
    ///
    /// See [`Fields`]; with a nested limit's fields already on the response:
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::Quota;
    /// use tollgate_http::{Fields, Format, Policy};
    ///
    /// let mut headers = http::HeaderMap::new();
    /// Fields::refused(&Policy::new("login"), Quota::per_minute(1), Duration::from_secs(50))
    ///     .insert_into(&mut headers, Format::IETF);
    /// Fields::admitted(&Policy::new("global"), Quota::per_minute(100), 98, Duration::from_secs(2))
    ///     .insert_into(&mut headers, Format::IETF);
    /// assert_eq!(headers["ratelimit"], "\"login\";r=0;t=50, \"global\";r=98;t=2");
    /// assert_eq!(headers["retry-after"], "50");
    /// ```
    pub fn insert_into(self, headers: &mut HeaderMap, format: Format) {
        if headers.is_empty() && self.retry_after.is_none() {
            // A response without fields (a handler that sets none): the same map, built by
            // cloning one with these names already in place, whose values are then set in
            // order. A clone copies each name's hash with it, where an insert hashes the
            // name (byte by byte, for these non-standard names) and probes for it.
            *headers = template(format).clone();
            let mut slots = headers.iter_mut().map(|(_, value)| value);
            let mut fill = |value: HeaderValue| {
                *slots.next().expect("a template slot per field") = value;
            };
            if format.ietf {
                fill(self.policy);
                fill(self.ratelimit);
            }
            if format.legacy {
                let (limit, remaining, reset) = self.legacy;
                fill(HeaderValue::from(limit));
                fill(HeaderValue::from(remaining));
                fill(HeaderValue::from(reset));
            }
            return;
        }
        // One reservation for every field this adds (the map is usually still empty).
        let count = 2 * usize::from(format.ietf)
            + 3 * usize::from(format.legacy)
            + usize::from(self.retry_after.is_some());
        headers.reserve(count);
        // Each field through its entry: one lookup, as an insert takes, whether or not the
        // response has it already.
        if format.ietf {
            add_items(headers, self.policy, self.ratelimit);
        }
        if format.legacy {
            let (limit, remaining, reset) = self.legacy;
            // A whole set present (one line each, in numbers) with no more left stands;
            // anything less is replaced by this policy's set, so the three always agree.
            let number = |name: HeaderName| -> Option<u64> {
                let mut lines = headers.get_all(name).iter();
                match (lines.next(), lines.next()) {
                    (Some(value), None) => seconds(value),
                    _ => None,
                }
            };
            let fewer_present = number(X_LIMIT).is_some()
                && number(X_RESET).is_some()
                && number(X_REMAINING).is_some_and(|present| present <= u64::from(remaining));
            if !fewer_present {
                headers.insert(X_LIMIT, HeaderValue::from(limit));
                headers.insert(X_REMAINING, HeaderValue::from(remaining));
                headers.insert(X_RESET, HeaderValue::from(reset));
            }
        }
        if let Some(retry) = self.retry_after.map(NonZeroU64::get) {
            match headers.entry(RETRY_AFTER) {
                // Seconds at least as late, or not seconds (an HTTP date): it stands.
                Entry::Occupied(present) if seconds(present.get()).is_none_or(|s| s >= retry) => {}
                Entry::Occupied(mut present) => {
                    present.insert(HeaderValue::from(retry));
                }
                Entry::Vacant(absent) => {
                    absent.insert(HeaderValue::from(retry));
                }
            }
        }
    }

    /// The fields [`insert_into`](Fields::insert_into) writes under `format`, `Retry-After`
    /// included: for a caller whose response keeps its header elsewhere (a proxy's), which
    /// copies the ones the response has into the map first, so that they are combined as
    /// `insert_into` says, and then writes these back.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate_http::{Fields, Format};
    ///
    /// let names: Vec<_> = Fields::names(Format::IETF).map(|n| n.to_string()).collect();
    /// assert_eq!(names, ["ratelimit-policy", "ratelimit", "retry-after"]);
    /// ```
    pub fn names(format: Format) -> impl Iterator<Item = HeaderName> {
        let ietf = [RATELIMIT_POLICY, RATELIMIT]
            .into_iter()
            .filter(move |_| format.ietf);
        let legacy = [X_LIMIT, X_REMAINING, X_RESET]
            .into_iter()
            .filter(move |_| format.legacy);
        ietf.chain(legacy).chain([RETRY_AFTER])
    }

    /// Seconds until a retry may pass, after a refusal.
    ///
    /// # Examples
    ///
    /// See [`Fields`].
    pub fn retry_after(&self) -> Option<u64> {
        self.retry_after.map(NonZeroU64::get)
    }
}

/// The fields of an admitted response under `format`, in the order
/// [`Fields::insert_into`] adds them, with empty values: built once per process.
fn template(format: Format) -> &'static HeaderMap {
    static TEMPLATES: [OnceLock<HeaderMap>; 4] = [const { OnceLock::new() }; 4];
    let index = usize::from(format.ietf) + 2 * usize::from(format.legacy);
    // ordering: `OnceLock` publishes its value with release/acquire itself.
    TEMPLATES[index].get_or_init(|| {
        let empty = || HeaderValue::from_static("");
        let mut map = HeaderMap::new();
        if format.ietf {
            map.insert(RATELIMIT_POLICY, empty());
            map.insert(RATELIMIT, empty());
        }
        if format.legacy {
            map.insert(X_LIMIT, empty());
            map.insert(X_REMAINING, empty());
            map.insert(X_RESET, empty());
        }
        map
    })
}

fn policy_item(name: &SfString, quota: Quota) -> (HeaderValue, u32) {
    let (q, w) = policy_window(quota);
    (item(name, Params::Policy, u64::from(q), w), q)
}

fn ratelimit_item(name: &SfString, remaining: u32, reset_secs: u64) -> HeaderValue {
    item(name, Params::RateLimit, u64::from(remaining), reset_secs)
}

/// The two parameters of an item.
#[derive(Clone, Copy)]
enum Params {
    /// `;q=` and `;w=` (`RateLimit-Policy`).
    Policy,
    /// `;r=` and `;t=` (`RateLimit`).
    RateLimit,
}

/// `{name};{k1}={v1};{k2}={v2}` as a header value, written back to front into a stack
/// buffer (the digits straight into place), then copied once into the value's own storage:
/// one allocation, one copy, and no validation pass over the bytes (see the `SAFETY` note).
fn item(name: &SfString, params: Params, v1: u64, v2: u64) -> HeaderValue {
    let (k1, k2): (&[u8; 3], &[u8; 3]) = match params {
        Params::Policy => (b";q=", b";w="),
        Params::RateLimit => (b";r=", b";t="),
    };
    let name = name.as_str().as_bytes();
    let mut buf = [0u8; ITEM_STACK];
    if name.len() + k1.len() + k2.len() + 2 * MAX_U64_DIGITS > buf.len() {
        // A name too long for the stack buffer: the same bytes, built on the heap.
        let mut out = name.to_vec();
        for (k, v) in [(k1, v1), (k2, v2)] {
            let mut digits = [0u8; MAX_U64_DIGITS];
            let at = decimal_back(&mut digits, MAX_U64_DIGITS, v);
            out.extend_from_slice(k);
            out.extend_from_slice(&digits[at..]);
        }
        return HeaderValue::try_from(out).expect("a structured field of printable ASCII");
    }
    let mut at = decimal_back(&mut buf, ITEM_STACK, v2);
    at = put_back(&mut buf, at, k2);
    at = decimal_back(&mut buf, at, v1);
    at = put_back(&mut buf, at, k1);
    at = put_back(&mut buf, at, name);
    let bytes = Bytes::copy_from_slice(&buf[at..]);
    debug_assert!(bytes.iter().all(|b| (0x20..=0x7e).contains(b)), "{bytes:?}");
    // SAFETY: `from_maybe_shared_unchecked` requires bytes that are a valid header value
    // (visible ASCII, space or tab). `bytes` are, byte by byte: `name`, printable ASCII by
    // `SfString`'s only constructor, `sf_string`, which asserts it; `k1` and `k2`, the
    // literals just above; and the digits `decimal_back` writes (`PAIRS` and `b'0' + n`,
    // `n < 10`). (Saves the `http` crate's pass over every byte: about 160 instructions of
    // about 2,200 per request with the fields on.)
    #[allow(unsafe_code)]
    unsafe {
        HeaderValue::from_maybe_shared_unchecked(bytes)
    }
}

/// The stack buffer [`item`] writes into: room for a name of 80 bytes.
const ITEM_STACK: usize = 128;

/// The most decimal digits a `u64` has.
const MAX_U64_DIGITS: usize = 20;

/// Writes `n` in decimal into `buf` ending at `end`, two digits per division; returns where
/// it starts.
fn decimal_back(buf: &mut [u8], end: usize, mut n: u64) -> usize {
    let mut i = end;
    while n >= 100 {
        let pair = 2 * (n % 100) as usize;
        n /= 100;
        i -= 2;
        buf[i..i + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
    }
    if n >= 10 {
        let pair = 2 * n as usize;
        i -= 2;
        buf[i..i + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
    } else {
        i -= 1;
        buf[i] = b'0' + n as u8;
    }
    i
}

/// `00` to `99`, each two ASCII digits.
const PAIRS: [u8; 200] = {
    let mut pairs = [0u8; 200];
    let mut n = 0;
    while n < 100 {
        pairs[2 * n] = b'0' + (n / 10) as u8;
        pairs[2 * n + 1] = b'0' + (n % 10) as u8;
        n += 1;
    }
    pairs
};

/// Writes `bytes` into `buf` ending at `end`; returns where they start.
fn put_back(buf: &mut [u8], end: usize, bytes: &[u8]) -> usize {
    let start = end - bytes.len();
    buf[start..end].copy_from_slice(bytes);
    start
}

/// The IETF fields with these policies' items added: after the items a response has
/// already. A name in either field already (nested layers both left at the default name,
/// an upstream's policy of that name) keeps one policy of that name, both of its items
/// together: the one with fewer cells left (`r`), which is the one that decides the client's
/// next request, on a tie the one with the later reset (`t`), then the one present (nearer
/// the answer). A present name with no `r` to compare (a `RateLimit-Policy` item alone)
/// gives way to ours.
fn add_items(headers: &mut HeaderMap, policy: HeaderValue, ratelimit: HeaderValue) {
    // The usual response has neither field: two appends, as two inserts take (the entry
    // API takes about twice that). Appended, each of ours is its field's last line.
    let policy_was_there = headers.append(RATELIMIT_POLICY, policy);
    let ratelimit_was_there = headers.append(RATELIMIT, ratelimit);
    if !policy_was_there && !ratelimit_was_there {
        return;
    }
    // A field was there: its items as items (empty ones and stray commas dropped), and ours.
    let split = |name: &HeaderName| -> (Vec<Vec<u8>>, Vec<u8>) {
        let lines: Vec<&HeaderValue> = headers.get_all(name).iter().collect();
        let (ours, present) = lines.split_last().expect("ours was appended");
        let present = present
            .iter()
            .flat_map(|value| list_items(value.as_bytes()))
            .map(<[u8]>::to_vec)
            .collect();
        (present, ours.as_bytes().to_vec())
    };
    let (policies, our_policies) = split(&RATELIMIT_POLICY);
    let (states, our_states) = split(&RATELIMIT);
    // Per name of ours: whether its items go in, over any present ones of that name.
    let ours_win: Vec<(&[u8], bool)> = list_items(&our_states)
        .map(|ours| {
            let name = item_name(ours);
            let named = |item: &&Vec<u8>| item_name(item) == name;
            let taken = policies.iter().chain(&states).any(|item| named(&item));
            // The strictest present item of the name, if any has a `r` to compare.
            let present = states
                .iter()
                .filter(named)
                .filter_map(|item| strictness(item))
                .min();
            let win = !taken || present.is_none_or(|present| strictness(ours) < Some(present));
            (name, win)
        })
        .collect();
    let wins = |name: &[u8]| ours_win.iter().any(|&(n, win)| n == name && win);
    for (name, present, ours) in [
        (RATELIMIT_POLICY, &policies, &our_policies),
        (RATELIMIT, &states, &our_states),
    ] {
        let kept = present
            .iter()
            .map(Vec::as_slice)
            .filter(|item| !wins(item_name(item)));
        let added = list_items(ours).filter(|item| wins(item_name(item)));
        let all: Vec<&[u8]> = kept.chain(added).collect();
        if all.is_empty() {
            // Nothing to say in it (every policy of ours named already, and no item
            // present): the field goes, ours with any empty lines it had.
            headers.remove(name);
            continue;
        }
        // Items of header values and printable ASCII make a header value; were it not one,
        // the field would keep its lines, ours last.
        if let Ok(value) = HeaderValue::from_bytes(&all.join(&b", "[..])) {
            headers.insert(name, value);
        }
    }
}

/// The items of a structured-field list: split at the commas outside quoted strings,
/// whitespace trimmed, empty ones skipped.
fn list_items(list: &[u8]) -> impl Iterator<Item = &[u8]> {
    split_unquoted(list, b',')
        .map(<[u8]>::trim_ascii)
        .filter(|item| !item.is_empty())
}

/// An item's bare value (a policy's name, as a String), without its parameters.
fn item_name(item: &[u8]) -> &[u8] {
    split_unquoted(item, b';')
        .next()
        .unwrap_or(item)
        .trim_ascii_end()
}

/// `bytes` split at each `sep` outside quoted strings (a list's items at `,`, an item's
/// parameters at `;`), the pieces as they are.
fn split_unquoted(bytes: &[u8], sep: u8) -> impl Iterator<Item = &[u8]> {
    let (mut start, mut quoted, mut escaped) = (0, false, false);
    let mut pieces = Vec::new();
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            _ if escaped => escaped = false,
            b'\\' if quoted => escaped = true,
            b'"' => quoted = !quoted,
            _ if b == sep && !quoted => {
                pieces.push(&bytes[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    pieces.push(&bytes[start..]);
    pieces.into_iter()
}

/// How strict a `RateLimit` item is, least first: fewer cells left (`r`), then a longer
/// reset (`t`; none counts as the shortest). `None` without an `r`.
fn strictness(item: &[u8]) -> Option<(u64, std::cmp::Reverse<u64>)> {
    let reset = param(item, b"t").unwrap_or(0);
    Some((param(item, b"r")?, std::cmp::Reverse(reset)))
}

/// An item's integer parameter `key`, read as RFC 9651 does: parameters split at the `;`
/// outside quoted strings, the last of a repeated key wins; `None` if it is absent or its
/// value is not an integer. (More digits than a `u64` holds read as `u64::MAX`.)
fn param(item: &[u8], key: &[u8]) -> Option<u64> {
    split_unquoted(item, b';')
        .skip(1)
        .filter_map(|param| {
            let (k, v) = param.split_at_checked(param.iter().position(|&b| b == b'=')?)?;
            let digits = v[1..].trim_ascii();
            let number = (!digits.is_empty() && digits.iter().all(u8::is_ascii_digit))
                .then(|| {
                    std::str::from_utf8(digits)
                        .ok()?
                        .parse()
                        .ok()
                        .or(Some(u64::MAX))
                })
                .flatten();
            (k.trim_ascii() == key).then_some(number)
        })
        .last()
        .flatten()
}

/// A field value that is a whole number of seconds (`Retry-After`'s delay-seconds, a legacy
/// count), or `None`.
fn seconds(value: &HeaderValue) -> Option<u64> {
    let text = value.to_str().ok()?.trim();
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // More digits than a `u64` holds: later than any wait this computes.
    Some(text.parse().unwrap_or(u64::MAX))
}

/// Two lists of items as one: `a, b`.
fn join(a: &HeaderValue, b: &HeaderValue) -> HeaderValue {
    let mut out = Vec::with_capacity(a.len() + 2 + b.len());
    out.extend_from_slice(a.as_bytes());
    out.extend_from_slice(b", ");
    out.extend_from_slice(b.as_bytes());
    HeaderValue::try_from(out).expect("a structured field of printable ASCII")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding() {
        assert_eq!(retry_after_secs(Duration::ZERO), 1);
        assert_eq!(retry_after_secs(Duration::from_nanos(1)), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(1000)), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(1001)), 2);
    }

    /// `q / w` never exceeds the enforced rate, `q` never the burst.
    fn assert_safe(quota: Quota) -> (u32, u64) {
        let (q, w) = policy_window(quota);
        assert!(
            q >= 1 && q <= quota.burst() && w >= 1,
            "{quota:?}: q={q};w={w}"
        );
        let spent = quota.interval().as_nanos() * u128::from(q);
        assert!(
            spent <= u128::from(w) * 1_000_000_000,
            "{quota:?}: q={q};w={w}"
        );
        (q, w)
    }

    #[test]
    fn policy_windows() {
        // Exact when the burst refills in whole seconds.
        assert_eq!(assert_safe(Quota::per_second(10)), (10, 1));
        assert_eq!(assert_safe(Quota::per_minute(10)), (10, 60));
        assert_eq!(assert_safe(Quota::per_second(5).allow_burst(1)), (1, 1));
        // 2.5 s to refill 5 cells: 4 per 2 s is the rate exactly, 5 per 3 s is slower.
        assert_eq!(assert_safe(Quota::per_second(2).allow_burst(5)), (4, 2));
        // 30/s is 33,333,334 ns per cell: 30 per second would be too fast, 30 per 2 s is
        // half the rate.
        assert_eq!(assert_safe(Quota::per_second(30)), (29, 1));
        assert_eq!(assert_safe(Quota::per_second(7)), (6, 1));
        // A slow interval: one cell per 1.5 s, burst 1, is one per 2 s.
        let slow = Quota::new(1, Duration::from_millis(1500));
        assert_eq!(assert_safe(slow), (1, 2));
        // The search finds a shorter window when it is closer: 260 ms per cell, burst 30
        // (7.8 s): 23 per 6 s (3.83/s) beats 30 per 8 s and 26 per 7 s.
        let odd = Quota::new(30, Duration::from_millis(7800));
        assert_eq!(assert_safe(odd), (23, 6));
        for n in 1..=1000 {
            for burst in [1, 2, 3, 7, 30, n] {
                assert_safe(Quota::per_second(n).allow_burst(burst));
                assert_safe(Quota::per_minute(n).allow_burst(burst));
            }
        }
        assert_safe(Quota::new(1_000_007, Duration::from_secs(500_000_000)));
        assert_safe(Quota::new(999_999_999, Duration::from_secs(1)));
    }

    /// `r` never says more are left than the announced `q` grants; the legacy fields count
    /// the burst, as their limit does.
    #[test]
    fn remaining_is_at_most_the_policys_quota() {
        let policy = Policy::new("p");
        let odd = Quota::new(30, Duration::from_millis(7800)); // q=23;w=6 (above)
        let mut h = HeaderMap::new();
        Fields::admitted(&policy, odd, 29, Duration::from_secs(1)).insert_into(&mut h, BOTH);
        assert_eq!(h[RATELIMIT_POLICY], "\"p\";q=23;w=6");
        assert_eq!(h[RATELIMIT], "\"p\";r=23;t=1");
        assert_eq!(
            (h[X_LIMIT].as_bytes(), h[X_REMAINING].as_bytes()),
            (&b"30"[..], &b"29"[..])
        );
        let mut h = HeaderMap::new();
        Fields::admitted(&policy, odd, 5, Duration::from_secs(7)).insert_into(&mut h, IETF);
        assert_eq!(h[RATELIMIT], "\"p\";r=5;t=7");
        // Whole seconds: q is the burst, and r as it is.
        let mut h = HeaderMap::new();
        Fields::admitted(
            &policy,
            Quota::per_second(10),
            9,
            Duration::from_millis(100),
        )
        .insert_into(&mut h, IETF);
        assert_eq!(h[RATELIMIT], "\"p\";r=9;t=1");
    }

    /// A refusal of `n` cells describes the key as it is, as an admission would: the cells
    /// left now (`check_n` of 0 reads them without taking any) and when all are back, over
    /// random costs and times on quotas of whole and odd seconds.
    #[test]
    fn a_refusal_of_n_cells_says_what_the_key_holds() {
        use tollgate::{Limiter, ManualClock};
        let policy = Policy::new("p");
        for quota in [
            Quota::per_minute(5),
            Quota::new(7, Duration::from_millis(3300)),
            Quota::per_second(1),
        ] {
            let clock = ManualClock::new();
            let limiter = Limiter::builder(quota).clock(clock.clone()).build();
            let mut seed = 0x9E37_79B9_7F4A_7C15_u64;
            let mut refusals = 0;
            for _ in 0..2_000 {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                let n = 1 + (seed % u64::from(quota.burst())) as u32;
                clock.advance(Duration::from_millis(seed >> 40 & 0x3ff));
                let Err(error) = limiter.check_n(&1, n) else {
                    continue;
                };
                refusals += 1;
                let wait = error.retry_after().expect("over its rate");
                let now = limiter.check_n(&1, 0).expect("no cell taken");
                let mut h = HeaderMap::new();
                Fields::refused_n(&policy, quota, n, wait).insert_into(&mut h, BOTH);
                let (q, _) = policy_window(quota);
                let reset = ceil_secs(now.reset_after()).max(retry_after_secs(wait));
                let r = now.remaining().min(q);
                assert_eq!(
                    h[RATELIMIT],
                    format!("\"p\";r={r};t={reset}"),
                    "{quota:?}, n={n}"
                );
                assert_eq!(h[X_REMAINING], now.remaining().to_string());
                assert_eq!(h[X_RESET], reset.to_string());
                assert_eq!(h[RETRY_AFTER], retry_after_secs(wait).to_string());
                assert!(now.remaining() < n, "refused with {n} left");
            }
            assert!(refusals > 100, "{quota:?}: {refusals} refusals");
        }
    }

    #[test]
    fn names_are_sf_strings() {
        assert_eq!(sf_string("default").as_str(), "\"default\"");
        assert_eq!(sf_string(r#"a"b\c"#).as_str(), r#""a\"b\\c""#);
    }

    #[test]
    #[should_panic(expected = "printable ASCII")]
    fn non_ascii_name_panics() {
        sf_string("défaut");
    }

    #[test]
    fn values() {
        let name = Policy::new("default");
        let mut h = HeaderMap::new();
        Fields::refused(&name, Quota::per_second(10), Duration::from_millis(100))
            .insert_into(&mut h, IETF);
        assert_eq!(h[RATELIMIT_POLICY], "\"default\";q=10;w=1");
        assert_eq!(h[RATELIMIT], "\"default\";r=0;t=1");
        assert_eq!(h[RETRY_AFTER], "1");

        let mut f = Fields::admitted(&name, Quota::per_second(10), 9, Duration::from_millis(100));
        f.append(Fields::admitted(
            &Policy::new("global"),
            Quota::per_minute(100),
            50,
            Duration::from_secs(30),
        ));
        let mut h = HeaderMap::new();
        f.insert_into(&mut h, BOTH);
        assert_eq!(
            h[RATELIMIT_POLICY],
            "\"default\";q=10;w=1, \"global\";q=100;w=60"
        );
        assert_eq!(h[RATELIMIT], "\"default\";r=9;t=1, \"global\";r=50;t=30");
        assert!(h.get(RETRY_AFTER).is_none());
        // The legacy fields describe the policy with the fewest cells left.
        assert_eq!(h[X_LIMIT], "10");
        assert_eq!(h[X_REMAINING], "9");
        assert_eq!(h[X_RESET], "1");
    }

    #[test]
    fn items_are_rendered_as_format_would() {
        for (r, t) in [
            (0, 0),
            (9, 1),
            (10, 99),
            (100, 101),
            (999, 1000),
            (9_999, 10_000),
            (999_999, 1_000_001),
            (u32::MAX - 1, u64::MAX - 1),
            (u32::MAX, u64::MAX),
            (1_000_000, 1 << 40),
        ] {
            assert_eq!(
                ratelimit_item(&sf_string("p"), r, t),
                format!("\"p\";r={r};t={t}").as_str()
            );
        }
        // Escaped characters in the name, and the longest name the stack buffer takes.
        for name in [r#"a"b\c"#, &"n".repeat(ITEM_STACK - 48)] {
            let quoted = sf_string(name);
            assert_eq!(
                ratelimit_item(&quoted, 12, 34),
                format!("{};r=12;t=34", quoted.as_str()).as_str()
            );
        }
        // A name too long for the stack buffer.
        let long = sf_string(&"n".repeat(300));
        assert_eq!(
            ratelimit_item(&long, 7, u64::MAX),
            format!("{};r=7;t={}", long.as_str(), u64::MAX).as_str()
        );
    }

    #[test]
    fn policy_items_are_kept_per_quota() {
        let policy = Policy::new("tiers");
        // More quotas than slots: the later ones are rendered afresh, all correct.
        for round in 0..2 {
            for n in 1..=(2 * POLICY_SLOTS as u32) {
                let q = Quota::per_second(n).allow_burst(n * 3);
                let (cells, w) = policy_window(q);
                let expected = format!("\"tiers\";q={cells};w={w}");
                assert_eq!(policy.item(q).0, expected.as_str(), "round {round}");
            }
        }
    }

    /// A response without fields gets them from the template, one with fields by
    /// insertion: the same fields, in the same order, either way.
    /// Fields a response has already (a nested layer's, an upstream's) are kept and
    /// combined, as `insert_into` says; anything else in the map is left alone.
    #[test]
    fn present_fields_are_kept_and_combined() {
        let policy = Policy::new("outer");
        let admitted =
            || Fields::admitted(&policy, Quota::per_minute(100), 7, Duration::from_secs(3));
        let present = |pairs: &[(&HeaderName, &str)]| {
            let mut h = HeaderMap::new();
            h.insert("content-type", HeaderValue::from_static("text/plain"));
            for &(name, value) in pairs {
                h.append(name, HeaderValue::from_str(value).unwrap());
            }
            h
        };
        let all = |h: &HeaderMap, name: &HeaderName| -> Vec<String> {
            h.get_all(name)
                .iter()
                .map(|v| v.to_str().unwrap().to_owned())
                .collect()
        };
        // Every line of a present list, in order, then this policy's items, as one line.
        let mut h = present(&[
            (&RATELIMIT, "\"a\";r=1;t=1"),
            (&RATELIMIT, "\"b\";r=2;t=2"),
            (&RATELIMIT_POLICY, "\"a\";q=5;w=1"),
        ]);
        admitted().insert_into(&mut h, BOTH);
        assert_eq!(
            all(&h, &RATELIMIT),
            ["\"a\";r=1;t=1, \"b\";r=2;t=2, \"outer\";r=7;t=3"]
        );
        assert_eq!(
            all(&h, &RATELIMIT_POLICY),
            ["\"a\";q=5;w=1, \"outer\";q=100;w=60"]
        );
        assert_eq!(h["content-type"], "text/plain");
        // Legacy fields: the policy with fewer left wins, the present one on a tie.
        for (remaining, kept) in [("3", true), ("7", true), ("8", false), ("x", false)] {
            let mut h = present(&[(&X_LIMIT, "10"), (&X_REMAINING, remaining), (&X_RESET, "9")]);
            admitted().insert_into(&mut h, BOTH);
            let want = if kept {
                ["10", remaining, "9"]
            } else {
                ["100", "7", "3"]
            };
            let got = [X_LIMIT, X_REMAINING, X_RESET].map(|n| all(&h, &n).join("|"));
            assert_eq!(got, want, "present remaining {remaining}");
        }
        // A policy of the same name present: the one with fewer left stays, both of its
        // items (the present one on a tie); the others are added.
        let mut stacked = admitted();
        stacked.append(Fields::admitted(
            &Policy::new("a,b;c"),
            Quota::per_second(1),
            0,
            Duration::from_secs(1),
        ));
        let mut h = present(&[(&RATELIMIT, "\"x\";r=1;t=1, \"outer\";r=0;t=50")]);
        stacked.clone().insert_into(&mut h, IETF);
        assert_eq!(
            all(&h, &RATELIMIT),
            ["\"x\";r=1;t=1, \"outer\";r=0;t=50, \"a,b;c\";r=0;t=1"]
        );
        assert_eq!(all(&h, &RATELIMIT_POLICY), ["\"a,b;c\";q=1;w=1"]);
        let mut h = present(&[
            (&RATELIMIT, "\"outer\";r=0;t=50, \"a,b;c\";r=5;t=5"),
            (&RATELIMIT_POLICY, "\"a,b;c\";q=9;w=9"),
        ]);
        stacked.insert_into(&mut h, IETF);
        assert_eq!(
            all(&h, &RATELIMIT),
            ["\"outer\";r=0;t=50, \"a,b;c\";r=0;t=1"]
        );
        assert_eq!(all(&h, &RATELIMIT_POLICY), ["\"a,b;c\";q=1;w=1"]);
        for (present_items, kept) in [
            ("\"outer\";r=7;t=9", true),
            ("\"outer\";r=7;t=3", true),
            ("\"outer\";r=7;t=2", false),
            ("\"outer\";r=7", false),
            ("\"outer\";r=6;t=9", true),
            ("\"outer\";r=8;t=9", false),
            // RFC 9651: `;` inside a quoted string is no separator; the last key wins.
            ("\"outer\";x=\"a;r=1;b\";r=50;t=9", false),
            ("\"outer\";r=0;r=50;t=9", false),
            ("\"outer\";r=50;r=0;t=9", true),
            ("\"outer\";r=99999999999999999999999;t=9", false),
            ("\"outer\";t=9", false),
            ("\"outer\";r=x;t=9", false),
        ] {
            let mut h = present(&[
                (&RATELIMIT_POLICY, "\"outer\";q=10;w=10"),
                (&RATELIMIT, present_items),
            ]);
            admitted().insert_into(&mut h, IETF);
            let (policy, state) = if kept {
                ("\"outer\";q=10;w=10", present_items)
            } else {
                ("\"outer\";q=100;w=60", "\"outer\";r=7;t=3")
            };
            assert_eq!(all(&h, &RATELIMIT_POLICY), [policy], "{present_items}");
            assert_eq!(all(&h, &RATELIMIT), [state], "{present_items}");
        }
        // A name in either field is the policy's: its two items stay paired. A present
        // policy item with no state to compare gives way to ours.
        let mut h = present(&[(&RATELIMIT_POLICY, "\"outer\";q=100;w=60")]);
        admitted().insert_into(&mut h, IETF);
        assert_eq!(all(&h, &RATELIMIT_POLICY), ["\"outer\";q=100;w=60"]);
        assert_eq!(all(&h, &RATELIMIT), ["\"outer\";r=7;t=3"]);
        let mut h = present(&[(&RATELIMIT, "\"outer\";r=5;t=30")]);
        admitted().insert_into(&mut h, IETF);
        assert!(h.get(RATELIMIT_POLICY).is_none(), "{h:?}");
        assert_eq!(all(&h, &RATELIMIT), ["\"outer\";r=5;t=30"]);
        // Empty lines and stray commas present make no empty items.
        let mut h = present(&[(&RATELIMIT, ""), (&RATELIMIT, " \"x\";r=1;t=1 ,, ")]);
        admitted().insert_into(&mut h, IETF);
        assert_eq!(all(&h, &RATELIMIT), ["\"x\";r=1;t=1, \"outer\";r=7;t=3"]);
        assert_eq!(all(&h, &RATELIMIT_POLICY), ["\"outer\";q=100;w=60"]);
        // A partial or repeated legacy set present: this policy's whole set replaces it.
        for partial in [
            &[(&X_REMAINING, "0")][..],
            &[(&X_LIMIT, "10"), (&X_REMAINING, "0")],
            &[
                (&X_LIMIT, "10"),
                (&X_REMAINING, "0"),
                (&X_REMAINING, "1"),
                (&X_RESET, "9"),
            ],
        ] {
            let mut h = present(partial);
            admitted().insert_into(&mut h, BOTH);
            let got = [X_LIMIT, X_REMAINING, X_RESET].map(|n| all(&h, &n).join("|"));
            assert_eq!(got, ["100", "7", "3"], "{partial:?}");
        }
        // `Retry-After`: the later of the two; a date stays.
        let refused = || Fields::refused(&policy, Quota::per_minute(1), Duration::from_secs(30));
        for (before, after) in [
            ("120", "120"),
            ("30", "30"),
            ("5", "30"),
            ("99999999999999999999999", "99999999999999999999999"),
            (
                "Wed, 21 Oct 2065 07:28:00 GMT",
                "Wed, 21 Oct 2065 07:28:00 GMT",
            ),
        ] {
            let mut h = present(&[(&RETRY_AFTER, before)]);
            refused().insert_into(&mut h, IETF);
            assert_eq!(all(&h, &RETRY_AFTER), [after], "present {before}");
        }
    }

    #[test]
    fn template_and_inserts_agree() {
        let policy = Policy::new("default");
        let fields = || {
            Fields::admitted(
                &policy,
                Quota::per_second(10),
                9,
                Duration::from_millis(100),
            )
        };
        for format in [
            IETF,
            BOTH,
            Format {
                ietf: false,
                legacy: true,
            },
        ] {
            let mut from_template = HeaderMap::new();
            fields().insert_into(&mut from_template, format);
            let mut inserted = HeaderMap::new();
            inserted.insert("x-first", HeaderValue::from_static("1"));
            fields().insert_into(&mut inserted, format);
            let pairs = |map: &HeaderMap, skip: usize| -> Vec<(String, String)> {
                map.iter()
                    .skip(skip)
                    .map(|(n, v)| (n.to_string(), v.to_str().unwrap().to_owned()))
                    .collect()
            };
            assert_eq!(pairs(&from_template, 0), pairs(&inserted, 1), "{format:?}");
            assert_eq!(
                from_template.len(),
                2 * usize::from(format.ietf) + 3 * usize::from(format.legacy)
            );
        }
        // The template is reused, not filled in.
        let mut again = HeaderMap::new();
        Fields::admitted(&policy, Quota::per_second(10), 3, Duration::from_secs(2))
            .insert_into(&mut again, IETF);
        assert_eq!(again[RATELIMIT], "\"default\";r=3;t=2");
    }

    /// Policy items are static bytes, shared by every policy that renders the same item:
    /// their clones touch no reference count.
    #[test]
    fn policy_items_are_static() {
        let quota = Quota::per_second(10).allow_burst(30);
        let (a, b) = (Policy::new("static-test"), Policy::new("static-test"));
        let (x, y) = (a.item(quota).0, b.item(quota).0);
        assert_eq!(x, "\"static-test\";q=30;w=3");
        // Two policies, each rendering its own item: one set of bytes, the interned one.
        assert_eq!(x.as_bytes().as_ptr(), y.as_bytes().as_ptr());
        assert_eq!(a.item(quota).0.as_bytes().as_ptr(), x.as_bytes().as_ptr());
        // Another item is other bytes.
        let other = a.item(Quota::per_second(8)).0;
        assert_ne!(other.as_bytes().as_ptr(), x.as_bytes().as_ptr());
    }

    const IETF: Format = Format {
        ietf: true,
        legacy: false,
    };
    const BOTH: Format = Format {
        ietf: true,
        legacy: true,
    };
}
