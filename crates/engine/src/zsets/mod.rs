//! The sorted set family: ZADD and ZINCRBY, removals, scores and ranks, the ZRANGE
//! forms, pops (blocking ones wait in [`crate::blocking`]), ZRANDMEMBER, the algebra
//! (ZUNION, ZINTER, ZDIFF, their STORE forms, ZINTERCARD) and ZSCAN, with Redis 7
//! semantics, replies (RESP2 and RESP3 shapes) and error texts.
//!
//! A sorted set is stored packed ([`crate::packed`]: member, score pairs sorted by
//! score then member). Reads decode the ordered pairs; writes decode a
//! [`value::ZSetValue`], edit it and commit it whole through [`collection::change`].

mod algebra;
pub mod range;
pub mod value;

use bytes::Bytes;
use dmc_dht::{Change, ValueKind};
use dmc_resp::Reply;

use crate::collection;
use crate::packed::Packed;
use crate::table::ZSetCmd;
use crate::{Engine, NOT_INTEGER, SYNTAX, Session, parse_i64};
use range::{Form, RangeQuery};
use value::{AddFlags, ZSetValue, pairs, parse_score};

const KIND: ValueKind = ValueKind::ZSet;
const NOT_FLOAT: &str = "ERR value is not a valid float";

macro_rules! tri {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(e) => return Reply::from(e),
        }
    };
}

/// Redis's name for a packed sorted set's encoding.
pub fn encoding(p: &Packed) -> &'static str {
    if p.big { "skiplist" } else { "listpack" }
}

fn decode_or_new(cur: Option<Packed>) -> Result<ZSetValue, Reply> {
    Ok(match cur {
        Some(p) => ZSetValue::decode(&p)?,
        None => ZSetValue::default(),
    })
}

/// The ordered (member, score) pairs of `key` (empty if missing).
async fn sorted(engine: &Engine, db: u8, key: &[u8]) -> Result<Vec<(Bytes, f64)>, Reply> {
    match collection::load(engine, db, key, KIND).await? {
        Some(p) => Ok(pairs(&p)?),
        None => Ok(Vec::new()),
    }
}

/// Which end a pop takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Extreme {
    Min,
    Max,
}

/// Pops up to `count` members from `key`'s `end`: `None` when it does not exist.
pub(crate) async fn pop(
    engine: &Engine,
    db: u8,
    key: &[u8],
    end: Extreme,
    count: usize,
) -> Result<Option<Vec<(Bytes, f64)>>, Reply> {
    collection::change(engine, db, key, KIND, |cur| {
        let Some(p) = cur else {
            return Ok((Change::Keep, None));
        };
        let mut z = ZSetValue::decode(&p)?;
        let mut out = Vec::with_capacity(count.min(z.len()));
        while out.len() < count {
            let first = match end {
                Extreme::Min => z.sorted.pop_first(),
                Extreme::Max => z.sorted.pop_last(),
            };
            let Some((s, m)) = first else { break };
            z.scores.remove(&m);
            out.push((m, s.0));
        }
        Ok((z.into_change(), Some(out)))
    })
    .await
}

/// Flat `member, score, ...` (RESP2, and ZPOPMIN without a count in RESP3) or pairs.
fn scored(items: Vec<(Bytes, f64)>, pairs: bool) -> Reply {
    if pairs {
        return Reply::Array(
            items
                .into_iter()
                .map(|(m, s)| Reply::Array(vec![Reply::Bulk(m), Reply::Double(s)]))
                .collect(),
        );
    }
    let mut out = Vec::with_capacity(items.len() * 2);
    for (m, s) in items {
        out.push(Reply::Bulk(m));
        out.push(Reply::Double(s));
    }
    Reply::Array(out)
}

