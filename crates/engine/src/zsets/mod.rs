//! The sorted set family: ZADD and ZINCRBY, removals, scores and ranks, the ZRANGE
//! forms, pops (blocking ones wait in [`crate::blocking`]), ZRANDMEMBER, the algebra
//! (ZUNION, ZINTER, ZDIFF, their STORE forms, ZINTERCARD) and ZSCAN, with Redis 7
//! semantics, replies (RESP2 and RESP3 shapes) and error texts.
//!
//! A sorted set is stored packed while small and as two chunk trees (by score, by
//! member) past that ([`stored`]); every command here works through [`ZSet`], the
//! same code for both forms. Changes are data ([`ops`]) applied in same-key batches
//! with one commit each; reads load the set and start over when they meet a chunk
//! replaced meanwhile.

mod algebra;
mod ops;
pub mod range;
pub mod stored;
pub mod value;

use bytes::Bytes;
use dmc_resp::Reply;

use crate::big::READ_ATTEMPTS;
use crate::collection;
use crate::packed::Packed;
use crate::table::ZSetCmd;
use crate::tree::TreeError;
use crate::{Engine, NOT_INTEGER, SYNTAX, Session, notify, parse_i64};
pub(crate) use ops::ZSetOp;
use ops::ZSetOut;
use range::{Form, RangeQuery};
use stored::ZSet;
use value::{AddFlags, ZSetValue, parse_score};

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

/// Every member of `key` with its score, ascending (empty if missing).
pub(crate) async fn all(engine: &Engine, db: u8, key: &[u8]) -> Result<Vec<(Bytes, f64)>, Reply> {
    for _ in 0..READ_ATTEMPTS {
        match stored::load(engine, db, key).await?.all().await {
            Err(TreeError::Stale) => continue,
            other => return other.map_err(Reply::from),
        }
    }
    Err(TreeError::Stale.into())
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
    match ops::apply(engine, db, key, ZSetOp::Pop { end, count }, false).await? {
        ZSetOut::Popped(p) => {
            if p.as_ref().is_some_and(|items| !items.is_empty()) {
                let event = match end {
                    Extreme::Min => "zpopmin",
                    Extreme::Max => "zpopmax",
                };
                engine.notify(notify::ZSET, event, db, key);
                engine.notify_if_emptied(db, key).await;
            }
            Ok(p)
        }
        _ => Ok(None),
    }
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

/// Applies a change and takes the number it answers.
/// Removes what `op` names from `key`; announces `event` (and the key's deletion if
/// that emptied it) when anything went. Answers how many went.
async fn count(
    engine: &Engine,
    db: u8,
    key: &[u8],
    op: ZSetOp,
    event: &'static str,
) -> Result<i64, Reply> {
    match ops::apply(engine, db, key, op, false).await? {
        ZSetOut::Removed(n) => {
            if n > 0 {
                engine.notify(notify::ZSET, event, db, key);
                engine.notify_if_emptied(db, key).await;
            }
            Ok(n)
        }
        _ => Ok(0),
    }
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
            let op = ZSetOp::IncrBy {
                by,
                member: args[3].clone(),
            };
            let next = match tri!(ops::apply(engine, db, key, op, false).await) {
                ZSetOut::Score(next) => next,
                _ => return Reply::err("ERR internal: ZINCRBY answered no score"),
            };
            engine.notify(notify::ZSET, "zincr", db, key);
            engine.blocking.wake(db, key);
            Reply::Double(next)
        }
        ZSetCmd::ZRem => {
            let op = ZSetOp::Remove(args[2..].to_vec());
            Reply::Int(tri!(count(engine, db, key, op, "zrem").await))
        }
        ZSetCmd::ZRemRangeByRank | ZSetCmd::ZRemRangeByScore | ZSetCmd::ZRemRangeByLex => {
            let (form, event) = match cmd {
                ZSetCmd::ZRemRangeByRank => (Form::Range, "zremrangebyrank"),
                ZSetCmd::ZRemRangeByScore => (Form::ByScore { rev: false }, "zremrangebyscore"),
                _ => (Form::ByLex { rev: false }, "zremrangebylex"),
            };
            let q = tri!(range::parse(form, &args[2..4]));
            let op = ZSetOp::RemoveRange(q);
            Reply::Int(tri!(count(engine, db, key, op, event).await))
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
            let picked = tri!(selected(engine, db, src, &q).await);
            store(engine, db, dst, picked, "zrangestore").await
        }
        ZSetCmd::ZUnionStore | ZSetCmd::ZInterStore | ZSetCmd::ZDiffStore => {
            algebra::store(engine, db, cmd, args).await
        }
        _ => read(engine, s, db, cmd, args).await,
    }
}

