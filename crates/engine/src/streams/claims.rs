//! The pending entries of a consumer group, inspected and moved between consumers:
//! XPENDING (summary, range, IDLE, consumer), XCLAIM and XAUTOCLAIM, with Redis 7.0's
//! rules (`t_stream.c`). XPENDING reads only the stream's head (its groups); XCLAIM
//! loads the entries it names; XAUTOCLAIM reads the stream whole.

use bytes::Bytes;
use dmc_resp::Reply;

use super::groups::{no_group, touch};
use super::id::{self, StreamId};
use super::value::{Pending, StreamValue};
use super::{Need, edit, edit_needing, entry_reply, load_head};
use crate::{Engine, NOT_INTEGER, SYNTAX, notify, parse_i64};

pub(super) async fn xpending(engine: &Engine, db: u8, args: &[Bytes]) -> Result<Reply, Reply> {
    let (key, group) = (&args[1], &args[2]);
    let argc = args.len();
    if argc != 3 && !(6..=9).contains(&argc) {
        return Err(Reply::err(SYNTAX));
    }
    let mut range = None;
    if argc >= 6 {
        let mut at = 3;
        let mut min_idle = 0i64;
        if args[3].eq_ignore_ascii_case(b"idle") {
            min_idle = parse_i64(&args[4]).ok_or_else(|| Reply::err(NOT_INTEGER))?;
            if argc < 8 {
                return Err(Reply::err(SYNTAX));
            }
            at += 2;
        }
        let count = parse_i64(&args[at + 2]).ok_or_else(|| Reply::err(NOT_INTEGER))?;
        let (mut start, ex) = id::parse_interval(&args[at], 0).map_err(Reply::err)?;
        if ex {
            start = start
                .next()
                .ok_or_else(|| Reply::err("ERR invalid start ID for the interval"))?;
        }
        let (mut end, ex) = id::parse_interval(&args[at + 1], u64::MAX).map_err(Reply::err)?;
        if ex {
            end = end
                .prev()
                .ok_or_else(|| Reply::err("ERR invalid end ID for the interval"))?;
        }
        range = Some((min_idle, start, end, count.max(0) as u64, args.get(at + 3)));
    }
    let st = load_head(engine, db, key).await?;
    let Some(g) = st.as_ref().and_then(|st| st.groups.get(group)) else {
        return Err(no_group(key, group, ""));
    };
    let Some((min_idle, start, end, count, consumer)) = range else {
        let (Some(first), Some(last)) = (g.pending.keys().next(), g.pending.keys().next_back())
        else {
            return Ok(Reply::Array(vec![
                Reply::Int(0),
                Reply::Null,
                Reply::Null,
                Reply::NullArray,
            ]));
        };
        let per_consumer: Vec<Reply> = g
            .consumers
            .keys()
            .filter_map(|c| {
                let n = g.pending.values().filter(|p| p.consumer == c).count();
                (n > 0)
                    .then(|| Reply::Array(vec![Reply::Bulk(c.clone()), Reply::bulk(n.to_string())]))
            })
            .collect();
        return Ok(Reply::Array(vec![
            Reply::Int(g.pending.len() as i64),
            Reply::bulk(first.to_string()),
            Reply::bulk(last.to_string()),
            Reply::Array(per_consumer),
        ]));
    };
    if let Some(c) = consumer
        && !g.consumers.contains_key(&c[..])
    {
        return Ok(Reply::Array(Vec::new()));
    }
    let now = engine.now_ms() as i64;
    let mut out = Vec::new();
    if start <= end {
        for (id, p) in g.pending.range(start..=end) {
            if out.len() as u64 >= count {
                break;
            }
            if consumer.is_some_and(|c| p.consumer != c) {
                continue;
            }
            let idle = (now - p.delivery_time as i64).max(0);
            if min_idle > 0 && idle < min_idle {
                continue;
            }
            out.push(Reply::Array(vec![
                Reply::bulk(id.to_string()),
                Reply::Bulk(p.consumer.clone()),
                Reply::Int(idle),
                Reply::Int(p.delivery_count as i64),
            ]));
        }
    }
    Ok(Reply::Array(out))
}

