//! A stream as the commands see it — entries by ID, the counters Redis keeps (last ID,
//! largest deleted ID, entries ever added) and the consumer groups with their pending
//! entries (PEL) and consumers — and its packed form in the pool, a wire format:
//!
//! ```text
//! +------+---------+---------+-------------+---------------+-------+-------+--------+-------+
//! | 0x53 | version | last_id | max_deleted | entries_added | count | entry | groups | nodes |
//! +------+---------+---------+-------------+---------------+-------+-------+--------+-------+
//!   1      1         16        16            8 LE            varint
//! id:     ms u64 BE ‖ seq u64 BE (16 bytes: bytes order as IDs do)
//! entry:  id ‖ pairs:varint ‖ pairs × (field, value)     bytes: len:varint ‖ bytes
//! groups: count:varint ‖ group...
//! group:  name ‖ last_id ‖ entries_read:i64 LE (-1: unknown) ‖ consumers:varint ‖
//!         consumers × (name ‖ seen_time:u64 LE ‖ active_time:i64 LE (-1: never)) ‖
//!         pending:varint ‖
//!         pending × (id ‖ consumer index:varint ‖ delivery_time:u64 LE ‖ count:u64 LE)
//! nodes:  count:varint ‖ node × (first id ‖ last id ‖ appended:varint ‖ live:varint)
//! ```
//!
//! The first byte, 0x53, is neither a packed collection's encoding nor a chunk-tree
//! root's, so nothing mistakes a stream's bytes for trees it would own. Decoding
//! checks every length against what is left ([`Corrupt`]).

use std::collections::BTreeMap;

use bytes::Bytes;

use super::id::StreamId;
use crate::packed::Corrupt;

const MAGIC: u8 = 0x53;
const VERSION: u8 = 1;

/// A pending entry: delivered to `consumer`, not acknowledged yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pending {
    pub consumer: Bytes,
    /// Unix ms of the last delivery.
    pub delivery_time: u64,
    pub delivery_count: u64,
}

/// A consumer of a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Consumer {
    /// Unix ms of its last read or claim attempt (`seen-time`).
    pub seen_time: u64,
    /// Unix ms of its last successful read or claim (Redis 7.2's `active-time`;
    /// `None`: never).
    pub active_time: Option<u64>,
}

impl Consumer {
    pub fn new(now: u64) -> Consumer {
        Consumer {
            seen_time: now,
            active_time: None,
        }
    }
}

/// One of the blocks Redis keeps a stream's entries in (a radix-tree node of up to
/// [`NODE_ENTRIES`] entries, appended in order): approximate trimming (`~`) removes
/// whole blocks, so DMC tracks where Redis's would be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Node {
    /// The first and last IDs appended to it.
    pub first: StreamId,
    pub last: StreamId,
    /// Entries appended to it, deleted ones included (a full node takes no more).
    pub appended: u32,
    /// Entries of it still in the stream.
    pub live: u32,
}

/// Entries one node takes (Redis's `stream-node-max-entries` default).
pub const NODE_ENTRIES: u32 = 100;

/// A consumer group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    pub last_id: StreamId,
    /// Entries the group has read, when known (`None`: Redis's -1).
    pub entries_read: Option<u64>,
    pub pending: BTreeMap<StreamId, Pending>,
    pub consumers: BTreeMap<Bytes, Consumer>,
}

impl Group {
    pub fn new(last_id: StreamId, entries_read: Option<u64>) -> Group {
        Group {
            last_id,
            entries_read,
            pending: BTreeMap::new(),
            consumers: BTreeMap::new(),
        }
    }

    /// The consumer's pending IDs, in order.
    pub fn pending_of<'a>(&'a self, consumer: &'a [u8]) -> impl Iterator<Item = StreamId> + 'a {
        self.pending
            .iter()
            .filter(move |(_, p)| p.consumer == consumer)
            .map(|(id, _)| *id)
    }
}

/// A whole stream.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StreamValue {
    /// Entries by ID, each a flat field, value, field, value... list.
    pub entries: BTreeMap<StreamId, Vec<Bytes>>,
    pub last_id: StreamId,
    pub max_deleted: StreamId,
    pub entries_added: u64,
    /// Groups by name (Redis keeps them in name order too).
    pub groups: BTreeMap<Bytes, Group>,
    /// Where Redis's nodes would be, oldest first.
    pub nodes: Vec<Node>,
    /// Entries stored but not in `entries`: a chunked stream's head loaded with only a
    /// window of its entries ([`super::stored`]); counted by [`len`](Self::len).
    pub unloaded: u64,
}

