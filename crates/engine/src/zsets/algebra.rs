//! ZUNION, ZINTER, ZDIFF, their STORE forms and ZINTERCARD: `numkeys key [key ...]
//! [WEIGHTS weight ...] [AGGREGATE SUM|MIN|MAX] [WITHSCORES]`. Plain sets take part
//! with every member scored 1, as in Redis.

use bytes::Bytes;
use dmc_dht::ValueKind;
use dmc_resp::Reply;
use indexmap::IndexMap;

use crate::table::ZSetCmd;
use crate::{Engine, SYNTAX, Session, collection, error_reply};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Union,
    Inter,
    Diff,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Aggregate {
    Sum,
    Min,
    Max,
}

struct Query<'a> {
    keys: &'a [Bytes],
    weights: Vec<f64>,
    aggregate: Aggregate,
    with_scores: bool,
}

/// Parses from the numkeys argument at `args[at]`.
fn parse<'a>(
    args: &'a [Bytes],
    at: usize,
    op: Op,
    name: &str,
    store: bool,
) -> Result<Query<'a>, Reply> {
    let n = crate::parse_i64(&args[at]).ok_or_else(|| Reply::err(crate::NOT_INTEGER))?;
    if n < 1 {
        return Err(Reply::err(format!(
            "ERR at least 1 input key is needed for '{name}' command"
        )));
    }
    let first = at + 1;
    let end = first
        .checked_add(n as usize)
        .filter(|&e| e <= args.len())
        .ok_or_else(|| Reply::err(SYNTAX))?;
    let keys = &args[first..end];
    let mut q = Query {
        keys,
        weights: vec![1.0; keys.len()],
        aggregate: Aggregate::Sum,
        with_scores: false,
    };
    let mut i = end;
    while i < args.len() {
        let opt = args[i].to_ascii_uppercase();
        match &opt[..] {
            b"WEIGHTS" if op != Op::Diff => {
                for w in q.weights.iter_mut() {
                    i += 1;
                    let arg = args.get(i).ok_or_else(|| Reply::err(SYNTAX))?;
                    *w = super::value::parse_score(arg)
                        .ok_or_else(|| Reply::err("ERR weight value is not a float"))?;
                }
            }
            b"AGGREGATE" if op != Op::Diff => {
                i += 1;
                let arg = args.get(i).map(|a| a.to_ascii_uppercase());
                q.aggregate = match arg.as_deref() {
                    Some(b"SUM") => Aggregate::Sum,
                    Some(b"MIN") => Aggregate::Min,
                    Some(b"MAX") => Aggregate::Max,
                    _ => return Err(Reply::err(SYNTAX)),
                };
            }
            b"WITHSCORES" if !store => q.with_scores = true,
            _ => return Err(Reply::err(SYNTAX)),
        }
        i += 1;
    }
    Ok(q)
}

/// A sorted set's or a plain set's members with scores (sets score 1).
async fn input(engine: &Engine, db: u8, key: &[u8]) -> Result<Vec<(Bytes, f64)>, Reply> {
    match engine.read_stored(db, key).await.map_err(error_reply)? {
        None => Ok(Vec::new()),
        Some((ValueKind::ZSet, _)) => super::all(engine, db, key).await,
        Some((ValueKind::Set, _)) => Ok(crate::sets::members(engine, db, key)
            .await?
            .into_iter()
            .map(|m| (m, 1.0))
            .collect()),
        Some(_) => Err(error_reply(dmc_dht::DhtError::WrongType)),
    }
}

fn combine(a: f64, b: f64, agg: Aggregate) -> f64 {
    let r = match agg {
        Aggregate::Sum => a + b,
        Aggregate::Min => a.min(b),
        Aggregate::Max => a.max(b),
    };
    // inf + -inf: Redis scores the sum 0.
    if r.is_nan() { 0.0 } else { r }
}

fn weighted(s: f64, w: f64) -> f64 {
    let r = s * w;
    if r.is_nan() { 0.0 } else { r }
}

