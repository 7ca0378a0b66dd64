//! XREAD and XREADGROUP (blocking or not), XGROUP and XACK, with Redis 7.0's rules
//! (`t_stream.c`); the pending entries' inspection and transfer (XPENDING, XCLAIM,
//! XAUTOCLAIM) are [`super::claims`]'s.
//!
//! A group's state (last delivered ID, read counter, pending entries, consumers) is
//! part of the stream's value, so an XREADGROUP that delivers entries is a write of
//! the stream: it runs on the key's owner, and the owner's successor after a failover
//! reads the same pending entries from the pool.

use std::time::Duration;

use bytes::Bytes;
use dmc_resp::Reply;

use super::id::{self, StreamId};
use super::value::{Consumer, Group, Pending, StreamValue};
use super::{Need, edit_needing, entry_reply, load_head};
use crate::{Engine, NOT_INTEGER, SYNTAX, Session, notify, parse_i64};

/// Entries a blocked XREAD without COUNT is served at most (Redis's
/// `XREAD_BLOCKED_DEFAULT_COUNT`).
const BLOCKED_DEFAULT_COUNT: u64 = 1000;

pub(super) fn no_group(key: &[u8], group: &[u8], suffix: &str) -> Reply {
    Reply::Error(format!(
        "NOGROUP No such key '{}' or consumer group '{}'{suffix}",
        String::from_utf8_lossy(key),
        String::from_utf8_lossy(group)
    ))
}

/// What one stream of an XREAD is read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum From {
    /// Entries after this ID.
    After(StreamId),
    /// XREADGROUP's `>`: entries never delivered to the group.
    New,
}

struct ReadArgs {
    block: Option<Option<Duration>>,
    count: u64,
    group: Option<(Bytes, Bytes)>,
    noack: bool,
    keys: Vec<Bytes>,
    ids: Vec<Bytes>,
}

fn parse_read(s: &Session, args: &[Bytes], group_mode: bool) -> Result<ReadArgs, Reply> {
    let mut a = ReadArgs {
        block: None,
        count: 0,
        group: None,
        noack: false,
        keys: Vec::new(),
        ids: Vec::new(),
    };
    let mut streams_at = None;
    let mut i = 1;
    while i < args.len() {
        let more = args.len() - i - 1;
        let o = &args[i];
        let is = |w: &[u8]| o.eq_ignore_ascii_case(w);
        if is(b"block") && more > 0 {
            if s.in_script {
                return Err(Reply::Error(format!(
                    "ERR {} command is not allowed with BLOCK option from scripts",
                    String::from_utf8_lossy(&args[0])
                )));
            }
            i += 1;
            let ms = parse_i64(&args[i])
                .ok_or_else(|| Reply::err("ERR timeout is not an integer or out of range"))?;
            if ms < 0 {
                return Err(Reply::err("ERR timeout is negative"));
            }
            a.block = Some((ms > 0).then(|| Duration::from_millis(ms as u64)));
        } else if is(b"count") && more > 0 {
            i += 1;
            let n = parse_i64(&args[i]).ok_or_else(|| Reply::err(NOT_INTEGER))?;
            a.count = n.max(0) as u64;
        } else if is(b"streams") && more > 0 {
            streams_at = Some(i + 1);
            break;
        } else if is(b"group") && more >= 2 {
            if !group_mode {
                return Err(Reply::err(
                    "ERR The GROUP option is only supported by XREADGROUP. You called XREAD instead.",
                ));
            }
            a.group = Some((args[i + 1].clone(), args[i + 2].clone()));
            i += 2;
        } else if is(b"noack") {
            if !group_mode {
                return Err(Reply::err(
                    "ERR The NOACK option is only supported by XREADGROUP. You called XREAD instead.",
                ));
            }
            a.noack = true;
        } else {
            return Err(Reply::err(SYNTAX));
        }
        i += 1;
    }
    let Some(at) = streams_at else {
        return Err(Reply::err(SYNTAX));
    };
    let rest = &args[at..];
    if !rest.len().is_multiple_of(2) {
        return Err(Reply::err(
            "ERR Unbalanced XREAD list of streams: for each stream key an ID or '$' must be specified.",
        ));
    }
    if group_mode && a.group.is_none() {
        return Err(Reply::err("ERR Missing GROUP option for XREADGROUP"));
    }
    let n = rest.len() / 2;
    a.keys = rest[..n].to_vec();
    a.ids = rest[n..].to_vec();
    Ok(a)
}

