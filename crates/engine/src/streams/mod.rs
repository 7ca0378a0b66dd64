//! The stream family: XADD, XRANGE, XREVRANGE, XLEN, XDEL, XTRIM, XSETID and XREAD
//! here, the consumer groups in [`groups`] (their pending entries' XPENDING, XCLAIM
//! and XAUTOCLAIM in [`claims`]), XINFO in [`info`], with Redis 7.0's
//! argument rules, replies and error texts (`t_stream.c`).
//!
//! A stream is one key of type `stream` whose value is the packed form of
//! [`value::StreamValue`] (entries, counters and consumer groups with their pending
//! entries) or, past 4 KiB, its entries in a chunk tree and the rest packed after the
//! root ([`stored`]; XADD's batches on that form are [`tail`]'s). A change is a
//! read-modify-write under the key's lock committed in one slot swap, so a reader on
//! any agent sees the stream before or after a command, never half of it; an emptied
//! stream stays, as in Redis. Blocking reads wait in [`crate::blocking`] on the key's
//! owner, which every XADD runs on.
//!
//! Approximate trimming (`~`) removes whole nodes, as Redis does: the stream records
//! where Redis's radix-tree nodes would be ([`value::Node`], up to
//! [`value::NODE_ENTRIES`] entries each, appended in order). Redis also closes a node
//! at 4 KiB of entries (`stream-node-max-bytes`), which DMC does not model, so with
//! large entries `~` may keep more entries than Redis would (never fewer than asked).

mod add;
mod claims;
mod groups;
pub mod id;
mod info;
mod stored;
mod tail;
pub mod value;

pub(crate) use add::XAddOp;

use std::collections::BTreeSet;

use bytes::Bytes;
use dmc_dht::ValueKind;
use dmc_resp::Reply;

use crate::table::StreamCmd;
use crate::{Engine, NOT_INTEGER, SYNTAX, Session, notify, parse_i64};
use id::StreamId;
use value::StreamValue;

const KIND: ValueKind = ValueKind::Stream;
/// Times a change starts over because the key changed under it.
const EDIT_ATTEMPTS: usize = 8;

pub async fn run(engine: &Engine, s: &mut Session, cmd: StreamCmd, args: &[Bytes]) -> Reply {
    let db = engine.physical_db(s.db);
    let result = match cmd {
        StreamCmd::XAdd => add::xadd(engine, db, args).await,
        StreamCmd::XLen => stored::load_head(engine, db, &args[1])
            .await
            .map(|v| Reply::Int(v.map_or(0, |s| s.len() as i64))),
        StreamCmd::XRange => xrange(engine, db, args, false).await,
        StreamCmd::XRevRange => xrange(engine, db, args, true).await,
        StreamCmd::XDel => xdel(engine, db, args).await,
        StreamCmd::XTrim => add::xtrim(engine, db, args).await,
        StreamCmd::XSetId => xsetid(engine, db, args).await,
        StreamCmd::XRead | StreamCmd::XReadGroup => {
            groups::xread(engine, s, db, args, cmd == StreamCmd::XReadGroup).await
        }
        StreamCmd::XGroup => groups::xgroup(engine, db, args).await,
        StreamCmd::XAck => groups::xack(engine, db, args).await,
        StreamCmd::XPending => claims::xpending(engine, db, args).await,
        StreamCmd::XClaim => claims::xclaim(engine, db, args).await,
        StreamCmd::XAutoClaim => claims::xautoclaim(engine, db, args).await,
        StreamCmd::XInfo => info::xinfo(engine, s, db, args).await,
    };
    result.unwrap_or_else(|r| r)
}

pub(crate) use stored::{Need, load, load_head};

/// Changes the stream `key` under its lock: `f` gets it (`None`: missing) and returns
/// its answer and the new stream, or `None` to write nothing. `f` may run again if
/// the key changed meanwhile (eviction, expiry), so it must start from what it gets.
pub(crate) async fn edit<T>(
    engine: &Engine,
    db: u8,
    key: &[u8],
    f: impl FnMut(Option<StreamValue>) -> Result<(T, Option<StreamValue>), Reply>,
) -> Result<T, Reply> {
    let _g = engine.lock_key(key).await;
    edit_locked(engine, db, key, f).await
}

