//! The keyspace family: DEL, EXISTS, TYPE, expiry and TTL commands.

use bytes::Bytes;
use dmc_dht::Ttl;
use dmc_resp::Reply;

use crate::commands::Cmd;
use crate::{Engine, NOT_INTEGER, Session, error_reply, parse_i64};

macro_rules! tri {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(e) => return error_reply(e),
        }
    };
}

pub async fn run(engine: &Engine, s: &mut Session, cmd: Cmd, args: &[Bytes]) -> Reply {
    let db = s.db;
    let dht = &engine.dht;
    match cmd {
        Cmd::Del | Cmd::Unlink => {
            let mut n = 0;
            for k in &args[1..] {
                n += tri!(dht.delete(db, k).await) as i64;
                engine.wrote(db, k, None);
            }
            Reply::Int(n)
        }
        Cmd::Exists | Cmd::Touch => {
            let mut n = 0;
            for k in &args[1..] {
                n += tri!(dht.exists(db, k).await) as i64;
            }
            Reply::Int(n)
        }
        Cmd::Type => Reply::Simple(if tri!(dht.exists(db, &args[1]).await) {
            "string"
        } else {
            "none"
        }),
        Cmd::Expire | Cmd::PExpire | Cmd::ExpireAt | Cmd::PExpireAt => {
            expire(engine, db, cmd, args).await
        }
        Cmd::Ttl | Cmd::PTtl | Cmd::ExpireTime | Cmd::PExpireTime => {
            let ms = matches!(cmd, Cmd::PTtl | Cmd::PExpireTime);
            Reply::Int(match tri!(dht.ttl(db, &args[1]).await) {
                Ttl::Missing => -2,
                Ttl::Persistent => -1,
                Ttl::ExpiresAt(at) => {
                    let v = if matches!(cmd, Cmd::Ttl | Cmd::PTtl) {
                        at.saturating_sub(engine.now_ms())
                    } else {
                        at
                    };
                    // TTL rounds to the nearest second, as Redis does.
                    if ms {
                        v as i64
                    } else {
                        ((v + 500) / 1000) as i64
                    }
                }
            })
        }
        Cmd::Persist => {
            let _g = engine.key_lock(&args[1]).lock().await;
            match tri!(dht.ttl(db, &args[1]).await) {
                Ttl::ExpiresAt(_) => {
                    let done = tri!(dht.expire(db, &args[1], None).await);
                    engine.wrote(db, &args[1], None);
                    Reply::Int(done as i64)
                }
                _ => Reply::Int(0),
            }
        }
        _ => Reply::err("ERR command not in the keyspace family"),
    }
}

async fn expire(engine: &Engine, db: u8, cmd: Cmd, args: &[Bytes]) -> Reply {
    let name = match cmd {
        Cmd::Expire => "expire",
        Cmd::PExpire => "pexpire",
        Cmd::ExpireAt => "expireat",
        _ => "pexpireat",
    };
    let Some(n) = parse_i64(&args[2]) else {
        return Reply::err(NOT_INTEGER);
    };
    let (mut nx, mut xx, mut gt, mut lt) = (false, false, false, false);
    for a in &args[3..] {
        match String::from_utf8_lossy(a).to_ascii_uppercase().as_str() {
            "NX" => nx = true,
            "XX" => xx = true,
            "GT" => gt = true,
            "LT" => lt = true,
            other => return Reply::Error(format!("ERR Unsupported option {other}")),
        }
    }
    if nx && (xx || gt || lt) {
        return Reply::err("ERR NX and XX, GT or LT options at the same time are not compatible");
    }
    if gt && lt {
        return Reply::err("ERR GT and LT options at the same time are not compatible");
    }
    let now = engine.now_ms() as i64;
    let at = match cmd {
        Cmd::Expire => n.checked_mul(1000).and_then(|v| v.checked_add(now)),
        Cmd::PExpire => n.checked_add(now),
        Cmd::ExpireAt => n.checked_mul(1000),
        _ => Some(n),
    };
    let Some(at) = at else {
        return Reply::Error(format!("ERR invalid expire time in '{name}' command"));
    };
    let _g = engine.key_lock(&args[1]).lock().await;
    let current = match tri!(engine.dht.ttl(db, &args[1]).await) {
        Ttl::Missing => return Reply::Int(0),
        Ttl::Persistent => None,
        Ttl::ExpiresAt(t) => Some(t as i64),
    };
    let allowed = (!nx || current.is_none())
        && (!xx || current.is_some())
        && (!gt || current.is_some_and(|c| at > c))
        && (!lt || current.is_none_or(|c| at < c));
    if !allowed {
        return Reply::Int(0);
    }
    // A time in the past deletes the key (the dht does that for `at <= now`).
    let at = at.max(0) as u64;
    let done = tri!(engine.dht.expire(db, &args[1], Some(at.max(1))).await);
    engine.wrote(db, &args[1], None);
    Reply::Int(done as i64)
}
