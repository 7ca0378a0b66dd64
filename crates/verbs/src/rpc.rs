//! The client end of the memory-node RPC channel.
//!
//! One [`RpcClient`] is one pipelined connection: many requests may be in flight, each
//! tagged with an id; a writer task coalesces queued frames into few `write` calls and a
//! reader task hands each response to its waiter. A broken connection fails every waiter
//! with [`VerbsError::Closed`] and is re-dialled on the next call.

use std::collections::HashMap;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};

use crate::error::VerbsError;
use crate::tls::ClientTls;
use crate::wire::{self, Request, Response, WIRE_VERSION};

/// Where a memory node listens: `host:port` (or `tcp://host:port`) or `unix:/path`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    Tcp(String),
    Unix(PathBuf),
}

impl FromStr for Endpoint {
    type Err = VerbsError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if let Some(path) = s.strip_prefix("unix:") {
            return Ok(Endpoint::Unix(PathBuf::from(path)));
        }
        let addr = s.strip_prefix("tcp://").unwrap_or(s);
        if addr.rsplit_once(':').is_none() {
            return Err(VerbsError::Malformed(format!(
                "endpoint {s:?} is neither host:port nor unix:/path"
            )));
        }
        Ok(Endpoint::Tcp(addr.to_string()))
    }
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Endpoint::Tcp(a) => write!(f, "{a}"),
            Endpoint::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

pub(crate) trait Stream: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Stream for T {}

/// Connects to `endpoint`, giving up after `within` (a node that does not answer SYNs
/// must not hold a caller for the kernel's minutes of retries).
pub(crate) async fn dial(
    endpoint: &Endpoint,
    within: Duration,
    tls: Option<&ClientTls>,
) -> Result<Box<dyn Stream>, VerbsError> {
    tokio::time::timeout(within, dial_now(endpoint, tls))
        .await
        .map_err(|_| VerbsError::Timeout(within.as_millis() as u64))?
}

async fn dial_now(
    endpoint: &Endpoint,
    tls: Option<&ClientTls>,
) -> Result<Box<dyn Stream>, VerbsError> {
    Ok(match endpoint {
        Endpoint::Tcp(addr) => {
            let s = tokio::net::TcpStream::connect(addr)
                .await
                .map_err(|e| VerbsError::io(&format!("connecting to memory node {addr}"), e))?;
            let _ = s.set_nodelay(true);
            // Closing resets the connection: what the kernel still holds unsent is
            // dropped, never delivered late (see `RpcClient::abort`).
            let _ = s.set_zero_linger();
            match tls {
                Some(t) => Box::new(t.connect(addr, s).await?),
                None => Box::new(s),
            }
        }
        Endpoint::Unix(path) => Box::new(
            tokio::net::UnixStream::connect(path)
                .await
                .map_err(|e| VerbsError::io(&format!("connecting to {}", path.display()), e))?,
        ),
    })
}

type Waiters = Arc<Mutex<HashMap<u64, oneshot::Sender<Result<Response, VerbsError>>>>>;

/// Requests queued for one connection's writer at most: a node that stops reading
/// makes callers wait (up to their timeout), not the queue grow.
const QUEUED_FRAMES: usize = 4096;

struct Conn {
    frames: mpsc::Sender<Bytes>,
    waiters: Waiters,
    dead: Arc<AtomicBool>,
    /// Tells the reader and the writer to let go of the socket (an abort).
    abort: Arc<Abort>,
}

/// One permit for each of a connection's two tasks (a permit waits for a task that is
/// not listening yet).
#[derive(Default)]
struct Abort {
    reader: tokio::sync::Notify,
    writer: tokio::sync::Notify,
}

/// Options of an [`RpcClient`].
#[derive(Debug, Clone)]
pub struct RpcOptions {
    pub secret: Bytes,
    /// The longest a request waits for its response (and for room to be sent).
    pub timeout: Duration,
    /// The longest a (re-)dial may take.
    pub connect_timeout: Duration,
    pub max_frame: u64,
    /// Dial TCP endpoints with TLS, trusting this CA (none: plain TCP).
    pub tls: Option<ClientTls>,
    /// This client's identity, which the manager can revoke on every node (an agent
    /// picks a random one per process; 0: anonymous, never revoked).
    pub client: u64,
    /// Set when a node answers that this client was revoked (the agent exits).
    pub revoked: Option<Arc<AtomicBool>>,
}

