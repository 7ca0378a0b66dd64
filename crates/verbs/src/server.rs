//! The memory node's RPC server: accepts connections and feeds requests to a
//! [`NodeCore`].
//!
//! Per connection: frames are split off the receive buffer, handled in order, and the
//! responses of everything that arrived together are written with one `write`. A frame
//! that fails to decode gets an error response and the connection goes on; a frame
//! longer than the limit, or any request before a valid `Hello` when a secret is set,
//! gets an error (id 0) and the connection is closed, since the stream cannot be
//! trusted. Either way the node keeps serving everyone else. A connection whose client
//! the manager revoked gets `Revoked` for every request (`revoke.rs`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use dmc_proto::metrics::node as node_metrics;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::error::VerbsError;
use crate::node::NodeCore;
use crate::rdma::RdmaResponder;
use crate::rdma::serve::{ResponderLink, Serving};
use crate::revoke::ClientFence;
use crate::rpc::{Endpoint, RpcClient, RpcOptions, Stream};
use crate::tls::{ClientTls, ServerTls};
use crate::wire::{self, Request, Response, WIRE_VERSION, WireVerb};

/// Receive buffer ceiling beyond the frame limit: a peer cannot grow a connection's
/// memory past `max_frame + READ_SLACK`.
const READ_SLACK: usize = 64 << 10;
/// Bytes per `Write` verb when copying a region to a peer.
/// Stays well under any node's frame limit (memory-node requires `max_frame` ≥ 1 MiB).
const COPY_CHUNK: u64 = 256 << 10;

pub enum Listener {
    Tcp(tokio::net::TcpListener),
    Unix(tokio::net::UnixListener, PathBuf),
}

impl Listener {
    pub async fn bind(endpoint: &Endpoint) -> Result<Self, VerbsError> {
        match endpoint {
            Endpoint::Tcp(addr) => tokio::net::TcpListener::bind(addr)
                .await
                .map(Listener::Tcp)
                .map_err(|e| VerbsError::io(&format!("binding {addr}"), e)),
            Endpoint::Unix(path) => {
                let _ = std::fs::remove_file(path);
                tokio::net::UnixListener::bind(path)
                    .map(|l| Listener::Unix(l, path.clone()))
                    .map_err(|e| VerbsError::io(&format!("binding {}", path.display()), e))
            }
        }
    }

    /// The endpoint clients should dial (with the real port after binding port 0).
    pub fn endpoint(&self) -> Result<Endpoint, VerbsError> {
        match self {
            Listener::Tcp(l) => {
                let addr: SocketAddr = l
                    .local_addr()
                    .map_err(|e| VerbsError::io("reading bound address", e))?;
                Ok(Endpoint::Tcp(addr.to_string()))
            }
            Listener::Unix(_, path) => Ok(Endpoint::Unix(path.clone())),
        }
    }

    async fn accept(&self) -> std::io::Result<Accepted> {
        Ok(match self {
            Listener::Tcp(l) => {
                let (s, _) = l.accept().await?;
                let _ = s.set_nodelay(true);
                Accepted::Tcp(s)
            }
            Listener::Unix(l, _) => Accepted::Other(Box::new(l.accept().await?.0)),
        })
    }
}

/// An accepted connection, before any TLS handshake.
enum Accepted {
    Tcp(tokio::net::TcpStream),
    Other(Box<dyn Stream>),
}

/// Limits and TLS of the server side.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    pub max_frame: u64,
    /// Serve TLS on the TCP port (none: plain TCP).
    pub tls: Option<ServerTls>,
    /// How this node dials a peer it copies a region to.
    pub peer_tls: Option<ClientTls>,
    /// The node's RDMA device side, when it serves the `rdma` backend.
    pub rdma: Option<Arc<RdmaResponder>>,
}

impl Default for ServerOptions {
    fn default() -> Self {
        Self {
            max_frame: wire::DEFAULT_MAX_FRAME,
            tls: None,
            peer_tls: None,
            rdma: None,
        }
    }
}

/// Serves `listener` until `shutdown` completes.
pub async fn serve(
    core: Arc<NodeCore>,
    listener: Listener,
    options: ServerOptions,
    shutdown: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => {
                    let core = core.clone();
                    let options = options.clone();
                    tokio::spawn(async move {
                        let stream: Box<dyn Stream> = match (accepted, &options.tls) {
                            (Accepted::Tcp(s), Some(tls)) => match tls.accept(s).await {
                                Ok(s) => Box::new(s),
                                Err(e) => {
                                    tracing::debug!(error = %e, "TLS handshake failed");
                                    return;
                                }
                            },
                            (Accepted::Tcp(s), None) => Box::new(s),
                            (Accepted::Other(s), _) => s,
                        };
                        let session = core.new_session();
                        if let Err(e) = serve_conn(&core, session, stream, &options).await {
                            tracing::debug!(session, error = %e, "connection ended");
                        }
                        core.end_session(session);
                    });
                }
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                }
            }
        }
    }
}

