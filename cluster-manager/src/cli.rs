//! `cluster-manager serve` and the operator commands that talk to it over HTTP:
//! `status`, `nodes list|add|remove`, `agents list|add|remove|scale N`, `slots`,
//! `instances list|create|resize`, `regions list`. Tables for people, `--json` for
//! scripts.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use dmc_proto::ByteSize;

use dmc_proto::cluster::{DEFAULT_INSTANCE, PoolTransport};
use serde::{Deserialize, Serialize};

use crate::api::{AddNode, App, CreateInstance, ResizeInstance, ScaleRequest, router};
use crate::launcher::{LocalLauncher, LocalSettings};
use crate::manager::{InstanceStatus, Manager, PoolSettings, ShardRow, Status};
use crate::scale::{ScaleReport, ScaleTimes};
use crate::state::{RegionRecord, StateFile};

#[derive(Debug, Parser)]
#[command(
    version,
    about = "DMC cluster manager: the control plane and its operator CLI"
)]
pub struct Cli {
    /// The manager's admin API.
    #[arg(long, global = true, default_value = "http://127.0.0.1:7100")]
    pub manager: String,
    /// Print JSON instead of tables.
    #[arg(long, global = true)]
    pub json: bool,
    #[command(subcommand)]
    pub cmd: Cmd,
}

/// `serve`'s configuration: a TOML file (`--config`) with flags over it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default, rename_all = "kebab-case")]
pub struct ServeConfig {
    pub listen: String,
    /// The durable state file.
    pub state: PathBuf,
    /// Logical shards of each new instance (existing instances keep theirs).
    pub shards: u32,
    /// A member missing heartbeats this long is reported dead.
    pub lease_ms: u64,
    pub log: String,
    /// The memory pool agents open.
    pub pool: PoolSettings,
    pub launcher: LauncherConfig,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default, rename_all = "kebab-case")]
pub struct LauncherConfig {
    /// The `compute-agent` binary (default: the one next to this binary).
    pub agent_binary: Option<PathBuf>,
    /// A TOML config every launched agent gets.
    pub agent_config: Option<PathBuf>,
    /// Where launched agents log (default: `agents/` beside the state file).
    pub log_dir: Option<PathBuf>,
    /// Address launched agents listen on.
    pub bind: String,
    /// Agents get the first free port from here (0: any free port).
    pub port_base: u16,
    /// How long a stopping agent may drain its clients before it is killed.
    pub drain_ms: u64,
    /// How long `agents scale` waits for started agents to serve.
    pub ready_ms: u64,
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            listen: "127.0.0.1:7100".into(),
            state: PathBuf::from("dmc-cluster.json"),
            shards: 1024,
            lease_ms: 5000,
            log: "info".into(),
            pool: PoolSettings::default(),
            launcher: LauncherConfig::default(),
        }
    }
}

impl Default for LauncherConfig {
    fn default() -> Self {
        LauncherConfig {
            agent_binary: None,
            agent_config: None,
            log_dir: None,
            bind: "127.0.0.1".into(),
            port_base: 0,
            drain_ms: 10_000,
            ready_ms: 60_000,
        }
    }
}

#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// TOML config file; flags override it.
    #[arg(long, short = 'c')]
    config: Option<PathBuf>,
    #[arg(long)]
    listen: Option<String>,
    /// The durable state file.
    #[arg(long)]
    state: Option<PathBuf>,
    /// Logical shards of each new instance (existing instances keep theirs).
    #[arg(long)]
    shards: Option<u32>,
    /// A member missing heartbeats this long is reported dead.
    #[arg(long)]
    lease_ms: Option<u64>,
    #[arg(long)]
    log: Option<String>,
    /// shm or tcp: how agents reach the memory nodes.
    #[arg(long, value_parser = parse_transport)]
    pool_transport: Option<PoolTransport>,
    /// Copies of every region.
    #[arg(long)]
    replicas: Option<usize>,
    #[arg(long)]
    region_size: Option<ByteSize>,
    #[arg(long)]
    segment_size: Option<ByteSize>,
    /// The compute-agent binary the launcher starts.
    #[arg(long)]
    agent_binary: Option<PathBuf>,
    /// A TOML config every launched agent gets.
    #[arg(long)]
    agent_config: Option<PathBuf>,
    /// Where launched agents log.
    #[arg(long)]
    log_dir: Option<PathBuf>,
    /// How long a stopping agent may drain its clients.
    #[arg(long)]
    drain_ms: Option<u64>,
    /// Launched agents get the first free port from here (0: any).
    #[arg(long)]
    agent_port_base: Option<u16>,
    /// Print the effective configuration as TOML and exit.
    #[arg(long)]
    print_config: bool,
}