pub async fn run(engine: &Engine, s: &mut Session, cmd: ZSetCmd, args: &[Bytes]) -> Reply {
    let db = engine.physical_db(s.db);
    let key = &args[1];
    match cmd {
        ZSetCmd::ZAdd => zadd(engine, db, args).await,
        ZSetCmd::ZIncrBy => {
            let Some(by) = parse_score(&args[2]) else {
                return Reply::err(NOT_FLOAT);
            };
            let next = tri!(
                collection::change(engine, db, key, KIND, |cur| {
                    let mut z = decode_or_new(cur)?;
                    let next = z.scores.get(&args[3]).copied().unwrap_or(0.0) + by;
                    if next.is_nan() {
                        return Err(Reply::err("ERR resulting score is not a number (NaN)"));
                    }
                    z.insert(args[3].clone(), next);
                    Ok((z.into_change(), next))
                })
                .await
            );
            engine.blocking.wake(db, key);
            Reply::Double(next)
        }
        ZSetCmd::ZRem => Reply::Int(tri!(
            collection::change(engine, db, key, KIND, |cur| {
                let Some(p) = cur else {
                    return Ok((Change::Keep, 0));
                };
                let mut z = ZSetValue::decode(&p)?;
                let n = args[2..].iter().filter(|m| z.remove(m)).count() as i64;
                if n == 0 {
                    return Ok((Change::Keep, 0));
                }
                Ok((z.into_change(), n))
            })
            .await
        )),
        ZSetCmd::ZRemRangeByRank | ZSetCmd::ZRemRangeByScore | ZSetCmd::ZRemRangeByLex => {
            let form = match cmd {
                ZSetCmd::ZRemRangeByRank => Form::Range,
                ZSetCmd::ZRemRangeByScore => Form::ByScore { rev: false },
                _ => Form::ByLex { rev: false },
            };
            let q = tri!(range::parse(form, &args[2..4]));
            Reply::Int(tri!(
                collection::change(engine, db, key, KIND, |cur| {
                    let Some(p) = cur else {
                        return Ok((Change::Keep, 0));
                    };
                    let mut z = ZSetValue::decode(&p)?;
                    let all: Vec<(Bytes, f64)> = z.ordered().map(|(m, s)| (m.clone(), s)).collect();
                    let gone = range::select(&all, &q);
                    for (m, _) in &gone {
                        z.remove(m);
                    }
                    if gone.is_empty() {
                        return Ok((Change::Keep, 0));
                    }
                    Ok((z.into_change(), gone.len() as i64))
                })
                .await
            ))
        }
        ZSetCmd::ZPopMin | ZSetCmd::ZPopMax => {
            let end = if cmd == ZSetCmd::ZPopMin {
                Extreme::Min
            } else {
                Extreme::Max
            };
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
            let items =
                tri!(pop(engine, db, key, end, count.unwrap_or(1)).await).unwrap_or_default();
            scored(items, count.is_some() && s.proto >= 3)
        }
        ZSetCmd::ZMPop => {
            let m = tri!(parse_mpop(args, 1));
            mpop_once(engine, db, &m).await.unwrap_or_else(|r| r)
        }
        ZSetCmd::BZPopMin | ZSetCmd::BZPopMax | ZSetCmd::BZMPop => {
            crate::blocking::run_zset(engine, s, db, cmd, args).await
        }
        ZSetCmd::ZRangeStore => {
            let q = tri!(range::parse(Form::Range, &args[3..]));
            let (dst, src) = (&args[1], &args[2]);
            let _held = engine.lock_keys([&dst[..], &src[..]].into_iter()).await;
            let picked = range::select(&tri!(sorted(engine, db, src).await), &q);
            store(engine, db, dst, picked).await
        }
        ZSetCmd::ZUnionStore | ZSetCmd::ZInterStore | ZSetCmd::ZDiffStore => {
            algebra::store(engine, db, cmd, args).await
        }
        _ => read(engine, s, db, cmd, args).await,
    }
}

/// Replaces `dst` with a sorted set of `items` (deleted when empty); the caller holds
/// its lock. Answers the new cardinality.
pub(crate) async fn store(engine: &Engine, db: u8, dst: &[u8], items: Vec<(Bytes, f64)>) -> Reply {
    let mut z = ZSetValue::default();
    for (m, s) in items {
        z.insert(m, s);
    }
    let n = z.len() as i64;
    let value = (n > 0).then(|| z.encode());
    tri!(collection::store(engine, db, dst, KIND, value).await);
    if n > 0 {
        engine.blocking.wake(db, dst);
    }
    Reply::Int(n)
}

