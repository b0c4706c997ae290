//! The demos' live progress line, on stderr: redrawn in place (`\r`, with a bar where the
//! demo knows how far along it is) when stderr is a terminal; in a log or a pipe, where a
//! `\r` would run every update into one line, a plain line at most once a second, and the
//! last one when the run ends.

use std::fmt::Display;
use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// Plain lines no more often than this when stderr is not a terminal.
const LOG_EVERY: Duration = Duration::from_secs(1);
/// The bar's width in a terminal.
const BAR: usize = 20;

pub(crate) struct Progress {
    terminal: bool,
    /// When a plain line was last written (not a terminal).
    last_line: Option<Instant>,
    /// The latest update not yet written as a plain line.
    pending: Option<String>,
    /// Whether a redrawn line is on screen (a terminal).
    drawn: bool,
}

impl Progress {
    pub(crate) fn new() -> Progress {
        Progress {
            terminal: std::io::stderr().is_terminal(),
            last_line: None,
            pending: None,
            drawn: false,
        }
    }

    /// The state now: `done` of the run (0 to 1) and a line saying where it is.
    pub(crate) fn update(&mut self, done: f64, line: impl Display) {
        let mut err = std::io::stderr().lock();
        if self.terminal {
            let filled = ((done.clamp(0.0, 1.0) * BAR as f64).round() as usize).min(BAR);
            let bar = format!("{}{}", "#".repeat(filled), " ".repeat(BAR - filled));
            // Trailing spaces wipe what a longer previous line left.
            let _ = write!(err, "\r[{bar}] {line}   ");
            let _ = err.flush();
            self.drawn = true;
            return;
        }
        let now = Instant::now();
        if self
            .last_line
            .is_some_and(|t| now.duration_since(t) < LOG_EVERY)
        {
            self.pending = Some(line.to_string());
            return;
        }
        let _ = writeln!(err, "{line}");
        self.last_line = Some(now);
        self.pending = None;
    }

    /// The run is over: end the redrawn line, or write the last update the log missed.
    pub(crate) fn finish(&mut self) {
        let mut err = std::io::stderr().lock();
        if self.drawn {
            let _ = writeln!(err);
            self.drawn = false;
        }
        if let Some(line) = self.pending.take() {
            let _ = writeln!(err, "{line}");
        }
    }
}
