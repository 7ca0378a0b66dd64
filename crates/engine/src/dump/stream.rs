//! Streams in Redis's RDB format: DUMP writes `RDB_TYPE_STREAM_LISTPACKS_2` (19, what
//! Redis 7.0 writes and every later Redis reads), RESTORE reads 15 (Redis 5/6), 19 and
//! 21 (Redis 7.2, with consumers' active time).
//!
//! ```text
//! nodes:len ‖ nodes × (master ID: 16-byte string ‖ listpack string)
//! length ‖ last_id.ms ‖ last_id.seq                              (lengths)
//! [19, 21] first_id.ms ‖ first_id.seq ‖ max_deleted.ms ‖ max_deleted.seq ‖ entries_added
//! groups:len ‖ group × (name ‖ last_id.ms ‖ last_id.seq ‖ [19, 21] entries_read ‖
//!     pel:len ‖ pel × (16-byte ID ‖ delivery_time:i64 LE ‖ delivery_count:len) ‖
//!     consumers:len ‖ consumer × (name ‖ seen_time:i64 LE ‖ [21] active_time:i64 LE ‖
//!         pel:len ‖ pel × 16-byte ID))
//! node listpack: count ‖ deleted ‖ master fields:n ‖ n × field ‖ 0, then per entry
//!     flags ‖ ms delta ‖ seq delta ‖ (SAMEFIELDS: n values | n ‖ n × (field, value)) ‖
//!     element count
//! ```
//!
//! Reading never trusts the payload: every count is bounded by what is left, every
//! pending entry must belong to exactly one consumer, and a malformed node is an error.

use bytes::Bytes;

use super::compact::{self, CompactError, ListpackWriter};
use super::value::ValueError;
use crate::rdb::{self, Reader};
use crate::streams::id::StreamId;
use crate::streams::value::{Consumer, Group, Node, Pending, StreamValue};

pub const STREAM_LISTPACKS: u8 = 15;
pub const STREAM_LISTPACKS_2: u8 = 19;
pub const STREAM_LISTPACKS_3: u8 = 21;

const FLAG_DELETED: i64 = 1;
const FLAG_SAMEFIELDS: i64 = 2;

/// A stream entry: its ID and its field, value, field, value... list.
type Entry = (StreamId, Vec<Bytes>);
/// A node to write: its master ID and its live entries.
type NodeOut<'a> = (StreamId, Vec<(StreamId, &'a Vec<Bytes>)>);

fn malformed() -> ValueError {
    CompactError::Malformed.into()
}

/// The payload body of a stream (type byte included).
pub fn encode(s: &StreamValue) -> Vec<u8> {
    let mut out = vec![STREAM_LISTPACKS_2];
    // One listpack per node Redis would have, holding the node's live entries.
    let nodes: Vec<NodeOut<'_>> = s
        .nodes
        .iter()
        .map(|n| {
            let entries: Vec<_> = s
                .entries
                .range(n.first..=n.last)
                .map(|(id, f)| (*id, f))
                .collect();
            (n.first, entries)
        })
        .filter(|(_, e)| !e.is_empty())
        .collect();
    rdb::write_len(&mut out, nodes.len() as u64);
    for (master, entries) in &nodes {
        rdb::write_string(&mut out, &master.to_bytes());
        rdb::write_string(&mut out, &node_listpack(*master, entries));
    }
    rdb::write_len(&mut out, s.len());
    for id in [s.last_id, s.first_id(), s.max_deleted] {
        rdb::write_len(&mut out, id.ms);
        rdb::write_len(&mut out, id.seq);
    }
    rdb::write_len(&mut out, s.entries_added);
    rdb::write_len(&mut out, s.groups.len() as u64);
    for (name, g) in &s.groups {
        rdb::write_string(&mut out, name);
        rdb::write_len(&mut out, g.last_id.ms);
        rdb::write_len(&mut out, g.last_id.seq);
        rdb::write_len(&mut out, g.entries_read.unwrap_or(u64::MAX));
        rdb::write_len(&mut out, g.pending.len() as u64);
        for (id, p) in &g.pending {
            out.extend_from_slice(&id.to_bytes());
            out.extend_from_slice(&(p.delivery_time as i64).to_le_bytes());
            rdb::write_len(&mut out, p.delivery_count);
        }
        rdb::write_len(&mut out, g.consumers.len() as u64);
        for (cname, c) in &g.consumers {
            rdb::write_string(&mut out, cname);
            out.extend_from_slice(&(c.seen_time as i64).to_le_bytes());
            let own: Vec<StreamId> = g.pending_of(cname).collect();
            rdb::write_len(&mut out, own.len() as u64);
            for id in own {
                out.extend_from_slice(&id.to_bytes());
            }
        }
    }
    out
}

