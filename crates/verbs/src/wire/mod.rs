//! The memory-node RPC wire format: frames, requests, responses.
//!
//! ```text
//! frame    := len:u32le  id:u64le  tag:u8  payload        (len counts id+tag+payload)
//! bytes    := n:u32le  n bytes
//! string   := bytes (UTF-8)
//! vec<T>   := n:u32le  n × T
//! ```
//!
//! Every decoder is total: any byte string decodes to a value or to
//! [`VerbsError::Malformed`], never a panic, and a declared length is checked against
//! the bytes actually present before anything is allocated, so a peer cannot make a
//! node reserve memory it did not send. [`WIRE_VERSION`] is exchanged in `Hello`.

mod request;
mod response;

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::error::VerbsError;
use crate::{NodeId, RegionId};

/// Version of this wire format, sent in `Hello`.
pub const WIRE_VERSION: u16 = 3;
/// Bytes of a frame header: the length prefix, request id and tag.
pub const FRAME_HEADER: usize = 4 + 8 + 1;
/// Default limit on one frame (a verb batch, a commit batch, a copy chunk).
pub const DEFAULT_MAX_FRAME: u64 = 64 << 20;

/// One word a transaction writes on a memory node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WordWrite {
    pub region: RegionId,
    pub offset: u64,
    /// The value the word must hold for the transaction to commit; `None` writes
    /// without validating (still locked).
    pub expect: Option<u64>,
    pub new: u64,
    /// The word carries its lock in place: the prepare sets its lowest bit
    /// ([`crate::node::WORD_LOCK`]) with a compare-and-swap from `expect`, so writers
    /// that bypass the commit protocol (one-sided single-key writes) see the lock;
    /// commit stores `new`, abort clears the bit. Requires `expect`.
    pub in_word_lock: bool,
}

/// The prepare phase of one transaction on one memory node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxPrepare {
    /// Unique per connection (per coordinator on the `local` backend).
    pub txid: u64,
    /// Fencing domain: the logical shard whose epoch this transaction carries.
    pub shard: u32,
    pub epoch: u64,
    pub writes: Vec<WordWrite>,
}

/// A memory node's vote on a prepared transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxVote {
    /// Locked and validated; the words are held until commit or abort.
    Yes,
    /// Write `index` expected another value; nothing is held.
    Conflict { index: u32, actual: u64 },
    /// Write `index` is locked by another transaction; nothing is held.
    Locked { index: u32 },
    /// The shard's epoch on this node is newer; nothing is held.
    StaleEpoch { current: u64 },
    /// The transaction could not run (bad region, bounds, duplicate txid).
    Failed(VerbsError),
}

/// A one-sided verb as sent to a memory node by the `tcp` backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WireVerb {
    Read {
        region: RegionId,
        offset: u64,
        len: u32,
    },
    Write {
        region: RegionId,
        offset: u64,
        data: Bytes,
    },
    Cas {
        region: RegionId,
        offset: u64,
        expected: u64,
        new: u64,
    },
    Faa {
        region: RegionId,
        offset: u64,
        add: u64,
    },
}

/// The result of one [`WireVerb`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VerbOut {
    Done,
    Data(Bytes),
    Word(u64),
}