fn parse_transport(s: &str) -> Result<PoolTransport, String> {
    match s {
        "shm" => Ok(PoolTransport::Shm),
        "tcp" => Ok(PoolTransport::Tcp),
        _ => Err(format!("{s}: expected shm or tcp")),
    }
}

impl ServeArgs {
    pub fn resolve(&self) -> Result<ServeConfig> {
        let mut c: ServeConfig = dmc_process::load_config(self.config.as_deref())?;
        macro_rules! over {
            ($($field:ident => $($path:ident).+),* $(,)?) => {
                $(if let Some(v) = &self.$field { c.$($path).+ = v.clone().into(); })*
            };
        }
        over!(listen => listen, state => state, shards => shards, lease_ms => lease_ms,
            log => log, pool_transport => pool.transport, replicas => pool.replicas,
            region_size => pool.region_size, segment_size => pool.segment_size,
            drain_ms => launcher.drain_ms, agent_port_base => launcher.port_base);
        if let Some(v) = &self.agent_binary {
            c.launcher.agent_binary = Some(v.clone());
        }
        if let Some(v) = &self.agent_config {
            c.launcher.agent_config = Some(v.clone());
        }
        if let Some(v) = &self.log_dir {
            c.launcher.log_dir = Some(v.clone());
        }
        Ok(c)
    }
}

#[derive(Debug, Subcommand)]
pub enum Cmd {
    /// Run the manager daemon.
    Serve(Box<ServeArgs>),
    /// Pool capacity, memory nodes and agents, with liveness.
    Status,
    /// Memory nodes.
    Nodes {
        #[command(subcommand)]
        cmd: NodesCmd,
    },
    /// Compute agents.
    Agents {
        #[command(subcommand)]
        cmd: AgentsCmd,
    },
    /// Which agent owns which hash slots of an instance.
    Slots {
        #[arg(long, default_value = DEFAULT_INSTANCE)]
        instance: String,
    },
    /// Cache instances: their maxmemory, policy, and pool bytes allocated and used.
    Instances {
        #[command(subcommand)]
        cmd: InstancesCmd,
    },
    /// Pool regions and where their copies are.
    Regions {
        #[command(subcommand)]
        cmd: RegionsCmd,
    },
}