/// [`edit`] by a caller that holds the key's lock (a batch of XADDs).
pub(crate) async fn edit_locked<T>(
    engine: &Engine,
    db: u8,
    key: &[u8],
    f: impl FnMut(Option<StreamValue>) -> Result<(T, Option<StreamValue>), Reply>,
) -> Result<T, Reply> {
    edit_needing_locked(engine, db, key, |_| Need::All, f).await
}

/// [`edit`] of a change that reads only the entries `need` names, given the stream's
/// head (its groups and counters; `len()` counts every entry): a chunked stream is
/// then handed to `f` with those entries and its first and last one loaded, the rest
/// left in its tree (a packed stream comes whole).
pub(crate) async fn edit_needing<T>(
    engine: &Engine,
    db: u8,
    key: &[u8],
    need: impl Fn(&StreamValue) -> Need,
    f: impl FnMut(Option<StreamValue>) -> Result<(T, Option<StreamValue>), Reply>,
) -> Result<T, Reply> {
    let _g = engine.lock_key(key).await;
    edit_needing_locked(engine, db, key, need, f).await
}

async fn edit_needing_locked<T>(
    engine: &Engine,
    db: u8,
    key: &[u8],
    need: impl Fn(&StreamValue) -> Need,
    mut f: impl FnMut(Option<StreamValue>) -> Result<(T, Option<StreamValue>), Reply>,
) -> Result<T, Reply> {
    for _ in 0..EDIT_ATTEMPTS {
        let (old, current, tree) = match stored::read_for_change(engine, db, key).await? {
            None => (None, None, None),
            Some((old, stored::Form::Packed(s))) => (Some(old), Some(s), None),
            Some((old, stored::Form::Chunked { root, mut head })) => {
                head.unloaded = root.count;
                let wanted = need(&head);
                match stored::load_entries(engine, db, key, root, &wanted).await {
                    Ok(entries) => head.entries = entries,
                    Err(crate::tree::TreeError::Stale) => continue,
                    Err(e) => return Err(e.into()),
                }
                head.unloaded = root.count.saturating_sub(head.entries.len() as u64);
                let ids: BTreeSet<StreamId> = head.entries.keys().copied().collect();
                (Some(old), Some(head), Some((root, ids)))
            }
        };
        let (answer, new) = f(current)?;
        let Some(new) = new else {
            return Ok(answer);
        };
        let had = tree.as_ref().map(|(root, ids)| (*root, ids));
        if stored::commit(engine, db, key, old.as_ref(), had, &new).await? {
            engine.wrote_typed(db, key, KIND, None);
            return Ok(answer);
        }
    }
    Err(Reply::err(
        "TRYAGAIN too much contention on this key, try again",
    ))
}

/// An entry as replies show it: `[id, [field, value, ...]]`.
pub(crate) fn entry_reply(id: StreamId, fields: &[Bytes]) -> Reply {
    Reply::Array(vec![
        Reply::bulk(id.to_string()),
        Reply::Array(fields.iter().cloned().map(Reply::Bulk).collect()),
    ])
}

async fn xdel(engine: &Engine, db: u8, args: &[Bytes]) -> Result<Reply, Reply> {
    // Every ID is checked before anything is deleted.
    let ids = args[2..]
        .iter()
        .map(|a| id::parse(a, 0, true))
        .collect::<Result<Vec<_>, _>>()
        .map_err(Reply::err)?;
    let key = &args[1];
    let deleted = edit(engine, db, key, |cur| {
        let Some(mut s) = cur else {
            return Ok((0, None));
        };
        let mut n = 0;
        for id in &ids {
            if s.remove(*id) {
                n += 1;
                s.max_deleted = s.max_deleted.max(*id);
            }
        }
        Ok((n, (n > 0).then_some(s)))
    })
    .await?;
    if deleted > 0 {
        engine.notify(notify::STREAM, "xdel", db, key);
    }
    Ok(Reply::Int(deleted))
}

