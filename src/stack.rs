//! Stacked limits: [`check_all`] checks several limiters at once, and a refusal by any of
//! them costs the others nothing.
//!
//! A request often answers to several limits: per client IP, per API token, and a global
//! budget. Checked one after another, a refusal by a later limit has already spent cells of
//! the earlier ones (every peer limiter gets this wrong), so a client refused by the global
//! budget also loses its own allowance. [`check_all`] checks in order and, on the first
//! refusal, undoes the admissions before it ([`Limiter::undo`]): exact unless another
//! request wrote the same key in between, and never giving back more than was taken.

use std::fmt;

use crate::direct::DirectLimiter;
use crate::engine;
use crate::error::Error;
use crate::gcra::Gcra;
use crate::limiter::{KeyState, Limiter};
use crate::outcome::{Admitted, Written};
use crate::quota::Quota;

/// One check of a stack: a limiter, the key (for a keyed limiter), the cells asked for and
/// the quota, from [`Limiter::gate`] or [`DirectLimiter::gate`]. It holds the key's hash,
/// not the key.
///
/// # Examples
///
/// ```
/// use tollgate::{Limiter, Quota};
///
/// let per_token = Limiter::keyed(Quota::per_second(10));
/// let gate = per_token.gate("token-1").n(2).quota(Quota::per_second(100));
/// let [ok] = tollgate::check_all([gate]).unwrap();
/// assert_eq!(ok.remaining(), 98);
/// ```
#[must_use = "a gate does nothing until it is checked with check_all"]
pub struct Gate<'a> {
    limiter: &'a dyn Stackable,
    route: u64,
    fp: u64,
    n: u32,
    quota: Option<Gcra>,
}

impl Gate<'_> {
    /// Asks for `n` cells instead of one.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Limiter, Quota};
    ///
    /// let per_user = Limiter::keyed(Quota::per_second(10));
    /// let [ok] = tollgate::check_all([per_user.gate("u").n(4)]).unwrap();
    /// assert_eq!(ok.remaining(), 6);
    /// let refused = tollgate::check_all([per_user.gate("u").n(11)]).unwrap_err();
    /// assert!(refused.error.is_insufficient_capacity()); // more than the burst, ever
    /// ```
    pub fn n(mut self, n: u32) -> Self {
        self.n = n;
        self
    }

    /// Checks under `quota` instead of the limiter's own (see
    /// [`Limiter::check_with`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Limiter, Quota};
    ///
    /// // One limiter for every tier: a paid key checked under its own quota.
    /// let per_key = Limiter::keyed(Quota::per_second(1));
    /// let paid = Quota::per_second(100);
    /// let [ok] = tollgate::check_all([per_key.gate("paid-7").quota(paid)]).unwrap();
    /// assert_eq!((ok.limit(), ok.remaining()), (100, 99));
    /// ```
    pub fn quota(mut self, quota: Quota) -> Self {
        self.quota = Some(Gcra::new(quota));
        self
    }

    fn check(&self) -> Result<Admitted, Error> {
        self.limiter
            .check_hashed(self.route, self.fp, self.n, self.quota)
    }

    fn undo(&self, admitted: &Admitted) -> bool {
        self.limiter
            .undo_hashed(self.route, self.fp, admitted.written())
    }
}

impl fmt::Debug for Gate<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Gate")
            .field("n", &self.n)
            .field("quota", &self.quota)
            .finish_non_exhaustive()
    }
}

/// The refusal that stopped a [`check_all`]: which gate, and why.
///
/// # Examples
///
/// ```
/// use tollgate::{DirectLimiter, Limiter, Quota};
///
/// let per_ip = Limiter::keyed(Quota::per_second(5));
/// let global = DirectLimiter::new(Quota::per_second(1));
/// assert!(tollgate::check_all([per_ip.gate("1.2.3.4"), global.gate()]).is_ok());
/// let refused = tollgate::check_all([per_ip.gate("5.6.7.8"), global.gate()]).unwrap_err();
/// assert_eq!(refused.index, 1); // the global budget refused
/// assert!(refused.error.is_rate_limited());
/// assert_eq!(per_ip.check("5.6.7.8").unwrap().remaining(), 4); // and cost the client nothing
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Refused {
    /// The position of the refusing gate in the array.
    pub index: usize,
    /// Its error, as its own check would have returned it.
    pub error: Error,
}

impl Refused {
    /// A refusal by gate `index`, for the integrations that check several limits
    /// elsewhere (tollgate-redis's fleet `check_all` answers with the core's `Refused`).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Error, Refused};
    ///
    /// let refused = Refused::new(1, Error::InsufficientCapacity { requested: 11, burst: 10 });
    /// assert_eq!(refused.index, 1);
    /// assert!(refused.error.is_insufficient_capacity());
    /// ```
    // Not part of the stable API: public for tollgate-redis only, so hidden from the docs.
    #[doc(hidden)]
    pub const fn new(index: usize, error: Error) -> Refused {
        Refused { index, error }
    }
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "limit {} refused: {}", self.index, self.error)
    }
}

