//! `memory-node`: parses flags and config, then runs [`memory_node::run`].

use anyhow::Result;
use clap::Parser;
use memory_node::Args;

fn main() -> Result<()> {
    let args = Args::parse();
    let cfg = args.resolve()?;
    let log = cfg.log.clone();
    dmc_process::run_main(
        cfg,
        &log,
        args.print_config,
        args.check_config,
        memory_node::run,
    )
}
