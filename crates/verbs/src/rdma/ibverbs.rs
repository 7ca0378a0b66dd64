//! Real RDMA verbs: [`RcDevice`] on libibverbs through `rdma-sys` (cargo feature `rdma`).
//!
//! - **Discovery.** [`open`] takes the first device (or the named one); no device, and a
//!   kernel without RDMA support (`ENOSYS`), both mean "none" (`Ok(None)`).
//! - **Memory.** One protection domain per device; [`RcDevice::register`] pins a region
//!   copy or a staging buffer with `ibv_reg_mr`, and dropping the registration
//!   deregisters it (the registration owns an `Arc` of the memory, so the mapping
//!   outlives the pinning).
//! - **Queue pairs.** RC, one completion queue and completion channel each; the
//!   endpoint exchanged over the RPC channel is QPN, PSN, LID, GID and MTU; connecting
//!   walks INIT → RTR → RTS; [`RcQp::fail`] moves the pair to ERR (the revocation
//!   fence).
//! - **Posting.** A chain is one linked list of `ibv_send_wr` given to one
//!   `ibv_post_send`: one doorbell. RPC messages are `IBV_WR_SEND` into the peer's
//!   posted receive buffers (`ibv_post_recv`). Polling drains the CQ, and sleeps on the completion
//!   channel's fd (with a timeout) when it is empty.
//!
//! Every `unsafe` block states the invariant it relies on. This file is built and
//! linted on every CI run, and exercised only where a device exists
//! (`tests/rdma.rs`, `rdma_device_conforms`).

use std::ffi::CStr;
use std::os::raw::{c_int, c_void};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use parking_lot::Mutex;
use rdma_sys::*;

use super::device::{
    Access, Completion, CompletionKind, DeviceCaps, RcDevice, RcQp, Registration, Sge, WcStatus,
    WorkOp, WorkRequest,
};
use super::messages::{RECV_SLOTS, RECV_TAG};
use crate::error::VerbsError;
use crate::memory::RegionMemory;

/// Work requests in flight per queue pair (and completion queue entries).
const QUEUE_DEPTH: u32 = 512;
/// Outstanding RDMA READs and atomics per queue pair, each way, at most (the device's
/// limits may be lower).
const RD_ATOMIC: u8 = 16;

fn os_error(what: &str) -> VerbsError {
    VerbsError::io(what, std::io::Error::last_os_error())
}

/// A device context and its protection domain.
struct Context {
    ctx: *mut ibv_context,
    pd: *mut ibv_pd,
}

// SAFETY: libibverbs objects may be used from any thread; the pointers are owned by
// `Context` and freed only in `drop`, after every registration and queue pair (which
// hold an `Arc<Context>`) is gone.
unsafe impl Send for Context {}
// SAFETY: as for `Send`: verbs calls on one context are thread-safe.
unsafe impl Sync for Context {}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: `pd` and `ctx` came from `ibv_alloc_pd` / `ibv_open_device`, and no
        // object created from them outlives this context (they hold an `Arc` of it).
        unsafe {
            ibv_dealloc_pd(self.pd);
            ibv_close_device(self.ctx);
        }
    }
}

/// An opened RDMA device port.
pub struct IbvDevice {
    context: Arc<Context>,
    name: String,
    port: u8,
    gid_index: u8,
    lid: u16,
    gid: [u8; 16],
    mtu: u32,
    caps: DeviceCaps,
    /// Outstanding READs/atomics a queue pair may have (as initiator, as target).
    rd_atomic: (u8, u8),
    /// Whether the NIC's atomics are atomic against the CPU's too (`IBV_ATOMIC_GLOB`).
    global_atomics: bool,
}

