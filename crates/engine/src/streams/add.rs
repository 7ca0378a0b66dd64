//! XADD and XTRIM: their options (MAXLEN / MINID with `=` or `~` and LIMIT,
//! NOMKSTREAM, the ID forms), the trimming by Redis's nodes, and XADD's same-key
//! combining: XADDs of one stream that arrive while another is being committed are
//! applied together to one read of the stream and committed once
//! ([`crate::combine`]), each getting the ID and reply it would have got alone.

use std::sync::Arc;

use bytes::Bytes;
use dmc_resp::Reply;
use futures::future::BoxFuture;

use super::id::{self, StreamId};
use super::stored::{self, Form};
use super::tail;
use super::value::{self, StreamValue};
use super::{edit, edit_locked};

/// Times a batch on a chunked stream starts over because the key changed under it.
const TREE_ATTEMPTS: usize = 8;
use crate::combine::{Answer, Batch, Combiner};
use crate::{Engine, NOT_INTEGER, SYNTAX, notify, parse_i64};

/// A trimming strategy of XADD or XTRIM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Strategy {
    MaxLen(u64),
    MinId(StreamId),
}

#[derive(Debug, Default)]
struct TrimArgs {
    strategy: Option<Strategy>,
    approx: bool,
    /// Entries an approximate trim may remove (0: no bound).
    limit: u64,
}

/// XADD's options and ID: the trim, NOMKSTREAM, the ID (`None`: `*`; the bool is
/// false for `ms-*`) and where the fields start. XTRIM's options when `xadd` is false.
struct AddArgs {
    trim: TrimArgs,
    no_mkstream: bool,
    id: Option<(StreamId, bool)>,
    fields_at: usize,
}

fn parse_add_or_trim(args: &[Bytes], xadd: bool) -> Result<AddArgs, Reply> {
    let mut a = AddArgs {
        trim: TrimArgs::default(),
        no_mkstream: false,
        id: None,
        fields_at: args.len(),
    };
    let mut limit: Option<i64> = None;
    let mut i = 2;
    while i < args.len() {
        let more = args.len() - 1 - i;
        let opt = &args[i];
        let is = |w: &[u8]| opt.eq_ignore_ascii_case(w);
        if xadd && &opt[..] == b"*" {
            a.fields_at = i + 1;
            break;
        } else if (is(b"maxlen") || is(b"minid")) && more > 0 {
            if a.trim.strategy.is_some() {
                return Err(Reply::err(
                    "ERR syntax error, MAXLEN and MINID options at the same time are not compatible",
                ));
            }
            let maxlen = is(b"maxlen");
            a.trim.approx = false;
            let next = &args[i + 1];
            if more >= 2 && (&next[..] == b"~" || &next[..] == b"=") {
                a.trim.approx = &next[..] == b"~";
                i += 1;
            }
            let arg = &args[i + 1];
            a.trim.strategy = Some(if maxlen {
                let n = parse_i64(arg).ok_or_else(|| Reply::err(NOT_INTEGER))?;
                if n < 0 {
                    return Err(Reply::err("ERR The MAXLEN argument must be >= 0."));
                }
                Strategy::MaxLen(n as u64)
            } else {
                Strategy::MinId(id::parse(arg, 0, true).map_err(Reply::err)?)
            });
            i += 2;
            continue;
        } else if is(b"limit") && more > 0 {
            let n = parse_i64(&args[i + 1]).ok_or_else(|| Reply::err(NOT_INTEGER))?;
            if n < 0 {
                return Err(Reply::err("ERR The LIMIT argument must be >= 0."));
            }
            limit = Some(n);
            i += 2;
            continue;
        } else if xadd && is(b"nomkstream") {
            a.no_mkstream = true;
        } else if xadd {
            a.id = Some(id::parse_for_add(opt).map_err(Reply::err)?);
            a.fields_at = i + 1;
            break;
        } else {
            return Err(Reply::err(SYNTAX));
        }
        i += 1;
    }
    if limit.is_some_and(|l| l > 0) && a.trim.strategy.is_none() {
        return Err(Reply::err(
            "ERR syntax error, LIMIT cannot be used without specifying a trimming strategy",
        ));
    }
    if !xadd && a.trim.strategy.is_none() {
        return Err(Reply::err(
            "ERR syntax error, XTRIM must be called with a trimming strategy",
        ));
    }
    a.trim.limit = match limit {
        Some(_) if !a.trim.approx => {
            return Err(Reply::err(
                "ERR syntax error, LIMIT cannot be used without the special ~ option",
            ));
        }
        Some(l) => l as u64,
        None if a.trim.approx => 100 * u64::from(value::NODE_ENTRIES),
        None => 0,
    };
    Ok(a)
}

/// Trims `s` as `t` says, node by node as Redis's `streamTrim` does: a node whose
/// every entry is to go goes whole; an exact trim then removes entries of the next node
/// one by one, an approximate one stops there. The number of entries removed.
fn trim(s: &mut StreamValue, t: &TrimArgs) -> u64 {
    let Some(strategy) = t.strategy else {
        return 0;
    };
    let mut deleted = 0u64;
    let mut i = 0;
    while let Some(&node) = s.nodes.get(i) {
        if let Strategy::MaxLen(max) = strategy
            && s.len() <= max
        {
            break;
        }
        let live = u64::from(node.live);
        if t.limit > 0 && deleted + live > t.limit {
            break;
        }
        let whole = match strategy {
            Strategy::MaxLen(max) => s.len().saturating_sub(live) >= max,
            Strategy::MinId(min) => node.last < min,
        };
        if whole {
            deleted += s.remove_node(i);
            continue;
        }
        if t.approx {
            break;
        }
        let ids: Vec<StreamId> = s
            .entries
            .range(node.first..=node.last)
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            let stop = match strategy {
                Strategy::MaxLen(max) => s.len() <= max,
                Strategy::MinId(min) => id >= min,
            };
            if stop {
                break;
            }
            s.remove(id);
            deleted += 1;
        }
        // The node went if its last entry did; else look at the next one.
        if s.nodes.get(i).is_some_and(|n| n.first == node.first) {
            i += 1;
        }
    }
    deleted
}

