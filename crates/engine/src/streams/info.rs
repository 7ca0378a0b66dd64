//! XINFO STREAM [FULL [COUNT n]], XINFO GROUPS, XINFO CONSUMERS and XINFO HELP, with
//! Redis 7.0's fields in its order, plus Redis 7.2's `inactive` (XINFO CONSUMERS) and
//! `active-time` (XINFO STREAM FULL), which 7.2 clients read. `radix-tree-keys` and
//! `radix-tree-nodes` describe Redis's own structure; DMC reports the nodes Redis would
//! have for the same entries ([`super::value::Node`]) for both.

use bytes::Bytes;
use dmc_resp::Reply;

use super::groups::{check_sub, sub_syntax};
use super::value::{Group, StreamValue};
use super::{entry_reply, load};
use crate::{Engine, Session, parse_i64};

const XINFO_HELP: &[&str] = &[
    "XINFO <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CONSUMERS <key> <groupname>",
    "    Show consumers of <groupname>.",
    "GROUPS <key>",
    "    Show the stream consumer groups.",
    "STREAM <key> [FULL [COUNT <count>]",
    "    Show information about the stream.",
    "HELP",
    "    Prints this help.",
];

const XINFO_SUBS: &[(&str, i32)] = &[("STREAM", -3), ("GROUPS", 3), ("CONSUMERS", 4), ("HELP", 2)];

fn field(name: &'static str, v: Reply) -> (Reply, Reply) {
    (Reply::bulk(name), v)
}

fn id_reply(id: super::id::StreamId) -> Reply {
    Reply::bulk(id.to_string())
}

pub(super) async fn xinfo(
    engine: &Engine,
    _s: &Session,
    db: u8,
    args: &[Bytes],
) -> Result<Reply, Reply> {
    check_sub("XINFO", XINFO_SUBS, &args[1], args.len())?;
    let sub = crate::upper(&args[1]);
    if sub == "HELP" {
        return Ok(crate::subcommands::help(XINFO_HELP));
    }
    let key = &args[2];
    let Some(st) = load(engine, db, key).await? else {
        return Err(Reply::err("ERR no such key"));
    };
    let now = engine.now_ms() as i64;
    match sub.as_str() {
        "CONSUMERS" => {
            let Some(g) = st.groups.get(&args[3]) else {
                return Err(Reply::Error(format!(
                    "NOGROUP No such consumer group '{}' for key name '{}'",
                    String::from_utf8_lossy(&args[3]),
                    String::from_utf8_lossy(key)
                )));
            };
            Ok(Reply::Array(
                g.consumers
                    .iter()
                    .map(|(name, c)| {
                        Reply::Map(vec![
                            field("name", Reply::Bulk(name.clone())),
                            field("pending", Reply::Int(g.pending_of(name).count() as i64)),
                            field("idle", Reply::Int((now - c.seen_time as i64).max(0))),
                            field(
                                "inactive",
                                Reply::Int(c.active_time.map_or(-1, |t| now - t as i64)),
                            ),
                        ])
                    })
                    .collect(),
            ))
        }
        "GROUPS" => Ok(Reply::Array(
            st.groups
                .iter()
                .map(|(name, g)| {
                    Reply::Map(vec![
                        field("name", Reply::Bulk(name.clone())),
                        field("consumers", Reply::Int(g.consumers.len() as i64)),
                        field("pending", Reply::Int(g.pending.len() as i64)),
                        field("last-delivered-id", id_reply(g.last_id)),
                        field("entries-read", entries_read(g)),
                        field("lag", lag(&st, g)),
                    ])
                })
                .collect(),
        )),
        _ => stream_info(&st, args),
    }
}

fn entries_read(g: &Group) -> Reply {
    g.entries_read.map_or(Reply::Null, |n| Reply::Int(n as i64))
}

fn lag(st: &StreamValue, g: &Group) -> Reply {
    st.lag(g).map_or(Reply::Null, Reply::Int)
}