#[derive(Debug, Subcommand)]
pub enum InstancesCmd {
    List,
    /// A new instance on the same memory nodes, with its own keys, regions and
    /// agents (start them with `agents scale N --instance NAME`).
    Create {
        name: String,
        #[arg(long)]
        maxmemory: ByteSize,
        #[arg(long, default_value = "noeviction")]
        policy: String,
    },
    /// Change maxmemory (growing is immediate; shrinking evicts, then returns regions)
    /// or the eviction policy.
    Resize {
        name: String,
        #[arg(long)]
        maxmemory: Option<ByteSize>,
        #[arg(long)]
        policy: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
pub enum RegionsCmd {
    List,
}

#[derive(Debug, Subcommand)]
pub enum NodesCmd {
    List,
    Add {
        #[arg(long)]
        id: u32,
        /// Its RPC endpoint (`host:port` or `unix:/path`).
        #[arg(long)]
        endpoint: String,
        #[arg(long, default_value = "4gb")]
        capacity: ByteSize,
    },
    Remove {
        id: u32,
    },
}

#[derive(Debug, Subcommand)]
pub enum AgentsCmd {
    List,
    Remove {
        id: u64,
    },
    /// Start or stop an instance's agents (through the launcher) until COUNT run.
    Scale {
        count: usize,
        #[arg(long, default_value = DEFAULT_INSTANCE)]
        instance: String,
    },
    /// Start one more agent of an instance.
    Add {
        #[arg(long, default_value = DEFAULT_INSTANCE)]
        instance: String,
    },
}

pub fn run(cli: Cli) -> Result<()> {
    match cli.cmd {
        Cmd::Serve(args) => {
            let config = args.resolve()?;
            if args.print_config {
                print!("{}", toml::to_string(&config)?);
                return Ok(());
            }
            serve(config)
        }
        cmd => client(&cli.manager, cli.json, cmd),
    }
}

fn serve(config: ServeConfig) -> Result<()> {
    dmc_process::init_logging(&config.log);
    let state = config.state.clone();
    let manager = Arc::new(
        Manager::open(
            StateFile::new(&state),
            config.shards,
            Duration::from_millis(config.lease_ms),
            config.pool.clone(),
        )
        .with_context(|| format!("opening state {}", state.display()))?,
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let listen = &config.listen;
        let l = tokio::net::TcpListener::bind(listen)
            .await
            .with_context(|| format!("binding {listen}"))?;
        let addr = l.local_addr()?;
        let l_cfg = &config.launcher;
        let log_dir = l_cfg.log_dir.clone().unwrap_or_else(|| {
            state
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .map_or_else(|| PathBuf::from("agents"), |p| p.join("agents"))
        });
        let launcher = LocalLauncher::new(LocalSettings {
            binary: l_cfg
                .agent_binary
                .clone()
                .unwrap_or_else(LocalLauncher::sibling_binary),
            config: l_cfg.agent_config.clone(),
            log_dir,
            bind: l_cfg.bind.clone(),
            manager_url: format!("http://{addr}"),
            port_base: l_cfg.port_base,
        });
        let app = Arc::new(App {
            manager,
            launcher: Arc::new(launcher),
            times: ScaleTimes {
                ready: Duration::from_millis(l_cfg.ready_ms),
                drain: Duration::from_millis(l_cfg.drain_ms),
            },
            scaling: tokio::sync::Mutex::new(()),
        });
        // Returns draining regions once every agent vacated them (after a grace
        // period for reads still in flight).
        {
            let manager = app.manager.clone();
            tokio::spawn(async move {
                let mut ready_since: std::collections::HashMap<u16, std::time::Instant> =
                    std::collections::HashMap::new();
                loop {
                    tokio::time::sleep(Duration::from_millis(250)).await;
                    let done = manager.vacated_regions();
                    ready_since.retain(|r, _| done.contains(r));
                    for r in done {
                        let since = *ready_since.entry(r).or_insert_with(std::time::Instant::now);
                        if since.elapsed() < Duration::from_secs(1) {
                            continue;
                        }
                        if let Err(e) = manager.return_region(r).await {
                            tracing::warn!(region = r, error = %e, "returning a region failed; retrying");
                        }
                    }
                }
            });
        }
        tracing::info!(%addr, state = %state.display(), "cluster manager serving");
        {
            let mut out = std::io::stdout().lock();
            writeln!(out, "cluster-manager ready listen={addr}")?;
            out.flush()?;
        }
        axum::serve(l, router(app))
            .with_graceful_shutdown(dmc_process::shutdown_signal())
            .await?;
        Ok(())
    })
}

fn client(base: &str, json: bool, cmd: Cmd) -> Result<()> {
    // Error statuses are read, not raised, so the manager's own message is shown.
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        // `agents scale` waits for agents to start or drain.
        .timeout_global(Some(Duration::from_secs(180)))
        .build()
        .into();
    let url = |path: &str| format!("{}{path}", base.trim_end_matches('/'));
    let fail = |e: ureq::Error| unreachable_manager(base, e);
    match cmd {
        Cmd::Status
        | Cmd::Nodes {
            cmd: NodesCmd::List,
        }
        | Cmd::Agents {
            cmd: AgentsCmd::List,
        } => {
            let status: Status = ok(agent.get(url("/v1/status")).call().map_err(fail)?)?
                .body_mut()
                .read_json()
                .context("reading the manager's reply")?;
            if json {
                println!("{}", serde_json::to_string_pretty(&status)?);
                return Ok(());
            }
            let show_nodes = !matches!(cmd, Cmd::Agents { .. });
            let show_agents = !matches!(cmd, Cmd::Nodes { .. });
            if matches!(cmd, Cmd::Status) {
                println!(
                    "pool capacity {}  memory nodes {}  agents {}  shards {}",
                    human(status.capacity),
                    status.nodes.len(),
                    status.agents.len(),
                    status.shards
                );
            }
            if show_nodes {
                println!(
                    "{:>6}  {:<24} {:>10} {:>10} {:>10} {:>5}  STATE",
                    "NODE", "ENDPOINT", "CAPACITY", "ALLOCATED", "USED", "USE%"
                );
                for n in &status.nodes {
                    println!(
                        "{:>6}  {:<24} {:>10} {:>10} {:>10} {:>5}  {}",
                        n.id,
                        n.endpoint,
                        human(n.capacity),
                        human(n.allocated),
                        human(n.used),
                        percent(n.used, n.allocated),
                        if n.alive { "alive" } else { "dead" }
                    );
                }
            }
            if matches!(cmd, Cmd::Status) {
                print_instances(&status.instances);
            }
            if show_agents {
                println!(
                    "{:>6}  {:<24} {:<12} {:>7}  STATE",
                    "AGENT", "LISTEN", "INSTANCE", "SHARDS"
                );
                for a in &status.agents {
                    println!(
                        "{:>6}  {:<24} {:<12} {:>7}  {}",
                        a.id,
                        a.listen,
                        a.instance,
                        a.shards,
                        if a.alive { "alive" } else { "dead" }
                    );
                }
            }
        }
        Cmd::Nodes {
            cmd:
                NodesCmd::Add {
                    id,
                    endpoint,
                    capacity,
                },
        } => {
            ok(agent
                .post(url("/v1/nodes"))
                .send_json(AddNode {
                    id,
                    endpoint,
                    capacity,
                })
                .map_err(fail)?)?;
            println!("node {id} added");
        }
        Cmd::Nodes {
            cmd: NodesCmd::Remove { id },
        } => {
            ok(agent
                .delete(url(&format!("/v1/nodes/{id}")))
                .call()
                .map_err(fail)?)?;
            println!("node {id} removed");
        }
        Cmd::Agents {
            cmd: AgentsCmd::Remove { id },
        } => {
            ok(agent
                .delete(url(&format!("/v1/agents/{id}")))
                .call()
                .map_err(fail)?)?;
            println!("agent {id} removed; its shards were reassigned");
        }
        Cmd::Agents {
            cmd: AgentsCmd::Scale { count, instance },
        } => scale_to(&agent, &url, json, &instance, Some(count))?,
        Cmd::Agents {
            cmd: AgentsCmd::Add { instance },
        } => scale_to(&agent, &url, json, &instance, None)?,
        Cmd::Slots { instance } => {
            let rows: Vec<ShardRow> = ok(agent
                .get(url("/v1/slots"))
                .query("instance", &instance)
                .call()
                .map_err(fail)?)?
            .body_mut()
            .read_json()
            .context("reading the manager's reply")?;
            if json {
                println!("{}", serde_json::to_string_pretty(&rows)?);
                return Ok(());
            }
            // Consecutive shards with one owner print as one slot range.
            println!("{:<13}  {:>6}", "SLOTS", "AGENT");
            let mut i = 0;
            while i < rows.len() {
                let mut j = i;
                while j + 1 < rows.len() && rows[j + 1].primary == rows[i].primary {
                    j += 1;
                }
                let owner = rows[i].primary.map_or("-".to_string(), |a| a.to_string());
                println!(
                    "{:<13}  {:>6}",
                    format!("{}-{}", rows[i].first_slot, rows[j].last_slot),
                    owner
                );
                i = j + 1;
            }
        }
        Cmd::Instances {
            cmd: InstancesCmd::List,
        } => {
            let list: Vec<InstanceStatus> =
                ok(agent.get(url("/v1/instances")).call().map_err(fail)?)?
                    .body_mut()
                    .read_json()
                    .context("reading the manager's reply")?;
            if json {
                println!("{}", serde_json::to_string_pretty(&list)?);
            } else {
                print_instances(&list);
            }
        }
        Cmd::Instances {
            cmd:
                InstancesCmd::Create {
                    name,
                    maxmemory,
                    policy,
                },
        } => {
            ok(agent
                .post(url("/v1/instances"))
                .send_json(CreateInstance {
                    name: name.clone(),
                    maxmemory,
                    policy,
                })
                .map_err(fail)?)?;
            println!(
                "instance {name} created; start its agents with `agents scale N --instance {name}`"
            );
        }
        Cmd::Instances {
            cmd:
                InstancesCmd::Resize {
                    name,
                    maxmemory,
                    policy,
                },
        } => {
            ok(agent
                .put(url(&format!("/v1/instances/{name}")))
                .send_json(ResizeInstance { maxmemory, policy })
                .map_err(fail)?)?;
            println!("instance {name} changed; its agents follow within a round trip");
        }
        Cmd::Regions {
            cmd: RegionsCmd::List,
        } => {
            let list: Vec<RegionRecord> =
                ok(agent.get(url("/v1/regions")).call().map_err(fail)?)?
                    .body_mut()
                    .read_json()
                    .context("reading the manager's reply")?;
            if json {
                println!("{}", serde_json::to_string_pretty(&list)?);
                return Ok(());
            }
            println!(
                "{:>6}  {:<12} {:>10}  {:>7}  {:<10} STATE",
                "REGION", "INSTANCE", "SIZE", "PRIMARY", "BACKUPS"
            );
            for r in &list {
                let backups: Vec<String> = r.backups.iter().map(|b| b.to_string()).collect();
                println!(
                    "{:>6}  {:<12} {:>10}  {:>7}  {:<10} {}",
                    r.id,
                    r.instance,
                    human(r.size.0),
                    r.primary,
                    backups.join(","),
                    if r.draining { "draining" } else { "active" }
                );
            }
        }
        Cmd::Serve { .. } => bail!("serve is not a client command"),
    }
    Ok(())
}

type HttpResponse = ureq::http::Response<ureq::Body>;

fn unreachable_manager(base: &str, e: ureq::Error) -> anyhow::Error {
    anyhow::anyhow!("cannot reach the manager at {base}: {e}")
}

/// The response if it succeeded, else the manager's own error message.
fn ok(mut r: HttpResponse) -> Result<HttpResponse> {
    if r.status().is_success() {
        return Ok(r);
    }
    let body: serde_json::Value = r.body_mut().read_json().unwrap_or_default();
    let msg = body["error"].as_str().unwrap_or("no details").to_string();
    bail!("{} ({})", msg, r.status())
}

/// `agents scale COUNT`, or with `None` one agent more than now (`agents add`), of
/// `instance`.
fn scale_to(
    agent: &ureq::Agent,
    url: &dyn Fn(&str) -> String,
    json: bool,
    instance: &str,
    count: Option<usize>,
) -> Result<()> {
    let base = url("");
    let count = match count {
        Some(c) => c,
        None => {
            let status: Status = ok(agent
                .get(url("/v1/status"))
                .call()
                .map_err(|e| unreachable_manager(&base, e))?)?
            .body_mut()
            .read_json()
            .context("reading the manager's reply")?;
            status
                .agents
                .iter()
                .filter(|a| a.instance == instance)
                .count()
                + 1
        }
    };
    let report: ScaleReport = ok(agent
        .post(url("/v1/agents/scale"))
        .send_json(ScaleRequest {
            count,
            instance: instance.to_string(),
        })
        .map_err(|e| unreachable_manager(&base, e))?)?
    .body_mut()
    .read_json()
    .context("reading the manager's reply")?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    println!(
        "agents of {instance} {} -> {} in {} ms",
        report.before, report.after, report.millis
    );
    for l in &report.started {
        println!("  started {l}");
    }
    for l in &report.stopped {
        println!("  stopped {l} (drained)");
    }
    Ok(())
}

fn percent(part: u64, whole: u64) -> String {
    if whole == 0 {
        return "-".into();
    }
    format!("{:.0}%", part as f64 * 100.0 / whole as f64)
}

fn print_instances(list: &[InstanceStatus]) {
    println!(
        "{:<12} {:>10} {:>10} {:>10} {:>5} {:>8} {:>7}  POLICY",
        "INSTANCE", "MAXMEMORY", "ALLOCATED", "USED", "USE%", "REGIONS", "AGENTS"
    );
    for i in list {
        let max = if i.maxmemory == 0 {
            "pool".to_string()
        } else {
            human(i.maxmemory)
        };
        println!(
            "{:<12} {:>10} {:>10} {:>10} {:>5} {:>8} {:>7}  {}",
            i.name,
            max,
            human(i.allocated),
            human(i.used),
            percent(i.used, i.allocated),
            i.regions,
            i.agents,
            i.policy
        );
    }
}

fn human(bytes: u64) -> String {
    const U: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let (mut v, mut u) = (bytes as f64, 0);
    while v >= 1024.0 && u + 1 < U.len() {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.1} {}", U[u])
}
