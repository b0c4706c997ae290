//! One [`tollgate`] limit across a fleet of processes, on Redis (or Valkey, KeyDB,
//! Dragonfly): exact GCRA in one Lua script, with a local fast path and faults as policy.
//!
//! * **Exact GCRA on the server.** One Lua script, run by `EVALSHA` and loaded again when
//!   the server answers `NOSCRIPT` (after a restart or `SCRIPT FLUSH`); integer microsecond arithmetic, exact below 2^53 (the argument is in
//!   `src/script.rs`); the server's `TIME` as the clock, so the nodes' clocks never matter;
//!   each key's expiry set to its reset time rounded up to the ms (`SET … PXAT`), so Redis
//!   holds only live keys;
//!   a quota per call. Semantics are the core's: over any window `W`, at most
//!   `b + floor(W / T)` cells per key, fleet-wide (with `T` rounded up to whole µs,
//!   [`interval_micros`]).
//! * **A local fast path.** When Redis refuses a key (or admits its last cell), the node
//!   remembers the key's TAT on the server's clock and refuses later checks locally, without
//!   a round trip, while a tight upper bound on the server's clock (the smallest seen over
//!   all replies, aged for drift: `src/offset.rs`) says Redis would refuse too: an abusive
//!   client costs about one round trip per interval, not one per request. The cache is
//!   bounded. On a Redis Cluster the bound is one for all masters, so masters whose clocks
//!   are `d` apart can make a local refusal last up to `d` longer than its master's own
//!   (`src/cluster.rs`, "What the cluster changes").
//! * **Leases for hot keys** (opt-in, [`FleetBuilder::lease`]). A check that finds no leased
//!   cells takes up to `k` cells that are available now in its one round trip and spends
//!   the rest locally until `max_hold` (`L`) after it sent the request: a key admitted at a
//!   high rate costs about one round trip per `k` checks. The bound becomes, per key and
//!   fleet-wide, `b + floor((W + L) / T)` over any window `W` (a cell is admitted by the
//!   server at its lease's instant and spent within `L` of it); it is also at most
//!   `b + floor(W / T)` plus the leased cells the nodes held unspent when the window
//!   opened. Unspent cells are given back at expiry by compare and restore when no one has
//!   written the key since, else lost (under-admission: at most `k` cells per lease, a lag
//!   of at most `k·T` until the key goes idle). The derivation is in `src/lease.rs`; both
//!   bounds are checked over every window of seeded adversarial schedules run by the script
//!   itself on a simulated server clock (`tests/lease_bound.rs`).
//! * **Waiting.** [`FleetLimiter::until_ready`] reserves the cells on the server in one
//!   round trip (the script moves the TAT and answers the wait), waits here on
//!   [`tollgate::timer`] (no runtime timer), and when dropped before its instant gives the
//!   cells back if the key still holds exactly what it wrote (compare and restore, in Lua).
//!   [`UntilReady::within`] bounds the wait: a longer one is refused and reserves nothing.
//! * **Several limits in one call.** [`FleetLimiter::check_all`] checks [`Gate`]s (per IP,
//!   per token under its tier, a global budget: each a key, cells and a quota) and admits
//!   all or none, in one script when the keys can share one (one server; one hash slot of a
//!   cluster), else slot by slot with the earlier slots' cells given back by compare and
//!   restore: never more than any single limit allows, and a refused call costs an earlier
//!   limit at most its cells, only when another call wrote that key within the round trip
//!   (`src/check_all.rs`).
//! * **Redis Cluster.** [`FleetBuilder::connect_cluster`] runs the same limiter on a
//!   cluster through the `redis` crate's async cluster client (`MOVED`/`ASK` followed,
//!   `NOSCRIPT` from any master answered by `EVAL` with the text there). Keys keep
//!   the single-server format, `prefix + key` ([`FleetLimiter::redis_key`]): every call touches one key, so each key's
//!   state is in one slot. A failover costs up to about one burst per key written in the dead
//!   master's last replication lag (`b + floor(lag / T)`), plus what the fault policy
//!   admits in the gap (`src/cluster.rs`).
//! * **Faults are a policy.** Each call has a timeout; when Redis fails or is late, a check
//!   fails open, fails closed, or is decided by a local `tollgate::Limiter` at `1/N` of the
//!   fleet's rate ([`FaultPolicy`]), and [`Stats`] counts it. By default `N` is the fleet's
//!   size as the nodes last counted it in Redis (each keeps a presence entry there,
//!   [`FaultPolicy::LocalShare`]), so an outage does not multiply the limit by the number
//!   of nodes; a node that never counted refuses. After 5 failed calls in a
//!   row (timeouts, connection errors, and refusals of the client's credentials) a circuit breaker stops sending calls for a cool-down (1 s), so the policy answers
//!   at once instead of after a timeout each; one probe then closes it again
//!   ([`FleetBuilder::circuit_breaker`]). The connection is a
//!   [`redis::aio::ConnectionManager`], which reconnects by itself when the connection
//!   drops; on a cluster, the `redis` crate's cluster connection, which reconnects to the
//!   nodes and refreshes its slot map on errors and `MOVED`. Neither notices a connection
//!   that stays open and answers nothing (a hung server, a proxy whose upstream hangs, a
//!   host partitioned away without a reset), nor credentials the server has since come to
//!   accept: after as many timeouts or refused credentials in a row as open the breaker,
//!   the limiter builds a new connection (on a cluster, with the slot map read
//!   afresh, so a promoted replica is found) and uses it once it connects; one at a time,
//!   at most one a second, and never while calls are answered in time
//!   ([`Stats::reconnects`], `src/conn.rs`).
//!
//! Runtimes: Tokio (the `redis` crate's `tokio-comp`, always on) and, with the `smol-comp`
//! feature, smol. The crate itself needs no runtime: the per-call timeout and waiting run on
//! [`tollgate::timer`], and a cancelled wait's refund runs on the current Tokio runtime if
//! there is one, else on a short-lived thread. The connection
//! ([`redis::aio::ConnectionManager`]) picks its runtime when the limiter is built: Tokio
//! inside a Tokio runtime, smol's reactor elsewhere (`smol-comp`), on one server as on a
//! cluster; outside a Tokio runtime without `smol-comp`, [`FleetBuilder::connect`] is an
//! error (of kind [`redis::ErrorKind::Client`]). A connection that replaces a hung one is
//! built on the same runtime. Requires Redis 6.2 or later (`SET … PXAT`); tested with Redis 7.0 (one
//! server, and a cluster of three masters with a replica each).

