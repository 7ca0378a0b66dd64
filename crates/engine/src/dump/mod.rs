//! DUMP and RESTORE: a key's value as a payload in Redis's RDB format (the type and
//! object of [`value`], then [`crate::rdb::finish`]'s version and CRC-64), so values
//! move between DMC and Redis in both directions: `redis-cli --cluster`, migration
//! tools and RESTORE-based copies work against DMC.
//!
//! Every type: strings, lists, sets, hashes, sorted sets and streams (their entries,
//! counters, consumer groups and pending entries).
//!
//! RESTORE checks what Redis 7.0 checks, in its order (options, BUSYKEY, the TTL, the
//! footer, the value), and writes the key in one slot swap with its expiry. IDLETIME
//! and FREQ are checked and accepted; DMC's eviction does not take a value's age or
//! frequency from them (it starts the key fresh).

mod compact;
mod stream;
pub mod value;

use bytes::Bytes;
use dmc_dht::{SetExpiry, SetOptions, ValueKind};
use dmc_resp::Reply;
use indexmap::IndexSet;

use crate::hashes::HashValue;
use crate::lists::{End, ListValue};
use crate::sets::SetValue;
use crate::zsets::value::ZSetValue;
use crate::{Engine, NOT_INTEGER, SYNTAX, Session, error_reply, notify, parse_i64, rdb};
use value::Value;

/// DUMP `key`: its payload, or nil for a missing key.
pub async fn dump(engine: &Engine, s: &Session, args: &[Bytes]) -> Reply {
    let db = engine.physical_db(s.db);
    match read(engine, db, &args[1]).await {
        Ok(Some(v)) => Reply::Bulk(rdb::finish(value::encode(&v)).into()),
        Ok(None) => Reply::Null,
        Err(r) => r,
    }
}

/// The value of `key` (`None`: missing).
async fn read(engine: &Engine, db: u8, key: &[u8]) -> Result<Option<Value>, Reply> {
    let Some((kind, bytes)) = engine.read_typed(db, key).await.map_err(error_reply)? else {
        return Ok(None);
    };
    Ok(Some(match kind {
        // `read_typed` gives a chunked string assembled, as a string.
        ValueKind::String | ValueKind::ChunkedString => Value::String(bytes),
        ValueKind::List => Value::List(crate::lists::all(engine, db, key).await?),
        ValueKind::Set => Value::Set(
            crate::sets::members(engine, db, key)
                .await?
                .into_iter()
                .collect(),
        ),
        ValueKind::Hash => Value::Hash(crate::hashes::all_pairs(engine, db, key).await?),
        ValueKind::ZSet => Value::ZSet(crate::zsets::all(engine, db, key).await?),
        ValueKind::Stream => Value::Stream(
            crate::streams::load(engine, db, key)
                .await?
                .unwrap_or_default(),
        ),
    }))
}

/// RESTORE's options.
#[derive(Debug, Default)]
struct Options {
    replace: bool,
    absolute: bool,
}

fn options(args: &[Bytes]) -> Result<Options, Reply> {
    let mut o = Options::default();
    let (mut idle, mut freq) = (false, false);
    let mut j = 4;
    while j < args.len() {
        let a = &args[j];
        let more = j + 1 < args.len();
        if a.eq_ignore_ascii_case(b"replace") {
            o.replace = true;
        } else if a.eq_ignore_ascii_case(b"absttl") {
            o.absolute = true;
        } else if a.eq_ignore_ascii_case(b"idletime") && more && !freq {
            let n = parse_i64(&args[j + 1]).ok_or_else(|| Reply::err(NOT_INTEGER))?;
            if n < 0 {
                return Err(Reply::err("ERR Invalid IDLETIME value, must be >= 0"));
            }
            idle = true;
            j += 1;
        } else if a.eq_ignore_ascii_case(b"freq") && more && !idle {
            let n = parse_i64(&args[j + 1]).ok_or_else(|| Reply::err(NOT_INTEGER))?;
            if !(0..=255).contains(&n) {
                return Err(Reply::err(
                    "ERR Invalid FREQ value, must be >= 0 and <= 255",
                ));
            }
            freq = true;
            j += 1;
        } else {
            return Err(Reply::err(SYNTAX));
        }
        j += 1;
    }
    Ok(o)
}

