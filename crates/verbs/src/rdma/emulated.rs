//! A software emulation of RDMA reliable-connected verbs, in this process.
//!
//! An [`EmulatedFabric`] stands for the NICs of several hosts and the wire between them:
//! each [`EmulatedFabric::device`] is one host's device with its own protection domain.
//! Registrations and queue pairs live in the fabric's tables, and a queue pair's work
//! requests run against the memory its peer registered, with the rules of RC verbs:
//!
//! - keys are checked: an lkey must belong to the requester's protection domain and
//!   cover the SGE; an rkey must belong to the peer's, allow remote access and cover the
//!   remote range, else the request fails with `LocalProtection` or `RemoteAccess`;
//! - atomics need an 8-byte aligned remote address (`RemoteInvalidRequest`);
//! - requests run in posting order; a successful one completes silently unless it is
//!   signaled; the first failure completes with its status and moves the queue pair to
//!   the error state, after which every request completes as `Flushed`;
//! - a peer queue pair that is gone or in the error state (a dead host, a revocation)
//!   fails requests with `RetryExceeded`.
//!
//! Each queue pair has a thread that plays its NIC: it takes posted chains in order and
//! runs them after `post` has returned, so a caller that trusted a completion too early
//! (a chain signaled before its end) would see reads not yet done. Completions wait in
//! the queue pair's completion queue until polled. Real verbs differ in timing only.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use bytes::Bytes;
use hashbrown::HashMap;
use parking_lot::{Condvar, Mutex, RwLock};

use super::device::{
    Access, Completion, CompletionKind, DeviceCaps, RcDevice, RcQp, Registration, Remote, Sge,
    WcStatus, WorkOp, WorkRequest,
};
use crate::error::VerbsError;
use crate::memory::RegionMemory;

/// Emulated memory addresses start here, so that no address is 0 and a region's
/// addresses are far from any other's.
const FIRST_ADDR: u64 = 0x1000_0000;
/// Gap between two registrations' address ranges (an access past one's end never lands
/// in the next).
const ADDR_GAP: u64 = 1 << 20;

/// NICs and wire of several emulated hosts. Cloning shares it.
#[derive(Clone)]
pub struct EmulatedFabric {
    inner: Arc<Fabric>,
}

struct Mr {
    pd: u64,
    addr: u64,
    access: Access,
    mem: Arc<RegionMemory>,
}

struct Fabric {
    caps: DeviceCaps,
    mrs: RwLock<HashMap<u32, Mr>>,
    qps: Mutex<HashMap<u64, Weak<QpShared>>>,
    next_key: AtomicU32,
    next_addr: AtomicU64,
    next_qp: AtomicU64,
    next_pd: AtomicU64,
}

impl Default for EmulatedFabric {
    fn default() -> Self {
        Self::new(DeviceCaps {
            max_message: 1 << 30,
            max_send_wr: 256,
        })
    }
}

impl EmulatedFabric {
    pub fn new(caps: DeviceCaps) -> Self {
        EmulatedFabric {
            inner: Arc::new(Fabric {
                caps,
                mrs: RwLock::new(HashMap::new()),
                qps: Mutex::new(HashMap::new()),
                next_key: AtomicU32::new(1),
                next_addr: AtomicU64::new(FIRST_ADDR),
                next_qp: AtomicU64::new(1),
                next_pd: AtomicU64::new(1),
            }),
        }
    }

    /// One host's device (its own protection domain).
    pub fn device(&self) -> Arc<dyn RcDevice> {
        Arc::new(EmulatedDevice {
            fabric: self.inner.clone(),
            pd: self.inner.next_pd.fetch_add(1, Ordering::Relaxed),
        })
    }

    /// Moves every queue pair to the error state, as a link that went down and came
    /// back does: connections must be set up again.
    pub fn break_links(&self) {
        let qps: Vec<Arc<QpShared>> = self
            .inner
            .qps
            .lock()
            .values()
            .filter_map(Weak::upgrade)
            .collect();
        for qp in qps {
            qp.to_error();
        }
    }

    /// Registrations alive on the fabric (a leak check for tests).
    pub fn registrations(&self) -> usize {
        self.inner.mrs.read().len()
    }
}

struct EmulatedDevice {
    fabric: Arc<Fabric>,
    pd: u64,
}

struct EmulatedRegistration {
    fabric: Weak<Fabric>,
    key: u32,
    addr: u64,
    mem: Arc<RegionMemory>,
}