fn stream_info(st: &StreamValue, args: &[Bytes]) -> Result<Reply, Reply> {
    let opts = &args[3..];
    let full = !opts.is_empty();
    let mut count: u64 = 10;
    if full {
        if (opts.len() != 1 && opts.len() != 3) || !opts[0].eq_ignore_ascii_case(b"full") {
            return Err(sub_syntax(args));
        }
        if opts.len() == 3 {
            if !opts[1].eq_ignore_ascii_case(b"count") {
                return Err(sub_syntax(args));
            }
            let n = parse_i64(&opts[2]).ok_or_else(|| Reply::err(crate::NOT_INTEGER))?;
            count = if n < 0 { 10 } else { n as u64 };
        }
    }
    let nodes = st.nodes.len() as i64;
    let mut m = vec![
        field("length", Reply::Int(st.len() as i64)),
        field("radix-tree-keys", Reply::Int(nodes)),
        field("radix-tree-nodes", Reply::Int(nodes.max(1))),
        field("last-generated-id", id_reply(st.last_id)),
        field("max-deleted-entry-id", id_reply(st.max_deleted)),
        field("entries-added", Reply::Int(st.entries_added as i64)),
        field("recorded-first-entry-id", id_reply(st.first_id())),
    ];
    let take = |n: u64| if n == 0 { usize::MAX } else { n as usize };
    if !full {
        m.push(field("groups", Reply::Int(st.groups.len() as i64)));
        let first = st.entries.iter().next();
        let last = st.entries.iter().next_back();
        m.push(field(
            "first-entry",
            first.map_or(Reply::Null, |(id, f)| entry_reply(*id, f)),
        ));
        m.push(field(
            "last-entry",
            last.map_or(Reply::Null, |(id, f)| entry_reply(*id, f)),
        ));
        return Ok(Reply::Map(m));
    }
    m.push(field(
        "entries",
        Reply::Array(
            st.entries
                .iter()
                .take(take(count))
                .map(|(id, f)| entry_reply(*id, f))
                .collect(),
        ),
    ));
    let groups = st
        .groups
        .iter()
        .map(|(name, g)| {
            let pending = g
                .pending
                .iter()
                .take(take(count))
                .map(|(id, p)| {
                    Reply::Array(vec![
                        id_reply(*id),
                        Reply::Bulk(p.consumer.clone()),
                        Reply::Int(p.delivery_time as i64),
                        Reply::Int(p.delivery_count as i64),
                    ])
                })
                .collect();
            let consumers = g
                .consumers
                .iter()
                .map(|(cname, c)| {
                    let own: Vec<Reply> = g
                        .pending
                        .iter()
                        .filter(|(_, p)| p.consumer == cname)
                        .take(take(count))
                        .map(|(id, p)| {
                            Reply::Array(vec![
                                id_reply(*id),
                                Reply::Int(p.delivery_time as i64),
                                Reply::Int(p.delivery_count as i64),
                            ])
                        })
                        .collect();
                    Reply::Map(vec![
                        field("name", Reply::Bulk(cname.clone())),
                        field("seen-time", Reply::Int(c.seen_time as i64)),
                        field(
                            "active-time",
                            Reply::Int(c.active_time.map_or(-1, |t| t as i64)),
                        ),
                        field("pel-count", Reply::Int(g.pending_of(cname).count() as i64)),
                        field("pending", Reply::Array(own)),
                    ])
                })
                .collect();
            Reply::Map(vec![
                field("name", Reply::Bulk(name.clone())),
                field("last-delivered-id", id_reply(g.last_id)),
                field("entries-read", entries_read(g)),
                field("lag", lag(st, g)),
                field("pel-count", Reply::Int(g.pending.len() as i64)),
                field("pending", Reply::Array(pending)),
                field("consumers", Reply::Array(consumers)),
            ])
        })
        .collect();
    m.push(field("groups", Reply::Array(groups)));
    Ok(Reply::Map(m))
}
