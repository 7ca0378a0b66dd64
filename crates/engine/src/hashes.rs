//! The hash family: HSET, HGET, HDEL, HINCRBY, HRANDFIELD, HSCAN and the rest, with
//! Redis 7 semantics, replies (RESP2 and RESP3 shapes) and error texts.
//!
//! A small hash is stored packed ([`crate::packed`]: field, value pairs in insertion
//! order), a large one as a chunk tree of `field ‖ value` records ordered by
//! `xxh3(field) ‖ field` ([`crate::big`]). Reads of a packed hash walk it without
//! building a map; writes decode it into a [`HashValue`], edit it and encode it; a tree
//! is read and changed along the path of each field.

use bytes::Bytes;
use dmc_dht::{Change, ValueKind};
use dmc_resp::Reply;
use futures::FutureExt;
use futures::future::BoxFuture;
use indexmap::IndexMap;

use crate::big;
use crate::collection::{self, MAX_LISTPACK_ENTRIES, MAX_LISTPACK_VALUE};
use crate::packed::{Corrupt, Packed, Writer, element_len};
use crate::table::HashCmd;
use crate::tree::{Tree, TreeError};
use crate::{Engine, NOT_INTEGER, Session, notify, parse_i64};

const KIND: ValueKind = ValueKind::Hash;

/// A hash decoded for a change: fields in insertion order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HashValue {
    /// Past the listpack limits once (OBJECT ENCODING `hashtable` from then on).
    pub big: bool,
    pub fields: IndexMap<Bytes, Bytes>,
}

impl HashValue {
    pub fn decode(p: &Packed) -> Result<HashValue, Corrupt> {
        let mut fields = IndexMap::with_capacity(p.count as usize);
        let mut elements = p.elements();
        while let Some(field) = elements.next() {
            let value = elements.next().ok_or(Corrupt)??;
            fields.insert(field?, value);
        }
        if fields.len() != p.count as usize {
            return Err(Corrupt);
        }
        Ok(HashValue { big: p.big, fields })
    }

    /// Sets a field; true if it is new.
    pub fn set(&mut self, field: Bytes, value: Bytes) -> bool {
        self.big |= field.len() > MAX_LISTPACK_VALUE || value.len() > MAX_LISTPACK_VALUE;
        let new = self.fields.insert(field, value).is_none();
        self.big |= self.fields.len() > MAX_LISTPACK_ENTRIES;
        new
    }

    pub fn encode(&self) -> Vec<u8> {
        let size = self
            .fields
            .iter()
            .map(|(f, v)| element_len(f.len()) + element_len(v.len()))
            .sum();
        let mut w = Writer::new(self.big, size);
        for (f, v) in &self.fields {
            w.element(f);
            w.element(v);
            w.entry();
        }
        w.finish()
    }

    /// The change that stores this hash: its new value, or deleting an empty one.
    pub fn into_change(self) -> Change {
        if self.fields.is_empty() {
            Change::Delete
        } else {
            Change::Write(self.encode().into())
        }
    }
}

/// How hashes are stored: trees of `field ‖ value` records by `xxh3(field) ‖ field`.
const LAYOUT: big::Layout = big::Layout {
    kind: KIND,
    key_of: Some(record_key),
    records_of: packed_records,
};

/// A change of a hash that can be batched with others of the key (HSET, HMSET:
/// field, value pairs; HDEL: fields): fields added or removed.
#[derive(Debug, Clone)]
pub(crate) enum HashOp {
    Set(Vec<Bytes>),
    Del(Vec<Bytes>),
}

impl big::Edit for HashOp {
    type Value = HashValue;
    type Out = i64;

