//! [`InFlight`]: at most N permits out per key, FIFO, released on drop.
//!
//! The public types are thin: [`InFlight`] hashes the key once (with its own seeded
//! [`RandomState`](crate::hash::RandomState), as a [`Limiter`](crate::Limiter) does) and
//! the table in `table.rs` does the rest under a shard's mutex; that file holds the design
//! essay. [`Acquire`] is the future's state machine (not yet queued, queued, done) and
//! [`Permit`] gives its permit back on drop.

mod table;

use std::borrow::Borrow;
use std::fmt;
use std::future::Future;
use std::hash::{BuildHasher, Hash};
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::hash::RandomState;
use crate::sync::Arc;
use crate::wait::block_on;
use table::{Arrival, Node, Table};

/// A per-key concurrency limit: at most `limit` [`Permit`]s of one key exist at a time.
///
/// The scraper's per-site semaphore, without a semaphore per site: a key has state only
/// while it has permits out or waiters, so the memory follows the busy keys and idle keys
/// cost nothing ([`keys`](InFlight::keys) counts them).
///
/// * [`acquire`](InFlight::acquire) returns a future of a permit; waiters on a key are served
///   in FIFO order (the order of their futures' first polls), and neither a later `acquire`
///   nor a [`try_acquire`](InFlight::try_acquire) takes a permit while anyone waits.
///   [`Acquire::wait`] blocks a thread in the same queue.
/// * A [`Permit`] gives its permit back when dropped, to the next waiter if there is one.
/// * Cloning is cheap and every clone enforces the same limits. Keys are hashed with a
///   randomly seeded 64-bit hash and never stored: two keys share a limit only if their
///   hashes collide (probability 2^-64 per pair), as in a [`Limiter`](crate::Limiter).
///
/// A key's state sits in a sharded table of mutex-protected maps: taking and giving back a
/// permit is one short critical section each, not the lock-free path of a rate check
/// (permits go around requests, not packets). Nothing here reads a clock.
///
/// # Beside a rate limit on the same key
///
/// Take the **permit first, then wait for the rate cell**, and hold the permit while the
/// request runs. Neither order can deadlock (a rate wait always ends when its instant comes,
/// and a permit is held only by running requests), but permit-first is the better one: the
/// cell is spent when the request can really go out, so the server sees the paced rate.
/// Rate-first spends cells on requests that then queue for a permit: after a stall the
/// spent cells burst out together when permits free, and a request dropped while queued
/// for a permit wastes its cell. With several concurrency limits (per host and global, say),
/// acquire them in one fixed order everywhere; that is what keeps permits deadlock-free.
///
/// ```
/// use tollgate::{InFlight, Limiter, Quota};
///
/// let per_host_rate = Limiter::keyed(Quota::per_second(1_000));
/// let per_host_conc = InFlight::new(2);
/// futures_executor::block_on(async {
///     let permit = per_host_conc.acquire("example.com").await; // 1. a slot
///     per_host_rate.until_ready("example.com").await.unwrap(); // 2. then the rate
///     // ... send the request ...
///     assert_eq!(per_host_conc.in_flight("example.com"), 1);
///     drop(permit); // 3. the slot goes back when the response is in
/// });
/// assert_eq!(per_host_conc.keys(), 0);
/// ```
///
/// # Examples
///
/// ```
/// use tollgate::InFlight;
///
/// let conc = InFlight::new(2);
/// let a = conc.try_acquire("host").unwrap();
/// let _b = conc.try_acquire("host").unwrap();
/// assert!(conc.try_acquire("host").is_none()); // two out: the limit
/// assert!(conc.try_acquire("other").is_some()); // another key, another limit
/// drop(a);
/// assert!(conc.try_acquire("host").is_some());
/// ```
pub struct InFlight<K: ?Sized> {
    shared: Arc<Shared>,
    _key: PhantomData<fn(&K)>,
}

/// What every clone of an [`InFlight`] and every [`Permit`] shares.
#[derive(Debug)]
struct Shared {
    table: Table,
    limit: usize,
    identity: RandomState,
}