/// XREAD and XREADGROUP.
pub(super) async fn xread(
    engine: &Engine,
    s: &Session,
    db: u8,
    args: &[Bytes],
    group_mode: bool,
) -> Result<Reply, Reply> {
    let a = parse_read(s, args, group_mode)?;
    // Resolve every ID (and check every key and group) before serving any.
    let mut from = Vec::with_capacity(a.keys.len());
    for (key, arg) in a.keys.iter().zip(&a.ids) {
        let stream = super::stored::load_head(engine, db, key).await?;
        if let Some((g, _)) = &a.group
            && !stream.as_ref().is_some_and(|st| st.groups.contains_key(g))
        {
            return Err(no_group(key, g, " in XREADGROUP with GROUP option"));
        }
        from.push(match &arg[..] {
            b"$" if group_mode => {
                return Err(Reply::err(
                    "ERR The $ ID is meaningless in the context of XREADGROUP: you want to read the history of this consumer by specifying a proper ID, or use the > ID to get new messages. The $ ID would just return an empty result set.",
                ));
            }
            b"$" => From::After(stream.map_or(StreamId::MIN, |st| st.last_id)),
            b">" if !group_mode => {
                return Err(Reply::err(
                    "ERR The > ID can be specified only when calling XREADGROUP using the GROUP <group> <consumer> option.",
                ));
            }
            b">" => From::New,
            _ => From::After(id::parse(arg, 0, true).map_err(Reply::err)?),
        });
    }
    let served = serve(engine, s, db, &a, &from, a.count).await?;
    if served.is_some() || a.block.is_none() {
        return Ok(served.unwrap_or(Reply::NullArray));
    }
    let timeout = a.block.flatten();
    let count = if a.count > 0 {
        a.count
    } else {
        BLOCKED_DEFAULT_COUNT
    };
    let keys = a.keys.clone();
    let (a, from) = (&a, &from);
    Ok(
        crate::blocking::block(engine, s, db, &keys, timeout, || async move {
            serve(engine, s, db, a, from, count).await
        })
        .await,
    )
}

/// One attempt to serve an XREAD: the reply if any stream had something.
async fn serve(
    engine: &Engine,
    s: &Session,
    db: u8,
    a: &ReadArgs,
    from: &[From],
    count: u64,
) -> Result<Option<Reply>, Reply> {
    let mut out = Vec::new();
    for (key, f) in a.keys.iter().zip(from) {
        let entries = match &a.group {
            None => {
                let From::After(after) = *f else { continue };
                let Some(start) = after.next() else { continue };
                let range = (start, StreamId::MAX);
                let found = super::stored::range(engine, db, key, range, count_limit(count), false);
                match found.await? {
                    Some(entries) if !entries.is_empty() => Some(
                        entries
                            .iter()
                            .map(|(id, fields)| entry_reply(*id, fields))
                            .collect::<Vec<_>>(),
                    ),
                    _ => continue,
                }
            }
            Some((group, consumer)) => {
                serve_group(engine, db, key, group, consumer, *f, count, a.noack).await?
            }
        };
        if let Some(entries) = entries {
            out.push((Reply::Bulk(key.clone()), Reply::Array(entries)));
        }
    }
    if out.is_empty() {
        return Ok(None);
    }
    Ok(Some(if s.proto >= 3 {
        Reply::Map(out)
    } else {
        Reply::Array(
            out.into_iter()
                .map(|(k, v)| Reply::Array(vec![k, v]))
                .collect(),
        )
    }))
}

fn limit(count: u64) -> usize {
    if count == 0 {
        usize::MAX
    } else {
        usize::try_from(count).unwrap_or(usize::MAX)
    }
}

/// [`limit`] as a count of entries to read.
fn count_limit(count: u64) -> u64 {
    if count == 0 { u64::MAX } else { count }
}