    fn layout() -> &'static big::Layout {
        &LAYOUT
    }

    fn decode(p: Option<Packed>) -> Result<Option<HashValue>, Reply> {
        Ok(p.map(|p| HashValue::decode(&p)).transpose()?)
    }

    fn encode(v: Option<HashValue>) -> Change {
        v.map_or(Change::Delete, HashValue::into_change)
    }

    fn apply_packed(&self, v: &mut Option<HashValue>) -> Result<(bool, i64), Reply> {
        Ok(match self {
            HashOp::Set(pairs) => {
                let h = v.get_or_insert_with(HashValue::default);
                let mut added = 0;
                for pair in pairs.chunks_exact(2) {
                    added += h.set(pair[0].clone(), pair[1].clone()) as i64;
                }
                (true, added)
            }
            HashOp::Del(fields) => {
                let removed = match v {
                    Some(h) => fields
                        .iter()
                        .filter(|f| h.fields.shift_remove(&f[..]).is_some())
                        .count() as i64,
                    None => 0,
                };
                (removed > 0, removed)
            }
        })
    }

    fn apply_tree<'a, 'p: 'a>(
        &'a self,
        t: &'a mut crate::tree::Tree<'p>,
    ) -> BoxFuture<'a, crate::big::TreeOutcome<i64>> {
        Box::pin(async move {
            Ok(Ok(match self {
                HashOp::Set(pairs) => {
                    let mut added = 0;
                    for pair in pairs.chunks_exact(2) {
                        added += t.upsert(record(&pair[0], &pair[1])).await?.is_none() as i64;
                    }
                    (true, added)
                }
                HashOp::Del(fields) => {
                    let mut removed = 0;
                    for f in fields {
                        removed += t.remove_key(&big::hashed_key(f)).await?.is_some() as i64;
                    }
                    (removed > 0, removed)
                }
            }))
        })
    }
}

crate::combine::batched_edit!(HashOp, hash_batches);

/// A tree record: `len(field) ‖ field ‖ value` (the length a varint).
fn record(field: &[u8], value: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(element_len(field.len()) + value.len());
    let mut w = Writer::new(false, 0);
    w.element(field);
    let head = w.finish();
    out.extend_from_slice(&head[crate::packed::HEADER..]);
    out.extend_from_slice(value);
    Bytes::from(out)
}

/// A record's field and value.
fn split_record(r: &Bytes) -> Option<(Bytes, Bytes)> {
    let mut len: usize = 0;
    let mut at = 0;
    loop {
        let b = *r.get(at)?;
        len |= usize::from(b & 0x7f) << (7 * at);
        at += 1;
        if b & 0x80 == 0 {
            break;
        }
        if at > 4 {
            return None;
        }
    }
    let end = at.checked_add(len).filter(|&e| e <= r.len())?;
    Some((r.slice(at..end), r.slice(end..)))
}

fn record_key(r: &[u8]) -> Bytes {
    let r = Bytes::copy_from_slice(r);
    match split_record(&r) {
        Some((f, _)) => big::hashed_key(&f),
        None => Bytes::new(),
    }
}

fn packed_records(p: &Packed) -> Result<Vec<Bytes>, Corrupt> {
    Ok(pairs(p)?.iter().map(|(f, v)| record(f, v)).collect())
}

/// The value of `field` in a hash's tree.
async fn tree_find(t: &Tree<'_>, field: &[u8]) -> Result<Option<Bytes>, TreeError> {
    let key = big::hashed_key(field);
    match t.seek(&key).await?.1 {
        Some(r) => match split_record(&r) {
            Some((f, v)) if f == field => Ok(Some(v)),
            Some(_) => Ok(None),
            None => Err(TreeError::Stale),
        },
        None => Ok(None),
    }
}

fn decode_or_new(cur: Option<Packed>) -> Result<HashValue, Reply> {
    Ok(match cur {
        Some(p) => HashValue::decode(&p)?,
        None => HashValue::default(),
    })
}

/// Sets one field to what `f` makes of its current value (`None`: absent); `f`
/// answers the new value (`None`: leave it) and the command's answer.
async fn update_field<T: Send>(
    engine: &Engine,
    db: u8,
    key: &[u8],
    field: &Bytes,
    f: impl Fn(Option<&Bytes>) -> Result<(Option<Bytes>, T), Reply> + Sync,
) -> Result<T, Reply> {
    let f = &f;
    big::edit(
        engine,
        db,
        key,
        &LAYOUT,
        |cur| {
            let mut h = decode_or_new(cur)?;
            let (new, answer) = f(h.fields.get(field))?;
            match new {
                Some(v) => {
                    h.set(field.clone(), v);
                    Ok((h.into_change(), answer))
                }
                None => Ok((Change::Keep, answer)),
            }
        },
        |mut t| {
            async move {
                let out: Result<_, Reply> = async {
                    let old = tree_find(&t, field).await?;
                    let (new, answer) = f(old.as_ref())?;
                    match new {
                        Some(v) => {
                            t.upsert(record(field, &v)).await?;
                            Ok((true, answer))
                        }
                        None => Ok((false, answer)),
                    }
                }
                .await;
                out.map(|(changed, answer)| (t, changed, answer))
            }
            .boxed()
        },
    )
    .await
}

