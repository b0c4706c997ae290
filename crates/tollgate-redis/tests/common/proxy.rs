//! A TCP proxy of our own in front of a real server, which can go silent the way a hung
//! server, an L4 proxy whose upstream hangs or a partitioned host does: the connection stays
//! open, and nothing comes back. Threads of its own (no runtime); stopped on drop.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::Duration;

/// One connection through the proxy: both sockets (to close them on drop) and whether it
/// is silenced.
struct Piped {
    client: TcpStream,
    upstream: TcpStream,
    silent: Arc<AtomicBool>,
}

struct Shared {
    target: u16,
    stop: AtomicBool,
    /// Whether new connections are silent from the start.
    all_silent: AtomicBool,
    accepted: AtomicUsize,
    piped: Mutex<Vec<Piped>>,
}

/// A proxy on a free port of 127.0.0.1 to `127.0.0.1:target`.
pub struct Proxy {
    pub port: u16,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

impl Proxy {
    pub fn start(target: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        let port = listener.local_addr().unwrap().port();
        listener.set_nonblocking(true).unwrap();
        let shared = Arc::new(Shared {
            target,
            stop: AtomicBool::new(false),
            all_silent: AtomicBool::new(false),
            accepted: AtomicUsize::new(0),
            piped: Mutex::new(Vec::new()),
        });
        let s = shared.clone();
        let accept = thread::spawn(move || {
            while !s.stop.load(SeqCst) {
                match listener.accept() {
                    Ok((client, _)) => s.pipe(client),
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {
                        thread::sleep(Duration::from_millis(2));
                    }
                    Err(_) => thread::sleep(Duration::from_millis(2)),
                }
            }
        });
        Proxy {
            port,
            shared,
            accept: Some(accept),
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub fn client(&self) -> redis::Client {
        redis::Client::open(self.url()).unwrap()
    }

    /// Silences the connections open now: they stay open, and what is sent either way is
    /// dropped. New connections go through to the server.
    pub fn silence_open(&self) {
        for p in self.shared.piped.lock().unwrap().iter() {
            p.silent.store(true, SeqCst);
        }
    }

    /// Silences every connection, those open now and those to come.
    pub fn silence_all(&self) {
        self.shared.all_silent.store(true, SeqCst);
        self.silence_open();
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.shared.accepted.load(SeqCst)
    }
}

impl Shared {
    fn pipe(&self, client: TcpStream) {
        self.accepted.fetch_add(1, SeqCst);
        client.set_nonblocking(false).unwrap();
        let Ok(upstream) = TcpStream::connect(("127.0.0.1", self.target)) else {
            return; // the server is away: the client sees the connection closed
        };
        let silent = Arc::new(AtomicBool::new(self.all_silent.load(SeqCst)));
        for (from, to) in [
            (client.try_clone().unwrap(), upstream.try_clone().unwrap()),
            (upstream.try_clone().unwrap(), client.try_clone().unwrap()),
        ] {
            let silent = silent.clone();
            thread::spawn(move || pump(from, to, &silent));
        }
        self.piped.lock().unwrap().push(Piped {
            client,
            upstream,
            silent,
        });
    }
}

/// Copies `from` to `to` until either closes; while `silent`, reads and drops.
fn pump(mut from: TcpStream, mut to: TcpStream, silent: &AtomicBool) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if !silent.load(SeqCst) && to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, SeqCst);
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
        for p in self.shared.piped.lock().unwrap().drain(..) {
            let _ = p.client.shutdown(Shutdown::Both);
            let _ = p.upstream.shutdown(Shutdown::Both);
        }
    }
}
