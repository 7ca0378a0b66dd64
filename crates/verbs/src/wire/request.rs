//! Encoding and decoding of [`Request`]s: one tag per request kind, payloads in the
//! format of the module above. Used by RPC clients (encode) and the node's server
//! (decode); decoding is total and never allocates beyond the bytes received.

use bytes::{BufMut, Bytes, BytesMut};

use super::*;

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
            Request::Revoke { .. } => 15,
            Request::Settle { .. } => 16,
            Request::Committed(_) => 17,
            Request::Resolve { .. } => 18,
            Request::RdmaConnect { .. } => 19,
            Request::RdmaRegion { .. } => 20,
        }
    }

    /// Appends this request as one frame with id `id`.
    pub fn encode(&self, id: u64, out: &mut BytesMut) {
        let at = begin_frame(out, id, self.tag());
        match self {
            Request::Hello {
                version,
                secret,
                client,
            } => {
                out.put_u16_le(*version);
                put_bytes(out, secret);
                // Version 2 had no client id (decoded alike, so any Hello round-trips).
                if *version >= 3 {
                    out.put_u64_le(*client);
                }
            }
            Request::Revoke { client } => out.put_u64_le(*client),
            Request::Ping | Request::Stats | Request::ListRegions => {}
            Request::CreateRegion { region, size } => {
                out.put_u16_le(*region);
                out.put_u64_le(*size);
            }
            Request::RdmaConnect { endpoint } => put_bytes(out, endpoint),
            Request::DropRegion { region }
            | Request::OpenRegion { region }
            | Request::RdmaRegion { region } => out.put_u16_le(*region),
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
                        // Flags: 1 = `expect` present, 2 = locked in the word.
                        let lock = if w.in_word_lock { 2 } else { 0 };
                        match w.expect {
                            Some(e) => {
                                out.put_u8(1 | lock);
                                out.put_u64_le(e);
                            }
                            None => {
                                out.put_u8(lock);
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
            Request::Settle { shard } => out.put_u32_le(*shard),
            Request::Committed(ids) => put_txs(out, ids),
            Request::Resolve { commit, abort } => {
                put_txs(out, commit);
                put_txs(out, abort);
            }
        }
        end_frame(out, at);
    }

    pub fn decode(tag: u8, payload: Bytes) -> Result<Request, VerbsError> {
        let mut d = Dec { buf: payload };
        let req = match tag {
            1 => {
                let version = d.u16()?;
                let secret = d.bytes()?;
                // Wire version 2 had no client id: decode it so the server can answer
                // with the version mismatch rather than a malformed frame.
                let client = if version >= 3 { d.u64()? } else { 0 };
                Request::Hello {
                    version,
                    secret,
                    client,
                }
            }
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
                        if has & !3 != 0 {
                            return Err(malformed("bad word-write flags"));
                        }
                        writes.push(WordWrite {
                            region,
                            offset,
                            expect: (has & 1 != 0).then_some(e),
                            new,
                            in_word_lock: has & 2 != 0,
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
            15 => Request::Revoke { client: d.u64()? },
            16 => Request::Settle { shard: d.u32()? },
            17 => Request::Committed(get_txs(&mut d)?),
            18 => Request::Resolve {
                commit: get_txs(&mut d)?,
                abort: get_txs(&mut d)?,
            },
            19 => Request::RdmaConnect {
                endpoint: d.bytes()?,
            },
            20 => Request::RdmaRegion { region: d.u16()? },
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
