//! The hash family: HSET, HGET, HDEL, HINCRBY, HRANDFIELD, HSCAN and the rest, with
//! Redis 7 semantics, replies (RESP2 and RESP3 shapes) and error texts.
//!
//! A hash is stored packed ([`crate::packed`]: field, value pairs in insertion order).
//! Reads walk the packed value without building a map; writes decode it into a
//! [`HashValue`], edit it and commit it whole through [`collection::change`].

use bytes::Bytes;
use dmc_dht::{Change, ValueKind};
use dmc_resp::Reply;
use indexmap::IndexMap;

use crate::collection::{self, MAX_LISTPACK_ENTRIES, MAX_LISTPACK_VALUE};
use crate::packed::{Corrupt, Packed, Writer, element_len};
use crate::table::HashCmd;
use crate::{Engine, NOT_INTEGER, SYNTAX, Session, parse_i64};

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
            let added = tri!(
                collection::change(engine, db, key, KIND, |cur| {
                    let mut h = match cur {
                        Some(p) => HashValue::decode(&p)?,
                        None => HashValue::default(),
                    };
                    let mut added = 0;
                    for pair in args[2..].chunks_exact(2) {
                        added += h.set(pair[0].clone(), pair[1].clone()) as i64;
                    }
                    Ok((h.into_change(), added))
                })
                .await
            );
            if cmd == HashCmd::HSet {
                Reply::Int(added)
            } else {
                Reply::ok()
            }
        }
        HashCmd::HSetNx => {
            let set = tri!(
                collection::change(engine, db, key, KIND, |cur| {
                    let mut h = match cur {
                        Some(p) => HashValue::decode(&p)?,
                        None => HashValue::default(),
                    };
                    if h.fields.contains_key(&args[2]) {
                        return Ok((Change::Keep, false));
                    }
                    h.set(args[2].clone(), args[3].clone());
                    Ok((h.into_change(), true))
                })
                .await
            );
            Reply::Int(set as i64)
        }
        HashCmd::HDel => {
            let removed = tri!(
                collection::change(engine, db, key, KIND, |cur| {
                    let Some(p) = cur else {
                        return Ok((Change::Keep, 0));
                    };
                    let mut h = HashValue::decode(&p)?;
                    let removed = args[2..]
                        .iter()
                        .filter(|f| h.fields.shift_remove(&f[..]).is_some())
                        .count() as i64;
                    if removed == 0 {
                        return Ok((Change::Keep, 0));
                    }
                    Ok((h.into_change(), removed))
                })
                .await
            );
            Reply::Int(removed)
        }
        HashCmd::HIncrBy => {
            let Some(by) = parse_i64(&args[3]) else {
                return Reply::err(NOT_INTEGER);
            };
            let next = tri!(
                collection::change(engine, db, key, KIND, |cur| {
                    let mut h = match cur {
                        Some(p) => HashValue::decode(&p)?,
                        None => HashValue::default(),
                    };
                    let old = match h.fields.get(&args[2]) {
                        Some(v) => parse_i64(v)
                            .ok_or_else(|| Reply::err("ERR hash value is not an integer"))?,
                        None => 0,
                    };
                    let next = old
                        .checked_add(by)
                        .ok_or_else(|| Reply::err("ERR increment or decrement would overflow"))?;
                    h.set(args[2].clone(), Bytes::from(next.to_string()));
                    Ok((h.into_change(), next))
                })
                .await
            );
            Reply::Int(next)
        }
        HashCmd::HIncrByFloat => {
            let Some(by) = parse_float(&args[3]) else {
                return Reply::err("ERR value is not a valid float");
            };
            let text = tri!(
                collection::change(engine, db, key, KIND, |cur| {
                    let mut h = match cur {
                        Some(p) => HashValue::decode(&p)?,
                        None => HashValue::default(),
                    };
                    let old = match h.fields.get(&args[2]) {
                        Some(v) => parse_float(v)
                            .ok_or_else(|| Reply::err("ERR hash value is not a float"))?,
                        None => 0.0,
                    };
                    let next = old + by;
                    if !next.is_finite() {
                        return Err(Reply::err("ERR increment would produce NaN or Infinity"));
                    }
                    let text = Bytes::from(dmc_resp::format_double(next));
                    h.set(args[2].clone(), text.clone());
                    Ok((h.into_change(), text))
                })
                .await
            );
            Reply::Bulk(text)
        }
        _ => read(engine, s, db, cmd, args).await,
    }
}