impl<K: ?Sized> Clone for InFlight<K> {
    fn clone(&self) -> Self {
        InFlight {
            shared: Arc::clone(&self.shared),
            _key: PhantomData,
        }
    }
}

impl<K: ?Sized> fmt::Debug for InFlight<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InFlight")
            .field("limit", &self.shared.limit)
            .finish_non_exhaustive()
    }
}

impl<K: Hash + ?Sized> InFlight<K> {
    /// At most `limit` permits out per key. The key type is inferred from the first use.
    ///
    /// # Panics
    ///
    /// If `limit` is 0: no acquire could ever complete.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::InFlight;
    ///
    /// let conc = InFlight::new(8);
    /// assert_eq!(conc.limit(), 8);
    /// let _permit = conc.try_acquire(&42u64).unwrap(); // keys are u64 from here on
    /// ```
    pub fn new(limit: usize) -> InFlight<K> {
        assert!(limit > 0, "a concurrency limit of 0 admits nothing");
        InFlight {
            shared: Arc::new(Shared {
                table: Table::new(),
                limit,
                identity: RandomState::new(),
            }),
            _key: PhantomData,
        }
    }

    /// The per-key limit given to [`new`](InFlight::new).
    ///
    /// # Examples
    ///
    /// ```
    /// let conc = tollgate::InFlight::<str>::new(3);
    /// assert_eq!(conc.limit(), 3);
    /// ```
    pub fn limit(&self) -> usize {
        self.shared.limit
    }

    fn hash(&self, key: &K) -> u64 {
        self.shared.identity.hash_one(key)
    }

