//! The small interface between DMC's RDMA transport and a device: reliable-connected
//! (RC) queue pairs, memory registration, work requests and their completions.
//!
//! Two devices implement it: [`super::emulated`], a software emulation of RC semantics
//! in this process (what the tests run everywhere), and `super::ibverbs` (feature
//! `rdma`), real verbs on `rdma-sys`. Everything above this interface (building work
//! request chains, signalling, staging buffers, completion dispatch, errors and
//! reconnection) is shared by both, so the tests exercise the code a NIC runs.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use crate::error::VerbsError;
use crate::memory::RegionMemory;

/// What a registration lets peers do with the memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// The local device may write it (read results land here); no peer may touch it.
    Local,
    /// Peers may READ, WRITE, CAS and FAA it with the registration's rkey.
    Remote,
}

/// Memory registered with a device. Dropping it deregisters the memory: verbs that
/// name its keys afterwards fail with a protection or remote access error.
pub trait Registration: Send + Sync {
    /// The address verbs name for the memory's first byte.
    fn addr(&self) -> u64;
    /// The key local work requests name.
    fn lkey(&self) -> u32;
    /// The key peers name (meaningful for [`Access::Remote`]).
    fn rkey(&self) -> u32;
    /// The registered memory.
    fn memory(&self) -> &Arc<RegionMemory>;
}

/// A scatter/gather element: local registered memory a work request reads or fills.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sge {
    pub addr: u64,
    pub len: u32,
    pub lkey: u32,
}

/// Remote memory a work request names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Remote {
    pub addr: u64,
    pub rkey: u32,
}

/// One operation of a work request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkOp {
    /// Remote bytes into `local`.
    Read { local: Sge, remote: Remote },
    /// `local` bytes to remote memory.
    Write { local: Sge, remote: Remote },
    /// 8-byte compare-and-swap; the previous remote word lands in `local` (8 bytes).
    Cas {
        local: Sge,
        remote: Remote,
        expected: u64,
        swap: u64,
    },
    /// 8-byte fetch-and-add; the previous remote word lands in `local` (8 bytes).
    Faa {
        local: Sge,
        remote: Remote,
        add: u64,
    },
    /// Two-sided: `local` bytes into the next receive buffer the peer posted (the RPC
    /// messages of the commit path).
    Send { local: Sge },
}

impl WorkOp {
    /// The local memory the request reads or fills.
    pub fn local(&self) -> Sge {
        match *self {
            WorkOp::Read { local, .. }
            | WorkOp::Write { local, .. }
            | WorkOp::Cas { local, .. }
            | WorkOp::Faa { local, .. }
            | WorkOp::Send { local } => local,
        }
    }
}

/// A work request. Only `signaled` requests produce a completion when they succeed;
/// a failed request always does, and every request after it on the queue pair
/// completes as [`WcStatus::Flushed`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkRequest {
    pub id: u64,
    pub op: WorkOp,
    pub signaled: bool,
}

/// How a work request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WcStatus {
    Success,
    /// A local SGE named memory outside its registration or a wrong lkey.
    LocalProtection,
    /// The rkey is unknown to the peer, the access is outside its registration, or the
    /// registration does not allow it (a dropped or moved region).
    RemoteAccess,
    /// The peer refused the request as malformed (a misaligned atomic).
    RemoteInvalidRequest,
    /// The peer's queue pair is gone or in the error state (a dead node, a revoked
    /// client): the transport gave up retrying.
    RetryExceeded,
    /// The queue pair was in the error state; the request never ran.
    Flushed,
    /// Any other status, with the device's code.
    Other(u32),
}

/// Which queue a completion is of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompletionKind {
    /// A work request of the send queue (READ, WRITE, CAS, FAA, SEND).
    Send,
    /// A receive buffer was filled with a message of `len` bytes.
    Recv { len: u32 },
}

/// A completion polled from a queue pair's completion queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    pub id: u64,
    pub status: WcStatus,
    pub kind: CompletionKind,
}

/// Limits of a device's queue pairs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceCaps {
    /// Longest message (bytes of one READ or WRITE).
    pub max_message: usize,
    /// Send queue depth: work requests outstanding on one queue pair at most.
    pub max_send_wr: usize,
}

/// One reliable-connected queue pair with its own completion queue.
pub trait RcQp: Send + Sync {
    /// What the peer needs to connect its queue pair to this one, in the device's
    /// encoding (exchanged over the RPC channel).
    fn endpoint(&self) -> Bytes;

    /// Connects to the peer's queue pair (RESET → INIT → RTR → RTS).
    fn connect(&self, peer: &[u8]) -> Result<(), VerbsError>;

    /// Posts a chain of work requests with one doorbell. An error here means nothing
    /// of the chain was posted.
    fn post(&self, chain: &[WorkRequest]) -> Result<(), VerbsError>;

    /// Posts receive buffers (`(id, buffer)`), filled in order by the peer's SENDs.
    fn post_recv(&self, buffers: &[(u64, Sge)]) -> Result<(), VerbsError>;

    /// Waits up to `timeout` for completions and appends those ready to `out`.
    fn poll(&self, out: &mut Vec<Completion>, timeout: Duration) -> Result<(), VerbsError>;

    /// Moves the queue pair to the error state: outstanding and future work requests
    /// are flushed, and a peer's requests to it fail (the node's fence on revocation).
    fn fail(&self);
}

/// An RDMA device: registers memory and creates queue pairs.
pub trait RcDevice: Send + Sync {
    /// The device's name, for logs.
    fn name(&self) -> String;

    fn caps(&self) -> DeviceCaps;

    /// Whether the device's atomics are atomic against the host CPU's too. A memory
    /// node takes its commit locks with CPU atomics on the words agents CAS with the
    /// NIC, so it may serve RDMA only if they are (`IBV_ATOMIC_GLOB`; many NICs offer
    /// only `IBV_ATOMIC_HCA`, atomic among NIC operations alone).
    fn atomics_coherent_with_cpu(&self) -> bool {
        true
    }

    /// Registers `mem` for the given access.
    fn register(
        &self,
        mem: Arc<RegionMemory>,
        access: Access,
    ) -> Result<Arc<dyn Registration>, VerbsError>;

    /// A new queue pair in the RESET state.
    fn create_qp(&self) -> Result<Arc<dyn RcQp>, VerbsError>;
}
