//! RPC messages over the queue pair: the commit path's requests and responses as
//! SEND/RECV, in the RPC channel's own frame format.
//!
//! Each side keeps [`RECV_SLOTS`] receive buffers of [`MESSAGE_MAX`] bytes posted in
//! one registered [`Inbox`]; a filled buffer is copied out and posted again at once. A
//! client has at most `RECV_SLOTS` requests outstanding (so the node always has a
//! buffer for the next one, and the client one for each answer). Only requests whose
//! answers are small and bounded go this way ([`sendable`]); anything else, and any
//! request too long for one message, takes the RPC channel.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};

use super::device::{Access, RcDevice, RcQp, Registration, Sge};
use crate::error::VerbsError;
use crate::memory::RegionMemory;
use crate::wire::{self, Frame, Request};

/// Receive buffers per queue pair (and requests in flight per client).
pub const RECV_SLOTS: usize = 32;
/// Bytes of one message at most (a frame with its header).
pub const MESSAGE_MAX: usize = 16 << 10;
/// Work request ids of receive buffers carry this bit (send-queue ids never do).
pub const RECV_TAG: u64 = 1 << 63;

/// Whether `req` goes over the queue pair: the commit path, whose answers are votes.
pub fn sendable(req: &Request) -> bool {
    matches!(
        req,
        Request::Prepare(_)
            | Request::Commit(_)
            | Request::PrepareCommit(_)
            | Request::Abort(_)
            | Request::Ping
    )
}

/// One side's posted receive buffers.
pub struct Inbox {
    reg: Arc<dyn Registration>,
}

impl Inbox {
    pub fn new(device: &dyn RcDevice) -> Result<Inbox, VerbsError> {
        let mem = Arc::new(RegionMemory::heap(0, (RECV_SLOTS * MESSAGE_MAX) as u64)?);
        Ok(Inbox {
            reg: device.register(mem, Access::Local)?,
        })
    }

    fn sge(&self, slot: usize) -> Sge {
        Sge {
            addr: self.reg.addr() + (slot * MESSAGE_MAX) as u64,
            len: MESSAGE_MAX as u32,
            lkey: self.reg.lkey(),
        }
    }

    /// Posts every buffer (a new queue pair).
    pub fn post_all(&self, qp: &dyn RcQp) -> Result<(), VerbsError> {
        let all: Vec<(u64, Sge)> = (0..RECV_SLOTS)
            .map(|s| (RECV_TAG | s as u64, self.sge(s)))
            .collect();
        qp.post_recv(&all)
    }

    /// The message that filled receive `id` (`len` bytes), and that buffer posted again.
    pub fn take(&self, qp: &dyn RcQp, id: u64, len: u32) -> Result<Frame, VerbsError> {
        let slot = (id & !RECV_TAG) as usize;
        if slot >= RECV_SLOTS || len as usize > MESSAGE_MAX {
            return Err(VerbsError::Malformed(format!(
                "a receive completion for buffer {slot} of {len} bytes"
            )));
        }
        let mut bytes = vec![0u8; len as usize];
        let read = self
            .reg
            .memory()
            .read((slot * MESSAGE_MAX) as u64, &mut bytes);
        qp.post_recv(&[(id, self.sge(slot))])?;
        read?;
        let mut buf = BytesMut::from(&bytes[..]);
        match wire::split_frame(&mut buf, MESSAGE_MAX as u64)? {
            Some(f) if buf.is_empty() => Ok(f),
            _ => Err(VerbsError::Malformed(
                "an RDMA message is not exactly one frame".into(),
            )),
        }
    }
}

/// A frame's bytes, if it fits one message.
pub fn fits(frame: &BytesMut) -> Option<Bytes> {
    (frame.len() <= MESSAGE_MAX).then(|| Bytes::copy_from_slice(frame))
}