async fn serve_conn(
    core: &Arc<NodeCore>,
    session: u64,
    stream: Box<dyn Stream>,
    options: &ServerOptions,
) -> Result<(), VerbsError> {
    let (mut rd, mut wr) = tokio::io::split(stream);
    let mut buf = BytesMut::with_capacity(64 << 10);
    let mut out = BytesMut::with_capacity(64 << 10);
    let mut authed = core.secret().is_none();
    let mut fence: Option<Arc<ClientFence>> = None;
    let mut client_id = 0u64;
    // This connection's RDMA queue pair: destroyed with the connection.
    let mut queue_pair: Option<ResponderLink> = None;
    loop {
        let n = rd
            .read_buf(&mut buf)
            .await
            .map_err(|e| VerbsError::io("reading request", e))?;
        if n == 0 {
            return Ok(());
        }
        // A slow node (fault tests): everything this read brought in is answered late,
        // so pipelined requests share one delay (latency, not a throughput collapse).
        #[cfg(feature = "failpoints")]
        if let Some(late) = injected_delay() {
            tokio::time::sleep(late).await;
        }
        loop {
            let frame = match wire::split_frame(&mut buf, options.max_frame) {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(e) => {
                    core.count_error();
                    Response::Error(e.clone()).encode(0, &mut out);
                    let _ = wr.write_all(&out).await;
                    return Err(e);
                }
            };
            let req = match Request::decode(frame.tag, frame.payload) {
                Ok(r) => r,
                Err(e) => {
                    core.count_error();
                    Response::Error(e).encode(frame.id, &mut out);
                    continue;
                }
            };
            #[cfg(feature = "failpoints")]
            if matches!(req, Request::Commit(_)) && drops_commit(core) {
                return Err(VerbsError::Malformed(
                    "connection dropped mid-commit by a fail point".into(),
                ));
            }
            let started = std::time::Instant::now();
            let kind = req.kind();
            if let Request::Verbs(verbs) = &req {
                count_verbs(verbs);
            }
            let resp = match req {
                Request::Hello {
                    version,
                    secret,
                    client,
                } => {
                    if version != WIRE_VERSION {
                        Response::Error(VerbsError::Malformed(format!(
                            "wire version {version} is not supported (this node speaks {WIRE_VERSION})"
                        )))
                    } else if core.secret().is_some_and(|s| *s != secret) {
                        Response::Error(VerbsError::Unauthenticated)
                    } else {
                        match core.clients().register(client) {
                            Ok(f) => {
                                fence = f;
                                client_id = client;
                                authed = true;
                                core.bind_client(session, client);
                                core.handle(session, Request::Ping)
                            }
                            Err(e) => Response::Error(e),
                        }
                    }
                }
                _ if !authed => {
                    core.count_error();
                    Response::Error(VerbsError::Unauthenticated).encode(0, &mut out);
                    let _ = wr.write_all(&out).await;
                    return Err(VerbsError::Unauthenticated);
                }
                Request::CopyRegion { region, peer } => {
                    match copy_region(core, region, &peer, options.peer_tls.clone()).await {
                        Ok(()) => Response::Ok,
                        Err(e) => Response::Error(e),
                    }
                }
                // A revoked client's requests run no more (`revoke.rs`); the check
                // holds until the request is done, so a revocation waits for it.
                other => match fence.as_deref().map(|f| f.admit()).transpose() {
                    Ok(_admitted) => match &options.rdma {
                        Some(rdma) => handle_with_rdma(
                            core,
                            rdma,
                            (session, client_id, &fence),
                            &mut queue_pair,
                            other,
                        ),
                        None => core.handle(session, other),
                    },
                    Err(e) => {
                        metrics::counter!(node_metrics::REVOKED_REQUESTS.name).increment(1);
                        Response::Error(e)
                    }
                },
            };
            metrics::histogram!(node_metrics::REQUEST_DURATION.name, "request" => kind)
                .record(started.elapsed().as_secs_f64());
            resp.encode(frame.id, &mut out);
        }
        if !out.is_empty() {
            wr.write_all(&out)
                .await
                .map_err(|e| VerbsError::io("writing response", e))?;
            out.clear();
        }
        if buf.capacity() > options.max_frame as usize + READ_SLACK && buf.is_empty() {
            buf = BytesMut::with_capacity(64 << 10);
        }
    }
}

