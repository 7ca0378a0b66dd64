//! A stream's two forms in the pool. A small stream is packed: the whole
//! [`StreamValue`] in the key's object. Past [`CHUNKED_AT`] bytes its entries move
//! into a chunk tree ordered by ID ([`crate::tree`], records as
//! [`value::encode_entry`] writes them, key = the 16-byte ID), and the object holds the
//! tree's root followed by the head: the packed form without entries (counters,
//! consumer groups with their pending entries and consumers, the node shapes that `~`
//! trimming follows). The head's first byte (0x53) is no tree root, so the root is
//! found with [`TreeRoot::parse_all`] and everything after it is the head.
//!
//! The hot commands touch the tree where they need it: XADD appends at its end and
//! trims its front ([`super::add`]), XRANGE, XREVRANGE and XREAD read one range, XLEN
//! reads the root's count. The other commands ([`load`], [`commit`]) read every entry
//! and write back only the entries that changed, so they cost what the packed form
//! costs. An emptied stream is stored packed again (it stays a key, as in Redis).

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use dmc_dht::{Change, ValueKind};
use dmc_resp::Reply;
use dmc_umo::chunk::{ROOT_LEN, TreeRoot};

use super::id::StreamId;
use super::value::{self, StreamValue};
use crate::big::{self, READ_ATTEMPTS, tag};
use crate::packed::Corrupt;
use crate::tree::{Tree, TreeError};
use crate::{Engine, error_reply};

const KIND: ValueKind = ValueKind::Stream;
/// A stream whose packed form passes this many bytes is stored chunked.
pub const CHUNKED_AT: usize = big::TREE_AT;
/// Entries read per step of a range.
const PAGE: u64 = 128;

/// A stream's value as stored.
pub(crate) enum Form {
    Packed(StreamValue),
    /// Entries in the tree `root`; everything else in `head` (no entries in it).
    Chunked {
        root: TreeRoot,
        head: StreamValue,
    },
}

impl Form {
    pub fn parse(v: &[u8]) -> Result<Form, Corrupt> {
        match TreeRoot::parse_all(v)[..] {
            [] => Ok(Form::Packed(StreamValue::decode(v)?)),
            [root] => {
                let head = StreamValue::decode(v.get(ROOT_LEN..).ok_or(Corrupt)?)?;
                if !head.entries.is_empty() {
                    return Err(Corrupt);
                }
                Ok(Form::Chunked { root, head })
            }
            _ => Err(Corrupt),
        }
    }
}

/// The key ordering the entries tree: the record's ID.
fn id_key(rec: &[u8]) -> Bytes {
    Bytes::copy_from_slice(rec.get(..16).unwrap_or(rec))
}

/// An entry as a record of the tree.
pub(crate) fn record(id: StreamId, fields: &[Bytes]) -> Bytes {
    let mut out = Vec::new();
    value::encode_entry(&mut out, id, fields);
    out.into()
}

pub(crate) fn parse_record(rec: &[u8]) -> Result<(StreamId, Vec<Bytes>), TreeError> {
    value::decode_entry(rec).map_err(|_| TreeError::Stale)
}

/// The entries tree of `key`.
pub(crate) fn open<'p>(engine: &'p Engine, db: u8, key: &[u8], root: TreeRoot) -> Tree<'p> {
    Tree::open(engine.dht.pool(), tag(db, key), root, Some(id_key))
}

/// The entries a change of a chunked stream reads.
pub(crate) enum Need {
    All,
    /// The first and the last entry (so that `first_id`, the top ID and the length
    /// hold), the entries from each `(start, at most n)`, and those of `ids`; the
    /// others stay in the tree (`StreamValue::unloaded`).
    Window {
        ranges: Vec<(StreamId, u64)>,
        ids: Vec<StreamId>,
    },
}

impl Need {
    /// The first and last entries only: a change of groups, pending entries or
    /// consumers.
    pub fn ends() -> Need {
        Need::Window {
            ranges: Vec::new(),
            ids: Vec::new(),
        }
    }
}

