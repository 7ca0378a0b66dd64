//! The set family: SADD, SREM, SISMEMBER, SPOP, SRANDMEMBER, SMOVE, the algebra
//! (SINTER, SUNION, SDIFF, their STORE forms, SINTERCARD) and SSCAN, with Redis 7
//! semantics, replies and error texts.
//!
//! A set is stored packed ([`crate::packed`]: members in insertion order). Reads walk
//! or collect the packed value; writes decode it into a [`SetValue`], edit it and commit
//! it whole through [`collection::change`].

use bytes::Bytes;
use dmc_dht::{Change, ValueKind};
use dmc_resp::Reply;
use indexmap::IndexSet;

use crate::collection::{self, MAX_LISTPACK_ENTRIES, MAX_LISTPACK_VALUE};
use crate::packed::{Corrupt, Packed, Writer, element_len};
use crate::table::SetCmd;
use crate::{Engine, NOT_INTEGER, SYNTAX, Session, parse_i64};

const KIND: ValueKind = ValueKind::Set;
/// Redis's `set-max-intset-entries`.
pub const MAX_INTSET_ENTRIES: usize = 512;

/// A set decoded for a change.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SetValue {
    /// Past the small-set limits once (OBJECT ENCODING `hashtable` from then on).
    pub big: bool,
    pub members: IndexSet<Bytes>,
}

impl SetValue {
    pub fn decode(p: &Packed) -> Result<SetValue, Corrupt> {
        let members: IndexSet<Bytes> = p.collect(1)?.into_iter().collect();
        if members.len() != p.count as usize {
            return Err(Corrupt);
        }
        Ok(SetValue {
            big: p.big,
            members,
        })
    }

    pub fn from_members(members: IndexSet<Bytes>) -> SetValue {
        let mut s = SetValue {
            big: false,
            members,
        };
        s.big = s.past_limits();
        s
    }

    fn past_limits(&self) -> bool {
        let n = self.members.len();
        let ints = self.members.iter().all(|m| parse_i64(m).is_some());
        if ints && n <= MAX_INTSET_ENTRIES {
            return false;
        }
        n > MAX_LISTPACK_ENTRIES || self.members.iter().any(|m| m.len() > MAX_LISTPACK_VALUE)
    }

    pub fn add(&mut self, m: Bytes) -> bool {
        let new = self.members.insert(m);
        if new && !self.big {
            self.big = self.past_limits();
        }
        new
    }

    pub fn encode(&self) -> Vec<u8> {
        let size = self.members.iter().map(|m| element_len(m.len())).sum();
        let mut w = Writer::new(self.big, size);
        for m in &self.members {
            w.element(m);
            w.entry();
        }
        w.finish()
    }

    pub fn into_change(self) -> Change {
        if self.members.is_empty() {
            Change::Delete
        } else {
            Change::Write(self.encode().into())
        }
    }
}

/// Redis's name for a packed set's encoding (intset, listpack, hashtable).
pub fn encoding(p: &Packed) -> Result<&'static str, Corrupt> {
    if p.big {
        return Ok("hashtable");
    }
    let mut ints = true;
    for m in p.elements() {
        ints &= parse_i64(&m?).is_some();
    }
    Ok(if ints { "intset" } else { "listpack" })
}

fn decode_or_new(cur: Option<Packed>) -> Result<SetValue, Reply> {
    Ok(match cur {
        Some(p) => SetValue::decode(&p)?,
        None => SetValue::default(),
    })
}

fn contains(p: &Packed, m: &[u8]) -> Result<bool, Corrupt> {
    for e in p.elements() {
        if e? == m {
            return Ok(true);
        }
    }
    Ok(false)
}

/// The members of the set `key` (empty if missing); WRONGTYPE for another type.
pub(crate) async fn members(engine: &Engine, db: u8, key: &[u8]) -> Result<IndexSet<Bytes>, Reply> {
    match collection::load(engine, db, key, KIND).await? {
        Some(p) => Ok(SetValue::decode(&p)?.members),
        None => Ok(IndexSet::new()),
    }
}

macro_rules! tri {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(e) => return Reply::from(e),
        }
    };
}

fn set_reply(members: impl IntoIterator<Item = Bytes>) -> Reply {
    Reply::Set(members.into_iter().map(Reply::Bulk).collect())
}

