//! Helpers for end-to-end tests: find the workspace's binaries, start them on free
//! loopback ports, and kill them when the test ends.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

mod resp_conn;
pub use resp_conn::{Frame, RespConn, error_text};

/// The cluster secret every process these tests start is given (through the
/// environment, as an operator would, never on a command line).
pub const TEST_SECRET: &str = "dmc-e2e-cluster-secret";
/// The variable processes read the cluster secret from.
pub const SECRET_ENV: &str = "DMC_CLUSTER_SECRET";

/// Path of a binary of this workspace, built next to the test executable.
pub fn bin(name: &str) -> Result<PathBuf> {
    let exe = std::env::current_exe()?;
    // target/<profile>/deps/<test> -> target/<profile>/<name>
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .context("test executable has no target directory")?;
    let path = dir.join(name);
    if !path.exists() {
        bail!(
            "{} is missing: build the workspace first (cargo build --workspace)",
            path.display()
        );
    }
    Ok(path)
}

/// Serialises the tests of one test binary that time failovers: each starts a cluster
/// (manager, agents, memory nodes, a load client) and two side by side on 2 cores
/// starve each other's heartbeats past a short lease ("lease lapsed" client errors in
/// `migration.rs` and `node_failover.rs` under CI). Hold the guard for the test's life.
pub fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Starts a binary that prints `<name> ready listen=ADDR` on stdout and returns the
/// child and the address, waiting at most 20 s.
fn start_ready(name: &str, args: &[String], env: &[(&str, &str)]) -> Result<Ready> {
    start_ready_cmd(name, Command::new(bin(name)?), args, env)
}

/// [`start_ready`] inside the network namespace `netns` (`ip netns exec`, which execs
/// the binary, so the child is the process itself).
pub fn start_ready_in_netns(netns: &str, name: &str, args: &[String]) -> Result<(Child, String)> {
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", netns]).arg(bin(name)?);
    let r = start_ready_cmd(name, cmd, args, &[])?;
    Ok((r.child, r.addr))
}

fn start_ready_cmd(
    name: &str,
    mut cmd: Command,
    args: &[String],
    env: &[(&str, &str)],
) -> Result<Ready> {
    let mut child = cmd
        .args(args)
        .env(SECRET_ENV, TEST_SECRET)
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .with_context(|| format!("spawning {name}"))?;
    let stdout = child.stdout.take().context("stdout")?;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout).lines();
        if let Some(Ok(line)) = lines.next() {
            let _ = tx.send(line);
        }
        for _ in lines {}
    });
    let line = match rx.recv_timeout(Duration::from_secs(20)) {
        Ok(l) => l,
        // Its stdout closed without a ready line: it exited (its error is on stderr).
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            let status = child.wait().context("waiting for it")?;
            bail!("{name} exited before it was ready ({status})");
        }
        Err(mpsc::RecvTimeoutError::Timeout) => {
            let _ = child.kill();
            bail!("{name} did not report ready within 20 s");
        }
    };
    let addr =
        ready_field(&line, "listen").with_context(|| format!("unexpected ready line {line:?}"))?;
    Ok(Ready { child, addr, line })
}

/// A process that reported ready: its listen address and its whole ready line.
struct Ready {
    child: Child,
    addr: String,
    line: String,
}

/// The value of `key=` in a ready line.
fn ready_field(line: &str, key: &str) -> Option<String> {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
        .map(str::to_string)
}

/// A running `compute-agent`, killed on drop.
pub struct Agent {
    pub child: Child,
    pub addr: String,
    /// Where it serves /metrics, as it reported (`--metrics-listen`, port 0 allowed).
    pub metrics: Option<String>,
}

impl Agent {
    /// Starts an agent on a free loopback port with extra flags.
    pub fn start(extra: &[&str]) -> Result<Self> {
        Self::start_with_env(extra, &[])
    }

