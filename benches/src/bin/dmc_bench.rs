//! `dmc-bench`: a load generator for any Redis-protocol server, and `dmc-bench compare`,
//! which measures redis-server and DMC side by side. See docs/benchmarks.md.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand};
use dmc_benches::loadgen::client::{LoadSpec, RunConfig, Target, load, run};
use dmc_benches::loadgen::compare::{CompareConfig, compare};
use dmc_benches::loadgen::keys::KeyDist;
use dmc_benches::loadgen::report::{Summary, timeline_csv};
use dmc_benches::loadgen::stats::Recorder;
use dmc_benches::loadgen::trace;
use dmc_benches::loadgen::workload::{Mix, Size, Workload};
use indicatif::{ProgressBar, ProgressStyle};

#[derive(Debug, Parser)]
#[command(
    version,
    about = "Load generator for Redis-protocol servers (YCSB workloads, HDR latencies)"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Load keys, then run a workload against one server.
    Run(RunArgs),
    /// redis-server and DMC side by side: redis-benchmark and YCSB suites, ratio table,
    /// CSV and PNG charts.
    Compare(CompareArgs),
    /// Replay a CSV trace (timestamp_ms,op,key,size) as a look-aside cache client and
    /// report the hit ratio (per second in --timeline).
    Trace(TraceArgs),
    /// Draw per-second timelines (`run --timeline` CSVs) as one PNG: throughput and
    /// p99 latency, with marked events.
    Plot(PlotArgs),
    /// Hit-ratio curves of the twelve caching algorithms on phase-changing traces,
    /// simulated at several cache sizes: CSV, a Markdown table and a PNG per workload.
    Study(StudyArgs),
    /// Verbs, round trips and bytes per GET and per SET on every backend (local, shm,
    /// tcp, emulated rdma), with throughput: a table, CSV and Markdown.
    Traffic(TrafficArgs),
    /// Draw curves from a CSV as one PNG: column X against column Y, one line per
    /// value of the --by columns (e.g. a benchmark's time per op against a size).
    Curve(CurveArgs),
}

#[derive(Debug, Args)]
struct StudyArgs {
    /// Workloads: zipf-moving, zipf-scan, loop, mix.
    #[arg(
        long,
        default_value = "zipf-moving,zipf-scan,loop,mix",
        value_delimiter = ','
    )]
    workloads: Vec<String>,
    #[arg(long, default_value_t = 20_000)]
    keys: u64,
    #[arg(long, default_value_t = 400_000)]
    requests: u64,
    #[arg(long, default_value_t = 4)]
    phases: u64,
    /// Cache sizes, per cent of the trace's footprint.
    #[arg(long, default_value = "1,5,10,25,50", value_delimiter = ',')]
    sizes: Vec<f64>,
    /// Keys sampled per eviction (0: every key, the exact algorithm).
    #[arg(long, default_value_t = 5)]
    samples: usize,
    #[arg(long, default_value = "benches/results/study")]
    out: PathBuf,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Also write each workload's trace here as `WORKLOAD.csv` for `dmc-bench trace`
    /// (`timestamp_ms,get,key:ID,size`, at --rate requests a second).
    #[arg(long)]
    traces: Option<PathBuf>,
    /// The pace written traces record, requests a second.
    #[arg(long, default_value_t = 20_000)]
    rate: u64,
}

#[derive(Debug, Args)]
struct TrafficArgs {
    /// Keys loaded into each backend's table first.
    #[arg(long, default_value_t = 100_000)]
    keys: u64,
    /// Operations per measurement.
    #[arg(long, default_value_t = 20_000)]
    ops: u64,
    /// Where traffic.csv and traffic.md go.
    #[arg(long, default_value = "benches/results/traffic")]
    out: PathBuf,
}

#[derive(Debug, Args)]
struct CurveArgs {
    /// The CSV (a header row, then one row per point).
    csv: PathBuf,
    /// The PNG to write.
    #[arg(long)]
    out: PathBuf,
    #[arg(long, default_value = "")]
    title: String,
    /// The x column.
    #[arg(long)]
    x: String,
    /// The y column.
    #[arg(long)]
    y: String,
    /// Columns whose values name a line (repeatable; none: one line).
    #[arg(long)]
    by: Vec<String>,
    /// Keep only rows whose COLUMN=VALUE (repeatable).
    #[arg(long = "where")]
    filter: Vec<String>,
    /// A logarithmic x axis.
    #[arg(long)]
    log_x: bool,
}