impl StreamValue {
    pub fn len(&self) -> u64 {
        self.entries.len() as u64 + self.unloaded
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The first live entry's ID, 0-0 when empty (Redis's `first_id`).
    pub fn first_id(&self) -> StreamId {
        self.entries.keys().next().copied().unwrap_or_default()
    }

    /// Appends an entry (its ID above every other), into the last node if it has room.
    pub fn append(&mut self, id: StreamId, fields: Vec<Bytes>) {
        self.entries.insert(id, fields);
        match self.nodes.last_mut() {
            Some(n) if n.appended < NODE_ENTRIES => {
                n.appended += 1;
                n.live += 1;
                n.last = id;
            }
            _ => self.nodes.push(Node {
                first: id,
                last: id,
                appended: 1,
                live: 1,
            }),
        }
    }

    /// Removes one entry; whether it was there. A node left without entries goes.
    pub fn remove(&mut self, id: StreamId) -> bool {
        if self.entries.remove(&id).is_none() {
            return false;
        }
        let at = self.nodes.partition_point(|n| n.first <= id);
        if let Some(i) = at.checked_sub(1)
            && let Some(n) = self.nodes.get_mut(i)
        {
            n.live = n.live.saturating_sub(1);
            if n.live == 0 {
                self.nodes.remove(i);
            }
        }
        true
    }

    /// Removes node `i` and its entries; how many entries went.
    pub fn remove_node(&mut self, i: usize) -> u64 {
        if i >= self.nodes.len() {
            return 0;
        }
        let n = self.nodes.remove(i);
        let doomed: Vec<StreamId> = self
            .entries
            .range(n.first..=n.last)
            .map(|(id, _)| *id)
            .collect();
        for id in &doomed {
            self.entries.remove(id);
        }
        doomed.len() as u64
    }

    /// Whether `start..=end` may hold a deleted entry (`streamRangeHasTombstones`).
    pub fn has_tombstones(&self, start: StreamId, end: StreamId) -> bool {
        if self.is_empty() || self.max_deleted.is_zero() || self.first_id() > self.max_deleted {
            return false;
        }
        start <= self.max_deleted && self.max_deleted <= end
    }

    /// The logical read counter of `id` when it can be known
    /// (`streamEstimateDistanceFromFirstEverEntry`).
    pub fn distance_from_first(&self, id: StreamId) -> Option<u64> {
        if self.entries_added == 0 {
            return Some(0);
        }
        if self.is_empty() && id <= self.last_id {
            return Some(self.entries_added);
        }
        if id == self.last_id {
            return Some(self.entries_added);
        }
        if id > self.last_id {
            return None;
        }
        let first = self.first_id();
        if self.max_deleted.is_zero() || self.max_deleted < first {
            if id < first {
                return Some(self.entries_added - self.len());
            }
            if id == first {
                return Some(self.entries_added - self.len() + 1);
            }
        }
        None
    }

    /// A group's lag (`streamReplyWithCGLag`): `None` when it cannot be known;
    /// negative when the group was told it read more than was ever added.
    pub fn lag(&self, g: &Group) -> Option<i64> {
        if self.entries_added == 0 {
            return Some(0);
        }
        let lag = |read: u64| self.entries_added as i64 - read as i64;
        if let Some(read) = g.entries_read
            && !self.has_tombstones(g.last_id, StreamId::MAX)
        {
            return Some(lag(read));
        }
        self.distance_from_first(g.last_id).map(lag)
    }

    pub fn encode(&self) -> Vec<u8> {
        self.encode_with(true)
    }

    /// The packed form without the entries (a chunked stream's head, whose entries
    /// are in a tree).
    pub fn encode_head(&self) -> Vec<u8> {
        self.encode_with(false)
    }