/// The fail point `node-drop-commit=return(ID)`: the memory node `ID` closes a
/// connection instead of serving a commit on it (a coordinator's connection broken
/// mid-commit, for the settlement tests).
/// A request on a node that serves RDMA: queue pairs and region keys here, and the
/// requests that change what is registered or who may use it keep the device in step.
fn handle_with_rdma(
    core: &Arc<NodeCore>,
    rdma: &RdmaResponder,
    (session, client, fence): (u64, u64, &Option<Arc<ClientFence>>),
    queue_pair: &mut Option<ResponderLink>,
    req: Request,
) -> Response {
    let serving = || Serving {
        core: core.clone(),
        session,
        fence: fence.clone(),
    };
    match req {
        Request::RdmaConnect { endpoint } => match rdma.accept(client, &endpoint, serving()) {
            Ok((qp, mine)) => {
                // A reconnect replaces (and so destroys) the connection's old pair.
                *queue_pair = Some(qp);
                Response::RdmaConnected(mine)
            }
            Err(e) => {
                core.count_error();
                Response::Error(e)
            }
        },
        Request::RdmaRegion { region } => rdma.region(core, region).unwrap_or_else(|e| {
            core.count_error();
            Response::Error(e)
        }),
        Request::DropRegion { region } | Request::CreateRegion { region, .. } => {
            rdma.forget(region);
            let resp = core.handle(session, req);
            // Again after: a key asked for in between registered the copy just dropped.
            rdma.forget(region);
            resp
        }
        Request::Revoke { client } => {
            let resp = core.handle(session, req);
            rdma.revoke(client);
            resp
        }
        other => core.handle(session, other),
    }
}

#[cfg(feature = "failpoints")]
fn drops_commit(core: &NodeCore) -> bool {
    fail::eval("node-drop-commit", |id| {
        id.and_then(|id| id.parse::<u32>().ok())
    })
    .flatten()
        == Some(core.id())
}

/// The fail point `node-verbs-delay=return(MS)`: how late to answer what one read of
/// a connection brought in.
#[cfg(feature = "failpoints")]
fn injected_delay() -> Option<std::time::Duration> {
    fail::fail_point!("node-verbs-delay", |ms| {
        ms.and_then(|ms| ms.parse().ok())
            .map(std::time::Duration::from_millis)
    });
    None
}

/// Counts a batch's verbs by kind (one counter update per kind present).
fn count_verbs(verbs: &[WireVerb]) {
    let mut counts = [0u64; 4];
    for v in verbs {
        counts[match v {
            WireVerb::Read { .. } => 0,
            WireVerb::Write { .. } => 1,
            WireVerb::Cas { .. } => 2,
            WireVerb::Faa { .. } => 3,
        }] += 1;
    }
    for (n, kind) in counts.into_iter().zip(["read", "write", "cas", "faa"]) {
        if n > 0 {
            metrics::counter!(node_metrics::VERBS.name, "verb" => kind).increment(n);
        }
    }
}

/// Creates `region` on `peer` and streams this node's copy of it there.
async fn copy_region(
    core: &NodeCore,
    region: u16,
    peer: &str,
    tls: Option<ClientTls>,
) -> Result<(), VerbsError> {
    let mem = core.region(region)?;
    let endpoint: Endpoint = peer.parse()?;
    let (client, _) = RpcClient::connect(
        endpoint,
        RpcOptions {
            secret: core.secret().cloned().unwrap_or_default(),
            tls,
            ..RpcOptions::default()
        },
    )
    .await?;
    match client
        .call(&Request::CreateRegion {
            region,
            size: mem.len(),
        })
        .await
    {
        Ok(_) | Err(VerbsError::RegionExists(_)) => {}
        Err(e) => return Err(e),
    }
    let mut offset = 0;
    while offset < mem.len() {
        let len = COPY_CHUNK.min(mem.len() - offset);
        let mut chunk = vec![0u8; len as usize];
        mem.read(offset, &mut chunk)?;
        client
            .call(&Request::Verbs(vec![WireVerb::Write {
                region,
                offset,
                data: Bytes::from(chunk),
            }]))
            .await?;
        offset += len;
    }
    tracing::info!(region, peer, bytes = mem.len(), "copied region to peer");
    Ok(())
}

/// A memory node served by this process on a free loopback port: for tests, benches and
/// embedded setups that want the real RPC path. Stops when dropped.
pub struct LoopbackNode {
    pub endpoint: Endpoint,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl LoopbackNode {
    /// Opens a node with `config` and serves it on 127.0.0.1 (port chosen by the OS).
    pub async fn spawn(config: crate::node::NodeConfig) -> Result<Self, VerbsError> {
        Self::spawn_with(config, ServerOptions::default()).await
    }

    /// As [`spawn`](Self::spawn), with server options (an RDMA device, a frame limit).
    pub async fn spawn_with(
        config: crate::node::NodeConfig,
        options: ServerOptions,
    ) -> Result<Self, VerbsError> {
        let core = NodeCore::open(config)?;
        let listener = Listener::bind(&Endpoint::Tcp("127.0.0.1:0".into())).await?;
        let endpoint = listener.endpoint()?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(serve(core, listener, options, async {
            let _ = stopped.await;
        }));
        Ok(LoopbackNode {
            endpoint,
            stop: Some(stop),
        })
    }
}

impl Drop for LoopbackNode {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}