fn curve_cmd(a: CurveArgs) -> Result<()> {
    let text =
        std::fs::read_to_string(&a.csv).with_context(|| format!("reading {}", a.csv.display()))?;
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().context("an empty CSV")?.split(',').collect();
    let col = |name: &str| {
        header
            .iter()
            .position(|h| *h == name)
            .with_context(|| format!("no column {name} in {}", a.csv.display()))
    };
    let (x, y) = (col(&a.x)?, col(&a.y)?);
    let by = a.by.iter().map(|b| col(b)).collect::<Result<Vec<_>>>()?;
    let mut filters = Vec::new();
    for f in &a.filter {
        let (c, v) = f
            .split_once('=')
            .with_context(|| format!("{f}: expected COLUMN=VALUE"))?;
        filters.push((col(c)?, v.to_string()));
    }
    let mut series: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
    for line in lines {
        let f: Vec<&str> = line.split(',').collect();
        if filters.iter().any(|(c, v)| f.get(*c) != Some(&v.as_str())) {
            continue;
        }
        let num = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok());
        let (Some(px), Some(py)) = (num(x), num(y)) else {
            continue;
        };
        let name: Vec<&str> = by
            .iter()
            .map(|&i| f.get(i).copied().unwrap_or(""))
            .collect();
        let name = name.join(" ");
        match series.iter_mut().find(|(n, _)| *n == name) {
            Some((_, pts)) => pts.push((px, py)),
            None => series.push((name, vec![(px, py)])),
        }
    }
    if series.is_empty() {
        bail!("no points in {}", a.csv.display());
    }
    dmc_benches::loadgen::plot::lines(&a.out, &a.title, &a.x, &a.y, &series, a.log_x)
}

#[derive(Debug, Args)]
struct PlotArgs {
    /// The PNG to write.
    #[arg(long)]
    out: PathBuf,
    #[arg(long, default_value = "")]
    title: String,
    /// An event: SECOND:LABEL (repeatable).
    #[arg(long)]
    mark: Vec<String>,
    /// NAME=TIMELINE.csv (repeatable).
    series: Vec<String>,
}

fn plot_cmd(a: PlotArgs) -> Result<()> {
    let mut series = Vec::new();
    for s in &a.series {
        let (name, path) = s
            .split_once('=')
            .with_context(|| format!("{s}: expected NAME=FILE.csv"))?;
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {path}"))?;
        let (mut ops, mut p99) = (Vec::new(), Vec::new());
        let rows: Vec<&str> = text.lines().skip(1).collect();
        // The last second of a run is partial.
        for line in &rows[..rows.len().saturating_sub(1)] {
            let f: Vec<&str> = line.split(',').collect();
            let num = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok());
            if let (Some(sec), Some(o), Some(p)) = (num(0), num(1), num(8)) {
                ops.push((sec, o));
                p99.push((sec, p / 1000.0));
            }
        }
        series.push((name.to_string(), ops, p99));
    }
    let mut marks = Vec::new();
    for m in &a.mark {
        let (at, label) = m
            .split_once(':')
            .with_context(|| format!("{m}: expected SECOND:LABEL"))?;
        marks.push((
            at.parse::<f64>().context("the mark's second")?,
            label.to_string(),
        ));
    }
    dmc_benches::loadgen::plot::timeline(&a.out, &a.title, &series, &marks)
}

