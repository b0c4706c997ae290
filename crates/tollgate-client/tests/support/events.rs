//! A `tracing` subscriber for the tests: keeps every event and every span opened, with its
//! level, its name (a span's) and its fields as text. Installed once as the process's, so
//! the tests of one binary share it and each looks only at its own host's records.

#![allow(dead_code, unreachable_pub)]

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock};

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

/// An event (`span: None`) or a span opened.
#[derive(Debug, Clone)]
pub struct Seen {
    pub level: Level,
    pub target: String,
    pub span: Option<&'static str>,
    pub fields: Vec<(&'static str, String)>,
}

impl Seen {
    /// A field as text: `Display` for strings, `Debug` for the rest (`1000.0`, `429`).
    pub fn field(&self, name: &str) -> Option<&str> {
        let (_, v) = self.fields.iter().find(|(k, _)| *k == name)?;
        Some(v)
    }

    pub fn message(&self) -> &str {
        self.field("message").unwrap_or("")
    }
}

struct Fields(Vec<(&'static str, String)>);

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.push((field.name(), value.to_owned()));
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.push((field.name(), format!("{value:?}")));
    }
}

/// The subscriber; clones share what it saw.
#[derive(Clone, Default)]
pub struct Events {
    seen: Arc<Mutex<Vec<Seen>>>,
    ids: Arc<AtomicU64>,
}

impl Events {
    /// The process's subscriber, installed by the first caller.
    pub fn get() -> Events {
        static EVENTS: OnceLock<Events> = OnceLock::new();
        EVENTS
            .get_or_init(|| {
                let e = Events::default();
                tracing::subscriber::set_global_default(e.clone()).expect("no subscriber yet");
                e
            })
            .clone()
    }

    /// What it saw whose `host` field is `host`.
    pub fn of_host(&self, host: &str) -> Vec<Seen> {
        let seen = self.seen.lock().unwrap();
        seen.iter()
            .filter(|s| s.field("host") == Some(host))
            .cloned()
            .collect()
    }
}

impl Subscriber for Events {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, span: &Attributes<'_>) -> Id {
        let mut fields = Fields(Vec::new());
        span.record(&mut fields);
        let meta = span.metadata();
        self.seen.lock().unwrap().push(Seen {
            level: *meta.level(),
            target: meta.target().to_owned(),
            span: Some(meta.name()),
            fields: fields.0,
        });
        Id::from_u64(self.ids.fetch_add(1, Relaxed) + 1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let mut fields = Fields(Vec::new());
        event.record(&mut fields);
        let meta = event.metadata();
        self.seen.lock().unwrap().push(Seen {
            level: *meta.level(),
            target: meta.target().to_owned(),
            span: None,
            fields: fields.0,
        });
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}