/// `ZADD key [NX|XX] [GT|LT] [CH] [INCR] score member [score member ...]`.
async fn zadd(engine: &Engine, db: u8, args: &[Bytes]) -> Reply {
    let mut f = AddFlags::default();
    let mut i = 2;
    while i < args.len() {
        let opt = args[i].to_ascii_uppercase();
        match &opt[..] {
            b"NX" => f.nx = true,
            b"XX" => f.xx = true,
            b"GT" => f.gt = true,
            b"LT" => f.lt = true,
            b"CH" => f.ch = true,
            b"INCR" => f.incr = true,
            _ => break,
        }
        i += 1;
    }
    let rest = &args[i..];
    if rest.is_empty() || !rest.len().is_multiple_of(2) {
        return Reply::err(SYNTAX);
    }
    if f.nx && f.xx {
        return Reply::err("ERR XX and NX options at the same time are not compatible");
    }
    if (f.nx && (f.gt || f.lt)) || (f.gt && f.lt) {
        return Reply::err("ERR GT, LT, and/or NX options at the same time are not compatible");
    }
    if f.incr && rest.len() > 2 {
        return Reply::err("ERR INCR option supports a single increment-element pair");
    }
    let mut pairs = Vec::with_capacity(rest.len() / 2);
    for p in rest.chunks_exact(2) {
        let Some(score) = parse_score(&p[0]) else {
            return Reply::err(NOT_FLOAT);
        };
        pairs.push((score, p[1].clone()));
    }
    let key = &args[1];
    let outcome = tri!(
        collection::change(engine, db, key, KIND, |cur| {
            let mut z = decode_or_new(cur)?;
            let (mut added, mut changed) = (0i64, 0i64);
            let mut incr_result = None;
            for (score, m) in &pairs {
                let old = z.scores.get(m).copied();
                let new = match (f.incr, old) {
                    (true, Some(o)) => o + score,
                    _ => *score,
                };
                if new.is_nan() {
                    return Err(Reply::err("ERR resulting score is not a number (NaN)"));
                }
                match old {
                    None if f.xx => continue,
                    None => {
                        z.insert(m.clone(), new);
                        added += 1;
                        incr_result = Some(new);
                    }
                    Some(o) => {
                        if !f.allows_update(o, new) {
                            continue;
                        }
                        if o != new {
                            z.insert(m.clone(), new);
                            changed += 1;
                        }
                        incr_result = Some(new);
                    }
                }
            }
            let answer = (added, changed, incr_result);
            if added == 0 && changed == 0 {
                return Ok((Change::Keep, answer));
            }
            Ok((z.into_change(), answer))
        })
        .await
    );
    let (added, changed, incr_result) = outcome;
    if added > 0 {
        engine.blocking.wake(db, key);
    }
    if f.incr {
        return incr_result.map_or(Reply::Null, Reply::Double);
    }
    Reply::Int(if f.ch { added + changed } else { added })
}

/// ZMPOP's and BZMPOP's arguments.
pub(crate) type MPop = collection::MPop<Extreme>;

impl Extreme {
    fn parse(arg: &[u8]) -> Option<Extreme> {
        if arg.eq_ignore_ascii_case(b"MIN") {
            Some(Extreme::Min)
        } else if arg.eq_ignore_ascii_case(b"MAX") {
            Some(Extreme::Max)
        } else {
            None
        }
    }
}

/// Parses `numkeys key... MIN|MAX [COUNT n]` starting at `args[at]`.
pub(crate) fn parse_mpop(args: &[Bytes], at: usize) -> Result<MPop, Reply> {
    collection::parse_mpop(args, at, Extreme::parse)
}

/// One ZMPOP attempt: `[key, [[member, score], ...]]` from the first non-empty sorted
/// set, or a null array.
pub(crate) async fn mpop_once(engine: &Engine, db: u8, m: &MPop) -> Result<Reply, Reply> {
    for key in &m.keys {
        if let Some(items) = pop(engine, db, key, m.end, m.count).await? {
            return Ok(Reply::Array(vec![
                Reply::Bulk(key.clone()),
                scored(items, true),
            ]));
        }
    }
    Ok(Reply::NullArray)
}

