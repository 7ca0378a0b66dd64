//! Sorted set changes as data (ZADD, ZINCRBY, ZREM, ZREMRANGEBY*, the pops), applied
//! to a [`ZSet`] in either form; changes of one key that arrive together run as one
//! batch with one commit ([`crate::combine`]).

use std::sync::Arc;

use bytes::Bytes;
use dmc_resp::Reply;
use futures::future::BoxFuture;

use super::Extreme;
use super::range::RangeQuery;
use super::stored::{Writer, ZSet};
use super::value::AddFlags;
use crate::Engine;
use crate::combine::{Answer, Batch, Combiner};
use crate::tree::TreeError;

const NAN: &str = "ERR resulting score is not a number (NaN)";

/// One change of a sorted set.
#[derive(Debug, Clone)]
pub(crate) enum ZSetOp {
    /// ZADD's (score, member) pairs under its flags.
    Add {
        flags: AddFlags,
        pairs: Vec<(f64, Bytes)>,
    },
    IncrBy {
        by: f64,
        member: Bytes,
    },
    Remove(Vec<Bytes>),
    /// ZREMRANGEBYRANK, -SCORE, -LEX.
    RemoveRange(RangeQuery),
    Pop {
        end: Extreme,
        count: usize,
    },
}

/// What a change answers.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ZSetOut {
    /// Members added, scores changed, and the INCR result.
    Added(i64, i64, Option<f64>),
    Score(f64),
    Removed(i64),
    /// Popped members, `None` when the key does not exist.
    Popped(Option<Vec<(Bytes, f64)>>),
}

impl ZSetOp {
    /// The change on `z`: whether it changed it and the answer (a client error inside,
    /// `z` as it was), or a failure of `z`'s trees (the batch stops).
    async fn apply(&self, z: &mut ZSet<'_>) -> Result<Result<(bool, ZSetOut), Reply>, TreeError> {
        Ok(Ok(match self {
            ZSetOp::Add { flags: f, pairs } => {
                let (mut added, mut changed) = (0i64, 0i64);
                let mut incr_result = None;
                for (score, m) in pairs {
                    let old = z.score(m).await?;
                    let new = match (f.incr, old) {
                        (true, Some(o)) => o + score,
                        _ => *score,
                    };
                    if new.is_nan() {
                        // Only INCR (one pair) makes a NaN: nothing was changed yet.
                        return Ok(Err(Reply::err(NAN)));
                    }
                    match old {
                        None if f.xx => continue,
                        None => {
                            z.insert(m.clone(), new).await?;
                            added += 1;
                            incr_result = Some(new);
                        }
                        Some(o) => {
                            if !f.allows_update(o, new) {
                                continue;
                            }
                            if o != new {
                                z.insert(m.clone(), new).await?;
                                changed += 1;
                            }
                            incr_result = Some(new);
                        }
                    }
                }
                (
                    added > 0 || changed > 0,
                    ZSetOut::Added(added, changed, incr_result),
                )
            }
            ZSetOp::IncrBy { by, member } => {
                let next = z.score(member).await?.unwrap_or(0.0) + by;
                if next.is_nan() {
                    return Ok(Err(Reply::err(NAN)));
                }
                z.insert(member.clone(), next).await?;
                (true, ZSetOut::Score(next))
            }
            ZSetOp::Remove(members) => {
                let mut n = 0;
                for m in members {
                    n += i64::from(z.remove(m).await?);
                }
                (n > 0, ZSetOut::Removed(n))
            }
            ZSetOp::RemoveRange(q) => match z.positions(q).await? {
                Some((first, last)) => {
                    let gone = z.remove_span(first, last).await?.len() as i64;
                    (gone > 0, ZSetOut::Removed(gone))
                }
                None => (false, ZSetOut::Removed(0)),
            },
            ZSetOp::Pop { end, count } => {
                let n = z.len();
                if n == 0 {
                    return Ok(Ok((false, ZSetOut::Popped(None))));
                }
                let take = (*count as u64).min(n);
                if take == 0 {
                    return Ok(Ok((false, ZSetOut::Popped(Some(Vec::new())))));
                }
                let (first, last) = match end {
                    Extreme::Min => (0, take - 1),
                    Extreme::Max => (n - take, n - 1),
                };
                let mut items = z.remove_span(first, last).await?;
                if *end == Extreme::Max {
                    items.reverse();
                }
                (true, ZSetOut::Popped(Some(items)))
            }
        }))
    }
}

/// Applies `ops` in order to `key` with one commit; the caller holds the key's lock.
pub(crate) async fn apply_all(
    engine: &Engine,
    db: u8,
    key: &[u8],
    ops: &[ZSetOp],
) -> Result<Vec<Answer<ZSetOp>>, Reply> {
    let mut w = Writer::lock(engine, db, key, true).await;
    loop {
        let mut z = w.load().await?;
        let mut changed = false;
        let mut answers = Vec::with_capacity(ops.len());
        for op in ops {
            let answer = op.apply(&mut z).await?;
            answers.push(answer.map(|(c, out)| {
                changed |= c;
                out
            }));
        }
        if !changed || w.commit(z).await? {
            return Ok(answers);
        }
    }
}

/// Applies `op` to `key`: queued behind the key's other sorted set changes and
/// committed in one batch with them; with `locked` (the caller holds the key's
/// lock), at once.
pub(crate) async fn apply(
    engine: &Engine,
    db: u8,
    key: &[u8],
    op: ZSetOp,
    locked: bool,
) -> Result<ZSetOut, Reply> {
    if !locked {
        return engine.zset_batches.submit(engine, db, key, op).await;
    }
    let mut answers = apply_all(engine, db, key, std::slice::from_ref(&op)).await?;
    answers
        .pop()
        .unwrap_or_else(|| Err(Reply::err("ERR internal: a change lost its answer")))
}

impl Batch for ZSetOp {
    type Out = ZSetOut;

    fn combiner(engine: &Engine) -> &Combiner<ZSetOp> {
        &engine.zset_batches
    }

    fn run(
        engine: Arc<Engine>,
        db: u8,
        key: Bytes,
        ops: Vec<ZSetOp>,
    ) -> BoxFuture<'static, Result<Vec<Answer<ZSetOp>>, Reply>> {
        Box::pin(async move { apply_all(&engine, db, &key, &ops).await })
    }
}
