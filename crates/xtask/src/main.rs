//! `cargo xtask test`: everything the test suite needs, set up, then every test run.
//!
//! The suite needs one thing beyond a Rust toolchain: a `redis-server` binary (with its
//! `redis-cli`, for the cluster tests), which
//! tollgate-redis's tests start on a port of their own (a real server, never a mock). This
//! task finds it (`REDIS_SERVER`, else `PATH`), installs it where it can (Debian or Ubuntu, as
//! root or with password-less `sudo`), and otherwise stops before any test with the exact
//! command to run on this system. Then it runs what `.ci/run` runs as tests: the workspace,
//! the feature sets that the default build leaves out, and the loom models.
//!
//! ```text
//! cargo xtask test      # set up, then every test (about 10 minutes on 2 cores)
//! cargo xtask setup     # only the set-up
//! cargo xtask features  # the features the workspace's test build turns on (for `.ci/run`)
//! ```

#![forbid(unsafe_code)]

use std::env;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

fn main() -> ExitCode {
    let task = env::args().nth(1);
    let result = match task.as_deref() {
        Some("setup") => setup(),
        Some("test") => setup().and_then(|()| test()),
        Some("features") => {
            println!("{WORKSPACE_FEATURES}");
            Ok(())
        }
        _ => {
            eprintln!("usage: cargo xtask <setup|test|features>");
            eprintln!("  setup     install what the tests need (cmake, redis-server), or say how");
            eprintln!("  test      setup, then every test: the workspace, its feature sets, loom");
            eprintln!("  features  the features the workspace's test build turns on");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("\nxtask: {message}");
            ExitCode::FAILURE
        }
    }
}

type Result<T = ()> = std::result::Result<T, String>;

/// Makes sure `cmake` is there (tollgate-pingora's Pingora builds zlib-ng with it, and a
/// workspace member that cannot build stops every cargo command), that a `redis-server` can
/// be started, and a `redis-cli` (which the cluster tests create their cluster with) run.
fn setup() -> Result {
    setup_cmake()?;
    setup_server()?;
    setup_cli()
}

/// The cluster tests' `redis-cli` (`REDIS_CLI`, else `PATH`). Debian's and Ubuntu's
/// `redis-server` depends on `redis-tools`, which has it; so does Homebrew's `redis`.
fn setup_cli() -> Result {
    if let Some(path) = env::var_os("REDIS_CLI") {
        step(&format!(
            "redis-cli: {} (REDIS_CLI)",
            PathBuf::from(path).display()
        ));
        return Ok(());
    }
    match on_path("redis-cli") {
        Some(path) => {
            step(&format!("redis-cli: {}", path.display()));
            Ok(())
        }
        None => Err(
            "tollgate-redis's cluster tests need redis-cli, and none is on PATH.\n\
             Install it (`apt-get install redis-tools`; Homebrew's `redis` has it), \
             or point REDIS_CLI at a redis-cli binary."
                .into(),
        ),
    }
}

/// Makes sure a `redis-server` can be started.
fn setup_server() -> Result {
    if let Some(path) = env::var_os("REDIS_SERVER") {
        let path = PathBuf::from(path);
        if !path.is_file() {
            return Err(format!(
                "REDIS_SERVER is {}, which is not a file: point it at a redis-server binary, \
                 or unset it to use the one on PATH",
                path.display()
            ));
        }
        step(&format!("redis-server: {} (REDIS_SERVER)", path.display()));
        return Ok(());
    }
    if let Some(path) = on_path("redis-server") {
        step(&format!("redis-server: {}", path.display()));
        return Ok(());
    }
    let Some(install) = install_command("redis-server") else {
        return Err(format!(
            "tollgate-redis's tests need a real redis-server, and none is on PATH.\n\
             Install it, then run this again:\n  {}\n\
             or point REDIS_SERVER at a redis-server binary.",
            manual_instruction()
        ));
    };
    step("redis-server: not on PATH; installing it with apt-get");
    for cmd in install {
        run(&cmd, &[])?;
    }
    let path = on_path("redis-server")
        .ok_or("apt-get installed redis-server, but it is still not on PATH")?;
    step(&format!("redis-server: {}", path.display()));
    Ok(())
}

/// Makes sure `cmake` is on PATH, installing it where [`install_command`] can.
fn setup_cmake() -> Result {
    if let Some(path) = on_path("cmake") {
        step(&format!("cmake: {}", path.display()));
        return Ok(());
    }
    let Some(install) = install_command("cmake") else {
        return Err(
            "tollgate-pingora builds Pingora, whose zlib-ng needs cmake, and none is on \
                    PATH. Install your system's cmake package (`sudo apt-get install -y cmake`, \
                    `brew install cmake`), then run this again."
                .into(),
        );
    };
    step("cmake: not on PATH; installing it with apt-get");
    for cmd in install {
        run(&cmd, &[])?;
    }
    let path = on_path("cmake").ok_or("apt-get installed cmake, but it is still not on PATH")?;
    step(&format!("cmake: {}", path.display()));
    Ok(())
}

/// One cargo invocation of the suite.
struct Run {
    what: &'static str,
    args: &'static [&'static str],
    env: &'static [(&'static str, &'static str)],
}

/// The optional integrations the workspace's test pass turns on: every feature of
/// tollgate-tower (axum's and tonic's peer addresses) and tollgate-client's reqwest adapter.
/// Features only add here, so one build runs their tests beside the defaults' (which clippy
/// checks build alone), and `.ci/run` reuses that build's examples for its smoke runs instead
/// of building the integration stacks a second time in release.
const WORKSPACE_FEATURES: &str = "tollgate-tower/axum,tollgate-tower/tonic,tollgate-client/reqwest";

