//! A `metrics` recorder for the tests: keeps each series' counter and gauge as an atomic
//! and each histogram's samples in a list, found again by name and labels.
//!
//! Small on purpose: a test asks for one series' value, and this answers that without a
//! snapshot to walk. Install it for the thread that builds a layer
//! (`metrics::with_local_recorder`): the layer registers its handles then.

#![allow(dead_code, unreachable_pub)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use metrics::{Counter, Gauge, Histogram, HistogramFn, Key, KeyName, Metadata, SharedString, Unit};

/// `name{k=v,...}`, labels sorted.
fn series<'a>(name: &str, labels: impl Iterator<Item = (&'a str, &'a str)>) -> String {
    let mut labels: Vec<String> = labels.map(|(k, v)| format!("{k}={v}")).collect();
    labels.sort();
    format!("{name}{{{}}}", labels.join(","))
}

fn of(key: &Key) -> String {
    series(key.name(), key.labels().map(|l| (l.key(), l.value())))
}

#[derive(Default)]
struct Samples(Mutex<Vec<f64>>);

impl HistogramFn for Samples {
    fn record(&self, value: f64) {
        self.0.lock().unwrap().push(value);
    }
}

#[derive(Default)]
struct Series {
    counters: HashMap<String, Arc<AtomicU64>>,
    gauges: HashMap<String, Arc<AtomicU64>>,
    histograms: HashMap<String, Arc<Samples>>,
}

/// The recorder; clones share their series.
#[derive(Clone, Default)]
pub struct Recorder(Arc<Mutex<Series>>);

impl Recorder {
    /// A counter's value; `None` if it was never registered.
    pub fn counter(&self, name: &str, labels: &[(&str, &str)]) -> Option<u64> {
        let s = self.0.lock().unwrap();
        let c = s.counters.get(&series(name, labels.iter().copied()))?;
        Some(c.load(Relaxed))
    }

    /// A gauge's value; `None` if it was never registered.
    pub fn gauge(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let s = self.0.lock().unwrap();
        let g = s.gauges.get(&series(name, labels.iter().copied()))?;
        Some(f64::from_bits(g.load(Relaxed)))
    }

    /// A histogram's samples, in the order recorded; `None` if it was never registered.
    pub fn samples(&self, name: &str, labels: &[(&str, &str)]) -> Option<Vec<f64>> {
        let s = self.0.lock().unwrap();
        let h = s.histograms.get(&series(name, labels.iter().copied()))?;
        Some(h.0.lock().unwrap().clone())
    }

    /// Every series registered, of any kind, sorted.
    pub fn names(&self) -> Vec<String> {
        let s = self.0.lock().unwrap();
        let mut v: Vec<String> = (s.counters.keys())
            .chain(s.gauges.keys())
            .chain(s.histograms.keys())
            .cloned()
            .collect();
        v.sort();
        v
    }
}

impl metrics::Recorder for Recorder {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        let mut s = self.0.lock().unwrap();
        Counter::from_arc(Arc::clone(s.counters.entry(of(key)).or_default()))
    }

    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        let mut s = self.0.lock().unwrap();
        Gauge::from_arc(Arc::clone(s.gauges.entry(of(key)).or_default()))
    }

    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        let mut s = self.0.lock().unwrap();
        Histogram::from_arc(Arc::clone(s.histograms.entry(of(key)).or_default()))
    }
}