/// Counters a memory node reports.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeStats {
    pub node: NodeId,
    pub capacity: u64,
    pub used: u64,
    pub regions: u32,
    pub prepared: u64,
    pub committed: u64,
    pub aborted: u64,
    pub conflicts: u64,
    pub stale_epoch_rejects: u64,
    pub rpc_errors: u64,
    pub uptime_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// First request on a connection: wire version, the cluster secret, and the
    /// client's identity for revocation (0: anonymous, never revoked — the manager,
    /// tools, a node copying to a peer).
    Hello {
        version: u16,
        secret: Bytes,
        client: u64,
    },
    /// Liveness probe and heartbeat.
    Ping,
    Stats,
    CreateRegion {
        region: RegionId,
        size: u64,
    },
    DropRegion {
        region: RegionId,
    },
    /// Where the region's file is, for `shm` clients to map.
    OpenRegion {
        region: RegionId,
    },
    ListRegions,
    /// A batch of one-sided verbs executed by the node (the `tcp` backend).
    Verbs(Vec<WireVerb>),
    /// Answered with one [`TxVote`] per transaction.
    Prepare(Vec<TxPrepare>),
    /// Answered with one [`TxVote`] per id: `Yes` or `Failed(UnknownTx)`.
    Commit(Vec<u64>),
    /// Prepare and, for each transaction that votes `Yes`, commit at once: for
    /// transactions whose every word is on this one node. One vote each.
    PrepareCommit(Vec<TxPrepare>),
    Abort(Vec<u64>),
    /// Raise a shard's epoch: commits with a lower epoch are rejected from now on.
    Fence {
        shard: u32,
        epoch: u64,
    },
    /// Copy a region's bytes to another memory node (re-replication).
    CopyRegion {
        region: RegionId,
        peer: String,
    },
    /// Execute nothing more from `client`, on any connection, from now on (the
    /// manager fencing a failed-over agent); answered once no request of it runs.
    Revoke {
        client: u64,
    },
    /// Settling a shard's transactions whose coordinator is gone: freeze those of
    /// `shard` prepared under a fenced epoch or by a session that ended (no commit
    /// of their coordinator is accepted any more) and list them as (client, txid):
    /// answered with [`Response::Txs`].
    Settle {
        shard: u32,
    },
    /// Which of these (client, txid) this node committed: [`Response::Txs`].
    Committed(Vec<(u64, u64)>),
    /// Apply or undo frozen transactions (ids this node does not hold are ignored).
    Resolve {
        commit: Vec<(u64, u64)>,
        abort: Vec<(u64, u64)>,
    },
    /// Connect an RDMA queue pair to the client's (the `rdma` backend): `endpoint` is
    /// the client QP's address in the device's own encoding; answered with
    /// [`Response::RdmaConnected`] carrying the node's. The node's QP lives as long as
    /// this RPC connection, and a revocation of the client moves it to the error state.
    RdmaConnect {
        endpoint: Bytes,
    },
    /// The remote key and address of a region, registered for one-sided access on first
    /// ask: answered with [`Response::RdmaRegion`].
    RdmaRegion {
        region: RegionId,
    },
}