impl std::error::Error for Refused {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

/// Checks every gate in order and admits all of them, or none: on the first refusal, the
/// admissions before it are undone (latest first) and the refusal is returned. Each undo is
/// exact unless another request wrote that key since this one's check, in which case it
/// writes nothing and those cells count as used (see [`Limiter::undo`]); it never gives back
/// more than was taken. Statistics count each check as it happened.
///
/// Put the limit most likely to refuse first: nothing before it is touched.
///
/// # Errors
///
/// [`Refused`]: the index of the first gate that refused and its [`Error`].
///
/// # Examples
///
/// ```
/// use tollgate::{DirectLimiter, Limiter, Quota};
///
/// let per_ip = Limiter::keyed(Quota::per_second(5));
/// let per_token = Limiter::keyed(Quota::per_second(100));
/// let global = DirectLimiter::new(Quota::per_second(1));
/// let stack = |ip: &str, token: &str| {
///     tollgate::check_all([per_ip.gate(ip), per_token.gate(token), global.gate()])
/// };
/// assert!(stack("10.0.0.1", "t1").is_ok());
/// let refused = stack("10.0.0.1", "t1").unwrap_err();
/// assert_eq!(refused.index, 2); // the global budget is spent...
/// assert_eq!(per_ip.check("10.0.0.1").unwrap().remaining(), 3); // ...and cost the IP nothing
/// ```
pub fn check_all<const N: usize>(gates: [Gate<'_>; N]) -> Result<[Admitted; N], Refused> {
    let mut admitted: [Option<Admitted>; N] = [None; N];
    for (index, gate) in gates.iter().enumerate() {
        match gate.check() {
            Ok(ok) => admitted[index] = Some(ok),
            Err(error) => {
                for (gate, ok) in gates[..index].iter().zip(&admitted).rev() {
                    let _ = gate.undo(ok.as_ref().expect("admitted before the refusal"));
                }
                return Err(Refused { index, error });
            }
        }
    }
    Ok(admitted.map(|ok| ok.expect("every gate admitted")))
}

/// A limiter a [`Gate`] can check with a key's hashes, whatever its key type.
trait Stackable {
    fn check_hashed(
        &self,
        route: u64,
        fp: u64,
        n: u32,
        quota: Option<Gcra>,
    ) -> Result<Admitted, Error>;
    fn undo_hashed(&self, route: u64, fp: u64, written: Written) -> bool;
}

impl<K: ?Sized, S: std::hash::BuildHasher + 'static> Stackable for Limiter<K, S> {
    fn check_hashed(
        &self,
        route: u64,
        fp: u64,
        n: u32,
        quota: Option<Gcra>,
    ) -> Result<Admitted, Error> {
        engine::check_now(&self.state_hashed(route, fp), n, quota, true)
    }

    fn undo_hashed(&self, route: u64, fp: u64, written: Written) -> bool {
        engine::undo(&self.state_hashed(route, fp), written)
    }
}

impl Stackable for DirectLimiter {
    fn check_hashed(
        &self,
        _route: u64,
        _fp: u64,
        n: u32,
        quota: Option<Gcra>,
    ) -> Result<Admitted, Error> {
        engine::check_now(&self.state(), n, quota, true)
    }

    fn undo_hashed(&self, _route: u64, _fp: u64, written: Written) -> bool {
        engine::undo(&self.state(), written)
    }
}

impl<K: std::hash::Hash + ?Sized, S: std::hash::BuildHasher + 'static> Limiter<K, S> {
    /// `key` as one check of a stack, for [`check_all`]: one cell under the limiter's quota
    /// unless [`n`](Gate::n) or [`quota`](Gate::quota) say otherwise.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Limiter, Quota};
    ///
    /// let per_ip = Limiter::keyed(Quota::per_minute(1));
    /// assert!(tollgate::check_all([per_ip.gate("10.0.0.1")]).is_ok());
    /// assert!(tollgate::check_all([per_ip.gate("10.0.0.1")]).is_err());
    /// ```
    pub fn gate(&self, key: &K) -> Gate<'_> {
        let KeyState { route, fp, .. } = self.state(key);
        Gate {
            limiter: self,
            route,
            fp,
            n: 1,
            quota: None,
        }
    }
}

impl DirectLimiter {
    /// The limiter as one check of a stack, for [`check_all`].
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{DirectLimiter, Quota};
    ///
    /// let global = DirectLimiter::new(Quota::per_minute(1));
    /// assert!(tollgate::check_all([global.gate()]).is_ok());
    /// assert!(tollgate::check_all([global.gate()]).is_err());
    /// ```
    pub fn gate(&self) -> Gate<'_> {
        Gate {
            limiter: self,
            route: 0,
            fp: 0,
            n: 1,
            quota: None,
        }
    }
}
