//! Trace replay for hit-ratio studies: a CSV of `timestamp_ms,op,key,size` rows (`op`
//! one of `get`, `set`, `del`; a header row is skipped), replayed against a server as a
//! look-aside cache would see it: a GET that misses is followed by a SET of `size`
//! bytes (unless `fill_on_miss` is off). Requests for one key stay in order (keys are
//! spread over connections by hash); with `speed > 0` the recorded timing is kept
//! (scaled), otherwise rows go as fast as the server answers.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::client::{ReplyKind, Target, connect, encode, parse_reply};
use super::stats::{Kind, Outcome, Recorder};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceOp {
    Get,
    Set,
    Del,
}

#[derive(Debug, Clone, PartialEq)]
pub struct TraceRow {
    pub at_ms: f64,
    pub op: TraceOp,
    pub key: Vec<u8>,
    pub size: usize,
}

/// Parses a trace; the error names the bad line.
pub fn parse(text: &str) -> Result<Vec<TraceRow>> {
    let mut rows = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let f: Vec<&str> = line.split(',').map(str::trim).collect();
        let Ok(at_ms) = f[0].parse::<f64>() else {
            if n == 0 {
                continue; // header
            }
            bail!("line {}: bad timestamp {:?}", n + 1, f[0]);
        };
        if f.len() < 3 {
            bail!("line {}: expected timestamp,op,key[,size]", n + 1);
        }
        let op = match f[1].to_ascii_lowercase().as_str() {
            "get" => TraceOp::Get,
            "set" => TraceOp::Set,
            "del" | "delete" => TraceOp::Del,
            other => bail!("line {}: unknown op {other:?} (get, set, del)", n + 1),
        };
        let size = match f.get(3) {
            Some(s) if !s.is_empty() => s
                .parse()
                .with_context(|| format!("line {}: bad size {s:?}", n + 1))?,
            _ => 32,
        };
        rows.push(TraceRow {
            at_ms,
            op,
            key: f[2].as_bytes().to_vec(),
            size,
        });
    }
    Ok(rows)
}

pub fn load(path: &Path) -> Result<Vec<TraceRow>> {
    parse(&std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?)
}

/// Replays `rows` over `connections`; returns what was measured and how long it took.
pub async fn replay(
    target: &Target,
    rows: Vec<TraceRow>,
    connections: usize,
    speed: f64,
    fill_on_miss: bool,
) -> Result<(Recorder, Duration)> {
    let n = connections.max(1);
    let mut shards: Vec<Vec<TraceRow>> = vec![Vec::new(); n];
    let t0 = rows.first().map_or(0.0, |r| r.at_ms);
    for r in rows {
        let h = super::keys::fnv1a(&r.key);
        shards[(h % n as u64) as usize].push(r);
    }
    let start = Instant::now();
    let mut tasks = Vec::new();
    for rows in shards {
        let target = target.clone();
        tasks.push(tokio::spawn(async move {
            let mut s = connect(&target).await?;
            let mut rec = Recorder::default();
            let (mut out, mut buf) = (Vec::new(), Vec::new());
            let mut chunk = vec![0u8; 64 << 10];
            let value = vec![b't'; rows.iter().map(|r| r.size).max().unwrap_or(0)];
            let value = Arc::new(value);
            for r in rows {
                if speed > 0.0 {
                    let due =
                        start + Duration::from_secs_f64((r.at_ms - t0).max(0.0) / 1000.0 / speed);
                    tokio::time::sleep_until(due.into()).await;
                }
                let mut steps: Vec<(Kind, &[&[u8]])> = Vec::new();
                let set_args: [&[u8]; 3] = [b"SET", &r.key, &value[..r.size]];
                let get_args: [&[u8]; 2] = [b"GET", &r.key];
                let del_args: [&[u8]; 2] = [b"DEL", &r.key];
                match r.op {
                    TraceOp::Get => steps.push((Kind::Get, &get_args)),
                    TraceOp::Set => steps.push((Kind::Set, &set_args)),
                    TraceOp::Del => steps.push((Kind::Set, &del_args)),
                }
                let mut i = 0;
                while i < steps.len() {
                    let (kind, args) = steps[i];
                    out.clear();
                    encode(&mut out, args);
                    let sent = Instant::now();
                    s.write_all(&out).await?;
                    let reply = loop {
                        if let Some((k, used)) = parse_reply(&buf).map_err(anyhow::Error::msg)? {
                            buf.drain(..used);
                            break k;
                        }
                        let got = s.read(&mut chunk).await?;
                        if got == 0 {
                            bail!("the server closed the connection");
                        }
                        buf.extend_from_slice(&chunk[..got]);
                    };
                    let now = Instant::now();
                    let outcome = match (&reply, kind) {
                        (ReplyKind::Error(e), _) => Outcome::Error(e.clone()),
                        (ReplyKind::Null, Kind::Get) => Outcome::Miss,
                        (_, Kind::Get) => Outcome::Hit,
                        (_, Kind::Set) => Outcome::Written,
                    };
                    let missed = outcome == Outcome::Miss;
                    rec.record(kind, outcome, now - start, now - sent);
                    if missed && fill_on_miss {
                        steps.push((Kind::Set, &set_args));
                    }
                    i += 1;
                }
            }
            Ok::<Recorder, anyhow::Error>(rec)
        }));
    }
    let mut total = Recorder::default();
    for t in tasks {
        total.merge(&t.await??);
    }
    Ok((total, start.elapsed()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traces_parse_with_or_without_header() {
        let rows = parse("timestamp,op,key,size\n0,get,a,10\n1.5,SET,b,20\n\n2,del,a\n").unwrap();
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[1].op, TraceOp::Set);
        assert_eq!(rows[1].at_ms, 1.5);
        assert_eq!(rows[2].size, 32, "default size");
        assert!(
            parse("0,get,a,10\nx,get,b\n").is_err(),
            "a bad timestamp after the first line"
        );
        assert!(parse("0,put,a,1\n").is_err());
    }
}
