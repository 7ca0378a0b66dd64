//! `compute-agent`: parses flags and config, then runs [`compute_agent::run`].

use anyhow::Result;
use clap::Parser;
use compute_agent::Args;

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
        args.print_config,
        args.check_config,
        compute_agent::run,
    )
}
