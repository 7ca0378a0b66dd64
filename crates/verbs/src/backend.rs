//! The transport backends.
//!
//! * [`LocalTransport`]: the node is in this process; verbs are plain memory operations
//!   and RPCs are function calls (the standalone agent's embedded pool).
//! * [`ShmTransport`]: the node is another process on this host; the client maps each
//!   region file `MAP_SHARED` on first use and runs verbs on the mapping itself, so the
//!   node's CPU never sees a READ, WRITE, CAS or FAA. RPCs go over the socket.
//! * [`TcpTransport`]: the node executes each verb; a posted batch is one RPC.
//! * [`crate::rdma::RdmaTransport`]: one-sided verbs on the node's registered memory
//!   through an RDMA device; the node's CPU sees none of them.
//!
//! All of them pass [`crate::conformance`].

use std::sync::Arc;

use arc_swap::ArcSwap;
use bytes::Bytes;
use futures::future::BoxFuture;

use crate::error::VerbsError;
use crate::memory::RegionMemory;
use crate::node::NodeCore;
use crate::rpc::{Endpoint, RpcClient, RpcOptions};
use crate::transport::{Transport, Verb, execute, prefetch, unexpected};
use crate::wire::{Request, Response, VerbOut, WireVerb};
use crate::{NodeId, RegionId};

/// An in-process memory node.
pub struct LocalTransport {
    core: Arc<NodeCore>,
    session: u64,
}

impl LocalTransport {
    pub fn new(core: Arc<NodeCore>) -> Self {
        let session = core.new_session();
        Self { core, session }
    }

    pub fn core(&self) -> &Arc<NodeCore> {
        &self.core
    }
}

impl Drop for LocalTransport {
    fn drop(&mut self) {
        self.core.end_session(self.session);
    }
}

fn run_all(
    mut lookup: impl FnMut(RegionId) -> Result<Arc<RegionMemory>, VerbsError>,
    verbs: &mut [Verb<'_>],
) -> Result<(), VerbsError> {
    let mut last: Option<Arc<RegionMemory>> = None;
    for v in verbs.iter_mut() {
        let mem = match &last {
            Some(m) if m.region() == v.region() => m.clone(),
            _ => {
                let m = lookup(v.region())?;
                last = Some(m.clone());
                m
            }
        };
        execute(&mem, v)?;
    }
    Ok(())
}

impl Transport for LocalTransport {
    fn node(&self) -> NodeId {
        self.core.id()
    }

    fn backend(&self) -> &'static str {
        "local"
    }

    fn post<'a, 'b: 'a>(
        &'a self,
        verbs: &'a mut [Verb<'b>],
    ) -> BoxFuture<'a, Result<(), VerbsError>> {
        crate::stats::post(crate::stats::LOCAL, verbs);
        let result = run_all(|r| self.core.region(r), verbs);
        Box::pin(std::future::ready(result))
    }

    fn completes_inline(&self) -> bool {
        true
    }

    fn calls_inline(&self) -> bool {
        true
    }

    fn prefetch(&self, region: RegionId, offset: u64, len: usize) {
        let _ = self.core.with_region(region, |mem| {
            mem.prefetch(offset, len);
            Ok(())
        });
    }

    fn prefetch_many(&self, hints: &[(RegionId, u64, usize)]) {
        self.core.with_regions(|mem| {
            for &(region, offset, len) in hints {
                if let Some(m) = mem(region) {
                    m.prefetch(offset, len);
                }
            }
        });
    }

    fn post_now(&self, verbs: &mut [Verb<'_>]) -> Option<Result<(), VerbsError>> {
        crate::stats::post(crate::stats::LOCAL, verbs);
        Some(self.core.with_regions(|mem| {
            // Only batches of several reads gain from prefetching (see `run_mapped`).
            if verbs.len() > 1 && verbs.iter().all(|v| matches!(v, Verb::Read { .. })) {
                for v in verbs.iter() {
                    if let Some(m) = mem(v.region()) {
                        prefetch(m, v);
                    }
                }
            }
            verbs.iter_mut().try_for_each(|v| match mem(v.region()) {
                Some(m) => execute(m, v),
                None => Err(VerbsError::NoSuchRegion(v.region())),
            })
        }))
    }

    fn call(&self, req: Request) -> BoxFuture<'_, Result<Response, VerbsError>> {
        let resp = match req {
            Request::CopyRegion { .. } => Response::Error(VerbsError::Remote(
                "an in-process node cannot copy regions to peers".into(),
            )),
            other => self.core.handle(self.session, other),
        };
        Box::pin(std::future::ready(match resp {
            Response::Error(e) => Err(e),
            r => Ok(r),
        }))
    }
}

