//! [`RdmaTransport`]: one-sided verbs over an RC queue pair, RPCs over the node's
//! RPC channel.
//!
//! A post becomes rounds ([`super::chain`]); each round is one chain of work requests
//! posted with one doorbell, staged in a registered buffer, with only its last request
//! signaled. A poller thread per queue pair takes completions off the completion queue
//! and wakes the round waiting for them (work request ids are `chain << 16 | index`, so
//! an error completion of any request finds its chain). Credits bound the requests in
//! flight to the send queue's depth.
//!
//! Failures: a bad verb is refused before posting (the queue pair stays up). An error
//! completion moves the queue pair to the error state: a remote access error (a
//! dropped or moved region) forgets the region's key; any other error sets the queue
//! pair up again at once over the RPC channel, and a revoked client learns it there
//! ([`VerbsError::Revoked`]), which is how queue-pair revocation fences an agent.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use arc_swap::ArcSwap;
use futures::future::BoxFuture;
use hashbrown::HashMap;
use parking_lot::Mutex;
use tokio::sync::{Semaphore, oneshot};

use super::chain::{self, Limits, PlannedOp, RemoteKey, Round};
use super::device::{
    Completion, CompletionKind, RcDevice, RcQp, Remote, Sge, WcStatus, WorkOp, WorkRequest,
};
use super::messages::{self, Inbox, RECV_SLOTS};
use super::stage::StagePool;
use crate::error::VerbsError;
use crate::rpc::{Endpoint, RpcClient, RpcOptions};
use crate::transport::{Transport, Verb, unexpected};
use crate::wire::{Request, Response};
use crate::{NodeId, RegionId};

/// Data bytes of one round at most (the largest staging buffer).
pub const MAX_STAGE: usize = 4 << 20;
/// How long the poller waits on an idle completion queue before checking whether its
/// queue pair is still in use.
const POLL_IDLE: Duration = Duration::from_millis(50);
/// Bits of a work request id that index the request within its chain.
const INDEX_BITS: u32 = 16;

/// One connected queue pair and the rounds waiting on it.
struct Link {
    qp: Arc<dyn RcQp>,
    waiters: Mutex<HashMap<u64, oneshot::Sender<WcStatus>>>,
    next_chain: AtomicU64,
    /// Free send-queue slots.
    credits: Semaphore,
    broken: AtomicBool,
    /// Staging buffers of rounds that timed out: the device may still touch them until
    /// the queue pair is destroyed, so they live as long as the link.
    quarantine: Mutex<Vec<super::stage::Stage>>,
    /// Receive buffers for the node's answers to RPCs sent as messages.
    inbox: Inbox,
    /// RPCs sent as messages, by frame id, waiting for their answer.
    answers: Mutex<HashMap<u64, oneshot::Sender<Result<Response, VerbsError>>>>,
    /// RPCs in flight as messages at most (the node's receive buffers).
    rpc_slots: Semaphore,
    next_rpc: AtomicU64,
}

impl Link {
    fn dispatch(&self, completions: &mut Vec<Completion>) {
        for c in completions.drain(..) {
            if c.status != WcStatus::Success {
                self.broken.store(true, Ordering::Release);
            }
            match c.kind {
                CompletionKind::Recv { len } if c.status == WcStatus::Success => {
                    self.answer(c.id, len)
                }
                CompletionKind::Recv { .. } => {
                    // The queue pair failed: no answer will come on it.
                    for (_, w) in self.answers.lock().drain() {
                        let _ = w.send(Err(VerbsError::Closed));
                    }
                }
                CompletionKind::Send => {
                    if let Some(w) = self.waiters.lock().remove(&(c.id >> INDEX_BITS)) {
                        let _ = w.send(c.status);
                    }
                }
            }
        }
    }

    /// An RPC answer arrived in receive buffer `id`.
    fn answer(&self, id: u64, len: u32) {
        crate::stats::rpc_received(len as usize);
        let frame = match self.inbox.take(&*self.qp, id, len) {
            Ok(f) => f,
            Err(e) => {
                tracing::warn!(error = %e, "a bad RPC message from a memory node");
                self.broken.store(true, Ordering::Release);
                return;
            }
        };
        let resp = Response::decode(frame.tag, frame.payload);
        if let Some(w) = self.answers.lock().remove(&frame.id) {
            let _ = w.send(resp);
        }
    }
}

