//! A run's results as people and scripts read them: a table on stdout, a JSON summary,
//! and the per-second timeline as CSV.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};
use serde::Serialize;

use super::stats::{Counts, Percentiles, Recorder};

#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub server: String,
    pub workload: String,
    pub connections: usize,
    pub pipeline: usize,
    pub proto: u8,
    pub keys: u64,
    pub key_size: String,
    pub value_size: String,
    pub rate: Option<f64>,
    pub duration_secs: f64,
    pub counts: Counts,
    pub ops_per_sec: f64,
    /// Hits / GETs (0 with no GETs).
    pub hit_ratio: f64,
    pub errors: BTreeMap<String, u64>,
    /// Cluster redirections followed (MOVED, ASK).
    pub redirects: u64,
    pub latency_us: Percentiles,
    pub get_latency_us: Percentiles,
    pub set_latency_us: Percentiles,
}

impl Summary {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        rec: &Recorder,
        measured: Duration,
        server: &str,
        workload: &str,
        connections: usize,
        pipeline: usize,
        proto: u8,
        keys: u64,
        key_size: String,
        value_size: String,
        rate: Option<f64>,
    ) -> Summary {
        let secs = measured.as_secs_f64().max(1e-9);
        let c = rec.counts.clone();
        Summary {
            server: server.into(),
            workload: workload.into(),
            connections,
            pipeline,
            proto,
            keys,
            key_size,
            value_size,
            rate,
            duration_secs: secs,
            ops_per_sec: c.ops as f64 / secs,
            hit_ratio: if c.gets > 0 {
                c.hits as f64 / c.gets as f64
            } else {
                0.0
            },
            counts: c,
            errors: rec.errors.clone(),
            redirects: rec.redirects,
            latency_us: Percentiles::of(&rec.all),
            get_latency_us: Percentiles::of(&rec.get),
            set_latency_us: Percentiles::of(&rec.set),
        }
    }

    /// The human-readable table.
    pub fn table(&self) -> String {
        let mut s = String::new();
        let c = &self.counts;
        let _ = writeln!(
            s,
            "{} against {}: {} connections, pipeline {}, RESP{}, {:.1} s measured",
            self.workload,
            self.server,
            self.connections,
            self.pipeline,
            self.proto,
            self.duration_secs
        );
        let _ = writeln!(
            s,
            "throughput {:.0} ops/s   ops {}  gets {} (hits {}, misses {}, hit ratio {:.3})  writes {}  errors {}",
            self.ops_per_sec, c.ops, c.gets, c.hits, c.misses, self.hit_ratio, c.writes, c.errors
        );
        if self.redirects > 0 {
            let _ = writeln!(s, "cluster redirections followed: {}", self.redirects);
        }
        for (k, v) in &self.errors {
            let _ = writeln!(s, "  error {k}: {v}");
        }
        let _ = writeln!(
            s,
            "{:8} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}   (µs)",
            "latency", "mean", "p50", "p90", "p99", "p99.9", "max"
        );
        for (name, p) in [
            ("all", &self.latency_us),
            ("GET", &self.get_latency_us),
            ("SET", &self.set_latency_us),
        ] {
            let _ = writeln!(
                s,
                "{name:8} {:>9.1} {:>9} {:>9} {:>9} {:>9} {:>9}",
                p.mean, p.p50, p.p90, p.p99, p.p999, p.max
            );
        }
        s
    }

    pub fn write_json(&self, path: &Path) -> Result<()> {
        let text = serde_json::to_string_pretty(self)?;
        std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))
    }
}

/// The per-second timeline as CSV: second, counts, p50 and p99 in µs.
pub fn timeline_csv(rec: &Recorder) -> String {
    let mut s = String::from("second,ops,gets,hits,misses,writes,errors,p50_us,p99_us\n");
    for (i, sec) in rec.seconds.iter().enumerate() {
        let c = &sec.counts;
        let (p50, p99) = if sec.latency.is_empty() {
            (0, 0)
        } else {
            (
                sec.latency.value_at_quantile(0.5),
                sec.latency.value_at_quantile(0.99),
            )
        };
        let _ = writeln!(
            s,
            "{i},{},{},{},{},{},{},{p50},{p99}",
            c.ops, c.gets, c.hits, c.misses, c.writes, c.errors
        );
    }
    s
}