/// A memory node on this host whose regions this process maps.
pub struct ShmTransport {
    node: NodeId,
    rpc: RpcClient,
    /// Mapped regions, indexed by region id. Read on every verb from every core: a
    /// lock-free snapshot, replaced whole on the rare map or unmap.
    maps: ArcSwap<Vec<Option<Arc<RegionMemory>>>>,
}

impl ShmTransport {
    pub async fn connect(endpoint: Endpoint, options: RpcOptions) -> Result<Self, VerbsError> {
        let (rpc, hello) = RpcClient::connect(endpoint, options).await?;
        let node = match hello {
            Response::Pong { node, .. } => node,
            other => return Err(unexpected(&other)),
        };
        Ok(Self {
            node,
            rpc,
            maps: ArcSwap::from_pointee(Vec::new()),
        })
    }

    async fn map(&self, region: RegionId) -> Result<Arc<RegionMemory>, VerbsError> {
        if let Some(Some(m)) = self.maps.load().get(region as usize) {
            return Ok(m.clone());
        }
        let path = match self.rpc.call(&Request::OpenRegion { region }).await? {
            Response::Region { path, .. } => path,
            other => return Err(unexpected(&other)),
        };
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| VerbsError::io(&format!("opening region file {path}"), e))?;
        let mem = Arc::new(RegionMemory::map_file(region, &file)?);
        tracing::debug!(region, node = self.node, path, "mapped region");
        self.maps.rcu(|maps| {
            let mut maps = Vec::clone(maps);
            if maps.len() <= region as usize {
                maps.resize(region as usize + 1, None);
            }
            maps[region as usize].get_or_insert_with(|| mem.clone());
            maps
        });
        match self.maps.load().get(region as usize) {
            Some(Some(m)) => Ok(m.clone()),
            _ => Ok(mem),
        }
    }

    /// Runs the verbs on the mappings if every region is mapped.
    fn run_mapped(&self, verbs: &mut [Verb<'_>]) -> Option<Result<(), VerbsError>> {
        let maps = self.maps.load();
        let mapped = |r: RegionId| maps.get(r as usize).and_then(|m| m.as_ref());
        if !verbs.iter().all(|v| mapped(v.region()).is_some()) {
            return None;
        }
        crate::stats::post(crate::stats::SHM, verbs);
        // A batch of reads (a get_many) overlaps its cache misses; writes gain nothing.
        if verbs.len() > 1 && verbs.iter().all(|v| matches!(v, Verb::Read { .. })) {
            for v in verbs.iter() {
                prefetch(mapped(v.region()).expect("checked above"), v);
            }
        }
        for v in verbs.iter_mut() {
            let mem = mapped(v.region()).expect("checked above");
            if let Err(e) = execute(mem, v) {
                return Some(Err(e));
            }
        }
        Some(Ok(()))
    }
}

impl Transport for ShmTransport {
    fn node(&self) -> NodeId {
        self.node
    }

