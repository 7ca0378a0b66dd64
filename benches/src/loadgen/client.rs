//! The load generator's Redis client: connections that pipeline requests and read
//! replies in order, the load phase, and the measured run (closed loop with up to
//! `pipeline` requests in flight per connection, or open loop at a fixed rate, where
//! latency counts from when a request was due so a slow server cannot hide its queue).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use rand::SeedableRng;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{Semaphore, mpsc};

use super::cluster::{ClusterClient, Request, SlotMap, discover};
use super::keys::{KeyChooser, KeyDist, key_name};
use super::stats::{Kind, Outcome, Recorder};
use super::workload::{Mix, Op, Size};

/// Where and how to connect.
#[derive(Debug, Clone)]
pub struct Target {
    pub addr: String,
    /// 2 or 3 (3 sends `HELLO 3`).
    pub proto: u8,
    pub auth: Option<String>,
}

/// Called about once a second with (seconds measured, requests issued).
pub type Progress = Arc<dyn Fn(u64, u64) + Send + Sync>;

/// A measured run.
#[derive(Clone)]
pub struct RunConfig {
    pub target: Target,
    pub connections: usize,
    pub pipeline: usize,
    pub mix: Mix,
    pub dist: KeyDist,
    /// Keys loaded before the run (inserts add more).
    pub keys: u64,
    pub key_size: Size,
    pub value_size: Size,
    pub ttl_secs: Option<u64>,
    pub duration: Option<Duration>,
    pub ops: Option<u64>,
    pub warmup: Duration,
    /// Fixed-rate (open-loop) mode: requests per second over all connections.
    pub rate: Option<f64>,
    pub seed: u64,
    pub progress: Option<Progress>,
    /// Route by hash slot from `CLUSTER SLOTS` and follow MOVED/ASK (closed loop only).
    pub cluster: bool,
}

/// The top-level shape of a reply, which is all the load generator needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplyKind {
    Value,
    Null,
    Error(String),
}

fn line(buf: &[u8], from: usize) -> Option<usize> {
    buf.get(from..)?
        .windows(2)
        .position(|w| w == b"\r\n")
        .map(|p| from + p)
}

fn skip(buf: &[u8], at: usize, depth: usize) -> Result<Option<(ReplyKind, usize)>, String> {
    if depth > 32 {
        return Err("reply nested too deep".into());
    }
    let Some(&t) = buf.get(at) else {
        return Ok(None);
    };
    let Some(end) = line(buf, at + 1) else {
        return Ok(None);
    };
    let text = std::str::from_utf8(&buf[at + 1..end]).map_err(|_| "non-UTF-8 reply header")?;
    let num = || {
        text.parse::<i64>()
            .map_err(|_| format!("bad length {text:?} in reply"))
    };
    let next = end + 2;
    match t {
        b'+' | b':' | b',' | b'#' | b'(' => Ok(Some((ReplyKind::Value, next))),
        b'_' => Ok(Some((ReplyKind::Null, next))),
        b'-' => {
            let word = text.split(' ').next().unwrap_or("ERR").to_string();
            Ok(Some((ReplyKind::Error(word), next)))
        }
        b'$' | b'=' | b'!' => {
            let n = num()?;
            if n < 0 {
                return Ok(Some((ReplyKind::Null, next)));
            }
            let stop = next + n as usize + 2;
            if buf.len() < stop {
                return Ok(None);
            }
            if t == b'!' {
                let word = String::from_utf8_lossy(&buf[next..next + n as usize])
                    .split(' ')
                    .next()
                    .unwrap_or("ERR")
                    .to_string();
                return Ok(Some((ReplyKind::Error(word), stop)));
            }
            Ok(Some((ReplyKind::Value, stop)))
        }
        b'*' | b'~' | b'>' | b'%' | b'|' => {
            let n = num()?;
            if n < 0 {
                return Ok(Some((ReplyKind::Null, next)));
            }
            let items = if matches!(t, b'%' | b'|') { 2 * n } else { n };
            let mut pos = next;
            for _ in 0..items {
                match skip(buf, pos, depth + 1)? {
                    Some((_, p)) => pos = p,
                    None => return Ok(None),
                }
            }
            // An attribute (`|`) precedes the reply it annotates.
            if t == b'|' {
                return skip(buf, pos, depth + 1);
            }
            Ok(Some((ReplyKind::Value, pos)))
        }
        other => Err(format!("unexpected reply type byte {:?}", other as char)),
    }
}

