//! Encoding and decoding of [`Response`]s, one per request, carrying the request's
//! frame id. Used by the node's server (encode) and RPC clients (decode); decoding is
//! total and never allocates beyond the bytes received.

use bytes::{BufMut, Bytes, BytesMut};

use super::*;

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
            Response::Txs(_) => 8,
            Response::RdmaConnected(_) => 9,
            Response::RdmaRegion { .. } => 10,
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
            Response::Txs(ids) => put_txs(out, ids),
            Response::RdmaConnected(endpoint) => put_bytes(out, endpoint),
            Response::RdmaRegion {
                region,
                addr,
                rkey,
                len,
            } => {
                out.put_u16_le(*region);
                out.put_u64_le(*addr);
                out.put_u32_le(*rkey);
                out.put_u64_le(*len);
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
            8 => Response::Txs(get_txs(&mut d)?),
            9 => Response::RdmaConnected(d.bytes()?),
            10 => Response::RdmaRegion {
                region: d.u16()?,
                addr: d.u64()?,
                rkey: d.u32()?,
                len: d.u64()?,
            },
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