    fn backend(&self) -> &'static str {
        "shm"
    }

    fn post<'a, 'b: 'a>(
        &'a self,
        verbs: &'a mut [Verb<'b>],
    ) -> BoxFuture<'a, Result<(), VerbsError>> {
        // Fast path: every region is mapped already, so the batch completes inline.
        if let Some(result) = self.run_mapped(verbs) {
            return Box::pin(std::future::ready(result));
        }
        Box::pin(async move {
            let regions: Vec<RegionId> = verbs.iter().map(|v| v.region()).collect();
            for region in regions {
                self.map(region).await?;
            }
            self.run_mapped(verbs).unwrap_or(Err(VerbsError::Closed))
        })
    }

    fn completes_inline(&self) -> bool {
        true
    }

    fn post_now(&self, verbs: &mut [Verb<'_>]) -> Option<Result<(), VerbsError>> {
        self.run_mapped(verbs)
    }

    fn prefetch(&self, region: RegionId, offset: u64, len: usize) {
        self.prefetch_many(&[(region, offset, len)]);
    }

    fn prefetch_many(&self, hints: &[(RegionId, u64, usize)]) {
        // A region not mapped yet is mapped by the verbs that follow, not by a hint.
        let maps = self.maps.load();
        for &(region, offset, len) in hints {
            if let Some(Some(mem)) = maps.get(region as usize) {
                mem.prefetch(offset, len);
            }
        }
    }

    fn call(&self, req: Request) -> BoxFuture<'_, Result<Response, VerbsError>> {
        Box::pin(async move {
            if let Request::DropRegion { region } = &req {
                self.forget_region(*region);
            }
            self.rpc.call(&req).await
        })
    }

    fn abort(&self) -> BoxFuture<'_, ()> {
        self.rpc.abort();
        Box::pin(std::future::ready(()))
    }

    fn forget_region(&self, region: RegionId) {
        self.maps.rcu(|maps| {
            let mut maps = Vec::clone(maps);
            if let Some(m) = maps.get_mut(region as usize) {
                *m = None;
            }
            maps
        });
    }
}

/// A memory node that executes verbs on the client's behalf. A post is sent as one
/// request frame while it fits half the frame limit; a larger one (a 512 MiB value) is
/// sent as several, in order, a large read or write split into pieces, so no frame
/// ever carries a whole value.
pub struct TcpTransport {
    node: NodeId,
    rpc: RpcClient,
    /// Bytes of data (written or read) one request carries at most.
    budget: usize,
}

impl TcpTransport {
    pub async fn connect(endpoint: Endpoint, options: RpcOptions) -> Result<Self, VerbsError> {
        // Half the frame limit, and a piece's length fits the wire's u32.
        let budget = usize::try_from((options.max_frame / 2).clamp(1, 1 << 30)).unwrap_or(1 << 30);
        let (rpc, hello) = RpcClient::connect(endpoint, options).await?;
        let node = match hello {
            Response::Pong { node, .. } => node,
            other => return Err(unexpected(&other)),
        };
        Ok(Self { node, rpc, budget })
    }
}

/// Where a wire verb's result goes: the verb it came from and, for a piece of a read,
/// where in its buffer and how long.
#[derive(Clone, Copy)]
struct Slot {
    verb: usize,
    at: usize,
    len: usize,
}

/// One request's verbs and where their results go.
type Frame = (Vec<WireVerb>, Vec<Slot>);

