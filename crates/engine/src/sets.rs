//! The set family: SADD, SREM, SISMEMBER, SPOP, SRANDMEMBER, SMOVE, the algebra
//! (SINTER, SUNION, SDIFF, their STORE forms, SINTERCARD) and SSCAN, with Redis 7
//! semantics, replies and error texts.
//!
//! A small set is stored packed ([`crate::packed`]: members in insertion order), a
//! large one as a chunk tree of members ordered by `xxh3(member) ‖ member`
//! ([`crate::big`]). Writes of a packed set decode it into a [`SetValue`], edit it and
//! encode it; a tree is changed along the path of each member.

use bytes::Bytes;
use dmc_dht::{Change, ValueKind};
use dmc_resp::Reply;
use futures::FutureExt;
use futures::future::BoxFuture;
use indexmap::IndexSet;

use crate::big;
use crate::collection::{self, MAX_LISTPACK_ENTRIES, MAX_LISTPACK_VALUE};
use crate::packed::{Corrupt, Packed, Writer, element_len};
use crate::table::SetCmd;
use crate::{Engine, NOT_INTEGER, SYNTAX, Session, notify, parse_i64};

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
    big::read(
        engine,
        db,
        key,
        &LAYOUT,
        |p| match p {
            Some(p) => Ok(SetValue::decode(&p)?.members),
            None => Ok(IndexSet::new()),
        },
        |t| async move { Ok(t.range(0, u64::MAX).await?.into_iter().collect()) }.boxed(),
    )
    .await
}

/// How sets are stored: trees of members by `xxh3(member) ‖ member`.
const LAYOUT: big::Layout = big::Layout {
    kind: KIND,
    key_of: Some(member_key),
    records_of: packed_records,
};

fn member_key(m: &[u8]) -> Bytes {
    big::hashed_key(m)
}

fn packed_records(p: &Packed) -> Result<Vec<Bytes>, Corrupt> {
    p.collect(1)
}

/// A change of a set (SADD, SREM): how many members it added or removed.
#[derive(Debug, Clone)]
pub(crate) enum SetOp {
    Add(Vec<Bytes>),
    Remove(Vec<Bytes>),
}

impl big::Edit for SetOp {
    type Value = SetValue;
    type Out = i64;

    fn layout() -> &'static big::Layout {
        &LAYOUT
    }

    fn decode(p: Option<Packed>) -> Result<Option<SetValue>, Reply> {
        Ok(p.map(|p| SetValue::decode(&p)).transpose()?)
    }

    fn encode(v: Option<SetValue>) -> Change {
        v.map_or(Change::Delete, SetValue::into_change)
    }

    fn apply_packed(&self, v: &mut Option<SetValue>) -> Result<(bool, i64), Reply> {
        let n = match self {
            SetOp::Add(members) => {
                let set = v.get_or_insert_with(SetValue::default);
                members.iter().filter(|m| set.add((*m).clone())).count()
            }
            SetOp::Remove(members) => match v {
                Some(set) => members
                    .iter()
                    .filter(|m| set.members.shift_remove(&m[..]))
                    .count(),
                None => 0,
            },
        };
        Ok((n > 0, n as i64))
    }

    fn apply_tree<'a, 'p: 'a>(
        &'a self,
        t: &'a mut crate::tree::Tree<'p>,
    ) -> BoxFuture<'a, crate::big::TreeOutcome<i64>> {
        Box::pin(async move {
            let mut n = 0;
            match self {
                SetOp::Add(members) => {
                    for m in members {
                        n += t.upsert(m.clone()).await?.is_none() as i64;
                    }
                }
                SetOp::Remove(members) => {
                    for m in members {
                        n += t.remove_key(&big::hashed_key(m)).await?.is_some() as i64;
                    }
                }
            }
            Ok(Ok((n > 0, n)))
        })
    }
}

crate::combine::batched_edit!(SetOp, set_batches);

/// Applies `op` to `key`: with `locked` (the caller holds the key's lock) at once,
/// else queued behind the key's other set changes and committed in one batch with
/// them ([`crate::combine`]).
async fn change(
    engine: &Engine,
    db: u8,
    key: &[u8],
    op: SetOp,
    locked: bool,
) -> Result<i64, Reply> {
    match locked {
        true => big::edit_one(engine, db, key, &op).await,
        false => engine.set_batches.submit(engine, db, key, op).await,
    }
}

/// Adds `members` to the set `key` (its lock held by the caller when `locked`).
async fn add(
    engine: &Engine,
    db: u8,
    key: &[u8],
    members: &[Bytes],
    locked: bool,
) -> Result<i64, Reply> {
    change(engine, db, key, SetOp::Add(members.to_vec()), locked).await
}

/// Removes `members` from the set `key` (its lock held by the caller when `locked`).
async fn remove(
    engine: &Engine,
    db: u8,
    key: &[u8],
    members: &[Bytes],
    locked: bool,
) -> Result<i64, Reply> {
    change(engine, db, key, SetOp::Remove(members.to_vec()), locked).await
}