impl Default for RpcOptions {
    fn default() -> Self {
        Self {
            secret: Bytes::new(),
            timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(2),
            max_frame: wire::DEFAULT_MAX_FRAME,
            tls: None,
            client: 0,
            revoked: None,
        }
    }
}

pub struct RpcClient {
    endpoint: Endpoint,
    options: RpcOptions,
    /// The connection (its lock is never held across an await).
    conn: Mutex<Option<Arc<Conn>>>,
    /// One dial at a time.
    dialing: tokio::sync::Mutex<()>,
    /// Bumped by every [`abort`](Self::abort): a dial begun before one is refused.
    aborts: AtomicU64,
    next_id: AtomicU64,
}

impl Conn {
    /// Fails every waiter and makes both tasks let go of the socket (reset on close).
    fn kill(&self) {
        self.dead.store(true, Ordering::Release);
        self.abort.reader.notify_one();
        self.abort.writer.notify_one();
        for (_, w) in self.waiters.lock().drain() {
            let _ = w.send(Err(VerbsError::Closed));
        }
    }
}

impl RpcClient {
    /// Connects and authenticates; returns the client and the node's `Hello` answer.
    pub async fn connect(
        endpoint: Endpoint,
        options: RpcOptions,
    ) -> Result<(Self, Response), VerbsError> {
        let client = RpcClient {
            endpoint,
            options,
            conn: Mutex::new(None),
            dialing: tokio::sync::Mutex::new(()),
            aborts: AtomicU64::new(0),
            next_id: AtomicU64::new(1),
        };
        let (conn, hello) = client.open().await?;
        *client.conn.lock() = Some(conn);
        Ok((client, hello))
    }

    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    async fn open(&self) -> Result<(Arc<Conn>, Response), VerbsError> {
        let stream = dial(
            &self.endpoint,
            self.options.connect_timeout,
            self.options.tls.as_ref(),
        )
        .await?;
        let (rd, wr) = tokio::io::split(stream);
        let (tx, rx) = mpsc::channel(QUEUED_FRAMES);
        let conn = Arc::new(Conn {
            frames: tx,
            waiters: Arc::new(Mutex::new(HashMap::new())),
            dead: Arc::new(AtomicBool::new(false)),
            abort: Arc::new(Abort::default()),
        });
        tokio::spawn(write_loop(wr, rx, conn.dead.clone(), conn.abort.clone()));
        tokio::spawn(read_loop(
            rd,
            conn.waiters.clone(),
            conn.dead.clone(),
            conn.abort.clone(),
            self.options.max_frame,
        ));
        let hello = self
            .call_on(
                &conn,
                &Request::Hello {
                    version: WIRE_VERSION,
                    secret: self.options.secret.clone(),
                    client: self.options.client,
                },
            )
            .await;
        match hello {
            Ok(hello) => Ok((conn, hello)),
            Err(e) => {
                conn.kill();
                Err(e)
            }
        }
    }

    fn current(&self) -> Option<Arc<Conn>> {
        self.conn
            .lock()
            .as_ref()
            .filter(|c| !c.dead.load(Ordering::Acquire))
            .cloned()
    }

    /// The connection to send on for a call begun when the abort count was `aborts`.
    async fn live_conn(&self, aborts: u64) -> Result<Arc<Conn>, VerbsError> {
        if self.aborts.load(Ordering::SeqCst) != aborts {
            return Err(VerbsError::Closed);
        }
        if let Some(c) = self.current() {
            return Ok(c);
        }
        let _one = self.dialing.lock().await;
        if self.aborts.load(Ordering::SeqCst) != aborts {
            return Err(VerbsError::Closed);
        }
        if let Some(c) = self.current() {
            return Ok(c);
        }
        tracing::debug!(endpoint = %self.endpoint, "re-dialling memory node");
        let (conn, _) = self.open().await?;
        let mut slot = self.conn.lock();
        if self.aborts.load(Ordering::SeqCst) != aborts {
            // Aborted while dialling: what was waiting for this connection must not
            // go out on it.
            drop(slot);
            conn.kill();
            return Err(VerbsError::Closed);
        }
        *slot = Some(conn.clone());
        Ok(conn)
    }