/// Parses the reply at the start of `buf`: its kind and length, `None` if incomplete.
pub fn parse_reply(buf: &[u8]) -> Result<Option<(ReplyKind, usize)>, String> {
    skip(buf, 0, 0)
}

/// Appends `args` as a RESP array of bulk strings.
pub fn encode(out: &mut Vec<u8>, args: &[&[u8]]) {
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

/// What every SET the load generator sends looks like: a value of `size` bytes (cut
/// from `values`) and an optional `EX` time to live.
struct SetShape<'a> {
    values: &'a [u8],
    size: Size,
    ttl: Option<String>,
}

impl SetShape<'_> {
    /// Appends `SET name <value> [EX ttl]`.
    fn encode(&self, out: &mut Vec<u8>, name: &[u8], rng: &mut rand::rngs::SmallRng) {
        let v = &self.values[..self.size.pick(rng)];
        match &self.ttl {
            Some(t) => encode(out, &[b"SET", name, v, b"EX", t.as_bytes()]),
            None => encode(out, &[b"SET", name, v]),
        }
    }

    /// Appends the request of `kind` for `name`.
    fn request(&self, out: &mut Vec<u8>, kind: Kind, name: &[u8], rng: &mut rand::rngs::SmallRng) {
        match kind {
            Kind::Get => encode(out, &[b"GET", name]),
            Kind::Set => self.encode(out, name, rng),
        }
    }
}