pub(super) async fn xclaim(engine: &Engine, db: u8, args: &[Bytes]) -> Result<Reply, Reply> {
    let (key, group, consumer) = (&args[1], &args[2], &args[3]);
    // The group is checked before the arguments, as Redis does; the head says.
    let st = load_head(engine, db, key).await?;
    if !st.as_ref().is_some_and(|st| st.groups.contains_key(group)) {
        return Err(no_group(key, group, ""));
    }
    let min_idle = parse_i64(&args[4])
        .ok_or_else(|| Reply::err("ERR Invalid min-idle-time argument for XCLAIM"))?
        .max(0);
    let mut ids = Vec::new();
    let mut j = 5;
    while j < args.len() {
        match id::parse(&args[j], 0, true) {
            Ok(id) => ids.push(id),
            Err(_) => break,
        }
        j += 1;
    }
    let now = engine.now_ms() as i64;
    let (mut force, mut justid) = (false, false);
    let (mut delivery, mut retry, mut last_id) = (None::<i64>, None::<i64>, StreamId::MIN);
    while j < args.len() {
        let more = j + 1 < args.len();
        let o = &args[j];
        let num = |what: &str| {
            parse_i64(&args[j + 1]).ok_or_else(|| {
                Reply::Error(format!("ERR Invalid {what} option argument for XCLAIM"))
            })
        };
        if o.eq_ignore_ascii_case(b"force") {
            force = true;
        } else if o.eq_ignore_ascii_case(b"justid") {
            justid = true;
        } else if o.eq_ignore_ascii_case(b"idle") && more {
            delivery = Some(now - num("IDLE")?);
            j += 1;
        } else if o.eq_ignore_ascii_case(b"time") && more {
            delivery = Some(num("TIME")?);
            j += 1;
        } else if o.eq_ignore_ascii_case(b"retrycount") && more {
            retry = Some(num("RETRYCOUNT")?);
            j += 1;
        } else if o.eq_ignore_ascii_case(b"lastid") && more {
            last_id = id::parse(&args[j + 1], 0, true).map_err(Reply::err)?;
            j += 1;
        } else {
            return Err(Reply::Error(format!(
                "ERR Unrecognized XCLAIM option '{}'",
                String::from_utf8_lossy(o)
            )));
        }
        j += 1;
    }
    let delivery = match delivery {
        Some(t) if (0..=now).contains(&t) => t as u64,
        _ => now as u64,
    };
    let need = |_: &StreamValue| Need::Window {
        ranges: Vec::new(),
        ids: ids.clone(),
    };
    let (reply, created) = edit_needing(engine, db, key, need, |cur| {
        let Some(mut st) = cur else {
            return Err(no_group(key, group, ""));
        };
        let Some(mut g) = st.groups.remove(group) else {
            return Err(no_group(key, group, ""));
        };
        if last_id > g.last_id {
            g.last_id = last_id;
        }
        let mut created = false;
        let mut out = Vec::new();
        for id in &ids {
            let Some(fields) = st.entries.get(id) else {
                // A pending entry of a deleted entry goes.
                g.pending.remove(id);
                continue;
            };
            let forced = force && !g.pending.contains_key(id);
            let Some(p) = g.pending.get(id).cloned().or_else(|| {
                // FORCE creates the pending entry, delivered once so far.
                forced.then(|| Pending {
                    consumer: Bytes::new(),
                    delivery_time: 0,
                    delivery_count: 1,
                })
            }) else {
                continue;
            };
            if !forced && min_idle > 0 && now - (p.delivery_time as i64) < min_idle {
                continue;
            }
            created |= touch(&mut g, consumer, now as u64, true);
            let count = match retry {
                Some(r) if r >= 0 => r as u64,
                _ if !justid => p.delivery_count + 1,
                _ => p.delivery_count,
            };
            g.pending.insert(
                *id,
                Pending {
                    consumer: consumer.clone(),
                    delivery_time: delivery,
                    delivery_count: count,
                },
            );
            out.push(if justid {
                Reply::bulk(id.to_string())
            } else {
                entry_reply(*id, fields)
            });
        }
        st.groups.insert(group.clone(), g);
        Ok(((Reply::Array(out), created), Some(st)))
    })
    .await?;
    if created {
        engine.notify(notify::STREAM, "xgroup-createconsumer", db, key);
    }
    Ok(reply)
}

