//! A small `metrics` recorder that keeps everything: counters and gauges as atomics, every
//! histogram sample in a list. For the tests (which compare it with `stats()`), the `fleet`
//! example (which prints its figures from it) and the bench (its cost with the feature on).
//!
//! Why not `metrics-util`'s debugging recorder: these need a counter's value by name and
//! labels, a histogram's count and quantiles, and one recorder installed either globally or
//! for a thread; that is this much code, where the debugging recorder brings a dependency
//! tree and a snapshot API to walk for each figure.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use metrics::{Counter, Gauge, Histogram, HistogramFn, Key, KeyName, Metadata, SharedString, Unit};

/// One series' name: the metric's name and its labels, sorted, as `name{k=v,k=v}`.
fn series(key: &Key) -> String {
    let mut labels: Vec<String> = key
        .labels()
        .map(|l| format!("{}={}", l.key(), l.value()))
        .collect();
    labels.sort();
    format!("{}{{{}}}", key.name(), labels.join(","))
}

fn wanted(name: &str, labels: &[(&str, &str)]) -> String {
    let mut labels: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    labels.sort();
    format!("{name}{{{}}}", labels.join(","))
}

#[derive(Default)]
pub struct Samples(Mutex<Vec<f64>>);

impl HistogramFn for Samples {
    fn record(&self, value: f64) {
        self.0.lock().unwrap().push(value);
    }
}

#[derive(Default)]
struct Registry {
    counters: HashMap<String, Arc<AtomicU64>>,
    gauges: HashMap<String, Arc<AtomicU64>>,
    histograms: HashMap<String, Arc<Samples>>,
}

/// The recorder; clones share what it recorded.
#[derive(Clone, Default)]
pub struct Recorder(Arc<Mutex<Registry>>);

impl Recorder {
    /// A new recorder, installed as the process's (for the example and the bench).
    pub fn install_global() -> Recorder {
        let r = Recorder::default();
        metrics::set_global_recorder(r.clone()).expect("no recorder installed yet");
        r
    }

    /// A counter's value; 0 if never registered.
    pub fn counter(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        let reg = self.0.lock().unwrap();
        reg.counters
            .get(&wanted(name, labels))
            .map_or(0, |c| c.load(Relaxed))
    }

    /// A gauge's value; `None` if never registered.
    pub fn gauge(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let reg = self.0.lock().unwrap();
        reg.gauges
            .get(&wanted(name, labels))
            .map(|g| f64::from_bits(g.load(Relaxed)))
    }

    /// A histogram's samples, in the order recorded; empty if never registered.
    pub fn samples(&self, name: &str, labels: &[(&str, &str)]) -> Vec<f64> {
        let reg = self.0.lock().unwrap();
        reg.histograms
            .get(&wanted(name, labels))
            .map_or_else(Vec::new, |h| h.0.lock().unwrap().clone())
    }

    /// Every counter series of `name`, as `(series, value)`, sorted.
    pub fn counters_of(&self, name: &str) -> Vec<(String, u64)> {
        let reg = self.0.lock().unwrap();
        let prefix = format!("{name}{{");
        let mut v: Vec<_> = reg
            .counters
            .iter()
            .filter(|(k, _)| k.starts_with(&prefix))
            .map(|(k, c)| (k.clone(), c.load(Relaxed)))
            .collect();
        v.sort();
        v
    }
}

/// The `q`-quantile (0 to 1) of `samples`, nearest rank; `None` if there are none.
pub fn quantile(samples: &[f64], q: f64) -> Option<f64> {
    if samples.is_empty() {
        return None;
    }
    let mut s = samples.to_vec();
    s.sort_by(f64::total_cmp);
    let rank = ((s.len() as f64 * q).ceil() as usize).clamp(1, s.len());
    Some(s[rank - 1])
}

impl metrics::Recorder for Recorder {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        let mut reg = self.0.lock().unwrap();
        Counter::from_arc(Arc::clone(reg.counters.entry(series(key)).or_default()))
    }

    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        let mut reg = self.0.lock().unwrap();
        Gauge::from_arc(Arc::clone(reg.gauges.entry(series(key)).or_default()))
    }

    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        let mut reg = self.0.lock().unwrap();
        Histogram::from_arc(Arc::clone(reg.histograms.entry(series(key)).or_default()))
    }
}
