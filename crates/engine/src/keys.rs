//! The keyspace family: DEL, EXISTS, TYPE, expiry and TTL commands.

use bytes::Bytes;
use dmc_dht::Ttl;
use dmc_resp::Reply;

use crate::glob::glob;
use crate::table::Cmd;
use dmc_dht::layout::HASH_SLOTS as SLOTS;
use dmc_dht::{SetCond, SetExpiry, SetOptions};

const HASH_SLOTS: u16 = SLOTS as u16;
use crate::{Engine, NOT_INTEGER, Session, error_reply, notify, parse_i64};

macro_rules! tri {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(e) => return error_reply(e),
        }
    };
}

pub async fn run(engine: &Engine, s: &mut Session, cmd: Cmd, args: &[Bytes]) -> Reply {
    let db = engine.physical_db(s.db);
    let dht = &engine.dht;
    match cmd {
        Cmd::Del | Cmd::Unlink => {
            let mut n = 0;
            for k in &args[1..] {
                // Under the key's write lock: a SET finishing meanwhile must not put its
                // value back into the cache after this delete.
                let _g = engine.lock_key(k).await;
                let deleted = tri!(dht.delete(db, k).await);
                engine.wrote(db, k, None);
                if deleted {
                    n += 1;
                    engine.notify(notify::GENERIC, "del", db, k);
                }
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
        Cmd::Type => Reply::Simple(match tri!(engine.read_kind(db, &args[1]).await) {
            Some(kind) => kind.name(),
            None => "none",
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
            let _g = engine.lock_key(&args[1]).await;
            match tri!(dht.ttl(db, &args[1]).await) {
                Ttl::ExpiresAt(_) => {
                    let done = tri!(dht.expire(db, &args[1], None).await);
                    engine.wrote(db, &args[1], None);
                    if done {
                        engine.notify(notify::GENERIC, "persist", db, &args[1]);
                    }
                    Reply::Int(done as i64)
                }
                _ => Reply::Int(0),
            }
        }
        Cmd::Scan => scan(engine, db, args).await,
        Cmd::Keys => {
            let mut out = Vec::new();
            for slot in 0..HASH_SLOTS {
                for k in tri!(slot_keys(engine, db, slot).await) {
                    if glob(&args[1], &k, false) {
                        out.push(Reply::Bulk(k));
                    }
                }
            }
            Reply::Array(out)
        }
        Cmd::RandomKey => {
            let start = (engine.now_ms() % HASH_SLOTS as u64) as u16;
            for i in 0..HASH_SLOTS {
                let slot = (start + i) % HASH_SLOTS;
                let keys = tri!(slot_keys(engine, db, slot).await);
                if !keys.is_empty() {
                    let pick = (engine.now_ms() as usize).wrapping_mul(2654435761) % keys.len();
                    return Reply::Bulk(keys[pick].clone());
                }
            }
            Reply::Null
        }
        Cmd::FlushDb | Cmd::FlushAll => {
            if let Some(mode) = args
                .get(1)
                .map(|a| String::from_utf8_lossy(a).to_ascii_uppercase())
                && (args.len() > 2 || (mode != "ASYNC" && mode != "SYNC"))
            {
                return Reply::err(crate::SYNTAX);
            }
            // Trackers are told once that everything changed, not key by key.
            let all = if cmd == Cmd::FlushAll { None } else { Some(db) };
            tri!(
                crate::tracking::FLUSHING
                    .scope((), flush(engine, all))
                    .await
            );
            engine.key_changed(None, None);
            Reply::ok()
        }
        Cmd::Rename | Cmd::RenameNx => rename(engine, db, cmd, args).await,
        Cmd::Copy => copy(engine, s, args).await,
        Cmd::Move => move_key(engine, s, args).await,
        Cmd::SwapDb => {
            let Some(a) = parse_i64(&args[1]) else {
                return Reply::err("ERR invalid first DB index");
            };
            let Some(b) = parse_i64(&args[2]) else {
                return Reply::err("ERR invalid second DB index");
            };
            let range = 0..i64::from(engine.config.databases);
            if !range.contains(&a) || !range.contains(&b) {
                return Reply::err("ERR DB index is out of range");
            }
            tri!(engine.dht.swap_dbs(a as u8, b as u8).await);
            Reply::ok()
        }
        _ => Reply::err("ERR command not in the keyspace family"),
    }
}

/// Deletes every key of `db` (`None`: of every database) in the hash slots this agent
/// writes (all of them standalone); in a cluster every agent flushes its own, and a
/// proxy-mode agent asks the others to.
async fn flush(engine: &Engine, db: Option<u8>) -> Result<(), dmc_dht::DhtError> {
    let dht = &engine.dht;
    let own = dht.ownership();
    for slot in 0..HASH_SLOTS {
        if !own.owns_all() && own.lease(slot).is_none() {
            continue;
        }
        // Expired keys not reclaimed yet go too: DBSIZE counts them.
        for (kdb, k) in dht.scan_partition_with_expired(slot).await? {
            if db.is_none_or(|db| kdb == db) {
                let _g = engine.lock_key(&k).await;
                dht.delete(kdb, &k).await?;
                engine.wrote(kdb, &k, None);
            }
        }
    }
    Ok(())
}

/// Live keys of `db` stored with hash slot `slot` (of its whole slot group when it
/// is the group's first slot, none otherwise: see `Dht::scan_partition`).
async fn slot_keys(engine: &Engine, db: u8, slot: u16) -> Result<Vec<Bytes>, dmc_dht::DhtError> {
    Ok(engine
        .dht
        .scan_partition(slot)
        .await?
        .into_iter()
        .filter(|(d, _)| *d == db)
        .map(|(_, k)| k)
        .collect())
}

/// `SCAN cursor [MATCH pattern] [COUNT count] [TYPE type]`. The cursor is the next hash
/// slot to visit, so every key present for the whole iteration is returned once.
async fn scan(engine: &Engine, db: u8, args: &[Bytes]) -> Reply {
    let Some(cursor) = std::str::from_utf8(&args[1])
        .ok()
        .and_then(|c| c.parse::<u64>().ok())
    else {
        return Reply::err("ERR invalid cursor");
    };
    let (mut pattern, mut count, mut kind): (Option<&[u8]>, i64, Option<String>) = (None, 10, None);
    let mut i = 2;
    while i < args.len() {
        let opt = String::from_utf8_lossy(&args[i]).to_ascii_uppercase();
        let Some(value) = args.get(i + 1) else {
            return Reply::err(crate::SYNTAX);
        };
        match opt.as_str() {
            "MATCH" => pattern = Some(value),
            "COUNT" => match parse_i64(value) {
                Some(n) if n >= 1 => count = n,
                Some(_) => return Reply::err(crate::SYNTAX),
                None => return Reply::err(NOT_INTEGER),
            },
            "TYPE" => kind = Some(String::from_utf8_lossy(value).to_ascii_lowercase()),
            _ => return Reply::err(crate::SYNTAX),
        }
        i += 2;
    }
    let mut slot = cursor.min(HASH_SLOTS as u64) as u16;
    let mut out = Vec::new();
    while slot < HASH_SLOTS && (out.len() as i64) < count {
        for k in tri!(slot_keys(engine, db, slot).await) {
            if !pattern.is_none_or(|p| glob(p, &k, false)) {
                continue;
            }
            // The type is in the key's object: read only when a filter asks for it.
            let type_ok = match kind.as_deref() {
                None => true,
                Some(t) => match tri!(engine.read_kind(db, &k).await) {
                    Some(found) => found.name() == t,
                    None => false,
                },
            };
            if type_ok {
                out.push(Reply::Bulk(k));
            }
        }
        slot += 1;
    }
    let next = if slot >= HASH_SLOTS { 0 } else { slot };
    Reply::Array(vec![Reply::bulk(next.to_string()), Reply::Array(out)])
}

/// RENAME / RENAMENX: the value and its expiry move to the new name.
async fn rename(engine: &Engine, db: u8, cmd: Cmd, args: &[Bytes]) -> Reply {
    let (src, dst) = (&args[1], &args[2]);
    let _held = lock_two(engine, src, dst).await;
    let Some(e) = tri!(engine.dht.get(db, src).await) else {
        return Reply::err("ERR no such key");
    };
    if src == dst {
        return if cmd == Cmd::RenameNx {
            Reply::Int(0)
        } else {
            Reply::ok()
        };
    }
    if cmd == Cmd::RenameNx && tri!(engine.dht.exists(db, dst).await) {
        return Reply::Int(0);
    }
    tri!(write_entry(engine, db, dst, &e, true).await);
    tri!(engine.dht.delete(db, src).await);
    engine.wrote(db, src, None);
    engine.notify(notify::GENERIC, "rename_from", db, src);
    engine.notify(notify::GENERIC, "rename_to", db, dst);
    if cmd == Cmd::RenameNx {
        Reply::Int(1)
    } else {
        Reply::ok()
    }
}

/// Takes the write locks of two keys, in stripe order so two callers cannot deadlock.
async fn lock_two<'a>(engine: &'a Engine, a: &[u8], b: &[u8]) -> Vec<crate::KeyGuard<'a>> {
    engine.lock_keys([a, b].into_iter()).await
}

/// A DB index argument of COPY or MOVE: the stored database it names.
fn db_arg(engine: &Engine, arg: &[u8]) -> Result<u8, Reply> {
    match parse_i64(arg) {
        Some(n) if (0..i64::from(engine.config.databases)).contains(&n) => {
            Ok(engine.physical_db(n as u8))
        }
        Some(_) => Err(Reply::err("ERR DB index is out of range")),
        None => Err(Reply::err(NOT_INTEGER)),
    }
}

/// Writes `e` (value, type and expiry) as `key` in `db`;
/// `replace` overwrites an existing key. A collection stored as a chunk tree is
/// copied chunk by chunk (chunks belong to one key). Returns whether it was written.
async fn write_entry(
    engine: &Engine,
    db: u8,
    key: &[u8],
    e: &dmc_dht::Entry,
    replace: bool,
) -> Result<bool, dmc_dht::DhtError> {
    let roots = match e.kind {
        dmc_dht::ValueKind::String => Vec::new(),
        _ => dmc_umo::chunk::TreeRoot::parse_all(&e.value),
    };
    if roots.is_empty() {
        return write_value(engine, db, key, e, replace).await;
    }
    // Copied chunk by chunk, shape and keys as they are, under the new key's tag.
    let pool = engine.dht.pool();
    let mut head = Vec::new();
    let mut written = Vec::new();
    for root in roots {
        match pool.copy_tree(root, crate::big::tag(db, key)).await {
            Ok((copy, blocks)) => {
                copy.encode(&mut head);
                written.extend(blocks);
            }
            Err(err) => {
                written.into_iter().for_each(|b| pool.free(b));
                return Err(err.into());
            }
        }
    }
    head.extend_from_slice(e.value.get(head.len()..).unwrap_or_default());
    let entry = dmc_dht::Entry {
        value: head.into(),
        ..e.clone()
    };
    let outcome = write_value(engine, db, key, &entry, replace).await;
    if !matches!(outcome, Ok(true)) {
        written.into_iter().for_each(|b| pool.free(b));
    }
    outcome
}

async fn write_value(
    engine: &Engine,
    db: u8,
    key: &[u8],
    e: &dmc_dht::Entry,
    replace: bool,
) -> Result<bool, dmc_dht::DhtError> {
    let opts = SetOptions {
        cond: if replace {
            SetCond::Always
        } else {
            SetCond::IfAbsent
        },
        expiry: match e.expire_at {
            Some(at) => SetExpiry::At(at),
            None => SetExpiry::Clear,
        },
        kind: e.kind,
        ..Default::default()
    };
    let written = engine.dht.set(db, key, &e.value, opts).await?.written;
    if written {
        engine.wrote_typed(db, key, e.kind, Some((&e.value[..], e.expire_at)));
    }
    Ok(written)
}

/// `COPY source destination [DB destination-db] [REPLACE]`.
async fn copy(engine: &Engine, s: &Session, args: &[Bytes]) -> Reply {
    let src_db = engine.physical_db(s.db);
    let (mut dst_db, mut replace) = (src_db, false);
    let mut i = 3;
    while i < args.len() {
        match String::from_utf8_lossy(&args[i])
            .to_ascii_uppercase()
            .as_str()
        {
            "REPLACE" => replace = true,
            "DB" if i + 1 < args.len() => {
                i += 1;
                dst_db = match db_arg(engine, &args[i]) {
                    Ok(d) => d,
                    Err(r) => return r,
                };
            }
            _ => return Reply::err(crate::SYNTAX),
        }
        i += 1;
    }
    let (src, dst) = (&args[1], &args[2]);
    if src_db == dst_db && src == dst {
        return Reply::err("ERR source and destination objects are the same");
    }
    let _g = lock_two(engine, src, dst).await;
    let Some(e) = tri!(engine.dht.get(src_db, src).await) else {
        return Reply::Int(0);
    };
    let copied = tri!(write_entry(engine, dst_db, dst, &e, replace).await);
    if copied {
        engine.notify(notify::GENERIC, "copy_to", dst_db, dst);
    }
    Reply::Int(copied as i64)
}

/// `MOVE key db`: moves the key (value and expiry) unless the target has it already.
async fn move_key(engine: &Engine, s: &Session, args: &[Bytes]) -> Reply {
    let src_db = engine.physical_db(s.db);
    let dst_db = match db_arg(engine, &args[2]) {
        Ok(d) => d,
        Err(r) => return r,
    };
    if src_db == dst_db {
        return Reply::err("ERR source and destination objects are the same");
    }
    let key = &args[1];
    let _g = engine.lock_key(key).await;
    let Some(e) = tri!(engine.dht.get(src_db, key).await) else {
        return Reply::Int(0);
    };
    if !tri!(write_entry(engine, dst_db, key, &e, false).await) {
        return Reply::Int(0);
    }
    tri!(engine.dht.delete(src_db, key).await);
    engine.wrote(src_db, key, None);
    engine.notify(notify::GENERIC, "move_from", src_db, key);
    engine.notify(notify::GENERIC, "move_to", dst_db, key);
    Reply::Int(1)
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
    let _g = engine.lock_key(&args[1]).await;
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
    if done {
        // A time already past deleted the key.
        let event = if at <= engine.now_ms() {
            "del"
        } else {
            "expire"
        };
        engine.notify(notify::GENERIC, event, db, &args[1]);
    }
    Reply::Int(done as i64)
}