    fn encode_with(&self, entries: bool) -> Vec<u8> {
        let mut out = vec![MAGIC, VERSION];
        out.extend_from_slice(&self.last_id.to_bytes());
        out.extend_from_slice(&self.max_deleted.to_bytes());
        out.extend_from_slice(&self.entries_added.to_le_bytes());
        if entries {
            varint(&mut out, self.entries.len() as u64);
            for (id, fields) in &self.entries {
                encode_entry(&mut out, *id, fields);
            }
        } else {
            varint(&mut out, 0);
        }
        varint(&mut out, self.groups.len() as u64);
        for (name, g) in &self.groups {
            bytes(&mut out, name);
            out.extend_from_slice(&g.last_id.to_bytes());
            let read = g.entries_read.map_or(-1, |n| n as i64);
            out.extend_from_slice(&read.to_le_bytes());
            varint(&mut out, g.consumers.len() as u64);
            for (cname, c) in &g.consumers {
                bytes(&mut out, cname);
                out.extend_from_slice(&c.seen_time.to_le_bytes());
                let active = c.active_time.map_or(-1, |t| t as i64);
                out.extend_from_slice(&active.to_le_bytes());
            }
            varint(&mut out, g.pending.len() as u64);
            for (id, p) in &g.pending {
                out.extend_from_slice(&id.to_bytes());
                // A pending entry's consumer is always one of the group's.
                let index = g
                    .consumers
                    .keys()
                    .position(|c| *c == p.consumer)
                    .unwrap_or(0);
                varint(&mut out, index as u64);
                out.extend_from_slice(&p.delivery_time.to_le_bytes());
                out.extend_from_slice(&p.delivery_count.to_le_bytes());
            }
        }
        varint(&mut out, self.nodes.len() as u64);
        for n in &self.nodes {
            out.extend_from_slice(&n.first.to_bytes());
            out.extend_from_slice(&n.last.to_bytes());
            varint(&mut out, u64::from(n.appended));
            varint(&mut out, u64::from(n.live));
        }
        out
    }

    pub fn decode(v: &[u8]) -> Result<StreamValue, Corrupt> {
        let mut r = Reader { rest: v };
        if r.take(2)? != [MAGIC, VERSION] {
            return Err(Corrupt);
        }
        let mut s = StreamValue {
            last_id: r.id()?,
            max_deleted: r.id()?,
            entries_added: r.u64()?,
            ..Default::default()
        };
        for _ in 0..r.varint()? {
            let (id, fields) = r.entry()?;
            s.entries.insert(id, fields);
        }
        for _ in 0..r.varint()? {
            let name = r.bytes()?;
            let last_id = r.id()?;
            let read = r.u64()? as i64;
            let mut g = Group::new(last_id, u64::try_from(read).ok());
            let mut names = Vec::new();
            for _ in 0..r.varint()? {
                let cname = r.bytes()?;
                let seen_time = r.u64()?;
                let active_time = u64::try_from(r.u64()? as i64).ok();
                names.push(cname.clone());
                g.consumers.insert(
                    cname,
                    Consumer {
                        seen_time,
                        active_time,
                    },
                );
            }
            for _ in 0..r.varint()? {
                let id = r.id()?;
                let consumer = names
                    .get(usize::try_from(r.varint()?).map_err(|_| Corrupt)?)
                    .ok_or(Corrupt)?
                    .clone();
                let delivery_time = r.u64()?;
                let delivery_count = r.u64()?;
                g.pending.insert(
                    id,
                    Pending {
                        consumer,
                        delivery_time,
                        delivery_count,
                    },
                );
            }
            s.groups.insert(name, g);
        }
        for _ in 0..r.varint()? {
            let first = r.id()?;
            let last = r.id()?;
            let appended = u32::try_from(r.varint()?).map_err(|_| Corrupt)?;
            let live = u32::try_from(r.varint()?).map_err(|_| Corrupt)?;
            s.nodes.push(Node {
                first,
                last,
                appended,
                live,
            });
        }
        if !r.rest.is_empty() {
            return Err(Corrupt);
        }
        Ok(s)
    }
}

/// One entry's bytes: `id ‖ pairs:varint ‖ (len:varint ‖ bytes)...` (also a record of
/// a chunked stream's entries tree, whose key is the ID).
pub fn encode_entry(out: &mut Vec<u8>, id: StreamId, fields: &[Bytes]) {
    out.extend_from_slice(&id.to_bytes());
    varint(out, (fields.len() / 2) as u64);
    for f in fields {
        bytes(out, f);
    }
}

