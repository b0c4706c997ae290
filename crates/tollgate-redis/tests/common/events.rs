//! A `tracing` subscriber that keeps every event and span it is given, with their fields as
//! text, for the tests to count. Installed as the process's subscriber, so each test binary
//! that uses it holds the tests that read it.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

/// An event or a span as seen: its level, name (a span's) and fields, `message` included.
#[derive(Debug, Clone)]
pub struct Seen {
    pub level: Level,
    pub span: Option<&'static str>,
    pub fields: Vec<(&'static str, String)>,
}

impl Seen {
    /// A field's value as text (`Display` for strings and `%` fields, `Debug` otherwise).
    pub fn field(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
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
    next_id: Arc<AtomicU64>,
}

impl Events {
    /// A new subscriber, installed as the process's.
    pub fn install() -> Events {
        let e = Events::default();
        tracing::subscriber::set_global_default(e.clone()).expect("no subscriber yet");
        e
    }

    /// What it saw that `f` matches.
    pub fn matching(&self, f: impl Fn(&Seen) -> bool) -> Vec<Seen> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|s| f(s))
            .cloned()
            .collect()
    }

    /// How many events at `level` have a message that contains `text`.
    pub fn count(&self, level: Level, text: &str) -> usize {
        self.matching(|s| s.span.is_none() && s.level == level && s.message().contains(text))
            .len()
    }
}

impl Subscriber for Events {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, span: &Attributes<'_>) -> Id {
        let mut fields = Fields(Vec::new());
        span.record(&mut fields);
        self.seen.lock().unwrap().push(Seen {
            level: *span.metadata().level(),
            span: Some(span.metadata().name()),
            fields: fields.0,
        });
        Id::from_u64(self.next_id.fetch_add(1, Relaxed) + 1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let mut fields = Fields(Vec::new());
        event.record(&mut fields);
        self.seen.lock().unwrap().push(Seen {
            level: *event.metadata().level(),
            span: None,
            fields: fields.0,
        });
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}