pub async fn run(engine: &Engine, s: &mut Session, cmd: SetCmd, args: &[Bytes]) -> Reply {
    let db = engine.physical_db(s.db);
    let key = &args[1];
    match cmd {
        SetCmd::SAdd => Reply::Int(tri!(
            collection::change(engine, db, key, KIND, |cur| {
                let mut set = decode_or_new(cur)?;
                let added = args[2..].iter().filter(|m| set.add((*m).clone())).count() as i64;
                if added == 0 {
                    return Ok((Change::Keep, 0));
                }
                Ok((set.into_change(), added))
            })
            .await
        )),
        SetCmd::SRem => Reply::Int(tri!(
            collection::change(engine, db, key, KIND, |cur| {
                let Some(p) = cur else {
                    return Ok((Change::Keep, 0));
                };
                let mut set = SetValue::decode(&p)?;
                let removed = args[2..]
                    .iter()
                    .filter(|m| set.members.shift_remove(&m[..]))
                    .count() as i64;
                if removed == 0 {
                    return Ok((Change::Keep, 0));
                }
                Ok((set.into_change(), removed))
            })
            .await
        )),
        SetCmd::SPop => {
            let count = match args.get(2) {
                None => None,
                Some(c) => match parse_i64(c) {
                    Some(n) if n >= 0 => Some(n as usize),
                    Some(_) => return Reply::err("ERR value is out of range, must be positive"),
                    None => return Reply::err(NOT_INTEGER),
                },
            };
            if args.len() > 3 {
                return Reply::err(SYNTAX);
            }
            let popped = tri!(
                collection::change(engine, db, key, KIND, |cur| {
                    let Some(p) = cur else {
                        return Ok((Change::Keep, Vec::new()));
                    };
                    let mut set = SetValue::decode(&p)?;
                    let want = count.unwrap_or(1).min(set.members.len());
                    let mut picks = collection::distinct_picks(set.members.len(), want);
                    // Remove from the highest index down so the others stay valid.
                    picks.sort_unstable_by(|a, b| b.cmp(a));
                    let popped: Vec<Bytes> = picks
                        .into_iter()
                        .filter_map(|i| set.members.swap_remove_index(i))
                        .collect();
                    if popped.is_empty() {
                        return Ok((Change::Keep, popped));
                    }
                    Ok((set.into_change(), popped))
                })
                .await
            );
            match count {
                Some(_) => set_reply(popped),
                None => popped.into_iter().next().map_or(Reply::Null, Reply::Bulk),
            }
        }
        SetCmd::SMove => {
            let (src, dst, m) = (&args[1], &args[2], &args[3]);
            let _held = engine.lock_keys([&src[..], &dst[..]].into_iter()).await;
            tri!(collection::load(engine, db, dst, KIND).await);
            let moved = tri!(
                collection::change_locked(engine, db, src, KIND, |cur| {
                    let Some(p) = cur else {
                        return Ok((Change::Keep, false));
                    };
                    let mut set = SetValue::decode(&p)?;
                    if src == dst {
                        return Ok((Change::Keep, set.members.contains(&m[..])));
                    }
                    if !set.members.shift_remove(&m[..]) {
                        return Ok((Change::Keep, false));
                    }
                    Ok((set.into_change(), true))
                })
                .await
            );
            if moved && src != dst {
                tri!(
                    collection::change_locked(engine, db, dst, KIND, |cur| {
                        let mut set = decode_or_new(cur)?;
                        set.add(m.clone());
                        Ok((set.into_change(), ()))
                    })
                    .await
                );
            }
            Reply::Int(moved as i64)
        }
        SetCmd::SInterStore | SetCmd::SUnionStore | SetCmd::SDiffStore => {
            let op = match cmd {
                SetCmd::SInterStore => Algebra::Inter,
                SetCmd::SUnionStore => Algebra::Union,
                _ => Algebra::Diff,
            };
            let dst = &args[1];
            let _held = engine.lock_keys(args[1..].iter().map(|k| &k[..])).await;
            let result = tri!(algebra(engine, db, op, &args[2..]).await);
            let n = result.len() as i64;
            let value = (n > 0).then(|| SetValue::from_members(result).encode());
            tri!(collection::store(engine, db, dst, KIND, value).await);
            Reply::Int(n)
        }
        _ => read(engine, s, db, cmd, args).await,
    }
}

/// Which set algebra.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Algebra {
    Inter,
    Union,
    Diff,
}

/// The members of the algebra of the sets `keys` (missing keys are empty sets).
async fn algebra(
    engine: &Engine,
    db: u8,
    op: Algebra,
    keys: &[Bytes],
) -> Result<IndexSet<Bytes>, Reply> {
    let mut sets = Vec::with_capacity(keys.len());
    for k in keys {
        sets.push(members(engine, db, k).await?);
    }
    let mut it = sets.into_iter();
    let mut acc = it.next().unwrap_or_default();
    for s in it {
        match op {
            Algebra::Inter => acc.retain(|m| s.contains(m)),
            Algebra::Union => acc.extend(s),
            Algebra::Diff => acc.retain(|m| !s.contains(m)),
        }
    }
    Ok(acc)
}