/// Reads one reply, keeping any bytes after it in `buf`.
async fn read_reply(
    stream: &mut (impl AsyncReadExt + Unpin),
    buf: &mut Vec<u8>,
) -> Result<ReplyKind> {
    loop {
        if let Some((kind, n)) = parse_reply(buf).map_err(anyhow::Error::msg)? {
            buf.drain(..n);
            return Ok(kind);
        }
        let mut chunk = [0u8; 16 << 10];
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            bail!("the server closed the connection");
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Opens a connection, authenticates and switches protocol as asked.
pub async fn connect(t: &Target) -> Result<TcpStream> {
    let mut s = TcpStream::connect(&t.addr)
        .await
        .with_context(|| format!("connecting to {}", t.addr))?;
    s.set_nodelay(true)?;
    let mut out = Vec::new();
    let mut buf = Vec::new();
    if t.proto == 3 {
        match &t.auth {
            Some(p) => encode(
                &mut out,
                &[b"HELLO", b"3", b"AUTH", b"default", p.as_bytes()],
            ),
            None => encode(&mut out, &[b"HELLO", b"3"]),
        }
    } else if let Some(p) = &t.auth {
        encode(&mut out, &[b"AUTH", p.as_bytes()]);
    }
    if !out.is_empty() {
        s.write_all(&out).await?;
        if let ReplyKind::Error(e) = read_reply(&mut s, &mut buf).await? {
            bail!("handshake with {} refused: {e}", t.addr);
        }
    }
    Ok(s)
}

/// Writes keys `0..keys` (the load phase) over `connections` pipelined connections;
/// `progress` is told how many are done.
/// What the load phase writes.
#[derive(Debug, Clone)]
pub struct LoadSpec {
    pub connections: usize,
    pub keys: u64,
    pub key_size: Size,
    pub value_size: Size,
    pub ttl_secs: Option<u64>,
    /// Route by hash slot (cluster mode).
    pub cluster: bool,
}

pub async fn load(
    target: &Target,
    spec: &LoadSpec,
    progress: Arc<dyn Fn(u64) + Send + Sync>,
) -> Result<()> {
    let LoadSpec {
        connections,
        keys,
        key_size,
        value_size,
        ttl_secs,
        cluster,
    } = spec.clone();
    const BATCH: u64 = 64;
    let map = match cluster {
        true => Some(Arc::new(std::sync::RwLock::new(discover(target).await?))),
        false => None,
    };
    let next = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for c in 0..connections.max(1) {
        let (target, next, done, progress) =
            (target.clone(), next.clone(), done.clone(), progress.clone());
        let map = map.clone();
        tasks.push(tokio::spawn(async move {
            if let Some(map) = map {
                return load_cluster(
                    target, map, next, done, progress, keys, key_size, value_size, ttl_secs, c,
                )
                .await;
            }
            let mut s = connect(&target).await?;
            let mut rng = rand::rngs::SmallRng::seed_from_u64(0x10ad ^ c as u64);
            let values = vec![b'v'; value_size.max()];
            let shape = SetShape {
                values: &values,
                size: value_size,
                ttl: ttl_secs.map(|t| t.to_string()),
            };
            let (mut out, mut buf, mut name) = (Vec::new(), Vec::new(), Vec::new());
            loop {
                let from = next.fetch_add(BATCH, Ordering::Relaxed);
                if from >= keys {
                    return Ok::<(), anyhow::Error>(());
                }
                let to = (from + BATCH).min(keys);
                out.clear();
                for id in from..to {
                    key_name(id, key_size, &mut name);
                    shape.encode(&mut out, &name, &mut rng);
                }
                s.write_all(&out).await?;
                for _ in from..to {
                    if let ReplyKind::Error(e) = read_reply(&mut s, &mut buf).await? {
                        bail!("loading failed: {e}");
                    }
                }
                progress(done.fetch_add(to - from, Ordering::Relaxed) + to - from);
            }
        }));
    }
    for t in tasks {
        t.await??;
    }
    Ok(())
}

/// The load phase's worker in cluster mode: batches routed by slot.
#[allow(clippy::too_many_arguments)]
async fn load_cluster(
    target: Target,
    map: Arc<std::sync::RwLock<SlotMap>>,
    next: Arc<AtomicU64>,
    done: Arc<AtomicU64>,
    progress: Arc<dyn Fn(u64) + Send + Sync>,
    keys: u64,
    key_size: Size,
    value_size: Size,
    ttl_secs: Option<u64>,
    seed: usize,
) -> Result<()> {
    const BATCH: u64 = 64;
    let mut client = ClusterClient::new(target, map);
    let mut rng = rand::rngs::SmallRng::seed_from_u64(0x10ad ^ seed as u64);
    let values = vec![b'v'; value_size.max()];
    let shape = SetShape {
        values: &values,
        size: value_size,
        ttl: ttl_secs.map(|t| t.to_string()),
    };
    let mut name = Vec::new();
    loop {
        let from = next.fetch_add(BATCH, Ordering::Relaxed);
        if from >= keys {
            return Ok(());
        }
        let to = (from + BATCH).min(keys);
        let reqs: Vec<Request> = (from..to)
            .map(|id| {
                key_name(id, key_size, &mut name);
                let mut wire = Vec::new();
                shape.encode(&mut wire, &name, &mut rng);
                Request {
                    key: name.clone(),
                    wire,
                }
            })
            .collect();
        for r in client.exec(&reqs).await? {
            if let ReplyKind::Error(e) = r {
                bail!("loading failed: {e}");
            }
        }
        progress(done.fetch_add(to - from, Ordering::Relaxed) + to - from);
    }
}

/// One closed-loop worker in cluster mode: batches of `pipeline` operations, each
/// request sent to its slot's node.
async fn cluster_worker(
    shared: Arc<Shared>,
    map: Arc<std::sync::RwLock<SlotMap>>,
    id: u64,
) -> Result<Recorder> {
    let cfg = &shared.cfg;
    let mut client = ClusterClient::new(cfg.target.clone(), map);
    let mut rng = rand::rngs::SmallRng::seed_from_u64(cfg.seed ^ id.wrapping_mul(0x9e37_79b9));
    let values = vec![b'x'; cfg.value_size.max()];
    let shape = cfg.set_shape(&values);
    let mut rec = Recorder::default();
    let mut name = Vec::new();
    'outer: while !shared.stop.load(Ordering::Relaxed) {
        let mut reqs: Vec<Request> = Vec::new();
        let mut kinds: Vec<Kind> = Vec::new();
        for _ in 0..cfg.pipeline.max(1) {
            if let Some(limit) = cfg.ops
                && shared.issued.fetch_add(1, Ordering::Relaxed) >= limit
            {
                shared.stop.store(true, Ordering::Relaxed);
                if reqs.is_empty() {
                    break 'outer;
                }
                break;
            }
            let (k, op_kinds) = shared.next_op(&mut rng);
            key_name(k, cfg.key_size, &mut name);
            for kind in op_kinds {
                let mut wire = Vec::new();
                shape.request(&mut wire, *kind, &name, &mut rng);
                reqs.push(Request {
                    key: name.clone(),
                    wire,
                });
                kinds.push(*kind);
            }
        }
        let sent = Instant::now();
        let replies = client.exec(&reqs).await?;
        let now = Instant::now();
        rec.redirects = client.redirects;
        if sent < shared.measure_from {
            continue;
        }
        for (kind, reply) in kinds.into_iter().zip(replies) {
            let outcome = match (reply, kind) {
                (ReplyKind::Error(e), _) => Outcome::Error(e),
                (ReplyKind::Null, Kind::Get) => Outcome::Miss,
                (_, Kind::Get) => Outcome::Hit,
                (_, Kind::Set) => Outcome::Written,
            };
            rec.record(
                kind,
                outcome,
                now.saturating_duration_since(shared.measure_from),
                now - sent,
            );
        }
    }
    Ok(rec)
}

/// A request on the wire, waiting for its reply.
struct Pending {
    kind: Kind,
    /// When it was written to the socket.
    at: Instant,
    /// Its reply frees a slot of the closed-loop window (a read-modify-write holds one
    /// slot for its two requests).
    frees_slot: bool,
}

struct Shared {
    cfg: RunConfig,
    chooser: KeyChooser,
    /// Keys that exist: the loaded ones plus inserts so far.
    existing: AtomicU64,
    issued: AtomicU64,
    stop: AtomicBool,
    measure_from: Instant,
}

impl Shared {
    /// The next operation: its key id and the requests it sends, in order.
    fn next_op(&self, rng: &mut rand::rngs::SmallRng) -> (u64, &'static [Kind]) {
        let existing = || self.existing.load(Ordering::Relaxed);
        match self.cfg.mix.pick(rng) {
            Op::Read => (self.chooser.next(rng, existing()), &[Kind::Get]),
            Op::Update => (self.chooser.next(rng, existing()), &[Kind::Set]),
            Op::Insert => (self.existing.fetch_add(1, Ordering::Relaxed), &[Kind::Set]),
            Op::ReadModifyWrite => (self.chooser.next(rng, existing()), &[Kind::Get, Kind::Set]),
        }
    }
}

impl RunConfig {
    fn set_shape<'a>(&self, values: &'a [u8]) -> SetShape<'a> {
        SetShape {
            values,
            size: self.value_size,
            ttl: self.ttl_secs.map(|t| t.to_string()),
        }
    }
}

