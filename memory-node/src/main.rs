//! `memory-node`: parses flags and config, then runs [`memory_node::run`].

use anyhow::Result;
use clap::Parser;
use memory_node::Args;

fn main() -> Result<()> {
    // Fail points named in FAILPOINTS take effect (test builds only).
    #[cfg(feature = "failpoints")]
    let _faults = fail::FailScenario::setup();
    let args = Args::parse();
    let cfg = args.resolve()?;
    let log = cfg.log.clone();
    dmc_process::run_main(
        cfg,
        &log,
        0,
        args.print_config,
        args.check_config,
        memory_node::run,
    )
}
