//! The decision made in `call`: key the request, let the allowlist through, check the
//! layer's own limit and the stacked ones (giving back what was admitted when one refuses),
//! and turn a refusal into its answer; then act on it, or hand delay mode its wait.

use http::header::RETRY_AFTER;
use http::request::Parts;
use http::{HeaderMap, HeaderValue, Request, Response};
use tollgate::{Admitted, Error, Quota};
use tower_service::Service;

use crate::config::MissingKey;
use crate::config::{Config, QuotaFor};
use crate::counts::Outcome;
use crate::dry_run::DryRunRefusal;
use crate::extract::{KeyExtractor, NoKey};
use crate::fields::{Fields, Policy};
use crate::future::ResponseFuture;
use crate::refusal::{Refusal, RefusalReason, grpc_content_type};
use crate::respond::{RefusalResponse, answer};
use crate::stack::{Checked, Undo};

/// How a request goes on, once keyed.
pub(crate) enum Decision<K> {
    /// Answer without calling the service.
    Respond(Refusal),
    /// Call the service, adding these fields; count it so.
    Call(Option<Fields>, Outcome),
    /// Delay mode: wait for `cost` cells of `key` under `quota`; the stacked limits
    /// admitted the request with these fields, and are given back with these undos if the
    /// wait fails.
    Wait(K, Option<Quota>, u32, Option<Fields>, Vec<Undo>),
}

/// What the stacked limits said of a request they all admitted.
pub(crate) struct Stacked {
    /// Their fields, if the layer writes any.
    fields: Option<Fields>,
    /// How to give each admission back.
    undos: Vec<Undo>,
    /// The stacked limits (their indexes) whose admissions left the key near the limit:
    /// counted once the request stands (an empty `Vec` does not allocate).
    near: Vec<usize>,
}

impl<E: KeyExtractor> Config<E> {
    fn quota(&self, parts: &Parts, key: &E::Key) -> Option<Quota> {
        match self.quota_for.as_ref()? {
            QuotaFor::Request(f) => Some(f(parts)),
            QuotaFor::Key(f) => Some(f(key)),
        }
    }

    /// The cells `parts` costs in this layer's own limit (1 without `cost_for`).
    pub(crate) fn cost(&self, parts: &Parts) -> u32 {
        self.cost_for.as_ref().map_or(1, |f| f(parts))
    }

    fn check(&self, key: &E::Key, quota: Option<Quota>, cost: u32) -> Result<Admitted, Error> {
        match quota {
            Some(q) => self.limiter.check_n_with(key, cost, q),
            None => self.limiter.check_n(key, cost),
        }
    }

    fn admitted_fields(&self, quota: Option<Quota>, admitted: &Admitted) -> Option<Fields> {
        self.format.any().then(|| {
            let quota = quota.unwrap_or_else(|| self.limiter.quota());
            Fields::admitted(
                &self.policy,
                quota,
                admitted.remaining(),
                admitted.reset_after(),
            )
        })
    }

    /// The refusal of a request for `cost` cells by this layer's own limit.
    pub(crate) fn refusal(&self, quota: Option<Quota>, cost: u32, error: Error) -> Refusal {
        let quota = quota.unwrap_or_else(|| self.limiter.quota());
        self.refusal_by(&self.policy, &self.policy_raw, quota, cost, error)
    }

    /// A refusal of `cost` cells by `policy` (named `name`) under `quota`.
    fn refusal_by(
        &self,
        policy: &Policy,
        name: &str,
        quota: Quota,
        cost: u32,
        error: Error,
    ) -> Refusal {
        let mut headers = HeaderMap::new();
        match error {
            Error::RateLimited { wait, .. } => {
                // `wait` is for all `cost` cells: the fields count what is left from it.
                let fields = Fields::refused_n(policy, quota, cost, wait);
                let retry = fields.retry_after();
                fields.insert_into(&mut headers, self.format);
                Refusal::new(RefusalReason::RateLimited, headers, Some(name), retry)
            }
            // More cells than the burst: never admissible, so no `Retry-After`.
            Error::InsufficientCapacity { .. } => {
                Refusal::new(RefusalReason::TooCostly, headers, Some(name), None)
            }
            // A full table that refuses new keys: the server is out of room, not the client
            // over its rate.
            _ => {
                headers.insert(RETRY_AFTER, HeaderValue::from_static("1"));
                Refusal::new(RefusalReason::Unavailable, headers, None, Some(1))
            }
        }
    }