/// Replaces `dst` with a sorted set of `items` (deleted when empty) and announces
/// `event`; the caller holds its lock. Answers the new cardinality.
pub(crate) async fn store(
    engine: &Engine,
    db: u8,
    dst: &[u8],
    items: Vec<(Bytes, f64)>,
    event: &'static str,
) -> Reply {
    let mut z = ZSetValue::default();
    for (m, s) in items {
        z.insert(m, s);
    }
    let n = z.len() as i64;
    tri!(stored::store(engine, db, dst, z, event).await);
    if n > 0 {
        engine.blocking.wake(db, dst);
    }
    Reply::Int(n)
}

/// What `q` selects from `key`, in reply order.
async fn selected(
    engine: &Engine,
    db: u8,
    key: &[u8],
    q: &RangeQuery,
) -> Result<Vec<(Bytes, f64)>, Reply> {
    for _ in 0..READ_ATTEMPTS {
        match stored::load(engine, db, key).await?.select(q).await {
            Err(TreeError::Stale) => continue,
            other => return other.map_err(Reply::from),
        }
    }
    Err(TreeError::Stale.into())
}

/// The scores of `members` in `key` (`None` for a missing member or key); WRONGTYPE
/// for another type. The geo commands read points through it.
pub(crate) async fn scores(
    engine: &Engine,
    db: u8,
    key: &[u8],
    members: &[Bytes],
) -> Result<Vec<Option<f64>>, Reply> {
    'attempt: for _ in 0..READ_ATTEMPTS {
        let z = stored::load(engine, db, key).await?;
        let mut out = Vec::with_capacity(members.len());
        for m in members {
            match z.score(m).await {
                Ok(s) => out.push(s),
                Err(TreeError::Stale) => continue 'attempt,
                Err(e) => return Err(e.into()),
            }
        }
        return Ok(out);
    }
    Err(TreeError::Stale.into())
}

/// Visits the members of `key` whose score is in `min..max` (`max` excluded), by
/// score then member, `page` at a time from one version of the set, until `visit`
/// answers false: one geohash box of a geo search (ANY stops early). A set that
/// changed under the read after pages were visited answers TRYAGAIN.
pub(crate) async fn scan_score_range(
    engine: &Engine,
    db: u8,
    key: &[u8],
    (min, max): (f64, f64),
    page: u64,
    mut visit: impl FnMut(Vec<(Bytes, f64)>) -> bool,
) -> Result<(), Reply> {
    use value::{ScoreBound, ScoreRange};
    let page = i64::try_from(page).unwrap_or(i64::MAX).max(1);
    'attempt: for _ in 0..READ_ATTEMPTS {
        let z = stored::load(engine, db, key).await?;
        let mut offset = 0i64;
        loop {
            let q = RangeQuery {
                by: range::By::Score(ScoreRange {
                    min: ScoreBound {
                        value: min,
                        exclusive: false,
                    },
                    max: ScoreBound {
                        value: max,
                        exclusive: true,
                    },
                }),
                rev: false,
                limit: Some((offset, page)),
                with_scores: true,
            };
            let items = match z.select(&q).await {
                Ok(items) => items,
                Err(TreeError::Stale) if offset == 0 => continue 'attempt,
                Err(e) => return Err(e.into()),
            };
            let n = items.len() as i64;
            if !visit(items) || n < page {
                return Ok(());
            }
            offset += n;
        }
    }
    Err(TreeError::Stale.into())
}