/// What `.ci/run` runs as tests, in the order a failure is cheapest to see: the workspace
/// first, then the feature sets its build leaves out, then the loom models.
const SUITE: &[Run] = &[
    Run {
        what: "the workspace, with tollgate-tower's and tollgate-client's optional integrations: \
               every crate's unit, integration, property and doc tests",
        args: &["test", "--workspace", "--features", WORKSPACE_FEATURES],
        env: &[],
    },
    Run {
        what: "tollgate-redis under smol (no Tokio runtime)",
        args: &[
            "test",
            "-p",
            "tollgate-redis",
            "--features",
            "smol-comp",
            "--test",
            "smol",
        ],
        env: &[],
    },
    Run {
        what: "tollgate-tower without its metrics feature (on by default)",
        args: &[
            "test",
            "-p",
            "tollgate-tower",
            "--no-default-features",
            "--lib",
            "--tests",
        ],
        env: &[],
    },
    Run {
        // The feature only adds handles beside the counters `Stats` already has: the unit
        // tests and the events (which run without it) cover the build, not the whole suite
        // against Redis a second time.
        what: "tollgate-redis without its metrics feature: unit tests and events",
        args: &[
            "test",
            "-p",
            "tollgate-redis",
            "--no-default-features",
            "--lib",
            "--test",
            "events",
        ],
        env: &[],
    },
    Run {
        what: "the core without foldhash (SipHash identity)",
        args: &["test", "--no-default-features", "--lib", "--tests"],
        env: &[],
    },
    Run {
        what: "tollgate-client without its default features (no metrics, no foldhash): unit \
               tests, events and the layer's own tests",
        args: &[
            "test",
            "-p",
            "tollgate-client",
            "--no-default-features",
            "--lib",
            "--test",
            "events",
            "--test",
            "layer",
        ],
        env: &[],
    },
    Run {
        what: "the loom models (bounded preemptions)",
        args: &[
            "test",
            "--release",
            "-p",
            "tollgate-loom",
            "--target-dir",
            "target/loom",
        ],
        env: &[
            ("RUSTFLAGS", "--cfg tollgate_loom"),
            ("LOOM_MAX_PREEMPTIONS", "2"),
        ],
    },
];

/// Every test of the suite.
fn test() -> Result {
    let cargo = env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    for suite_run in SUITE {
        step(suite_run.what);
        let mut cmd = vec![cargo.as_str()];
        cmd.extend_from_slice(suite_run.args);
        run(&cmd, suite_run.env)?;
    }
    step("every test passed");
    Ok(())
}

fn on_path(name: &str) -> Option<PathBuf> {
    env::split_paths(&env::var_os("PATH")?)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// The commands that install `package` here without asking anyone, if there are any: apt on
/// Debian and its derivatives, run as root or through password-less `sudo`.
fn install_command(package: &'static str) -> Option<Vec<Vec<&'static str>>> {
    if !is_debian_like() || on_path("apt-get").is_none() {
        return None;
    }
    let prefix: &[&str] = if is_root() {
        &[]
    } else if on_path("sudo").is_some() && succeeds("sudo", &["-n", "true"]) {
        &["sudo", "-n"]
    } else {
        return None;
    };
    let with = |args: &[&'static str]| [prefix, args].concat();
    Some(vec![
        with(&["apt-get", "update"]),
        with(&["apt-get", "install", "-y", package]),
    ])
}

/// What to tell a user whose system this task cannot install on.
fn manual_instruction() -> &'static str {
    if is_debian_like() {
        "sudo apt-get install -y redis-server"
    } else if cfg!(target_os = "macos") {
        "brew install redis"
    } else if Path::new("/etc/fedora-release").exists() || Path::new("/etc/redhat-release").exists()
    {
        "sudo dnf install -y redis"
    } else if Path::new("/etc/alpine-release").exists() {
        "sudo apk add redis"
    } else if Path::new("/etc/arch-release").exists() {
        "sudo pacman -S redis"
    } else {
        "your system's redis package (https://redis.io/docs/latest/operate/oss_and_stack/install/)"
    }
}

fn is_debian_like() -> bool {
    std::fs::read_to_string("/etc/os-release").is_ok_and(|release| {
        release.lines().any(|line| {
            let Some((key, value)) = line.split_once('=') else {
                return false;
            };
            (key == "ID" || key == "ID_LIKE")
                && value
                    .trim_matches('"')
                    .split_whitespace()
                    .any(|id| id == "debian" || id == "ubuntu")
        })
    })
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| out.status.success() && out.stdout.trim_ascii() == b"0")
}

fn succeeds(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .is_ok_and(|out| out.status.success())
}

fn run(cmd: &[&str], envs: &[(&str, &str)]) -> Result {
    let (program, args) = cmd.split_first().expect("a command");
    println!("$ {}", shown(cmd, envs));
    let status = Command::new(program)
        .args(args)
        .envs(envs.iter().map(|&(k, v)| (OsStr::new(k), OsStr::new(v))))
        .status()
        .map_err(|e| format!("cannot run `{program}`: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("`{}` failed ({status})", shown(cmd, envs)))
    }
}

fn shown(cmd: &[&str], envs: &[(&str, &str)]) -> String {
    let envs = envs.iter().map(|(k, v)| format!("{k}=\"{v}\" "));
    envs.collect::<String>() + &cmd.join(" ")
}

fn step(what: &str) {
    println!("\n=== {what}");
}
