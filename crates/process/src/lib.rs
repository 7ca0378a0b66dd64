//! Process plumbing every DMC binary shares, so each `main.rs` stays a few lines:
//! config loading, logging, shutdown signals; [`metrics`], the Prometheus recorder
//! and endpoint; and [`membership`], registering with the cluster manager.

pub mod membership;
pub mod metrics;
pub mod secret;

/// Reads a TOML config file into `T`, or `T::default()` when no file is given. Errors
/// name the file.
pub fn load_config<T: serde::de::DeserializeOwned + Default>(
    path: Option<&std::path::Path>,
) -> anyhow::Result<T> {
    use anyhow::Context;
    match path {
        Some(p) => {
            let text = std::fs::read_to_string(p)
                .with_context(|| format!("reading config {}", p.display()))?;
            toml::from_str(&text).with_context(|| format!("parsing config {}", p.display()))
        }
        None => Ok(T::default()),
    }
}

/// Logs to stderr through `tracing`, filtered by `RUST_LOG` if set, else by `filter`.
pub fn init_logging(filter: &str) {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(filter)),
        )
        .with_writer(std::io::stderr)
        .init();
}

/// Completes on SIGTERM or SIGINT (never, if the handlers cannot be installed).
/// SIGHUP is logged and ignored, as redis-server does: a process whose launcher
/// died while it was stopped (SIGSTOP, a paused terminal job) is sent SIGHUP by the
/// kernel when its orphaned process group is continued, and must not die of it.
pub async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int), Ok(mut hup)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
        signal(SignalKind::hangup()),
    ) else {
        tracing::warn!("cannot install signal handlers; stop with SIGKILL");
        return std::future::pending().await;
    };
    loop {
        tokio::select! {
            _ = term.recv() => break tracing::info!("SIGTERM: shutting down"),
            _ = int.recv() => break tracing::info!("SIGINT: shutting down"),
            _ = hup.recv() => tracing::info!("SIGHUP ignored"),
        }
    }
}

/// What every binary's `main` does after parsing flags: print the effective config
/// (`--print-config`) or validate it (`--check-config`) and exit, or set up logging and
/// run `serve(cfg, shutdown)` on a multi-threaded runtime of `threads` workers (0:
/// one per core) until SIGTERM/SIGINT.
pub fn run_main<C, F>(
    cfg: C,
    log: &str,
    threads: usize,
    print_config: bool,
    check_config: bool,
    serve: impl FnOnce(C, std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>) -> F,
) -> anyhow::Result<()>
where
    C: serde::Serialize,
    F: std::future::Future<Output = anyhow::Result<()>>,
{
    if print_config {
        print!("{}", toml::to_string(&cfg)?);
        return Ok(());
    }
    if check_config {
        println!("configuration ok");
        return Ok(());
    }
    init_logging(log);
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    runtime.enable_all();
    if threads > 0 {
        runtime.worker_threads(threads);
    }
    let runtime = runtime.build()?;
    let result = runtime.block_on(serve(cfg, Box::pin(shutdown_signal())));
    // Blocking calls still in flight (a long poll of the cluster manager) must not
    // hold the exit: whatever `serve` left running ends with the process.
    runtime.shutdown_timeout(std::time::Duration::from_millis(100));
    result
}
