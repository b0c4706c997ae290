//! The inbox: a lock-free stack of new registrations (a Treiber stack without pop).
//!
//! Registrants only *push*; the driver only takes the *whole* stack with one `swap(null)`.
//! With no single-node pop there is no ABA problem and no node is ever read after another
//! thread could have freed it, so plain `Arc` ownership is enough.
//!
//! # Ownership
//!
//! The stack owns one strong count of every entry on it, held as the raw pointer from
//! `Arc::into_raw`. A push hands that count over at its successful CAS; a drain takes back
//! every count it swapped out with `Arc::from_raw`; dropping the stack frees what is left.
//!
//! # Who writes what
//!
//! * `head`: pushers CAS it from the value they read to their node; drainers swap it to null.
//! * `Entry::next`: written only by the node's pusher, before the CAS that publishes the node,
//!   and read only by a drainer after its swap.
//!
//! # Memory ordering
//!
//! A push's CAS is Release and a drain's swap is Acquire. Every push is an RMW on `head`, so
//! each push continues the release sequence of the pushes beneath it: the drainer's Acquire
//! swap synchronises with *every* push of the chain it takes, and sees every node's `next`
//! and contents (its deadline and registered waker). A pusher never dereferences the head it
//! reads, so that read is Relaxed.

use std::ptr;

use super::entry::Entry;
use crate::sync::{Arc, AtomicPtr, Ordering};

#[derive(Debug)]
pub(crate) struct Inbox {
    /// The most recently pushed entry (owning one strong count of each entry below it), or null.
    head: AtomicPtr<Entry>,
}

impl Inbox {
    #[cfg(not(tollgate_loom))]
    pub(crate) const fn new() -> Inbox {
        Inbox {
            head: AtomicPtr::new(ptr::null_mut()),
        }
    }

    #[cfg(tollgate_loom)]
    pub(crate) fn new() -> Inbox {
        Inbox {
            head: AtomicPtr::new(ptr::null_mut()),
        }
    }

    /// Pushes `entry`, handing the stack this strong count. Lock-free: it retries only when
    /// another push or a drain changed `head` in between.
    pub(crate) fn push(&self, entry: Arc<Entry>) {
        let node = Arc::into_raw(entry).cast_mut();
        // ordering: the pusher never dereferences the head it reads (module docs).
        let mut head = self.head.load(Ordering::Relaxed);
        loop {
            // SAFETY: 1. `node` came from `Arc::into_raw` just above and this thread still owns
            //    that strong count (the stack takes it only at the successful CAS below), so
            //    the entry is alive.
            // 2. Only a shared reference is formed, and `next` is an atomic.
            let node_ref = unsafe { &*node };
            // ordering: published by the Release CAS that follows.
            node_ref.next.store(head, Ordering::Relaxed);
            // ordering: Release publishes `next` and the entry's contents to the drainer's
            // Acquire swap; a failed CAS publishes nothing and only reloads the head.
            match self
                .head
                .compare_exchange_weak(head, node, Ordering::Release, Ordering::Relaxed)
            {
                // head: old -> node (node.next == old). The stack owns the count now.
                Ok(_) => return,
                Err(current) => head = current,
            }
        }
    }

    /// Takes every entry on the stack and appends them to `out` in push order (oldest first).
    pub(crate) fn drain_into(&self, out: &mut Vec<Arc<Entry>>) {
        // ordering: Acquire synchronises with every push of the chain taken (module docs).
        let mut node = self.head.swap(ptr::null_mut(), Ordering::Acquire);
        let start = out.len();
        while !node.is_null() {
            // SAFETY: 1. `node` was published by a push, which gave the stack the strong count
            //    from `Arc::into_raw`; the swap above removed it from the stack, so this
            //    thread is now the count's only owner and reclaims it exactly once.
            // 2. The Acquire swap makes the node's contents and `next` visible (module docs).
            let entry = unsafe { Arc::from_raw(node) };
            // ordering: made visible by the Acquire swap (module docs).
            node = entry.next.load(Ordering::Relaxed);
            out.push(entry);
        }
        out[start..].reverse();
    }

    /// Nothing is waiting in the inbox. Only a hint, since pushes may land at any moment; the
    /// driver orders this read with a SeqCst fence (see `driver.rs`).
    pub(crate) fn is_empty(&self) -> bool {
        // ordering: the caller's fence orders it; the node is not dereferenced.
        self.head.load(Ordering::Relaxed).is_null()
    }
}

impl Drop for Inbox {
    fn drop(&mut self) {
        let mut rest = Vec::new();
        self.drain_into(&mut rest);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(entries: &[Arc<Entry>]) -> Vec<u64> {
        entries.iter().map(|e| e.deadline).collect()
    }

    #[test]
    fn drains_everything_in_push_order() {
        let inbox = Inbox::new();
        assert!(inbox.is_empty());
        for id in 1..=3 {
            inbox.push(Arc::new(Entry::new(id)));
        }
        assert!(!inbox.is_empty());
        let mut out = vec![Arc::new(Entry::new(0))];
        inbox.drain_into(&mut out);
        assert_eq!(
            ids(&out),
            [0, 1, 2, 3],
            "appended after what was there, oldest first"
        );
        assert!(inbox.is_empty());
        inbox.drain_into(&mut out);
        assert_eq!(out.len(), 4);
    }

    #[test]
    fn ownership_passes_through_the_stack() {
        let entry = Arc::new(Entry::new(5));
        let inbox = Inbox::new();
        inbox.push(Arc::clone(&entry));
        assert_eq!(Arc::strong_count(&entry), 2, "the stack owns one count");
        let mut out = Vec::new();
        inbox.drain_into(&mut out);
        assert_eq!(Arc::strong_count(&entry), 2, "now `out` does");
        drop(out);
        assert_eq!(Arc::strong_count(&entry), 1);
        inbox.push(Arc::clone(&entry));
        drop(inbox);
        assert_eq!(
            Arc::strong_count(&entry),
            1,
            "dropping the stack frees its entries"
        );
    }

    #[test]
    fn concurrent_pushes_are_neither_lost_nor_duplicated() {
        let inbox = Inbox::new();
        let mut seen = Vec::new();
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let inbox = &inbox;
                s.spawn(move || {
                    for i in 0..10_000 {
                        inbox.push(Arc::new(Entry::new(t * 100_000 + i)));
                    }
                });
            }
            let mut out = Vec::new();
            for _ in 0..1_000 {
                inbox.drain_into(&mut out);
            }
            seen.extend(ids(&out));
        });
        let mut out = Vec::new();
        inbox.drain_into(&mut out);
        seen.extend(ids(&out));
        for t in 0..4u64 {
            let mine: Vec<u64> = seen
                .iter()
                .copied()
                .filter(|id| id / 100_000 == t)
                .collect();
            let expected: Vec<u64> = (0..10_000).map(|i| t * 100_000 + i).collect();
            assert_eq!(
                mine, expected,
                "each pusher's entries, once each, in its order"
            );
        }
    }
}