    async fn call_on(&self, conn: &Conn, req: &Request) -> Result<Response, VerbsError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        conn.waiters.lock().insert(id, tx);
        let mut buf = BytesMut::new();
        req.encode(id, &mut buf);
        crate::stats::rpc_sent(buf.len());
        let queued =
            tokio::time::timeout(self.options.timeout, conn.frames.send(buf.freeze())).await;
        if !matches!(queued, Ok(Ok(()))) || conn.dead.load(Ordering::Acquire) {
            conn.waiters.lock().remove(&id);
            return Err(match queued {
                Err(_) => VerbsError::Timeout(self.options.timeout.as_millis() as u64),
                _ => VerbsError::Closed,
            });
        }
        match tokio::time::timeout(self.options.timeout, rx).await {
            Ok(Ok(Ok(Response::Error(e)))) => {
                if let (VerbsError::Revoked(_), Some(flag)) = (&e, &self.options.revoked) {
                    flag.store(true, Ordering::Release);
                }
                Err(e)
            }
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(VerbsError::Closed),
            Err(_) => {
                conn.waiters.lock().remove(&id);
                Err(VerbsError::Timeout(self.options.timeout.as_millis() as u64))
            }
        }
    }

    /// Drops the connection at once (the node was failed over): requests in flight
    /// fail with [`VerbsError::Closed`], and the socket is reset when its tasks let go,
    /// so no request still queued in the kernel is delivered later, when a partition
    /// heals, into a copy the manager has since refilled. The next call dials anew.
    pub fn abort(&self) {
        let conn = {
            let mut slot = self.conn.lock();
            self.aborts.fetch_add(1, Ordering::SeqCst);
            slot.take()
        };
        if let Some(conn) = conn {
            conn.kill();
        }
    }

    /// Sends one request and waits for its response; an error response is `Err`.
    pub async fn call(&self, req: &Request) -> Result<Response, VerbsError> {
        // A call begun before an abort never dials anew (it would deliver late).
        let aborts = self.aborts.load(Ordering::SeqCst);
        let conn = self.live_conn(aborts).await?;
        self.call_on(&conn, req).await
    }
}

async fn write_loop(
    mut wr: tokio::io::WriteHalf<Box<dyn Stream>>,
    mut rx: mpsc::Receiver<Bytes>,
    dead: Arc<AtomicBool>,
    abort: Arc<Abort>,
) {
    let mut out = BytesMut::with_capacity(64 << 10);
    loop {
        let first = tokio::select! {
            biased;
            _ = abort.writer.notified() => return,
            first = rx.recv() => first,
        };
        let Some(first) = first else { break };
        out.extend_from_slice(&first);
        while out.len() < (1 << 20) {
            match rx.try_recv() {
                Ok(more) => out.extend_from_slice(&more),
                Err(_) => break,
            }
        }
        // An abort lets go of the socket without a word (it is reset on close).
        tokio::select! {
            biased;
            _ = abort.writer.notified() => return,
            written = wr.write_all(&out) => if written.is_err() {
                break;
            },
        }
        out.clear();
    }
    dead.store(true, Ordering::Release);
    // The client is gone (or the connection broke): say so, or the read half would
    // keep the connection, and the node the session with its prepared transactions,
    // open until the process exits.
    let _ = wr.shutdown().await;
}

async fn read_loop(
    mut rd: tokio::io::ReadHalf<Box<dyn Stream>>,
    waiters: Waiters,
    dead: Arc<AtomicBool>,
    abort: Arc<Abort>,
    max_frame: u64,
) {
    let mut buf = BytesMut::with_capacity(64 << 10);
    'outer: loop {
        tokio::select! {
            read = rd.read_buf(&mut buf) => match read {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            },
            _ = abort.reader.notified() => break,
        }
        loop {
            match wire::split_frame(&mut buf, max_frame) {
                Ok(Some(frame)) => {
                    crate::stats::rpc_received(wire::FRAME_HEADER + frame.payload.len());
                    let resp = Response::decode(frame.tag, frame.payload);
                    if frame.id == 0 {
                        // A connection-level error: the node is closing this stream.
                        tracing::warn!(?resp, "memory node reported a connection error");
                        break 'outer;
                    }
                    if let Some(w) = waiters.lock().remove(&frame.id) {
                        let _ = w.send(resp);
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!(error = %e, "bad frame from memory node");
                    break 'outer;
                }
            }
        }
    }
    dead.store(true, Ordering::Release);
    for (_, w) in waiters.lock().drain() {
        let _ = w.send(Err(VerbsError::Closed));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_parse() {
        assert_eq!(
            "127.0.0.1:7000".parse::<Endpoint>().unwrap(),
            Endpoint::Tcp("127.0.0.1:7000".into())
        );
        assert_eq!(
            "unix:/tmp/x.sock".parse::<Endpoint>().unwrap(),
            Endpoint::Unix("/tmp/x.sock".into())
        );
        assert!("nonsense".parse::<Endpoint>().is_err());
    }
}
