//! What a run measured: HDR latency histograms (all requests, GETs, SETs), outcome
//! counts, errors by kind, and a per-second timeline. Each connection records into its
//! own [`Recorder`]; they are merged at the end.

use std::collections::BTreeMap;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

/// Latencies are recorded in microseconds, up to a minute.
const MAX_US: u64 = 60_000_000;

fn histogram(sigfig: u8) -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_US, sigfig).expect("valid histogram bounds")
}

/// A request's kind, for the per-kind histograms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Get,
    Set,
}

/// How a request ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Hit,
    Miss,
    Written,
    /// The error reply's first word (`ERR`, `OOM`, `MOVED`, ...).
    Error(String),
}

#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Counts {
    pub ops: u64,
    pub gets: u64,
    pub hits: u64,
    pub misses: u64,
    pub writes: u64,
    pub errors: u64,
}

impl Counts {
    fn add(&mut self, o: &Counts) {
        self.ops += o.ops;
        self.gets += o.gets;
        self.hits += o.hits;
        self.misses += o.misses;
        self.writes += o.writes;
        self.errors += o.errors;
    }
}

/// One second of the timeline.
#[derive(Debug, Clone)]
pub struct Second {
    pub counts: Counts,
    pub latency: Histogram<u64>,
}

impl Default for Second {
    fn default() -> Self {
        Second {
            counts: Counts::default(),
            latency: histogram(2),
        }
    }
}

/// One connection's (or, merged, the run's) measurements.
#[derive(Debug, Clone)]
pub struct Recorder {
    pub all: Histogram<u64>,
    pub get: Histogram<u64>,
    pub set: Histogram<u64>,
    pub counts: Counts,
    pub errors: BTreeMap<String, u64>,
    pub seconds: Vec<Second>,
    /// Cluster redirections (MOVED, ASK) followed.
    pub redirects: u64,
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder {
            all: histogram(3),
            get: histogram(3),
            set: histogram(3),
            counts: Counts::default(),
            errors: BTreeMap::new(),
            seconds: Vec::new(),
            redirects: 0,
        }
    }
}

impl Recorder {
    /// Records one reply `since_start` after measurement began, `latency` after its
    /// request was sent (or due, in fixed-rate mode).
    pub fn record(
        &mut self,
        kind: Kind,
        outcome: Outcome,
        since_start: Duration,
        latency: Duration,
    ) {
        let us = (latency.as_micros() as u64).clamp(1, MAX_US);
        let mut c = Counts {
            ops: 1,
            ..Counts::default()
        };
        match &outcome {
            Outcome::Hit => {
                c.gets = 1;
                c.hits = 1;
            }
            Outcome::Miss => {
                c.gets = 1;
                c.misses = 1;
            }
            Outcome::Written => c.writes = 1,
            Outcome::Error(kind) => {
                c.errors = 1;
                *self.errors.entry(kind.clone()).or_default() += 1;
            }
        }
        if !matches!(outcome, Outcome::Error(_)) {
            let _ = self.all.record(us);
            let _ = match kind {
                Kind::Get => self.get.record(us),
                Kind::Set => self.set.record(us),
            };
        }
        self.counts.add(&c);
        let sec = since_start.as_secs() as usize;
        if self.seconds.len() <= sec {
            self.seconds.resize_with(sec + 1, Second::default);
        }
        let s = &mut self.seconds[sec];
        s.counts.add(&c);
        if !matches!(outcome, Outcome::Error(_)) {
            let _ = s.latency.record(us);
        }
    }

    pub fn merge(&mut self, o: &Recorder) {
        let _ = self.all.add(&o.all);
        let _ = self.get.add(&o.get);
        let _ = self.set.add(&o.set);
        self.counts.add(&o.counts);
        self.redirects += o.redirects;
        for (k, v) in &o.errors {
            *self.errors.entry(k.clone()).or_default() += v;
        }
        if self.seconds.len() < o.seconds.len() {
            self.seconds.resize_with(o.seconds.len(), Second::default);
        }
        for (a, b) in self.seconds.iter_mut().zip(&o.seconds) {
            a.counts.add(&b.counts);
            let _ = a.latency.add(&b.latency);
        }
    }
}

/// Latency percentiles in microseconds.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Percentiles {
    pub mean: f64,
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub p999: u64,
    pub max: u64,
}

impl Percentiles {
    pub fn of(h: &Histogram<u64>) -> Percentiles {
        if h.is_empty() {
            return Percentiles::default();
        }
        Percentiles {
            mean: h.mean(),
            p50: h.value_at_quantile(0.50),
            p90: h.value_at_quantile(0.90),
            p99: h.value_at_quantile(0.99),
            p999: h.value_at_quantile(0.999),
            max: h.max(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recorders_count_and_merge() {
        let mut a = Recorder::default();
        let ms = Duration::from_millis;
        a.record(Kind::Get, Outcome::Hit, ms(10), ms(1));
        a.record(Kind::Get, Outcome::Miss, ms(1500), ms(2));
        a.record(Kind::Set, Outcome::Written, ms(1600), ms(3));
        let mut b = Recorder::default();
        b.record(Kind::Set, Outcome::Error("OOM".into()), ms(2500), ms(1));
        a.merge(&b);
        let c = &a.counts;
        assert_eq!(
            (c.ops, c.gets, c.hits, c.misses, c.writes, c.errors),
            (4, 2, 1, 1, 1, 1)
        );
        assert_eq!(c.ops, c.hits + c.misses + c.writes + c.errors);
        assert_eq!(a.errors["OOM"], 1);
        assert_eq!(a.seconds.len(), 3);
        assert_eq!(a.seconds[1].counts.ops, 2);
        let p = Percentiles::of(&a.all);
        assert!(p.p50 >= 1900 && p.max >= 2990, "{p:?}");
    }
}
