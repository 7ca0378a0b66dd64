//! Process plumbing every DMC binary shares, so each `main.rs` stays a few lines;
//! and [`membership`], registering with the cluster manager.

pub mod membership;

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
pub async fn shutdown_signal() {
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

/// One Prometheus sample: name, help text, type (`counter` or `gauge`), value.
pub struct Metric {
    pub name: &'static str,
    pub help: &'static str,
    pub kind: &'static str,
    pub value: f64,
}

/// Renders samples in the Prometheus text exposition format (version 0.0.4).
pub fn render_metrics(metrics: &[Metric]) -> String {
    let mut out = String::new();
    for m in metrics {
        out.push_str(&format!(
            "# HELP {} {}\n# TYPE {} {}\n{} {}\n",
            m.name, m.help, m.name, m.kind, m.name, m.value
        ));
    }
    out
}

/// Serves `GET /metrics` on `listener` with whatever `render` returns, until the task
/// is dropped. A deliberately small HTTP/1.0 responder: one request per connection,
/// requests larger than 8 KiB or slower than 5 s are dropped.
pub async fn serve_metrics(
    listener: tokio::net::TcpListener,
    render: impl Fn() -> Vec<Metric> + Send + Sync + 'static,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let render = std::sync::Arc::new(render);
    loop {
        let Ok((mut stream, _)) = listener.accept().await else {
            continue;
        };
        let render = render.clone();
        tokio::spawn(async move {
            let mut buf = vec![0u8; 8192];
            let mut n = 0;
            let read = async {
                while n < buf.len() {
                    let got = stream.read(&mut buf[n..]).await?;
                    if got == 0 {
                        break;
                    }
                    n += got;
                    if buf[..n].windows(4).any(|w| w == b"\r\n\r\n") {
                        break;
                    }
                }
                Ok::<_, std::io::Error>(())
            };
            if tokio::time::timeout(std::time::Duration::from_secs(5), read)
                .await
                .is_err()
            {
                return;
            }
            let head = String::from_utf8_lossy(&buf[..n]);
            let response = if head.starts_with("GET /metrics ") || head.starts_with("GET / ") {
                let body = render_metrics(&render());
                format!(
                    "HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                )
            } else {
                "HTTP/1.0 404 Not Found\r\nContent-Length: 0\r\n\r\n".to_string()
            };
            let _ = stream.write_all(response.as_bytes()).await;
        });
    }
}

/// What every binary's `main` does after parsing flags: print the effective config
/// (`--print-config`) or validate it (`--check-config`) and exit, or set up logging and
/// run `serve(cfg, shutdown)` on a multi-threaded runtime until SIGTERM/SIGINT.
pub fn run_main<C, F>(
    cfg: C,
    log: &str,
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
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let result = runtime.block_on(serve(cfg, Box::pin(shutdown_signal())));
    // Blocking calls still in flight (a long poll of the cluster manager) must not
    // hold the exit: whatever `serve` left running ends with the process.
    runtime.shutdown_timeout(std::time::Duration::from_millis(100));
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposition_format() {
        let text = render_metrics(&[Metric {
            name: "dmc_x_total",
            help: "Things.",
            kind: "counter",
            value: 3.0,
        }]);
        assert_eq!(
            text,
            "# HELP dmc_x_total Things.\n# TYPE dmc_x_total counter\ndmc_x_total 3\n"
        );
    }
}
