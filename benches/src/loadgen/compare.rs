//! `dmc-bench compare`: redis-server and DMC side by side on this machine, in one run.
//!
//! Starts each target on free loopback ports (redis-server; a standalone compute agent
//! on its embedded pool; an agent over two memory nodes on `shm` with `r = 2`; with
//! `--tcp`, one over two memory nodes reached over `tcp`, `r = 2`),
//! runs the same `redis-benchmark` suite and the same `dmc-bench` YCSB workloads
//! against each, repeating every measurement with the targets in alternating order,
//! and reports DMC / redis-server as the median of the per-repetition ratios. Writes
//! CSV files and PNG charts into the output directory.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::client::{LoadSpec, RunConfig, Target, load, run};
use super::keys::KeyDist;
use super::plot;
use super::report::{Summary, timeline_csv};
use super::stats::Recorder;
use super::workload::{Size, Workload};

/// What `compare` runs.
#[derive(Debug, Clone)]
pub struct CompareConfig {
    pub out: PathBuf,
    pub reps: usize,
    /// `redis-benchmark -n`.
    pub requests: u64,
    pub keys: u64,
    pub duration: Duration,
    pub warmup: Duration,
    pub workloads: Vec<String>,
    pub theta: f64,
    pub connections: usize,
    /// Include the agent over two shm memory nodes with r = 2.
    pub shm: bool,
    /// Include the agent over two memory nodes reached over tcp, r = 2.
    pub tcp: bool,
    /// Directory of the DMC binaries (`compute-agent`, `memory-node`).
    pub bin_dir: PathBuf,
}

/// A server under test; its processes are killed when it is dropped.
struct Server {
    name: &'static str,
    port: u16,
    children: Vec<Child>,
    _dirs: Vec<tempfile::TempDir>,
}

impl Drop for Server {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// This run's cluster secret.
fn run_secret() -> &'static str {
    static SECRET: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SECRET.get_or_init(|| dmc_proto::rng::hex_id(32))
}

/// Spawns a DMC process and waits for its `ready listen=ADDR` line.
fn spawn_ready(bin: &Path, args: &[String]) -> Result<(Child, String)> {
    let mut child = Command::new(bin)
        .args(args)
        // Memory nodes and the agents that use them share one secret per run.
        .env("DMC_CLUSTER_SECRET", run_secret())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("starting {}", bin.display()))?;
    let stdout = child.stdout.take().context("child stdout")?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(addr) = line.split("listen=").nth(1) {
                let _ = tx.send(addr.split_whitespace().next().unwrap_or("").to_string());
            }
        }
    });
    match rx.recv_timeout(Duration::from_secs(30)) {
        Ok(addr) => Ok((child, addr)),
        Err(_) => {
            let _ = child.kill();
            bail!("{} did not report ready", bin.display())
        }
    }
}

fn wait_ping(port: u16) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if let Ok(out) = Command::new("redis-cli")
            .args(["-p", &port.to_string(), "PING"])
            .output()
            && String::from_utf8_lossy(&out.stdout).trim() == "PONG"
        {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    bail!("nothing answers PING on port {port}")
}