impl Request {
    /// The request's name, as metrics label it.
    pub fn kind(&self) -> &'static str {
        match self {
            Request::Hello { .. } => "hello",
            Request::Ping => "ping",
            Request::Stats => "stats",
            Request::CreateRegion { .. } => "create_region",
            Request::DropRegion { .. } => "drop_region",
            Request::OpenRegion { .. } => "open_region",
            Request::ListRegions => "list_regions",
            Request::Verbs(_) => "verbs",
            Request::Prepare(_) => "prepare",
            Request::Commit(_) => "commit",
            Request::PrepareCommit(_) => "prepare_commit",
            Request::Abort(_) => "abort",
            Request::Fence { .. } => "fence",
            Request::CopyRegion { .. } => "copy_region",
            Request::Revoke { .. } => "revoke",
            Request::Settle { .. } => "settle",
            Request::Committed(_) => "committed",
            Request::Resolve { .. } => "resolve",
            Request::RdmaConnect { .. } => "rdma_connect",
            Request::RdmaRegion { .. } => "rdma_region",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Response {
    Error(VerbsError),
    Ok,
    Pong {
        node: NodeId,
        uptime_ms: u64,
    },
    Stats(NodeStats),
    Region {
        region: RegionId,
        size: u64,
        path: String,
    },
    Regions(Vec<(RegionId, u64)>),
    Verbs(Vec<VerbOut>),
    Votes(Vec<TxVote>),
    /// Transactions as (coordinator's client id, txid).
    Txs(Vec<(u64, u64)>),
    /// The node's queue pair, in the device's encoding.
    RdmaConnected(Bytes),
    /// A region registered for one-sided RDMA: verbs address `addr + offset` with `rkey`.
    RdmaRegion {
        region: RegionId,
        addr: u64,
        rkey: u32,
        len: u64,
    },
}

// ---------------------------------------------------------------- primitives

fn malformed(what: &str) -> VerbsError {
    VerbsError::Malformed(what.to_string())
}

/// A bounds-checked cursor over a received payload.
struct Dec {
    buf: Bytes,
}

impl Dec {
    fn need(&self, n: usize, what: &str) -> Result<(), VerbsError> {
        if self.buf.remaining() < n {
            Err(VerbsError::Malformed(format!("truncated {what}")))
        } else {
            Ok(())
        }
    }
    fn u8(&mut self) -> Result<u8, VerbsError> {
        self.need(1, "u8")?;
        Ok(self.buf.get_u8())
    }
    fn u16(&mut self) -> Result<u16, VerbsError> {
        self.need(2, "u16")?;
        Ok(self.buf.get_u16_le())
    }
    fn u32(&mut self) -> Result<u32, VerbsError> {
        self.need(4, "u32")?;
        Ok(self.buf.get_u32_le())
    }
    fn u64(&mut self) -> Result<u64, VerbsError> {
        self.need(8, "u64")?;
        Ok(self.buf.get_u64_le())
    }
    fn bytes(&mut self) -> Result<Bytes, VerbsError> {
        let n = self.u32()? as usize;
        self.need(n, "byte string")?;
        Ok(self.buf.split_to(n))
    }
    fn string(&mut self) -> Result<String, VerbsError> {
        let b = self.bytes()?;
        String::from_utf8(b.to_vec()).map_err(|_| malformed("string is not UTF-8"))
    }
    /// Reads a vector length and checks that `min_item` bytes per item are present.
    fn len(&mut self, min_item: usize) -> Result<usize, VerbsError> {
        let n = self.u32()? as usize;
        if n.saturating_mul(min_item) > self.buf.remaining() {
            return Err(malformed("vector length exceeds the payload"));
        }
        Ok(n)
    }
    fn finish(&self) -> Result<(), VerbsError> {
        if self.buf.has_remaining() {
            Err(malformed("trailing bytes after message"))
        } else {
            Ok(())
        }
    }
}

fn put_bytes(out: &mut BytesMut, b: &[u8]) {
    out.put_u32_le(b.len() as u32);
    out.put_slice(b);
}

/// A list of transactions as (client, txid).
fn put_txs(out: &mut BytesMut, ids: &[(u64, u64)]) {
    out.put_u32_le(ids.len() as u32);
    for (client, txid) in ids {
        out.put_u64_le(*client);
        out.put_u64_le(*txid);
    }
}

fn get_txs(d: &mut Dec) -> Result<Vec<(u64, u64)>, VerbsError> {
    let n = d.len(16)?;
    let mut ids = Vec::with_capacity(n);
    for _ in 0..n {
        ids.push((d.u64()?, d.u64()?));
    }
    Ok(ids)
}

fn put_error(out: &mut BytesMut, e: &VerbsError) {
    out.put_u16_le(e.code());
    out.put_u64_le(e.wire_arg());
    put_bytes(out, e.wire_message().as_bytes());
}

fn get_error(d: &mut Dec) -> Result<VerbsError, VerbsError> {
    let code = d.u16()?;
    let arg = d.u64()?;
    let msg = d.string()?;
    Ok(VerbsError::from_wire(code, arg, msg))
}

// ---------------------------------------------------------------- frames

/// Starts a frame in `out`; returns the position to pass to [`end_frame`].
fn begin_frame(out: &mut BytesMut, id: u64, tag: u8) -> usize {
    let at = out.len();
    out.put_u32_le(0);
    out.put_u64_le(id);
    out.put_u8(tag);
    at
}

fn end_frame(out: &mut BytesMut, at: usize) {
    let len = (out.len() - at - 4) as u32;
    out[at..at + 4].copy_from_slice(&len.to_le_bytes());
}

/// A complete frame split off a receive buffer.
#[derive(Debug)]
pub struct Frame {
    pub id: u64,
    pub tag: u8,
    pub payload: Bytes,
}

/// Splits one frame off `buf`. `Ok(None)` means more bytes are needed; a frame longer
/// than `max` is an error after which the stream cannot be resynchronised.
pub fn split_frame(buf: &mut BytesMut, max: u64) -> Result<Option<Frame>, VerbsError> {
    if buf.len() < 4 {
        return Ok(None);
    }
    let len = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]) as u64;
    if len > max {
        return Err(VerbsError::FrameTooLarge { len, max });
    }
    if len < 9 {
        return Err(malformed("frame shorter than its header"));
    }
    if (buf.len() as u64) < 4 + len {
        buf.reserve((4 + len) as usize - buf.len());
        return Ok(None);
    }
    let mut frame = buf.split_to(4 + len as usize).freeze();
    frame.advance(4);
    let id = frame.get_u64_le();
    let tag = frame.get_u8();
    Ok(Some(Frame {
        id,
        tag,
        payload: frame,
    }))
}