/// XREADGROUP on one stream: its entries, or `None` when `>` finds nothing new.
#[allow(clippy::too_many_arguments)]
async fn serve_group(
    engine: &Engine,
    db: u8,
    key: &Bytes,
    group: &Bytes,
    consumer: &Bytes,
    from: From,
    count: u64,
    noack: bool,
) -> Result<Option<Vec<Reply>>, Reply> {
    let now = engine.now_ms();
    // The entries this read can serve: the new ones after the group's last ID, or the
    // consumer's own pending ones.
    let need = |st: &StreamValue| match st.groups.get(group) {
        None => Need::ends(),
        Some(g) => match from {
            From::New => Need::Window {
                ranges: g
                    .last_id
                    .next()
                    .map(|s| (s, count_limit(count)))
                    .into_iter()
                    .collect(),
                ids: Vec::new(),
            },
            From::After(after) => Need::Window {
                ranges: Vec::new(),
                ids: after
                    .next()
                    .map(|start| {
                        g.pending_of(consumer)
                            .filter(|id| *id >= start)
                            .take(limit(count))
                            .collect()
                    })
                    .unwrap_or_default(),
            },
        },
    };
    let (entries, created) = edit_needing(engine, db, key, need, |cur| {
        let Some(mut st) = cur else {
            return Err(no_group(key, group, " in XREADGROUP with GROUP option"));
        };
        let Some(mut g) = st.groups.remove(group) else {
            return Err(no_group(key, group, " in XREADGROUP with GROUP option"));
        };
        let served = match from {
            From::After(after) => Some(history(&st, &mut g, consumer, after, count, now)),
            From::New => {
                let top = st.entries.keys().next_back().copied();
                if top.is_some_and(|t| t > g.last_id) {
                    Some(deliver(&st, &mut g, consumer, count, noack, now))
                } else {
                    None
                }
            }
        };
        let Some(entries) = served else {
            st.groups.insert(group.clone(), g);
            return Ok(((None, false), None));
        };
        let active = from == From::New && !noack && !entries.is_empty();
        let created = touch(&mut g, consumer, now, active);
        st.groups.insert(group.clone(), g);
        Ok(((Some(entries), created), Some(st)))
    })
    .await?;
    if created {
        engine.notify(notify::STREAM, "xgroup-createconsumer", db, key);
    }
    Ok(entries)
}

/// Records that `consumer` was seen now (and, `active`, that it read or claimed
/// something), creating it if it is new; whether it was created.
pub(super) fn touch(g: &mut Group, consumer: &Bytes, now: u64, active: bool) -> bool {
    let created = !g.consumers.contains_key(consumer);
    let c = g
        .consumers
        .entry(consumer.clone())
        .or_insert_with(|| Consumer::new(now));
    c.seen_time = now;
    if active {
        c.active_time = Some(now);
    }
    created
}

/// The consumer's own pending entries after `after` (XREADGROUP with an ID): each
/// delivered again (a deleted entry shows as its ID and a nil).
fn history(
    st: &StreamValue,
    g: &mut Group,
    consumer: &[u8],
    after: StreamId,
    count: u64,
    now: u64,
) -> Vec<Reply> {
    let Some(start) = after.next() else {
        return Vec::new();
    };
    let ids: Vec<StreamId> = g
        .pending_of(consumer)
        .filter(|id| *id >= start)
        .take(limit(count))
        .collect();
    ids.into_iter()
        .map(|id| match st.entries.get(&id) {
            Some(fields) => {
                if let Some(p) = g.pending.get_mut(&id) {
                    p.delivery_time = now;
                    p.delivery_count += 1;
                }
                entry_reply(id, fields)
            }
            None => Reply::Array(vec![Reply::bulk(id.to_string()), Reply::NullArray]),
        })
        .collect()
}

/// New entries for the group (`>`): moves its last ID and read counter, and adds
/// them to the pending entries of `consumer` unless `noack`.
fn deliver(
    st: &StreamValue,
    g: &mut Group,
    consumer: &Bytes,
    count: u64,
    noack: bool,
    now: u64,
) -> Vec<Reply> {
    let Some(start) = g.last_id.next() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (id, fields) in st.entries.range(start..).take(limit(count)) {
        if *id > g.last_id {
            g.entries_read = match g.entries_read {
                Some(n) if !st.has_tombstones(*id, StreamId::MAX) => Some(n + 1),
                _ if st.entries_added > 0 => st.distance_from_first(*id),
                other => other,
            };
            g.last_id = *id;
        }
        out.push(entry_reply(*id, fields));
        if !noack {
            g.pending.insert(
                *id,
                Pending {
                    consumer: consumer.clone(),
                    delivery_time: now,
                    delivery_count: 1,
                },
            );
        }
    }
    out
}

