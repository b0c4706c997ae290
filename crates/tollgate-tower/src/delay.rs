//! Delay mode's wait: the layer's own limit is waited for (bounded), the stacked limits,
//! checked before, are given back if the wait fails or is dropped, and the fields are read
//! back after it. A refusal's response is made here, by the layer's `RefusalResponse`.

use std::future::{Future, poll_fn};
use std::pin::pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use http::{HeaderValue, Response};
use tollgate::Quota;
use tracing::Instrument;

use crate::config::Config;
use crate::counts::Outcome;
use crate::decide::refused_outcome;
use crate::extract::KeyExtractor;
use crate::fields::Fields;
use crate::future::{BoxWait, WaitOutcome};
use crate::respond::{RefusalResponse, answer};
use crate::stack::Undo;

/// Waits for `key`'s turn, no longer than `max`; the fields describe the key after it. A
/// refusal is answered with `respond` (as gRPC if `grpc`). The stacked limits admitted the
/// request with `extra_fields`, and are given back with `undos` if the wait fails.
pub(crate) fn delayed<E, R, B>(
    config: Arc<Config<E>>,
    respond: Arc<R>,
    key: E::Key,
    (quota, cost): (Option<Quota>, u32),
    max: Duration,
    (extra_fields, undos): (Option<Fields>, Vec<Undo>),
    grpc: Option<HeaderValue>,
) -> BoxWait<Response<B>>
where
    E: KeyExtractor,
    R: RefusalResponse<B>,
    B: Default + 'static,
{
    // If the wait fails, or its future is dropped (the client hung up), the stacked limits
    // get their cells back.
    let undos = UndoOnDrop(undos);
    // Dropped before it is over (even before its first poll): counted as abandoned.
    let abandoned = AbandonedOnDrop(Some(Arc::clone(&config)));
    // The wait's span: a subscriber sees each queued request's wait, with its policy and
    // bound, and the events inside it (a refusal after waiting). Disabled, and nearly free,
    // when no subscriber wants debug spans.
    let span = tracing::debug_span!(
        target: "tollgate_tower",
        "rate_limit_wait",
        policy = %config.policy_raw,
        cost,
        max_ms = u64::try_from(max.as_millis()).unwrap_or(u64::MAX),
    );
    Box::pin(
        async move {
            let limiter = &config.limiter;
            // On the limiter's clock, as the wait itself: for the delay histogram.
            #[cfg(feature = "metrics")]
            let started = limiter.now();
            // Whether the request had to wait: its wait was pending at least once.
            let mut pended = false;
            let waited = match quota {
                Some(q) => {
                    let mut wait = pin!(limiter.until_n_ready_with(&key, cost, q).within(max));
                    poll_fn(|cx| note_pending(wait.as_mut().poll(cx), &mut pended)).await
                }
                None => {
                    let mut wait = pin!(limiter.until_n_ready(&key, cost).within(max));
                    poll_fn(|cx| note_pending(wait.as_mut().poll(cx), &mut pended)).await
                }
            };
            abandoned.disarm();
            if let Err(error) = waited {
                drop(undos);
                let refusal = config.refusal(quota, cost, error);
                config.count_refusal(refused_outcome(refusal.reason()), &refusal);
                config.log_refusal(&refusal, false);
                return Err(answer(refusal, grpc, &*respond));
            }
            undos.disarm();
            if pended {
                config.counters.count(Outcome::Delayed);
                #[cfg(feature = "metrics")]
                config
                    .counters
                    .instruments
                    .waited(limiter.now().saturating_duration_since(started));
            } else {
                config.counters.count(Outcome::Admitted);
            }
            fields_after(&config, &key, quota, extra_fields)
        }
        .instrument(span),
    )
}

/// The fields after a wait: the layer's own (read back with a peek), then the stacked
/// limits' `extra_fields`.
fn fields_after<E: KeyExtractor, T>(
    config: &Config<E>,
    key: &E::Key,
    quota: Option<Quota>,
    extra_fields: Option<Fields>,
) -> WaitOutcome<T> {
    let limiter = &config.limiter;
    if !config.format.any() {
        return Ok(None);
    }
    // The wait returns no `Admitted`: read the key's state back with a peek, which
    // answers as a check would, i.e. one cell further on than the state is.
    let after = match quota {
        Some(q) => limiter.peek_with(key, q),
        None => limiter.peek(key),
    };
    let quota = quota.unwrap_or_else(|| limiter.quota());
    let Some(mut fields) = Fields::after_wait(&config.policy, quota, after) else {
        return Ok(extra_fields);
    };
    if let Some(extra) = extra_fields {
        fields.append(extra);
    }
    Ok(Some(fields))
}

fn note_pending<T>(poll: Poll<T>, pended: &mut bool) -> Poll<T> {
    *pended |= poll.is_pending();
    poll
}

/// Counts its request as abandoned when dropped, unless disarmed.
struct AbandonedOnDrop<E: KeyExtractor>(Option<Arc<Config<E>>>);

impl<E: KeyExtractor> AbandonedOnDrop<E> {
    fn disarm(mut self) {
        self.0 = None;
    }
}

impl<E: KeyExtractor> Drop for AbandonedOnDrop<E> {
    fn drop(&mut self) {
        if let Some(config) = &self.0 {
            config.counters.count(Outcome::Abandoned);
        }
    }
}

/// Runs its undos (latest first) when dropped, unless disarmed.
struct UndoOnDrop(Vec<Undo>);

impl UndoOnDrop {
    fn disarm(mut self) {
        self.0.clear();
    }
}

impl Drop for UndoOnDrop {
    fn drop(&mut self) {
        while let Some(undo) = self.0.pop() {
            undo();
        }
    }
}