// ---------------------------------------------------------------- requests

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn roundtrip_req(r: Request) {
        let mut out = BytesMut::new();
        r.encode(42, &mut out);
        let f = split_frame(&mut out, DEFAULT_MAX_FRAME).unwrap().unwrap();
        assert_eq!(f.id, 42);
        assert_eq!(Request::decode(f.tag, f.payload).unwrap(), r);
        assert!(out.is_empty());
    }

    #[test]
    fn requests_roundtrip() {
        roundtrip_req(Request::Ping);
        roundtrip_req(Request::Hello {
            version: WIRE_VERSION,
            secret: Bytes::from_static(b"s3cret"),
            client: 0xfeed,
        });
        roundtrip_req(Request::Revoke { client: 7 });
        // An old client's Hello (no client id) decodes and encodes back alike, so
        // the node can answer it with the version mismatch (found by fuzzing).
        roundtrip_req(Request::Hello {
            version: 2,
            secret: Bytes::new(),
            client: 0,
        });
        roundtrip_req(Request::Verbs(vec![
            WireVerb::Read {
                region: 3,
                offset: 64,
                len: 16,
            },
            WireVerb::Write {
                region: 3,
                offset: 8,
                data: Bytes::from_static(b"hello"),
            },
            WireVerb::Cas {
                region: 1,
                offset: 0,
                expected: 5,
                new: 6,
            },
            WireVerb::Faa {
                region: 1,
                offset: 8,
                add: 9,
            },
        ]));
        let prepares = vec![TxPrepare {
            txid: 7,
            shard: 3,
            epoch: 9,
            writes: vec![
                WordWrite {
                    region: 2,
                    offset: 16,
                    expect: Some(0),
                    new: 99,
                    in_word_lock: true,
                },
                WordWrite {
                    region: 2,
                    offset: 24,
                    expect: None,
                    new: 1,
                    in_word_lock: false,
                },
            ],
        }];
        roundtrip_req(Request::Prepare(prepares.clone()));
        roundtrip_req(Request::PrepareCommit(prepares));
        roundtrip_req(Request::Commit(vec![1, 2, 3]));
        roundtrip_req(Request::CopyRegion {
            region: 4,
            peer: "127.0.0.1:7001".into(),
        });
        roundtrip_req(Request::Settle { shard: 9 });
        roundtrip_req(Request::Committed(vec![(1, 2), (u64::MAX, 0)]));
        roundtrip_req(Request::Resolve {
            commit: vec![(3, 4)],
            abort: vec![],
        });
        roundtrip_req(Request::RdmaConnect {
            endpoint: Bytes::from_static(b"qp 17"),
        });
        roundtrip_req(Request::RdmaRegion { region: 300 });
        for resp in [
            Response::Txs(vec![(5, 6)]),
            Response::RdmaConnected(Bytes::from_static(b"qp 18")),
            Response::RdmaRegion {
                region: 3,
                addr: 0x7f00_0000_1000,
                rkey: 0xabcd,
                len: 1 << 20,
            },
        ] {
            let mut out = BytesMut::new();
            resp.encode(1, &mut out);
            let f = split_frame(&mut out, u64::MAX).unwrap().unwrap();
            assert_eq!(Response::decode(f.tag, f.payload).unwrap(), resp);
        }
    }

    /// An error relayed through a response keeps its message, not one more "memory
    /// node error: " per hop (found by the rpc_frame fuzz target).
    #[test]
    fn error_responses_roundtrip_unchanged() {
        for e in [
            VerbsError::Remote(String::new()),
            VerbsError::Remote("disk on fire".into()),
            VerbsError::Malformed("bad tag".into()),
            VerbsError::NoSuchRegion(7),
            VerbsError::Unauthenticated,
            VerbsError::Revoked(0xdead_beef),
        ] {
            let mut out = BytesMut::new();
            Response::Error(e.clone()).encode(3, &mut out);
            let f = split_frame(&mut out, u64::MAX).unwrap().unwrap();
            assert_eq!(
                Response::decode(f.tag, f.payload).unwrap(),
                Response::Error(e)
            );
        }
    }

    #[test]
    fn oversized_frame_is_rejected_before_buffering() {
        let mut buf = BytesMut::from(&[0xff, 0xff, 0xff, 0x7f, 0, 0][..]);
        assert!(matches!(
            split_frame(&mut buf, DEFAULT_MAX_FRAME),
            Err(VerbsError::FrameTooLarge { .. })
        ));
    }

    #[test]
    fn huge_vector_length_is_malformed_not_allocated() {
        let mut p = BytesMut::new();
        p.put_u32_le(u32::MAX);
        assert!(matches!(
            Request::decode(9, p.freeze()),
            Err(VerbsError::Malformed(_))
        ));
    }

    proptest! {
        #[test]
        fn decoders_are_total(tag in any::<u8>(), payload in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = Request::decode(tag, Bytes::from(payload.clone()));
            let _ = Response::decode(tag, Bytes::from(payload));
        }

        #[test]
        fn split_frame_never_panics(data in proptest::collection::vec(any::<u8>(), 0..64)) {
            let mut buf = BytesMut::from(&data[..]);
            let _ = split_frame(&mut buf, 1024);
        }
    }
}