/// Opens the device named `name` (or the first one) on `port` with GID `gid_index`;
/// `Ok(None)` when this machine has no RDMA device.
pub fn open(name: Option<&str>, port: u8, gid_index: u8) -> Result<Option<IbvDevice>, VerbsError> {
    let mut n: c_int = 0;
    // SAFETY: `n` is a valid out-pointer; the returned list is freed below.
    let list = unsafe { ibv_get_device_list(&mut n) };
    if list.is_null() {
        let err = std::io::Error::last_os_error();
        return match err.raw_os_error() {
            Some(libc::ENOSYS) | Some(libc::ENODEV) | Some(libc::ENOENT) => Ok(None),
            _ => Err(VerbsError::io("listing RDMA devices", err)),
        };
    }
    let mut chosen = None;
    for i in 0..usize::try_from(n).unwrap_or(0) {
        // SAFETY: the list holds `n` valid device pointers.
        let dev = unsafe { *list.add(i) };
        // SAFETY: `dev` is valid; the name is a NUL-terminated string owned by it.
        let dev_name = unsafe { CStr::from_ptr(ibv_get_device_name(dev)) }
            .to_string_lossy()
            .into_owned();
        if name.is_none_or(|want| want == dev_name) {
            chosen = Some((dev, dev_name));
            break;
        }
    }
    let opened = chosen.map(|(dev, dev_name)| open_device(dev, dev_name, port, gid_index));
    // SAFETY: `list` came from `ibv_get_device_list`; opened contexts stay valid after
    // the list is freed.
    unsafe { ibv_free_device_list(list) };
    opened.transpose()
}

fn open_device(
    dev: *mut ibv_device,
    name: String,
    port: u8,
    gid_index: u8,
) -> Result<IbvDevice, VerbsError> {
    // SAFETY: `dev` is a valid device from the current list.
    let ctx = unsafe { ibv_open_device(dev) };
    if ctx.is_null() {
        return Err(os_error("opening the RDMA device"));
    }
    // SAFETY: `ctx` is a valid open context.
    let pd = unsafe { ibv_alloc_pd(ctx) };
    if pd.is_null() {
        let e = os_error("allocating a protection domain");
        // SAFETY: `ctx` is open and nothing was created from it.
        unsafe { ibv_close_device(ctx) };
        return Err(e);
    }
    let context = Arc::new(Context { ctx, pd });
    // SAFETY: an all-zero `ibv_port_attr` is a valid value for the query to fill.
    let mut port_attr: ibv_port_attr = unsafe { std::mem::zeroed() };
    // SAFETY: `ctx` is open and `port_attr` a valid out-pointer of the right size.
    if unsafe { ___ibv_query_port(ctx, port, &mut port_attr) } != 0 {
        return Err(os_error("querying the RDMA port"));
    }
    // SAFETY: as above for `ibv_device_attr`.
    let mut dev_attr: ibv_device_attr = unsafe { std::mem::zeroed() };
    // SAFETY: `ctx` is open and `dev_attr` a valid out-pointer.
    if unsafe { ibv_query_device(ctx, &mut dev_attr) } != 0 {
        return Err(os_error("querying the RDMA device"));
    }
    // SAFETY: `ibv_gid` is plain bytes; all-zero is valid.
    let mut gid: ibv_gid = unsafe { std::mem::zeroed() };
    // SAFETY: `ctx` is open and `gid` a valid out-pointer. A port without GIDs
    // (InfiniBand without GRH) leaves it zero, which the peer reads as "use the LID".
    unsafe { ibv_query_gid(ctx, port, c_int::from(gid_index), &mut gid) };
    // SAFETY: every bit pattern of the union is valid as raw bytes.
    let gid = unsafe { gid.raw };
    let max_wr = u32::try_from(dev_attr.max_qp_wr)
        .unwrap_or(1)
        .min(QUEUE_DEPTH);
    Ok(IbvDevice {
        context,
        name,
        port,
        gid_index,
        lid: port_attr.lid,
        gid,
        mtu: port_attr.active_mtu,
        caps: DeviceCaps {
            max_message: port_attr.max_msg_sz.max(4096) as usize,
            max_send_wr: max_wr as usize,
        },
        rd_atomic: (
            u8::try_from(dev_attr.max_qp_init_rd_atom.clamp(1, i32::from(RD_ATOMIC))).unwrap_or(1),
            u8::try_from(dev_attr.max_qp_rd_atom.clamp(1, i32::from(RD_ATOMIC))).unwrap_or(1),
        ),
        global_atomics: dev_attr.atomic_cap == ibv_atomic_cap::IBV_ATOMIC_GLOB,
    })
}

struct IbvRegistration {
    _context: Arc<Context>,
    mr: *mut ibv_mr,
    mem: Arc<RegionMemory>,
}

// SAFETY: the MR is only read (keys, address) and deregistered once, in `drop`.
unsafe impl Send for IbvRegistration {}
// SAFETY: see `Send`.
unsafe impl Sync for IbvRegistration {}

