//! `cluster-manager serve` and the operator commands that talk to it over HTTP:
//! `status`, `nodes list|add|remove`, `agents list|remove`, `slots`. Tables for people,
//! `--json` for scripts.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use dmc_proto::ByteSize;

use crate::api::{AddNode, router};
use crate::manager::{Manager, ShardRow, Status};
use crate::state::StateFile;

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

#[derive(Debug, Subcommand)]
pub enum Cmd {
    /// Run the manager daemon.
    Serve {
        #[arg(long, default_value = "127.0.0.1:7100")]
        listen: String,
        /// The durable state file.
        #[arg(long, default_value = "dmc-cluster.json")]
        state: PathBuf,
        /// Logical shards of a new cluster (ignored when the state file exists).
        #[arg(long, default_value_t = 1024)]
        shards: u32,
        /// A member missing heartbeats this long is reported dead.
        #[arg(long, default_value_t = 5000)]
        lease_ms: u64,
        #[arg(long, default_value = "info")]
        log: String,
    },
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
    /// Which agent owns which hash slots.
    Slots,
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
    Remove { id: u64 },
}

pub fn run(cli: Cli) -> Result<()> {
    match cli.cmd {
        Cmd::Serve {
            listen,
            state,
            shards,
            lease_ms,
            log,
        } => serve(
            &listen,
            state,
            shards,
            Duration::from_millis(lease_ms),
            &log,
        ),
        cmd => client(&cli.manager, cli.json, cmd),
    }
}

fn serve(listen: &str, state: PathBuf, shards: u32, lease: Duration, log: &str) -> Result<()> {
    dmc_process::init_logging(log);
    let manager = Arc::new(
        Manager::open(StateFile::new(&state), shards, lease)
            .with_context(|| format!("opening state {}", state.display()))?,
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let l = tokio::net::TcpListener::bind(listen)
            .await
            .with_context(|| format!("binding {listen}"))?;
        let addr = l.local_addr()?;
        tracing::info!(%addr, state = %state.display(), "cluster manager serving");
        {
            let mut out = std::io::stdout().lock();
            writeln!(out, "cluster-manager ready listen={addr}")?;
            out.flush()?;
        }
        axum::serve(l, router(manager))
            .with_graceful_shutdown(dmc_process::shutdown_signal())
            .await?;
        Ok(())
    })
}

fn client(base: &str, json: bool, cmd: Cmd) -> Result<()> {
    // Error statuses are read, not raised, so the manager's own message is shown.
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(10)))
        .build()
        .into();
    let url = |path: &str| format!("{}{path}", base.trim_end_matches('/'));
    let fail = |e: ureq::Error| anyhow::anyhow!("cannot reach the manager at {base}: {e}");
    let ok = |mut r: ureq::http::Response<ureq::Body>| -> Result<ureq::http::Response<ureq::Body>> {
        if r.status().is_success() {
            return Ok(r);
        }
        let body: serde_json::Value = r.body_mut().read_json().unwrap_or_default();
        let msg = body["error"].as_str().unwrap_or("no details").to_string();
        bail!("{} ({})", msg, r.status())
    };
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
                    "{:>6}  {:<24} {:>10}  STATE",
                    "NODE", "ENDPOINT", "CAPACITY"
                );
                for n in &status.nodes {
                    println!(
                        "{:>6}  {:<24} {:>10}  {}",
                        n.id,
                        n.endpoint,
                        human(n.capacity),
                        if n.alive { "alive" } else { "dead" }
                    );
                }
            }
            if show_agents {
                println!("{:>6}  {:<24} {:>7}  STATE", "AGENT", "LISTEN", "SHARDS");
                for a in &status.agents {
                    println!(
                        "{:>6}  {:<24} {:>7}  {}",
                        a.id,
                        a.listen,
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
        Cmd::Slots => {
            let rows: Vec<ShardRow> = ok(agent.get(url("/v1/slots")).call().map_err(fail)?)?
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
        Cmd::Serve { .. } => bail!("serve is not a client command"),
    }
    Ok(())
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