/// Runs the workload; returns the merged measurements and the measured time.
pub async fn run(cfg: RunConfig) -> Result<(Recorder, Duration)> {
    let start = Instant::now();
    let shared = Arc::new(Shared {
        chooser: KeyChooser::new(cfg.dist, cfg.keys),
        existing: AtomicU64::new(cfg.keys),
        issued: AtomicU64::new(0),
        stop: AtomicBool::new(false),
        measure_from: start + cfg.warmup,
        cfg,
    });
    let mut tasks = Vec::new();
    if shared.cfg.cluster {
        if shared.cfg.rate.is_some() {
            bail!("fixed-rate mode is not available in cluster mode");
        }
        let map = Arc::new(std::sync::RwLock::new(discover(&shared.cfg.target).await?));
        for c in 0..shared.cfg.connections.max(1) {
            tasks.push(tokio::spawn(cluster_worker(
                shared.clone(),
                map.clone(),
                c as u64,
            )));
        }
    } else {
        for c in 0..shared.cfg.connections.max(1) {
            let stream = connect(&shared.cfg.target).await?;
            tasks.push(tokio::spawn(connection(shared.clone(), stream, c as u64)));
        }
    }
    // The clock: stop after the duration, report progress every second.
    let ticker = {
        let shared = shared.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            tick.tick().await;
            loop {
                tick.tick().await;
                let measured = Instant::now().saturating_duration_since(shared.measure_from);
                if let Some(p) = &shared.cfg.progress {
                    p(measured.as_secs(), shared.issued.load(Ordering::Relaxed));
                }
                if shared.cfg.duration.is_some_and(|d| measured >= d) {
                    shared.stop.store(true, Ordering::Relaxed);
                }
                if shared.stop.load(Ordering::Relaxed) {
                    return;
                }
            }
        })
    };
    let mut total = Recorder::default();
    let mut first_error = None;
    for t in tasks {
        match t.await? {
            Ok(r) => total.merge(&r),
            Err(e) => {
                shared.stop.store(true, Ordering::Relaxed);
                first_error.get_or_insert(e);
            }
        }
    }
    shared.stop.store(true, Ordering::Relaxed);
    ticker.abort();
    if let Some(e) = first_error {
        return Err(e);
    }
    let measured = Instant::now().saturating_duration_since(shared.measure_from);
    Ok((total, measured))
}

