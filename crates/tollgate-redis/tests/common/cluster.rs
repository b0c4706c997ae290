//! A real Redis Cluster of our own: six `redis-server` processes (`--cluster-enabled yes`)
//! on free ports in a temporary directory, joined by `redis-cli --cluster create` into
//! three masters with one replica each; killed (and the directory removed) on drop. Shared
//! by the cluster tests, the `fleet` example (`--cluster`) and the bench (`#[path]`).

#![allow(dead_code, unreachable_pub)]

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

static NEXT: AtomicU32 = AtomicU32::new(0);

/// How long the cluster may take to form, fail over or settle before a test fails saying
/// what it waited for.
pub const SETTLE: Duration = Duration::from_secs(60);

/// The nodes' `cluster-node-timeout`: how long a master may be silent before its replica
/// is promoted (plus an election of about as long).
pub const NODE_TIMEOUT_MS: u64 = 500;

fn server_binary() -> String {
    std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".into())
}

fn cli_binary() -> String {
    std::env::var("REDIS_CLI").unwrap_or_else(|_| "redis-cli".into())
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind a free port")
        .local_addr()
        .unwrap()
        .port()
}

/// One node: its process, client port and bus port.
#[derive(Debug)]
struct Node {
    child: Option<Child>,
    port: u16,
    bus: u16,
}

/// A running cluster of six nodes: three masters, one replica each.
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<Node>,
    dir: PathBuf,
}

impl RedisCluster {
    /// Starts six nodes and makes them a cluster, or fails the test saying what to install.
    pub fn start() -> RedisCluster {
        let dir = std::env::temp_dir().join(format!(
            "tollgate-redis-cluster-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).expect("create the cluster's directory");
        let mut cluster = RedisCluster {
            nodes: Vec::new(),
            dir,
        };
        for i in 0..6 {
            cluster.nodes.push(Node {
                child: None,
                port: 0,
                bus: 0,
            });
            cluster.start_node(i);
        }
        let addrs: Vec<String> = cluster
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let out = Command::new(cli_binary())
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .output()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot run `{}` ({e}): the cluster tests need redis-cli. Install it with \
                     `apt-get install redis-server` (it brings redis-tools), or set REDIS_CLI \
                     to the binary's path",
                    cli_binary()
                )
            });
        assert!(
            out.status.success(),
            "redis-cli --cluster create failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        cluster.wait_settled("the new cluster");
        cluster
    }

