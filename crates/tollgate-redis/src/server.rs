//! Redis as this node reaches it: the connection, the script, and how one call goes.
//!
//! Every call of the limit (the script's, and `reset`'s `DEL`) goes through
//! [`Server::call`]: the circuit breaker first (while it is open the call is not sent, and
//! the caller's fault policy answers at once: `breaker.rs`), then the per-call timeout on
//! tollgate's timer (`rt.rs`); it counts the round trip and, when Redis failed or was late,
//! the fault, and tells the breaker whether the server answered (an error reply is an
//! answer); a call that timed out, or was answered, is told to the connection too, which
//! replaces itself when calls time out in a row on it (`conn.rs`). What an operator sees of it (its span, its latency, the fault policy's and the
//! breaker's transitions) is `observe.rs`'s, one line each here. Every reply of the script also tightens the bound on the server's clock that
//! the fast path reads (`offset.rs`). What to do about a fault is not decided here: the
//! caller's fault policy does that.

use std::time::{Duration, Instant};

use redis::{RedisError, Script};
use tollgate::{Clock, MonotonicClock};
use tracing::Instrument;

use std::sync::Arc;

use crate::breaker::{Breaker, Change, Outcome, Pass};
use crate::conn::{Conn, Link};
use crate::fault::{Unavailable, refuses_credentials, unreachable};
use crate::observe::Route;
use crate::offset::ServerClock;
use crate::script::{GCRA_LUA, Reply};
use crate::stats::{Counters, bump};

/// The connection and what every call shares: the script, the timeout, the breaker.
pub(crate) struct Server {
    /// The connection, replaced when it hangs (`conn.rs`).
    pub(crate) link: Arc<Link>,
    script: Script,
    /// The per-call timeout.
    pub(crate) timeout: Duration,
    /// The breaker (none if turned off): one on one server; on a cluster one per range of
    /// slots (`conn.rs`), so that a dead master's calls do not open the live masters'.
    breakers: Vec<Breaker>,
    /// An upper bound on the server's clock, tightened by every reply of the script.
    pub(crate) clock: ServerClock,
    /// The breaker's time (every `MonotonicClock` has the one origin).
    local_clock: MonotonicClock,
}

impl Server {
    pub(crate) fn new(link: Arc<Link>, timeout: Duration, breaker: Option<Breaker>) -> Server {
        Server {
            script: Script::new(GCRA_LUA),
            timeout,
            breakers: match breaker {
                Some(b) if link.is_cluster() => {
                    (0..crate::conn::ROUTES).map(|_| b.fresh()).collect()
                }
                b => b.into_iter().collect(),
            },
            link,
            clock: ServerClock::new(),
            local_clock: MonotonicClock::new(),
        }
    }

    /// Runs the script on `key` with `args` as ARGV (the first is the operation), through
    /// [`call`](Self::call); every answer also tightens the bound on the server's clock.
    pub(crate) async fn invoke<const N: usize>(
        &self,
        c: &Counters,
        key: &[u8],
        args: [Arg; N],
    ) -> Result<Reply, Unavailable> {
        let sent = Instant::now();
        let op = args
            .iter()
            .find_map(|a| match *a {
                Arg::Op(name) => Some(name),
                Arg::Num(_) => None,
            })
            .unwrap_or("other");
        let call = |conn: Conn| {
            conn.eval(
                &self.script,
                GCRA_LUA,
                |cmd| {
                    cmd.arg(1).arg(key);
                    for a in &args {
                        match *a {
                            Arg::Op(op) => cmd.arg(op),
                            Arg::Num(x) => cmd.arg(x),
                        };
                    }
                },
                || c.observer.script_reload(c),
            )
        };
        let values: Vec<i64> = self.call(c, key, op, call).await?;
        let reply = Reply::from_values(&values);
        if let Some(r) = &reply {
            self.clock.observe(sent, Instant::now(), r.now_us);
        }
        reply.ok_or_else(|| {
            bump(&c.faults);
            Unavailable::Redis(RedisError::from((
                redis::ErrorKind::Parse,
                "unexpected reply from the tollgate script",
            )))
        })
    }