    pub(crate) fn decide(&self, parts: &Parts, delay: bool) -> Decision<E::Key> {
        if self.skip.as_ref().is_some_and(|skip| skip(parts)) {
            return Decision::Call(None, Outcome::Skipped);
        }
        let key = match self.extractor.try_extract(parts) {
            Ok(key) => key,
            Err(why) => {
                self.count_why(why);
                return match self.missing_key {
                    // Not limited by this limit; the stacked ones still apply.
                    MissingKey::Allow => match self.check_extras(parts, true) {
                        Ok(stacked) => {
                            self.count_near_stacked(&stacked.near);
                            Decision::Call(stacked.fields, Outcome::MissingKeyAllowed)
                        }
                        Err(refusal) => Decision::Respond(refusal),
                    },
                    MissingKey::Reject => Decision::Respond(self.missing_key_refusal()),
                };
            }
        };
        if self.allow.as_ref().is_some_and(|allow| allow(&key)) {
            return Decision::Call(None, Outcome::Allowlisted);
        }
        let quota = self.quota(parts, &key);
        let cost = self.cost(parts);
        if delay {
            // The wait cannot be given back (it returns no `Admitted`), so the stacked
            // limits go first, and are given back if the wait fails.
            // Delay mode counts no near-limit admissions (see `Builder::near_limit`).
            return match self.check_extras(parts, false) {
                Ok(stacked) => Decision::Wait(key, quota, cost, stacked.fields, stacked.undos),
                Err(refusal) => Decision::Respond(refusal),
            };
        }
        // No fields to write and no stacked limit to give the admission back to: the
        // admission is needed only for the near-limit test, and the answer is built in place
        // (not moved out of locals: an `Option<Fields>` is 112 bytes, the admission 56).
        let lean = self.extras.is_empty() && !self.format.any();
        let admitted = match self.check(&key, quota, cost) {
            Ok(admitted) if lean => {
                self.count_near(&admitted);
                return Decision::Call(None, Outcome::Admitted);
            }
            Ok(admitted) => admitted,
            Err(error) => return Decision::Respond(self.refusal(quota, cost, error)),
        };
        let mut fields = self.admitted_fields(quota, &admitted);
        if self.extras.is_empty() {
            self.count_near(&admitted);
            return Decision::Call(fields, Outcome::Admitted);
        }
        match self.check_extras(parts, false) {
            Ok(stacked) => {
                if let (Some(fields), Some(extra)) = (&mut fields, stacked.fields) {
                    fields.append(extra);
                }
                self.count_near(&admitted);
                self.count_near_stacked(&stacked.near);
                Decision::Call(fields, Outcome::Admitted)
            }
            Err(refusal) => {
                self.limiter.undo(&key, admitted);
                Decision::Respond(refusal)
            }
        }
    }

    /// Counts an admission that stands (no stacked limit refused it) if it left its key
    /// near the limit.
    #[inline]
    fn count_near(&self, admitted: &Admitted) {
        if self.near.is_near(admitted) {
            self.counters.count(Outcome::NearLimit);
        }
    }

    /// Counts the stacked limits (their indexes in `extras`) whose admissions of a request
    /// that stands left their keys near the limit, each under its own policy.
    fn count_near_stacked(&self, near: &[usize]) {
        for &i in near {
            self.count_near_by(i);
        }
    }

    /// The answer to a request without a key under [`MissingKey::Reject`].
    fn missing_key_refusal(&self) -> Refusal {
        Refusal::new(RefusalReason::MissingKey, HeaderMap::new(), None, None)
    }

    /// Counts why a request has no key, where the reason is one [`Counts`] tells apart.
    ///
    /// [`Counts`]: crate::Counts
    fn count_why(&self, why: NoKey) {
        match why {
            NoKey::Unattributable => self.counters.count(Outcome::Unattributable),
            NoKey::NoPeerAddress => self.counters.count(Outcome::NoPeerAddress),
            NoKey::Absent => {}
        }
    }