/// The value of `field` in a packed hash, found without decoding the rest.
fn find(p: &Packed, field: &[u8]) -> Result<Option<Bytes>, Corrupt> {
    let mut elements = p.elements();
    while let Some(f) = elements.next() {
        let v = elements.next().ok_or(Corrupt)??;
        if f? == field {
            return Ok(Some(v));
        }
    }
    Ok(None)
}

/// Every (field, value) pair of a packed hash.
fn pairs(p: &Packed) -> Result<Vec<(Bytes, Bytes)>, Corrupt> {
    let all = p.collect(2)?;
    let mut out = Vec::with_capacity(all.len() / 2);
    let mut it = all.into_iter();
    while let (Some(f), Some(v)) = (it.next(), it.next()) {
        out.push((f, v));
    }
    Ok(out)
}

macro_rules! tri {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(e) => return Reply::from(e),
        }
    };
}

pub async fn run(engine: &Engine, s: &mut Session, cmd: HashCmd, args: &[Bytes]) -> Reply {
    let db = engine.physical_db(s.db);
    let key = &args[1];
    match cmd {
        HashCmd::HSet | HashCmd::HMSet => {
            if !args.len().is_multiple_of(2) {
                let name = if cmd == HashCmd::HSet {
                    "hset"
                } else {
                    "hmset"
                };
                return Reply::err(format!(
                    "ERR wrong number of arguments for '{name}' command"
                ));
            }
            let op = HashOp::Set(args[2..].to_vec());
            let added = tri!(engine.hash_batches.submit(engine, db, key, op).await);
            engine.notify(notify::HASH, "hset", db, key);
            if cmd == HashCmd::HSet {
                Reply::Int(added)
            } else {
                Reply::ok()
            }
        }
        HashCmd::HSetNx => {
            let value = &args[3];
            let set = tri!(
                update_field(engine, db, key, &args[2], |old| {
                    Ok(match old {
                        Some(_) => (None, false),
                        None => (Some(value.clone()), true),
                    })
                })
                .await
            );
            if set {
                engine.notify(notify::HASH, "hset", db, key);
            }
            Reply::Int(set as i64)
        }
        HashCmd::HDel => {
            let op = HashOp::Del(args[2..].to_vec());
            let removed = tri!(engine.hash_batches.submit(engine, db, key, op).await);
            if removed > 0 {
                engine.notify(notify::HASH, "hdel", db, key);
                engine.notify_if_emptied(db, key).await;
            }
            Reply::Int(removed)
        }
        HashCmd::HIncrBy => {
            let Some(by) = parse_i64(&args[3]) else {
                return Reply::err(NOT_INTEGER);
            };
            let next = tri!(
                update_field(engine, db, key, &args[2], |old| {
                    let old = match old {
                        Some(v) => parse_i64(v)
                            .ok_or_else(|| Reply::err("ERR hash value is not an integer"))?,
                        None => 0,
                    };
                    let next = old
                        .checked_add(by)
                        .ok_or_else(|| Reply::err("ERR increment or decrement would overflow"))?;
                    Ok((Some(Bytes::from(next.to_string())), next))
                })
                .await
            );
            engine.notify(notify::HASH, "hincrby", db, key);
            Reply::Int(next)
        }
        HashCmd::HIncrByFloat => {
            let Some(by) = parse_float(&args[3]) else {
                return Reply::err("ERR value is not a valid float");
            };
            let text = tri!(
                update_field(engine, db, key, &args[2], |old| {
                    let old = match old {
                        Some(v) => parse_float(v)
                            .ok_or_else(|| Reply::err("ERR hash value is not a float"))?,
                        None => 0.0,
                    };
                    let next = old + by;
                    if !next.is_finite() {
                        return Err(Reply::err("ERR increment would produce NaN or Infinity"));
                    }
                    let text = Bytes::from(dmc_resp::format_human(next));
                    Ok((Some(text.clone()), text))
                })
                .await
            );
            engine.notify(notify::HASH, "hincrbyfloat", db, key);
            Reply::Bulk(text)
        }
        _ => read(engine, s, db, cmd, args).await,
    }
}