impl Registration for EmulatedRegistration {
    fn addr(&self) -> u64 {
        self.addr
    }
    fn lkey(&self) -> u32 {
        self.key
    }
    fn rkey(&self) -> u32 {
        self.key
    }
    fn memory(&self) -> &Arc<RegionMemory> {
        &self.mem
    }
}

impl Drop for EmulatedRegistration {
    fn drop(&mut self) {
        if let Some(f) = self.fabric.upgrade() {
            f.mrs.write().remove(&self.key);
        }
    }
}

impl RcDevice for EmulatedDevice {
    fn name(&self) -> String {
        format!("emulated{}", self.pd)
    }

    fn caps(&self) -> DeviceCaps {
        self.fabric.caps
    }

    fn register(
        &self,
        mem: Arc<RegionMemory>,
        access: Access,
    ) -> Result<Arc<dyn Registration>, VerbsError> {
        let key = self.fabric.next_key.fetch_add(1, Ordering::Relaxed);
        let span = mem.len().div_ceil(4096) * 4096 + ADDR_GAP;
        let addr = self.fabric.next_addr.fetch_add(span, Ordering::Relaxed);
        self.fabric.mrs.write().insert(
            key,
            Mr {
                pd: self.pd,
                addr,
                access,
                mem: mem.clone(),
            },
        );
        Ok(Arc::new(EmulatedRegistration {
            fabric: Arc::downgrade(&self.fabric),
            key,
            addr,
            mem,
        }))
    }