    /// Checks the stacked limits in order. All admit (or do not apply): their fields and
    /// undos. One refuses: those before it are given back, and its refusal is the answer.
    ///
    /// A stacked limit whose key the request lacks does not apply; but one whose key source
    /// could not attribute the request, or had no peer address, follows the missing-key
    /// policy as the layer's own limit does (a per-client limit must not be escaped by
    /// garbage in a forwarding header, nor by a server that lost its peer addresses).
    /// `why_counted`: the request's reason for a missing key was counted already.
    // A refusal is no larger than what the stacked limits admit (128 bytes each): boxing it
    // would not shrink the `Result`, only add an allocation per refusal.
    #[allow(clippy::result_large_err)]
    fn check_extras(&self, parts: &Parts, mut why_counted: bool) -> Result<Stacked, Refusal> {
        let mut fields: Option<Fields> = None;
        let mut undos: Vec<Undo> = Vec::new();
        let mut near: Vec<usize> = Vec::new();
        for (i, extra) in self.extras.iter().enumerate() {
            match extra.check(parts, self.near) {
                Checked::NoKey(NoKey::Absent) => {}
                Checked::NoKey(why) => {
                    if !why_counted {
                        self.count_why(why);
                        why_counted = true;
                    }
                    if matches!(self.missing_key, MissingKey::Reject) {
                        for undo in undos.into_iter().rev() {
                            undo();
                        }
                        return Err(self.missing_key_refusal());
                    }
                }
                Checked::Admitted(f, undo, is_near) => {
                    undos.push(undo);
                    if is_near {
                        near.push(i);
                    }
                    if self.format.any() {
                        match &mut fields {
                            Some(fields) => fields.append(f),
                            None => fields = Some(f),
                        }
                    }
                }
                Checked::Refused(error) => {
                    for undo in undos.into_iter().rev() {
                        undo();
                    }
                    let (policy, name) = (extra.policy(), extra.raw_name());
                    // A stacked limit takes one cell a request.
                    return Err(self.refusal_by(policy, name, extra.quota(), 1, error));
                }
            }
        }
        Ok(Stacked {
            fields,
            undos,
            near,
        })
    }

    /// Acts on a decision that needs no wait: answers (with `respond`), or calls `inner`.
    /// In dry-run mode a refusal becomes a marked call.
    // Out of line: `call` handles the common `Call` itself, so that only the rarer
    // decisions pay for moving the request's parts here.
    #[inline(never)]
    pub(crate) fn run<S, ReqBody, ResBody, R>(
        &self,
        inner: &mut S,
        mut parts: Parts,
        body: ReqBody,
        decision: Decision<E::Key>,
        dry_run: bool,
        respond: &R,
    ) -> ResponseFuture<S, ReqBody>
    where
        S: Service<Request<ReqBody>, Response = Response<ResBody>>,
        R: RefusalResponse<ResBody>,
        ResBody: Default,
    {
        match decision {
            Decision::Respond(refusal) if dry_run => {
                self.count_refusal(Outcome::DryRunRefused, &refusal);
                self.log_refusal(&refusal, true);
                let (status, headers) = refusal.into_parts();
                parts.extensions.insert(DryRunRefusal::new(status, headers));
                let fut = inner.call(Request::from_parts(parts, body));
                ResponseFuture::forward(fut)
            }
            Decision::Respond(refusal) => {
                self.count_refusal(refused_outcome(refusal.reason()), &refusal);
                self.log_refusal(&refusal, false);
                // Made here, where `respond` is at hand, so that the response future needs
                // no handle on it (nor a reference count bumped per refusal to hold one).
                ResponseFuture::respond(answer(refusal, grpc_content_type(&parts), respond))
            }
            Decision::Call(fields, outcome) => {
                self.counters.count(outcome);
                let fut = inner.call(Request::from_parts(parts, body));
                ResponseFuture::call(fut, fields, self.format)
            }
            Decision::Wait(..) => unreachable!("only delay mode waits"),
        }
    }
}

/// How a refusal is counted.
pub(crate) fn refused_outcome(reason: RefusalReason) -> Outcome {
    match reason {
        RefusalReason::RateLimited => Outcome::Rejected,
        RefusalReason::MissingKey => Outcome::MissingKeyRejected,
        RefusalReason::Unavailable => Outcome::Unavailable,
        RefusalReason::TooCostly => Outcome::Rejected,
        // `RefusalReason` is tollgate-http's, non-exhaustive across the crate boundary.
        _ => Outcome::Rejected,
    }
}
