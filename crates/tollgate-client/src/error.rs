//! [`PoliteError`]: the error of a [`Polite`](crate::Polite) call.

use std::fmt;
use std::time::{Duration, Instant};

/// The error of a [`Polite`](crate::Polite) call: the inner client's own error, or a host
/// that holds requests back longer than the layer lets a request wait
/// ([`PoliteLayer::max_wait`](crate::PoliteLayer::max_wait)); and for a
/// [`Redirects`](crate::Redirects) call, a redirect past its limit.
///
/// A held request was never sent: the server asked for the pause (`Retry-After`, a spent
/// quota's reset) or the host's pace puts its turn that far off.
/// [`held_until`](PoliteError::held_until) says when the host opens again.
///
/// # Examples
///
/// ```
/// use std::time::{Duration, Instant};
/// use tollgate_client::PoliteError;
///
/// let until = Instant::now() + Duration::from_secs(3_600);
/// let held: PoliteError<std::io::Error> =
///     PoliteError::Held { until, wait: Duration::from_secs(3_600) };
/// assert!(held.is_held());
/// assert_eq!(held.held_until(), Some(until));
/// assert_eq!(held.retry_after(), Some(Duration::from_secs(3_600)));
///
/// let inner = PoliteError::Inner(std::io::Error::other("reset by peer"));
/// assert!(!inner.is_held());
/// assert_eq!(inner.into_inner().unwrap().to_string(), "reset by peer");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PoliteError<E> {
    /// The inner service failed (a transport error, a timeout); after the retries the
    /// [`RetryPolicy`](crate::RetryPolicy) allowed, if the request was idempotent.
    Inner(E),
    /// The host's next turn is further off than the layer's `max_wait`: the request failed
    /// at once, unsent, holding nothing.
    Held {
        /// When the host's next turn comes, as predicted when the request was refused
        /// (later requests queued for it may still come first).
        until: Instant,
        /// `until` less the time of the refusal: what to put in a `Retry-After`.
        wait: Duration,
    },
    /// A redirect past the [`RedirectLayer`](crate::RedirectLayer)'s limit (a loop, or a
    /// chain longer than it allows): not followed.
    TooManyRedirects {
        /// The limit: how many redirects were followed before this one.
        max: u32,
        /// Where the redirect not followed pointed, resolved.
        location: http::Uri,
    },
}

impl<E> PoliteError<E> {
    /// A host held for `wait` from now. A wait past what `Instant` can hold (a server's
    /// `Retry-After` of centuries) is cut to a century: as good as never, and no panic.
    pub(crate) fn held(wait: Duration) -> PoliteError<E> {
        const CENTURY: Duration = Duration::from_secs(100 * 365 * 86_400);
        let now = Instant::now();
        let (until, wait) = match now.checked_add(wait) {
            Some(until) => (until, wait),
            None => (now + CENTURY, CENTURY),
        };
        PoliteError::Held { until, wait }
    }

    /// Whether the request was refused unsent because its host is held.
    ///
    /// # Examples
    ///
    /// ```
    /// let err = tollgate_client::PoliteError::Inner("refused");
    /// assert!(!err.is_held());
    /// ```
    pub fn is_held(&self) -> bool {
        matches!(self, PoliteError::Held { .. })
    }

    /// When the held host opens again, if the request was refused for that.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(tollgate_client::PoliteError::Inner(()).held_until(), None);
    /// ```
    pub fn held_until(&self) -> Option<Instant> {
        match *self {
            PoliteError::Held { until, .. } => Some(until),
            PoliteError::Inner(_) | PoliteError::TooManyRedirects { .. } => None,
        }
    }

    /// How long the held host asked to wait, counted from the refusal, if the request was
    /// refused for that.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(tollgate_client::PoliteError::Inner(()).retry_after(), None);
    /// ```
    pub fn retry_after(&self) -> Option<Duration> {
        match *self {
            PoliteError::Held { wait, .. } => Some(wait),
            PoliteError::Inner(_) | PoliteError::TooManyRedirects { .. } => None,
        }
    }

    /// The inner service's error, if that is what this is.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(tollgate_client::PoliteError::Inner(7).inner(), Some(&7));
    /// ```
    pub fn inner(&self) -> Option<&E> {
        match self {
            PoliteError::Inner(e) => Some(e),
            PoliteError::Held { .. } | PoliteError::TooManyRedirects { .. } => None,
        }
    }

    /// The inner service's error, if that is what this is.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(tollgate_client::PoliteError::Inner(7).into_inner(), Some(7));
    /// ```
    pub fn into_inner(self) -> Option<E> {
        match self {
            PoliteError::Inner(e) => Some(e),
            PoliteError::Held { .. } | PoliteError::TooManyRedirects { .. } => None,
        }
    }
}

impl<E: fmt::Display> fmt::Display for PoliteError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PoliteError::Inner(e) => e.fmt(f),
            PoliteError::Held { wait, .. } => write!(
                f,
                "the host is held for {:.3} s, longer than the request may wait",
                wait.as_secs_f64()
            ),
            PoliteError::TooManyRedirects { max, location } => {
                write!(f, "more than {max} redirects; the next was to {location}")
            }
        }
    }
}

/// Transparent for [`PoliteError::Inner`]: the inner error's message and source, so that
/// an error chain does not print it twice.
impl<E: std::error::Error + 'static> std::error::Error for PoliteError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PoliteError::Inner(e) => e.source(),
            PoliteError::Held { .. } | PoliteError::TooManyRedirects { .. } => None,
        }
    }
}
