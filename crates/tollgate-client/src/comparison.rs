//! How this crate compares with the tools people reach for to call or crawl politely:
//! [reqwest-retry](https://docs.rs/reqwest-retry), [reqwest-ratelimit](https://docs.rs/reqwest-ratelimit),
//! tower's [`retry`](https://docs.rs/tower/latest/tower/retry/) (with its
//! [`TpsBudget`](https://docs.rs/tower/latest/tower/retry/budget/struct.TpsBudget.html)) and
//! Scrapy's [AutoThrottle](https://docs.scrapy.org/en/latest/topics/autothrottle.html).
//!
//! What each peer does was read from its documentation and source (reqwest-retry 0.9: the
//! `default_on_request_success` and `default_on_request_failure` docs and the middleware's
//! source; reqwest-ratelimit 0.5's source, one short file; tower 0.5's `retry` and
//! `TpsBudget` docs; Scrapy's `scrapy/extensions/throttle.py` and its AutoThrottle page). A
//! "no" means the tool does not do it itself; most can be given it by code of your own
//! (a `RetryableStrategy`, a `RateLimiter`, a tower `Policy`, a Scrapy middleware).
//!
//! | signal or feature | tollgate-client | reqwest-retry | reqwest-ratelimit | tower `retry` | Scrapy AutoThrottle |
//! | --- | --- | --- | --- | --- | --- |
//! | pacing per host | yes: a rate per host key, FIFO waits on tollgate's timer | no | no: one `acquire_permit()` before every request, which is not shown the request, so one limit for all hosts unless you wrap a client per host | no (retries only) | yes: a delay per download slot (a domain, by default) |
//! | rate learned from the answers | yes: a fast climb, then a bisection between the slowest throttled and the fastest confirmed rate (design record §10) | no | no: your limiter's fixed rate | no | yes, from latency: the delay moves toward `latency / AUTOTHROTTLE_TARGET_CONCURRENCY`, bounded by `DOWNLOAD_DELAY` and `AUTOTHROTTLE_MAX_DELAY` |
//! | 429 and 503 | slow the host (multiplicative decrease, bisection after) and are retried | retried (with 5xx and 408) | no | as your `Policy` says | a non-200 answer can raise the delay but never lower it; no other use of the status |
//! | a 403 that refuses for rate (GitHub) | a throttle, held until its reset | no (a 4xx other than 408 and 429 is not retried) | no | as your `Policy` says | no |
//! | `Retry-After` | holds the host (every request to it, not only the retry) for as long as it says, seconds or an HTTP-date read on the server's `Date`; a cap is opt-in | no: the wait is the `RetryPolicy`'s (the crate `reessaie` exists to add it) | no | no: tower knows no HTTP | no |
//! | `RateLimit-Policy`, `X-RateLimit-Limit;w=` | paced to exactly, trusted for its window (or [`AdaptiveConfig::announcement_ttl`](crate::AdaptiveConfig::announcement_ttl)), then back to learning; a 429 under it lowers the rate below it | no | no | no | no |
//! | remaining count and reset (`RateLimit: r;t`, `X-RateLimit-Remaining`/`-Reset`) | `r = 0` holds the host until the reset, on any status; `r > 0` paces at `r / t` until the reset when slower | no | no | no | no |
//! | quota units (`qu`) | requests paced; content bytes charged per request; other units ignored and reported ([`HostSnapshot::ignored_unit`](crate::HostSnapshot::ignored_unit)) | no | no | no | no |
//! | which errors are retried | a refused, reset or timed-out connection; not DNS, TLS or an invalid URI; your hook for the rest | network errors (its `default_on_request_failure`); your `RetryableStrategy` for the rest | none | as your `Policy` says | none (AutoThrottle only paces) |
//! | which methods are retried | GET, HEAD, OPTIONS; PUT, DELETE and a POST with an `Idempotency-Key` on opt-in | any request that can be cloned (no method check in its middleware) | none | as your `Policy` says | none |
//! | retry budget | per host: 20 % of first attempts over 10 s plus 1 a second, by default ([`RetryBudget`](crate::RetryBudget)) | no: a number of retries per request | none | `TpsBudget`: a share of deposits plus a minimum per second over a ttl, one budget for whatever shares it | none |
//! | plain 5xx slow the host | yes: a run of 3 lowers the rate as a 429 does | no | no | no | only through latency |
//! | concurrency per host | an [`InFlight`](tollgate::InFlight) permit per host | no | no | no | its target concurrency (an average), and Scrapy's `CONCURRENT_REQUESTS_PER_DOMAIN` |
//! | robots.txt `Crawl-delay` | opt-in: [`PoliteLayer::crawl_delay`](crate::PoliteLayer::crawl_delay) seeds the host's ceiling | no | no | no | no (AutoThrottle reads no robots.txt) |
//! | a wait that is too long | fails at once with the instant the host opens ([`PoliteLayer::max_wait`](crate::PoliteLayer::max_wait)) | no | no | no | no |
//!
//! Where the peers are ahead: reqwest-retry and tower `retry` plug into stacks this crate
//! does not (reqwest-middleware; any tower service, not only HTTP); AutoThrottle adapts to
//! a server that slows down without refusing, which this crate sees only when the server
//! answers 429, 503 or 5xx; Scrapy is a whole crawler (scheduling, parsing, its own retry
//! middleware), where this crate is a layer.