/// One connection: a writer that issues requests and a reader that times replies.
async fn connection(shared: Arc<Shared>, stream: TcpStream, id: u64) -> Result<Recorder> {
    let (mut rd, mut wr) = stream.into_split();
    let cfg = &shared.cfg;
    let window = Arc::new(Semaphore::new(cfg.pipeline.max(1)));
    let (tx, mut rx) = mpsc::unbounded_channel::<Pending>();
    let writer = {
        let shared = shared.clone();
        let window = window.clone();
        tokio::spawn(async move {
            let cfg = &shared.cfg;
            let mut rng =
                rand::rngs::SmallRng::seed_from_u64(cfg.seed ^ (id.wrapping_mul(0x9e37_79b9)));
            let values = vec![b'x'; cfg.value_size.max()];
            let shape = cfg.set_shape(&values);
            let per_conn_rate = cfg.rate.map(|r| r / cfg.connections.max(1) as f64);
            let mut due = Instant::now();
            let (mut out, mut name) = (Vec::new(), Vec::new());
            'outer: while !shared.stop.load(Ordering::Relaxed) {
                out.clear();
                let mut batch: Vec<Pending> = Vec::new();
                // Closed loop: as many requests as the window allows, in one write.
                // Open loop: the next request when it is due.
                let slots = match per_conn_rate {
                    Some(r) => {
                        // Everything due by now, so a late wake-up catches up.
                        tokio::time::sleep_until(due.into()).await;
                        let now = Instant::now();
                        let mut n = 0;
                        while due <= now {
                            due += Duration::from_secs_f64(1.0 / r);
                            n += 1;
                        }
                        vec![now; n.max(1)]
                    }
                    None => {
                        let Ok(p) = window.acquire().await else { break };
                        p.forget();
                        let mut n = 1;
                        while n < cfg.pipeline {
                            match window.try_acquire() {
                                Ok(p) => {
                                    p.forget();
                                    n += 1;
                                }
                                Err(_) => break,
                            }
                        }
                        vec![Instant::now(); n]
                    }
                };
                for at in slots {
                    if let Some(limit) = cfg.ops
                        && shared.issued.fetch_add(1, Ordering::Relaxed) >= limit
                    {
                        shared.stop.store(true, Ordering::Relaxed);
                        break 'outer;
                    }
                    let (k, kinds) = shared.next_op(&mut rng);
                    key_name(k, cfg.key_size, &mut name);
                    for (n, kind) in kinds.iter().enumerate() {
                        shape.request(&mut out, *kind, &name, &mut rng);
                        batch.push(Pending {
                            kind: *kind,
                            at,
                            // A read-modify-write holds one window slot for both requests.
                            frees_slot: n + 1 == kinds.len(),
                        });
                    }
                }
                if out.is_empty() {
                    continue;
                }
                // Latency counts from the write: in fixed-rate mode the pacer does not
                // wait for replies, so a slow server shows as latency, not as fewer sends.
                let sent = Instant::now();
                for mut p in batch {
                    p.at = sent;
                    if tx.send(p).is_err() {
                        break 'outer;
                    }
                }
                wr.write_all(&out).await?;
            }
            drop(tx);
            Ok::<(), anyhow::Error>(())
        })
    };
    let mut rec = Recorder::default();
    let mut buf: Vec<u8> = Vec::with_capacity(64 << 10);
    let mut chunk = vec![0u8; 64 << 10];
    while let Some(p) = rx.recv().await {
        let kind = loop {
            if let Some((kind, n)) = parse_reply(&buf).map_err(anyhow::Error::msg)? {
                buf.drain(..n);
                break kind;
            }
            let n = rd.read(&mut chunk).await?;
            if n == 0 {
                bail!("the server closed the connection");
            }
            buf.extend_from_slice(&chunk[..n]);
        };
        let now = Instant::now();
        if cfg.rate.is_none() && p.frees_slot {
            window.add_permits(1);
        }
        if p.at < shared.measure_from {
            continue; // warm-up
        }
        let outcome = match (kind, p.kind) {
            (ReplyKind::Error(e), _) => Outcome::Error(e),
            (ReplyKind::Null, Kind::Get) => Outcome::Miss,
            (_, Kind::Get) => Outcome::Hit,
            (_, Kind::Set) => Outcome::Written,
        };
        rec.record(
            p.kind,
            outcome,
            now.saturating_duration_since(shared.measure_from),
            now.saturating_duration_since(p.at),
        );
    }
    writer.await??;
    Ok(rec)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_parse_by_kind_and_length() {
        let cases: &[(&[u8], ReplyKind, usize)] = &[
            (b"+OK\r\n", ReplyKind::Value, 5),
            (b"$-1\r\n", ReplyKind::Null, 5),
            (b"_\r\n", ReplyKind::Null, 3),
            (b"$3\r\nabc\r\n", ReplyKind::Value, 9),
            (b"-OOM no\r\n", ReplyKind::Error("OOM".into()), 9),
            (b"*2\r\n$1\r\na\r\n:1\r\n", ReplyKind::Value, 15),
            (b"%1\r\n+a\r\n+b\r\n", ReplyKind::Value, 12),
        ];
        for (wire, kind, len) in cases {
            assert_eq!(
                parse_reply(wire).unwrap(),
                Some((kind.clone(), *len)),
                "{wire:?}"
            );
            assert_eq!(
                parse_reply(&wire[..wire.len() - 1]).unwrap(),
                None,
                "partial"
            );
        }
        assert!(parse_reply(b"?what\r\n").is_err());
    }
}