//! # Examples
//!
//! ```no_run
//! # #[tokio::main] async fn main() -> redis::RedisResult<()> {
//! use tollgate::Quota;
//! use tollgate_redis::{FaultPolicy, FleetLimiter};
//!
//! let client = redis::Client::open("redis://127.0.0.1/")?;
//! let limiter = FleetLimiter::builder(Quota::per_second(5))
//!     .fault_policy(FaultPolicy::Local { nodes: 4 }) // 4 nodes: 1/4 each without Redis
//!     .connect(client)
//!     .await?;
//! match limiter.check("203.0.113.9").await {
//!     Ok(ok) => assert!(ok.remaining() < ok.limit()), // 200 OK: a cell spent
//!     Err(e) => assert!(e.retry_after().is_some()),   // 429 Too Many Requests, Retry-After
//! }
//! # Ok(()) }
//! ```
//!
//! # Observability
//!
//! [`FleetLimiter::stats`] is a snapshot of the limiter's counters. The same figures, and a
//! few more, go to the facades Rust services already use.
//!
//! **Metrics** (the `metrics` feature, on by default; the [`metrics`](https://docs.rs/metrics)
//! facade 0.24, for whatever recorder the application installs: Prometheus, StatsD, ...). A
//! limiter registers its handles when it is built ([`FleetBuilder::connect`]): **install the
//! recorder before**, or the limiter's metrics go nowhere. Every series carries the label
//! `limiter`, the limiter's key prefix ([`FleetBuilder::prefix`], `tollgate:` by default);
//! no label ever holds a client's key, so the label sets are fixed. Each counter equals the
//! [`Stats`] field named beside it (summed over the limiters that share a prefix).
//!
//! | metric | kind | more labels | what it counts ([`Stats`] field) |
//! | --- | --- | --- | --- |
//! | `tollgate_redis_round_trips_total` | counter | | calls sent to Redis (`round_trips`) |
//! | `tollgate_redis_round_trip_seconds` | histogram | `operation` | each call's time from sent to answered, failed or timed out; `operation`: `check`, `peek`, `reserve`, `refund`, `lease`, `giveback`, `penalize`, `reset`, `check_all`, `check_all_refund` |
//! | `tollgate_redis_decisions_total` | counter | `outcome` | `admitted` by Redis (`admitted`), `limited` by Redis (`limited`), `local_refusal`: refused by the fast path without a round trip (`local_refusals`) |
//! | `tollgate_redis_faults_total` | counter | | calls that failed or timed out (`faults`) |
//! | `tollgate_redis_timeouts_total` | counter | | of those, timeouts (`timeouts`) |
//! | `tollgate_redis_fault_answers_total` | counter | `policy` | checks the fault policy answered: `fail_open` (`failed_open`), `fail_closed` (`failed_closed`; also a [`FaultPolicy::LocalShare`] node that never counted the fleet), `local` (`fell_back`) |
//! | `tollgate_redis_fault_policy_active` | gauge | | ranges of slots where a call failed and none has been answered since: the fault policy answers for their keys (one server: 0 or 1; a cluster: per 1,024 slots) |
//! | `tollgate_redis_circuit_open` | gauge | | circuit breakers open (or probing): one server has one, a cluster one per 1,024 slots |
//! | `tollgate_redis_circuit_opened_total` | counter | | times the breaker opened (`circuit_opened`) |
//! | `tollgate_redis_short_circuited_total` | counter | | calls not sent, the breaker open (`short_circuited`) |
//! | `tollgate_redis_reservations_total` | counter | `outcome` | waits: `reserved` (`reserved`), `refunded` (`refunded`), `refund_declined` (`refunds_declined`) |
//! | `tollgate_redis_lease_cells_total` | counter | `kind` | leased cells: `leased` (`leased`), `spent_locally`, the lease hits (`spent_locally`), `returned` (`returned`), `expired_unspent` (`expired_unspent`) |
//! | `tollgate_redis_script_reloads_total` | counter | | `NOSCRIPT` answers, the script loaded again (`script_reloads`) |
//! | `tollgate_redis_reconnects_total` | counter | | new connections started because calls timed out in a row on one that stayed open (`reconnects`) |
//!
//! Round trips per admission follow from the counters: `round_trips_total` over
//! `decisions_total{outcome="admitted"}` plus `lease_cells_total{kind="spent_locally"}`
//! (the fleet example prints it). With the feature off nothing is registered or timed; with
//! it on a check pays one atomic add per counter it moves and, for a round trip, a clock
//! read and a histogram record (BENCHMARKS.md has the figures).
//!
//! **Tracing** (the [`tracing`](https://docs.rs/tracing) facade, always on; every event has
//! the field `limiter`, the key prefix, and the target `tollgate_redis::observe`; the
//! transitions, the breaker's events and a reconnection's also `first_slot` and `last_slot`, the range of
//! slots they are about: 0 and 16383 on one server, a range of 1,024 on a cluster, where a
//! dead master's ranges fail over while the others answer):
//!
//! | span or event | level | fields | when |
//! | --- | --- | --- | --- |
//! | span `tollgate_redis.call` | debug | `operation` | around each call to Redis (not while the breaker is open) |
//! | span `tollgate_redis.wait` | debug | `wait_us` | around the local wait for reserved cells ([`UntilReady`]) |
//! | "a call to Redis failed; the fault policy answers until Redis is back" | warn | `error` | once per outage of a range: the first failed call after an answered one |
//! | "Redis answers again; the fault policy hands back" | info | `failed_calls`, `outage_ms` | once per outage of a range: the first answered call after a failed one; `failed_calls` counts the limiter's failed and short-circuited calls over the outage (on a cluster, of every range) |
//! | "... the circuit breaker is open ..." | warn | `failures`, `cool_down_ms` | the breaker opens from closed |
//! | "the breaker's probe failed; it stays open" | debug | `cool_down_ms` | a probe after a cool-down failed |
//! | "the circuit breaker closed" | debug | | a probe was answered |
//! | "Redis did not know the script (NOSCRIPT); loading it again" | debug | | a script reload |
//! | "calls to Redis time out in a row on a connection that stays open; building a new connection ..." | warn | | calls timed out in a row (as many as open the breaker) and a new connection is started: at most one a second |
//! | "refused (sampled: ...)" | debug | `wait_ms`, `unlogged` | a refusal by Redis, the fast path or [`FaultPolicy::FailClosed`], at most one event a second per limiter; `unlogged` counts the refusals since the last event (the key is never logged); costs nothing unless debug is enabled for `tollgate_redis` |
//! | "the server's maxmemory-policy is ... which can evict the limiter's keys ..." | warn | `policy` | once at connect, if the server may evict keys ([`MemoryPolicy`]) |
//!
//! # Limits
//!
//! * A call that times out may still run on the server: its cell is spent there while the
//!   policy decided here.
//! * The local fallback's admissions are not written to Redis when it comes back.
//! * [`FleetLimiter::reset`] clears this node's fast path; other nodes' fast paths may refuse
//!   the key until the bounds they cached pass. The same holds for a refunded reservation
//!   (a cancelled [`UntilReady`]): the node that refunds forgets its bound, the others may
//!   refuse for at most the refunded cells' span. Leased cells given back move the TAT
//!   earlier too, by at most `k·T`. Those are the limiter's own ways. **The server can
//!   forget a key too**, and then the fleet admits it afresh (up to a burst over the limit,
//!   per forgotten key) while the nodes' fast paths may still refuse it until their cached
//!   bounds pass: eviction under `maxmemory` (the keys carry TTLs, so `volatile-*` policies
//!   take them as well as `allkeys-*`; [`FleetLimiter::memory_policy`], and a warning at
//!   connect), the promotion of an asynchronous replica that had not yet received recent
//!   writes (a failover costs up to about one burst per key written in its replication
//!   lag), and `DEL`/`FLUSHDB` by anyone else. Run the limiter on a Redis of its own, or
//!   one with `maxmemory-policy noeviction`. Otherwise a local refusal is always one Redis
//!   would make.
//! * With leases, [`FleetLimiter::reset`] and [`FleetLimiter::penalize`] drop this node's
//!   lease of the key (its cells are lost); other nodes keep spending theirs until they
//!   expire, so a penalty reaches a leasing node at most `max_hold` late, and right after a
//!   reset the key may admit its burst plus the cells other nodes hold.
//! * The fast path assumes the server's clock does not step forward by less than a round
//!   trip (larger steps are detected at the next reply; drift up to 1,000 ppm is absorbed).
//! * A wait dropped while its reservation call is in flight cannot give its cells back.
//! * No FIFO order among waiters on different nodes: a reservation is ordered by when it
//!   reaches the server.
//! * On a cluster the circuit breaker is one per range of 1,024 hash slots, not one per
//!   master (the cluster client does not say which master a call went to): a dead master
//!   opens the breakers of its own ranges, and of a range it shares with a live master at
//!   the boundary of their slots, which then sends that live master's keys in the range to
//!   the fault policy for the cool-down too.