    fn create_qp(&self) -> Result<Arc<dyn RcQp>, VerbsError> {
        let id = self.fabric.next_qp.fetch_add(1, Ordering::Relaxed);
        let shared = Arc::new(QpShared {
            id,
            pd: self.pd,
            fabric: Arc::downgrade(&self.fabric),
            state: Mutex::new(QpState::Reset),
            cq: Mutex::new(VecDeque::new()),
            ready: Condvar::new(),
            recvs: Mutex::new(VecDeque::new()),
            unreceived: Mutex::new(VecDeque::new()),
        });
        self.fabric.qps.lock().insert(id, Arc::downgrade(&shared));
        let (chains, posted) = std::sync::mpsc::channel::<Vec<WorkRequest>>();
        let nic = shared.clone();
        std::thread::Builder::new()
            .name(format!("dmc-emulated-qp{id}"))
            .spawn(move || {
                // Ends when the queue pair is dropped (the sender goes with it).
                while let Ok(chain) = posted.recv() {
                    nic.run_chain(&chain);
                }
            })
            .map_err(|e| VerbsError::io("starting an emulated queue pair", e))?;
        Ok(Arc::new(EmulatedQp {
            shared,
            chains: Mutex::new(chains),
        }))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum QpState {
    Reset,
    /// Ready to send, connected to the peer queue pair with this id.
    Rts(u64),
    Error,
}

struct QpShared {
    id: u64,
    pd: u64,
    fabric: Weak<Fabric>,
    state: Mutex<QpState>,
    cq: Mutex<VecDeque<Completion>>,
    ready: Condvar,
    /// Posted receive buffers, filled in order.
    recvs: Mutex<VecDeque<(u64, Sge)>>,
    /// Messages that arrived before a receive buffer was posted (a real RC sender
    /// retries them on "receiver not ready"; this one waits here instead).
    unreceived: Mutex<VecDeque<Vec<u8>>>,
}

impl QpShared {
    fn to_error(&self) {
        *self.state.lock() = QpState::Error;
        // Posted receive buffers are flushed, as a real queue pair's are.
        let flushed: Vec<(u64, Sge)> = self.recvs.lock().drain(..).collect();
        for (id, _) in flushed {
            self.complete(Completion {
                id,
                status: WcStatus::Flushed,
                kind: CompletionKind::Recv { len: 0 },
            });
        }
    }

    fn complete(&self, c: Completion) {
        self.cq.lock().push_back(c);
        self.ready.notify_all();
    }

    /// A message for this queue pair: into the next receive buffer, or kept until one
    /// is posted. A message longer than the buffer fails (the sender's error).
    fn deliver(&self, fabric: &Fabric, message: Vec<u8>) -> WcStatus {
        let mut recvs = self.recvs.lock();
        let Some((id, sge)) = recvs.pop_front() else {
            self.unreceived.lock().push_back(message);
            return WcStatus::Success;
        };
        drop(recvs);
        self.fill(fabric, id, sge, &message)
    }

    fn fill(&self, fabric: &Fabric, id: u64, sge: Sge, message: &[u8]) -> WcStatus {
        let len = message.len() as u64;
        let target = {
            let mrs = fabric.mrs.read();
            resolve(&mrs, sge.lkey, self.pd, sge.addr, u64::from(sge.len), false)
        };
        let status = match target {
            Some((mem, at)) if len <= u64::from(sge.len) && mem.write(at, message).is_ok() => {
                WcStatus::Success
            }
            _ => WcStatus::LocalProtection,
        };
        self.complete(Completion {
            id,
            status,
            kind: CompletionKind::Recv { len: len as u32 },
        });
        if status == WcStatus::Success {
            WcStatus::Success
        } else {
            self.to_error();
            WcStatus::RemoteInvalidRequest
        }
    }
}

struct EmulatedQp {
    shared: Arc<QpShared>,
    /// To the queue pair's NIC thread, which runs chains in posting order.
    chains: Mutex<std::sync::mpsc::Sender<Vec<WorkRequest>>>,
}

impl Drop for EmulatedQp {
    fn drop(&mut self) {
        if let Some(f) = self.shared.fabric.upgrade() {
            f.qps.lock().remove(&self.shared.id);
        }
    }
}

/// Where an SGE or a remote range lands: a registration's memory and the offset in it.
fn resolve(
    mrs: &HashMap<u32, Mr>,
    key: u32,
    pd: u64,
    addr: u64,
    len: u64,
    remote: bool,
) -> Option<(Arc<RegionMemory>, u64)> {
    let mr = mrs.get(&key)?;
    let allowed = !remote || mr.access == Access::Remote;
    let offset = addr.checked_sub(mr.addr)?;
    let inside = offset
        .checked_add(len)
        .is_some_and(|end| end <= mr.mem.len());
    (mr.pd == pd && allowed && inside).then(|| (mr.mem.clone(), offset))
}

impl QpShared {
    /// Runs one work request against the peer `peer_pd`'s memory.
    fn run(&self, fabric: &Fabric, peer_pd: u64, op: &WorkOp) -> WcStatus {
        let mrs = fabric.mrs.read();
        let pd = self.pd;
        let local = |s: &Sge| resolve(&mrs, s.lkey, pd, s.addr, u64::from(s.len), false);
        let remote = |r: &Remote, len: u64| resolve(&mrs, r.rkey, peer_pd, r.addr, len, true);
        let word = |s: &Sge, r: &Remote| {
            if s.len != 8 {
                return Err(WcStatus::LocalProtection);
            }
            if !r.addr.is_multiple_of(8) {
                return Err(WcStatus::RemoteInvalidRequest);
            }
            let l = local(s).ok_or(WcStatus::LocalProtection)?;
            let r = remote(r, 8).ok_or(WcStatus::RemoteAccess)?;
            Ok((l, r))
        };
        let result = match op {
            // Two-sided: handled by `send`, never here.
            WorkOp::Send { .. } => Err(WcStatus::Other(0)),
            WorkOp::Read {
                local: s,
                remote: r,
            }
            | WorkOp::Write {
                local: s,
                remote: r,
            } => {
                let reading = matches!(op, WorkOp::Read { .. });
                match (local(s), remote(r, u64::from(s.len))) {
                    (None, _) => Err(WcStatus::LocalProtection),
                    (_, None) => Err(WcStatus::RemoteAccess),
                    (Some(l), Some(rm)) => {
                        // A READ copies remote to local, a WRITE local to remote.
                        let ((from, at), (to, to_at)) = if reading { (rm, l) } else { (l, rm) };
                        let mut bytes = vec![0u8; s.len as usize];
                        from.read(at, &mut bytes)
                            .and_then(|()| to.write(to_at, &bytes))
                            .map_err(|_| {
                                if reading {
                                    WcStatus::LocalProtection
                                } else {
                                    WcStatus::RemoteAccess
                                }
                            })
                    }
                }
            }
            WorkOp::Cas {
                local: s,
                remote: r,
                expected,
                swap,
            } => word(s, r).and_then(|((lm, lo), (rm, ro))| {
                let old = rm
                    .cas(ro, *expected, *swap)
                    .map_err(|_| WcStatus::RemoteInvalidRequest)?;
                lm.write(lo, &old.to_le_bytes())
                    .map_err(|_| WcStatus::LocalProtection)
            }),
            WorkOp::Faa {
                local: s,
                remote: r,
                add,
            } => word(s, r).and_then(|((lm, lo), (rm, ro))| {
                let old = rm
                    .faa(ro, *add)
                    .map_err(|_| WcStatus::RemoteInvalidRequest)?;
                lm.write(lo, &old.to_le_bytes())
                    .map_err(|_| WcStatus::LocalProtection)
            }),
        };
        match result {
            Ok(()) => WcStatus::Success,
            Err(s) => s,
        }
    }

    /// The peer, if it can take requests.
    fn peer(&self, fabric: &Fabric, peer: u64) -> Option<Arc<QpShared>> {
        let qp = fabric.qps.lock().get(&peer).and_then(Weak::upgrade)?;
        let state = *qp.state.lock();
        matches!(state, QpState::Rts(p) if p == self.id).then_some(qp)
    }

    /// A SEND: the local bytes, delivered to the peer.
    fn send(&self, fabric: &Fabric, peer: &QpShared, local: &Sge) -> WcStatus {
        let source = {
            let mrs = fabric.mrs.read();
            resolve(
                &mrs,
                local.lkey,
                self.pd,
                local.addr,
                u64::from(local.len),
                false,
            )
        };
        let Some((mem, at)) = source else {
            return WcStatus::LocalProtection;
        };
        let mut message = vec![0u8; local.len as usize];
        if mem.read(at, &mut message).is_err() {
            return WcStatus::LocalProtection;
        }
        peer.deliver(fabric, message)
    }

    /// What the NIC does with one posted chain.
    fn run_chain(&self, chain: &[WorkRequest]) {
        let fabric = self.fabric.upgrade();
        for wr in chain {
            let state = *self.state.lock();
            let status = match (state, &fabric) {
                (QpState::Rts(peer), Some(fabric)) => match self.peer(fabric, peer) {
                    None => WcStatus::RetryExceeded,
                    Some(peer) => match &wr.op {
                        WorkOp::Send { local } => self.send(fabric, &peer, local),
                        op => self.run(fabric, peer.pd, op),
                    },
                },
                _ => WcStatus::Flushed,
            };
            if status != WcStatus::Success {
                self.to_error();
            }
            if status != WcStatus::Success || wr.signaled {
                self.complete(Completion {
                    id: wr.id,
                    status,
                    kind: CompletionKind::Send,
                });
            }
        }
    }
}

impl RcQp for EmulatedQp {
    fn endpoint(&self) -> Bytes {
        Bytes::copy_from_slice(&self.shared.id.to_le_bytes())
    }

    fn connect(&self, peer: &[u8]) -> Result<(), VerbsError> {
        let id = <[u8; 8]>::try_from(peer)
            .map(u64::from_le_bytes)
            .map_err(|_| VerbsError::Malformed("an emulated queue pair is 8 bytes".into()))?;
        let mut state = self.shared.state.lock();
        if *state != QpState::Reset {
            return Err(VerbsError::Remote(format!(
                "queue pair {} is not in the reset state",
                self.shared.id
            )));
        }
        *state = QpState::Rts(id);
        Ok(())
    }

    fn post(&self, chain: &[WorkRequest]) -> Result<(), VerbsError> {
        if *self.shared.state.lock() == QpState::Reset {
            return Err(VerbsError::Remote(
                "posting to a queue pair that is not connected".into(),
            ));
        }
        self.chains
            .lock()
            .send(chain.to_vec())
            .map_err(|_| VerbsError::Closed)
    }

    fn post_recv(&self, buffers: &[(u64, Sge)]) -> Result<(), VerbsError> {
        let fabric = self.shared.fabric.upgrade().ok_or(VerbsError::Closed)?;
        if *self.shared.state.lock() == QpState::Error {
            // A pair in the error state flushes what is posted to it.
            for (id, _) in buffers {
                self.shared.complete(Completion {
                    id: *id,
                    status: WcStatus::Flushed,
                    kind: CompletionKind::Recv { len: 0 },
                });
            }
            return Ok(());
        }
        self.shared.recvs.lock().extend(buffers.iter().copied());
        // Messages that waited for a buffer take the new ones, in order.
        loop {
            let next = {
                let mut recvs = self.shared.recvs.lock();
                let mut waiting = self.shared.unreceived.lock();
                if recvs.is_empty() {
                    None
                } else {
                    waiting
                        .pop_front()
                        .and_then(|m| recvs.pop_front().map(|r| (r, m)))
                }
            };
            let Some(((id, sge), message)) = next else {
                return Ok(());
            };
            self.shared.fill(&fabric, id, sge, &message);
        }
    }

    fn poll(&self, out: &mut Vec<Completion>, timeout: Duration) -> Result<(), VerbsError> {
        let mut cq = self.shared.cq.lock();
        if cq.is_empty() {
            self.shared.ready.wait_for(&mut cq, timeout);
        }
        out.extend(cq.drain(..));
        Ok(())
    }

    fn fail(&self) {
        self.shared.to_error();
        self.shared.ready.notify_all();
    }
}