/// The read-only hash commands.
async fn read(engine: &Engine, s: &Session, db: u8, cmd: HashCmd, args: &[Bytes]) -> Reply {
    let key = &args[1];
    let p = tri!(collection::load(engine, db, key, KIND).await);
    match cmd {
        HashCmd::HGet => match p {
            Some(p) => match tri!(find(&p, &args[2])) {
                Some(v) => Reply::Bulk(v),
                None => Reply::Null,
            },
            None => Reply::Null,
        },
        HashCmd::HMGet => {
            let mut out = Vec::with_capacity(args.len() - 2);
            for f in &args[2..] {
                let v = match &p {
                    Some(p) => tri!(find(p, f)),
                    None => None,
                };
                out.push(v.map_or(Reply::Null, Reply::Bulk));
            }
            Reply::Array(out)
        }
        HashCmd::HExists => {
            let found = match &p {
                Some(p) => tri!(find(p, &args[2])).is_some(),
                None => false,
            };
            Reply::Int(found as i64)
        }
        HashCmd::HLen => Reply::Int(p.map_or(0, |p| p.count as i64)),
        HashCmd::HStrlen => {
            let len = match &p {
                Some(p) => tri!(find(p, &args[2])).map_or(0, |v| v.len()),
                None => 0,
            };
            Reply::Int(len as i64)
        }
        HashCmd::HKeys | HashCmd::HVals | HashCmd::HGetAll => {
            let all = match &p {
                Some(p) => tri!(pairs(p)),
                None => Vec::new(),
            };
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
        HashCmd::HRandField => rand_field(s, p, args),
        HashCmd::HScan => {
            let scan = tri!(collection::scan_args(args, true));
            let all = match &p {
                Some(p) if scan.cursor == 0 => tri!(pairs(p)),
                _ => Vec::new(),
            };
            let mut items = Vec::new();
            for (f, v) in all {
                if collection::matches(&scan.pattern, &f) {
                    items.push(Reply::Bulk(f));
                    if !scan.no_values {
                        items.push(Reply::Bulk(v));
                    }
                }
            }
            // A packed hash is visited whole by the first call.
            collection::scan_reply(0, items)
        }
        _ => Reply::err("ERR internal: a write reached the hash read path"),
    }
}

/// `HRANDFIELD key [count [WITHVALUES]]`.
fn rand_field(s: &Session, p: Option<Packed>, args: &[Bytes]) -> Reply {
    if args.len() == 2 {
        let Some(p) = p else { return Reply::Null };
        let all = tri!(pairs(&p));
        let i = collection::repeated_picks(all.len(), 1);
        return match i.first().and_then(|&i| all.get(i)) {
            Some((f, _)) => Reply::Bulk(f.clone()),
            None => Reply::Null,
        };
    }
    let count = tri!(collection::count_arg(&args[2]));
    let with_values = match args.get(3) {
        None => false,
        Some(a) if a.eq_ignore_ascii_case(b"WITHVALUES") && args.len() == 4 => true,
        Some(_) => return Reply::err(SYNTAX),
    };
    let all = match &p {
        Some(p) => tri!(pairs(p)),
        None => Vec::new(),
    };
    if all.is_empty() || count == 0 {
        return Reply::Array(Vec::new());
    }
    let picks = if count > 0 {
        collection::distinct_picks(all.len(), count as usize)
    } else {
        collection::repeated_picks(all.len(), count.unsigned_abs() as usize)
    };
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