/// Takes completions off `qp` for as long as its link lives.
fn spawn_poller(qp: Arc<dyn RcQp>, link: Weak<Link>) {
    let spawned = std::thread::Builder::new()
        .name("dmc-rdma-cq".into())
        .spawn(move || {
            let mut completions = Vec::new();
            loop {
                if let Err(e) = qp.poll(&mut completions, POLL_IDLE) {
                    tracing::warn!(error = %e, "polling a completion queue failed");
                    std::thread::sleep(POLL_IDLE);
                }
                let Some(link) = link.upgrade() else { return };
                link.dispatch(&mut completions);
            }
        });
    if let Err(e) = spawned {
        tracing::error!(error = %e, "cannot start a completion poller");
    }
}

/// A memory node reached with one-sided RDMA verbs.
pub struct RdmaTransport {
    node: NodeId,
    rpc: RpcClient,
    device: Arc<dyn RcDevice>,
    limits: Limits,
    timeout: Duration,
    link: Mutex<Option<Arc<Link>>>,
    relink: tokio::sync::Mutex<()>,
    keys: ArcSwap<Vec<Option<RemoteKey>>>,
    stages: StagePool,
    /// Queue pairs set up over the transport's life (1 + reconnections).
    links_opened: AtomicU64,
    /// RPCs sent as messages on the queue pair.
    messages_sent: AtomicU64,
    /// Bumped by every abort: work begun before one neither reconnects nor keeps a
    /// queue pair set up across it.
    aborts: AtomicU64,
}

/// A staging buffer the device may still touch: if its round ends before its
/// completion (the future was dropped, or timed out), the buffer is kept with the queue
/// pair and never reused.
struct InFlight {
    link: Arc<Link>,
    stage: Option<super::stage::Stage>,
}

impl InFlight {
    /// The round completed: the device is done with the buffer.
    fn done(mut self) -> Option<super::stage::Stage> {
        self.stage.take()
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if let Some(stage) = self.stage.take() {
            self.link.quarantine.lock().push(stage.discarded());
        }
    }
}

impl RdmaTransport {
    /// Dials the node's RPC endpoint and connects a queue pair of `device` to it.
    pub async fn connect(
        endpoint: Endpoint,
        options: RpcOptions,
        device: Arc<dyn RcDevice>,
    ) -> Result<Self, VerbsError> {
        let timeout = options.timeout;
        let (rpc, hello) = RpcClient::connect(endpoint, options).await?;
        let node = match hello {
            Response::Pong { node, .. } => node,
            other => return Err(unexpected(&other)),
        };
        let caps = device.caps();
        let limits = Limits {
            stage: MAX_STAGE,
            max_message: caps.max_message,
            max_chain: caps.max_send_wr.min(1 << INDEX_BITS),
        };
        let t = RdmaTransport {
            node,
            rpc,
            stages: StagePool::new(device.clone()),
            device,
            limits,
            timeout,
            link: Mutex::new(None),
            relink: tokio::sync::Mutex::new(()),
            keys: ArcSwap::from_pointee(Vec::new()),
            links_opened: AtomicU64::new(0),
            messages_sent: AtomicU64::new(0),
            aborts: AtomicU64::new(0),
        };
        t.link(0).await?;
        Ok(t)
    }

    /// RPCs sent as SEND messages on the queue pair so far (the rest took the channel).
    pub fn messages_sent(&self) -> u64 {
        self.messages_sent.load(Ordering::Relaxed)
    }

    /// Queue pairs set up so far (the first and every reconnection).
    pub fn links_opened(&self) -> u64 {
        self.links_opened.load(Ordering::Relaxed)
    }