#[derive(Debug, Args)]
struct TraceArgs {
    /// The trace: `timestamp_ms,op,key,size` rows, op get|set|del.
    file: PathBuf,
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    #[arg(long, short = 'p', default_value_t = 6379)]
    port: u16,
    #[arg(long, short = 'c', default_value_t = 8)]
    connections: usize,
    /// Replay at this multiple of the recorded pace (0: as fast as possible).
    #[arg(long, default_value_t = 0.0)]
    speed: f64,
    /// Do not SET a key after its GET misses.
    #[arg(long)]
    no_fill: bool,
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u8).range(2..=3))]
    resp: u8,
    #[arg(long, short = 'a')]
    auth: Option<String>,
    #[arg(long)]
    json: Option<PathBuf>,
    #[arg(long)]
    timeline: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct RunArgs {
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    #[arg(long, short = 'p', default_value_t = 6379)]
    port: u16,
    /// Connections.
    #[arg(long, short = 'c', default_value_t = 50)]
    connections: usize,
    /// Requests in flight per connection (closed loop).
    #[arg(long, short = 'P', default_value_t = 1)]
    pipeline: usize,
    /// RESP version (3 sends HELLO 3).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u8).range(2..=3))]
    resp: u8,
    #[arg(long, short = 'a')]
    auth: Option<String>,
    /// YCSB workload a, b, c, d or f; or `custom` with --read/--update/--insert/--rmw.
    #[arg(long, short = 'w', default_value = "b")]
    workload: String,
    #[arg(long, default_value_t = 0.0)]
    read: f64,
    #[arg(long, default_value_t = 0.0)]
    update: f64,
    #[arg(long, default_value_t = 0.0)]
    insert: f64,
    #[arg(long, default_value_t = 0.0)]
    rmw: f64,
    /// Key choice: uniform, zipf[:θ] or latest[:θ] (default: the workload's, θ 0.99).
    #[arg(long)]
    key_dist: Option<KeyDist>,
    /// Keys loaded before the run.
    #[arg(long, short = 'n', default_value_t = 1_000_000)]
    keys: u64,
    /// Key bytes: fixed (16) or a range (16-64; each key's length is fixed by its id).
    #[arg(long, default_value = "16")]
    key_size: Size,
    /// Value bytes: fixed (32) or uniform range (16-512).
    #[arg(long, short = 'd', default_value = "32")]
    value_size: Size,
    /// Write keys with this time to live (seconds).
    #[arg(long)]
    ttl: Option<u64>,
    /// Measured seconds (after warm-up); default 10 unless --ops is given.
    #[arg(long)]
    duration: Option<f64>,
    /// Stop after this many requests instead.
    #[arg(long)]
    ops: Option<u64>,
    /// Seconds of warm-up, excluded from the results.
    #[arg(long, default_value_t = 2.0)]
    warmup: f64,
    /// Fixed-rate mode: requests per second over all connections (open loop).
    #[arg(long)]
    rate: Option<f64>,
    /// Skip the load phase (the keys are there already).
    #[arg(long)]
    no_load: bool,
    /// Only load the keys.
    #[arg(long)]
    load_only: bool,
    /// Write the JSON summary here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write the per-second timeline (CSV) here.
    #[arg(long)]
    timeline: Option<PathBuf>,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// No progress output.
    #[arg(long, short = 'q')]
    quiet: bool,
    /// Cluster mode: route by hash slot (CLUSTER SLOTS), follow MOVED and ASK.
    #[arg(long)]
    cluster: bool,
}

#[derive(Debug, Args)]
struct CompareArgs {
    /// Where CSV, Markdown and PNG results go.
    #[arg(long, default_value = "benches/results/compare")]
    out: PathBuf,
    /// Repetitions of every measurement (targets alternate order each time).
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// redis-benchmark -n.
    #[arg(long, default_value_t = 200_000)]
    requests: u64,
    #[arg(long, default_value_t = 1_000_000)]
    keys: u64,
    /// Seconds per YCSB measurement.
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    #[arg(long, default_value_t = 2.0)]
    warmup: f64,
    #[arg(long, default_value = "a,b,c,d", value_delimiter = ',')]
    workloads: Vec<String>,
    #[arg(long, default_value_t = 0.99)]
    theta: f64,
    #[arg(long, short = 'c', default_value_t = 50)]
    connections: usize,
    /// Leave out the agent over two shm memory nodes.
    #[arg(long)]
    no_shm: bool,
    /// Add an agent over two memory nodes reached over tcp (r = 2).
    #[arg(long)]
    tcp: bool,
    /// Directory of compute-agent and memory-node (default: next to this binary).
    #[arg(long)]
    bin_dir: Option<PathBuf>,
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    match cli.cmd {
        Cmd::Plot(a) => plot_cmd(a),
        Cmd::Curve(a) => curve_cmd(a),
        Cmd::Run(a) => rt.block_on(run_cmd(a)),
        Cmd::Trace(a) => rt.block_on(trace_cmd(a)),
        Cmd::Study(a) => dmc_benches::study::study(&dmc_benches::study::StudyConfig {
            workloads: a.workloads,
            keys: a.keys,
            requests: a.requests,
            phases: a.phases,
            sizes: a.sizes,
            samples: a.samples,
            out: a.out,
            seed: a.seed,
            traces: a.traces.map(|dir| (dir, a.rate)),
        }),
        Cmd::Traffic(a) => rt.block_on(dmc_benches::traffic::traffic_cmd(
            dmc_benches::traffic::TrafficConfig {
                keys: a.keys,
                ops: a.ops,
                out: a.out,
            },
        )),
        Cmd::Compare(a) => {
            let bin_dir = match a.bin_dir {
                Some(d) => d,
                None => std::env::current_exe()?
                    .parent()
                    .context("binary directory")?
                    .to_path_buf(),
            };
            rt.block_on(compare(CompareConfig {
                out: a.out,
                reps: a.reps.max(1),
                requests: a.requests,
                keys: a.keys,
                duration: Duration::from_secs_f64(a.duration),
                warmup: Duration::from_secs_f64(a.warmup),
                workloads: a.workloads,
                theta: a.theta,
                connections: a.connections,
                shm: !a.no_shm,
                tcp: a.tcp,
                bin_dir,
            }))
        }
    }
}