    fn spawn(&mut self, i: usize) {
        let node = &self.nodes[i];
        let conf = format!("nodes-{}.conf", node.port);
        let child = Command::new(server_binary())
            .args(["--port", &node.port.to_string()])
            .args(["--cluster-port", &node.bus.to_string()])
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--cluster-enabled", "yes", "--cluster-config-file", &conf])
            .args(["--cluster-node-timeout", &NODE_TIMEOUT_MS.to_string()])
            .arg("--dir")
            .arg(&self.dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start `{}` ({e}): these tests need a real Redis. \
                     Install it with `apt-get install redis-server` \
                     (or set REDIS_SERVER to the binary's path)",
                    server_binary()
                )
            });
        self.nodes[i].child = Some(child);
    }

    /// Starts node `i` on free ports. A port found free can be taken by someone else before
    /// the server binds it (other tests start servers too): a server that exits at once is
    /// started again on other ports, a few times.
    fn start_node(&mut self, i: usize) {
        for _ in 0..5 {
            self.nodes[i].port = free_port();
            self.nodes[i].bus = free_port();
            self.spawn(i);
            if self.wait_ping(i) {
                return;
            }
            self.kill(i);
        }
        panic!("redis-server did not start on five pairs of free ports");
    }

    /// Waits until node `i` answers `PING` (true), or its process has exited (false).
    fn wait_ping(&mut self, i: usize) -> bool {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(mut c) = self.try_conn(i)
                && redis::cmd("PING").query::<String>(&mut c).is_ok()
            {
                return true;
            }
            let child = self.nodes[i].child.as_mut().expect("spawned");
            if child.try_wait().ok().flatten().is_some() {
                return false;
            }
            assert!(
                Instant::now() < deadline,
                "redis-server did not answer on port {}",
                self.nodes[i].port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn try_conn(&self, i: usize) -> redis::RedisResult<redis::Connection> {
        let client = redis::Client::open(self.url(i))?;
        client.get_connection_with_timeout(Duration::from_secs(2))
    }

    /// The nodes still running.
    fn alive(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.nodes.len()).filter(|&i| self.nodes[i].child.is_some())
    }

    /// Waits until every running node says `cluster_state:ok`, agrees on three masters
    /// covering all 16,384 slots, and every running replica's link to its master is up;
    /// fails the test naming `what` after [`SETTLE`].
    pub fn wait_settled(&self, what: &str) {
        let deadline = Instant::now() + SETTLE;
        loop {
            let Err(last) = self.settled() else {
                return;
            };
            assert!(
                Instant::now() < deadline,
                "{what}: the cluster did not settle within {SETTLE:?}: {last}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn settled(&self) -> Result<(), String> {
        for i in self.alive() {
            let mut c = self.try_conn(i).map_err(|e| format!("node {i}: {e}"))?;
            let info: String = redis::cmd("CLUSTER")
                .arg("INFO")
                .query(&mut c)
                .map_err(|e| format!("node {i}: {e}"))?;
            if !info.contains("cluster_state:ok") || !info.contains("cluster_slots_ok:16384") {
                return Err(format!(
                    "node {i} says {}",
                    info.lines().next().unwrap_or("")
                ));
            }
            let repl: String = redis::cmd("INFO")
                .arg("replication")
                .query(&mut c)
                .map_err(|e| format!("node {i}: {e}"))?;
            if repl.contains("role:slave") && !repl.contains("master_link_status:up") {
                return Err(format!("replica {i}'s link to its master is down"));
            }
            let masters = self.masters_seen_by(i)?;
            if masters.len() != 3 {
                return Err(format!("node {i} sees masters on ports {masters:?}"));
            }
        }
        Ok(())
    }

    /// The ports of the masters that own slots, as node `i` sees them.
    fn masters_seen_by(&self, i: usize) -> Result<Vec<u16>, String> {
        let mut c = self.try_conn(i).map_err(|e| format!("node {i}: {e}"))?;
        let nodes: String = redis::cmd("CLUSTER")
            .arg("NODES")
            .query(&mut c)
            .map_err(|e| format!("node {i}: {e}"))?;
        let mut ports: Vec<u16> = nodes
            .lines()
            .filter(|l| {
                let f: Vec<&str> = l.split(' ').collect();
                f.len() > 8 && f[2].contains("master") && !f[2].contains("fail")
            })
            .map(|l| port_of(l.split(' ').nth(1).unwrap()))
            .collect();
        ports.sort_unstable();
        Ok(ports)
    }

    pub fn url(&self, i: usize) -> String {
        format!("redis://127.0.0.1:{}/", self.nodes[i].port)
    }

    /// Every node's URL: the seeds of a cluster client.
    pub fn urls(&self) -> Vec<String> {
        (0..self.nodes.len()).map(|i| self.url(i)).collect()
    }

    /// A cluster client seeded with every node.
    pub fn client(&self) -> redis::cluster::ClusterClient {
        redis::cluster::ClusterClient::new(self.urls()).unwrap()
    }

    /// A plain synchronous connection to node `i` for the test's own commands.
    pub fn conn(&self, i: usize) -> redis::Connection {
        self.try_conn(i)
            .unwrap_or_else(|e| panic!("connect to node {i}: {e}"))
    }

    /// A running node's view of the cluster, to ask it cluster-wide questions.
    fn any(&self) -> usize {
        self.alive().next().expect("a node runs")
    }

    /// The slot of `key` (`CLUSTER KEYSLOT`).
    pub fn slot(&self, key: &[u8]) -> u16 {
        redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut self.conn(self.any()))
            .unwrap()
    }

    /// The node (index) that masters `slot`, as a running node sees it.
    pub fn master_of_slot(&self, slot: u16) -> usize {
        let slots: redis::Value = redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query(&mut self.conn(self.any()))
            .unwrap();
        let redis::Value::Array(ranges) = slots else {
            panic!("CLUSTER SLOTS answered {slots:?}");
        };
        for range in ranges {
            let redis::Value::Array(r) = range else {
                continue;
            };
            let (redis::Value::Int(lo), redis::Value::Int(hi)) = (&r[0], &r[1]) else {
                continue;
            };
            if (*lo..=*hi).contains(&i64::from(slot)) {
                let redis::Value::Array(master) = &r[2] else {
                    panic!("CLUSTER SLOTS: no master in {r:?}");
                };
                let redis::Value::Int(port) = master[1] else {
                    panic!("CLUSTER SLOTS: no port in {master:?}");
                };
                return self.index_of_port(port as u16);
            }
        }
        panic!("no master owns slot {slot}");
    }

    /// The node (index) that masters `key`'s slot.
    pub fn master_of(&self, key: &[u8]) -> usize {
        self.master_of_slot(self.slot(key))
    }

    /// The indices of the masters.
    pub fn masters(&self) -> Vec<usize> {
        let ports = self.masters_seen_by(self.any()).unwrap();
        ports.into_iter().map(|p| self.index_of_port(p)).collect()
    }

    fn index_of_port(&self, port: u16) -> usize {
        self.nodes
            .iter()
            .position(|n| n.port == port)
            .unwrap_or_else(|| panic!("no node on port {port}"))
    }

    fn id(&self, i: usize) -> String {
        redis::cmd("CLUSTER")
            .arg("MYID")
            .query(&mut self.conn(i))
            .unwrap()
    }

    /// Kills node `i` (SIGKILL: no goodbye to the clients or the cluster).
    pub fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.nodes[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Pauses node `i` (SIGSTOP): it keeps its connections and answers nothing, as a server
    /// that hangs or a host cut off without a reset does. The other nodes see it fail after
    /// [`NODE_TIMEOUT_MS`], and promote its replica if it is a master. Ask the cluster
    /// nothing through [`RedisCluster`] while it is paused: a question may go to it and hang.
    pub fn pause(&self, i: usize) {
        self.signal(i, "-STOP");
    }

    /// Resumes a paused node (SIGCONT).
    pub fn resume(&self, i: usize) {
        self.signal(i, "-CONT");
    }

    fn signal(&self, i: usize, signal: &str) {
        let pid = self.nodes[i].child.as_ref().expect("the node runs").id();
        let status = Command::new("kill")
            .args([signal, &pid.to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill {signal} {pid}");
    }

    /// Moves `slot` from its master to master `to` while clients run: `IMPORTING` on the
    /// target, `MIGRATING` on the source, `MIGRATE` of its keys in batches (so that clients
    /// meet `ASK` in between), then `SETSLOT NODE` on both and the other masters. Returns
    /// the keys moved.
    pub fn migrate_slot(&self, slot: u16, to: usize) -> usize {
        let from = self.master_of_slot(slot);
        assert_ne!(from, to, "slot {slot} is already on node {to}");
        let (from_id, to_id) = (self.id(from), self.id(to));
        let setslot = |node: usize, how: &str, id: &str| {
            let _: () = redis::cmd("CLUSTER")
                .arg("SETSLOT")
                .arg(slot)
                .arg(how)
                .arg(id)
                .query(&mut self.conn(node))
                .unwrap_or_else(|e| panic!("SETSLOT {slot} {how} on node {node}: {e}"));
        };
        setslot(to, "IMPORTING", &from_id);
        setslot(from, "MIGRATING", &to_id);
        let mut moved = 0;
        loop {
            let keys: Vec<Vec<u8>> = redis::cmd("CLUSTER")
                .arg("GETKEYSINSLOT")
                .arg(slot)
                .arg(2)
                .query(&mut self.conn(from))
                .unwrap();
            if keys.is_empty() {
                break;
            }
            let _: redis::Value = redis::cmd("MIGRATE")
                .arg("127.0.0.1")
                .arg(self.nodes[to].port)
                .arg("")
                .arg(0)
                .arg(5_000)
                .arg("KEYS")
                .arg(&keys)
                .query(&mut self.conn(from))
                .unwrap_or_else(|e| panic!("MIGRATE slot {slot} to node {to}: {e}"));
            moved += keys.len();
            // Slowly, so that clients meet the slot half moved.
            std::thread::sleep(Duration::from_millis(25));
        }
        setslot(to, "NODE", &to_id);
        setslot(from, "NODE", &to_id);
        for m in self.masters() {
            if m != from && m != to {
                setslot(m, "NODE", &to_id);
            }
        }
        moved
    }

    /// The server's clock of node `i`, in µs.
    pub fn time_us(&self, i: usize) -> u64 {
        let (s, us): (u64, u64) = redis::cmd("TIME").query(&mut self.conn(i)).unwrap();
        s * 1_000_000 + us
    }

    /// How many times the running nodes ran `command` (from `INFO commandstats`), in all.
    pub fn calls(&self, command: &str) -> u64 {
        let prefix = format!("cmdstat_{command}:calls=");
        self.alive()
            .map(|i| {
                let info: String = redis::cmd("INFO")
                    .arg("commandstats")
                    .query(&mut self.conn(i))
                    .unwrap();
                info.lines()
                    .find_map(|l| l.strip_prefix(&prefix))
                    .map_or(0, |rest| rest.split(',').next().unwrap().parse().unwrap())
            })
            .sum()
    }
}

fn port_of(addr: &str) -> u16 {
    // `127.0.0.1:7000@17000`
    let hostport = addr.split('@').next().unwrap();
    hostport.rsplit(':').next().unwrap().parse().unwrap()
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for i in 0..self.nodes.len() {
            self.kill(i);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