    /// The live link, set up again if it broke, for work begun when the abort count was
    /// `started`.
    async fn link(&self, started: u64) -> Result<Arc<Link>, VerbsError> {
        if self.aborts.load(Ordering::SeqCst) != started {
            return Err(VerbsError::Closed);
        }
        let live = |l: &Option<Arc<Link>>| {
            l.as_ref()
                .filter(|l| !l.broken.load(Ordering::Acquire))
                .cloned()
        };
        if let Some(l) = live(&self.link.lock()) {
            return Ok(l);
        }
        let _one = self.relink.lock().await;
        if self.aborts.load(Ordering::SeqCst) != started {
            return Err(VerbsError::Closed);
        }
        if let Some(l) = live(&self.link.lock()) {
            return Ok(l);
        }
        let qp = self.device.create_qp()?;
        let inbox = Inbox::new(&*self.device)?;
        inbox.post_all(&*qp)?;
        let peer = match self
            .rpc
            .call(&Request::RdmaConnect {
                endpoint: qp.endpoint(),
            })
            .await?
        {
            Response::RdmaConnected(peer) => peer,
            other => return Err(unexpected(&other)),
        };
        qp.connect(&peer)?;
        let link = Arc::new(Link {
            qp: qp.clone(),
            waiters: Mutex::new(HashMap::new()),
            next_chain: AtomicU64::new(1),
            credits: Semaphore::new(self.limits.max_chain),
            broken: AtomicBool::new(false),
            quarantine: Mutex::new(Vec::new()),
            inbox,
            answers: Mutex::new(HashMap::new()),
            rpc_slots: Semaphore::new(RECV_SLOTS),
            next_rpc: AtomicU64::new(1),
        });
        spawn_poller(qp, Arc::downgrade(&link));
        if self.links_opened.fetch_add(1, Ordering::Relaxed) > 0 {
            tracing::info!(node = self.node, device = %self.device.name(), "RDMA queue pair set up again");
        }
        let old = {
            let mut slot = self.link.lock();
            if self.aborts.load(Ordering::SeqCst) != started {
                drop(slot);
                link.qp.fail();
                return Err(VerbsError::Closed);
            }
            slot.replace(link.clone())
        };
        // What waited on the old pair gets its flush now, not a timeout.
        if let Some(old) = old {
            old.qp.fail();
        }
        Ok(link)
    }

    fn key(&self, region: RegionId) -> Option<RemoteKey> {
        self.keys.load().get(region as usize).copied().flatten()
    }