/// An entry from exactly its bytes.
pub fn decode_entry(v: &[u8]) -> Result<(StreamId, Vec<Bytes>), Corrupt> {
    let mut r = Reader { rest: v };
    let entry = r.entry()?;
    if !r.rest.is_empty() {
        return Err(Corrupt);
    }
    Ok(entry)
}

fn varint(out: &mut Vec<u8>, mut n: u64) {
    loop {
        let b = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

fn bytes(out: &mut Vec<u8>, b: &[u8]) {
    varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], Corrupt> {
        if n > self.rest.len() {
            return Err(Corrupt);
        }
        let (head, rest) = self.rest.split_at(n);
        self.rest = rest;
        Ok(head)
    }

    fn varint(&mut self) -> Result<u64, Corrupt> {
        let mut n = 0u64;
        for shift in (0..64).step_by(7) {
            let b = *self.take(1)?.first().ok_or(Corrupt)?;
            n |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(n);
            }
        }
        Err(Corrupt)
    }

    fn u64(&mut self) -> Result<u64, Corrupt> {
        let mut b = [0u8; 8];
        b.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(b))
    }

    fn entry(&mut self) -> Result<(StreamId, Vec<Bytes>), Corrupt> {
        let id = self.id()?;
        let pairs = self.varint()?;
        let mut fields = Vec::new();
        for _ in 0..pairs.checked_mul(2).ok_or(Corrupt)? {
            fields.push(self.bytes()?);
        }
        Ok((id, fields))
    }

    fn id(&mut self) -> Result<StreamId, Corrupt> {
        let mut b = [0u8; 16];
        b.copy_from_slice(self.take(16)?);
        Ok(StreamId::from_bytes(b))
    }

    fn bytes(&mut self) -> Result<Bytes, Corrupt> {
        let n = usize::try_from(self.varint()?).map_err(|_| Corrupt)?;
        Ok(Bytes::copy_from_slice(self.take(n)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> StreamValue {
        let mut s = StreamValue {
            last_id: StreamId::new(9, 1),
            max_deleted: StreamId::new(3, 0),
            entries_added: 4,
            ..Default::default()
        };
        s.append(
            StreamId::new(5, 0),
            vec![Bytes::from("f"), Bytes::from("v")],
        );
        s.append(StreamId::new(9, 1), vec![]);
        let mut g = Group::new(StreamId::new(5, 0), Some(3));
        g.consumers.insert(Bytes::from("alice"), Consumer::new(7));
        g.consumers.insert(
            Bytes::from("bob"),
            Consumer {
                seen_time: 8,
                active_time: Some(9),
            },
        );
        g.pending.insert(
            StreamId::new(5, 0),
            Pending {
                consumer: Bytes::from("bob"),
                delivery_time: 100,
                delivery_count: 2,
            },
        );
        s.groups.insert(Bytes::from("g"), g);
        s.groups
            .insert(Bytes::from("h"), Group::new(StreamId::MIN, None));
        s
    }

    #[test]
    fn round_trips() {
        let s = sample();
        assert_eq!(StreamValue::decode(&s.encode()), Ok(s));
        let empty = StreamValue::default();
        assert_eq!(StreamValue::decode(&empty.encode()), Ok(empty));
    }

    #[test]
    fn nodes_fill_then_split_and_go_when_emptied() {
        let mut s = StreamValue::default();
        for i in 1..=250 {
            s.append(StreamId::new(i, 0), vec![]);
        }
        let counts: Vec<u32> = s.nodes.iter().map(|n| n.appended).collect();
        assert_eq!(counts, [100, 100, 50]);
        for i in 101..=200 {
            assert!(s.remove(StreamId::new(i, 0)));
        }
        assert_eq!(s.nodes.len(), 2, "the emptied middle node went");
        assert!(!s.remove(StreamId::new(150, 0)));
        assert_eq!(s.remove_node(0), 100);
        assert_eq!(s.len(), 50);
        assert_eq!(s.first_id(), StreamId::new(201, 0));
    }

    #[test]
    fn damage_is_corrupt_never_a_panic() {
        let bytes = sample().encode();
        for cut in 0..bytes.len() {
            assert!(StreamValue::decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..3000 {
            let mut b = bytes.clone();
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let i = (seed as usize) % b.len();
            b[i] = (seed >> 40) as u8;
            let _ = StreamValue::decode(&b);
        }
    }
}
