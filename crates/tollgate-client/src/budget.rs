//! [`RetryBudget`]: retries as a share of recent first attempts, per host, as tower's
//! `TpsBudget`; and [`Spent`], a host's sliding window of both counts.
//!
//! The window is [`SLOTS`] buckets of `window / SLOTS` each, indexed by time on the rates'
//! clock; a bucket older than the window is cleared when the window slides past it. A
//! retry is allowed while the window's retries stay within `floor × window + ratio ×
//! first attempts`. The caller holds the host table's lock around each call, so there are
//! no races here.

use std::time::Duration;

use tollgate::Timestamp;

/// Buckets per window: a first attempt leaves the window between `window × (1 − 1/SLOTS)`
/// and `window` after it was made.
const SLOTS: usize = 10;

/// A cap on a host's retries: within the last [`window`](RetryBudget::window), at most
/// [`ratio`](RetryBudget::new) of the first attempts sent to the host, plus
/// [`floor`](RetryBudget::floor) retries per second of the window (so that a host seldom
/// asked can still be retried). A retry over the budget is not sent: the last answer is
/// returned and the refusal counted in [`HostSnapshot::budget_refused`](crate::HostSnapshot::budget_refused).
///
/// The counts are kept per host key with the host's counters, on the rates' clock: a host
/// evicted from the table ([`PoliteLayer::track_hosts`](crate::PoliteLayer::track_hosts))
/// starts again with an empty window. Retries of a 429 and of a 5xx or an error draw on
/// the same budget.
///
/// Without it, a host answering every request with a plain 5xx gets `1 + max_retries`
/// times the load it failed under. The default ([`RetryPolicy::new`](crate::RetryPolicy::new)):
/// 20 % of first attempts over 10 s, plus 1 retry per second.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate_client::{RetryBudget, RetryPolicy};
///
/// let budget = RetryBudget::new(0.1).floor(0.5).window(Duration::from_secs(30));
/// assert_eq!(budget.reserve(), 15.0); // retries allowed with no first attempts at all
/// let policy = RetryPolicy::new().budget(budget);
/// assert_eq!(policy.retry_budget(), Some(budget));
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryBudget {
    ratio: f64,
    floor: f64,
    window: Duration,
}

impl Default for RetryBudget {
    fn default() -> Self {
        RetryBudget::new(0.2)
    }
}

impl RetryBudget {
    /// Retries at most `ratio` of the first attempts (0.2: one retry per five requests),
    /// with a floor of 1 retry per second over a window of 10 s.
    ///
    /// # Panics
    ///
    /// If `ratio` is negative or not finite.
    ///
    /// # Examples
    ///
    /// ```
    /// let budget = tollgate_client::RetryBudget::new(0.2);
    /// assert_eq!(budget, tollgate_client::RetryBudget::default());
    /// ```
    pub fn new(ratio: f64) -> RetryBudget {
        assert!(
            ratio.is_finite() && ratio >= 0.0,
            "the retry ratio must be finite and not negative, got {ratio}"
        );
        RetryBudget {
            ratio,
            floor: 1.0,
            window: Duration::from_secs(10),
        }
    }

    /// Retries allowed per second of the window whatever the first attempts.
    ///
    /// # Panics
    ///
    /// If `per_second` is negative or not finite.
    ///
    /// # Examples
    ///
    /// ```
    /// let budget = tollgate_client::RetryBudget::new(0.2).floor(0.0);
    /// assert_eq!(budget.reserve(), 0.0); // only a share of the first attempts
    /// ```
    #[must_use]
    pub fn floor(mut self, per_second: f64) -> Self {
        assert!(
            per_second.is_finite() && per_second >= 0.0,
            "the retry floor must be finite and not negative, got {per_second}"
        );
        self.floor = per_second;
        self
    }

    /// How far back first attempts and retries are counted.
    ///
    /// # Panics
    ///
    /// If `window` is shorter than 10 ns (one per bucket).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let budget = tollgate_client::RetryBudget::new(0.2).window(Duration::from_secs(60));
    /// assert_eq!(budget.reserve(), 60.0);
    /// ```
    #[must_use]
    pub fn window(mut self, window: Duration) -> Self {
        assert!(
            window.as_nanos() >= SLOTS as u128,
            "the retry window must be at least {SLOTS} ns, got {window:?}"
        );
        self.window = window;
        self
    }