    /// A future of a permit for `key`: ready at its first poll if fewer than
    /// [`limit`](InFlight::limit) permits are out and nobody waits, else queued behind the
    /// key's waiters and granted in FIFO order as permits come back.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future gives up its place and holds nothing: a queued future is unlinked,
    /// and one that was granted a permit it has not yet taken (by a poll) gives that permit
    /// to the next waiter. Forgetting a queued future (`std::mem::forget`) does not stall the
    /// queue, since permits are granted without polling their futures, but the permit it is
    /// granted in its turn is never given back: from then on the key has one permit fewer,
    /// and its state stays in the table. Forgetting a [`Permit`] does the same.
    ///
    /// # Examples
    ///
    /// ```
    /// use futures_util::FutureExt;
    /// use tollgate::InFlight;
    ///
    /// let conc = InFlight::new(1);
    /// let held = conc.acquire("host").now_or_never().unwrap(); // free: ready at once
    /// let mut next = conc.acquire("host");
    /// assert!((&mut next).now_or_never().is_none()); // queued behind `held`
    /// drop(held);
    /// assert!(next.now_or_never().is_some()); // granted on the release
    /// ```
    pub fn acquire(&self, key: &K) -> Acquire<'_> {
        self.acquire_with(key, self.shared.limit)
    }

    /// As [`acquire`](InFlight::acquire), under a limit of this call's own: granted when
    /// fewer than `max` permits of `key` are out. The queue stays one FIFO per key: a waiter
    /// asking under a low limit holds back those behind it until it is granted.
    ///
    /// # Panics
    ///
    /// If `max` is 0.
    ///
    /// # Cancel safety
    ///
    /// As [`acquire`](InFlight::acquire).
    ///
    /// # Examples
    ///
    /// ```
    /// use futures_util::FutureExt;
    /// use tollgate::InFlight;
    ///
    /// let conc = InFlight::new(4);
    /// let _a = conc.acquire_with("slow.example", 1).now_or_never().unwrap();
    /// assert!(conc.acquire_with("slow.example", 1).now_or_never().is_none());
    /// assert!(conc.acquire("slow.example").now_or_never().is_some()); // the default limit: 4
    /// ```
    pub fn acquire_with(&self, key: &K, max: usize) -> Acquire<'_> {
        assert!(max > 0, "a concurrency limit of 0 admits nothing");
        Acquire {
            shared: &self.shared,
            key: self.hash(key),
            max,
            state: State::New,
        }
    }

    /// A permit for `key` now, if fewer than [`limit`](InFlight::limit) are out and nobody
    /// waits for one; `None` otherwise. Never queues.
    ///
    /// # Examples
    ///
    /// ```
    /// use futures_util::FutureExt;
    /// use tollgate::InFlight;
    ///
    /// let conc = InFlight::new(2);
    /// let a = conc.try_acquire("host").unwrap();
    /// let _b = conc.try_acquire("host").unwrap();
    /// let mut queued = conc.acquire("host");
    /// assert!((&mut queued).now_or_never().is_none());
    /// drop(a); // granted to the queued future, not to the next try
    /// assert!(conc.try_acquire("host").is_none());
    /// ```
    pub fn try_acquire(&self, key: &K) -> Option<Permit> {
        self.try_acquire_with(key, self.shared.limit)
    }

    /// As [`try_acquire`](InFlight::try_acquire), under a limit of this call's own.
    ///
    /// # Panics
    ///
    /// If `max` is 0.
    ///
    /// # Examples
    ///
    /// ```
    /// let conc = tollgate::InFlight::new(10);
    /// let _a = conc.try_acquire_with("host", 1).unwrap();
    /// assert!(conc.try_acquire_with("host", 1).is_none());
    /// assert!(conc.try_acquire("host").is_some());
    /// ```
    pub fn try_acquire_with(&self, key: &K, max: usize) -> Option<Permit> {
        assert!(max > 0, "a concurrency limit of 0 admits nothing");
        let key = self.hash(key);
        self.shared.table.try_take(key, max).then(|| Permit {
            shared: Arc::clone(&self.shared),
            key,
        })
    }

    /// Permits of `key` out now (granted, whether or not their futures have taken them).
    ///
    /// # Examples
    ///
    /// ```
    /// let conc = tollgate::InFlight::new(3);
    /// let _p = conc.try_acquire("host").unwrap();
    /// assert_eq!(conc.in_flight("host"), 1);
    /// assert_eq!(conc.in_flight("other"), 0);
    /// ```
    pub fn in_flight(&self, key: &K) -> usize {
        self.shared.table.key_counts(self.hash(key)).0
    }

    /// Futures queued for a permit of `key` now.
    ///
    /// # Examples
    ///
    /// ```
    /// use futures_util::FutureExt;
    ///
    /// let conc = tollgate::InFlight::new(1);
    /// let _p = conc.try_acquire("host").unwrap();
    /// let mut next = conc.acquire("host");
    /// assert!((&mut next).now_or_never().is_none());
    /// assert_eq!(conc.waiting("host"), 1);
    /// drop(next); // unlinked
    /// assert_eq!(conc.waiting("host"), 0);
    /// ```
    pub fn waiting(&self, key: &K) -> usize {
        self.shared.table.key_counts(self.hash(key)).1
    }

    /// Keys that have state: permits out or waiters. An idle key has none.
    ///
    /// Locks each shard in turn, so it is exact only when nothing else runs.
    ///
    /// # Examples
    ///
    /// ```
    /// let conc = tollgate::InFlight::new(1);
    /// let p = conc.try_acquire("a").unwrap();
    /// let q = conc.try_acquire("b").unwrap();
    /// assert_eq!(conc.keys(), 2);
    /// drop((p, q));
    /// assert_eq!(conc.keys(), 0); // idle keys are reclaimed at once
    /// ```
    pub fn keys(&self) -> usize {
        self.shared.table.keys()
    }

    /// The same limits, taking keys in a borrowed form `Q` (`&str` for `String` keys), as
    /// [`Limiter::borrowed`](crate::Limiter::borrowed). A cheap handle, like a clone.
    ///
    /// # Examples
    ///
    /// ```
    /// let conc = tollgate::InFlight::new(1);
    /// let _p = conc.try_acquire(&String::from("host")).unwrap(); // K = String
    /// assert!(conc.borrowed::<str>().try_acquire("host").is_none()); // the same key
    /// ```
    pub fn borrowed<Q>(&self) -> InFlight<Q>
    where
        K: Borrow<Q>,
        Q: Hash + ?Sized,
    {
        InFlight {
            shared: Arc::clone(&self.shared),
            _key: PhantomData,
        }
    }
}