fn start_redis() -> Result<Server> {
    let port = free_port()?;
    let dir = tempfile::tempdir()?;
    let child = Command::new("redis-server")
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .arg("--dir")
        .arg(dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting redis-server (apt-get install redis-server)")?;
    let s = Server {
        name: "redis-server",
        port,
        children: vec![child],
        _dirs: vec![dir],
    };
    wait_ping(port)?;
    Ok(s)
}

fn start_agent(
    bin_dir: &Path,
    extra: &[String],
    name: &'static str,
    mut children: Vec<Child>,
    dirs: Vec<tempfile::TempDir>,
) -> Result<Server> {
    let mut args = vec![
        "--port".to_string(),
        "0".to_string(),
        "--log".to_string(),
        "warn".to_string(),
    ];
    args.extend_from_slice(extra);
    let (child, addr) = spawn_ready(&bin_dir.join("compute-agent"), &args)?;
    children.push(child);
    let port = addr
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .context("agent port")?;
    Ok(Server {
        name,
        port,
        children,
        _dirs: dirs,
    })
}

/// An agent over two memory nodes reached with `backend` (`shm` or `tcp`), `r = 2`.
fn start_pooled(bin_dir: &Path, backend: &str) -> Result<Server> {
    let (mut children, mut dirs, mut nodes) = (Vec::new(), Vec::new(), Vec::new());
    for id in 1..=2 {
        let dir = if Path::new("/dev/shm").is_dir() {
            tempfile::tempdir_in("/dev/shm")?
        } else {
            tempfile::tempdir()?
        };
        let args: Vec<String> = [
            "--id",
            &id.to_string(),
            "--listen",
            "127.0.0.1:0",
            "--capacity",
            "4gb",
            "--log",
            "warn",
        ]
        .iter()
        .map(|s| s.to_string())
        .chain(["--dir".to_string(), dir.path().display().to_string()])
        .collect();
        let (child, addr) = spawn_ready(&bin_dir.join("memory-node"), &args)?;
        children.push(child);
        dirs.push(dir);
        nodes.push(addr);
    }
    let mut extra: Vec<String> = vec![
        "--pool-backend".into(),
        backend.into(),
        "--replicas".into(),
        "2".into(),
    ];
    for n in nodes {
        extra.push("--pool-node".into());
        extra.push(n);
    }
    let name = if backend == "tcp" {
        "dmc-tcp-r2"
    } else {
        "dmc-shm-r2"
    };
    start_agent(bin_dir, &extra, name, children, dirs)
}

/// One redis-benchmark row.
#[derive(Debug, Clone)]
struct BenchRow {
    test: String,
    rps: f64,
    p50_ms: f64,
    p99_ms: f64,
}

fn redis_benchmark(
    port: u16,
    pipeline: usize,
    requests: u64,
    connections: usize,
) -> Result<Vec<BenchRow>> {
    let out = Command::new("redis-benchmark")
        .args([
            "-p",
            &port.to_string(),
            "-c",
            &connections.to_string(),
            "-n",
            &requests.to_string(),
        ])
        .args([
            "-r",
            "100000",
            "-d",
            "32",
            "-t",
            "ping,set,get,incr,mset",
            "-P",
            &pipeline.to_string(),
            "--csv",
        ])
        .output()
        .context("running redis-benchmark (apt-get install redis-tools)")?;
    if !out.status.success() {
        bail!(
            "redis-benchmark failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let mut rows = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines().skip(1) {
        let f: Vec<String> = line
            .split(',')
            .map(|s| s.trim_matches('"').to_string())
            .collect();
        if f.len() >= 7 {
            rows.push(BenchRow {
                test: f[0].clone(),
                rps: f[1].parse().unwrap_or(0.0),
                p50_ms: f[4].parse().unwrap_or(0.0),
                p99_ms: f[6].parse().unwrap_or(0.0),
            });
        }
    }
    Ok(rows)
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

/// (suite, test, target) -> per-repetition (rps, p50 µs, p99 µs).
type Results = BTreeMap<(String, String, String), Vec<(f64, f64, f64)>>;

pub async fn compare(cfg: CompareConfig) -> Result<()> {
    std::fs::create_dir_all(&cfg.out)?;
    let started = Instant::now();
    let mut servers = vec![
        start_redis()?,
        start_agent(&cfg.bin_dir, &[], "dmc", Vec::new(), Vec::new())?,
    ];
    if cfg.shm {
        servers.push(start_pooled(&cfg.bin_dir, "shm")?);
    }
    if cfg.tcp {
        servers.push(start_pooled(&cfg.bin_dir, "tcp")?);
    }
    for s in &servers {
        eprintln!("{} on 127.0.0.1:{}", s.name, s.port);
    }
    let mut results: Results = BTreeMap::new();
    let mut csv = String::from("suite,test,target,rep,rps,p50_us,p99_us\n");
    // redis-benchmark, -P 1 and -P 16, targets in alternating order per repetition.
    for rep in 0..cfg.reps {
        for pipeline in [1usize, 16] {
            let order = alternating(&servers, rep);
            for s in order {
                eprintln!(
                    "[{:>4.0}s] redis-benchmark -P {pipeline} on {} (rep {})",
                    started.elapsed().as_secs_f64(),
                    s.name,
                    rep + 1
                );
                for row in redis_benchmark(s.port, pipeline, cfg.requests, cfg.connections)? {
                    let test = format!("{} -P{pipeline}", row.test);
                    let _ = writeln!(
                        csv,
                        "redis-benchmark,{test},{},{rep},{:.0},{:.0},{:.0}",
                        s.name,
                        row.rps,
                        row.p50_ms * 1000.0,
                        row.p99_ms * 1000.0
                    );
                    results
                        .entry(("redis-benchmark".into(), test, s.name.into()))
                        .or_default()
                        .push((row.rps, row.p50_ms * 1000.0, row.p99_ms * 1000.0));
                }
            }
        }
    }
    // dmc-bench: load once per target, then every workload, alternating.
    let target = |s: &Server| Target {
        addr: format!("127.0.0.1:{}", s.port),
        proto: 2,
        auth: None,
    };
    for s in &servers {
        eprintln!(
            "[{:>4.0}s] loading {} keys into {}",
            started.elapsed().as_secs_f64(),
            cfg.keys,
            s.name
        );
        let spec = LoadSpec {
            connections: 16,
            keys: cfg.keys,
            key_size: Size::Fixed(16),
            value_size: Size::Fixed(32),
            ttl_secs: None,
            cluster: false,
        };
        load(&target(s), &spec, Arc::new(|_| {})).await?;
    }
    let mut last: BTreeMap<(String, String), Recorder> = BTreeMap::new();
    let mut timelines = String::from("workload,target,");
    timelines.push_str("second,ops,gets,hits,misses,writes,errors,p50_us,p99_us\n");
    for rep in 0..cfg.reps {
        for w in &cfg.workloads {
            let wl =
                Workload::ycsb(w, cfg.theta).with_context(|| format!("unknown workload {w}"))?;
            let order = alternating(&servers, rep);
            for s in order {
                eprintln!(
                    "[{:>4.0}s] {} on {} (rep {})",
                    started.elapsed().as_secs_f64(),
                    wl.name,
                    s.name,
                    rep + 1
                );
                let rc = RunConfig {
                    target: target(s),
                    connections: cfg.connections,
                    pipeline: 1,
                    mix: wl.mix,
                    dist: match wl.dist {
                        KeyDist::Latest(_) => KeyDist::Latest(cfg.theta),
                        _ => KeyDist::Zipf(cfg.theta),
                    },
                    keys: cfg.keys,
                    key_size: Size::Fixed(16),
                    value_size: Size::Fixed(32),
                    ttl_secs: None,
                    duration: Some(cfg.duration),
                    ops: None,
                    warmup: cfg.warmup,
                    rate: None,
                    seed: rep as u64,
                    progress: None,
                    cluster: false,
                };
                let (rec, measured) = run(rc).await?;
                let sum = Summary::new(
                    &rec,
                    measured,
                    s.name,
                    wl.name,
                    cfg.connections,
                    1,
                    2,
                    cfg.keys,
                    "16".into(),
                    "32".into(),
                    None,
                );
                let (p50, p99) = (sum.latency_us.p50 as f64, sum.latency_us.p99 as f64);
                let _ = writeln!(
                    csv,
                    "dmc-bench,{},{},{rep},{:.0},{p50:.0},{p99:.0}",
                    wl.name, s.name, sum.ops_per_sec
                );
                results
                    .entry(("dmc-bench".into(), wl.name.into(), s.name.into()))
                    .or_default()
                    .push((sum.ops_per_sec, p50, p99));
                if rep + 1 == cfg.reps {
                    for line in timeline_csv(&rec).lines().skip(1) {
                        let _ = writeln!(timelines, "{},{},{line}", wl.name, s.name);
                    }
                    last.insert((wl.name.to_string(), s.name.to_string()), rec);
                }
            }
        }
    }
    std::fs::write(cfg.out.join("runs.csv"), &csv)?;
    std::fs::write(cfg.out.join("timeline.csv"), &timelines)?;
    let names: Vec<&'static str> = servers.iter().map(|s| s.name).collect();
    let table = ratio_table(&results, &names);
    std::fs::write(cfg.out.join("ratios.md"), &table)?;
    println!("{table}");
    if let Err(e) = charts(&cfg, &results, &last, &names) {
        eprintln!("charts skipped: {e:#}");
    }
    eprintln!(
        "done in {:.0} s; results in {}",
        started.elapsed().as_secs_f64(),
        cfg.out.display()
    );
    Ok(())
}

/// The Markdown ratio table: median rps per target, DMC / redis-server as the median
/// of per-repetition ratios, and median p50/p99.
fn ratio_table(results: &Results, names: &[&str]) -> String {
    let mut s = String::new();
    let mut header = "| suite | test |".to_string();
    let mut rule = "|---|---|".to_string();
    for n in names {
        let _ = write!(header, " {n} ops/s | {n} p50/p99 µs |");
        rule.push_str("---|---|");
    }
    for n in &names[1..] {
        let _ = write!(header, " {n} / redis |");
        rule.push_str("---|");
    }
    let _ = writeln!(s, "{header}\n{rule}");
    let mut tests: Vec<(String, String)> = results
        .keys()
        .map(|(a, b, _)| (a.clone(), b.clone()))
        .collect();
    tests.dedup();
    for (suite, test) in tests {
        let get = |n: &str| results.get(&(suite.clone(), test.clone(), n.to_string()));
        let mut row = format!("| {suite} | {test} |");
        for n in names {
            match get(n) {
                Some(v) => {
                    let _ = write!(
                        row,
                        " {:.0} | {:.0} / {:.0} |",
                        median(v.iter().map(|x| x.0).collect()),
                        median(v.iter().map(|x| x.1).collect()),
                        median(v.iter().map(|x| x.2).collect())
                    );
                }
                None => row.push_str(" – | – |"),
            }
        }
        let base = get(names[0]);
        for n in &names[1..] {
            match (base, get(n)) {
                (Some(b), Some(d)) => {
                    let ratios: Vec<f64> = b
                        .iter()
                        .zip(d)
                        .filter(|(b, _)| b.0 > 0.0)
                        .map(|(b, d)| d.0 / b.0)
                        .collect();
                    let _ = write!(row, " {:.2} |", median(ratios));
                }
                _ => row.push_str(" – |"),
            }
        }
        let _ = writeln!(s, "{row}");
    }
    s
}

/// Per target, the median throughput of each of `tests` in `suite` (0 when missing).
fn median_series(
    results: &Results,
    suite: &str,
    tests: &[String],
    names: &[&str],
) -> Vec<(String, Vec<f64>)> {
    names
        .iter()
        .map(|n| {
            let v = tests
                .iter()
                .map(|t| {
                    results
                        .get(&(suite.to_string(), t.clone(), n.to_string()))
                        .map(|v| median(v.iter().map(|x| x.0).collect()))
                        .unwrap_or(0.0)
                })
                .collect();
            (n.to_string(), v)
        })
        .collect()
}

fn charts(
    cfg: &CompareConfig,
    results: &Results,
    last: &BTreeMap<(String, String), Recorder>,
    names: &[&str],
) -> Result<()> {
    plot::init()?;
    let workloads: Vec<String> = cfg
        .workloads
        .iter()
        .filter_map(|w| Workload::ycsb(w, cfg.theta).map(|w| w.name.to_string()))
        .collect();
    let series = median_series(results, "dmc-bench", &workloads, names);
    plot::bars(
        &cfg.out.join("throughput.png"),
        "YCSB throughput (median of repetitions)",
        "ops/s",
        &workloads,
        &series,
    )?;
    let rb_tests: Vec<String> = {
        let mut t: Vec<String> = results
            .keys()
            .filter(|k| k.0 == "redis-benchmark")
            .map(|k| k.1.clone())
            .collect();
        t.dedup();
        t
    };
    let rb = median_series(results, "redis-benchmark", &rb_tests, names);
    plot::bars(
        &cfg.out.join("redis-benchmark.png"),
        "redis-benchmark (median of repetitions)",
        "requests/s",
        &rb_tests,
        &rb,
    )?;
    // Latency CDF and timeline of the first workload, last repetition.
    if let Some(w) = workloads.first() {
        let cdf: Vec<(String, Vec<(f64, f64)>)> = names
            .iter()
            .filter_map(|n| {
                last.get(&(w.clone(), n.to_string()))
                    .map(|r| (n.to_string(), r))
            })
            .map(|(n, r)| {
                // Every recorded latency bucket with the share of requests at or below it.
                let total = r.all.len().max(1) as f64;
                let pts = r
                    .all
                    .iter_recorded()
                    .map(|v| {
                        (
                            v.value_iterated_to() as f64,
                            v.count_since_last_iteration() as f64,
                        )
                    })
                    .scan(0.0, |seen, (value, n)| {
                        *seen += n;
                        Some((value, *seen / total))
                    })
                    .collect();
                (n, pts)
            })
            .collect();
        plot::lines(
            &cfg.out.join("latency-cdf.png"),
            &format!("{w}: latency CDF"),
            "latency (µs, log)",
            "fraction of requests",
            &cdf,
            true,
        )?;
        let tl: Vec<(String, Vec<(f64, f64)>)> = names
            .iter()
            .filter_map(|n| {
                last.get(&(w.clone(), n.to_string()))
                    .map(|r| (n.to_string(), r))
            })
            .map(|(n, r)| {
                let pts = r
                    .seconds
                    .iter()
                    .enumerate()
                    .map(|(i, s)| (i as f64, s.counts.ops as f64))
                    .collect();
                (n, pts)
            })
            .collect();
        plot::lines(
            &cfg.out.join("timeline.png"),
            &format!("{w}: throughput per second"),
            "second",
            "ops/s",
            &tl,
            false,
        )?;
    }
    Ok(())
}

/// The targets in one order on even repetitions and reversed on odd ones, so neither
/// always runs first.
fn alternating(servers: &[Server], rep: usize) -> Vec<&Server> {
    match rep % 2 {
        0 => servers.iter().collect(),
        _ => servers.iter().rev().collect(),
    }
}