impl Registration for IbvRegistration {
    fn addr(&self) -> u64 {
        self.mem.base_addr() as u64
    }
    fn lkey(&self) -> u32 {
        // SAFETY: `mr` is valid until `drop`.
        unsafe { (*self.mr).lkey }
    }
    fn rkey(&self) -> u32 {
        // SAFETY: `mr` is valid until `drop`.
        unsafe { (*self.mr).rkey }
    }
    fn memory(&self) -> &Arc<RegionMemory> {
        &self.mem
    }
}

impl Drop for IbvRegistration {
    fn drop(&mut self) {
        // SAFETY: `mr` came from `ibv_reg_mr` and is deregistered exactly once; the
        // memory (`mem`) is still mapped here and is unmapped only after this.
        unsafe { ibv_dereg_mr(self.mr) };
    }
}

impl RcDevice for IbvDevice {
    fn name(&self) -> String {
        format!("{}:{}", self.name, self.port)
    }

    fn caps(&self) -> DeviceCaps {
        self.caps
    }

    fn atomics_coherent_with_cpu(&self) -> bool {
        self.global_atomics
    }

    fn register(
        &self,
        mem: Arc<RegionMemory>,
        access: Access,
    ) -> Result<Arc<dyn Registration>, VerbsError> {
        let mut flags = ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0;
        if access == Access::Remote {
            flags |= ibv_access_flags::IBV_ACCESS_REMOTE_READ.0
                | ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0
                | ibv_access_flags::IBV_ACCESS_REMOTE_ATOMIC.0;
        }
        // SAFETY: the range is `mem`'s whole mapping, which stays mapped while the
        // registration (holding `mem`) lives; the device may DMA into it, which is the
        // same concurrent raw access `RegionMemory` already allows other processes.
        let mr = unsafe {
            ibv_reg_mr(
                self.context.pd,
                mem.base_addr() as *mut c_void,
                mem.len() as usize,
                flags as c_int,
            )
        };
        if mr.is_null() {
            return Err(os_error("registering memory with the RDMA device"));
        }
        Ok(Arc::new(IbvRegistration {
            _context: self.context.clone(),
            mr,
            mem,
        }))
    }

    fn create_qp(&self) -> Result<Arc<dyn RcQp>, VerbsError> {
        IbvQp::new(self).map(|q| Arc::new(q) as Arc<dyn RcQp>)
    }
}

/// What a peer needs to reach a queue pair: 31 bytes on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct QpAddress {
    qpn: u32,
    psn: u32,
    lid: u16,
    gid: [u8; 16],
    mtu: u32,
}

impl QpAddress {
    fn encode(&self) -> Bytes {
        let mut out = Vec::with_capacity(30);
        out.extend_from_slice(&self.qpn.to_le_bytes());
        out.extend_from_slice(&self.psn.to_le_bytes());
        out.extend_from_slice(&self.lid.to_le_bytes());
        out.extend_from_slice(&self.gid);
        out.extend_from_slice(&self.mtu.to_le_bytes());
        Bytes::from(out)
    }

    fn decode(b: &[u8]) -> Result<Self, VerbsError> {
        let bad = || VerbsError::Malformed("an RDMA queue pair address is 30 bytes".into());
        let word = |at: usize| -> Result<u32, VerbsError> {
            let bytes = b.get(at..at + 4).ok_or_else(bad)?;
            Ok(u32::from_le_bytes(bytes.try_into().map_err(|_| bad())?))
        };
        if b.len() != 30 {
            return Err(bad());
        }
        let lid = b.get(8..10).ok_or_else(bad)?;
        let gid = b.get(10..26).ok_or_else(bad)?;
        Ok(QpAddress {
            qpn: word(0)?,
            psn: word(4)?,
            lid: u16::from_le_bytes(lid.try_into().map_err(|_| bad())?),
            gid: gid.try_into().map_err(|_| bad())?,
            mtu: word(26)?,
        })
    }
}

struct IbvQp {
    context: Arc<Context>,
    channel: *mut ibv_comp_channel,
    cq: *mut ibv_cq,
    qp: *mut ibv_qp,
    me: QpAddress,
    port: u8,
    gid_index: u8,
    rd_atomic: (u8, u8),
    /// Serialises posting (one doorbell at a time keeps chains whole and in order).
    posting: Mutex<()>,
}