const XGROUP_HELP: &[&str] = &[
    "XGROUP <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CREATE <key> <groupname> <id|$> [option]",
    "    Create a new consumer group. Options are:",
    "    * MKSTREAM",
    "      Create the empty stream if it does not exist.",
    "    * ENTRIESREAD entries_read",
    "      Set the group's entries_read counter (internal use).",
    "CREATECONSUMER <key> <groupname> <consumer>",
    "    Create a new consumer in the specified group.",
    "DELCONSUMER <key> <groupname> <consumer>",
    "    Remove the specified consumer.",
    "DESTROY <key> <groupname>",
    "    Remove the specified group.",
    "SETID <key> <groupname> <id|$> [ENTRIESREAD entries_read]",
    "    Set the current group ID and entries_read counter.",
    "HELP",
    "    Prints this help.",
];

const XGROUP_SUBS: &[(&str, i32)] = &[
    ("CREATE", -5),
    ("SETID", -5),
    ("DESTROY", 4),
    ("CREATECONSUMER", 5),
    ("DELCONSUMER", 5),
    ("HELP", 2),
];

/// Whether `sub` with `argc` arguments fits its arity in `subs`; the refusal if not.
pub(super) fn check_sub(
    container: &str,
    subs: &[(&str, i32)],
    sub: &[u8],
    argc: usize,
) -> Result<(), Reply> {
    let known: Vec<&str> = subs.iter().map(|(n, _)| *n).collect();
    let fits = subs.iter().any(|(n, arity)| {
        n.as_bytes().eq_ignore_ascii_case(sub)
            && if *arity >= 0 {
                argc == *arity as usize
            } else {
                argc >= arity.unsigned_abs() as usize
            }
    });
    if fits {
        Ok(())
    } else {
        Err(crate::subcommands::refused(container, sub, &known))
    }
}

/// Redis's `addReplySubcommandSyntaxError`.
pub(super) fn sub_syntax(args: &[Bytes]) -> Reply {
    Reply::Error(format!(
        "ERR unknown subcommand or wrong number of arguments for '{}'. Try {} HELP.",
        String::from_utf8_lossy(&args[1]),
        crate::upper(&args[0])
    ))
}