    /// Starts an agent with extra flags and environment variables (`FAILPOINTS`).
    pub fn start_with_env(extra: &[&str], env: &[(&str, &str)]) -> Result<Self> {
        let mut args: Vec<String> = ["--port", "0", "--log", "warn"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        args.extend(extra.iter().map(|s| s.to_string()));
        let r = start_ready("compute-agent", &args, env)?;
        Ok(Agent {
            metrics: ready_field(&r.line, "metrics"),
            child: r.child,
            addr: r.addr,
        })
    }

    pub fn port(&self) -> String {
        self.addr.rsplit(':').next().unwrap_or_default().to_string()
    }

    /// Runs `redis-cli -p PORT args…` and returns its stdout.
    pub fn cli(&self, args: &[&str]) -> Result<String> {
        let out = Command::new("redis-cli")
            .args(["-p", &self.port()])
            .args(args)
            .output()
            .context("running redis-cli (apt-get install redis-tools)")?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A running `memory-node` process, killed on drop.
pub struct MemoryNode {
    pub child: Child,
    /// `host:port` it listens on.
    pub endpoint: String,
    pub id: u32,
    pub dir: PathBuf,
}

impl MemoryNode {
    /// Starts a node on a free loopback port and waits (bounded) for its ready line.
    pub fn start(id: u32, dir: &Path, capacity: &str) -> Result<Self> {
        Self::start_with(id, dir, capacity, &[])
    }

    /// [`start`](Self::start) with extra flags.
    pub fn start_with(id: u32, dir: &Path, capacity: &str, extra: &[&str]) -> Result<Self> {
        Self::start_with_env(id, dir, capacity, extra, &[])
    }

    /// [`start_with`](Self::start_with) and environment variables (`FAILPOINTS`).
    pub fn start_with_env(
        id: u32,
        dir: &Path,
        capacity: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Result<Self> {
        let args: Vec<String> = [
            "--id",
            &id.to_string(),
            "--listen",
            "127.0.0.1:0",
            "--capacity",
            capacity,
            "--log",
            "warn",
            "--dir",
        ]
        .iter()
        .map(|s| s.to_string())
        .chain(std::iter::once(dir.display().to_string()))
        .chain(extra.iter().map(|s| s.to_string()))
        .collect();
        let Ready {
            child,
            addr: endpoint,
            ..
        } = start_ready("memory-node", &args, env)?;
        Ok(MemoryNode {
            child,
            endpoint,
            id,
            dir: dir.to_path_buf(),
        })
    }

    /// SIGKILL: the process dies without any cleanup.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for MemoryNode {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A running `cluster-manager serve` on a free loopback port with its state in `dir`.
/// On drop it is killed, and so is every agent its launcher started.
pub struct ClusterManager {
    pub child: Child,
    /// `http://host:port` of its admin API.
    pub url: String,
    pub state: PathBuf,
}

impl ClusterManager {
    pub fn start(dir: &Path, extra: &[&str]) -> Result<Self> {
        Self::start_with_env(dir, extra, &[])
    }

    /// [`start`](Self::start) with environment variables, which the agents it
    /// launches inherit (`FAILPOINTS`).
    pub fn start_with_env(dir: &Path, extra: &[&str], env: &[(&str, &str)]) -> Result<Self> {
        let state = dir.join("cluster.json");
        let mut args: Vec<String> = ["serve", "--listen", "127.0.0.1:0", "--log", "warn"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        args.extend(["--state".to_string(), state.display().to_string()]);
        args.extend([
            "--log-dir".to_string(),
            dir.join("agents").display().to_string(),
        ]);
        args.extend(extra.iter().map(|s| s.to_string()));
        let Ready { child, addr, .. } = start_ready("cluster-manager", &args, env)?;
        Ok(ClusterManager {
            child,
            url: format!("http://{addr}"),
            state,
        })
    }

    /// Runs `cluster-manager --manager URL args…`; its stdout, or an error with its
    /// stderr if it failed.
    pub fn cli(&self, args: &[&str]) -> Result<String> {
        let out = Command::new(bin("cluster-manager")?)
            .env(SECRET_ENV, TEST_SECRET)
            .args(["--manager", &self.url])
            .args(args)
            .output()?;
        if !out.status.success() {
            bail!(
                "cluster-manager {args:?} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// `status --json`.
    pub fn status(&self) -> Result<serde_json::Value> {
        Ok(serde_json::from_str(&self.cli(&["status", "--json"])?)?)
    }

    /// Polls `status` until `check` holds, for at most 30 s.
    pub fn wait_for(
        &self,
        what: &str,
        check: impl Fn(&serde_json::Value) -> bool,
    ) -> Result<serde_json::Value> {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let s = self.status()?;
            if check(&s) {
                return Ok(s);
            }
            if std::time::Instant::now() > deadline {
                bail!("timed out waiting for {what}: {s}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Starts the manager again on the same address and state file, after
    /// [`kill`](Self::kill) (its agents keep the URL they were given).
    pub fn restart(&mut self, extra: &[&str]) -> Result<()> {
        let listen = self.url.trim_start_matches("http://").to_string();
        let mut args: Vec<String> = ["serve", "--listen", &listen, "--log", "warn"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        args.extend(["--state".to_string(), self.state.display().to_string()]);
        args.extend(extra.iter().map(|s| s.to_string()));
        let Ready { child, .. } = start_ready("cluster-manager", &args, &[])?;
        self.child = child;
        Ok(())
    }

    /// SIGKILL, leaving launched agents running (a manager crash).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    fn launched_pids(&self) -> Vec<i32> {
        self.launched().into_iter().map(|(_, pid)| pid).collect()
    }

    /// The agents the manager's launcher started, as (listen address, pid), from its
    /// state file.
    pub fn launched(&self) -> Vec<(String, i32)> {
        let Ok(text) = std::fs::read_to_string(&self.state) else {
            return Vec::new();
        };
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) else {
            return Vec::new();
        };
        v["launched"]
            .as_object()
            .map(|m| {
                m.iter()
                    .filter_map(|(listen, r)| Some((listen.clone(), r["pid"].as_i64()? as i32)))
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl Drop for ClusterManager {
    fn drop(&mut self) {
        self.kill();
        for pid in self.launched_pids() {
            // SAFETY: kill(2) with plain integers.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
    }
}

/// A cluster for a test: a manager (state and agent logs in a directory of its own)
/// and memory nodes registered with it. Fields drop in order: the manager (and the
/// agents it launched, found through its state file) before the directories.
pub struct TestCluster {
    pub manager: ClusterManager,
    pub nodes: Vec<MemoryNode>,
    pub node_dirs: Vec<tempfile::TempDir>,
    pub dir: tempfile::TempDir,
}

impl TestCluster {
    /// A manager started with `manager_args`, launched agents getting `agent_toml` as
    /// their config, and `nodes` memory nodes of `capacity` each, all registered. The
    /// load balancer is off unless `manager_args` name `--balance` (it would move
    /// primaries under tests that place them).
    pub fn start(
        manager_args: &[&str],
        agent_toml: &str,
        nodes: u32,
        capacity: &str,
    ) -> Result<TestCluster> {
        Self::start_with_node_env(manager_args, agent_toml, nodes, capacity, &|_| Vec::new())
    }

    /// [`start`](Self::start), the manager (and so the agents it launches) started
    /// with the environment `manager_env`.
    pub fn start_with_manager_env(
        manager_args: &[&str],
        agent_toml: &str,
        nodes: u32,
        capacity: &str,
        manager_env: &[(&str, &str)],
    ) -> Result<TestCluster> {
        Self::start_with_envs(
            manager_args,
            agent_toml,
            nodes,
            capacity,
            manager_env,
            &|_| Vec::new(),
        )
    }

    /// [`start`](Self::start), memory node `id` (from 1) started with the environment
    /// `node_env(id)` gives.
    pub fn start_with_node_env(
        manager_args: &[&str],
        agent_toml: &str,
        nodes: u32,
        capacity: &str,
        node_env: &dyn Fn(u32) -> Vec<(&'static str, &'static str)>,
    ) -> Result<TestCluster> {
        Self::start_with_envs(manager_args, agent_toml, nodes, capacity, &[], node_env)
    }

    fn start_with_envs(
        manager_args: &[&str],
        agent_toml: &str,
        nodes: u32,
        capacity: &str,
        manager_env: &[(&str, &str)],
        node_env: &dyn Fn(u32) -> Vec<(&'static str, &'static str)>,
    ) -> Result<TestCluster> {
        let dir = tempfile::tempdir()?;
        let agent_config = dir.path().join("agent.toml");
        std::fs::write(&agent_config, agent_toml)?;
        let config = agent_config.display().to_string();
        let mut args = manager_args.to_vec();
        args.extend(["--agent-config", &config]);
        if !manager_args.contains(&"--balance") {
            args.extend(["--balance", "false"]);
        }
        let manager = ClusterManager::start_with_env(dir.path(), &args, manager_env)?;
        let node_dirs = (0..nodes)
            .map(|_| tempfile::tempdir())
            .collect::<std::io::Result<Vec<_>>>()?;
        let started = node_dirs
            .iter()
            .zip(1..)
            .map(|(d, id)| {
                MemoryNode::start_with_env(
                    id,
                    d.path(),
                    capacity,
                    &["--manager", &manager.url],
                    &node_env(id),
                )
            })
            .collect::<Result<Vec<_>>>()?;
        manager.wait_for("the memory nodes to register", |s| {
            s["nodes"]
                .as_array()
                .is_some_and(|n| n.len() == nodes as usize)
        })?;
        Ok(TestCluster {
            manager,
            nodes: started,
            node_dirs,
            dir,
        })
    }

    /// A manager with 64 MiB regions of 1 MiB segments and `extra` flags, launching
    /// agents in `routing` mode (drain timeout 5 s), and `nodes` memory nodes of
    /// 512 MiB: the cluster the scaling and failover tests start from.
    pub fn routed(routing: &str, nodes: u32, extra: &[&str]) -> Result<TestCluster> {
        Self::routed_with_env(routing, nodes, extra, &[])
    }

    /// [`routed`](Self::routed), the manager and its agents started with `env`.
    pub fn routed_with_env(
        routing: &str,
        nodes: u32,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Result<TestCluster> {
        let mut args = vec!["--region-size", "64mb", "--segment-size", "1mb"];
        args.extend_from_slice(extra);
        TestCluster::start_with_manager_env(
            &args,
            &format!("log = \"warn\"\nrouting = \"{routing}\"\ndrain-timeout = 5\n"),
            nodes,
            "512mb",
            env,
        )
    }

    /// [`routed`](Self::routed) over a `tcp` pool with 16 shards and a lease of
    /// `lease_ms`: the failover tests' cluster (over `shm` a killed node's memory
    /// stays mapped, which hides its failure).
    pub fn routed_tcp(routing: &str, nodes: u32, lease_ms: &str) -> Result<TestCluster> {
        TestCluster::routed(routing, nodes, &tcp_failover_args(lease_ms))
    }

    /// `agents scale N --json`: the report, checked to reach `n`.
    pub fn scale(&self, n: usize) -> Result<serde_json::Value> {
        self.scale_instance("default", n)
    }

    /// `agents scale N --instance I --json`: the report, checked to reach `n`.
    pub fn scale_instance(&self, instance: &str, n: usize) -> Result<serde_json::Value> {
        let t = std::time::Instant::now();
        let report: serde_json::Value = serde_json::from_str(&self.manager.cli(&[
            "agents",
            "scale",
            &n.to_string(),
            "--instance",
            instance,
            "--json",
        ])?)?;
        eprintln!(
            "agents scale {n} --instance {instance}: {report} ({} ms by the CLI)",
            t.elapsed().as_millis()
        );
        if report["after"] != n {
            bail!("agents scale {n} ended with {report}");
        }
        Ok(report)
    }

    /// The live agents as (id, listen) and the default instance's shards.
    pub fn owners(&self) -> (Vec<(u64, String)>, Vec<ShardRow>) {
        let s = self.manager.status().unwrap_or_default();
        let agents = s["agents"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter(|a| a["alive"] == true)
                    .filter_map(|a| Some((a["id"].as_u64()?, a["listen"].as_str()?.to_string())))
                    .collect()
            })
            .unwrap_or_default();
        let rows: serde_json::Value = self
            .manager
            .cli(&["slots", "--json"])
            .ok()
            .and_then(|out| serde_json::from_str(&out).ok())
            .unwrap_or_default();
        let rows = rows
            .as_array()
            .map(|rows| {
                rows.iter()
                    .filter_map(|r| {
                        Some(ShardRow {
                            first: r["first_slot"].as_u64()?,
                            last: r["last_slot"].as_u64()?,
                            primary: r["primary"].as_u64()?,
                            backups: r["backups"]
                                .as_array()
                                .map(|b| b.iter().filter_map(|b| b.as_u64()).collect())
                                .unwrap_or_default(),
                        })
                    })
                    .collect()
            })
            .unwrap_or_default();
        (agents, rows)
    }

    /// `GET /v1/regions`: every region record.
    pub fn regions(&self) -> Vec<serde_json::Value> {
        let addr = self.manager.url.trim_start_matches("http://");
        http_get(addr, "/v1/regions")
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            .and_then(|v| v.as_array().cloned())
            .unwrap_or_default()
    }

    /// The copies that differ from their region's primary, byte for byte, as
    /// `region R: node N differs from primary P at offset O`; read from the memory
    /// nodes' region files (node `k` is `node_dirs[k - 1]`). Empty when every copy of
    /// every region equals its primary.
    pub fn divergent_copies(&self) -> Vec<String> {
        // The 8 bytes of a superblock's usage counter (`dmc_umo::layout::SB_USED`) in an
        // instance's superblock region.
        let addr = self.manager.url.trim_start_matches("http://");
        let supers: Vec<u64> = http_get(addr, "/v1/instances")
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            .and_then(|v| v.as_array().cloned())
            .unwrap_or_default()
            .iter()
            .filter_map(|i| i["super_region"].as_u64())
            .collect();
        let usage_counter = |region: u64, at: usize| {
            let sb = dmc_umo::layout::SB_USED as usize;
            supers.contains(&region) && (sb..sb + 8).contains(&at)
        };
        let file = |node: u64, region: u64| {
            let dir = self.node_dirs.get(node as usize - 1)?;
            std::fs::read(dir.path().join(format!("region-{region:05}.mem"))).ok()
        };
        let mut out = Vec::new();
        for r in self.regions() {
            let (Some(id), Some(primary)) = (r["id"].as_u64(), r["primary"].as_u64()) else {
                continue;
            };
            let Some(want) = file(primary, id) else {
                out.push(format!("region {id}: no file on primary {primary}"));
                continue;
            };
            for b in r["backups"].as_array().into_iter().flatten() {
                let b = b.as_u64().unwrap_or(0);
                match file(b, id) {
                    None => out.push(format!("region {id}: no file on backup {b}")),
                    Some(got) if got != want => {
                        // The pool's usage counter (a superblock statistic, read from the
                        // primary; backups follow it at each client's sync) is left out:
                        // see docs/architecture.md, "usage counter".
                        let differs = |i: usize| got[i] != want[i] && !usage_counter(id, i);
                        let at = (0..got.len().min(want.len())).find(|&i| differs(i));
                        if at.is_some() || got.len() != want.len() {
                            out.push(format!(
                                "region {id}: node {b} differs from primary {primary} at offset {at:?}"
                            ));
                        } else {
                            eprintln!(
                                "region {id}: node {b}'s usage counter differs from primary {primary}'s"
                            );
                        }
                    }
                    Some(_) => {}
                }
            }
        }
        out
    }

    /// Waits (30 s at most) until every copy of every region equals its primary,
    /// printing the differences seen meanwhile (counters still moving settle).
    pub fn wait_copies_identical(&self) {
        wait_until("every copy to equal its primary", || {
            let differ = self.divergent_copies();
            if !differ.is_empty() {
                eprintln!("{differ:?}");
            }
            differ.is_empty()
        });
    }

    /// Files of pool regions on the memory nodes, and their bytes.
    pub fn region_files(&self) -> (usize, u64) {
        let mut files = (0, 0);
        for d in &self.node_dirs {
            for e in std::fs::read_dir(d.path()).into_iter().flatten().flatten() {
                if e.file_name().to_string_lossy().starts_with("region-") {
                    files.0 += 1;
                    files.1 += e.metadata().map(|m| m.len()).unwrap_or(0);
                }
            }
        }
        files
    }
}

/// Whether a region record (of `GET /v1/regions`) has its primary and one backup and
/// nothing moving: no copy being filled, not frozen.
pub fn region_settled(r: &serde_json::Value) -> bool {
    r["backups"].as_array().is_some_and(|b| b.len() == 1)
        && r["filling"].as_array().is_none_or(|f| f.is_empty())
        && r["frozen"] != true
}

/// Manager flags of [`TestCluster::routed_tcp`] (for a restart with the same).
pub fn tcp_failover_args(lease_ms: &str) -> [&str; 6] {
    [
        "--shards",
        "16",
        "--lease-ms",
        lease_ms,
        "--pool-transport",
        "tcp",
    ]
}

/// The port of a `host:port` listen address in a manager report.
pub fn port_of(listen: &serde_json::Value) -> String {
    listen
        .as_str()
        .and_then(|l| l.rsplit(':').next())
        .unwrap_or_default()
        .to_string()
}

/// A shard as `slots --json` shows it: its slot range, primary agent and backups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardRow {
    pub first: u64,
    pub last: u64,
    pub primary: u64,
    pub backups: Vec<u64>,
}

impl ShardRow {
    pub fn holds(&self, key: &str) -> bool {
        let slot = u64::from(dmc_dht::hash::key_slot(key.as_bytes()));
        (self.first..=self.last).contains(&slot)
    }
}

/// The keys (of `keys`) whose hash slot agent `id` owns in `rows`.
pub fn keys_owned_by(rows: &[ShardRow], id: u64, keys: &[String]) -> Vec<String> {
    keys.iter()
        .filter(|k| rows.iter().any(|r| r.primary == id && r.holds(k)))
        .cloned()
        .collect()
}

/// A key (of `keys`) whose hash slot agent `id` owns.
pub fn key_owned_by(rows: &[ShardRow], id: u64, keys: &[String]) -> String {
    keys_owned_by(rows, id, keys)
        .into_iter()
        .next()
        .expect("a key of the agent's slots")
}

/// `redis-cli -p PORT args…`, trimmed stdout; its stderr is echoed to the test log.
/// Panics if redis-cli cannot be run, so a machine without it fails loudly.
pub fn redis_cli(port: &str, args: &[&str]) -> String {
    Command::new("redis-cli")
        .args(["-p", port])
        .args(args)
        .output()
        .map(|o| {
            if !o.stderr.is_empty() {
                eprintln!(
                    "redis-cli -p {port} {args:?}: {}",
                    String::from_utf8_lossy(&o.stderr).trim()
                );
            }
            String::from_utf8_lossy(&o.stdout).trim().to_string()
        })
        .unwrap_or_else(|e| panic!("cannot run redis-cli (is redis-tools installed?): {e}"))
}

/// A numeric INFO field of `section` on the server at `port` (0 if absent).
pub fn info_field(port: &str, section: &str, field: &str) -> u64 {
    redis_cli(port, &["info", section])
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// `GET path` over HTTP/1.0 from `addr` (`host:port`): the response body, or an error
/// if the status is not 200.
pub fn http_get(addr: &str, path: &str) -> Result<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.write_all(
        format!(
            "GET {path} HTTP/1.0\r\nHost: {addr}\r\nAuthorization: Bearer {TEST_SECRET}\r\n\r\n"
        )
        .as_bytes(),
    )?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    if !head.lines().next().is_some_and(|l| l.contains(" 200 ")) {
        bail!("GET {path} from {addr}: {head}");
    }
    Ok(body.to_string())
}

/// The value of the Prometheus sample whose name and labels are exactly `series`
/// (`name` or `name{label="v"}`) in an exposition-format `text`.
pub fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

/// `tests/py/scale_client.py` (redis-py) writing and reading through `port` until
/// [`finish`](PyClient::finish): every error and wrong value is counted.
pub struct PyClient {
    /// Taken by [`finish`](Self::finish); a client still here when the test fails is
    /// killed on drop (its stop file goes with the directory, so it would run forever).
    child: Option<Child>,
    ready: std::path::PathBuf,
    stop: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl PyClient {
    pub fn start(port: &str, extra: &[&str]) -> PyClient {
        Self::start_with_keys(port, 2000, extra)
    }

    /// [`start`](Self::start) with `keys` keys instead of 2000.
    pub fn start_with_keys(port: &str, keys: usize, extra: &[&str]) -> PyClient {
        let dir = tempfile::tempdir().unwrap();
        let (ready, stop) = (dir.path().join("ready"), dir.path().join("stop"));
        let child = Command::new("python3")
            .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/py/scale_client.py"))
            .args([port, &keys.to_string()])
            .arg(&ready)
            .arg(&stop)
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("python3");
        let deadline = Instant::now() + Duration::from_secs(60);
        while !ready.exists() {
            assert!(
                Instant::now() < deadline,
                "the client did not load its keys"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        PyClient {
            child: Some(child),
            ready,
            stop,
            _dir: dir,
        }
    }

    /// Stops the client and returns its JSON report.
    pub fn finish(mut self) -> serde_json::Value {
        std::fs::write(&self.stop, "stop").unwrap();
        let _ = &self.ready;
        let child = self.child.take().expect("a client finishes once");
        let out = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "client failed:\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_str(stdout.trim()).unwrap()
    }
}

impl Drop for PyClient {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Polls `cond` every 20 ms until it holds, failing the test after 30 s.
pub fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A test CA (`ca.pem`), a server certificate for 127.0.0.1 and localhost
/// (`server.pem`, `server.key`) and a client certificate (`client.pem`,
/// `client.key`), as PEM files in `dir`.
pub fn test_certificates(dir: &Path) {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    // Distinct names: a certificate whose subject is its issuer's looks self-signed.
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "DMC test CA");
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
    std::fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
    for (name, sans) in [
        (
            "server",
            vec!["127.0.0.1".to_string(), "localhost".to_string()],
        ),
        ("client", vec!["client".to_string()]),
    ] {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(sans).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        let cert = params.signed_by(&key, &ca).unwrap();
        std::fs::write(dir.join(format!("{name}.pem")), cert.pem()).unwrap();
        std::fs::write(dir.join(format!("{name}.key")), key.serialize_pem()).unwrap();
    }
}