// SAFETY: verbs calls on a QP and CQ are thread-safe; posting is serialised by
// `posting`, polling happens on one thread (the transport's poller), and the objects
// are destroyed once, in `drop`.
unsafe impl Send for IbvQp {}
// SAFETY: see `Send`.
unsafe impl Sync for IbvQp {}

impl IbvQp {
    fn new(dev: &IbvDevice) -> Result<Self, VerbsError> {
        let ctx = dev.context.ctx;
        // SAFETY: `ctx` is open for as long as `dev.context` lives (we hold it).
        let channel = unsafe { ibv_create_comp_channel(ctx) };
        if channel.is_null() {
            return Err(os_error("creating a completion channel"));
        }
        let depth = (dev.caps.max_send_wr + RECV_SLOTS) as c_int;
        // SAFETY: `ctx` and `channel` are valid; no CQ context pointer is used.
        let cq = unsafe { ibv_create_cq(ctx, depth, std::ptr::null_mut(), channel, 0) };
        if cq.is_null() {
            let e = os_error("creating a completion queue");
            // SAFETY: `channel` is valid and has no CQ.
            unsafe { ibv_destroy_comp_channel(channel) };
            return Err(e);
        }
        // SAFETY: an all-zero init attr is valid; the fields that matter are set below.
        let mut init: ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        init.send_cq = cq;
        init.recv_cq = cq;
        init.qp_type = ibv_qp_type::IBV_QPT_RC;
        init.sq_sig_all = 0;
        init.cap.max_send_wr = dev.caps.max_send_wr as u32;
        init.cap.max_recv_wr = RECV_SLOTS as u32;
        init.cap.max_send_sge = 1;
        init.cap.max_recv_sge = 1;
        // SAFETY: `pd`, `cq` are valid and `init` is fully initialised.
        let qp = unsafe { ibv_create_qp(dev.context.pd, &mut init) };
        let mut made = IbvQp {
            context: dev.context.clone(),
            channel,
            cq,
            qp,
            me: QpAddress {
                qpn: 0,
                psn: rand_psn(),
                lid: dev.lid,
                gid: dev.gid,
                mtu: dev.mtu,
            },
            port: dev.port,
            gid_index: dev.gid_index,
            rd_atomic: dev.rd_atomic,
            posting: Mutex::new(()),
        };
        if qp.is_null() {
            return Err(os_error("creating a queue pair"));
        }
        // SAFETY: `qp` is valid.
        made.me.qpn = unsafe { (*qp).qp_num };
        // SAFETY: `cq` is valid; arming it makes the channel report the next completion.
        unsafe { ibv_req_notify_cq(cq, 0) };
        // SAFETY: all-zero is a valid attr; the masked fields are set.
        let mut attr: ibv_qp_attr = unsafe { std::mem::zeroed() };
        attr.qp_state = ibv_qp_state::IBV_QPS_INIT;
        attr.pkey_index = 0;
        attr.port_num = dev.port;
        attr.qp_access_flags = ibv_access_flags::IBV_ACCESS_REMOTE_READ.0
            | ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0
            | ibv_access_flags::IBV_ACCESS_REMOTE_ATOMIC.0;
        let mask = ibv_qp_attr_mask::IBV_QP_STATE.0
            | ibv_qp_attr_mask::IBV_QP_PKEY_INDEX.0
            | ibv_qp_attr_mask::IBV_QP_PORT.0
            | ibv_qp_attr_mask::IBV_QP_ACCESS_FLAGS.0;
        made.modify(&mut attr, mask, "moving a queue pair to INIT")?;
        Ok(made)
    }

    fn modify(&self, attr: &mut ibv_qp_attr, mask: u32, what: &str) -> Result<(), VerbsError> {
        // SAFETY: `qp` is valid and `attr` initialised for the fields in `mask`.
        let rc = unsafe { ibv_modify_qp(self.qp, attr, mask as c_int) };
        if rc != 0 {
            return Err(VerbsError::io(what, std::io::Error::from_raw_os_error(rc)));
        }
        Ok(())
    }