/// The future of [`InFlight::acquire`]: a [`Permit`] once granted.
///
/// It joins its key's queue at its first poll. See [`InFlight::acquire`] for cancel safety.
///
/// # Panics
///
/// If polled again after it returned its permit.
///
/// # Examples
///
/// ```
/// use tollgate::{Acquire, InFlight};
///
/// let conc = InFlight::new(1);
/// let fut: Acquire<'_> = conc.acquire("host");
/// let permit = futures_executor::block_on(fut);
/// assert_eq!(conc.in_flight("host"), 1);
/// drop(permit); // gives it back
/// assert_eq!(conc.in_flight("host"), 0);
/// ```
#[must_use = "futures do nothing unless polled"]
pub struct Acquire<'a> {
    shared: &'a Arc<Shared>,
    key: u64,
    max: usize,
    state: State,
}

enum State {
    /// Not polled yet.
    New,
    /// In its key's queue (or granted, until the next poll sees it).
    Queued(Arc<Node>),
    /// Returned its permit.
    Done,
}

impl fmt::Debug for Acquire<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match self.state {
            State::New => "new",
            State::Queued(_) => "queued",
            State::Done => "done",
        };
        f.debug_struct("Acquire")
            .field("max", &self.max)
            .field("state", &state)
            .finish_non_exhaustive()
    }
}

impl Acquire<'_> {
    /// Blocks the calling thread until a permit is granted, in the same FIFO queue as the
    /// awaited form.
    ///
    /// # Blocking
    ///
    /// Parks the thread. Never call it from async code: it would stall the executor's
    /// worker; `.await` the future there.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::InFlight;
    ///
    /// let conc = InFlight::new(1);
    /// let permit = conc.acquire("host").wait(); // free: at once
    /// std::thread::scope(|s| {
    ///     let waiter = s.spawn(|| drop(conc.acquire("host").wait())); // parks...
    ///     while conc.waiting("host") == 0 {
    ///         std::thread::yield_now(); // (until it has queued)
    ///     }
    ///     assert!(!waiter.is_finished());
    ///     drop(permit); // ...until this
    ///     waiter.join().unwrap();
    /// });
    /// assert_eq!((conc.in_flight("host"), conc.waiting("host")), (0, 0));
    /// ```
    pub fn wait(self) -> Permit {
        block_on(self)
    }

    fn permit(&mut self) -> Permit {
        self.state = State::Done;
        Permit {
            shared: Arc::clone(self.shared),
            key: self.key,
        }
    }
}

impl Future for Acquire<'_> {
    type Output = Permit;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Permit> {
        let this = self.get_mut();
        match &this.state {
            State::New => match this.shared.table.arrive(this.key, this.max) {
                Arrival::Permit => Poll::Ready(this.permit()),
                Arrival::Queued(node) => {
                    // Queued without a waker: register it now, as a later poll does.
                    let granted = node.poll(cx);
                    this.state = State::Queued(node);
                    if granted {
                        Poll::Ready(this.permit())
                    } else {
                        Poll::Pending
                    }
                }
            },
            State::Queued(node) => {
                if node.poll(cx) {
                    Poll::Ready(this.permit())
                } else {
                    Poll::Pending
                }
            }
            State::Done => panic!("`Acquire` polled after it returned its permit"),
        }
    }
}

impl Drop for Acquire<'_> {
    fn drop(&mut self) {
        if let State::Queued(node) = &self.state {
            self.shared.table.cancel(self.key, node);
        }
    }
}

/// A permit of one key of an [`InFlight`]: given back when dropped, to the key's next waiter
/// if there is one. It owns a handle to the limits, so it can move into a spawned task.
///
/// # Examples
///
/// ```
/// let conc = tollgate::InFlight::new(1);
/// let permit = conc.try_acquire("host").unwrap();
/// let worker = std::thread::spawn(move || drop(permit)); // 'static: moves anywhere
/// worker.join().unwrap();
/// assert_eq!(conc.in_flight("host"), 0);
/// ```
pub struct Permit {
    shared: Arc<Shared>,
    key: u64,
}

impl fmt::Debug for Permit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Permit")
            .field("limit", &self.shared.limit)
            .finish_non_exhaustive()
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.shared.table.release(self.key);
    }
}