/// Whether each of `want` is a member of `key`.
async fn contains_each(
    engine: &Engine,
    db: u8,
    key: &[u8],
    want: &[Bytes],
) -> Result<Vec<bool>, Reply> {
    big::read(
        engine,
        db,
        key,
        &LAYOUT,
        |p| match p {
            Some(p) => want
                .iter()
                .map(|m| contains(&p, m).map_err(Reply::from))
                .collect(),
            None => Ok(vec![false; want.len()]),
        },
        |t| {
            async move {
                let mut out = Vec::with_capacity(want.len());
                for m in want {
                    let k = big::hashed_key(m);
                    out.push(t.seek(&k).await?.1.is_some_and(|r| r == *m));
                }
                Ok(out)
            }
            .boxed()
        },
    )
    .await
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
        SetCmd::SAdd => {
            let added = tri!(add(engine, db, key, &args[2..], false).await);
            if added > 0 {
                engine.notify(notify::SET, "sadd", db, key);
            }
            Reply::Int(added)
        }
        SetCmd::SRem => {
            let removed = tri!(remove(engine, db, key, &args[2..], false).await);
            if removed > 0 {
                engine.notify(notify::SET, "srem", db, key);
                engine.notify_if_emptied(db, key).await;
            }
            Reply::Int(removed)
        }
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
            let want = count.unwrap_or(1);
            let popped = tri!(
                big::edit(
                    engine,
                    db,
                    key,
                    &LAYOUT,
                    |cur| {
                        let Some(p) = cur else {
                            return Ok((Change::Keep, Vec::new()));
                        };
                        let mut set = SetValue::decode(&p)?;
                        let mut picks = collection::distinct_picks(
                            set.members.len(),
                            want.min(set.members.len()),
                        );
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
                    },
                    |mut t| {
                        async move {
                            let out: Result<_, Reply> = async {
                                let n = want.min(t.len() as usize);
                                let mut picks = collection::distinct_picks(t.len() as usize, n);
                                picks.sort_unstable_by(|a, b| b.cmp(a));
                                let mut popped = Vec::with_capacity(n);
                                for i in picks {
                                    popped.extend(t.remove_at(i as u64).await?);
                                }
                                Ok((!popped.is_empty(), popped))
                            }
                            .await;
                            out.map(|(changed, answer)| (t, changed, answer))
                        }
                        .boxed()
                    }
                )
                .await
            );
            if !popped.is_empty() {
                engine.notify(notify::SET, "spop", db, key);
                engine.notify_if_emptied(db, key).await;
            }
            match count {
                Some(_) => set_reply(popped),
                None => popped.into_iter().next().map_or(Reply::Null, Reply::Bulk),
            }
        }
        SetCmd::SMove => {
            let (src, dst, m) = (&args[1], &args[2], &args[3]);
            let _held = engine.lock_keys([&src[..], &dst[..]].into_iter()).await;
            // The destination's type is checked before anything is removed.
            tri!(big::load(engine, db, dst, KIND).await);
            if src == dst {
                let member = tri!(contains_each(engine, db, src, &args[3..4]).await);
                return Reply::Int(member.first().copied().unwrap_or(false) as i64);
            }
            let moved = tri!(remove(engine, db, src, &args[3..4], true).await) > 0;
            if moved {
                engine.notify(notify::SET, "srem", db, src);
                engine.notify_if_emptied(db, src).await;
                tri!(add(engine, db, dst, std::slice::from_ref(m), true).await);
                engine.notify(notify::SET, "sadd", db, dst);
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
            let event = match op {
                Algebra::Inter => "sinterstore",
                Algebra::Union => "sunionstore",
                Algebra::Diff => "sdiffstore",
            };
            tri!(collection::store(engine, db, dst, (KIND, event), value).await);
            Reply::Int(n)
        }
        _ => read(engine, db, cmd, args).await,
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
async fn read(engine: &Engine, db: u8, cmd: SetCmd, args: &[Bytes]) -> Reply {
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
    let key = &args[1];
    match cmd {
        SetCmd::SIsMember | SetCmd::SMIsMember => {
            let found = tri!(contains_each(engine, db, key, &args[2..]).await);
            let ints = found.into_iter().map(|f| Reply::Int(f as i64));
            if cmd == SetCmd::SIsMember {
                ints.into_iter().next().unwrap_or(Reply::Int(0))
            } else {
                Reply::Array(ints.collect())
            }
        }
        SetCmd::SMembers => set_reply(tri!(members(engine, db, key).await)),
        SetCmd::SCard => Reply::Int(tri!(
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
        SetCmd::SRandMember => {
            let all: Vec<Bytes> = tri!(members(engine, db, key).await).into_iter().collect();
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
            let picks = collection::count_picks(all.len(), count);
            let out = picks.into_iter().filter_map(|i| all.get(i).cloned());
            if count > 0 {
                set_reply(out)
            } else {
                Reply::Array(out.map(Reply::Bulk).collect())
            }
        }
        SetCmd::SScan => {
            let scan = tri!(collection::scan_args(args, false));
            let (next, page) = tri!(
                big::read(
                    engine,
                    db,
                    key,
                    &LAYOUT,
                    |p| match p {
                        Some(p) => Ok((0, p.collect(1)?)),
                        None => Ok((0, Vec::new())),
                    },
                    |t| {
                        let (cursor, count) = (scan.cursor, scan.count);
                        async move {
                            let (page, next) = t.scan_page(cursor, count).await?;
                            Ok((next, page))
                        }
                        .boxed()
                    },
                )
                .await
            );
            let items = page
                .into_iter()
                .filter(|m| collection::matches(&scan.pattern, m))
                .map(Reply::Bulk)
                .collect();
            collection::scan_reply(next, items)
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
