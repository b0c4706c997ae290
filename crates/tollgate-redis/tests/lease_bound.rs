//! The lease bound, checked exactly: the script's own arithmetic (its text from
//! `src/script.rs`, run by a real `redis-server`) on a simulated server clock, under seeded
//! adversarial schedules of nodes that take leases, spend their cells at any instant of
//! their hold (or not at all), let them expire, give unspent cells back or lose them, beside
//! a node that checks cell by cell; and two scripted cases, the one the bound's `L` term is
//! for (it is reached: more than a plain GCRA's `b` at one instant) and give-backs where
//! they matter (a script giving back one cell too many fails it). Every window between two admissions is counted against
//! the bounds `lib.rs` states: `b + floor((W + L) / T)`, and `b + floor(W / T)` plus the
//! leased cells held unspent when the window opened.

mod common;

use common::RedisServer;

/// The script exactly as the limiter runs it.
fn script_text() -> String {
    let source = include_str!("../src/script.rs");
    let start = source
        .find("GCRA_LUA: &str = r#\"")
        .expect("the script's start")
        + 20;
    let len = source[start..].find("\"#;").expect("the script's end");
    source[start..start + len].to_owned()
}

/// splitmix64: a deterministic schedule per seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// How a leasing node spends its cells.
#[derive(Clone, Copy, Debug)]
enum Style {
    /// Whenever it is picked.
    Eager,
    /// Only in the last interval of the hold: cells granted early, spent late.
    Late,
    /// The first cell only: the rest expire unspent (given back, or lost).
    Abandon,
    /// Four times in five.
    Random,
}

impl Style {
    fn pick(rng: &mut Rng) -> Style {
        [Style::Eager, Style::Late, Style::Abandon, Style::Random][rng.below(4) as usize]
    }

    fn spends(self, rng: &mut Rng, now: u64, l: Lease, hold: u64) -> bool {
        match self {
            Style::Eager => true,
            Style::Late => now + T > l.at + hold,
            Style::Abandon => false,
            Style::Random => rng.below(5) != 0,
        }
    }
}

/// A lease a node holds: taken at `at`, `cells` granted, `spent` of them spent so far, and
/// the TAT it stored (what a give-back compares against).
#[derive(Clone, Copy, Debug)]
struct Lease {
    at: u64,
    cells: u32,
    spent: u32,
    written: u64,
}

const T: u64 = 10_000; // µs

/// A schedule's quota and leases: burst `b`, cells a lease asks for `k`, hold `l` (µs). A
/// hold shorter than a lease's cells' span (`l < k·T`) makes give-backs matter: an expired
/// lease's TAT is then still ahead of the server's clock.
#[derive(Clone, Copy, Debug)]
struct Params {
    b: u64,
    k: u64,
    l: u64,
}

const PARAMS: [Params; 3] = [
    Params {
        b: 5,
        k: 3,
        l: 50_000,
    },
    Params {
        b: 10,
        k: 8,
        l: 30_000,
    },
    Params {
        b: 4,
        k: 4,
        l: 5_000,
    },
];

/// One call of the script at simulated instant `now`.
fn call(
    script: &redis::Script,
    conn: &mut redis::Connection,
    (key, b): (&str, u64),
    op: &str,
    n: u64,
    args: (u64, u64, u64),
    now: u64,
) -> Vec<i64> {
    script
        .key(key)
        .arg(op)
        .arg(T)
        .arg(b)
        .arg(n)
        .arg(args.0)
        .arg(args.1)
        .arg(args.2)
        .arg(now)
        .invoke(conn)
        .unwrap()
}

#[test]
fn every_window_of_every_schedule_keeps_the_lease_bounds() {
    let server = RedisServer::start();
    let mut conn = server.conn();
    let script = redis::Script::new(&script_text());
    let mut windows = 0u64;
    for seed in 0..36u64 {
        let key = format!("bound-{seed}");
        let Params { b, k, l: hold } = PARAMS[seed as usize % PARAMS.len()];
        let mut rng = Rng(seed);
        // The schedule's cast: one to three leasing nodes, each with a way of spending
        // (seeded), and in every other schedule a node that checks cell by cell.
        let nodes = 1 + (seed % 3) as usize;
        let checker = seed % 2 == 0;
        let styles: Vec<Style> = (0..nodes).map(|_| Style::pick(&mut rng)).collect();
        // Simulated time starts a second ahead of the server's own, and only moves forward.
        let mut now = server.time_us() + 1_000_000;
        let mut leases: Vec<Option<Lease>> = vec![None; nodes];
        // Every admission's instant, and every lease (for the held cells).
        let mut admitted: Vec<u64> = Vec::new();
        let mut history: Vec<(Lease, Vec<u64>)> = Vec::new();
        let mut current: Vec<Option<usize>> = vec![None; nodes];
        for _ in 0..3_000 {
            now += rng.below(T / 4); // often several events at one instant
            let node = rng.below(nodes as u64 + u64::from(checker)) as usize;
            if node == nodes {
                // A node without leases: one cell by the script's check.
                let r = call(&script, &mut conn, (&key, b), "check", 1, (0, 0, 0), now);
                if r[0] == 1 {
                    admitted.push(now);
                }
                continue;
            }
            match leases[node] {
                Some(l) if now <= l.at + hold && l.spent < l.cells => {
                    // Spend a cell of the lease, or sit on it, as the node's style says.
                    if styles[node].spends(&mut rng, now, l, hold) {
                        let l = leases[node].as_mut().unwrap();
                        l.spent += 1;
                        admitted.push(now);
                        history[current[node].unwrap()].1.push(now);
                    }
                }
                held => {
                    // Take a new lease, giving back the unspent cells of an expired one (or
                    // losing them: a give-back that never reached the server).
                    let give = match held {
                        Some(l) if now > l.at + hold && rng.below(5) != 0 => {
                            (l.written, u64::from(l.cells - l.spent))
                        }
                        _ => (0, 0),
                    };
                    let r = call(
                        &script,
                        &mut conn,
                        (&key, b),
                        "lease",
                        k,
                        (1, give.0, give.1),
                        now,
                    );
                    if r[0] == 1 {
                        let lease = Lease {
                            at: now,
                            cells: u32::try_from(r[7]).unwrap(),
                            spent: 1,
                            written: u64::try_from(r[6]).unwrap(),
                        };
                        leases[node] = Some(lease);
                        current[node] = Some(history.len());
                        history.push((lease, vec![now]));
                        admitted.push(now);
                    } else if held.is_some_and(|l| now > l.at + hold) {
                        leases[node] = None; // expired: its cells are lost or given back
                    }
                }
            }
        }
        // Every window from one admission to another.
        for i in 0..admitted.len() {
            let opened = admitted[i];
            // Leased cells held unspent when the window opened: leases taken before it, not
            // expired, less what they had spent before it.
            let held: u64 = history
                .iter()
                .filter(|(l, _)| l.at < opened && opened <= l.at + hold)
                .map(|(l, spends)| {
                    u64::from(l.cells) - spends.iter().filter(|&&t| t < opened).count() as u64
                })
                .sum();
            for (j, &closed) in admitted.iter().enumerate().skip(i) {
                let w = closed - opened;
                let count = (j - i + 1) as u64;
                assert!(
                    count <= b + (w + hold) / T,
                    "seed {seed}: {count} admitted in {w} µs from {opened}: over b + (W + hold)/T"
                );
                assert!(
                    count <= b + w / T + held,
                    "seed {seed}: {count} admitted in {w} µs from {opened}: over b + W/T + {held} held"
                );
                windows += 1;
            }
        }
        assert!(
            admitted.len() > 20,
            "seed {seed}: a schedule that admits ({})",
            admitted.len()
        );
    }
    assert!(windows > 1_000_000, "{windows} windows");
}