/// The read-only sorted set commands.
async fn read(engine: &Engine, s: &Session, db: u8, cmd: ZSetCmd, args: &[Bytes]) -> Reply {
    match cmd {
        ZSetCmd::ZUnion | ZSetCmd::ZInter | ZSetCmd::ZDiff | ZSetCmd::ZInterCard => {
            return algebra::read(engine, s, db, cmd, args).await;
        }
        _ => {}
    }
    let p = tri!(collection::load(engine, db, &args[1], KIND).await);
    if cmd == ZSetCmd::ZCard {
        return Reply::Int(p.map_or(0, |p| p.count as i64));
    }
    let all = match &p {
        Some(p) => tri!(pairs(p)),
        None => Vec::new(),
    };
    match cmd {
        ZSetCmd::ZCount | ZSetCmd::ZLexCount => {
            let form = if cmd == ZSetCmd::ZCount {
                Form::ByScore { rev: false }
            } else {
                Form::ByLex { rev: false }
            };
            let q = tri!(range::parse(form, &args[2..4]));
            Reply::Int(range::select(&all, &q).len() as i64)
        }
        ZSetCmd::ZScore => match all.iter().find(|(m, _)| *m == args[2]) {
            Some((_, sc)) => Reply::Double(*sc),
            None => Reply::Null,
        },
        ZSetCmd::ZMScore => Reply::Array(
            args[2..]
                .iter()
                .map(|want| {
                    all.iter()
                        .find(|(m, _)| m == want)
                        .map_or(Reply::Null, |(_, sc)| Reply::Double(*sc))
                })
                .collect(),
        ),
        ZSetCmd::ZRank | ZSetCmd::ZRevRank => match all.iter().position(|(m, _)| *m == args[2]) {
            Some(i) if cmd == ZSetCmd::ZRank => Reply::Int(i as i64),
            Some(i) => Reply::Int((all.len() - 1 - i) as i64),
            None => Reply::Null,
        },
        ZSetCmd::ZRange
        | ZSetCmd::ZRevRange
        | ZSetCmd::ZRangeByScore
        | ZSetCmd::ZRevRangeByScore
        | ZSetCmd::ZRangeByLex
        | ZSetCmd::ZRevRangeByLex => {
            let form = match cmd {
                ZSetCmd::ZRange => Form::Range,
                ZSetCmd::ZRevRange => Form::RevRank,
                ZSetCmd::ZRangeByScore => Form::ByScore { rev: false },
                ZSetCmd::ZRevRangeByScore => Form::ByScore { rev: true },
                ZSetCmd::ZRangeByLex => Form::ByLex { rev: false },
                _ => Form::ByLex { rev: true },
            };
            let q: RangeQuery = tri!(range::parse(form, &args[2..]));
            range::reply(range::select(&all, &q), q.with_scores, s.proto)
        }
        ZSetCmd::ZRandMember => rand_member(s, &all, args),
        ZSetCmd::ZScan => {
            let scan = tri!(collection::scan_args(args, false));
            let mut items = Vec::new();
            if scan.cursor == 0 {
                for (m, sc) in all {
                    if collection::matches(&scan.pattern, &m) {
                        items.push(Reply::Bulk(m));
                        items.push(Reply::bulk(dmc_resp::format_double(sc)));
                    }
                }
            }
            collection::scan_reply(0, items)
        }
        _ => Reply::err("ERR internal: a write reached the sorted set read path"),
    }
}

/// `ZRANDMEMBER key [count [WITHSCORES]]`.
fn rand_member(s: &Session, all: &[(Bytes, f64)], args: &[Bytes]) -> Reply {
    let Some(c) = args.get(2) else {
        let pick = collection::repeated_picks(all.len(), usize::from(!all.is_empty()));
        return pick
            .first()
            .and_then(|&i| all.get(i))
            .map_or(Reply::Null, |(m, _)| Reply::Bulk(m.clone()));
    };
    let count = tri!(collection::count_arg(c));
    let with_scores = tri!(collection::with_flag(args, b"WITHSCORES"));
    if all.is_empty() || count == 0 {
        return Reply::Array(Vec::new());
    }
    let picks = collection::count_picks(all.len(), count);
    let items: Vec<(Bytes, f64)> = picks
        .into_iter()
        .filter_map(|i| all.get(i).cloned())
        .collect();
    range::reply(items, with_scores, s.proto)
}
