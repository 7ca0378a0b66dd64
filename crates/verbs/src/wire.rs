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

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::error::VerbsError;
use crate::{NodeId, RegionId};

/// Version of this wire format, sent in `Hello`.
pub const WIRE_VERSION: u16 = 1;
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
    /// First request on a connection: wire version and the cluster secret.
    Hello {
        version: u16,
        secret: Bytes,
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

fn put_error(out: &mut BytesMut, e: &VerbsError) {
    out.put_u16_le(e.code());
    out.put_u64_le(e.wire_arg());
    put_bytes(out, e.to_string().as_bytes());
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

impl Request {
    fn tag(&self) -> u8 {
        match self {
            Request::Hello { .. } => 1,
            Request::Ping => 2,
            Request::Stats => 3,
            Request::CreateRegion { .. } => 4,
            Request::DropRegion { .. } => 5,
            Request::OpenRegion { .. } => 6,
            Request::ListRegions => 7,
            Request::Verbs(_) => 8,
            Request::Prepare(_) => 9,
            Request::Commit(_) => 10,
            Request::Abort(_) => 11,
            Request::Fence { .. } => 12,
            Request::CopyRegion { .. } => 13,
            Request::PrepareCommit(_) => 14,
        }
    }

    /// Appends this request as one frame with id `id`.
    pub fn encode(&self, id: u64, out: &mut BytesMut) {
        let at = begin_frame(out, id, self.tag());
        match self {
            Request::Hello { version, secret } => {
                out.put_u16_le(*version);
                put_bytes(out, secret);
            }
            Request::Ping | Request::Stats | Request::ListRegions => {}
            Request::CreateRegion { region, size } => {
                out.put_u16_le(*region);
                out.put_u64_le(*size);
            }
            Request::DropRegion { region } | Request::OpenRegion { region } => {
                out.put_u16_le(*region)
            }
            Request::Verbs(verbs) => {
                out.put_u32_le(verbs.len() as u32);
                for v in verbs {
                    match v {
                        WireVerb::Read {
                            region,
                            offset,
                            len,
                        } => {
                            out.put_u8(0);
                            out.put_u16_le(*region);
                            out.put_u64_le(*offset);
                            out.put_u32_le(*len);
                        }
                        WireVerb::Write {
                            region,
                            offset,
                            data,
                        } => {
                            out.put_u8(1);
                            out.put_u16_le(*region);
                            out.put_u64_le(*offset);
                            put_bytes(out, data);
                        }
                        WireVerb::Cas {
                            region,
                            offset,
                            expected,
                            new,
                        } => {
                            out.put_u8(2);
                            out.put_u16_le(*region);
                            out.put_u64_le(*offset);
                            out.put_u64_le(*expected);
                            out.put_u64_le(*new);
                        }
                        WireVerb::Faa {
                            region,
                            offset,
                            add,
                        } => {
                            out.put_u8(3);
                            out.put_u16_le(*region);
                            out.put_u64_le(*offset);
                            out.put_u64_le(*add);
                        }
                    }
                }
            }
            Request::Prepare(txs) | Request::PrepareCommit(txs) => {
                out.put_u32_le(txs.len() as u32);
                for tx in txs {
                    out.put_u64_le(tx.txid);
                    out.put_u32_le(tx.shard);
                    out.put_u64_le(tx.epoch);
                    out.put_u32_le(tx.writes.len() as u32);
                    for w in &tx.writes {
                        out.put_u16_le(w.region);
                        out.put_u64_le(w.offset);
                        match w.expect {
                            Some(e) => {
                                out.put_u8(1);
                                out.put_u64_le(e);
                            }
                            None => {
                                out.put_u8(0);
                                out.put_u64_le(0);
                            }
                        }
                        out.put_u64_le(w.new);
                    }
                }
            }
            Request::Commit(ids) | Request::Abort(ids) => {
                out.put_u32_le(ids.len() as u32);
                for id in ids {
                    out.put_u64_le(*id);
                }
            }
            Request::Fence { shard, epoch } => {
                out.put_u32_le(*shard);
                out.put_u64_le(*epoch);
            }
            Request::CopyRegion { region, peer } => {
                out.put_u16_le(*region);
                put_bytes(out, peer.as_bytes());
            }
        }
        end_frame(out, at);
    }

    pub fn decode(tag: u8, payload: Bytes) -> Result<Request, VerbsError> {
        let mut d = Dec { buf: payload };
        let req = match tag {
            1 => Request::Hello {
                version: d.u16()?,
                secret: d.bytes()?,
            },
            2 => Request::Ping,
            3 => Request::Stats,
            4 => Request::CreateRegion {
                region: d.u16()?,
                size: d.u64()?,
            },
            5 => Request::DropRegion { region: d.u16()? },
            6 => Request::OpenRegion { region: d.u16()? },
            7 => Request::ListRegions,
            8 => {
                let n = d.len(1 + 2 + 8)?;
                let mut verbs = Vec::with_capacity(n);
                for _ in 0..n {
                    let kind = d.u8()?;
                    let region = d.u16()?;
                    let offset = d.u64()?;
                    verbs.push(match kind {
                        0 => WireVerb::Read {
                            region,
                            offset,
                            len: d.u32()?,
                        },
                        1 => WireVerb::Write {
                            region,
                            offset,
                            data: d.bytes()?,
                        },
                        2 => WireVerb::Cas {
                            region,
                            offset,
                            expected: d.u64()?,
                            new: d.u64()?,
                        },
                        3 => WireVerb::Faa {
                            region,
                            offset,
                            add: d.u64()?,
                        },
                        _ => return Err(malformed("unknown verb kind")),
                    });
                }
                Request::Verbs(verbs)
            }
            9 | 14 => {
                let n = d.len(8 + 4 + 8 + 4)?;
                let mut txs = Vec::with_capacity(n);
                for _ in 0..n {
                    let txid = d.u64()?;
                    let shard = d.u32()?;
                    let epoch = d.u64()?;
                    let m = d.len(2 + 8 + 1 + 8 + 8)?;
                    let mut writes = Vec::with_capacity(m);
                    for _ in 0..m {
                        let region = d.u16()?;
                        let offset = d.u64()?;
                        let has = d.u8()?;
                        let e = d.u64()?;
                        let new = d.u64()?;
                        let expect = match has {
                            0 => None,
                            1 => Some(e),
                            _ => return Err(malformed("bad expect flag")),
                        };
                        writes.push(WordWrite {
                            region,
                            offset,
                            expect,
                            new,
                        });
                    }
                    txs.push(TxPrepare {
                        txid,
                        shard,
                        epoch,
                        writes,
                    });
                }
                if tag == 9 {
                    Request::Prepare(txs)
                } else {
                    Request::PrepareCommit(txs)
                }
            }
            10 | 11 => {
                let n = d.len(8)?;
                let mut ids = Vec::with_capacity(n);
                for _ in 0..n {
                    ids.push(d.u64()?);
                }
                if tag == 10 {
                    Request::Commit(ids)
                } else {
                    Request::Abort(ids)
                }
            }
            12 => Request::Fence {
                shard: d.u32()?,
                epoch: d.u64()?,
            },
            13 => Request::CopyRegion {
                region: d.u16()?,
                peer: d.string()?,
            },
            other => {
                return Err(VerbsError::Malformed(format!(
                    "unknown request tag {other}"
                )));
            }
        };
        d.finish()?;
        Ok(req)
    }
}

// ---------------------------------------------------------------- responses

impl Response {
    fn tag(&self) -> u8 {
        match self {
            Response::Error(_) => 0,
            Response::Ok => 1,
            Response::Pong { .. } => 2,
            Response::Stats(_) => 3,
            Response::Region { .. } => 4,
            Response::Regions(_) => 5,
            Response::Verbs(_) => 6,
            Response::Votes(_) => 7,
        }
    }

    pub fn encode(&self, id: u64, out: &mut BytesMut) {
        let at = begin_frame(out, id, self.tag());
        match self {
            Response::Error(e) => put_error(out, e),
            Response::Ok => {}
            Response::Pong { node, uptime_ms } => {
                out.put_u32_le(*node);
                out.put_u64_le(*uptime_ms);
            }
            Response::Stats(s) => {
                out.put_u32_le(s.node);
                out.put_u64_le(s.capacity);
                out.put_u64_le(s.used);
                out.put_u32_le(s.regions);
                out.put_u64_le(s.prepared);
                out.put_u64_le(s.committed);
                out.put_u64_le(s.aborted);
                out.put_u64_le(s.conflicts);
                out.put_u64_le(s.stale_epoch_rejects);
                out.put_u64_le(s.rpc_errors);
                out.put_u64_le(s.uptime_ms);
            }
            Response::Region { region, size, path } => {
                out.put_u16_le(*region);
                out.put_u64_le(*size);
                put_bytes(out, path.as_bytes());
            }
            Response::Regions(rs) => {
                out.put_u32_le(rs.len() as u32);
                for (r, size) in rs {
                    out.put_u16_le(*r);
                    out.put_u64_le(*size);
                }
            }
            Response::Verbs(outs) => {
                out.put_u32_le(outs.len() as u32);
                for o in outs {
                    match o {
                        VerbOut::Done => out.put_u8(0),
                        VerbOut::Data(b) => {
                            out.put_u8(1);
                            put_bytes(out, b);
                        }
                        VerbOut::Word(w) => {
                            out.put_u8(2);
                            out.put_u64_le(*w);
                        }
                    }
                }
            }
            Response::Votes(votes) => {
                out.put_u32_le(votes.len() as u32);
                for v in votes {
                    match v {
                        TxVote::Yes => out.put_u8(0),
                        TxVote::Conflict { index, actual } => {
                            out.put_u8(1);
                            out.put_u32_le(*index);
                            out.put_u64_le(*actual);
                        }
                        TxVote::Locked { index } => {
                            out.put_u8(2);
                            out.put_u32_le(*index);
                        }
                        TxVote::StaleEpoch { current } => {
                            out.put_u8(3);
                            out.put_u64_le(*current);
                        }
                        TxVote::Failed(e) => {
                            out.put_u8(4);
                            put_error(out, e);
                        }
                    }
                }
            }
        }
        end_frame(out, at);
    }

    pub fn decode(tag: u8, payload: Bytes) -> Result<Response, VerbsError> {
        let mut d = Dec { buf: payload };
        let resp = match tag {
            0 => Response::Error(get_error(&mut d)?),
            1 => Response::Ok,
            2 => Response::Pong {
                node: d.u32()?,
                uptime_ms: d.u64()?,
            },
            3 => Response::Stats(NodeStats {
                node: d.u32()?,
                capacity: d.u64()?,
                used: d.u64()?,
                regions: d.u32()?,
                prepared: d.u64()?,
                committed: d.u64()?,
                aborted: d.u64()?,
                conflicts: d.u64()?,
                stale_epoch_rejects: d.u64()?,
                rpc_errors: d.u64()?,
                uptime_ms: d.u64()?,
            }),
            4 => Response::Region {
                region: d.u16()?,
                size: d.u64()?,
                path: d.string()?,
            },
            5 => {
                let n = d.len(10)?;
                let mut rs = Vec::with_capacity(n);
                for _ in 0..n {
                    rs.push((d.u16()?, d.u64()?));
                }
                Response::Regions(rs)
            }
            6 => {
                let n = d.len(1)?;
                let mut outs = Vec::with_capacity(n);
                for _ in 0..n {
                    outs.push(match d.u8()? {
                        0 => VerbOut::Done,
                        1 => VerbOut::Data(d.bytes()?),
                        2 => VerbOut::Word(d.u64()?),
                        _ => return Err(malformed("unknown verb result")),
                    });
                }
                Response::Verbs(outs)
            }
            7 => {
                let n = d.len(1)?;
                let mut votes = Vec::with_capacity(n);
                for _ in 0..n {
                    votes.push(match d.u8()? {
                        0 => TxVote::Yes,
                        1 => TxVote::Conflict {
                            index: d.u32()?,
                            actual: d.u64()?,
                        },
                        2 => TxVote::Locked { index: d.u32()? },
                        3 => TxVote::StaleEpoch { current: d.u64()? },
                        4 => TxVote::Failed(get_error(&mut d)?),
                        _ => return Err(malformed("unknown vote")),
                    });
                }
                Response::Votes(votes)
            }
            other => {
                return Err(VerbsError::Malformed(format!(
                    "unknown response tag {other}"
                )));
            }
        };
        d.finish()?;
        Ok(resp)
    }
}

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
            version: 1,
            secret: Bytes::from_static(b"s3cret"),
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
                },
                WordWrite {
                    region: 2,
                    offset: 24,
                    expect: None,
                    new: 1,
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