/// RESTORE `key ttl payload [REPLACE] [ABSTTL] [IDLETIME s] [FREQ f]`.
pub async fn restore(engine: &Engine, s: &Session, args: &[Bytes]) -> Reply {
    match restore_inner(engine, s, args).await {
        Ok(r) | Err(r) => r,
    }
}

async fn restore_inner(engine: &Engine, s: &Session, args: &[Bytes]) -> Result<Reply, Reply> {
    let db = engine.physical_db(s.db);
    let key = &args[1];
    let o = options(args)?;
    let _g = engine.lock_key(key).await;
    if !o.replace && engine.dht.exists(db, key).await.map_err(error_reply)? {
        return Err(Reply::err("BUSYKEY Target key name already exists."));
    }
    let ttl = parse_i64(&args[2]).ok_or_else(|| Reply::err(NOT_INTEGER))?;
    if ttl < 0 {
        return Err(Reply::err("ERR Invalid TTL value, must be >= 0"));
    }
    let body = rdb::verify(&args[3])
        .map_err(|_| Reply::err("ERR DUMP payload version or checksum are wrong"))?;
    let value = value::decode(body).map_err(|_| Reply::err("ERR Bad data format"))?;
    let now = engine.now_ms() as i64;
    let at = match ttl {
        0 => None,
        t if o.absolute => Some(t),
        t => Some(t.saturating_add(now)),
    };
    if let Some(at) = at
        && at <= now
    {
        // Already expired: the key is gone (REPLACE deleted it), nothing is created.
        if o.replace && engine.dht.delete(db, key).await.map_err(error_reply)? {
            engine.wrote(db, key, None);
            engine.notify(notify::GENERIC, "del", db, key);
        }
        return Ok(Reply::ok());
    }
    let expiry = at.map_or(SetExpiry::Clear, |t| SetExpiry::At(t as u64));
    write(engine, db, key, value, expiry).await?;
    engine.notify(notify::GENERIC, "restore", db, key);
    Ok(Reply::ok())
}

/// Writes `value` as `key` (replacing whatever it held) in one slot swap.
async fn write(
    engine: &Engine,
    db: u8,
    key: &[u8],
    value: Value,
    expiry: SetExpiry,
) -> Result<(), Reply> {
    let (kind, bytes) = match value {
        Value::ZSet(members) => {
            let mut z = ZSetValue::default();
            for (m, score) in members {
                z.insert(m, score);
            }
            crate::zsets::stored::write_quietly(engine, db, key, &z, expiry).await?;
            engine.blocking.wake(db, key);
            return Ok(());
        }
        Value::String(v) => (ValueKind::String, v.to_vec()),
        Value::Stream(st) => (ValueKind::Stream, st.encode()),
        Value::List(items) => {
            let mut l = ListValue::default();
            for i in items {
                l.push(End::Right, i);
            }
            (ValueKind::List, l.encode())
        }
        Value::Set(members) => {
            let members: IndexSet<Bytes> = members.into_iter().collect();
            (ValueKind::Set, SetValue::from_members(members).encode())
        }
        Value::Hash(fields) => {
            let mut h = HashValue::default();
            for (f, v) in fields {
                h.set(f, v);
            }
            (ValueKind::Hash, h.encode())
        }
    };
    let opts = SetOptions {
        kind,
        expiry,
        ..Default::default()
    };
    engine
        .dht
        .set(db, key, &bytes, opts)
        .await
        .map_err(error_reply)?;
    engine.wrote_typed(db, key, kind, None);
    if matches!(kind, ValueKind::List | ValueKind::Stream) {
        engine.blocking.wake(db, key);
    }
    Ok(())
}
