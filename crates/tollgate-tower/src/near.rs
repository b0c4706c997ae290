//! "Near the limit": an admission that left its key less than a share of its burst, counted
//! so that an operator sees pressure building before the refusals start.
//!
//! The test reads only the admission the check returned (its burst and what it left), so it
//! costs no second table read: an integer multiply and compare, the share kept as a
//! fraction of 2^32 so that no float is touched per request.

use std::fmt;

use tollgate::Admitted;

/// The used share of a burst above which an admission is near the limit, unless
/// [`Builder::near_limit`](crate::Builder::near_limit) says otherwise.
pub(crate) const DEFAULT_RATIO: f64 = 0.8;

/// When an admission counts as near the limit.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NearLimit {
    /// The share of the burst left below which an admission is near, in units of 2^-32
    /// (at most 2^32, the whole burst); 0 counts nothing.
    left: u64,
}

impl Default for NearLimit {
    fn default() -> NearLimit {
        NearLimit::new(DEFAULT_RATIO).expect("the default ratio is valid")
    }
}

impl NearLimit {
    /// Near once more than `ratio` of the burst is used, i.e. less than `1 - ratio` is left.
    pub(crate) fn new(ratio: f64) -> Result<NearLimit, NearLimitError> {
        if !(0.0..=1.0).contains(&ratio) {
            return Err(NearLimitError { ratio });
        }
        // Truncated: a key left exactly at the share is not near (to within 2^-32).
        let left = ((1.0 - ratio) * 4_294_967_296.0) as u64;
        Ok(NearLimit { left })
    }

    /// Whether `admitted` left its key near the limit.
    #[inline]
    pub(crate) fn is_near(self, admitted: &Admitted) -> bool {
        // remaining < burst * left / 2^32; both sides below 2^64 (burst, remaining < 2^32,
        // left <= 2^32).
        self.left != 0
            && (u64::from(admitted.remaining()) << 32) < u64::from(admitted.limit()) * self.left
    }
}

/// A near-limit ratio outside `0.0..=1.0` (or NaN), from
/// [`Builder::near_limit`](crate::Builder::near_limit).
///
/// # Examples
///
/// ```
/// use tollgate::{Limiter, Quota};
/// use tollgate_tower::{Global, RateLimitLayer};
///
/// let builder = RateLimitLayer::builder(Limiter::keyed(Quota::per_second(5)), Global);
/// let error = builder.near_limit(1.5).unwrap_err();
/// assert_eq!(error.ratio(), 1.5);
/// assert_eq!(error.to_string(), "near-limit ratio 1.5 is not between 0 and 1");
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NearLimitError {
    ratio: f64,
}

impl NearLimitError {
    /// The ratio given.
    ///
    /// # Examples
    ///
    /// See [`NearLimitError`].
    pub fn ratio(&self) -> f64 {
        self.ratio
    }
}

impl fmt::Display for NearLimitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "near-limit ratio {} is not between 0 and 1", self.ratio)
    }
}

impl std::error::Error for NearLimitError {}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn left(limit: u32, remaining: u32) -> Admitted {
        Admitted::from_parts(limit, remaining, Duration::from_secs(1))
    }

    /// The default: near with less than 20% of the burst left, exactly 20% is not near.
    #[test]
    fn default_is_less_than_a_fifth_left() {
        let near = NearLimit::default();
        assert!(near.is_near(&left(10, 0)));
        assert!(near.is_near(&left(10, 1)));
        assert!(!near.is_near(&left(10, 2)));
        assert!(!near.is_near(&left(10, 9)));
        // A burst of 1 is always near once admitted; a huge burst works without overflow.
        assert!(near.is_near(&left(1, 0)));
        assert!(near.is_near(&left(u32::MAX, u32::MAX / 5 - 1)));
        assert!(!near.is_near(&left(u32::MAX, u32::MAX / 5 + 1)));
    }

    #[test]
    fn the_ends_of_the_range() {
        // 1.0: never near (the switch-off); 0.0: near once anything is used.
        let never = NearLimit::new(1.0).unwrap();
        assert!(!never.is_near(&left(10, 0)));
        let always = NearLimit::new(0.0).unwrap();
        assert!(always.is_near(&left(10, 9)));
        assert!(always.is_near(&left(u32::MAX, u32::MAX - 1)));
        assert!(!always.is_near(&left(10, 10)));
        let half = NearLimit::new(0.5).unwrap();
        assert!(half.is_near(&left(10, 4)));
        assert!(!half.is_near(&left(10, 5)));
    }

    #[test]
    fn bad_ratios_are_errors() {
        for bad in [-0.1, 1.01, f64::NAN, f64::INFINITY] {
            assert!(NearLimit::new(bad).is_err(), "{bad}");
        }
    }
}
