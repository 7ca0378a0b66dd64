//! Prometheus metrics for every DMC process, through the `metrics` facade.
//!
//! Libraries and binaries record with `metrics::counter!`, `gauge!` and `histogram!`;
//! [`install`] puts one `metrics-exporter-prometheus` recorder behind the facade per
//! process, and [`serve`] answers `GET /metrics` with its rendering, after running a
//! process's `collect` step (which copies the counters INFO also reads into the
//! registry). Every name a process exports is declared once in `dmc_proto::metrics`,
//! with its help text and type, where a test keeps the names unique and well formed.
//! This module never decides what a process measures.

use std::sync::OnceLock;

pub use metrics_exporter_prometheus::PrometheusHandle;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};

pub use dmc_proto::metrics::{Desc, Kind, agent, manager, node};

/// Bucket bounds, in seconds, of every `*_seconds` histogram: 10 µs to 10 s.
const LATENCY_BUCKETS: &[f64] = &[
    0.000_01, 0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025,
    0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
];

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// Installs the process's recorder (once; later calls return the same handle) and
/// describes `catalog`'s metrics to it.
pub fn install(catalog: &[Desc]) -> PrometheusHandle {
    let handle = HANDLE
        .get_or_init(|| {
            let recorder = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), LATENCY_BUCKETS)
                .map(|b| b.build_recorder())
                .unwrap_or_else(|_| PrometheusBuilder::new().build_recorder());
            let handle = recorder.handle();
            // Fails only if another recorder was installed first (a test harness's).
            if metrics::set_global_recorder(recorder).is_err() {
                tracing::warn!("a metrics recorder was installed already; /metrics may be empty");
            }
            handle
        })
        .clone();
    for d in catalog {
        match d.kind {
            Kind::Counter => metrics::describe_counter!(d.name, d.help),
            Kind::Gauge => metrics::describe_gauge!(d.name, d.help),
            Kind::Histogram => {
                metrics::describe_histogram!(d.name, metrics::Unit::Seconds, d.help)
            }
        }
    }
    handle
}

/// Sets counter `d` to `value` (a count kept elsewhere, copied in at scrape time).
pub fn set_counter(d: Desc, value: u64) {
    metrics::counter!(d.name).absolute(value);
}

/// Sets gauge `d` to `value`.
pub fn set_gauge(d: Desc, value: u64) {
    metrics::gauge!(d.name).set(value as f64);
}

/// Sets gauge `d` to `value` for label `label` = `label_value`.
pub fn set_labelled_gauge(d: Desc, label: &'static str, label_value: &'static str, value: f64) {
    metrics::gauge!(d.name, label => label_value).set(value);
}

/// The metric names (without `_bucket`, `_sum`, `_count` suffixes or labels) in a
/// rendering of the exposition format, for tests that hold a process to its catalog.
pub fn names_in(text: &str) -> std::collections::BTreeSet<String> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(|n| {
            ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| n.strip_suffix(s))
                .unwrap_or(n)
                .to_string()
        })
        .collect()
}

/// Serves `GET /metrics` on `listener` until the task is dropped: runs `collect`, then
/// renders the recorder. A deliberately small HTTP/1.0 responder: one request per
/// connection, requests larger than 8 KiB or slower than 5 s are dropped.
pub async fn serve(
    listener: tokio::net::TcpListener,
    handle: PrometheusHandle,
    collect: impl Fn() + Send + Sync + 'static,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let render = std::sync::Arc::new(move || {
        collect();
        handle.render()
    });
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
                let body = render();
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_read_back_from_the_exposition_format() {
        let text = "# HELP a_total x\n# TYPE a_total counter\na_total 3\n\
                    b_seconds_bucket{le=\"0.1\"} 1\nb_seconds_sum 0.05\nb_seconds_count 1\n\
                    c{family=\"strings\"} 2\n";
        let names: Vec<_> = names_in(text).into_iter().collect();
        assert_eq!(names, ["a_total", "b_seconds", "c"]);
    }
}