    /// Sends one call of the limit on `key` (`send` makes it on the connection it is given):
    /// not at all while the key's breaker is open, else within the per-call timeout; counts
    /// it, and its fault, and tells the breaker and the connection how it went.
    pub(crate) async fn call<T, F>(
        &self,
        c: &Counters,
        key: &[u8],
        op: &'static str,
        send: impl FnOnce(Conn) -> F,
    ) -> Result<T, Unavailable>
    where
        F: Future<Output = redis::RedisResult<T>>,
    {
        let now = || self.local_clock.now().as_nanos();
        // The breaker first: while it is open the call is not sent, and the caller's fault
        // policy answers at once (`breaker.rs`).
        let route = self.link.route(key);
        let pass = match self.breakers.get(route.index) {
            Some(breaker) => match breaker.pass(now()) {
                Pass::ShortCircuit => {
                    bump(&c.short_circuited);
                    return Err(Unavailable::CircuitOpen(breaker.remaining(now())));
                }
                pass => Some(BreakerPass {
                    breaker,
                    pass: Some(pass),
                }),
            },
            None => None,
        };
        // Taken past the breaker (a short-circuited call touches no connection), with its
        // generation: the outcome counts against that connection only (`conn.rs`).
        let (conn, generation) = self.link.get();
        let fut = send(conn);
        bump(&c.round_trips);
        let sent = c.observer.sent();
        let answer = crate::rt::timeout(self.timeout, fut)
            .instrument(c.observer.call_span(op))
            .await;
        c.observer.round_trip(op, sent);
        let result = match answer {
            Ok(Ok(v)) => Ok(v),
            // The connection's own timer fired first (its response timeout set below ours
            // through `connection_manager`): a timeout all the same, and said as one.
            Ok(Err(e)) if e.is_timeout() => {
                bump(&c.faults);
                bump(&c.timeouts);
                Err(Unavailable::Timeout(self.timeout))
            }
            Ok(Err(e)) => {
                bump(&c.faults);
                Err(Unavailable::Redis(e))
            }
            Err(_) => {
                bump(&c.faults);
                bump(&c.timeouts);
                Err(Unavailable::Timeout(self.timeout))
            }
        };
        c.observer.outcome(c, route, &result);
        // The connection hears how it went: calls that time out in a row on a range get it
        // replaced (`conn.rs`, "A connection that hangs"), as do refused credentials: the
        // `redis` crate's connection keeps the refusal of its first connect for good, and a
        // new one presents them afresh (a password since set on the server to match).
        match &result {
            Err(Unavailable::Timeout(_)) => self.timed_out(c, route, generation),
            Err(Unavailable::Redis(e)) if refuses_credentials(e) => {
                self.timed_out(c, route, generation);
            }
            Err(Unavailable::Redis(e)) if unreachable(e) => {}
            _ => self.link.answered(route, generation),
        }
        if let Some(mut guard) = pass {
            let outcome = match &result {
                Ok(_) => Outcome::Answered,
                // An error reply is an answer: the server is there (but not a refusal of
                // our credentials: `fault::unreachable`).
                Err(Unavailable::Redis(e)) if !unreachable(e) => Outcome::Answered,
                Err(_) => Outcome::Failed,
            };
            let pass = guard.pass.take().expect("recorded once");
            let breaker = guard.breaker;
            match breaker.record(&pass, outcome, now()) {
                Change::Opened => {
                    bump(&c.circuit_opened);
                    let (failures, left) = (breaker.failures(), breaker.remaining(now()));
                    c.observer
                        .circuit_opened(route, failures, left, pass == Pass::Probe);
                }
                Change::Closed => c.observer.circuit_closed(route),
                Change::None => {}
            }
        }
        result
    }
}

impl Server {
    /// A call on `route` timed out (or its credentials were refused): the link counts it,
    /// and may start replacing the connection (counted, and said once).
    fn timed_out(&self, c: &Counters, route: Route, generation: u64) {
        if self.link.timed_out(route, generation) {
            c.observer.reconnecting(c, route);
        }
    }
}

/// The breaker's pass for one call; a probe dropped before its outcome (the caller's
/// future dropped mid-call) is abandoned, so that the next caller probes.
struct BreakerPass<'a> {
    breaker: &'a Breaker,
    pass: Option<Pass>,
}

impl Drop for BreakerPass<'_> {
    fn drop(&mut self) {
        if let Some(pass) = &self.pass {
            self.breaker.abandon(pass);
        }
    }
}

/// One ARGV entry of the script: the operation's name, or a number.
#[derive(Clone, Copy)]
pub(crate) enum Arg {
    Op(&'static str),
    Num(u64),
}