    fn drain(&self, out: &mut Vec<Completion>) -> Result<usize, VerbsError> {
        // SAFETY: all-zero completions are valid buffers for the poll to fill.
        let mut wcs: [ibv_wc; 16] = unsafe { std::mem::zeroed() };
        // SAFETY: `cq` is valid and `wcs` holds 16 entries.
        let n = unsafe { ibv_poll_cq(self.cq, wcs.len() as c_int, wcs.as_mut_ptr()) };
        if n < 0 {
            return Err(VerbsError::Remote(
                "polling the completion queue failed".into(),
            ));
        }
        for wc in wcs.iter().take(n as usize) {
            // A flushed completion's opcode is undefined: the id tells the queue.
            let kind = if wc.wr_id & RECV_TAG != 0 {
                CompletionKind::Recv { len: wc.byte_len }
            } else {
                CompletionKind::Send
            };
            out.push(Completion {
                id: wc.wr_id,
                status: status(wc.status),
                kind,
            });
        }
        Ok(n as usize)
    }
}

fn status(s: ibv_wc_status::Type) -> WcStatus {
    match s {
        ibv_wc_status::IBV_WC_SUCCESS => WcStatus::Success,
        ibv_wc_status::IBV_WC_LOC_PROT_ERR => WcStatus::LocalProtection,
        ibv_wc_status::IBV_WC_REM_ACCESS_ERR => WcStatus::RemoteAccess,
        ibv_wc_status::IBV_WC_REM_INV_REQ_ERR => WcStatus::RemoteInvalidRequest,
        ibv_wc_status::IBV_WC_RETRY_EXC_ERR => WcStatus::RetryExceeded,
        ibv_wc_status::IBV_WC_WR_FLUSH_ERR => WcStatus::Flushed,
        other => WcStatus::Other(other),
    }
}

/// A 24-bit packet sequence number that differs between queue pairs.
fn rand_psn() -> u32 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    (t ^ std::process::id().rotate_left(12)) & 0x00ff_ffff
}

impl RcQp for IbvQp {
    fn endpoint(&self) -> Bytes {
        self.me.encode()
    }

    fn connect(&self, peer: &[u8]) -> Result<(), VerbsError> {
        let peer = QpAddress::decode(peer)?;
        // SAFETY: all-zero is a valid attr; the masked fields are set.
        let mut attr: ibv_qp_attr = unsafe { std::mem::zeroed() };
        attr.qp_state = ibv_qp_state::IBV_QPS_RTR;
        attr.path_mtu = self.me.mtu.min(peer.mtu);
        attr.dest_qp_num = peer.qpn;
        attr.rq_psn = peer.psn;
        attr.max_dest_rd_atomic = self.rd_atomic.1;
        attr.min_rnr_timer = 12;
        attr.ah_attr.dlid = peer.lid;
        attr.ah_attr.port_num = self.port;
        if peer.gid != [0; 16] {
            // RoCE (or a routed InfiniBand fabric): address the peer by GID.
            attr.ah_attr.is_global = 1;
            attr.ah_attr.grh.dgid.raw = peer.gid;
            attr.ah_attr.grh.sgid_index = self.gid_index;
            // Routed RoCE v2 crosses routers: a hop limit of 1 would stop at the first.
            attr.ah_attr.grh.hop_limit = 64;
        }
        let mask = ibv_qp_attr_mask::IBV_QP_STATE.0
            | ibv_qp_attr_mask::IBV_QP_AV.0
            | ibv_qp_attr_mask::IBV_QP_PATH_MTU.0
            | ibv_qp_attr_mask::IBV_QP_DEST_QPN.0
            | ibv_qp_attr_mask::IBV_QP_RQ_PSN.0
            | ibv_qp_attr_mask::IBV_QP_MAX_DEST_RD_ATOMIC.0
            | ibv_qp_attr_mask::IBV_QP_MIN_RNR_TIMER.0;
        self.modify(&mut attr, mask, "moving a queue pair to RTR")?;
        // SAFETY: as above.
        let mut attr: ibv_qp_attr = unsafe { std::mem::zeroed() };
        attr.qp_state = ibv_qp_state::IBV_QPS_RTS;
        attr.timeout = 14;
        attr.retry_cnt = 7;
        attr.rnr_retry = 7;
        attr.sq_psn = self.me.psn;
        attr.max_rd_atomic = self.rd_atomic.0;
        let mask = ibv_qp_attr_mask::IBV_QP_STATE.0
            | ibv_qp_attr_mask::IBV_QP_TIMEOUT.0
            | ibv_qp_attr_mask::IBV_QP_RETRY_CNT.0
            | ibv_qp_attr_mask::IBV_QP_RNR_RETRY.0
            | ibv_qp_attr_mask::IBV_QP_SQ_PSN.0
            | ibv_qp_attr_mask::IBV_QP_MAX_QP_RD_ATOMIC.0;
        self.modify(&mut attr, mask, "moving a queue pair to RTS")
    }