/// The values of `fields` in `key` (`None`: the key does not exist).
/// The value of `field` in the hash `key` (`None`: no such field or key); WRONGTYPE
/// for another type. SORT's `->field` patterns read through it.
pub(crate) async fn field(
    engine: &Engine,
    db: u8,
    key: &[u8],
    field: &Bytes,
) -> Result<Option<Bytes>, Reply> {
    let found = lookup(engine, db, key, std::slice::from_ref(field)).await?;
    Ok(found.and_then(|mut v| v.pop()).flatten())
}

async fn lookup(
    engine: &Engine,
    db: u8,
    key: &[u8],
    fields: &[Bytes],
) -> Result<Option<Vec<Option<Bytes>>>, Reply> {
    big::read(
        engine,
        db,
        key,
        &LAYOUT,
        |p| match p {
            Some(p) => {
                Ok(Some(fields.iter().map(|f| find(&p, f)).collect::<Result<
                    Vec<_>,
                    Corrupt,
                >>(
                )?))
            }
            None => Ok(None),
        },
        |t| {
            async move {
                let mut out = Vec::with_capacity(fields.len());
                for f in fields {
                    out.push(tree_find(&t, f).await?);
                }
                Ok(Some(out))
            }
            .boxed()
        },
    )
    .await
}

/// Every (field, value) of `key`, and how many (empty if missing).
pub(crate) async fn all_pairs(
    engine: &Engine,
    db: u8,
    key: &[u8],
) -> Result<Vec<(Bytes, Bytes)>, Reply> {
    big::read(
        engine,
        db,
        key,
        &LAYOUT,
        |p| match p {
            Some(p) => Ok(pairs(&p)?),
            None => Ok(Vec::new()),
        },
        |t| {
            async move {
                let records = t.range(0, u64::MAX).await?;
                records
                    .iter()
                    .map(|r| split_record(r).ok_or(TreeError::Stale))
                    .collect()
            }
            .boxed()
        },
    )
    .await
}

/// One HSCAN page: the next cursor and the pairs (a packed hash whole, cursor 0).
async fn scan_pairs(
    engine: &Engine,
    db: u8,
    key: &[u8],
    cursor: u64,
    count: usize,
) -> Result<(u64, Vec<(Bytes, Bytes)>), Reply> {
    big::read(
        engine,
        db,
        key,
        &LAYOUT,
        |p| match p {
            Some(p) => Ok((0, pairs(&p)?)),
            None => Ok((0, Vec::new())),
        },
        |t| {
            async move {
                let (records, next) = t.scan_page(cursor, count).await?;
                let page = records
                    .iter()
                    .map(|r| split_record(r).ok_or(TreeError::Stale))
                    .collect::<Result<_, _>>()?;
                Ok((next, page))
            }
            .boxed()
        },
    )
    .await
}