pub(super) async fn xautoclaim(engine: &Engine, db: u8, args: &[Bytes]) -> Result<Reply, Reply> {
    let (key, group, consumer) = (&args[1], &args[2], &args[3]);
    let min_idle = parse_i64(&args[4])
        .ok_or_else(|| Reply::err("ERR Invalid min-idle-time argument for XAUTOCLAIM"))?
        .max(0);
    let (mut start, ex) = id::parse_interval(&args[5], 0).map_err(Reply::err)?;
    if ex {
        start = start
            .next()
            .ok_or_else(|| Reply::err("ERR invalid start ID for the interval"))?;
    }
    let (mut count, mut justid) = (100u64, false);
    let mut j = 6;
    while j < args.len() {
        if args[j].eq_ignore_ascii_case(b"count") && j + 1 < args.len() {
            let max = i64::MAX / 16;
            count = parse_i64(&args[j + 1])
                .filter(|n| (1..=max).contains(n))
                .ok_or_else(|| Reply::err("ERR COUNT must be > 0"))? as u64;
            j += 1;
        } else if args[j].eq_ignore_ascii_case(b"justid") {
            justid = true;
        } else {
            return Err(Reply::err(SYNTAX));
        }
        j += 1;
    }
    let now = engine.now_ms();
    let (reply, created) = edit(engine, db, key, |cur| {
        let Some(mut st) = cur else {
            return Err(no_group(key, group, ""));
        };
        let Some(mut g) = st.groups.remove(group) else {
            return Err(no_group(key, group, ""));
        };
        let (mut claimed, mut deleted) = (Vec::new(), Vec::new());
        let mut left = count;
        let mut attempts = count.saturating_mul(10);
        let mut created = false;
        let candidates: Vec<StreamId> = g.pending.range(start..).map(|(id, _)| *id).collect();
        let mut next = StreamId::MIN;
        let mut it = candidates.iter().peekable();
        while attempts > 0 && left > 0 {
            let Some(&id) = it.next() else { break };
            attempts -= 1;
            let Some(fields) = st.entries.get(&id) else {
                g.pending.remove(&id);
                deleted.push(Reply::bulk(id.to_string()));
                left -= 1;
                continue;
            };
            let Some(p) = g.pending.get_mut(&id) else {
                continue;
            };
            if min_idle > 0 && (now as i64) - (p.delivery_time as i64) < min_idle {
                continue;
            }
            p.delivery_time = now;
            if !justid {
                p.delivery_count += 1;
            }
            p.consumer = consumer.clone();
            claimed.push(if justid {
                Reply::bulk(id.to_string())
            } else {
                entry_reply(id, fields)
            });
            left -= 1;
        }
        if let Some(&&id) = it.peek() {
            next = id;
        }
        if !claimed.is_empty() {
            created = touch(&mut g, consumer, now, true);
        }
        st.groups.insert(group.clone(), g);
        let reply = Reply::Array(vec![
            Reply::bulk(next.to_string()),
            Reply::Array(claimed),
            Reply::Array(deleted),
        ]);
        Ok(((reply, created), Some(st)))
    })
    .await?;
    if created {
        engine.notify(notify::STREAM, "xgroup-createconsumer", db, key);
    }
    Ok(reply)
}