    fn post(&self, chain: &[WorkRequest]) -> Result<(), VerbsError> {
        if chain.is_empty() {
            return Ok(());
        }
        let mut sges: Vec<ibv_sge> = Vec::with_capacity(chain.len());
        // SAFETY: all-zero send WRs are valid; each is filled below.
        let mut wrs: Vec<ibv_send_wr> = (0..chain.len())
            .map(|_| unsafe { std::mem::zeroed() })
            .collect();
        for wr in chain {
            let local = wr.op.local();
            sges.push(ibv_sge {
                addr: local.addr,
                length: local.len,
                lkey: local.lkey,
            });
        }
        // `sges` is not resized from here on, so pointers into it stay valid.
        let sge_base = sges.as_mut_ptr();
        let wr_base = wrs.as_mut_ptr();
        for (i, (w, wr)) in wrs.iter_mut().zip(chain).enumerate() {
            w.wr_id = wr.id;
            // SAFETY: `i < sges.len()`, so the pointer is inside `sges`.
            w.sg_list = unsafe { sge_base.add(i) };
            w.num_sge = 1;
            w.send_flags = if wr.signaled {
                ibv_send_flags::IBV_SEND_SIGNALED.0
            } else {
                0
            };
            w.next = if i + 1 < chain.len() {
                // SAFETY: `i + 1 < wrs.len()`; `wrs` is not resized after this.
                unsafe { wr_base.add(i + 1) }
            } else {
                std::ptr::null_mut()
            };
            match wr.op {
                WorkOp::Send { .. } => w.opcode = ibv_wr_opcode::IBV_WR_SEND,
                WorkOp::Read { remote, .. } | WorkOp::Write { remote, .. } => {
                    w.opcode = if matches!(wr.op, WorkOp::Read { .. }) {
                        ibv_wr_opcode::IBV_WR_RDMA_READ
                    } else {
                        ibv_wr_opcode::IBV_WR_RDMA_WRITE
                    };
                    w.wr.rdma = rdma_t {
                        remote_addr: remote.addr,
                        rkey: remote.rkey,
                    };
                }
                WorkOp::Cas {
                    remote,
                    expected,
                    swap,
                    ..
                } => {
                    w.opcode = ibv_wr_opcode::IBV_WR_ATOMIC_CMP_AND_SWP;
                    w.wr.atomic = atomic_t {
                        remote_addr: remote.addr,
                        compare_add: expected,
                        swap,
                        rkey: remote.rkey,
                    };
                }
                WorkOp::Faa { remote, add, .. } => {
                    w.opcode = ibv_wr_opcode::IBV_WR_ATOMIC_FETCH_AND_ADD;
                    w.wr.atomic = atomic_t {
                        remote_addr: remote.addr,
                        compare_add: add,
                        swap: 0,
                        rkey: remote.rkey,
                    };
                }
            }
        }
        let _one = self.posting.lock();
        let mut bad: *mut ibv_send_wr = std::ptr::null_mut();
        // SAFETY: `wrs` is a well-formed list (each `next` points into `wrs` or is
        // null) whose SGEs point into `sges` and name registered memory the caller
        // keeps alive until the chain completes; both vectors outlive the call, which
        // copies the requests into the send queue.
        let rc = unsafe { ibv_post_send(self.qp, wr_base, &mut bad) };
        if rc != 0 {
            return Err(VerbsError::io(
                "posting RDMA work requests",
                std::io::Error::from_raw_os_error(rc),
            ));
        }
        Ok(())
    }

