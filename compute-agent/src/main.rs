//! `compute-agent`: parses flags and config, then runs [`compute_agent::run`].

use anyhow::Result;
use clap::Parser;
use compute_agent::Args;

fn main() -> Result<()> {
    let args = Args::parse();
    let cfg = args.resolve()?;
    let log = cfg.log.clone();
    dmc_process::run_main(
        cfg,
        &log,
        args.print_config,
        args.check_config,
        compute_agent::run,
    )
}