    /// Fetches the keys of the regions `verbs` name that this transport lacks.
    async fn fetch_keys(&self, verbs: &[Verb<'_>]) -> Result<(), VerbsError> {
        for v in verbs {
            let region = v.region();
            if self.key(region).is_some() {
                continue;
            }
            let key = match self.rpc.call(&Request::RdmaRegion { region }).await {
                Ok(Response::RdmaRegion {
                    region: r,
                    addr,
                    rkey,
                    len,
                }) if r == region => RemoteKey { addr, rkey, len },
                // An unknown region is the plan's typed error, after the verbs before it.
                Err(VerbsError::NoSuchRegion(_)) => return Ok(()),
                Ok(other) => return Err(unexpected(&other)),
                Err(e) => return Err(e),
            };
            self.keys.rcu(|keys| {
                let mut keys = Vec::clone(keys);
                if keys.len() <= region as usize {
                    keys.resize(region as usize + 1, None);
                }
                keys[region as usize] = Some(key);
                keys
            });
        }
        Ok(())
    }

    /// Posts one round and waits for its completion.
    async fn run_round(
        &self,
        round: &Round,
        verbs: &mut [Verb<'_>],
        started: u64,
    ) -> Result<(), VerbsError> {
        let link = self.link(started).await?;
        let stage = self.stages.take(round.stage_len)?;
        let reg = stage.registration();
        for p in &round.requests {
            if let (PlannedOp::Write, Some(Verb::Write { data, .. })) = (p.op, verbs.get(p.verb)) {
                let bytes = data.get(p.at..p.at + p.len).ok_or_else(|| {
                    VerbsError::Malformed("a planned write outside its verb".into())
                })?;
                reg.memory().write(p.stage_at as u64, bytes)?;
            }
        }
        let chain_id = link.next_chain.fetch_add(1, Ordering::Relaxed);
        let last = round.requests.len().saturating_sub(1);
        let chain: Vec<WorkRequest> = round
            .requests
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let len = if matches!(p.op, PlannedOp::Read | PlannedOp::Write) {
                    p.len
                } else {
                    8
                };
                let local = Sge {
                    addr: reg.addr() + p.stage_at as u64,
                    len: len as u32,
                    lkey: reg.lkey(),
                };
                let remote = Remote {
                    addr: p.remote_addr,
                    rkey: p.rkey,
                };
                let op = match p.op {
                    PlannedOp::Read => WorkOp::Read { local, remote },
                    PlannedOp::Write => WorkOp::Write { local, remote },
                    PlannedOp::Cas { expected, swap } => WorkOp::Cas {
                        local,
                        remote,
                        expected,
                        swap,
                    },
                    PlannedOp::Faa { add } => WorkOp::Faa { local, remote, add },
                };
                WorkRequest {
                    id: (chain_id << INDEX_BITS) | i as u64,
                    op,
                    signaled: i == last,
                }
            })
            .collect();
        let credits = u32::try_from(chain.len()).unwrap_or(u32::MAX);
        let _slots = link
            .credits
            .acquire_many(credits)
            .await
            .map_err(|_| VerbsError::Closed)?;
        let (tx, rx) = oneshot::channel();
        link.waiters.lock().insert(chain_id, tx);
        if let Err(e) = link.qp.post(&chain) {
            link.waiters.lock().remove(&chain_id);
            link.broken.store(true, Ordering::Release);
            return Err(e);
        }
        let in_flight = InFlight {
            link: link.clone(),
            stage: Some(stage),
        };
        let status = match tokio::time::timeout(self.timeout, rx).await {
            Ok(Ok(status)) => status,
            Ok(Err(_)) => {
                link.broken.store(true, Ordering::Release);
                return Err(VerbsError::Closed);
            }
            Err(_) => {
                link.broken.store(true, Ordering::Release);
                link.qp.fail();
                return Err(VerbsError::Timeout(self.timeout.as_millis() as u64));
            }
        };
        // Completed (or failed, which ends the pair's use of it): the buffer is free.
        let stage = in_flight.done();
        if status != WcStatus::Success {
            return Err(self.failed(status, round, started).await);
        }
        let Some(stage) = stage else {
            return Err(VerbsError::Closed);
        };
        let reg = stage.registration();
        for p in &round.requests {
            let stage_at = p.stage_at as u64;
            match verbs.get_mut(p.verb) {
                Some(Verb::Read { buf, .. }) if p.op == PlannedOp::Read => {
                    let piece = buf.get_mut(p.at..p.at + p.len).ok_or_else(|| {
                        VerbsError::Malformed("a planned read outside its buffer".into())
                    })?;
                    reg.memory().read(stage_at, piece)?;
                }
                Some(Verb::Cas { old, .. }) | Some(Verb::Faa { old, .. }) => {
                    *old = reg.memory().load(stage_at)?;
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Sends `req` as a message on the queue pair and waits for the node's answer;
    /// `None` when it does not fit one message (the caller uses the RPC channel).
    async fn call_as_message(&self, req: &Request) -> Option<Result<Response, VerbsError>> {
        let started = self.aborts.load(Ordering::SeqCst);
        let link = match self.link(started).await {
            Ok(l) => l,
            Err(e) => return Some(Err(e)),
        };
        let _slot = match link.rpc_slots.acquire().await {
            Ok(s) => s,
            Err(_) => return Some(Err(VerbsError::Closed)),
        };
        let id = link.next_rpc.fetch_add(1, Ordering::Relaxed);
        let mut frame = bytes::BytesMut::new();
        req.encode(id, &mut frame);
        let message = messages::fits(&frame)?;
        crate::stats::rpc_sent(message.len());
        self.messages_sent.fetch_add(1, Ordering::Relaxed);
        Some(self.exchange(&link, id, &message, started).await)
    }

    async fn exchange(
        &self,
        link: &Arc<Link>,
        id: u64,
        message: &[u8],
        started: u64,
    ) -> Result<Response, VerbsError> {
        let stage = self.stages.take(message.len())?;
        let reg = stage.registration();
        reg.memory().write(0, message)?;
        let (answer_tx, answer) = oneshot::channel();
        link.answers.lock().insert(id, answer_tx);
        let chain_id = link.next_chain.fetch_add(1, Ordering::Relaxed);
        let send = WorkRequest {
            id: chain_id << INDEX_BITS,
            op: WorkOp::Send {
                local: Sge {
                    addr: reg.addr(),
                    len: message.len() as u32,
                    lkey: reg.lkey(),
                },
            },
            signaled: true,
        };
        let _credit = link
            .credits
            .acquire()
            .await
            .map_err(|_| VerbsError::Closed)?;
        let (sent_tx, sent) = oneshot::channel();
        link.waiters.lock().insert(chain_id, sent_tx);
        if let Err(e) = link.qp.post(&[send]) {
            link.waiters.lock().remove(&chain_id);
            link.answers.lock().remove(&id);
            link.broken.store(true, Ordering::Release);
            return Err(e);
        }
        let in_flight = InFlight {
            link: link.clone(),
            stage: Some(stage),
        };
        let timeout = self.timeout;
        let waited = tokio::time::timeout(timeout, async {
            match sent.await {
                Ok(WcStatus::Success) => {}
                Ok(status) => return Err(status),
                Err(_) => return Err(WcStatus::Flushed),
            }
            answer.await.map_err(|_| WcStatus::Flushed)
        })
        .await;
        match waited {
            Ok(Ok(Ok(Response::Error(e)))) => Err(e),
            Ok(Ok(Ok(resp))) => Ok(resp),
            Ok(Ok(Err(e))) => Err(e),
            Ok(Err(status)) => {
                link.answers.lock().remove(&id);
                drop(in_flight.done());
                Err(self.failed(status, &Round::default(), started).await)
            }
            Err(_) => {
                link.answers.lock().remove(&id);
                link.broken.store(true, Ordering::Release);
                link.qp.fail();
                Err(VerbsError::Timeout(timeout.as_millis() as u64))
            }
        }
    }

    /// The error a failed round reports, after mending what can be mended.
    async fn failed(&self, status: WcStatus, round: &Round, started: u64) -> VerbsError {
        if self.aborts.load(Ordering::SeqCst) != started {
            // The pair was dropped on purpose (the node left every copy): no reconnect.
            return VerbsError::Closed;
        }
        if status == WcStatus::RemoteAccess {
            // A region dropped or moved under its key: fetch the key again next time.
            let mut regions: Vec<RegionId> = round.requests.iter().map(|p| p.region).collect();
            regions.dedup();
            for r in &regions {
                self.forget_region(*r);
            }
            return VerbsError::Remote(format!(
                "RDMA remote access error on region(s) {regions:?}: the region was dropped or \
                 moved (its key is fetched again on the next verb)"
            ));
        }
        tracing::warn!(
            node = self.node,
            ?status,
            "RDMA work request failed; setting the queue pair up again"
        );
        match self.link(started).await {
            Err(e) => e,
            Ok(_) => VerbsError::Remote(format!(
                "RDMA work request failed ({status:?}); the queue pair was set up again"
            )),
        }
    }
}

impl Transport for RdmaTransport {
    fn node(&self) -> NodeId {
        self.node
    }

    fn backend(&self) -> &'static str {
        "rdma"
    }

    fn post<'a, 'b: 'a>(
        &'a self,
        verbs: &'a mut [Verb<'b>],
    ) -> BoxFuture<'a, Result<(), VerbsError>> {
        Box::pin(async move {
            let started = self.aborts.load(Ordering::SeqCst);
            crate::stats::post(crate::stats::RDMA, verbs);
            self.fetch_keys(verbs).await?;
            let keys = self.keys.load();
            let key = |r: RegionId| keys.get(r as usize).copied().flatten();
            let (rounds, bad) = chain::plan(verbs, key, self.limits);
            for round in &rounds {
                self.run_round(round, verbs, started).await?;
            }
            bad.map_or(Ok(()), Err)
        })
    }

    fn call(&self, req: Request) -> BoxFuture<'_, Result<Response, VerbsError>> {
        Box::pin(async move {
            if let Request::DropRegion { region } | Request::CreateRegion { region, .. } = &req {
                self.forget_region(*region);
            }
            if messages::sendable(&req)
                && let Some(answer) = self.call_as_message(&req).await
            {
                return answer;
            }
            self.rpc.call(&req).await
        })
    }

    fn abort(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            let link = {
                let mut slot = self.link.lock();
                self.aborts.fetch_add(1, Ordering::SeqCst);
                slot.take()
            };
            if let Some(link) = link {
                link.broken.store(true, Ordering::Release);
                link.qp.fail();
            }
            self.rpc.abort();
        })
    }

    fn forget_region(&self, region: RegionId) {
        self.keys.rcu(|keys| {
            let mut keys = Vec::clone(keys);
            if let Some(k) = keys.get_mut(region as usize) {
                *k = None;
            }
            keys
        });
    }
}
