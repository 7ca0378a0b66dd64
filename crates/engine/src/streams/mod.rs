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

mod groups;
pub mod id;
mod info;
pub mod value;

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
        StreamCmd::XAdd => xadd(engine, db, args).await,
        StreamCmd::XLen => load(engine, db, &args[1])
            .await
            .map(|v| Reply::Int(v.map_or(0, |s| s.len() as i64))),
        StreamCmd::XRange => xrange(engine, db, args, false).await,
        StreamCmd::XRevRange => xrange(engine, db, args, true).await,
        StreamCmd::XDel => xdel(engine, db, args).await,
        StreamCmd::XTrim => xtrim(engine, db, args).await,
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
    match engine.read_typed(db, key).await.map_err(error_reply)? {
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
    mut f: impl FnMut(Option<StreamValue>) -> Result<(T, Option<StreamValue>), Reply>,
) -> Result<T, Reply> {
    let _g = engine.lock_key(key).await;
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

/// A trimming strategy of XADD or XTRIM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Strategy {
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

async fn xadd(engine: &Engine, db: u8, args: &[Bytes]) -> Result<Reply, Reply> {
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
    let now = engine.now_ms();
    let key = &args[1];
    let (reply, trimmed) = edit(engine, db, key, |cur| {
        let mut s = match cur {
            Some(s) => s,
            None if a.no_mkstream => return Ok(((Reply::Null, false), None)),
            None => StreamValue::default(),
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
        s.append(new, fields.to_vec());
        s.last_id = new;
        s.entries_added += 1;
        let trimmed = trim(&mut s, &a.trim);
        Ok(((Reply::bulk(new.to_string()), trimmed > 0), Some(s)))
    })
    .await?;
    if reply != Reply::Null {
        engine.notify(notify::STREAM, "xadd", db, key);
        if trimmed {
            engine.notify(notify::STREAM, "xtrim", db, key);
        }
        engine.blocking.wake(db, key);
    }
    Ok(reply)
}

async fn xtrim(engine: &Engine, db: u8, args: &[Bytes]) -> Result<Reply, Reply> {
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