/// Adds or updates members of `key` with ZADD's flags, as ZADD does (GEOADD's writes).
pub(crate) async fn add(engine: &Engine, db: u8, args: &[Bytes]) -> Reply {
    zadd(engine, db, args).await
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
    let op = ZSetOp::Add { flags: f, pairs };
    let (added, changed, incr_result) = match tri!(ops::apply(engine, db, key, op, false).await) {
        ZSetOut::Added(a, c, r) => (a, c, r),
        _ => return Reply::err("ERR internal: ZADD answered no count"),
    };
    if added > 0 {
        engine.blocking.wake(db, key);
    }
    if added > 0 || changed > 0 {
        let event = if f.incr { "zincr" } else { "zadd" };
        engine.notify(notify::ZSET, event, db, key);
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
    for _ in 0..READ_ATTEMPTS {
        let z = tri!(stored::load(engine, db, &args[1]).await);
        match answer(&z, s, cmd, args).await {
            Err(TreeError::Stale) => continue,
            other => return other.unwrap_or_else(Reply::from),
        }
    }
    TreeError::Stale.into()
}

/// A read command's answer from the set `z`.
async fn answer(
    z: &ZSet<'_>,
    s: &Session,
    cmd: ZSetCmd,
    args: &[Bytes],
) -> Result<Reply, TreeError> {
    let score = |sc: Option<f64>| sc.map_or(Reply::Null, Reply::Double);
    Ok(match cmd {
        ZSetCmd::ZCard => Reply::Int(z.len() as i64),
        ZSetCmd::ZCount | ZSetCmd::ZLexCount => {
            let form = if cmd == ZSetCmd::ZCount {
                Form::ByScore { rev: false }
            } else {
                Form::ByLex { rev: false }
            };
            match range::parse(form, &args[2..4]) {
                Ok(q) => Reply::Int(z.count(&q.by).await? as i64),
                Err(e) => e,
            }
        }
        ZSetCmd::ZScore => score(z.score(&args[2]).await?),
        ZSetCmd::ZMScore => {
            let mut out = Vec::with_capacity(args.len() - 2);
            for m in &args[2..] {
                out.push(score(z.score(m).await?));
            }
            Reply::Array(out)
        }
        ZSetCmd::ZRank | ZSetCmd::ZRevRank => match z.rank(&args[2]).await? {
            Some(i) if cmd == ZSetCmd::ZRank => Reply::Int(i as i64),
            Some(i) => Reply::Int((z.len() - 1 - i) as i64),
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
            match range::parse(form, &args[2..]) {
                Ok(q) => range::reply(z.select(&q).await?, q.with_scores, s.proto),
                Err(e) => e,
            }
        }
        ZSetCmd::ZRandMember => rand_member(z, s, args).await?,
        ZSetCmd::ZScan => match collection::scan_args(args, false) {
            Ok(scan) => {
                let (page, next) = z.scan_page(scan.cursor, scan.count).await?;
                let mut items = Vec::new();
                for (m, sc) in page {
                    if collection::matches(&scan.pattern, &m) {
                        items.push(Reply::Bulk(m));
                        items.push(Reply::bulk(dmc_resp::format_double(sc)));
                    }
                }
                collection::scan_reply(next, items)
            }
            Err(e) => e,
        },
        _ => Reply::err("ERR internal: a write reached the sorted set read path"),
    })
}

/// `ZRANDMEMBER key [count [WITHSCORES]]`.
async fn rand_member(z: &ZSet<'_>, s: &Session, args: &[Bytes]) -> Result<Reply, TreeError> {
    let n = z.len() as usize;
    let Some(c) = args.get(2) else {
        let pick = collection::repeated_picks(n, usize::from(n > 0));
        return Ok(match pick.first() {
            Some(&i) => z
                .at(i as u64, i as u64)
                .await?
                .into_iter()
                .next()
                .map_or(Reply::Null, |(m, _)| Reply::Bulk(m)),
            None => Reply::Null,
        });
    };
    let count = match collection::count_arg(c) {
        Ok(c) => c,
        Err(e) => return Ok(e),
    };
    let with_scores = match collection::with_flag(args, b"WITHSCORES") {
        Ok(w) => w,
        Err(e) => return Ok(e),
    };
    if n == 0 || count == 0 {
        return Ok(Reply::Array(Vec::new()));
    }
    let picks = collection::count_picks(n, count);
    // Many picks: one read of everything; a few: one descent each.
    let items: Vec<(Bytes, f64)> = if picks.len() >= n / 8 {
        let all = z.all().await?;
        picks
            .into_iter()
            .filter_map(|i| all.get(i).cloned())
            .collect()
    } else {
        let mut items = Vec::with_capacity(picks.len());
        for i in picks {
            items.extend(z.at(i as u64, i as u64).await?);
        }
        items
    };
    Ok(range::reply(items, with_scores, s.proto))
}
