//! Stacked limits: further limiters, each with its own key source, checked after the
//! layer's own; a refusal by any of them gives back what the others admitted.

use http::request::Parts;
use tollgate::{Error, Limiter};

use crate::fields::{Fields, Policy};
use crate::near::NearLimit;
use crate::sampled::RefusalLog;
use crate::{KeyExtractor, NoKey};

/// Gives an admission back (with [`Limiter::undo`]).
pub(crate) type Undo = Box<dyn FnOnce() + Send>;

/// What one stacked limit said about a request.
pub(crate) enum Checked {
    /// The request has no key for this limit, and this is why.
    NoKey(NoKey),
    /// Admitted: the fields to add, how to give the admission back, and whether it left
    /// the key near this limit ([`NearLimit`]).
    Admitted(Fields, Undo, bool),
    /// Refused.
    Refused(Error),
}

/// A stacked limit with its key type erased.
pub(crate) trait StackedLimit: Send + Sync + 'static {
    /// Checks the request; `near` judges whether an admission left its key near the limit.
    fn check(&self, parts: &Parts, near: NearLimit) -> Checked;
    /// The policy's name and items, as the fields write them.
    fn policy(&self) -> &Policy;
    fn quota(&self) -> tollgate::Quota;
    /// The policy's name as given.
    fn raw_name(&self) -> &str;
    fn stats(&self) -> tollgate::Stats;
    /// The sampler of this policy's refusal events.
    fn refusals(&self) -> &RefusalLog;
}

pub(crate) struct Extra<E: KeyExtractor> {
    pub(crate) policy: Policy,
    pub(crate) raw_name: String,
    pub(crate) limiter: Limiter<E::Key>,
    pub(crate) extractor: E,
    pub(crate) refusals: RefusalLog,
}

impl<E: KeyExtractor> StackedLimit for Extra<E> {
    fn check(&self, parts: &Parts, near: NearLimit) -> Checked {
        let key = match self.extractor.try_extract(parts) {
            Ok(key) => key,
            Err(why) => return Checked::NoKey(why),
        };
        match self.limiter.check(&key) {
            Ok(admitted) => {
                let near = near.is_near(&admitted);
                let fields = Fields::admitted(
                    &self.policy,
                    self.limiter.quota(),
                    admitted.remaining(),
                    admitted.reset_after(),
                );
                let limiter = self.limiter.clone();
                let undo = Box::new(move || {
                    limiter.undo(&key, admitted);
                });
                Checked::Admitted(fields, undo, near)
            }
            Err(error) => Checked::Refused(error),
        }
    }

    fn policy(&self) -> &Policy {
        &self.policy
    }

    fn quota(&self) -> tollgate::Quota {
        self.limiter.quota()
    }

    fn raw_name(&self) -> &str {
        &self.raw_name
    }

    fn stats(&self) -> tollgate::Stats {
        self.limiter.stats()
    }

    fn refusals(&self) -> &RefusalLog {
        &self.refusals
    }
}
