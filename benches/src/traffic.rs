//! `dmc-bench traffic`: what one GET and one SET cost on every backend, in posts
//! (doorbells), one-sided verbs, bytes moved by verbs, RPCs and RPC bytes on the wire,
//! with the throughput of the same operations, measured on one table per backend in
//! this process (`local`: the embedded pool, `r = 1`; `shm`, `tcp` and emulated `rdma`:
//! two in-process memory nodes, `r = 2`).
//!
//! The counts come from `dmc_verbs::stats` (the same counters INFO shows), read before
//! and after each measurement. The verb counts are what decides a backend's cost on a
//! real network: each post is a round trip, each verb a work request. Emulated RDMA
//! runs the real transport over a software NIC, so its counts are those of a real
//! device and its throughput is not.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Result;
use dmc_dht::{Dht, SetOptions};
use dmc_verbs::stats::{Traffic, traffic};
use futures::StreamExt;

use crate::{Reach, embedded_table, key, load, pooled_table, value};

pub struct TrafficConfig {
    /// Keys loaded before measuring.
    pub keys: u64,
    /// Operations per measurement.
    pub ops: u64,
    /// Where `traffic.csv` and `traffic.md` go.
    pub out: PathBuf,
}

/// One measurement: per-operation costs and throughput.
struct Row {
    backend: &'static str,
    op: &'static str,
    ops_per_sec: f64,
    per_op: Traffic,
    ops: u64,
}

const BACKENDS: [(&str, Option<Reach>); 4] = [
    ("local", None),
    ("shm", Some(Reach::Shm)),
    ("tcp", Some(Reach::Tcp)),
    ("rdma (emulated)", Some(Reach::EmulatedRdma)),
];

pub async fn traffic_cmd(cfg: TrafficConfig) -> Result<()> {
    std::fs::create_dir_all(&cfg.out)?;
    let mut rows = Vec::new();
    for (name, reach) in BACKENDS {
        eprintln!("{name}: loading {} keys", cfg.keys);
        let (_keep, dht) = match reach {
            None => (None, embedded_table(1 << 30).await?),
            Some(r) => {
                let t = pooled_table(r, 2, 1 << 30).await?;
                let d = t.dht.clone();
                (Some(t), d)
            }
        };
        load(&dht, cfg.keys, 64, None, false).await?;
        for op in ["get", "set", "set_64_in_flight"] {
            let row = measure(&dht, name, op, cfg.keys, cfg.ops).await?;
            eprintln!(
                "  {op}: {:.0} ops/s, {:.2} posts, {:.2} verbs, {:.2} RPCs per op",
                row.ops_per_sec,
                per(row.per_op.total().posts, row.ops),
                per(row.per_op.total().verbs(), row.ops),
                per(row.per_op.rpcs, row.ops)
            );
            rows.push(row);
        }
    }
    let (csv, md) = render(&rows);
    std::fs::write(cfg.out.join("traffic.csv"), csv)?;
    std::fs::write(cfg.out.join("traffic.md"), &md)?;
    println!("{md}");
    Ok(())
}

fn per(n: u64, ops: u64) -> f64 {
    n as f64 / ops.max(1) as f64
}

async fn measure(
    dht: &Arc<Dht>,
    backend: &'static str,
    op: &'static str,
    keys: u64,
    ops: u64,
) -> Result<Row> {
    let before = traffic();
    let started = Instant::now();
    let pick = |i: u64| (i * 7919) % keys;
    match op {
        "get" => {
            for i in 0..ops {
                let found = dht.get(0, &key(pick(i))).await?;
                anyhow::ensure!(found.is_some(), "a loaded key is missing");
            }
        }
        "set" => {
            for i in 0..ops {
                let k = pick(i);
                dht.set(0, &key(k), &value(k + 1), SetOptions::default())
                    .await?;
            }
        }
        _ => {
            let mut sets = futures::stream::iter(0..ops)
                .map(|i| {
                    let dht = dht.clone();
                    let k = pick(i);
                    async move {
                        dht.set(0, &key(k), &value(k + 2), SetOptions::default())
                            .await
                    }
                })
                .buffer_unordered(64);
            while let Some(r) = sets.next().await {
                r?;
            }
        }
    }
    let took = started.elapsed();
    Ok(Row {
        backend,
        op,
        ops_per_sec: ops as f64 / took.as_secs_f64(),
        per_op: traffic().since(&before),
        ops,
    })
}

fn render(rows: &[Row]) -> (String, String) {
    let mut csv = String::from(
        "backend,op,ops_per_sec,posts_per_op,verbs_per_op,reads_per_op,writes_per_op,\
         cas_per_op,faa_per_op,verb_bytes_per_op,rpcs_per_op,rpc_bytes_per_op\n",
    );
    let mut md = String::from(
        "| backend | op | ops/s | posts | verbs (R/W/CAS/FAA) | verb bytes | RPCs | RPC bytes on the wire |\n\
         |---|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        let t = r.per_op.total();
        let f = |n: u64| per(n, r.ops);
        let wire = r.per_op.rpc_bytes_sent + r.per_op.rpc_bytes_received;
        let v = [
            f(t.posts),
            f(t.verbs()),
            f(t.reads),
            f(t.writes),
            f(t.cas),
            f(t.faa),
            f(t.bytes),
            f(r.per_op.rpcs),
            f(wire),
        ];
        let _ = writeln!(
            csv,
            "{},{},{:.0},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{:.1},{:.3},{:.1}",
            r.backend, r.op, r.ops_per_sec, v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8]
        );
        let _ = writeln!(
            md,
            "| {} | {} | {:.0} | {:.2} | {:.2} ({:.2}/{:.2}/{:.2}/{:.2}) | {:.0} | {:.2} | {:.0} |",
            r.backend, r.op, r.ops_per_sec, v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8]
        );
    }
    (csv, md)
}