/// One XADD waiting to be combined with the others of its stream.
pub(crate) struct XAddOp {
    args: AddArgs,
    fields: Vec<Bytes>,
}

/// An XADD's reply (nil for NOMKSTREAM on a missing key) and whether it trimmed.
type Added = (Reply, bool);

impl XAddOp {
    /// How this XADD trims, if it does.
    pub(super) fn trim_strategy(&self) -> Option<Strategy> {
        self.args.trim.strategy
    }

    /// Applies this XADD to `cur` (`None`: the key is missing) at time `now`.
    pub(super) fn apply(&self, cur: &mut Option<StreamValue>, now: u64) -> Result<Added, Reply> {
        let a = &self.args;
        let s = match cur {
            Some(s) => s,
            None if a.no_mkstream => return Ok((Reply::Null, false)),
            None => cur.insert(StreamValue::default()),
        };
        if s.last_id == StreamId::MAX {
            return Err(Reply::err(
                "ERR The stream has exhausted the last possible ID, unable to add more items",
            ));
        }
        let last = s.last_id;
        let new = match a.id {
            None if now > last.ms => StreamId::new(now, 0),
            None => last.next().unwrap_or(last),
            Some((id, true)) => id,
            Some((id, false)) if id.ms == last.ms => {
                if last.seq == u64::MAX {
                    return Err(Reply::err("ERR Elements are too large to be stored"));
                }
                StreamId::new(last.ms, last.seq + 1)
            }
            Some((id, false)) => id,
        };
        if new <= last {
            return Err(Reply::err(
                "ERR The ID specified in XADD is equal or smaller than the target stream top item",
            ));
        }
        s.append(new, self.fields.clone());
        s.last_id = new;
        s.entries_added += 1;
        let trimmed = trim(s, &a.trim);
        Ok((Reply::bulk(new.to_string()), trimmed > 0))
    }
}

impl Batch for XAddOp {
    type Out = Added;

    fn combiner(engine: &Engine) -> &Combiner<Self> {
        &engine.xadd_batches
    }

    fn run(
        engine: Arc<Engine>,
        db: u8,
        key: Bytes,
        ops: Vec<Self>,
    ) -> BoxFuture<'static, Result<Vec<Answer<Self>>, Reply>> {
        Box::pin(async move {
            let now = engine.now_ms();
            for _ in 0..TREE_ATTEMPTS {
                let Some((old, Form::Chunked { root, head })) =
                    stored::read_for_change(&engine, db, &key).await?
                else {
                    break;
                };
                match tail::add(&engine, db, &key, &ops, now, &old, root, head).await? {
                    tail::Outcome::Done(answers) => return Ok(answers),
                    tail::Outcome::Changed => continue,
                    tail::Outcome::Whole => break,
                }
            }
            edit_locked(&engine, db, &key, |cur| {
                let mut stream = cur;
                let answers: Vec<Answer<Self>> =
                    ops.iter().map(|op| op.apply(&mut stream, now)).collect();
                let wrote = answers
                    .iter()
                    .any(|a| a.as_ref().is_ok_and(|(r, _)| *r != Reply::Null));
                // Nothing added (errors, NOMKSTREAM on a missing key): nothing written.
                let new = if wrote { stream } else { None };
                Ok((answers, new))
            })
            .await
        })
    }
}

pub(super) async fn xadd(engine: &Engine, db: u8, args: &[Bytes]) -> Result<Reply, Reply> {
    let a = parse_add_or_trim(args, true)?;
    let fields = args.get(a.fields_at..).unwrap_or_default();
    if fields.len() < 2 || fields.len() % 2 == 1 {
        return Err(Reply::err(
            "ERR wrong number of arguments for 'xadd' command",
        ));
    }
    if let Some((id, true)) = a.id
        && id.is_zero()
    {
        return Err(Reply::err(
            "ERR The ID specified in XADD must be greater than 0-0",
        ));
    }
    let key = &args[1];
    let op = XAddOp {
        args: a,
        fields: fields.to_vec(),
    };
    let (reply, trimmed) = engine.xadd_batches.submit(engine, db, key, op).await?;
    if reply != Reply::Null {
        engine.notify(notify::STREAM, "xadd", db, key);
        if trimmed {
            engine.notify(notify::STREAM, "xtrim", db, key);
        }
        engine.blocking.wake(db, key);
    }
    Ok(reply)
}

pub(super) async fn xtrim(engine: &Engine, db: u8, args: &[Bytes]) -> Result<Reply, Reply> {
    let a = parse_add_or_trim(args, false)?;
    let key = &args[1];
    let removed = edit(engine, db, key, |cur| {
        let Some(mut s) = cur else {
            return Ok((0, None));
        };
        let n = trim(&mut s, &a.trim);
        Ok((n, (n > 0).then_some(s)))
    })
    .await?;
    if removed > 0 {
        engine.notify(notify::STREAM, "xtrim", db, key);
    }
    Ok(Reply::Int(removed as i64))
}