fn node_listpack(master: StreamId, entries: &[(StreamId, &Vec<Bytes>)]) -> Vec<u8> {
    let mut w = ListpackWriter::new();
    let master_fields: Vec<&Bytes> = entries
        .first()
        .map(|(_, f)| f.iter().step_by(2).collect())
        .unwrap_or_default();
    w.push_int(entries.len() as i64);
    w.push_int(0);
    w.push_int(master_fields.len() as i64);
    for f in &master_fields {
        w.push(f);
    }
    w.push_int(0);
    for (id, fields) in entries {
        let names: Vec<&Bytes> = fields.iter().step_by(2).collect();
        let same = names == master_fields;
        w.push_int(if same { FLAG_SAMEFIELDS } else { 0 });
        w.push_int(id.ms.wrapping_sub(master.ms) as i64);
        w.push_int(id.seq.wrapping_sub(master.seq) as i64);
        let n = (fields.len() / 2) as i64;
        if same {
            for v in fields.iter().skip(1).step_by(2) {
                w.push(v);
            }
            w.push_int(n + 3);
        } else {
            w.push_int(n);
            for f in fields.iter() {
                w.push(f);
            }
            w.push_int(n * 2 + 4);
        }
    }
    w.finish()
}

fn int(b: &Bytes) -> Result<i64, ValueError> {
    std::str::from_utf8(b)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(malformed)
}

/// The entries of one node: (ID, fields) of the live ones, and how many were deleted.
fn read_node(master: StreamId, blob: &[u8]) -> Result<(Vec<Entry>, u64), ValueError> {
    let items = compact::listpack(blob)?;
    let mut it = items.iter();
    let mut next = || it.next().ok_or_else(malformed);
    let count = int(next()?)?;
    let deleted = int(next()?)?;
    let nfields = usize::try_from(int(next()?)?).map_err(|_| malformed())?;
    if count < 0 || deleted < 0 || nfields > blob.len() {
        return Err(malformed());
    }
    let mut master_fields = Vec::with_capacity(nfields);
    for _ in 0..nfields {
        master_fields.push(next()?.clone());
    }
    if int(next()?)? != 0 {
        return Err(malformed());
    }
    let mut live = Vec::new();
    let mut seen = 0i64;
    while seen < count + deleted {
        let flags = int(next()?)?;
        let ms = master.ms.wrapping_add(int(next()?)? as u64);
        let seq = master.seq.wrapping_add(int(next()?)? as u64);
        let fields: Vec<Bytes> = if flags & FLAG_SAMEFIELDS != 0 {
            let mut f = Vec::with_capacity(nfields * 2);
            for name in &master_fields {
                f.push(name.clone());
                f.push(next()?.clone());
            }
            f
        } else {
            let n = usize::try_from(int(next()?)?).map_err(|_| malformed())?;
            if n > blob.len() {
                return Err(malformed());
            }
            let mut f = Vec::with_capacity(n * 2);
            for _ in 0..n * 2 {
                f.push(next()?.clone());
            }
            f
        };
        let _element_count = next()?;
        if flags & FLAG_DELETED == 0 {
            live.push((StreamId::new(ms, seq), fields));
        }
        seen += 1;
    }
    if live.len() as i64 != count {
        return Err(malformed());
    }
    Ok((live, deleted as u64))
}