async fn trace_cmd(a: TraceArgs) -> Result<()> {
    let rows = trace::load(&a.file)?;
    let n = rows.len();
    let target = Target {
        addr: format!("{}:{}", a.host, a.port),
        proto: a.resp,
        auth: a.auth,
    };
    eprintln!("replaying {n} requests from {}", a.file.display());
    let (rec, took) = trace::replay(&target, rows, a.connections, a.speed, !a.no_fill).await?;
    let summary = Summary::new(
        &rec,
        took,
        &target.addr,
        "trace",
        a.connections,
        1,
        a.resp,
        n as u64,
        "trace".into(),
        "trace".into(),
        None,
    );
    report(&summary, &rec, a.json.as_deref(), a.timeline.as_deref())
}

/// Prints the summary table and writes the JSON summary and per-second CSV if asked.
fn report(
    summary: &Summary,
    rec: &Recorder,
    json: Option<&std::path::Path>,
    timeline: Option<&std::path::Path>,
) -> Result<()> {
    print!("{}", summary.table());
    if let Some(p) = json {
        summary.write_json(p)?;
    }
    if let Some(p) = timeline {
        std::fs::write(p, timeline_csv(rec)).with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(())
}

async fn run_cmd(a: RunArgs) -> Result<()> {
    let (name, mix, dist) = if a.workload.eq_ignore_ascii_case("custom") {
        let mix = Mix {
            read: a.read,
            update: a.update,
            insert: a.insert,
            rmw: a.rmw,
        };
        if mix.read + mix.update + mix.insert + mix.rmw <= 0.0 {
            bail!("a custom workload needs --read, --update, --insert or --rmw weights");
        }
        ("custom", mix, a.key_dist.unwrap_or(KeyDist::Zipf(0.99)))
    } else {
        let w = Workload::ycsb(&a.workload, 0.99).with_context(|| {
            format!("unknown workload {:?} (a, b, c, d, f, custom)", a.workload)
        })?;
        (w.name, w.mix, a.key_dist.unwrap_or(w.dist))
    };
    let target = Target {
        addr: format!("{}:{}", a.host, a.port),
        proto: a.resp,
        auth: a.auth.clone(),
    };
    if !a.no_load {
        let bar = if a.quiet {
            ProgressBar::hidden()
        } else {
            ProgressBar::new(a.keys)
        };
        bar.set_style(
            ProgressStyle::with_template("loading {bar:40} {pos}/{len} keys {per_sec} eta {eta}")
                .context("progress template")?,
        );
        let b = bar.clone();
        let spec = LoadSpec {
            connections: a.connections.min(16),
            keys: a.keys,
            key_size: a.key_size,
            value_size: a.value_size,
            ttl_secs: a.ttl,
            cluster: a.cluster,
        };
        load(&target, &spec, Arc::new(move |n| b.set_position(n))).await?;
        bar.finish();
    }
    if a.load_only {
        return Ok(());
    }
    let spinner = if a.quiet {
        ProgressBar::hidden()
    } else {
        ProgressBar::new_spinner()
    };
    let s = spinner.clone();
    let duration = match (a.duration, a.ops) {
        (Some(d), _) => Some(Duration::from_secs_f64(d)),
        (None, Some(_)) => None,
        (None, None) => Some(Duration::from_secs(10)),
    };
    let cfg = RunConfig {
        target,
        connections: a.connections,
        pipeline: a.pipeline.max(1),
        mix,
        dist,
        keys: a.keys,
        key_size: a.key_size,
        value_size: a.value_size,
        ttl_secs: a.ttl,
        duration,
        ops: a.ops,
        warmup: Duration::from_secs_f64(a.warmup),
        rate: a.rate,
        seed: a.seed,
        cluster: a.cluster,
        progress: Some(Arc::new(move |secs, ops| {
            s.set_message(format!("{name}: {secs} s measured, {ops} requests issued"));
            s.tick();
        })),
    };
    let (rec, measured) = run(cfg).await?;
    spinner.finish_and_clear();
    let value = a.value_size.to_string();
    let summary = Summary::new(
        &rec,
        measured,
        &format!("{}:{}", a.host, a.port),
        name,
        a.connections,
        a.pipeline,
        a.resp,
        a.keys,
        a.key_size.to_string(),
        value,
        a.rate,
    );
    report(&summary, &rec, a.json.as_deref(), a.timeline.as_deref())
}