/// The read-only set commands.
async fn read(engine: &Engine, s: &Session, db: u8, cmd: SetCmd, args: &[Bytes]) -> Reply {
    match cmd {
        SetCmd::SInter | SetCmd::SUnion | SetCmd::SDiff => {
            let op = match cmd {
                SetCmd::SInter => Algebra::Inter,
                SetCmd::SUnion => Algebra::Union,
                _ => Algebra::Diff,
            };
            return set_reply(tri!(algebra(engine, db, op, &args[1..]).await));
        }
        SetCmd::SInterCard => return intercard(engine, db, args).await,
        _ => {}
    }
    let p = tri!(collection::load(engine, db, &args[1], KIND).await);
    match cmd {
        SetCmd::SIsMember => Reply::Int(match &p {
            Some(p) => tri!(contains(p, &args[2])) as i64,
            None => 0,
        }),
        SetCmd::SMIsMember => {
            let set = match &p {
                Some(p) => tri!(SetValue::decode(p)).members,
                None => IndexSet::new(),
            };
            Reply::Array(
                args[2..]
                    .iter()
                    .map(|m| Reply::Int(set.contains(&m[..]) as i64))
                    .collect(),
            )
        }
        SetCmd::SMembers => match &p {
            Some(p) => set_reply(tri!(p.collect(1))),
            None => Reply::Set(Vec::new()),
        },
        SetCmd::SCard => Reply::Int(p.map_or(0, |p| p.count as i64)),
        SetCmd::SRandMember => {
            let all = match &p {
                Some(p) => tri!(p.collect(1)),
                None => Vec::new(),
            };
            let Some(c) = args.get(2) else {
                let pick = collection::repeated_picks(all.len(), usize::from(!all.is_empty()));
                return pick
                    .first()
                    .and_then(|&i| all.get(i))
                    .map_or(Reply::Null, |m| Reply::Bulk(m.clone()));
            };
            if args.len() > 3 {
                return Reply::err(SYNTAX);
            }
            let count = tri!(collection::count_arg(c));
            if all.is_empty() || count == 0 {
                return Reply::Array(Vec::new());
            }
            let picks = if count > 0 {
                collection::distinct_picks(all.len(), count as usize)
            } else {
                collection::repeated_picks(all.len(), count.unsigned_abs() as usize)
            };
            let out = picks.into_iter().filter_map(|i| all.get(i).cloned());
            if count > 0 {
                set_reply(out)
            } else {
                Reply::Array(out.map(Reply::Bulk).collect())
            }
        }
        SetCmd::SScan => {
            let scan = tri!(collection::scan_args(args, false));
            let all = match &p {
                Some(p) if scan.cursor == 0 => tri!(p.collect(1)),
                _ => Vec::new(),
            };
            let items = all
                .into_iter()
                .filter(|m| collection::matches(&scan.pattern, m))
                .map(Reply::Bulk)
                .collect();
            let _ = s;
            collection::scan_reply(0, items)
        }
        _ => Reply::err("ERR internal: a write reached the set read path"),
    }
}

/// `SINTERCARD numkeys key [key ...] [LIMIT limit]`.
async fn intercard(engine: &Engine, db: u8, args: &[Bytes]) -> Reply {
    let (keys, limit) = tri!(collection::numkeys_with_limit(args, 1));
    let inter = tri!(algebra(engine, db, Algebra::Inter, keys).await);
    let n = inter.len();
    Reply::Int(match limit {
        Some(l) if l > 0 => n.min(l),
        _ => n,
    } as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodings_follow_the_members() {
        let mut s = SetValue::default();
        for i in 0..10 {
            s.add(Bytes::from(i.to_string()));
        }
        let p = Packed::parse(&Bytes::from(s.encode())).unwrap();
        assert_eq!(encoding(&p).unwrap(), "intset");
        s.add(Bytes::from("x"));
        let p = Packed::parse(&Bytes::from(s.encode())).unwrap();
        assert_eq!(encoding(&p).unwrap(), "listpack");
        for i in 0..200 {
            s.add(Bytes::from(i.to_string()));
        }
        let p = Packed::parse(&Bytes::from(s.encode())).unwrap();
        assert_eq!(encoding(&p).unwrap(), "hashtable");
        assert_eq!(SetValue::decode(&p).unwrap(), s);
    }
}
