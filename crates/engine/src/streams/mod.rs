//! The stream family: XADD, XRANGE, XREVRANGE, XLEN, XDEL, XTRIM, XSETID and XREAD
//! here, the consumer groups in [`groups`], XINFO in [`info`], with Redis 7.0's
//! argument rules, replies and error texts (`t_stream.c`).
//!
//! A stream is one key of type `stream` whose value is the packed form of
//! [`value::StreamValue`]: entries, counters and consumer groups with their pending
//! entries. A change is a read-modify-write under the key's lock committed in one slot
//! swap (`Dht::update_kind`), so a reader on any agent sees the stream before or after
//! a command, never half of it; an emptied stream stays, as in Redis. Blocking reads
//! wait in [`crate::blocking`] on the key's owner, which every XADD runs on.
//!
//! Approximate trimming (`~`) removes whole nodes, as Redis does: the stream records
//! where Redis's radix-tree nodes would be ([`value::Node`], up to
//! [`value::NODE_ENTRIES`] entries each, appended in order). Redis also closes a node
//! at 4 KiB of entries (`stream-node-max-bytes`), which DMC does not model, so with
//! large entries `~` may keep more entries than Redis would (never fewer than asked).

mod add;
mod groups;
pub mod id;
mod info;
pub mod value;

pub(crate) use add::XAddOp;

use bytes::Bytes;
use dmc_dht::{Change, ValueKind};
use dmc_resp::Reply;

use crate::table::StreamCmd;
use crate::{Engine, NOT_INTEGER, SYNTAX, Session, error_reply, notify, parse_i64};
use id::StreamId;
use value::StreamValue;

const KIND: ValueKind = ValueKind::Stream;

pub async fn run(engine: &Engine, s: &mut Session, cmd: StreamCmd, args: &[Bytes]) -> Reply {
    let db = engine.physical_db(s.db);
    let result = match cmd {
        StreamCmd::XAdd => add::xadd(engine, db, args).await,
        StreamCmd::XLen => load(engine, db, &args[1])
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
        StreamCmd::XPending => groups::xpending(engine, db, args).await,
        StreamCmd::XClaim => groups::xclaim(engine, db, args).await,
        StreamCmd::XAutoClaim => groups::xautoclaim(engine, db, args).await,
        StreamCmd::XInfo => info::xinfo(engine, s, db, args).await,
    };
    result.unwrap_or_else(|r| r)
}

/// The stream at `key` (`None`: missing); WRONGTYPE for another type.
pub(crate) async fn load(
    engine: &Engine,
    db: u8,
    key: &[u8],
) -> Result<Option<StreamValue>, Reply> {
    match engine.read_stored(db, key).await.map_err(error_reply)? {
        Some((KIND, v)) => Ok(Some(StreamValue::decode(&v)?)),
        Some(_) => Err(error_reply(dmc_dht::DhtError::WrongType)),
        None => Ok(None),
    }
}

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
    mut f: impl FnMut(Option<StreamValue>) -> Result<(T, Option<StreamValue>), Reply>,
) -> Result<T, Reply> {
    let mut answer = None;
    let mut wrote = false;
    let updated = engine
        .dht
        .update_kind(db, key, KIND, |cur| {
            let current = cur.map(|v| StreamValue::decode(v)).transpose()?;
            let (t, new) = f(current)?;
            answer = Some(t);
            wrote = new.is_some();
            Ok::<_, Reply>(match new {
                Some(v) => Change::Write(v.encode().into()),
                None => Change::Keep,
            })
        })
        .await;
    match updated {
        Ok(Ok(())) => {}
        Ok(Err(reply)) => return Err(reply),
        Err(e) => return Err(error_reply(e)),
    }
    if wrote {
        engine.wrote_typed(db, key, KIND, None);
    }
    answer.ok_or_else(|| Reply::err("ERR internal: a stream change gave no answer"))
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
    let Some(s) = load(engine, db, &args[1]).await? else {
        return Ok(Reply::Array(Vec::new()));
    };
    if count == Some(0) {
        return Ok(Reply::NullArray);
    }
    if start > end {
        return Ok(Reply::Array(Vec::new()));
    }
    let limit = count.map_or(usize::MAX, |c| usize::try_from(c).unwrap_or(usize::MAX));
    let range = s.entries.range(start..=end);
    let items: Vec<Reply> = if rev {
        range
            .rev()
            .take(limit)
            .map(|(id, f)| entry_reply(*id, f))
            .collect()
    } else {
        range
            .take(limit)
            .map(|(id, f)| entry_reply(*id, f))
            .collect()
    };
    Ok(Reply::Array(items))
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