/// Counts the admissions in the window `[from, to]`.
fn in_window(admitted: &[u64], from: u64, to: u64) -> u64 {
    admitted.iter().filter(|&&t| from <= t && t <= to).count() as u64
}

/// The case the lease's `L` term is for, scripted: a node takes a lease on an idle key and
/// spends its last cells at the end of its hold, when the server has long counted them and
/// a second node's lease finds the burst back. The window of width 0 at that instant then
/// holds more than a plain GCRA's `b`, and no more than `b + floor(L / T)`.
#[test]
fn cells_spent_late_beside_a_fresh_burst_reach_past_plain_gcra_within_the_bound() {
    let server = RedisServer::start();
    let mut conn = server.conn();
    let script = redis::Script::new(&script_text());
    let Params { b, k, l: hold } = PARAMS[0]; // b 5, k 3, hold 5T
    let key = "late";
    let t0 = server.time_us() + 1_000_000;
    let first = call(&script, &mut conn, (key, b), "lease", k, (1, 0, 0), t0);
    assert_eq!(
        (first[0], first[7]),
        (1, 3),
        "three cells to the first node"
    );
    let mut admitted = vec![t0]; // it spends one at once
    let late = t0 + hold - 1; // the last instant of its hold
    admitted.extend([late, late]); // and the other two then
    // A second node, at that instant, leases and spends all it gets, again and again.
    loop {
        let r = call(&script, &mut conn, (key, b), "lease", k, (1, 0, 0), late);
        if r[0] != 1 {
            break;
        }
        admitted.extend(std::iter::repeat_n(late, usize::try_from(r[7]).unwrap()));
    }
    let count = in_window(&admitted, late, late);
    assert!(
        count > b,
        "{count} cells at one instant: past a plain GCRA's {b}"
    );
    assert!(
        count <= b + hold / T,
        "{count} cells at one instant: over b + L/T"
    );
}

/// Give-backs, scripted where they matter: one node takes leases of 8 cells held for 3T (so
/// an expired lease's TAT is still ahead), spends all but one of each and gives that one
/// back, over and over, faster than the rate allows (so the server's remaining cells, not
/// the lease size, bound each grant). Every window keeps the bound; a script that gave back
/// one cell more than unspent gains a cell a cycle and breaks it (checked: 193 over).
#[test]
fn partial_give_backs_cycle_after_cycle_keep_the_bound() {
    let server = RedisServer::start();
    let mut conn = server.conn();
    let script = redis::Script::new(&script_text());
    let Params { b, k, l: hold } = PARAMS[1]; // b 10, k 8, hold 3T
    let key = "give-back";
    let mut now = server.time_us() + 1_000_000;
    let mut admitted = Vec::new();
    let mut give = (0, 0);
    for _ in 0..200 {
        let r = call(
            &script,
            &mut conn,
            (key, b),
            "lease",
            k,
            (1, give.0, give.1),
            now,
        );
        if r[0] != 1 {
            now += T / 2;
            continue;
        }
        let (written, cells) = (u64::try_from(r[6]).unwrap(), u64::try_from(r[7]).unwrap());
        let spent = cells - 1;
        for i in 0..spent {
            admitted.push(now + i * (hold / spent));
        }
        now += hold + 1; // expired
        give = (written, cells - spent);
    }
    assert!(admitted.len() > 400, "{} admitted", admitted.len());
    for (i, &from) in admitted.iter().enumerate() {
        for &to in &admitted[i..] {
            let count = in_window(&admitted, from, to);
            assert!(
                count <= b + (to - from + hold) / T,
                "{count} in [{from}, {to}]"
            );
        }
    }
}
