//! `cluster-manager serve` and the operator commands that talk to it over HTTP:
//! `status`, `nodes list|add|remove|drain`, `agents list|add|remove|scale N`, `slots`,
//! `instances list|create|resize`, `regions list|migrate|copy`. Tables for people, `--json` for
//! scripts.
//! `main` calls [`run`]; `serve` lives in `serve.rs`, the HTTP client commands in
//! `client.rs`. This file only defines the command line and dispatches: it never talks
//! to the manager itself.

use anyhow::Result;
use clap::{Parser, Subcommand};
use dmc_proto::ByteSize;
use dmc_proto::cluster::DEFAULT_INSTANCE;

mod client;
mod serve;

use client::client;
use serve::serve;
pub use serve::{LauncherConfig, ServeArgs, ServeConfig};

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
    /// File holding the cluster secret (else the DMC_CLUSTER_SECRET environment
    /// variable); every request to the manager carries it.
    #[arg(long, global = true)]
    pub secret_file: Option<std::path::PathBuf>,
    /// The CA (PEM) of an `https://` manager's certificate.
    #[arg(long, global = true)]
    pub manager_ca_cert_file: Option<std::path::PathBuf>,
    #[command(subcommand)]
    pub cmd: Cmd,
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
        /// Backup agents per shard: they keep its hot keys cached and take it over
        /// first when its agent dies, serving hits at once.
        #[arg(long, default_value_t = 0)]
        backups: u32,
    },
    /// Change maxmemory (growing is immediate; shrinking evicts, then returns regions),
    /// the eviction policy or the backup agents per shard.
    Resize {
        name: String,
        #[arg(long)]
        maxmemory: Option<ByteSize>,
        #[arg(long)]
        policy: Option<String>,
        /// Backup agents per shard (0: none).
        #[arg(long)]
        backups: Option<u32>,
    },
}

#[derive(Debug, Subcommand)]
pub enum RegionsCmd {
    List,
    /// Move a region's primary role to a node holding a backup of it (copy-free:
    /// writes to the region wait while the roles swap, reads never do).
    Migrate {
        id: u16,
        /// The node to serve as primary.
        #[arg(long)]
        to: u32,
    },
    /// Fill a new copy of a region on a node while the region serves.
    Copy {
        id: u16,
        /// The node to hold the new copy.
        #[arg(long)]
        to: u32,
        /// Copy rate (e.g. 256mb a second; default: the manager's fill-rate).
        #[arg(long)]
        rate: Option<dmc_proto::ByteSize>,
    },
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
    /// Move every region copy off a node (primaries to backups, copies filled on other
    /// nodes) so it can be removed.
    Drain {
        id: u32,
        /// Fill rate (e.g. 256mb a second; default: the manager's fill-rate).
        #[arg(long)]
        rate: Option<ByteSize>,
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
            let mut config = args.resolve()?;
            if config.secret_file.is_none() {
                config.secret_file = cli.secret_file;
            }
            if args.print_config {
                print!("{}", toml::to_string(&config)?);
                return Ok(());
            }
            serve(config)
        }
        cmd => {
            let secret = dmc_process::secret::ClusterSecret::load(cli.secret_file.as_deref())?;
            dmc_process::secret::install(secret);
            dmc_process::secret::install_manager_ca(cli.manager_ca_cert_file.as_deref())?;
            client(&cli.manager, cli.json, cmd)
        }
    }
}