fn id_of(r: &mut Reader<'_>) -> Result<StreamId, ValueError> {
    Ok(StreamId::from_bytes(r.array::<16>()?))
}

fn len_id(r: &mut Reader<'_>) -> Result<StreamId, ValueError> {
    Ok(StreamId::new(r.len()?, r.len()?))
}

fn ms_time(r: &mut Reader<'_>) -> Result<u64, ValueError> {
    Ok(i64::from_le_bytes(r.array::<8>()?).max(0) as u64)
}

/// A stream value of RDB type `kind` (15, 19 or 21).
pub fn decode(r: &mut Reader<'_>, kind: u8) -> Result<StreamValue, ValueError> {
    let v2 = kind != STREAM_LISTPACKS;
    let mut s = StreamValue::default();
    let nodes = r.len()?;
    let mut last_master: Option<StreamId> = None;
    for _ in 0..nodes {
        let key = r.string()?;
        let master = StreamId::from_bytes(key[..].try_into().map_err(|_| malformed())?);
        if last_master.is_some_and(|m| m >= master) {
            return Err(malformed());
        }
        last_master = Some(master);
        let blob = r.string()?;
        let (entries, deleted) = read_node(master, &blob)?;
        let (Some(first), Some(last)) = (entries.first().map(|e| e.0), entries.last().map(|e| e.0))
        else {
            // A node of deleted entries only: nothing of it to keep.
            continue;
        };
        if first < master
            || s.entries
                .keys()
                .next_back()
                .is_some_and(|top| *top >= first)
        {
            return Err(malformed());
        }
        let live = entries.len() as u32;
        for (id, fields) in entries {
            s.entries.insert(id, fields);
        }
        s.nodes.push(Node {
            first: master,
            last,
            appended: live.saturating_add(deleted as u32),
            live,
        });
    }
    let length = r.len()?;
    if length != s.len() {
        return Err(malformed());
    }
    s.last_id = len_id(r)?;
    if v2 {
        let _first = len_id(r)?;
        s.max_deleted = len_id(r)?;
        s.entries_added = r.len()?;
    } else {
        s.entries_added = s.len();
    }
    if s.entries
        .keys()
        .next_back()
        .is_some_and(|top| *top > s.last_id)
    {
        return Err(malformed());
    }
    for _ in 0..r.len()? {
        let name = r.string()?;
        let last_id = len_id(r)?;
        let entries_read = if v2 {
            Some(r.len()?).filter(|n| *n != u64::MAX)
        } else {
            s.distance_from_first(last_id)
        };
        let mut g = Group::new(last_id, entries_read);
        let mut owners: std::collections::BTreeMap<StreamId, (u64, u64)> = Default::default();
        for _ in 0..r.len()? {
            let id = id_of(r)?;
            let time = ms_time(r)?;
            let count = r.len()?;
            if owners.insert(id, (time, count)).is_some() {
                return Err(ValueError::Duplicate);
            }
        }
        for _ in 0..r.len()? {
            let cname = r.string()?;
            let seen_time = ms_time(r)?;
            let active_time = if kind == STREAM_LISTPACKS_3 {
                u64::try_from(i64::from_le_bytes(r.array::<8>()?)).ok()
            } else {
                None
            };
            if g.consumers.contains_key(&cname) {
                return Err(ValueError::Duplicate);
            }
            g.consumers.insert(
                cname.clone(),
                Consumer {
                    seen_time,
                    active_time,
                },
            );
            for _ in 0..r.len()? {
                let id = id_of(r)?;
                let (delivery_time, delivery_count) = owners.remove(&id).ok_or_else(malformed)?;
                g.pending.insert(
                    id,
                    Pending {
                        consumer: cname.clone(),
                        delivery_time,
                        delivery_count,
                    },
                );
            }
        }
        // Every pending entry belongs to a consumer.
        if !owners.is_empty() {
            return Err(malformed());
        }
        if s.groups.insert(name, g).is_some() {
            return Err(ValueError::Duplicate);
        }
    }
    Ok(s)
}