#![forbid(unsafe_code)]

// The files, in layers; each imports only from layers below it.
//
// * Leaves. Values: `admitted` (Admitted, Source), `fault` (FaultPolicy, Unavailable, the
//   fallback's share), `stats` (Stats and its counters). Mechanisms: `script` (the Lua
//   script and its reply), `offset` (the bound on the server's clock), `breaker`, `rt` (a
//   timeout and a background task without a runtime), `sharded` (the bounded sharded map),
//   `conn` (the connection: one server's, or a cluster's, and its replacement when it hangs,
//   built in the background with `rt`).
// * On the leaves: `cache` (the fast path) and `lease` (leased cells), both on `sharded`;
//   `server` (one call to Redis: breaker, timeout, faults); `presence` (the fleet's size,
//   counted in Redis); `memory` (MemoryPolicy and the question that finds it).
// * Beside `stats`: `observe` (the counters' metrics, built there, the latency, the tracing
//   spans and events: every name an operator sees, in one file; it reads `fault`).
// * `engine`: one limiter's state and the decision that checks and waits share.
// * `wait` (UntilReady), then `limiter` (FleetLimiter, delegating to the engine), then
//   `builder` (FleetBuilder, which assembles an engine and returns a FleetLimiter).
// * On those: `cluster` (FleetBuilder::connect_cluster; where keys go on a cluster, and a
//   failover's cost) and `check_all` (FleetLimiter::check_all, Gate, Refused: several
//   limits in one script, or slot by slot).
mod admitted;
mod breaker;
mod builder;
mod cache;
mod check_all;
mod cluster;
mod conn;
mod engine;
mod fault;
mod lease;
mod limiter;
mod memory;
mod observe;
mod offset;
mod presence;
mod rt;
mod script;
mod server;
mod sharded;
mod stats;
mod wait;

pub use admitted::{Admitted, Source};
pub use builder::FleetBuilder;
pub use check_all::Gate;
pub use fault::{FaultPolicy, Unavailable};
pub use limiter::FleetLimiter;
pub use memory::MemoryPolicy;
pub use script::interval_micros;
pub use stats::Stats;
/// The refusal that stopped a [`FleetLimiter::check_all`]: the core's, as its `check_all`
/// answers (which gate, and its error).
pub use tollgate::Refused;
pub use wait::UntilReady;