    /// The retries a window allows with no first attempts: `floor × window`.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(tollgate_client::RetryBudget::default().reserve(), 10.0);
    /// ```
    pub fn reserve(&self) -> f64 {
        self.floor * self.window.as_secs_f64()
    }

    /// Whether, in a window with `firsts` first attempts and `retries` retries, one more
    /// retry is allowed.
    fn allows(&self, firsts: u64, retries: u64) -> bool {
        (retries + 1) as f64 <= self.reserve() + self.ratio * firsts as f64
    }

    fn slot_nanos(&self) -> u64 {
        u64::try_from(self.window.as_nanos() / SLOTS as u128).unwrap_or(u64::MAX)
    }
}

/// One host's first attempts and retries over the budget's window.
#[derive(Debug, Default, Clone)]
pub(crate) struct Spent {
    /// `(first attempts, retries)` per bucket; bucket `i % SLOTS` holds bucket index `i`.
    slots: [(u64, u64); SLOTS],
    /// The latest bucket index written.
    at: u64,
}

impl Spent {
    /// Slides the window to `now`: clears the buckets that left it. A `now` before the
    /// latest bucket (another thread's older reading) counts in the latest.
    fn slide(&mut self, budget: &RetryBudget, now: Timestamp) -> usize {
        let index = now.as_nanos() / budget.slot_nanos();
        if index > self.at {
            let stale = (index - self.at).min(SLOTS as u64);
            for i in 1..=stale {
                self.slots[((self.at + i) % SLOTS as u64) as usize] = (0, 0);
            }
            self.at = index;
        }
        (self.at % SLOTS as u64) as usize
    }

    /// Counts a first attempt sent at `now`.
    pub(crate) fn first(&mut self, budget: &RetryBudget, now: Timestamp) {
        let slot = self.slide(budget, now);
        self.slots[slot].0 += 1;
    }

    /// Counts a retry at `now` if the budget allows it; whether it did.
    pub(crate) fn retry(&mut self, budget: &RetryBudget, now: Timestamp) -> bool {
        let slot = self.slide(budget, now);
        let (firsts, retries) = self
            .slots
            .iter()
            .fold((0, 0), |(f, r), &(sf, sr)| (f + sf, r + sr));
        if !budget.allows(firsts, retries) {
            return false;
        }
        self.slots[slot].1 += 1;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(n: u64) -> Timestamp {
        Timestamp::from_nanos(n * 1_000_000_000)
    }

    #[test]
    fn retries_are_a_share_of_first_attempts_plus_the_floor() {
        let budget = RetryBudget::new(0.2).floor(0.0);
        let mut spent = Spent::default();
        assert!(!spent.retry(&budget, s(0))); // nothing sent yet, no floor
        for _ in 0..10 {
            spent.first(&budget, s(0));
        }
        assert!(spent.retry(&budget, s(1)));
        assert!(spent.retry(&budget, s(1)));
        assert!(!spent.retry(&budget, s(1))); // 20 % of 10
        let floored = RetryBudget::new(0.2).floor(0.5);
        let mut spent = Spent::default();
        let allowed = (0..20).filter(|_| spent.retry(&floored, s(0))).count();
        assert_eq!(allowed, 5); // 0.5/s over 10 s
    }

    #[test]
    fn the_window_slides() {
        let budget = RetryBudget::new(0.5).floor(0.0);
        let mut spent = Spent::default();
        for _ in 0..4 {
            spent.first(&budget, s(100));
        }
        assert!(spent.retry(&budget, s(105)));
        assert!(spent.retry(&budget, s(109)));
        assert!(!spent.retry(&budget, s(109)));
        assert!(!spent.retry(&budget, s(50))); // an older reading counts as the latest
        assert!(!spent.retry(&budget, s(110))); // the firsts left, the retries remain
        spent.first(&budget, s(200)); // far later: all cleared
        spent.first(&budget, s(200));
        assert!(spent.retry(&budget, s(200)));
        assert!(!spent.retry(&budget, s(200)));
    }
}