/// The verbs of one post as requests of at most `budget` data bytes each.
fn frames(verbs: &[Verb<'_>], budget: usize) -> Vec<Frame> {
    let mut out: Vec<Frame> = vec![(Vec::new(), Vec::new())];
    let mut bytes = 0usize;
    let mut push = |wire: WireVerb, slot: Slot, len: usize, out: &mut Vec<Frame>| {
        if bytes + len > budget && out.last().is_some_and(|f| !f.0.is_empty()) {
            out.push((Vec::new(), Vec::new()));
            bytes = 0;
        }
        bytes += len;
        if let Some(f) = out.last_mut() {
            f.0.push(wire);
            f.1.push(slot);
        }
    };
    // A piece of at most `budget` bytes at a time (one empty piece for an empty verb).
    let pieces = |len: usize| {
        (0..len.div_ceil(budget).max(1)).map(move |k| {
            let at = k * budget;
            (at, budget.min(len - at.min(len)))
        })
    };
    for (verb, v) in verbs.iter().enumerate() {
        match v {
            Verb::Read {
                region,
                offset,
                buf,
            } => {
                for (at, len) in pieces(buf.len()) {
                    let wire = WireVerb::Read {
                        region: *region,
                        offset: offset + at as u64,
                        len: len as u32,
                    };
                    push(wire, Slot { verb, at, len }, len, &mut out);
                }
            }
            Verb::Write {
                region,
                offset,
                data,
            } => {
                for (at, len) in pieces(data.len()) {
                    let wire = WireVerb::Write {
                        region: *region,
                        offset: offset + at as u64,
                        data: Bytes::copy_from_slice(&data[at..at + len]),
                    };
                    push(wire, Slot { verb, at, len }, len, &mut out);
                }
            }
            Verb::Cas {
                region,
                offset,
                expected,
                new,
                ..
            } => {
                let wire = WireVerb::Cas {
                    region: *region,
                    offset: *offset,
                    expected: *expected,
                    new: *new,
                };
                push(
                    wire,
                    Slot {
                        verb,
                        at: 0,
                        len: 0,
                    },
                    16,
                    &mut out,
                );
            }
            Verb::Faa {
                region,
                offset,
                add,
                ..
            } => {
                let wire = WireVerb::Faa {
                    region: *region,
                    offset: *offset,
                    add: *add,
                };
                push(
                    wire,
                    Slot {
                        verb,
                        at: 0,
                        len: 0,
                    },
                    8,
                    &mut out,
                );
            }
        }
    }
    out
}

impl Transport for TcpTransport {
    fn node(&self) -> NodeId {
        self.node
    }

    fn backend(&self) -> &'static str {
        "tcp"
    }

    fn post<'a, 'b: 'a>(
        &'a self,
        verbs: &'a mut [Verb<'b>],
    ) -> BoxFuture<'a, Result<(), VerbsError>> {
        Box::pin(async move {
            crate::stats::post(crate::stats::TCP, verbs);
            for (wire, slots) in frames(verbs, self.budget) {
                let n = wire.len();
                let outs = match self.rpc.call(&Request::Verbs(wire)).await? {
                    Response::Verbs(outs) if outs.len() == n => outs,
                    other => return Err(unexpected(&other)),
                };
                for (slot, out) in slots.into_iter().zip(outs) {
                    let Some(v) = verbs.get_mut(slot.verb) else {
                        return Err(VerbsError::Malformed(
                            "a verb result without its verb".into(),
                        ));
                    };
                    match (v, out) {
                        (Verb::Read { buf, .. }, VerbOut::Data(d)) => {
                            match buf.get_mut(slot.at..slot.at + slot.len) {
                                Some(piece) if d.len() == slot.len => piece.copy_from_slice(&d),
                                _ => {
                                    return Err(VerbsError::Malformed(
                                        "a read returned another length than asked".into(),
                                    ));
                                }
                            }
                        }
                        (Verb::Write { .. }, VerbOut::Done) => {}
                        (Verb::Cas { old, .. }, VerbOut::Word(w))
                        | (Verb::Faa { old, .. }, VerbOut::Word(w)) => *old = w,
                        (_, out) => {
                            return Err(VerbsError::Malformed(format!(
                                "verb result {out:?} does not match its verb"
                            )));
                        }
                    }
                }
            }
            Ok(())
        })
    }

    fn call(&self, req: Request) -> BoxFuture<'_, Result<Response, VerbsError>> {
        Box::pin(async move { self.rpc.call(&req).await })
    }

    fn abort(&self) -> BoxFuture<'_, ()> {
        self.rpc.abort();
        Box::pin(std::future::ready(()))
    }
}

/// Which backend to reach a memory node with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendKind {
    Shm,
    Tcp,
    /// One-sided RDMA verbs on this process's device ([`crate::rdma::process_device`]).
    Rdma,
}

impl BackendKind {
    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Shm => "shm",
            BackendKind::Tcp => "tcp",
            BackendKind::Rdma => "rdma",
        }
    }
}

impl std::str::FromStr for BackendKind {
    type Err = VerbsError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "shm" => Ok(BackendKind::Shm),
            "tcp" => Ok(BackendKind::Tcp),
            "rdma" => Ok(BackendKind::Rdma),
            other => Err(VerbsError::Malformed(format!(
                "unknown backend {other:?} (expected shm, tcp or rdma)"
            ))),
        }
    }
}

/// Connects to a memory node with the chosen backend.
pub async fn connect(
    kind: BackendKind,
    endpoint: Endpoint,
    options: RpcOptions,
) -> Result<Arc<dyn Transport>, VerbsError> {
    Ok(match kind {
        BackendKind::Shm => Arc::new(ShmTransport::connect(endpoint, options).await?),
        BackendKind::Tcp => Arc::new(TcpTransport::connect(endpoint, options).await?),
        BackendKind::Rdma => {
            let device = crate::rdma::process_device()?;
            Arc::new(crate::rdma::RdmaTransport::connect(endpoint, options, device).await?)
        }
    })
}