/// The entries of the tree `root` of `key` that `need` names.
pub(crate) async fn load_entries(
    engine: &Engine,
    db: u8,
    key: &[u8],
    root: TreeRoot,
    need: &Need,
) -> Result<BTreeMap<StreamId, Vec<Bytes>>, TreeError> {
    let t = open(engine, db, key, root);
    let (ranges, ids) = match need {
        Need::All => return all_entries(&t).await,
        Need::Window { ranges, ids } => (ranges, ids),
    };
    let mut out = BTreeMap::new();
    if t.is_empty() {
        return Ok(out);
    }
    for at in [0, t.len() - 1] {
        let rec = t.get(at).await?.ok_or(TreeError::Stale)?;
        let (id, fields) = parse_record(&rec)?;
        out.insert(id, fields);
    }
    for &(start, n) in ranges {
        out.extend(forward(&t, start, StreamId::MAX, n).await?);
    }
    for id in ids {
        if let (_, Some(rec)) = t.seek(&id.to_bytes()).await?
            && rec.get(..16) == Some(&id.to_bytes()[..])
        {
            let (id, fields) = parse_record(&rec)?;
            out.insert(id, fields);
        }
    }
    Ok(out)
}

/// Every entry of a tree.
async fn all_entries(t: &Tree<'_>) -> Result<BTreeMap<StreamId, Vec<Bytes>>, TreeError> {
    let mut out = BTreeMap::new();
    let mut at = 0;
    while at < t.len() {
        let recs = t.range(at, at + PAGE * 8 - 1).await?;
        if recs.is_empty() {
            return Err(TreeError::Stale);
        }
        at += recs.len() as u64;
        for rec in recs {
            let (id, fields) = parse_record(&rec)?;
            out.insert(id, fields);
        }
    }
    Ok(out)
}

fn try_again() -> Reply {
    Reply::err("TRYAGAIN the stream changed while it was read, try again")
}

/// The stream value stored at `key`, if any; WRONGTYPE for another type.
async fn stored(engine: &Engine, db: u8, key: &[u8]) -> Result<Option<Bytes>, Reply> {
    match engine.read_stored(db, key).await.map_err(error_reply)? {
        Some((KIND, v)) => Ok(Some(v)),
        Some(_) => Err(error_reply(dmc_dht::DhtError::WrongType)),
        None => Ok(None),
    }
}