/// The result, sorted by (score, member).
async fn compute(
    engine: &Engine,
    db: u8,
    op: Op,
    q: &Query<'_>,
) -> Result<Vec<(Bytes, f64)>, Reply> {
    let mut inputs = Vec::with_capacity(q.keys.len());
    for k in q.keys {
        inputs.push(input(engine, db, k).await?);
    }
    let mut acc: IndexMap<Bytes, f64> = IndexMap::new();
    let mut it = inputs.into_iter().zip(q.weights.iter());
    if let Some((first, &w)) = it.next() {
        for (m, s) in first {
            acc.insert(m, weighted(s, w));
        }
    }
    for (set, &w) in it {
        match op {
            Op::Union => {
                for (m, s) in set {
                    let s = weighted(s, w);
                    acc.entry(m)
                        .and_modify(|a| *a = combine(*a, s, q.aggregate))
                        .or_insert(s);
                }
            }
            Op::Inter => {
                let other: IndexMap<Bytes, f64> = set.into_iter().collect();
                acc.retain(|m, _| other.contains_key(m));
                for (m, a) in acc.iter_mut() {
                    if let Some(&s) = other.get(m) {
                        *a = combine(*a, weighted(s, w), q.aggregate);
                    }
                }
            }
            Op::Diff => {
                for (m, _) in set {
                    acc.shift_remove(&m);
                }
            }
        }
    }
    let mut out: Vec<(Bytes, f64)> = acc.into_iter().collect();
    out.sort_by(|a, b| a.1.total_cmp(&b.1).then_with(|| a.0.cmp(&b.0)));
    Ok(out)
}

fn op_of(cmd: ZSetCmd) -> (Op, &'static str) {
    match cmd {
        ZSetCmd::ZUnion => (Op::Union, "zunion"),
        ZSetCmd::ZUnionStore => (Op::Union, "zunionstore"),
        ZSetCmd::ZInter => (Op::Inter, "zinter"),
        ZSetCmd::ZInterStore => (Op::Inter, "zinterstore"),
        ZSetCmd::ZInterCard => (Op::Inter, "zintercard"),
        ZSetCmd::ZDiff => (Op::Diff, "zdiff"),
        _ => (Op::Diff, "zdiffstore"),
    }
}

/// ZUNION, ZINTER, ZDIFF, ZINTERCARD.
pub(super) async fn read(
    engine: &Engine,
    s: &Session,
    db: u8,
    cmd: ZSetCmd,
    args: &[Bytes],
) -> Reply {
    if cmd == ZSetCmd::ZInterCard {
        let (keys, limit) = match collection::numkeys_with_limit(args, 1) {
            Ok(k) => k,
            Err(r) => return r,
        };
        let q = Query {
            keys,
            weights: vec![1.0; keys.len()],
            aggregate: Aggregate::Sum,
            with_scores: false,
        };
        return match compute(engine, db, Op::Inter, &q).await {
            Ok(r) => Reply::Int(match limit {
                Some(l) if l > 0 => r.len().min(l),
                _ => r.len(),
            } as i64),
            Err(e) => e,
        };
    }
    let (op, name) = op_of(cmd);
    let q = match parse(args, 1, op, name, false) {
        Ok(q) => q,
        Err(r) => return r,
    };
    match compute(engine, db, op, &q).await {
        Ok(items) => super::range::reply(items, q.with_scores, s.proto),
        Err(e) => e,
    }
}

/// ZUNIONSTORE, ZINTERSTORE, ZDIFFSTORE.
pub(super) async fn store(engine: &Engine, db: u8, cmd: ZSetCmd, args: &[Bytes]) -> Reply {
    let (op, name) = op_of(cmd);
    let q = match parse(args, 2, op, name, true) {
        Ok(q) => q,
        Err(r) => return r,
    };
    let dst = &args[1];
    let _held = engine
        .lock_keys(std::iter::once(&dst[..]).chain(q.keys.iter().map(|k| &k[..])))
        .await;
    match compute(engine, db, op, &q).await {
        Ok(items) => super::store(engine, db, dst, items, name).await,
        Err(e) => e,
    }
}
