//! `compute-agent`: parses flags and config, then runs [`compute_agent::run`].

use anyhow::Result;
use clap::Parser;
use compute_agent::Args;

/// mimalloc, not glibc's malloc: scripts allocate on every call (Lua values, tables),
/// and with two runtime threads glibc's arena locks and consolidation showed in the
/// profile of EVALSHA (docs/benchmarks.md, "Scripts and transactions").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> Result<()> {
    // Fail points named in FAILPOINTS take effect (test builds only).
    #[cfg(feature = "failpoints")]
    let _faults = fail::FailScenario::setup();
    let args = Args::parse();
    let cfg = args.resolve()?;
    let log = cfg.log.clone();
    // Unset: tokio's default, one per core (or TOKIO_WORKER_THREADS).
    let threads = cfg.threads.unwrap_or(0);
    dmc_process::run_main(
        cfg,
        &log,
        threads,
        args.print_config,
        args.check_config,
        compute_agent::run,
    )
}