/// The whole stream at `key` (`None`: missing); WRONGTYPE for another type.
pub(crate) async fn load(
    engine: &Engine,
    db: u8,
    key: &[u8],
) -> Result<Option<StreamValue>, Reply> {
    for _ in 0..READ_ATTEMPTS {
        let Some(v) = stored(engine, db, key).await? else {
            return Ok(None);
        };
        match Form::parse(&v)? {
            Form::Packed(s) => return Ok(Some(s)),
            Form::Chunked { root, mut head } => {
                match all_entries(&open(engine, db, key, root)).await {
                    Ok(entries) => {
                        head.entries = entries;
                        return Ok(Some(head));
                    }
                    Err(TreeError::Stale) => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
    }
    Err(try_again())
}

/// The stream at `key` without its entries when they are in a tree: the head, whose
/// `len()` counts them (XLEN, the checks before a read). A packed stream comes whole.
pub(crate) async fn load_head(
    engine: &Engine,
    db: u8,
    key: &[u8],
) -> Result<Option<StreamValue>, Reply> {
    let Some(v) = stored(engine, db, key).await? else {
        return Ok(None);
    };
    Ok(Some(match Form::parse(&v)? {
        Form::Packed(s) => s,
        Form::Chunked { root, mut head } => {
            head.unloaded = root.count;
            head
        }
    }))
}

/// The entries of `key` with IDs in `start..=end`, at most `limit`, from the end when
/// `rev` (`None`: the key is missing).
pub(crate) async fn range(
    engine: &Engine,
    db: u8,
    key: &[u8],
    (start, end): (StreamId, StreamId),
    limit: u64,
    rev: bool,
) -> Result<Option<Vec<(StreamId, Vec<Bytes>)>>, Reply> {
    for _ in 0..READ_ATTEMPTS {
        let Some(v) = stored(engine, db, key).await? else {
            return Ok(None);
        };
        if start > end {
            return Ok(Some(Vec::new()));
        }
        let root = match TreeRoot::parse_all(&v)[..] {
            [root] => root,
            [] => {
                let s = StreamValue::decode(&v)?;
                let take = usize::try_from(limit).unwrap_or(usize::MAX);
                let r = s.entries.range(start..=end);
                let pick = |(id, f): (&StreamId, &Vec<Bytes>)| (*id, f.clone());
                return Ok(Some(match rev {
                    true => r.rev().take(take).map(pick).collect(),
                    false => r.take(take).map(pick).collect(),
                }));
            }
            _ => return Err(Corrupt.into()),
        };
        let t = open(engine, db, key, root);
        let read = match rev {
            false => forward(&t, start, end, limit).await,
            true => backward(&t, start, end, limit).await,
        };
        match read {
            Ok(out) => return Ok(Some(out)),
            Err(TreeError::Stale) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Err(try_again())
}

async fn forward(
    t: &Tree<'_>,
    start: StreamId,
    end: StreamId,
    limit: u64,
) -> Result<Vec<(StreamId, Vec<Bytes>)>, TreeError> {
    let mut out = Vec::new();
    if start > end {
        return Ok(out);
    }
    let (mut at, _) = t.seek(&start.to_bytes()).await?;
    while (out.len() as u64) < limit && at < t.len() {
        let n = (limit - out.len() as u64).min(PAGE);
        let recs = t.range(at, at + n - 1).await?;
        if recs.is_empty() {
            return Err(TreeError::Stale);
        }
        at += recs.len() as u64;
        for rec in recs {
            let (id, fields) = parse_record(&rec)?;
            if id > end {
                return Ok(out);
            }
            out.push((id, fields));
        }
    }
    Ok(out)
}

async fn backward(
    t: &Tree<'_>,
    start: StreamId,
    end: StreamId,
    limit: u64,
) -> Result<Vec<(StreamId, Vec<Bytes>)>, TreeError> {
    let mut out = Vec::new();
    if start > end {
        return Ok(out);
    }
    // Past the last entry not above `end`.
    let mut past = match end.next() {
        Some(after) => t.seek(&after.to_bytes()).await?.0,
        None => t.len(),
    };
    while (out.len() as u64) < limit && past > 0 {
        let n = (limit - out.len() as u64).min(PAGE).min(past);
        let recs = t.range(past - n, past - 1).await?;
        if recs.len() as u64 != n {
            return Err(TreeError::Stale);
        }
        past -= n;
        for rec in recs.iter().rev() {
            let (id, fields) = parse_record(rec)?;
            if id < start {
                return Ok(out);
            }
            out.push((id, fields));
        }
    }
    Ok(out)
}

/// The stored value of `key` read for a change, with its parsed form (`None`:
/// missing); WRONGTYPE for another type. Read from the pool, not the cache.
pub(crate) async fn read_for_change(
    engine: &Engine,
    db: u8,
    key: &[u8],
) -> Result<Option<(Bytes, Form)>, Reply> {
    match engine.dht.get(db, key).await.map_err(error_reply)? {
        Some(e) if e.kind == KIND => {
            let form = Form::parse(&e.value)?;
            Ok(Some((e.value, form)))
        }
        Some(_) => Err(error_reply(dmc_dht::DhtError::WrongType)),
        None => Ok(None),
    }
}

/// Stores `new` as `key`'s stream if the key still holds `old` (the value read:
/// `None`, missing; with the root of its tree when it was chunked, and the IDs its
/// tree held). A chunked stream stays chunked and only the entries that changed are
/// written; a packed one becomes chunked past [`CHUNKED_AT`]; an emptied one is packed
/// again. Whether it committed.
pub(crate) async fn commit(
    engine: &Engine,
    db: u8,
    key: &[u8],
    old: Option<&Bytes>,
    old_tree: Option<(TreeRoot, &BTreeSet<StreamId>)>,
    new: &StreamValue,
) -> Result<bool, Reply> {
    let packed =
        |bytes: Vec<u8>| big::commit(engine, db, key, KIND, old, Change::Write(bytes.into()));
    if new.entries.is_empty() {
        return packed(new.encode()).await;
    }
    let head = new.encode_head();
    match old_tree {
        Some((root, had)) => {
            let mut t = open(engine, db, key, root);
            for id in had.iter().filter(|id| !new.entries.contains_key(id)) {
                t.remove_key(&id.to_bytes()).await?;
            }
            for (id, fields) in new.entries.iter().filter(|(id, _)| !had.contains(id)) {
                t.upsert(record(*id, fields)).await?;
            }
            let kinds = (KIND, old);
            big::commit_trees_with(engine, db, key, kinds, vec![t], true, &head).await
        }
        None if new.unloaded > 0 => Err(Reply::err(
            "ERR internal: a stream loaded in part has no tree to keep the rest",
        )),
        None => {
            let whole = new.encode();
            if whole.len() <= CHUNKED_AT {
                return packed(whole).await;
            }
            let records = new.entries.iter().map(|(id, f)| record(*id, f)).collect();
            let t = Tree::build(engine.dht.pool(), tag(db, key), 0, records, Some(id_key));
            big::commit_trees_with(engine, db, key, (KIND, old), vec![t], false, &head).await
        }
    }
}
