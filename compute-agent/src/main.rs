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
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(&cfg.log)),
        )
        .with_writer(std::io::stderr)
        .init();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(compute_agent::run(cfg, shutdown_signal()))
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::warn!("cannot install signal handlers; stop with SIGKILL");
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
        _ = int.recv() => tracing::info!("SIGINT: shutting down"),
    }
}
