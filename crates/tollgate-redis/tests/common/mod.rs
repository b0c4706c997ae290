//! A real `redis-server` of our own: started on a free port in a temporary directory, with
//! persistence off, and killed (and its directory removed) on drop. Shared by the tests,
//! the `fleet` example and the bench (`#[path]`).

#![allow(dead_code, unreachable_pub)]

/// A `tracing` subscriber that keeps what it sees.
pub mod events;
/// A TCP proxy that can go silent, as a hung server does.
pub mod proxy;
/// A `metrics` recorder that keeps what it records.
#[cfg(feature = "metrics")]
pub mod recorder;

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

static NEXT: AtomicU32 = AtomicU32::new(0);

/// The per-call timeout of limiters in tests that are not about faults: long enough that a
/// descheduled test thread on a loaded machine never turns a healthy call into a fault (the
/// default, 100 ms, would, and the fault policy would then answer instead of Redis).
pub const CALM_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The per-call timeout of limiters in tests of faults that also make healthy calls: a killed
/// server refuses connections at once, so the fault shows without waiting this out, while a
/// healthy call on a loaded machine is not mistaken for one.
pub const FAULT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(1);

/// How far apart two clocks may read at one instant, for tests that compare this process's
/// instants with the server's schedule: both are `CLOCK_MONOTONIC`/`CLOCK_REALTIME` of one
/// kernel, but read on different CPUs (a worker's, the timer thread's, the server's), which
/// a virtual machine keeps in step only to within some skew, tens of µs at worst seen. An
/// over-admission breaks such a bound for up to a whole interval, far longer than this.
pub const CLOCK_SKEW: std::time::Duration = std::time::Duration::from_micros(250);

/// A running `redis-server` of our own.
#[derive(Debug)]
pub struct RedisServer {
    child: Option<Child>,
    pub port: u16,
    dir: PathBuf,
    /// Arguments after the defaults (`--requirepass ...`).
    extra: Vec<String>,
}

fn binary() -> String {
    std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".into())
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind a free port")
        .local_addr()
        .unwrap()
        .port()
}

impl RedisServer {
    /// Starts a server, or fails the test saying what to install.
    pub fn start() -> RedisServer {
        RedisServer::start_with(&[])
    }

    /// Starts a server with `args` after the defaults (`["--requirepass", "s3cret"]`).
    pub fn start_with(args: &[&str]) -> RedisServer {
        let dir = std::env::temp_dir().join(format!(
            "tollgate-redis-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).expect("create the server's directory");
        let mut server = RedisServer {
            child: None,
            port: free_port(),
            dir,
            extra: args.iter().map(|a| a.to_string()).collect(),
        };
        server.spawn();
        server
    }

    /// Starts the server (again, after [`kill`](RedisServer::kill)) on its port, empty.
    pub fn spawn(&mut self) {
        let child = Command::new(binary())
            .args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start `{}` ({e}): these tests need a real Redis. \
                     Install it with `apt-get install redis-server` \
                     (or set REDIS_SERVER to the binary's path)",
                    binary()
                )
            });
        self.child = Some(child);
        self.wait_ready();
    }

    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            // Up: it answers `PING`, or refuses it for want of a password.
            if let Ok(client) = redis::Client::open(self.url())
                && let Ok(mut c) = client.get_connection()
                && match redis::cmd("PING").query::<String>(&mut c) {
                    Ok(_) => true,
                    Err(e) => e.code() == Some("NOAUTH"),
                }
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "redis-server did not answer on port {}",
                self.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub fn client(&self) -> redis::Client {
        redis::Client::open(self.url()).unwrap()
    }

    /// A plain synchronous connection for the test's own commands.
    pub fn conn(&self) -> redis::Connection {
        self.client().get_connection().unwrap()
    }

    /// Kills the server (SIGKILL: no goodbye to the clients).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Pauses the server (SIGSTOP): it keeps its connections and answers nothing, as a
    /// server that hangs or a network that drops packets does.
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// Resumes a paused server (SIGCONT).
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, signal: &str) {
        let pid = self.child.as_ref().expect("the server runs").id();
        let status = Command::new("kill")
            .args([signal, &pid.to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill {signal} {pid}");
    }

    /// Starts it again on the same port, empty.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// How many times Redis ran `command` (from `INFO commandstats`).
    pub fn calls(&self, command: &str) -> u64 {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut self.conn())
            .unwrap();
        let prefix = format!("cmdstat_{command}:calls=");
        info.lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .map_or(0, |rest| rest.split(',').next().unwrap().parse().unwrap())
    }

    /// How many µs Redis spent running `command`, in all (from `INFO commandstats`).
    pub fn usec(&self, command: &str) -> u64 {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut self.conn())
            .unwrap();
        let prefix = format!("cmdstat_{command}:");
        info.lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .and_then(|rest| rest.split(',').find_map(|f| f.strip_prefix("usec=")))
            .map_or(0, |v| v.parse().unwrap())
    }

    /// The server's clock, in µs.
    pub fn time_us(&self) -> u64 {
        let (s, us): (u64, u64) = redis::cmd("TIME").query(&mut self.conn()).unwrap();
        s * 1_000_000 + us
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
