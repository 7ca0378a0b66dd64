//! `compute-agent`: parses flags and config, then runs [`compute_agent::run`].

use anyhow::Result;
use clap::Parser;
use compute_agent::Args;

fn main() -> Result<()> {
    let args = Args::parse();
    let cfg = args.resolve()?;
    if args.print_config {
        print!("{}", toml::to_string(&cfg)?);
        return Ok(());
    }
    if args.check_config {
        println!("configuration ok");
        return Ok(());
    }
    dmc_process::init_logging(&cfg.log);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(compute_agent::run(cfg, dmc_process::shutdown_signal()))
}
