//! # tollgate's design record
//!
//! What tollgate promises, how it is built, the invariants that make it correct and where
//! each one is checked, and where a change goes. It lives in the crate so that it travels
//! with the code; the source files hold the detailed arguments (each concurrent file opens
//! with its own design essay) and this page ties them together.
//!
//! ## 1. Semantics: GCRA
//!
//! A [`Quota`](crate::Quota) is an emission interval `T` and a burst `b >= 1`; the tolerance
//! is `tau = (b - 1)·T`. Each key stores one theoretical arrival time (TAT). A request of
//! `n` cells (`1 <= n <= b`) at `now`:
//!
//! ```text
//! tat0     = max(tat, now)
//! admit_at = tat0 + (n - 1)·T - tau        admitted now iff admit_at <= now
//! new tat  = tat0 + n·T                    stored only on admission
//! n > b    -> never admissible (InsufficientCapacity): never wait for it
//! ```
//!
//! **The window guarantee:** in any window of length `W`, at most `b + floor(W / T)` cells
//! are admitted. A refused check writes nothing. A stored TAT `<= now` carries no
//! information, so expired keys can be forgotten at any time (`src/gcra.rs`; checked against
//! a reference model in `tests/window.rs`, rule by rule on a manual clock in
//! `tests/semantics.rs`).
//!
//! The guarantee holds for admissions computed at *any* `now`s applied in any order, as long
//! as the TAT only moves forward: each admission of `n` cells moves the TAT by at least
//! `n·T` and its instant is at least `TAT - tau` (plus `(n - 1)·T`). This is what lets a
//! waiting queue reserve at an earlier `now` than the real one (section 4).
//!
//! ## 2. Layering
//!
//! ```text
//!   quota, gcra            pure values and functions; import nothing of ours but each
//!                          other (a `Gcra` is made from a `Quota`)
//!   hash, stripe           the default hasher and fingerprints; striped counters (for
//!                          `Stats`); import nothing of ours
//!   sync                   the loom shim: every atomic, lock, Arc and waker
//!   seq                    the two odd/even counters over sync: SeqCount (a seqlock's
//!                          count) and Epoch (the removal epoch), each ordering argued once
//!   time                   Timestamp, Clock, MonotonicClock, the real-time origin and the one
//!                          Instant <-> nanoseconds conversion; imports nothing of ours
//!   error, outcome, stats  values: Error (over time), Admitted (over gcra), Stats (over
//!                          stripe); quota_cell, a limiter's changeable quota (gcra + seq)
//!   timer                  time + sync; knows nothing of keys, rates or clocks. Inside it:
//!                          thread (the global timer and its thread), sleep -> driver
//!                          -> entry, stack; runtime (the opt-in runtime driver) -> thread
//!   clock                  time + timer: ManualClock (a manual timer) and ClockSource
//!                          (a limiter's clock and the sleeps on it)
//!   table                  sharded open addressing; knows nothing of time
//!   engine                 check, peek, penalize, reserve, undo on one state word
//!   wait                   the waiting engine: per-key queues, the hand-over, the waiter's
//!                          state machine; generic over `Cells`, it knows no limiter
//!   limiter, direct        thin public types: find the word (a key's slot, the one word),
//!                          implement `Cells`, and their futures (`limiter/wait.rs`,
//!                          `direct/wait.rs`); the builder lives inside `limiter/`
//!   stack                  check_all over any limiters
//!   inflight, adaptive     beside the limiter, over its public API: per-key permits; per-key
//!                          rates learned from a server, paced by a keyed Limiter
//! ```
//!
//! In the time layers the imports run one way: `time` knows nothing of the timer, the timer
//! reads real time from `time` but knows no clock, and `clock` is the one module that binds
//! the two. A [`ManualClock`](crate::ManualClock) *is* a manual timer: its time is stored
//! once, in that timer, and `advance`/`set` run the timer's turn on the caller. Within the
//! timer, `thread.rs` hands the driver a function to unpark its thread, so `driver.rs` does
//! not import `thread.rs`; `sleep.rs` imports the driver and its entries.
//!
//! Each module imports only modules listed above it in this diagram, never one below it
//! (`outcome` holds values only; `engine` imports it, not the other way).
//!
//! ## 3. The table
//!
//! 64 shards of linear-probing arrays of 16-byte `{fingerprint, state}` slots; the state
//! word is `{live:1 | gen:3 | tat:60}`. Both the shard and the home slot are the top bits of
//! the key's hash times an odd constant, a different one for each (`shard_index` in
//! `src/table/mod.rs`): a fast seeded hash of sequential integers is nearly linear in them,
//! and its raw top bits crowd a few shards. Known keys: lock-free, one CAS. Inserts, reuse of
//! expired slots, compaction, eviction and growth run under the shard lock and re-probe.
//! The cross-key protocol (freeze, then the fingerprint, then a new-generation word) and
//! its ABA bound are written in `src/table/slot.rs`; a forgotten key reads back as its
//! shard's horizon, never earlier than its own last TAT (`src/table/shard.rs`). Memory has a
//! hard cap with an explicit [`FullPolicy`](crate::FullPolicy).
//!
//! **Growth retires nothing.** A shard's slots live in segments that are never moved or freed
//! before the shard (`src/table/array.rs`): growth adds segments after the current slots
//! (two per octave, so a large shard grows by 1.5x and 1.33x in turn), rebuilds the shard
//! over old and new slots under its lock with the compaction's protocol, and publishes the
//! new length with a Release store. A lock-free reader that read the old length probes slots
//! that still exist; one that read the new length sees the new segments. The alternatives
//! were weighed against the check path, which takes no lock: reclaiming outgrown arrays
//! safely needs the reader to announce itself (a per-shard reader count, an epoch pin,
//! hazard pointers), which costs a locked RMW or a full fence on every check, a third or more
//! of scenario A's check without its clock read; growing in place adds no load to a check
//! (the slot address is one directory load from the shard, as the array pointer was) and
//! costs growth a rebuild, about 2.5 moves per key over a shard's life instead of one. Measured
//! in one process against the old table, inserts (C 1.4–1.8x, churn 2.4–3x) and B's
//! `check_at` (1.3–1.7x) first got slower. Most of that was a segment lookup on every probe
//! step; probes now look a segment up once per run of slots (`array.rs`), which brought C to
//! 1.14–1.27x, churn to 1.0–1.5x and B's `check_at` to 1.04x presized, 1.2x growing (noisy).
//! What remains is the density: a shard grown by 1.33–1.5x, and compacted at up to 71 % live,
//! probes further on a miss and compacts twice as often under churn. A and B with the clock
//! read are unchanged within the noise (BENCHMARKS.md, *Growth in place*). Open. Before
//! (outgrown arrays kept until drop): 59 B/key in scenario C, 27 of them retired; after:
//! 20 B/key (BENCHMARKS.md). Loom: "reader in a new segment vs growth" fails when the length's
//! Release store or its Acquire load is made Relaxed.
//!
//! **The full table.** A shard at its cap with nothing expired decides a new key by its
//! [`FullPolicy`](crate::FullPolicy), and that decision used to cost a refused key 2.6–2.7
//! hits and an evicting one about 13 (BENCHMARKS.md, *Full table*): the lock, two more walks of
//! the key's probe run, and for an eviction a 64-slot scan with a modulo and a segment lookup
//! per slot, a tombstone, and a whole-shard compaction every eighth of the shard's slots in
//! tombstones. Two changes, both in `src/table/shard.rs`:
//!
//! * *Refusal at a gate* (`src/table/gate.rs`). A locked refusal at the cap *closes* the
//!   shard's gate, publishing "full until T" (T: the shard's `next_sweep_at`, no held key's
//!   TAT below it) and the horizon. A later new key whose `expired_by` is below T walks its
//!   run lock-free; if it finds neither itself nor an expired key, it is decided as the locked
//!   path would: `f` on the horizon, refused if `f` writes. Every lock holder opens the gate
//!   before it changes a slot (any insert, reclaim, sweep, rebuild, eviction, reset). The
//!   gate is a `SeqCount` (`src/seq.rs`) whose write section is "open", so its argument is the
//!   seqlock's: a reader that validates saw only the slots of one closed interval, in which
//!   no lock holder changed any. So refusals stay exact: a key refused at the gate is one the
//!   locked path would have refused at an instant of the walk. Alternative weighed: a plain
//!   "full" flag without validation is wrong when a rebuild moves a held key under the walk
//!   (a false miss would refuse a held key).
//! * *Eviction in place.* The locked probe that walks the new key's run (it must, to know
//!   the key is absent) also notes the live key with the least TAT on it, and the new key
//!   takes that slot in place with the reclaim protocol (freeze, fingerprint,
//!   new-generation word: `slot.rs`): no tombstone, no compaction, no further scan. This
//!   narrows the victim's choice: in a shard of more than 64 slots the evicted key is the
//!   closest to expiry *on the new key's run* (about 17 keys in a full shard; the first 16
//!   keys from its home if the run holds none); a shard of at most 64 slots still picks
//!   the closest to expiry of the whole shard (the `FullPolicy` docs say so). The
//!   alternatives, an exact shard-wide victim (a lazily refreshed candidate heap; TATs only
//!   grow lock-free, bar refunds), leave a tombstone on all but a few evictions (the victim is
//!   rarely on the new key's run), and tombstones at the cap cost whole-shard compactions or
//!   long probes; backward-shift deletion would avoid them at the price of moving keys under
//!   readers on every eviction. Not done.
//!
//! Measured in one session (BENCHMARKS.md): a refused key 1.3–1.7 hits (target met), an
//! evicting one 2.9–3.2 (from 13; target missed). Loom: "refusal vs reset" fails if a reset
//! opens the gate after its slot writes, or not at all; "eviction in place vs a reader of the
//! victim" fails if the new word is stored before the fingerprint.
//!
//! A profile of the eviction then showed three walks of the new key's run, not two: the
//! check's hot path probed it lock-free and missed, `check_slow` probed it lock-free again
//! (`Table::update_in`), and the locked probe walked it a third time. Three cuts followed:
//!
//! * *No second lock-free walk.* After the hot path's attempt fails, `check_slow` goes
//!   straight to the locked path (`Table::update_recording`). The attempt fails for a missing
//!   key (the lock is needed to insert or evict), a frozen slot (the lock holder is at work),
//!   or a slot that changed hands under the probe (rare); only the last could have been
//!   settled lock-free, and the locked path, which re-probes, is right for it too. Every
//!   insert gains, not only a full table's; `RefuseNewKeys` still refuses lock-free at a
//!   closed gate.
//! * *Single-writer stores for the removal epoch.* A shard's epoch is written only under its
//!   lock, so the lock holder keeps the count (`seq::EpochWriter`, in the shard's `Inner`) and
//!   stores it: a Relaxed store for `begin`, a Release store for `end`, where there were two
//!   locked RMWs per removal. The argument (`seq::Epoch`) asks only that the values grow in
//!   the epoch's modification order and that `end` be a Release a reader can read from; the
//!   lock's release/acquire orders each holder's stores after the last holder's. A direct
//!   limiter's resets run without a lock and keep the RMWs.
//! * *A leaner locked probe.* `probe_locked` kept an `Option<Free>` (tag and index) live
//!   across its loop; it now keeps the first free slot's index alone and reads its kind back
//!   after the walk (fingerprints do not move under the lock).
//!
//! The victim is chosen exactly as before. What an eviction still costs beyond a hit: the
//! hot path's lock-free miss (a walk of the run, fingerprints only), the shard lock (two
//! RMWs), the locked probe (a second walk, with TATs), the victim's freeze (an RMW) and
//! hand-over, and, for the one eviction in six whose run holds no key, a scan of 16 keys and
//! (until the change below) a tombstone, a compaction per ~420–500 evictions. Reusing the
//! hot path's walk under the lock would need a count of locked slot changes for the lock
//! holder to validate it against, and a hot path that collects the least TAT on a miss; not
//! done. Measured with the code before these cuts in the same run (BENCHMARKS.md, *Full
//! table*): an evicting key 3.0–3.2 hits against 3.8–5.0 (a third less time; target still
//! missed), a refused key 1.7–2.3 against 2.2–2.5; hits and scenario A unchanged. Loom: with the single-writer epoch, "undo vs reset" (keyed)
//! fails when `begin_serial` makes both bumps before the removal and `end_serial` none (two
//! bumps become one).
//!
//! *No tombstone from an eviction off the run.* The one eviction in
//! six whose victim is off the new key's run (a large shard's fallback, a small shard's
//! whole-shard choice) used to leave a tombstone, and tombstones at the cap cost a
//! whole-shard compaction every eighth of the slots and longer probes meanwhile. Now the
//! victim's hole is closed by backward-shift deletion (`Shard::close_hole`): each key after
//! it on its own run whose home is not after the hole moves back into it (freeze, hand-over
//! with a new generation, as in a rebuild), and the last hole becomes `EMPTY`; the new key's
//! run is probed again (in a large shard it holds no key: a slot or two). The victim is chosen
//! as before. A shift that moves a key runs inside the `moves` seqlock's write section, since
//! a lock-free probe that looked at the hole before a move and at the moved key's old slot
//! after it misses a held key: `absent_for_sure` (reset) must not trust that miss, and a
//! check's miss goes to the locked path anyway. A moved key is not forgotten (no removal
//! epoch). Resets and sweeps still leave tombstones. Alternative weighed: choosing the
//! fallback victim among keys that end their run (no move, but two or three candidates
//! instead of 16). Measured (BENCHMARKS.md, *Full table: no tombstone from an eviction*): an
//! evicting key 2.44–2.49 hits against 3.17–3.19 for the old code in the same session, the
//! zero-cell breakdown row 2.09–2.15 against 2.19–2.26 (shorter runs without tombstones).
//! Loom: "eviction's backward shift vs reset" fails if the shift is taken out of the `moves`
//! write section; "eviction's backward shift vs update" fails if the moved key's word is read
//! before its freeze rather than taken from the freeze.
//!
//! **The check's hot path** (`engine::check`, `Table::try_update_recording`) is the
//! lock-free attempt alone, inlined into the public method: hash, shard, the home slot (its
//! segment's entry; segment 0's is kept beside the shard's length, since it never changes),
//! the rest of the probe run only if the home slot does not settle it, the removal epoch,
//! the CAS loop, a counter bump. Anything else (a key to insert, a frozen slot, a slot that
//! changed hands under the probe) starts the whole check over out of line
//! (`engine::check_slow`, which re-probes and takes the lock); the GCRA step is pure, so
//! running it twice changes nothing. The rule that shaped it: nothing on the hot path may
//! have its address taken by the out-of-line code. A step capturing `&mut prev`, a closure
//! passed as `&mut f` to the locked path, or the quota passed as one struct made the
//! compiler keep those values in memory, about 15 stores before every CAS, and a locked
//! instruction on x86 waits for the store buffer to drain. Measured with callgrind on one
//! hot key with `check_at`: 226 instructions a check before, about 133 after (134.5, then
//! 132.5 after the fingerprint change; BENCHMARKS.md).
//! "Inlined" is not left to the inliner's judgement at the two joints that decide it
//! (`Limiter::check_n_at` and the key word's `try_update_recording` are
//! `#[inline(always)]`): in a caller from another crate with a bigger body around it
//! (tollgate-tower's `decide`), the inliner left both out of line, and the step's captures
//! went to memory again (75 instructions a request in the tower layer). The table's own
//! `try_update_recording` is `#[inline(always)]` for the same reason: left out of line in a
//! caller's loop, its step spilled (24 stores a check, 12 inlined).
//!
//! ## 4. Waiting: a FIFO queue per key, where only the head holds a reservation
//!
//! A waiter on a key with no queue and a free cell is admitted at once (one CAS). Otherwise
//! it joins the key's FIFO queue, in a side table that `check` never touches, and writes
//! nothing. Only the **head** reserves (one CAS that fixes its admission instant). The
//! queue sleeps on the limiter's timer until then; the timer's wake runs the *hand-over*,
//! which admits the head and reserves for the next waiter at the instant the head was
//! admitted at (the *chain instant*), admitting at once every waiter already due. The
//! detailed argument is `src/wait/queue.rs`.
//!
//! Why not reserve every waiter when it first polls (the first design, and Go's
//! `x/time/rate`): a dropped waiter can then refund only if nobody reserved after it, so
//! every other drop leaves a spent cell. Measured before the change: 200 tasks each looping
//! `timeout(500 ms, until_ready)` on a 100/s key admitted 10 % of the rate (a livelock), and
//! a dropped 300-deep queue locked the key for 3 s. With lazy reservation: 100 % and under
//! one interval (BENCHMARKS.md, scenario G).
//!
//! What the design promises, and what checks it:
//!
//! | promise | why it holds | checked by |
//! | --- | --- | --- |
//! | FIFO per key, one wake per waiter | only the front is ever settled; a node's outcome is settled once, under the shard lock, and its waker taken once | `tests/wait.rs` (`waiters_are_admitted_fifo…`, the mixed-schedule property), loom `loom-tests/wait.rs` |
//! | never early | a node is admitted only when its instant is `<=` the limiter's clock, read under the lock | `tests/wait.rs`, `tests/runtimes.rs` (lower bounds on completion times) |
//! | never over-admitting | every admission is a GCRA reservation CAS; a refund restores exactly the state a never-admitted head wrote, and only in the same incarnation of the key (removal epoch) | window property in `tests/wait.rs`; `a_refund_never_lands_on_a_reset_key…`; loom "stale refund after reset" (keyed and direct) |
//! | a drop costs nothing | a queued node holds nothing; the head's refund cannot fail before its instant (a check's admission would come after it), and the next head reserves at the same chain instant | the drop property in `tests/wait.rs` (a run with drops equals a run without the dropped waiters); `tests/runtimes.rs::timeouts_keep_the_rate` on five executors and the issue's loop (200 tasks, 100/s, 500 ms) under tokio's and async-std's own timeouts and on threads, at least 90 % of the rate and never ahead of it counted from the start (on the instants the wakes were read); the reference-model property in `tests/wait.rs`; loom "cancel vs hand-over" |
//! | a late hand-over costs nothing | the next head reserves at the chain instant, not at the hand-over's `now` | `tests/wait.rs::a_late_clock_admits…` |
//! | a forgotten future stalls nobody | the queue moves on the timer's wake, never on a future's poll | `tests/wait.rs::a_forgotten_waiter…`, `tests/runtimes.rs`, loom "forget vs hand-over" |
//! | bounded waits hold nothing | refused up front on the prediction (head reservation + queued cells); refused by the hand-over or by their own deadline sleep if it is upset | `tests/wait.rs::a_bounded_wait_whose_prediction_is_upset…` |
//! | no task code under a lock | wakers of settled nodes are woken after the shard lock is released; no lock is held across `.await` | argued in `src/wait/waitlist.rs` (no test can show its absence) |
//! | a key forgotten while waiters queue (reset, eviction) | its state goes, its queue stays: the head keeps its instant, the next head starts the key's new history (with its burst); with no room to store the key again the waiters behind fail with `TableFull` at once | `tests/wait.rs::a_reset_with_waiters_queued…`, `a_key_evicted_while_its_waiters_queue_is_forgotten_as_by_a_reset`, `a_hand_over_that_finds_no_room_for_its_key_fails_its_waiters_with_table_full` |
//! | bounded memory | a queue is removed when it empties; cancelled nodes are compacted once they are half the queue | `tests/wait.rs::a_million_keys_with_waiters_hold_bounded_memory_and_give_it_back` (at most 512 bytes a waiter, every byte back), `queues_free_their_memory_when_they_empty`; `tests/wait_memory.rs` (counted by the allocator: at most 512 bytes a waiter beyond its future, about 300 measured, and a second round keeps no byte); `src/wait/queue.rs::compact` |
//!
//! **What an admission costs.** With many keys (F2: 1,000 keys x 10 tasks) the hand-over is
//! bound by cache misses, one per object it must touch (timer entry, hand-over waker, queue,
//! front and next node, the key's slot, the woken task) plus the foreign-thread wake of a
//! tokio task. It allocates nothing per admission beyond the waiter's node (a queue's heads
//! share one timer entry; settled wakers are collected inline), reads the clock once (the
//! head's sleep registers at the time the hand-over read under its lock), and an arrival
//! behind a sleeping head skips the hand-over. What is left above the ideal, and what it
//! would take to go further, is measured in BENCHMARKS.md ("Waiting: the hand-over's cost").
//! Merging the queue, its lock and its timer waker into one allocation (no map lookup on
//! the timer's path), and copying each waiter's reservation fields into the queue's ring,
//! were tried and measured, and moved F2 by nothing beyond the noise: the hand-over's cold
//! line was the queue itself, and the arrival that follows it then pays the map's bucket
//! cold instead ("Tried and not kept: each key's queue in one allocation").
//!
//! Checks and waiters share a key: the head's reservation is in the key's state, so a
//! check cannot take the cell the head waits for; a check gets a cell only if the queue
//! leaves it unclaimed (its hand-over runs later than one interval after the head's instant).
//! After a stall of the whole process, waiters whose instants passed are released together,
//! like a timer that catches up on missed ticks.
//!
//! The stream adapter `Paced` is the direct limiter's only: a keyed wait can fail (a full
//! table that refuses new keys), which a stream of the inner items could only swallow or
//! end on. Per key, `stream.then(|item| limiter.throttle(&key, async { item }))` paces the
//! same way and hands each failure to the caller.
//!
//! A `reset` with waiters queued forgets the head's reservation with the
//! rest of the key's history: checks may take the fresh burst, the head is still admitted at
//! its instant, and the waiters behind it reserve in the new history
//! (`tests/wait.rs::a_reset_with_waiters_queued_…`). A deadline already past is a wait of
//! zero (admitted if a cell is free now), on the lock-free first try and the queued path
//! alike.
//!
//! ## 5. The timer
//!
//! One lazily started thread per process, a lock-free registration stack, a binary heap
//! that only the driver touches, fence-paired unparking (the lost-wakeup argument is in
//! `src/timer/driver.rs`), batches fired outside the lock with each waker in
//! `catch_unwind`, and coalescing: a sleep that ends a wait of `w` may fire up to
//! `min(w / 256, 1 ms)` late, never early. A [`ManualClock`](crate::ManualClock) is a manual
//! timer, driven on the thread that moves it, so waits can be tested on fake time.
//!
//! **The runtime driver (opt-in).** The thread costs every batch one park/unpark cycle and
//! every admitted task a wake from a foreign thread, which is most of what kept F1 and F2 above
//! 1.2x the ideal (BENCHMARKS.md). `timer::drive(sleep_until)` is a future the user spawns on
//! the runtime: while it is polled, the global timer's turns (and so the waiting queues'
//! hand-overs) run inside it on a worker, sleeping with the runtime's timer until the timer's
//! next wake-up (the same coalesced instant the thread would use: waking at the bare
//! deadline and leaving the batching to tokio's 1 ms wheel cost F1 30 % more CPU, with no
//! better lateness under load), and registrants wake it through an `AtomicWaker`. The
//! runtime's sleep is polled with a waker of tollgate's whose wake runs a turn right there,
//! then wakes the task to re-arm the sleep: on tokio that wake comes from the worker's park,
//! where tokio queues the tasks a timer wakes and notifies an idle worker once when the
//! park ends, whereas a wake from inside a task's poll notifies (a futex wake) per task.
//! That extra turn is one more task-role turn, always safe, and nothing depends on it
//! having run. The core stays runtime-free: the runtime's sleep is a closure the caller passes. The
//! thread stays as a backstop, firing only what the task is 10 ms late for: a blocked
//! runtime, a forgotten future or a crashed task delay sleeps by at most that, never
//! forever. Both drivers keep a wake-up of their own; each turn and each registration keeps
//! both covering the heap (`src/timer/driver.rs`, "A second driver"; five loom models in
//! `loom-tests/timer.rs`, `backstop_*` and `stray_task_turn_vs_registrant`).
//! One driver at a time: a second `drive` completes at once. A standby that takes over when
//! the first detaches would need a waiter list on a path that only matters with several
//! runtimes, and the thread already takes over at once.
//!
//! ## 6. Loom
//!
//! `--cfg tollgate_loom` (never a bare `loom` cfg). Models in `loom-tests/`: `models.rs` (the
//! table and the limiters), `timer.rs` (registration, firing, lost wake-ups, the runtime
//! driver's backstop and detach), `wait.rs` (the queue: cancel vs hand-over, drops, forget,
//! stale refund after reset, check vs hand-over), `inflight.rs` (acquire, release and cancel
//! on one key). The models of `wait.rs` and the timer's recycle and
//! driver models name the injected fault each was shown to fail on; most of `models.rs`'s
//! and the timer's registration and fire/drop models do not record one.
//! The full table's models (in `models.rs`): "refusal vs reset" (the gate), "eviction in
//! place vs a reader of the victim" and the eviction's backward shift vs a reset and vs an
//! update of the key it moves (§3).
//!
//! The repeated idioms are written once, in `src/seq.rs`, and checked through their users:
//! `SeqCount` (the quota cell, a shard's `moves` count of rebuilds and backward shifts, the
//! full-table gate) fails "quota change
//! vs check" when `end`'s Release, `read_begin`'s Acquire, `begin`'s Release fence or
//! `validate`'s Acquire fence is dropped, and "reset vs compaction" too for the first two;
//! `Epoch` (a shard's removals, a direct limiter's resets) fails "undo vs reset" (keyed and
//! direct) when its two bumps become one before the removal, for the keyed shard's
//! single-writer stores (`begin_serial`/`end_serial`) as for the RMWs. Dropping only
//! `begin_serial`'s store (one bump, after the removal) fails no model: in a shard every new
//! incarnation is stored after `end`, and a frozen slot sends an undo to the lock. `Epoch`'s Release/Acquire pair
//! orders a writer's CAS after the removal's writes; loom cannot show it missing, because a
//! loom RMW always reads the latest value, so no model can make that CAS land before them.
//!
//! The epoch alone does not protect an undo whose load and epoch check come before a whole
//! reset and whose CAS comes after a re-admission to the same TAT: the CAS must tell the
//! incarnations apart. A keyed slot's word carries a generation that re-insertion advances;
//! the direct word carries one that `reset` advances (`direct::Shared::new_incarnation`).
//! "undo during reset" (direct) fails without it.
//!
//! ## 7. Where a change goes
//!
//! | change | file |
//! | --- | --- |
//! | what a quota means, its constructors | `src/quota.rs` |
//! | the GCRA arithmetic | `src/gcra.rs` |
//! | what a timestamp is, the `Clock` trait, real time | `src/time.rs` |
//! | which timer a limiter's clock sleeps on, the manual clock | `src/clock.rs` |
//! | how keys are stored, reclaimed, evicted | `src/table/` |
//! | how a key becomes its fingerprint, the default hasher | `src/hash.rs` |
//! | a builder option (capacity, shards, policy, clock, router) | `src/limiter/builder.rs` |
//! | an error, an admission's values (`Admitted`, its header values) | `src/error.rs`, `src/outcome.rs` |
//! | a counter of `stats()`; per-thread stripes | `src/stats.rs`; `src/stripe.rs` |
//! | changing a limiter's quota at run time | `src/quota_cell.rs` |
//! | an atomic, lock or `Arc` (so that loom sees it) | `src/sync.rs` |
//! | a new check-like operation | `src/engine.rs` (once), then a method in `src/limiter/mod.rs` and `src/direct/mod.rs` |
//! | what undo promises | `src/engine.rs` |
//! | the removal epoch (`Epoch`), a seqlock (`SeqCount`), their ordering | `src/seq.rs` |
//! | who is admitted when, among waiters | `src/wait/queue.rs` |
//! | what the waiting engine needs of a limiter | `src/engine.rs` (`Word`), `src/wait/cells.rs` |
//! | a new waiting future or adapter | `src/limiter/wait.rs`, `src/direct/wait.rs` (and `pace.rs`), `src/wait/throttle.rs` |
//! | stacked limits | `src/stack.rs` |
//! | when the timer thread wakes | `src/timer/driver.rs`, `src/timer/entry.rs` (the thread itself: `thread.rs`; a sleep: `sleep.rs`) |
//! | a queued waiter, its future's states, blocking | `src/wait/node.rs`, `waiter.rs`, `blocking.rs` (the queues of a shard: `waitlist.rs`; wakers collected in a hand-over: `woken.rs`) |
//! | the runtime driver, its backstop | `src/timer/runtime.rs` (the future), `src/timer/driver.rs` (the two-driver protocol) |
//! | per-key concurrency limits: who gets a permit, when a key's state goes | `src/inflight/table.rs` (the public types: `src/inflight/mod.rs`) |
//! | how a key's learned rate moves on success, throttle, announced policy | `src/adaptive/state.rs` (bounds and gains: `config.rs`; the bounded store: `table.rs`) |
//! | HTTP clients: reading 429/503, `Retry-After`, `RateLimit` fields | `crates/tollgate-client/src/signal.rs` |
//! | the retry schedule (backoff, jitter, give-up) | `crates/tollgate-client/src/retry.rs` |
//! | the polite client layer: permit, rate, retries, per-host counters | `crates/tollgate-client/src/layer.rs`, `hosts.rs` (reqwest as the inner service: `reqwest.rs`) |
//! | HTTP servers: key sources, headers, modes (a tower `Layer`) | `crates/tollgate-tower/` (key sources: `key.rs`, a fallback key with `.or()`: `fallback.rs`; what every clone shares: `config.rs`; stacked limits: `stack.rs`; the response future: `future.rs`; the decision in `call`: `decide.rs`; the options: `builder.rs`; the Layer and the Service: `layer.rs`, `service.rs`; the modes: `mode.rs`, delay mode's wait: `delay.rs`, dry-run: `dry_run.rs`; forwarding headers, walked from the right without allocating: `forwarded.rs`; the response fields, `RateLimit-Policy` rendered once per quota and `RateLimit` written without `format!` into a stack buffer and made a header value without the `http` crate's byte check, the one `unsafe` of the crate, its invariant held by the `SfString` type (they were most of the layer's per-request cost): `fields.rs`; how a refusal is rendered, HTTP, problem+json or gRPC: `refusal.rs`; decision counts, a stripe per thread bumped without a locked instruction, under the core's `src/stripe.rs`: `counts.rs`) |
//! | one limit across a fleet (Redis), its fault policies | `crates/tollgate-redis/` (the script: `script.rs`; when the fast path may refuse: `cache.rs`, `offset.rs`; reserving and refunding waits: `wait.rs`; leases of cells for hot keys and their over-admission bound: `lease.rs`; the limiter and its fault policies: `limiter.rs`; the circuit breaker: `breaker.rs`; the fleet's size counted in Redis for the default fault policy: `presence.rs`; a timeout and refunds without a runtime: `rt.rs`) |
//! | a test of a promise | `tests/` (one file a topic: `semantics.rs`, `window.rs`, `table.rs`, `wait.rs`, `runtimes.rs`, ...), or the integration crate's `tests/` |
//! | a loom model | `loom-tests/` (`models.rs`, `timer.rs`, `wait.rs`, `inflight.rs`), with the fault it fails on |
//! | a figure | `benches/` (or the integration crate's `benches/`), then `BENCHMARKS.md` |
//! | what CI runs | `.ci/run` (and its helper scripts in `.ci/`) |
//!
//! Integration crates live in `crates/`, one folder each, as members of the workspace (the
//! README's `cargo test --workspace` runs their tests), each with the dependencies its field
//! expects; commands at the root act on the core alone, whose dependency tree stays
//! crossbeam-utils, atomic-waker, futures-core and foldhash. They use the core only through
//! its public API.
//!
//! ## 8. Figures to beat
//!
//! Every figure is measured in one process run beside governor 0.10 (keyed) and, where it
//! makes sense, an *ideal*: the cheapest code that does the same job with no generality
//! (below). Medians over rounds with min–max, as ratios of medians, except the waiting
//! scenarios' ratio to their ideal: the median of round-by-round ratios, each from two runs
//! back to back (steadier on a loaded machine). Results and the commands that produced them
//! are in `BENCHMARKS.md`. Tests never assert a time: speed lives in
//! `benches/`.
//!
//! The *live* quota, one cell an hour with a burst of 100,000, never denies, so every key a
//! scenario touches stays live and the table really holds it. The *check ideal* is a
//! preallocated array of `AtomicU64` indexed by a multiply-shift of the key, with no
//! collision handling, reading `std::time::Instant` like the default clock. The *waiting
//! ideal* is one `AtomicU64` reservation per key plus a tokio `sleep_until`.
//!
//! | scenario (`benches/`) | target |
//! | --- | --- |
//! | A. one thread, one hot key (`check.rs`) | <= 1.2x the check ideal |
//! | B. one thread, 1M live keys in random order | <= 1.3x the check ideal |
//! | C. 5M new live keys inserted | <= 0.7x governor's time; <= 24 B/key growing, <= 20 B/key presized; every key still held |
//! | D. two threads, one key, denied | <= 1.3x the check ideal |
//! | E. two threads, 1M shared live keys | <= 1.5x the check ideal |
//! | F. a full table, 16,384 keys at the cap (`check.rs`) | a refused or evicting new key <= 2x a hit |
//! | F1. 10,000 tasks on one key, 20,000/s burst 1 (`wait.rs`) | >= 99.5 % of the rate, no task starved, p99 wait beyond the fair share <= 2 ms, CPU per admission <= 3 µs and <= 1.2x the waiting ideal |
//! | F2. 1,000 keys x 10 tasks, 50/s each | as F1, CPU per admission <= 1.5 µs |
//! | G. 200 tasks on one key, 100/s burst 1, each looping `timeout(500 ms, until_ready)` | >= 99.5 % of the rate (the issue asked 99 %), at most rate + burst (101) admissions in any second |
//! | lockout: 300 queued waiters dropped at once | the key free again within one interval plus the timer's lateness |
//! | timer lateness | median <= 100 µs, p99 <= 1 ms, never early |
//!
//! Growth in place met C's and churn's memory targets (20.1 B/key growing, 32.3 B per live key
//! under churn); with probes stepping a segment run at a time, C's insert time is 1.14–1.27x
//! the old table's, churn's 1.0–1.5x and B's `check_at` 1.04x presized and about 1.2x growing
//! (the denser table; BENCHMARKS.md, *Growth in place*). F: a refused new key is 1.3–1.7x a
//! hit (met), an evicting one 2.9–3.2x (missed; §3, *The full table*); after the cuts of §3,
//! measured beside the code before them (2.2–2.5x and 3.8–5.0x), 1.7–2.3x and 3.0–3.2x; with no tombstone from an off-run eviction (§3), an evicting key 2.4–2.5x
//! against 3.2x for the code before in the same session.
//!
//! Waiting (quiet machine, CPU per admission against the waiting ideal,
//! paired per round): with the runtime driver (§4) F1 0.58x and F2 1.50x, p99 beyond the
//! fair share 1.9 ms; with the timer thread alone F1 1.58x and F2 1.88x, p99 under 1 ms
//! (earlier runs: driver F1 0.65–0.9x, F2 1.5–1.8x; thread F1 1.6–1.9x, F2 1.9–2.4x). F2's
//! 1.2x is missed by both: each hand-over touches about seven cold objects where the ideal
//! touches two (§4, *What an admission costs*; BENCHMARKS.md). F1's is missed by the thread
//! alone: each of its turns (about 1,000 a second, the coalescing's cap) costs that thread a
//! timed park and the syscalls that wake tokio's parked workers from outside, about 32 µs,
//! 1.6 µs an admission, which the runtime driver does not pay. G, the lockout and the
//! timer's lateness are met.
//!
//! On a million live keys in random order (B, E) a check's cost is set by two things the
//! code barely touches (BENCHMARKS.md, *A million live clients*): a clock read per check
//! keeps the CPU from overlapping one check's cache miss with the next, so each check pays a
//! whole memory latency; and that latency follows the table's footprint against the cache
//! (not the TLB: huge pages did not help). Exact keys need a 64-bit fingerprint beside the
//! 64-bit state, 16 bytes a key at best, where the ideal holds 8 and shares slots between
//! colliding keys, so the ratio to the ideal on B has a floor that depends on the machine's
//! cache (1.4x or more on the Intel guest measured). What a caller can do: presize
//! (a denser table) and read the clock once per batch (`check_at`). A home at the first slot
//! of a line-aligned group of four (one line per lookup, matched without branches) was
//! measured and not kept: faster on random keys with the clock hoisted, slower on the hot
//! key (A) by an eighth, unchanged on B with the clock read per check.
//!
//! The HTTP layer (`crates/tollgate-tower/benches/http.rs`; target: >= 98 % of a
//! hello-world hyper server's throughput, ahead of tower_governor) is measured as each
//! layer's CPU per request in process, set against the loopback server's own CPU per
//! request (9–11 µs here), because loopback rates on two shared cores swing by more than the
//! 2 % being measured. Two floor rows say what no layer could beat: two fixed fields with
//! no limiter at all cost about 115 ns, so the ideal decision plus the fields already sits
//! at 97.8–98.0 % with one client and below 98 % with 10,000 keys; the fields on (the
//! default) cannot reach the target on this server, and cost 0.6–0.9x what tower_governor's
//! own headers cost. Fields off matches tower_governor with keys that stay live; with one
//! client it trails by the clock read alone (on a TSC clock it is level or ahead), and with
//! keys that expire between visits by the re-insertion under the shard lock that bounded
//! memory costs (a map that never forgets a key does not pay it). The default clock stays
//! `Instant`: monotonic everywhere, where a raw TSC is not; tollgate-tower's docs show how
//! to plug a TSC clock in where it is safe.
//!
//! The default table cap (`1 << 23`, about 8.4M keys) must hold scenario C (5M live keys):
//! it bounds memory and is not a preallocation. Targets are for the default configuration.
//!
//! Hashing: SipHash costs about 10 ns a key, a large share of scenario A. The default is a
//! foldhash seeded per limiter: not a keyed PRF, but nobody outside the process knows the
//! seed, which is enough for a proxy's keys; `--no-default-features` keeps SipHash.
//!
//! ## 9. Per-key concurrency limits
//!
//! [`InFlight`](crate::InFlight) caps the permits out per key (the scraper's per-site
//! semaphore). It sits beside the rate limiter, not on it: it imports `sync`, `hash` and
//! `wait::block_on` and nothing of the table, the engine or the timer, and it reads no
//! clock. A key's state is `{ out, FIFO of waiters, cancelled }` in a sharded table of
//! **mutex-protected** maps, present only while the key has permits out or waiters. A lock
//! per shard is deliberate: a permit goes around a request, not a packet, an acquire and a
//! release must move the count and the queue together, and a short critical section is
//! cheaper than a lock-free queue would be. `benches/inflight.rs` measures it beside a tokio
//! `Semaphore` per key in a `Mutex<HashMap>`, as per-host code usually writes it (never
//! removing a key) and in a reclaiming variant (a permit's drop removes the semaphore under
//! the map lock once its reference count is 1, bounded memory like ours), and beside a
//! `DashMap` of semaphores. Full run on the 2-core machine (BENCHMARKS.md, *Per-key
//! concurrency*): on one hot key 1.3x the plain map and 2.1x the reclaiming one; over a
//! million keys one at a time 5–6x the plain map and the `DashMap`, 2.2x the reclaiming one;
//! with a million keys holding permits at once 0.66–0.74x the semaphore maps (their release
//! never touches the map, and they keep every key) and 1.7x the reclaiming one.
//!
//! | promise | why it holds | checked by |
//! | --- | --- | --- |
//! | never more than N out per key | `out` moves only under the shard lock; a permit is taken only when `out < max` | `tests/inflight.rs` (threads and tasks hammering one key), loom "two acquirers" |
//! | FIFO, no barging | a first poll or `try_acquire` takes a permit only when the queue is empty; a release grants the front; the front is never left queued while there is room | `tests/inflight.rs::waiters_are_granted_in_fifo_order`, `no_barging…` |
//! | no lost wake-up | the future registers, then re-reads; a grant stores, then takes the waker; wakers are woken after unlocking | loom "poll vs release" (fails without the re-read, or with the take first) |
//! | cancel-safe | a queued future's drop unlinks it (lazily, compacted at half the queue); a granted, unpolled one gives its permit to the next waiter | `tests/inflight.rs` (cancel head, middle, last; granted-unpolled), loom "cancel vs release" |
//! | a forgotten future stalls nobody | grants need no poll; the forgotten one keeps the one permit it is granted, forever | `tests/inflight.rs::a_forgotten_waiter_costs_exactly_one_permit` |
//! | bounded memory | a key's entry is removed when `out` returns to 0; a shard's map shrinks when it empties out | `tests/inflight.rs::idle_keys_are_reclaimed` |
//!
//! With a rate limit on the same key, take the permit first, then wait for the rate cell
//! (the argument and an example are on [`InFlight`](crate::InFlight)).
//!
//! ## 10. Rates learned from the server, and the client
//!
//! [`AdaptiveRate`](crate::AdaptiveRate) keeps, per key, a rate between a floor and a ceiling
//! and paces the key through a keyed [`Limiter`](crate::Limiter) with per-call quotas
//! (`until_ready_with` under the key's rate, burst 1): waiting stays the limiter's FIFO queue
//! on tollgate's timer, and a server's `Retry-After` is a `penalize` of the key. It needs no
//! dependency, so it lives in the core; it adds no atomics (its per-key state sits in a few
//! mutex-protected maps, bounded by a capacity with the least recently used key of a shard
//! evicted: an adaptive rate tracks hosts, not packets).
//!
//! The rule is a bisection, not a sawtooth. A plain AIMD keeps crossing the server's rate:
//! each crossing costs a 429 and, with `Retry-After` rounded up to whole seconds, a stall of
//! a second, so it cannot hold within 5 % of the rate with under 1 % of 429s. Instead: a fast
//! start (additive per success, so about exponential in time) until the first throttle; then
//! the lowest throttled rate U and the highest rate that drew `confirm` successes in a row
//! L bracket the server's rate, the next rate tried is `(L + U) / 2`, and once `U - L` is
//! within `band × U` the key settles half a band under L. A server with `e` cells of burst
//! slack refuses a rate `ε` over its own after about `e / ε` requests, so `confirm`
//! successes tell apart rates more than `e / confirm` over it; the half band covers the rest.
//! A throttle at or under L forgets L (it was wrong, or the server slowed down); a quiet
//! `reprobe` period moves U up two bands (the server may have sped up). An announced policy
//! (`RateLimit-Policy`) replaces all of this: the key is paced to it exactly. So the server
//! side (tollgate-tower) must never announce more than it enforces: `w` is whole seconds,
//! and a rate that does not divide a second has its interval rounded up to the nanosecond,
//! so it announces `q <= burst` cells per `w` with `q` intervals fitting in `w` seconds
//! exactly, the closest such pair it finds (30/s is `q=29;w=1`; rounding the window up from
//! the rounded interval once gave `q=30;w=2`, and clients went at half the rate).
//!
//! The HTTP side lives in `crates/tollgate-client`, over the core's public API only: parsing
//! of the response's signals (429/503, `Retry-After` as seconds or HTTP-date, the IETF
//! `RateLimit`/`RateLimit-Policy` structured fields, legacy `X-RateLimit-*`; a field that
//! does not parse is ignored whole, never a panic), the retry policy, and the tower layer.
//! The retry policy is generic (it knows no HTTP) but lives in the client crate: it is a
//! client's concern, not a rate limiter's, it wants a PRNG for jitter (`fastrand`) that the
//! core's fixed dependency list does not have, and it needs only the core's public timer.
//! Per attempt the layer takes the host's [`InFlight`](crate::InFlight) permit, then its turn
//! at the rate (the order §9 argues), sends, releases the permit, and feeds the response
//! back; GET/HEAD/OPTIONS are retried on 429, 5xx and transport errors, never on another
//! 4xx.
//! A single 429 is weak evidence when the client itself may have bunched the requests: on a
//! loaded machine the turns of several waiters come due during a scheduling stall and go out
//! together, and a server with a small burst (3 cells at 80/s tolerate 25 ms) refuses the
//! clump at a rate that is truly safe. Taken as a rate signal, each such 429 lowered U, the
//! strikes then forgot L, and a key sat at half the hidden rate for minutes (the reprobe, a
//! climb of 6 % per 30 s, cannot undo that in time). So the layer, which knows when each
//! attempt left, keeps each host's last 8 send instants; when a 429 (or 503 with
//! `Retry-After`) comes, it replays the sends up to the refused one through a GCRA of the
//! host's paced interval and burst 1, and if one came more than half an interval early the
//! client broke its own pacing: the 429 is an overrun
//! ([`AdaptiveRate::overrun`](crate::AdaptiveRate::overrun)): its `Retry-After` applies, U
//! and L stay. An evenly paced rate over the server's still draws 429s on evenly spaced
//! sends, so it is still found; only the refusals the client caused itself are discounted
//! (all 429s still count in the host's counters and in `converge.rs`'s < 1 %).
//! reqwest's client serves its own request type; the few lines that adapt it to `http`
//! types (`Reqwest`) are in the crate behind the `reqwest` feature, off by default, so the
//! dependency is paid only by its users.
//!
//! | promise | why it holds | checked by |
//! | --- | --- | --- |
//! | each signal moves the rate as documented, within floor and ceiling | the pure rules in `state.rs` | `tests/adaptive.rs` (manual clock), unit tests in `src/adaptive/state.rs` |
//! | a `Retry-After` holds the key back, capped; a shorter one never pulls it in | `Limiter::penalize` keeps the later admission | `tests/adaptive.rs::retry_after_pushes…` |
//! | bounded memory | at most `ceil(capacity / shards)` keys a shard; the client's counters likewise | `tests/adaptive.rs::memory_is_bounded…`, `crates/tollgate-client/src/hosts.rs` |
//! | malformed fields never panic and never half-apply | a field that does not parse is ignored whole | `crates/tollgate-client/tests/signal.rs` |
//! | converges within 5 % under a hidden rate, < 1 % 429s after | the bisection above; bunched sends do not move the bracket | `crates/tollgate-client/tests/converge.rs` (real hyper servers behind tollgate-tower, run 4 at once on 2 cores), `crates/tollgate-client/tests/layer.rs::a_429_of_requests_the_client_sent_bunched…` |
//!
//! ## 11. Who the client is, behind proxies
//!
//! `tollgate-tower`'s [`ClientIp`] is nginx's `real_ip_recursive`: from the peer address,
//! while the address in hand is a trusted proxy, step to the next forwarding element from
//! the right. Everything left of the last element a trusted proxy wrote is the client's to
//! choose, so two rules keep it from choosing anything:
//!
//! * *Judge only what the walk reaches.* The field's raw bytes are split from the right
//!   (for `Forwarded`, at commas outside quoted strings, a quote being a delimiter unless an
//!   odd run of backslashes precedes it, which in a well-formed element never reaches left
//!   of it), and each element is parsed when the walk asks for it. A non-ASCII byte, an
//!   unterminated quote or a grammar error left of the client's address changes nothing. A
//!   parser that rejected the whole field for one such byte let any client behind an
//!   appending proxy fall back to the proxy's key.
//! * *What cannot be attributed is nobody's.* A walk that reaches an element naming no
//!   address has no client: keying it by the last trusted address would put every such
//!   sender in the proxy's bucket (its health checks refused), and keying it by anything
//!   further left would let the client choose. It gets the missing-key policy (a 400 by
//!   default), is counted (`Counts::unattributable`), and a fallback key source (`.or()`)
//!   is not consulted for it. A stacked per-client limit follows the same policy, so it
//!   cannot be escaped that way either.
//!
//! A server that records no peer address makes every request keyless; the first such
//! request logs a `tracing` warning naming the fix, and each is counted
//! (`Counts::no_peer_address`).
//!
//! | promise | why it holds | checked by |
//! | --- | --- | --- |
//! | a client behind a trusted proxy cannot spend the proxy's key, nor pick one | the walk above | `crates/tollgate-tower/tests/keys.rs` (`garbage_left_of_the_proxys_entry…`, over IPv4 and a dual-stack socket; `unattributable_requests_get_the_missing_key_policy`), `src/forwarded.rs` unit tests (`what_the_client_writes_cannot_change_the_hops_right_of_it`) |
//! | a misconfigured server is told | a once-per-process warning, a count | `crates/tollgate-tower/tests/misconfigured.rs` |
//!
//! [`ClientIp`]: https://docs.rs/tollgate-tower
