//! `dmc-bench study`: hit-ratio curves of the caching algorithms on phase-changing
//! traces at several cache sizes (per cent of the trace's footprint), written as CSV and
//! one PNG per workload.

pub mod simulate;
pub mod workloads;

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::{Context, Result};
use dmc_dht::algorithms::Algorithm;

use crate::loadgen::plot;

pub struct StudyConfig {
    pub workloads: Vec<String>,
    pub keys: u64,
    pub requests: u64,
    pub phases: u64,
    /// Cache sizes, per cent of the footprint.
    pub sizes: Vec<f64>,
    /// Keys sampled per eviction (0: all, the exact algorithm).
    pub samples: usize,
    pub out: PathBuf,
    pub seed: u64,
    /// Where to write each workload's trace for `dmc-bench trace`, and the pace it
    /// records (requests a second).
    pub traces: Option<(PathBuf, u64)>,
}

pub fn study(cfg: &StudyConfig) -> Result<()> {
    std::fs::create_dir_all(&cfg.out)?;
    let mut csv = String::from("workload,algorithm,samples,cache_pct,cache_bytes,hit_ratio\n");
    let mut table = String::from("| workload | cache | ");
    for a in Algorithm::ALL {
        let _ = write!(table, "{} | ", a.name());
    }
    table.push_str("\n|---|---|");
    table.push_str(&"---|".repeat(Algorithm::ALL.len()));
    table.push('\n');
    for w in &cfg.workloads {
        let trace = workloads::generate(w, cfg.keys, cfg.requests, cfg.phases, cfg.seed)
            .with_context(|| {
                format!(
                    "unknown workload {w:?} (one of {})",
                    workloads::WORKLOADS.join(", ")
                )
            })?;
        let footprint = workloads::footprint(&trace);
        eprintln!("{w}: {} requests, footprint {footprint} bytes", trace.len());
        if let Some((dir, rate)) = &cfg.traces {
            std::fs::create_dir_all(dir)?;
            let path = dir.join(format!("{w}.csv"));
            std::fs::write(&path, workloads::to_csv(&trace, *rate))
                .with_context(|| format!("writing {}", path.display()))?;
        }
        let mut series: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
        let mut rows: Vec<Vec<f64>> = vec![Vec::new(); cfg.sizes.len()];
        for alg in Algorithm::ALL {
            let mut points = Vec::new();
            for (s, pct) in cfg.sizes.iter().enumerate() {
                let bytes = (footprint as f64 * pct / 100.0) as u64;
                let hr = simulate::hit_ratio(alg, &trace, bytes, cfg.samples, cfg.seed);
                let _ = writeln!(
                    csv,
                    "{w},{},{},{pct},{bytes},{hr:.5}",
                    alg.name(),
                    cfg.samples
                );
                points.push((*pct, hr * 100.0));
                rows[s].push(hr * 100.0);
            }
            eprintln!(
                "  {:<10} {}",
                alg.name(),
                points
                    .iter()
                    .map(|(p, h)| format!("{p}%: {h:.1}"))
                    .collect::<Vec<_>>()
                    .join("  ")
            );
            series.push((alg.name().to_string(), points));
        }
        for (s, pct) in cfg.sizes.iter().enumerate() {
            let _ = write!(table, "| {w} | {pct} % | ");
            let best = rows[s].iter().copied().fold(0.0, f64::max);
            for hr in &rows[s] {
                if (*hr - best).abs() < 1e-9 {
                    let _ = write!(table, "**{hr:.1}** | ");
                } else {
                    let _ = write!(table, "{hr:.1} | ");
                }
            }
            table.push('\n');
        }
        plot::lines(
            &cfg.out.join(format!("{w}.png")),
            &format!("{w}: hit ratio by cache size"),
            "cache size, % of footprint",
            "hit ratio, %",
            &series,
            true,
        )?;
    }
    std::fs::write(cfg.out.join("hit-ratios.csv"), csv)?;
    std::fs::write(cfg.out.join("hit-ratios.md"), &table)?;
    println!("{table}");
    Ok(())
}