    fn post_recv(&self, buffers: &[(u64, Sge)]) -> Result<(), VerbsError> {
        if buffers.is_empty() {
            return Ok(());
        }
        let mut sges: Vec<ibv_sge> = buffers
            .iter()
            .map(|(_, s)| ibv_sge {
                addr: s.addr,
                length: s.len,
                lkey: s.lkey,
            })
            .collect();
        // SAFETY: all-zero receive WRs are valid; each is filled below.
        let mut wrs: Vec<ibv_recv_wr> = (0..buffers.len())
            .map(|_| unsafe { std::mem::zeroed() })
            .collect();
        // Neither vector is resized from here on, so pointers into them stay valid.
        let sge_base = sges.as_mut_ptr();
        let wr_base = wrs.as_mut_ptr();
        for (i, (w, (id, _))) in wrs.iter_mut().zip(buffers).enumerate() {
            w.wr_id = *id;
            // SAFETY: `i < sges.len()`.
            w.sg_list = unsafe { sge_base.add(i) };
            w.num_sge = 1;
            w.next = if i + 1 < buffers.len() {
                // SAFETY: `i + 1 < wrs.len()`.
                unsafe { wr_base.add(i + 1) }
            } else {
                std::ptr::null_mut()
            };
        }
        let mut bad: *mut ibv_recv_wr = std::ptr::null_mut();
        // SAFETY: a well-formed list of receive WRs whose SGEs name registered memory
        // the caller keeps posted until it completes; the call copies the list.
        let rc = unsafe { ibv_post_recv(self.qp, wr_base, &mut bad) };
        if rc != 0 {
            return Err(VerbsError::io(
                "posting RDMA receive buffers",
                std::io::Error::from_raw_os_error(rc),
            ));
        }
        Ok(())
    }

    fn poll(&self, out: &mut Vec<Completion>, timeout: Duration) -> Result<(), VerbsError> {
        if self.drain(out)? > 0 {
            return Ok(());
        }
        // SAFETY: `channel` is valid; its fd is owned by it.
        let fd = unsafe { (*self.channel).fd };
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = c_int::try_from(timeout.as_millis()).unwrap_or(c_int::MAX);
        // SAFETY: `pfd` is one valid pollfd.
        let ready = unsafe { libc::poll(&mut pfd, 1, ms) };
        if ready > 0 {
            let mut cq: *mut ibv_cq = std::ptr::null_mut();
            let mut ctx: *mut c_void = std::ptr::null_mut();
            // SAFETY: the fd is readable, so this does not block; the out-pointers are
            // valid. The event is acknowledged and the CQ re-armed before draining, so
            // no completion is missed.
            unsafe {
                if ibv_get_cq_event(self.channel, &mut cq, &mut ctx) == 0 {
                    ibv_ack_cq_events(cq, 1);
                    ibv_req_notify_cq(self.cq, 0);
                }
            }
        }
        self.drain(out).map(|_| ())
    }

    fn fail(&self) {
        // SAFETY: all-zero is a valid attr; only the state is applied.
        let mut attr: ibv_qp_attr = unsafe { std::mem::zeroed() };
        attr.qp_state = ibv_qp_state::IBV_QPS_ERR;
        if let Err(e) = self.modify(
            &mut attr,
            ibv_qp_attr_mask::IBV_QP_STATE.0,
            "failing a queue pair",
        ) {
            tracing::warn!(error = %e, "could not move a queue pair to the error state");
        }
    }
}

impl Drop for IbvQp {
    fn drop(&mut self) {
        // SAFETY: each object was created in `new` and is destroyed once, QP before CQ
        // before channel as verbs requires; the context outlives them (`self.context`).
        unsafe {
            if !self.qp.is_null() {
                ibv_destroy_qp(self.qp);
            }
            ibv_destroy_cq(self.cq);
            ibv_destroy_comp_channel(self.channel);
        }
        let _ = &self.context;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_pair_addresses_round_trip_and_reject_garbage() {
        let a = QpAddress {
            qpn: 0x12_3456,
            psn: 0xab_cdef,
            lid: 7,
            gid: [9; 16],
            mtu: 3,
        };
        assert_eq!(QpAddress::decode(&a.encode()).unwrap(), a);
        assert!(QpAddress::decode(&a.encode()[..29]).is_err());
        assert!(QpAddress::decode(&[0; 31]).is_err());
    }

    /// Discovery on a machine without a device (or without kernel support) answers
    /// "none", never an error.
    #[test]
    fn discovery_without_a_device_is_none() {
        match open(None, 1, 0) {
            Ok(None) => eprintln!("no RDMA device on this machine"),
            Ok(Some(d)) => eprintln!("found RDMA device {}", d.name()),
            Err(e) => panic!("discovery failed: {e}"),
        }
    }
}