/// The read-only hash commands.
async fn read(engine: &Engine, s: &Session, db: u8, cmd: HashCmd, args: &[Bytes]) -> Reply {
    let key = &args[1];
    match cmd {
        HashCmd::HGet | HashCmd::HExists | HashCmd::HStrlen => {
            let v = tri!(lookup(engine, db, key, &args[2..3]).await)
                .and_then(|mut v| v.pop())
                .flatten();
            match cmd {
                HashCmd::HGet => v.map_or(Reply::Null, Reply::Bulk),
                HashCmd::HExists => Reply::Int(v.is_some() as i64),
                _ => Reply::Int(v.map_or(0, |v| v.len() as i64)),
            }
        }
        HashCmd::HMGet => {
            let found = tri!(lookup(engine, db, key, &args[2..]).await);
            let found = found.unwrap_or_else(|| vec![None; args.len() - 2]);
            Reply::Array(
                found
                    .into_iter()
                    .map(|v| v.map_or(Reply::Null, Reply::Bulk))
                    .collect(),
            )
        }
        HashCmd::HLen => Reply::Int(tri!(
            big::read(
                engine,
                db,
                key,
                &LAYOUT,
                |p| Ok(p.map_or(0, |p| i64::from(p.count))),
                |t| async move { Ok(t.len() as i64) }.boxed(),
            )
            .await
        )),
        HashCmd::HKeys | HashCmd::HVals | HashCmd::HGetAll => {
            let all = tri!(all_pairs(engine, db, key).await);
            match cmd {
                HashCmd::HKeys => {
                    Reply::Array(all.into_iter().map(|(f, _)| Reply::Bulk(f)).collect())
                }
                HashCmd::HVals => {
                    Reply::Array(all.into_iter().map(|(_, v)| Reply::Bulk(v)).collect())
                }
                _ => Reply::Map(
                    all.into_iter()
                        .map(|(f, v)| (Reply::Bulk(f), Reply::Bulk(v)))
                        .collect(),
                ),
            }
        }
        HashCmd::HRandField => rand_field(s, tri!(all_pairs(engine, db, key).await), args),
        HashCmd::HScan => {
            let scan = tri!(collection::scan_args(args, true));
            let (next, page) = tri!(scan_pairs(engine, db, key, scan.cursor, scan.count).await);
            let mut items = Vec::new();
            for (f, v) in page {
                if collection::matches(&scan.pattern, &f) {
                    items.push(Reply::Bulk(f));
                    if !scan.no_values {
                        items.push(Reply::Bulk(v));
                    }
                }
            }
            collection::scan_reply(next, items)
        }
        _ => Reply::err("ERR internal: a write reached the hash read path"),
    }
}

/// `HRANDFIELD key [count [WITHVALUES]]`.
fn rand_field(s: &Session, all: Vec<(Bytes, Bytes)>, args: &[Bytes]) -> Reply {
    if args.len() == 2 {
        let i = collection::repeated_picks(all.len(), 1);
        return match i.first().and_then(|&i| all.get(i)) {
            Some((f, _)) => Reply::Bulk(f.clone()),
            None => Reply::Null,
        };
    }
    let count = tri!(collection::count_arg(&args[2]));
    let with_values = tri!(collection::with_flag(args, b"WITHVALUES"));
    if all.is_empty() || count == 0 {
        return Reply::Array(Vec::new());
    }
    let picks = collection::count_picks(all.len(), count);
    let mut out = Vec::with_capacity(picks.len() * if with_values { 2 } else { 1 });
    for i in picks {
        let Some((f, v)) = all.get(i) else { continue };
        match (with_values, s.proto) {
            (false, _) => out.push(Reply::Bulk(f.clone())),
            (true, 3) => out.push(Reply::Array(vec![
                Reply::Bulk(f.clone()),
                Reply::Bulk(v.clone()),
            ])),
            (true, _) => {
                out.push(Reply::Bulk(f.clone()));
                out.push(Reply::Bulk(v.clone()));
            }
        }
    }
    Reply::Array(out)
}

/// Redis's float argument (`strtold` without spaces; no NaN).
pub(crate) fn parse_float(b: &[u8]) -> Option<f64> {
    std::str::from_utf8(b)
        .ok()
        .filter(|s| !s.is_empty() && !s.contains(char::is_whitespace))
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|f| !f.is_nan())
}

/// Redis's name for a packed hash's encoding.
pub fn encoding(p: &Packed) -> &'static str {
    if p.big { "hashtable" } else { "listpack" }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hash_round_trips_and_turns_big_past_the_limits() {
        let mut h = HashValue::default();
        assert!(h.set("a".into(), "1".into()));
        assert!(!h.set("a".into(), "2".into()));
        let p = Packed::parse(&Bytes::from(h.encode())).unwrap();
        assert_eq!(HashValue::decode(&p).unwrap(), h);
        assert_eq!(encoding(&p), "listpack");
        assert_eq!(find(&p, b"a").unwrap().as_deref(), Some(&b"2"[..]));
        assert_eq!(find(&p, b"b").unwrap(), None);
        h.set("long".into(), Bytes::from(vec![b'x'; 65]));
        h.fields.shift_remove(&b"long"[..]);
        let p = Packed::parse(&Bytes::from(h.encode())).unwrap();
        assert_eq!(
            encoding(&p),
            "hashtable",
            "conversion is one-way, as in Redis"
        );
        assert_eq!(HashValue::default().into_change(), Change::Delete);
    }
}