async fn xrange(engine: &Engine, db: u8, args: &[Bytes], rev: bool) -> Result<Reply, Reply> {
    let (start_arg, end_arg) = if rev {
        (&args[3], &args[2])
    } else {
        (&args[2], &args[3])
    };
    let (mut start, ex) = id::parse_interval(start_arg, 0).map_err(Reply::err)?;
    if ex {
        start = start
            .next()
            .ok_or_else(|| Reply::err("ERR invalid start ID for the interval"))?;
    }
    let (mut end, ex) = id::parse_interval(end_arg, u64::MAX).map_err(Reply::err)?;
    if ex {
        end = end
            .prev()
            .ok_or_else(|| Reply::err("ERR invalid end ID for the interval"))?;
    }
    let mut count: Option<u64> = None;
    let mut j = 4;
    while j < args.len() {
        if args[j].eq_ignore_ascii_case(b"count") && j + 1 < args.len() {
            let n = parse_i64(&args[j + 1]).ok_or_else(|| Reply::err(NOT_INTEGER))?;
            count = Some(n.max(0) as u64);
            j += 2;
        } else {
            return Err(Reply::err(SYNTAX));
        }
    }
    if count == Some(0) {
        // Redis answers a missing key's COUNT 0 with an empty array, an existing one's
        // with a null.
        let exists = stored::load_head(engine, db, &args[1]).await?.is_some();
        return Ok(if exists {
            Reply::NullArray
        } else {
            Reply::Array(Vec::new())
        });
    }
    let limit = count.unwrap_or(u64::MAX);
    let found = stored::range(engine, db, &args[1], (start, end), limit, rev).await?;
    Ok(Reply::Array(
        found
            .unwrap_or_default()
            .iter()
            .map(|(id, f)| entry_reply(*id, f))
            .collect(),
    ))
}

async fn xsetid(engine: &Engine, db: u8, args: &[Bytes]) -> Result<Reply, Reply> {
    let new_last = id::parse(&args[2], 0, true).map_err(Reply::err)?;
    let (mut added, mut max_deleted) = (None, None);
    let mut j = 3;
    while j < args.len() {
        let more = j + 1 < args.len();
        if args[j].eq_ignore_ascii_case(b"entriesadded") && more {
            let n = parse_i64(&args[j + 1]).ok_or_else(|| Reply::err(NOT_INTEGER))?;
            if n < 0 {
                return Err(Reply::err("ERR entries_added must be positive"));
            }
            added = Some(n as u64);
        } else if args[j].eq_ignore_ascii_case(b"maxdeletedid") && more {
            let id = id::parse(&args[j + 1], 0, true).map_err(Reply::err)?;
            if new_last < id {
                return Err(Reply::err(
                    "ERR The ID specified in XSETID is smaller than the provided max_deleted_entry_id",
                ));
            }
            max_deleted = Some(id);
        } else {
            return Err(Reply::err(SYNTAX));
        }
        j += 2;
    }
    let key = &args[1];
    edit(engine, db, key, |cur| {
        let Some(mut s) = cur else {
            return Err(Reply::err("ERR no such key"));
        };
        if let Some(&top) = s.entries.keys().next_back() {
            if new_last < top {
                return Err(Reply::err(
                    "ERR The ID specified in XSETID is smaller than the target stream top item",
                ));
            }
            if added.is_some_and(|n| s.len() > n) {
                return Err(Reply::err(
                    "ERR The entries_added specified in XSETID is smaller than the target stream length",
                ));
            }
        }
        s.last_id = new_last;
        if let Some(n) = added {
            s.entries_added = n;
        }
        if let Some(id) = max_deleted.filter(|id| !id.is_zero()) {
            s.max_deleted = id;
        }
        Ok(((), Some(s)))
    })
    .await?;
    engine.notify(notify::STREAM, "xsetid", db, key);
    Ok(Reply::ok())
}