pub(super) async fn xgroup(engine: &Engine, db: u8, args: &[Bytes]) -> Result<Reply, Reply> {
    let sub = crate::upper(&args[1]);
    check_sub("XGROUP", XGROUP_SUBS, &args[1], args.len())?;
    if sub == "HELP" {
        return Ok(crate::subcommands::help(XGROUP_HELP));
    }
    let (key, group) = (&args[2], &args[3]);
    let mut mkstream = false;
    let mut entries_read: Option<Option<u64>> = None;
    let mut i = 5;
    while i < args.len() {
        let create = sub == "CREATE";
        if create && args[i].eq_ignore_ascii_case(b"mkstream") {
            mkstream = true;
            i += 1;
        } else if (create || sub == "SETID")
            && args[i].eq_ignore_ascii_case(b"entriesread")
            && i + 1 < args.len()
        {
            let n = parse_i64(&args[i + 1]).ok_or_else(|| Reply::err(NOT_INTEGER))?;
            if n < -1 {
                return Err(Reply::err(
                    "ERR value for ENTRIESREAD must be positive or -1",
                ));
            }
            entries_read = Some(u64::try_from(n).ok());
            i += 2;
        } else {
            return Err(sub_syntax(args));
        }
    }
    if (sub == "SETID" && args.len() != 5 && args.len() != 7) || (sub == "CREATE" && args.len() > 8)
    {
        return Err(sub_syntax(args));
    }
    let now = engine.now_ms();
    let (reply, event) = edit_needing(engine, db, key, |_| Need::ends(), |cur| {
        let mut st = match cur {
            Some(st) => st,
            None if mkstream => StreamValue::default(),
            None => {
                return Err(Reply::err(
                    "ERR The XGROUP subcommand requires the key to exist. Note that for CREATE you may want to use the MKSTREAM option to create an empty stream automatically.",
                ));
            }
        };
        let exists = st.groups.contains_key(group);
        if !exists && matches!(sub.as_str(), "SETID" | "CREATECONSUMER" | "DELCONSUMER") {
            return Err(Reply::Error(format!(
                "NOGROUP No such consumer group '{}' for key name '{}'",
                String::from_utf8_lossy(group),
                String::from_utf8_lossy(key)
            )));
        }
        let id_arg = |st: &StreamValue, strict: bool| -> Result<StreamId, Reply> {
            if &args[4][..] == b"$" {
                Ok(st.last_id)
            } else {
                id::parse(&args[4], 0, strict).map_err(Reply::err)
            }
        };
        match sub.as_str() {
            "CREATE" => {
                let id = id_arg(&st, true)?;
                if exists {
                    return Err(Reply::err("BUSYGROUP Consumer Group name already exists"));
                }
                st.groups
                    .insert(group.clone(), Group::new(id, entries_read.flatten()));
                Ok(((Reply::ok(), Some("xgroup-create")), Some(st)))
            }
            "SETID" => {
                let id = id_arg(&st, false)?;
                if let Some(g) = st.groups.get_mut(group) {
                    g.last_id = id;
                    g.entries_read = entries_read.flatten();
                }
                Ok(((Reply::ok(), Some("xgroup-setid")), Some(st)))
            }
            "DESTROY" => {
                if st.groups.remove(group).is_some() {
                    Ok(((Reply::Int(1), Some("xgroup-destroy")), Some(st)))
                } else {
                    Ok(((Reply::Int(0), None), None))
                }
            }
            "CREATECONSUMER" => {
                let g = st.groups.get_mut(group).ok_or_else(|| Reply::err(SYNTAX))?;
                if g.consumers.contains_key(&args[4]) {
                    return Ok(((Reply::Int(0), None), None));
                }
                g.consumers
                    .insert(args[4].clone(), Consumer::new(now));
                Ok(((Reply::Int(1), Some("xgroup-createconsumer")), Some(st)))
            }
            _ => {
                let g = st.groups.get_mut(group).ok_or_else(|| Reply::err(SYNTAX))?;
                if g.consumers.remove(&args[4]).is_none() {
                    return Ok(((Reply::Int(0), None), None));
                }
                let before = g.pending.len();
                g.pending.retain(|_, p| p.consumer != args[4]);
                let n = (before - g.pending.len()) as i64;
                Ok(((Reply::Int(n), Some("xgroup-delconsumer")), Some(st)))
            }
        }
    })
    .await?;
    if let Some(event) = event {
        engine.notify(notify::STREAM, event, db, key);
        if event == "xgroup-destroy" {
            // Blocked XREADGROUPs on this group learn it is gone.
            engine.blocking.wake(db, key);
        }
    }
    Ok(reply)
}

pub(super) async fn xack(engine: &Engine, db: u8, args: &[Bytes]) -> Result<Reply, Reply> {
    let (key, group) = (&args[1], &args[2]);
    let Some(st) = load_head(engine, db, key).await? else {
        return Ok(Reply::Int(0));
    };
    if !st.groups.contains_key(group) {
        return Ok(Reply::Int(0));
    }
    let ids = args[3..]
        .iter()
        .map(|a| id::parse(a, 0, true))
        .collect::<Result<Vec<_>, _>>()
        .map_err(Reply::err)?;
    let acked = edit_needing(
        engine,
        db,
        key,
        |_| Need::ends(),
        |cur| {
            let Some(mut st) = cur else {
                return Ok((0, None));
            };
            let Some(g) = st.groups.get_mut(group) else {
                return Ok((0, None));
            };
            let n = ids
                .iter()
                .filter(|id| g.pending.remove(id).is_some())
                .count() as i64;
            Ok((n, (n > 0).then_some(st)))
        },
    )
    .await?;
    Ok(Reply::Int(acked))
}
