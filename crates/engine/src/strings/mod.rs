//! The string family: GET, SET and friends, with Redis 7 semantics and error texts.
//! A string is stored plain (one object) or, once an in-place edit has made it large,
//! chunked ([`chunked`]); in-place edits and range reads work on either ([`splice`]).

pub(crate) mod chunked;
pub(crate) mod combined;
pub(crate) mod edit;
pub(crate) mod splice;

use bytes::Bytes;
use std::ops::Range;

use dmc_dht::{DhtError, SetCond, SetExpiry, SetOptions};
use dmc_resp::Reply;

use crate::table::Cmd;
use crate::upper;
use crate::{Engine, NOT_INTEGER, SYNTAX, Session, error_reply, notify, parse_i64};
use combined::StringWrite;
use edit::{Edited, StringEdit};

/// Redis's `proto-max-bulk-len`: the longest string a command may build.
const MAX_STRING: u64 = 512 << 20;

macro_rules! tri {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(e) => return error_reply(e),
        }
    };
}

/// Parses an expiry amount (`EX`, `PX`, `EXAT`, `PXAT`) into a Unix time in ms.
pub(crate) fn expiry_at(engine: &Engine, unit: &str, arg: &[u8], cmd: &str) -> Result<u64, Reply> {
    let n = parse_i64(arg).ok_or_else(|| Reply::err(NOT_INTEGER))?;
    let invalid = || Reply::Error(format!("ERR invalid expire time in '{cmd}' command"));
    if n <= 0 {
        return Err(invalid());
    }
    let now = engine.now_ms() as i64;
    let at = match unit {
        "EX" => n.checked_mul(1000).and_then(|ms| ms.checked_add(now)),
        "PX" => n.checked_add(now),
        "EXAT" => n.checked_mul(1000),
        _ => Some(n),
    };
    at.map(|a| a as u64).ok_or_else(invalid)
}

pub async fn run(engine: &Engine, s: &mut Session, cmd: Cmd, args: &[Bytes]) -> Reply {
    let db = engine.physical_db(s.db);
    let dht = &engine.dht;
    match cmd {
        Cmd::Get => match tri!(engine.read(db, &args[1]).await) {
            Some(v) => Reply::Bulk(v),
            None => Reply::Null,
        },
        Cmd::Set => set(engine, db, args).await,
        Cmd::SetNx => {
            let _g = engine.lock_key(&args[1]).await;
            let opts = SetOptions {
                cond: SetCond::IfAbsent,
                ..Default::default()
            };
            let written = tri!(dht.set(db, &args[1], &args[2], opts).await).written;
            if written {
                engine.wrote(db, &args[1], Some((&args[2][..], None)));
                engine.notify(notify::STRING, "set", db, &args[1]);
            }
            Reply::Int(written as i64)
        }
        Cmd::SetEx | Cmd::PSetEx => {
            let (unit, name) = if cmd == Cmd::SetEx {
                ("EX", "setex")
            } else {
                ("PX", "psetex")
            };
            let at = match expiry_at(engine, unit, &args[2], name) {
                Ok(at) => at,
                Err(r) => return r,
            };
            let opts = SetOptions {
                expiry: SetExpiry::At(at),
                ..Default::default()
            };
            let _g = engine.lock_key(&args[1]).await;
            tri!(dht.set(db, &args[1], &args[3], opts).await);
            engine.wrote(db, &args[1], Some((&args[3][..], Some(at))));
            engine.notify(notify::STRING, "set", db, &args[1]);
            engine.notify(notify::GENERIC, "expire", db, &args[1]);
            Reply::ok()
        }
        Cmd::GetSet => {
            let _g = engine.lock_key(&args[1]).await;
            let opts = SetOptions {
                get: true,
                ..Default::default()
            };
            let old = tri!(set_getting_old(engine, db, &args[1], &args[2], opts).await).old;
            engine.wrote(db, &args[1], Some((&args[2][..], None)));
            engine.notify(notify::STRING, "set", db, &args[1]);
            match old {
                Some(v) => Reply::Bulk(v),
                None => Reply::Null,
            }
        }
        Cmd::GetDel => {
            let _g = engine.lock_key(&args[1]).await;
            match tri!(engine.read(db, &args[1]).await) {
                Some(v) => {
                    tri!(dht.delete(db, &args[1]).await);
                    engine.wrote(db, &args[1], None);
                    engine.notify(notify::GENERIC, "del", db, &args[1]);
                    Reply::Bulk(v)
                }
                None => Reply::Null,
            }
        }
        Cmd::GetEx => getex(engine, db, args).await,
        Cmd::Lcs => {
            let a = tri!(engine.read(db, &args[1]).await).unwrap_or_default();
            let b = tri!(engine.read(db, &args[2]).await).unwrap_or_default();
            lcs(&a, &b, &args[3..])
        }
        Cmd::MGet => {
            let keys: Vec<&[u8]> = args[1..].iter().map(|k| &k[..]).collect();
            let got = tri!(engine.read_many(db, &keys).await);
            Reply::Array(
                got.into_iter()
                    .map(|v| match v {
                        // MGET answers nil for a key of another type, as Redis does.
                        Some((dmc_dht::ValueKind::String, v)) => Reply::Bulk(v),
                        _ => Reply::Null,
                    })
                    .collect(),
            )
        }
        Cmd::MSet | Cmd::MSetNx => {
            if args.len() % 2 != 1 {
                return Reply::Error(format!(
                    "ERR wrong number of arguments for '{}' command",
                    if cmd == Cmd::MSet { "mset" } else { "msetnx" }
                ));
            }
            let pairs: Vec<(&[u8], &[u8])> = args[1..]
                .chunks(2)
                .map(|c| (&c[0][..], &c[1][..]))
                .collect();
            // Every key's write lock, so the local cache sees these writes in order with
            // other writers of the same keys; one pool transaction makes them atomic.
            let _held = engine.lock_keys(pairs.iter().map(|(k, _)| *k)).await;
            let written = tri!(dht.set_many(db, &pairs, cmd == Cmd::MSetNx).await);
            if written {
                // A repeated key ends with its last value: visit from the end, once per key.
                let mut seen: std::collections::HashSet<&[u8]> =
                    std::collections::HashSet::with_capacity(pairs.len());
                for (k, v) in pairs.iter().rev() {
                    if seen.insert(k) {
                        engine.wrote(db, k, Some((v, None)));
                    }
                }
                for (k, _) in &pairs {
                    engine.notify(notify::STRING, "set", db, k);
                }
            }
            if cmd == Cmd::MSetNx {
                return Reply::Int(written as i64);
            }
            Reply::ok()
        }
        Cmd::Incr | Cmd::Decr | Cmd::IncrBy | Cmd::DecrBy => counter(engine, db, cmd, args).await,
        Cmd::IncrByFloat => {
            let parse = |b: &[u8]| {
                std::str::from_utf8(b)
                    .ok()
                    .filter(|s| !s.is_empty() && !s.contains(char::is_whitespace))
                    .and_then(|s| s.parse::<f64>().ok())
                    .filter(|f| f.is_finite())
            };
            let Some(by) = parse(&args[2]) else {
                return Reply::err("ERR value is not a valid float");
            };
            let mut text = String::new();
            let updated = update(engine, db, &args[1], "incrbyfloat", |cur| {
                let cur = match cur {
                    Some(v) => parse(v).ok_or("ERR value is not a valid float")?,
                    None => 0.0,
                };
                let next = cur + by;
                if !next.is_finite() {
                    return Err("ERR increment would produce NaN or Infinity");
                }
                text = dmc_resp::format_human(next);
                Ok(text.clone().into_bytes())
            })
            .await;
            updated.map_or_else(|r| r, |()| Reply::bulk(text))
        }
        Cmd::Append => {
            let op = StringEdit::Append(Append(args[2].clone()));
            let len = or_reply!(edited_len(engine, db, &args[1], op).await);
            engine.notify(notify::STRING, "append", db, &args[1]);
            Reply::Int(len as i64)
        }
        Cmd::Strlen => {
            let found = splice::read_span(engine, db, &args[1], |_| 0..0).await;
            Reply::Int(or_reply!(found).map_or(0, |v| v.len as i64))
        }
        Cmd::GetRange => {
            let (Some(start), Some(end)) = (parse_i64(&args[2]), parse_i64(&args[3])) else {
                return Reply::err(NOT_INTEGER);
            };
            let span = |len: u64| range(len, start, end).unwrap_or(0..0);
            match or_reply!(splice::read_span(engine, db, &args[1], span).await) {
                Some(v) => {
                    let r = span(v.len);
                    Reply::Bulk(v.slice(r.start, r.end))
                }
                None => Reply::Bulk(Bytes::new()),
            }
        }
        Cmd::SetRange => {
            let Some(offset) = parse_i64(&args[2]) else {
                return Reply::err(NOT_INTEGER);
            };
            if offset < 0 {
                return Reply::err("ERR offset is out of range");
            }
            let value = &args[3];
            if offset as u64 + value.len() as u64 > MAX_STRING {
                return Reply::err("ERR string exceeds maximum allowed size (proto-max-bulk-len)");
            }
            if value.is_empty() {
                let found = splice::read_span(engine, db, &args[1], |_| 0..0).await;
                return Reply::Int(or_reply!(found).map_or(0, |v| v.len as i64));
            }
            let op = StringEdit::SetRange(SetRange(offset as u64, value.clone()));
            let len = or_reply!(edited_len(engine, db, &args[1], op).await);
            engine.notify(notify::STRING, "setrange", db, &args[1]);
            Reply::Int(len as i64)
        }
        _ => Reply::err("ERR command not in the string family"),
    }
}

/// A read-modify-write of `key` under its lock, in one probe of the table (INCR and its
/// kin): `f` makes the new value from the current one (`None`: absent) or refuses with
/// an error text. On success the cached copy is dropped and `event` announced; the
/// `Err` is the reply.
async fn update(
    engine: &Engine,
    db: u8,
    key: &Bytes,
    event: &'static str,
    mut f: impl FnMut(Option<&[u8]>) -> Result<Vec<u8>, &'static str>,
) -> Result<(), Reply> {
    if let Some(done) = update_now(engine, db, key, event, &mut f) {
        return done;
    }
    update_awaited(engine, db, key, event, f).await
}

/// [`update`] on the awaited path only (the inline one declined already).
async fn update_awaited(
    engine: &Engine,
    db: u8,
    key: &Bytes,
    event: &'static str,
    f: impl FnMut(Option<&[u8]>) -> Result<Vec<u8>, &'static str>,
) -> Result<(), Reply> {
    let _g = engine.lock_key(key).await;
    update_locked(engine, db, key, event, f).await
}

/// [`update_awaited`] with the key's lock held by the caller.
async fn update_locked(
    engine: &Engine,
    db: u8,
    key: &[u8],
    event: &'static str,
    mut f: impl FnMut(Option<&[u8]>) -> Result<Vec<u8>, &'static str>,
) -> Result<(), Reply> {
    match rewrite_locked(engine, db, key, |cur| f(cur).map(Some)).await? {
        Ok(_) => {
            engine.notify(notify::STRING, event, db, key);
            Ok(())
        }
        Err(text) => Err(Reply::err(text)),
    }
}

/// [`update`] without awaiting anything, when the key's lock is free and the table
/// writes it at once ([`dmc_dht::Dht::update_now`]); `None`: run the awaited path (a
/// chunked string or another type among what it leaves to it).
fn update_now<V: AsRef<[u8]>>(
    engine: &Engine,
    db: u8,
    key: &Bytes,
    event: &'static str,
    f: &mut impl FnMut(Option<&[u8]>) -> Result<V, &'static str>,
) -> Option<Result<(), Reply>> {
    let _g = engine.try_lock_key(key)?;
    match engine.dht.update_now(db, key, f)? {
        Ok(Ok(())) => {
            engine.wrote(db, key, None);
            engine.notify(notify::STRING, event, db, key);
            Some(Ok(()))
        }
        Ok(Err(text)) => Some(Err(Reply::err(text))),
        Err(DhtError::WrongType) => None,
        Err(e) => Some(Err(error_reply(e))),
    }
}

/// Rewrites the string `key` under its lock in one probe of the table: `f` gets the
/// current value (`None`: missing) and returns the new one, or `None` to leave the key
/// untouched (nothing is written). `f` may run again if the key changed meanwhile.
/// Whether it wrote (the cached copy is then dropped; the caller announces its
/// event); `f`'s error, or the table's as a reply. Bitmaps and HyperLogLog write
/// through it.
pub(crate) async fn rewrite<E>(
    engine: &Engine,
    db: u8,
    key: &[u8],
    f: impl FnMut(Option<&[u8]>) -> Result<Option<Vec<u8>>, E>,
) -> Result<Result<bool, E>, Reply> {
    let _g = engine.lock_key(key).await;
    rewrite_locked(engine, db, key, f).await
}

/// [`rewrite`] by a caller that holds the key's lock (a combined batch).
pub(crate) async fn rewrite_locked<E>(
    engine: &Engine,
    db: u8,
    key: &[u8],
    mut f: impl FnMut(Option<&[u8]>) -> Result<Option<Vec<u8>>, E>,
) -> Result<Result<bool, E>, Reply> {
    let mut written = false;
    let updated = engine
        .dht
        .update_kind(db, key, dmc_dht::ValueKind::String, |cur| {
            let new = f(cur.map(|b| &b[..]))?;
            written = new.is_some();
            Ok(new.map_or(dmc_dht::Change::Keep, |v| dmc_dht::Change::Write(v.into())))
        })
        .await;
    match updated {
        Ok(Ok(())) => {
            if written {
                engine.wrote(db, key, None);
            }
            Ok(Ok(written))
        }
        Ok(Err(e)) => Ok(Err(e)),
        Err(DhtError::WrongType) => rewrite_chunked(engine, db, key, f).await,
        Err(e) => Err(error_reply(e)),
    }
}

/// [`rewrite_locked`] of a chunked string: `f` gets it assembled and its result is
/// written plain, the key's TTL kept (the writers that come here, INCR's kin and
/// HyperLogLog, refuse or never build a value that large). WRONGTYPE for a key of
/// another type.
async fn rewrite_chunked<E>(
    engine: &Engine,
    db: u8,
    key: &[u8],
    mut f: impl FnMut(Option<&[u8]>) -> Result<Option<Vec<u8>>, E>,
) -> Result<Result<bool, E>, Reply> {
    // Assembled; WRONGTYPE for a key of another type.
    let cur = engine.read(db, key).await.map_err(error_reply)?;
    let new = match f(cur.as_deref()) {
        Ok(Some(new)) => new,
        Ok(None) => return Ok(Ok(false)),
        Err(e) => return Ok(Err(e)),
    };
    let opts = SetOptions {
        expiry: SetExpiry::Keep,
        ..Default::default()
    };
    engine
        .dht
        .set(db, key, &new, opts)
        .await
        .map_err(error_reply)?;
    engine.wrote(db, key, None);
    Ok(Ok(true))
}

/// Redis's GETRANGE index arithmetic on a string of `len` bytes: the bytes to answer
/// (`None`: none).
fn range(len: u64, start: i64, end: i64) -> Option<Range<u64>> {
    let len = i64::try_from(len).ok()?;
    if len == 0 {
        return None;
    }
    let norm = |i: i64| if i < 0 { (len + i).max(0) } else { i };
    let (start, end) = (norm(start), norm(end).min(len - 1));
    if start > end || start >= len {
        return None;
    }
    Some(start as u64..end as u64 + 1)
}

/// APPEND's change: the bytes added at the end.
pub(crate) struct Append(Bytes);

impl splice::Splice for Append {
    type Out = u64;
    fn span(&self, len: u64) -> Range<u64> {
        len..len + self.0.len() as u64
    }
    fn apply(&self, w: &mut splice::Window) -> Result<(bool, u64), Reply> {
        if w.len() + self.0.len() as u64 > MAX_STRING {
            return Err(Reply::err(
                "ERR string exceeds maximum allowed size (proto-max-bulk-len)",
            ));
        }
        w.put(w.len(), &self.0);
        Ok((true, w.len()))
    }
}

/// SETRANGE's change: bytes written at an offset (not empty).
pub(crate) struct SetRange(u64, Bytes);

impl splice::Splice for SetRange {
    type Out = u64;
    fn span(&self, _len: u64) -> Range<u64> {
        self.0..self.0 + self.1.len() as u64
    }
    fn apply(&self, w: &mut splice::Window) -> Result<(bool, u64), Reply> {
        w.put(self.0, &self.1);
        Ok((true, w.len()))
    }
}

/// An APPEND's or SETRANGE's length after it, through the key's batch.
async fn edited_len(engine: &Engine, db: u8, key: &[u8], op: StringEdit) -> Result<u64, Reply> {
    match edit::submit(engine, db, key, op).await? {
        Edited::Len(len) => Ok(len),
        _ => Err(edit::mismatched()),
    }
}

/// `Dht::set`, with SET's GET (and GETSET) answering the old value of a chunked string
/// too (assembled; the caller holds the key's lock).
async fn set_getting_old(
    engine: &Engine,
    db: u8,
    key: &[u8],
    value: &[u8],
    opts: SetOptions,
) -> Result<dmc_dht::SetOutcome, DhtError> {
    match engine.dht.set(db, key, value, opts).await {
        Err(DhtError::WrongType) if opts.get => {
            // A chunked string, answered assembled (another type stays WRONGTYPE).
            let old = engine.read(db, key).await?;
            let opts = SetOptions { get: false, ..opts };
            let out = engine.dht.set(db, key, value, opts).await?;
            Ok(dmc_dht::SetOutcome { old, ..out })
        }
        other => other,
    }
}

/// What INCR, DECR, INCRBY or DECRBY (`cmd`, with `args`) adds, or the error reply.
fn counter_step(cmd: Cmd, args: &[Bytes]) -> Result<i64, Reply> {
    match cmd {
        Cmd::Incr => Ok(1),
        Cmd::Decr => Ok(-1),
        _ => match args.get(2).and_then(|a| parse_i64(a)) {
            Some(n) if cmd == Cmd::IncrBy => Ok(n),
            Some(n) => n
                .checked_neg()
                .ok_or_else(|| Reply::err("ERR decrement would overflow")),
            None => Err(Reply::err(NOT_INTEGER)),
        },
    }
}

/// A counter's new value in decimal, on the stack (an `i64` has at most 20 characters).
type Digits = smallvec::SmallVec<[u8; 24]>;

/// The new value of a counter at `cur` (absent: 0) after adding `by`, recorded in
/// `next`, or the error text.
fn counted(cur: Option<&[u8]>, by: i64, next: &mut i64) -> Result<Digits, &'static str> {
    let n = match cur {
        Some(v) => parse_i64(v).ok_or(NOT_INTEGER)?,
        None => 0,
    };
    *next = n
        .checked_add(by)
        .ok_or("ERR increment or decrement would overflow")?;
    Ok(Digits::from_slice(
        itoa::Buffer::new().format(*next).as_bytes(),
    ))
}

/// INCR, DECR, INCRBY and DECRBY (`cmd`): the key's integer plus the step, as a new
/// value and the reply.
pub(crate) async fn counter(engine: &Engine, db: u8, cmd: Cmd, args: &[Bytes]) -> Reply {
    match counter_now(engine, db, cmd, args) {
        Some(reply) => reply,
        None => counter_declined(engine, db, cmd, args).await,
    }
}

/// [`counter`] on the awaited path only, for one [`counter_now`] declined.
pub(crate) async fn counter_declined(engine: &Engine, db: u8, cmd: Cmd, args: &[Bytes]) -> Reply {
    let by = match counter_step(cmd, args) {
        Ok(by) => by,
        Err(r) => return r,
    };
    // A counter whose key is taken joins the key's combined batch.
    let _g = match engine.try_lock_key(&args[1]) {
        Some(g) => g,
        None if StringWrite::may_combine() => {
            return combined::submit(engine, db, &args[1], StringWrite::Add(by)).await;
        }
        None => engine.lock_key(&args[1]).await,
    };
    let mut next = 0i64;
    let updated = update_locked(engine, db, &args[1], "incrby", |cur| {
        counted(cur, by, &mut next).map(|digits| digits.to_vec())
    })
    .await;
    updated.map_or_else(|r| r, |()| Reply::Int(next))
}

/// [`counter`] without awaiting anything ([`update_now`]); `None`: run `counter`.
pub(crate) fn counter_now(engine: &Engine, db: u8, cmd: Cmd, args: &[Bytes]) -> Option<Reply> {
    let by = match counter_step(cmd, args) {
        Ok(by) => by,
        Err(r) => return Some(r),
    };
    let mut next = 0i64;
    let done = update_now(engine, db, &args[1], "incrby", &mut |cur| {
        counted(cur, by, &mut next)
    })?;
    Some(done.map_or_else(|r| r, |()| Reply::Int(next)))
}

/// The options of `SET key value [...]`, or the error reply they earn.
fn set_options(engine: &Engine, args: &[Bytes]) -> Result<SetOptions, Reply> {
    let mut opts = SetOptions::default();
    let (mut cond_seen, mut expiry_seen) = (false, false);
    let mut i = 3;
    while i < args.len() {
        let opt = upper(&args[i]);
        match opt.as_str() {
            "NX" | "XX" if !cond_seen => {
                cond_seen = true;
                opts.cond = if opt == "NX" {
                    SetCond::IfAbsent
                } else {
                    SetCond::IfPresent
                };
            }
            "GET" => opts.get = true,
            "KEEPTTL" if !expiry_seen => {
                expiry_seen = true;
                opts.expiry = SetExpiry::Keep;
            }
            "EX" | "PX" | "EXAT" | "PXAT" if !expiry_seen && i + 1 < args.len() => {
                expiry_seen = true;
                opts.expiry = SetExpiry::At(expiry_at(engine, &opt, &args[i + 1], "set")?);
                i += 1;
            }
            _ => return Err(Reply::err(SYNTAX)),
        }
        i += 1;
    }
    Ok(opts)
}

pub(crate) async fn set(engine: &Engine, db: u8, args: &[Bytes]) -> Reply {
    let opts = match set_options(engine, args) {
        Ok(opts) => opts,
        Err(r) => return r,
    };
    if let Some(reply) = set_with_now(engine, db, args, opts) {
        return reply;
    }
    set_awaited(engine, db, args, opts).await
}

/// [`set`] on the awaited path only, for one [`set_now`] declined.
pub(crate) async fn set_declined(engine: &Engine, db: u8, args: &[Bytes]) -> Reply {
    match set_options(engine, args) {
        Ok(opts) => set_awaited(engine, db, args, opts).await,
        Err(r) => r,
    }
}

async fn set_awaited(engine: &Engine, db: u8, args: &[Bytes], opts: SetOptions) -> Reply {
    // Writes of one key queue here instead of racing each other's commits; a SET that
    // replaces all of the key's state joins the key's combined batch instead.
    let _g = match engine.try_lock_key(&args[1]) {
        Some(g) => g,
        None if StringWrite::combinable(&opts) && StringWrite::may_combine() => {
            let op = StringWrite::Set(args[2].clone(), opts);
            return combined::submit(engine, db, &args[1], op).await;
        }
        None => engine.lock_key(&args[1]).await,
    };
    let out = tri!(set_getting_old(engine, db, &args[1], &args[2], opts).await);
    set_done(engine, db, &args[1], &args[2], opts, out)
}

/// `SET` without awaiting anything, when the key's lock is free and the table writes it
/// at once ([`dmc_dht::Dht::set_now`]); `None`: run [`set`].
pub(crate) fn set_now(engine: &Engine, db: u8, args: &[Bytes]) -> Option<Reply> {
    match set_options(engine, args) {
        Ok(opts) => set_with_now(engine, db, args, opts),
        Err(r) => Some(r),
    }
}

fn set_with_now(engine: &Engine, db: u8, args: &[Bytes], opts: SetOptions) -> Option<Reply> {
    let _g = engine.try_lock_key(&args[1])?;
    Some(match engine.dht.set_now(db, &args[1], &args[2], opts)? {
        Ok(out) => set_done(engine, db, &args[1], &args[2], opts, out),
        Err(e) => error_reply(e),
    })
}

/// After a SET's write (under the key's lock): the local cache, notifications, and the
/// reply.
fn set_done(
    engine: &Engine,
    db: u8,
    key: &[u8],
    value: &[u8],
    opts: SetOptions,
    out: dmc_dht::SetOutcome,
) -> Reply {
    if out.written {
        set_cached(engine, db, key, value, opts);
        set_announced(engine, db, key, opts);
    }
    if opts.get {
        return out.old.map(Reply::Bulk).unwrap_or(Reply::Null);
    }
    if out.written {
        Reply::ok()
    } else {
        Reply::Null
    }
}

/// A written SET's value into the local cache (write-through).
fn set_cached(engine: &Engine, db: u8, key: &[u8], value: &[u8], opts: SetOptions) {
    let cached = match opts.expiry {
        SetExpiry::Clear => Some((value, None)),
        SetExpiry::At(at) => Some((value, Some(at))),
        SetExpiry::Keep => None, // the kept expiry is not known here: drop the copy
    };
    engine.wrote(db, key, cached);
}

/// A written SET's keyspace notifications.
fn set_announced(engine: &Engine, db: u8, key: &[u8], opts: SetOptions) {
    engine.notify(notify::STRING, "set", db, key);
    if let SetExpiry::At(_) = opts.expiry {
        engine.notify(notify::GENERIC, "expire", db, key);
    }
}

async fn getex(engine: &Engine, db: u8, args: &[Bytes]) -> Reply {
    let mut expiry: Option<Option<u64>> = None; // Some(None) = PERSIST
    let mut i = 2;
    while i < args.len() {
        let opt = upper(&args[i]);
        match opt.as_str() {
            "PERSIST" if expiry.is_none() => expiry = Some(None),
            "EX" | "PX" | "EXAT" | "PXAT" if expiry.is_none() && i + 1 < args.len() => {
                match expiry_at(engine, &opt, &args[i + 1], "getex") {
                    Ok(at) => expiry = Some(Some(at)),
                    Err(r) => return r,
                }
                i += 1;
            }
            _ => return Reply::err(SYNTAX),
        }
        i += 1;
    }
    let _g = engine.lock_key(&args[1]).await;
    let Some(value) = tri!(engine.read(db, &args[1]).await) else {
        return Reply::Null;
    };
    if let Some(at) = expiry {
        let existed = tri!(engine.dht.expire(db, &args[1], at).await);
        engine.wrote(db, &args[1], None);
        match at {
            Some(at) if at <= engine.now_ms() => {
                engine.notify(notify::GENERIC, "del", db, &args[1])
            }
            Some(_) => engine.notify(notify::GENERIC, "expire", db, &args[1]),
            None if existed => engine.notify(notify::GENERIC, "persist", db, &args[1]),
            None => {}
        }
    }
    Reply::Bulk(value)
}

/// `LCS key1 key2 [LEN] [IDX] [MINMATCHLEN len] [WITHMATCHLEN]` on two values, with
/// Redis's dynamic program, tie-breaking and reply shapes (matches from the end).
fn lcs(a: &[u8], b: &[u8], opts: &[Bytes]) -> Reply {
    let (mut len_only, mut idx, mut with_len, mut min_len) = (false, false, false, 0i64);
    let mut i = 0;
    while i < opts.len() {
        match upper(&opts[i]).as_str() {
            "LEN" => len_only = true,
            "IDX" => idx = true,
            "WITHMATCHLEN" => with_len = true,
            "MINMATCHLEN" if i + 1 < opts.len() => {
                i += 1;
                match parse_i64(&opts[i]) {
                    Some(n) => min_len = n.max(0),
                    None => return Reply::err(NOT_INTEGER),
                }
            }
            _ => return Reply::err(SYNTAX),
        }
        i += 1;
    }
    if len_only && idx {
        return Reply::err("ERR If you want both the length and indexes, please just use IDX.");
    }
    let (n, m) = (a.len(), b.len());
    // The table is (n+1) x (m+1) u32s; Redis refuses it past proto-max-bulk-len.
    let cells = (n as u64 + 1).saturating_mul(m as u64 + 1);
    if cells.saturating_mul(4) > MAX_STRING {
        return Reply::err(
            "ERR Insufficient memory, transient memory for LCS exceeds proto-max-bulk-len",
        );
    }
    let w = n + 1;
    let mut t = vec![0u32; (n + 1) * (m + 1)];
    for j in 1..=m {
        for i in 1..=n {
            t[j * w + i] = if a[i - 1] == b[j - 1] {
                t[(j - 1) * w + i - 1] + 1
            } else {
                t[(j - 1) * w + i].max(t[j * w + i - 1])
            };
        }
    }
    let total = t[m * w + n];
    if len_only {
        return Reply::Int(i64::from(total));
    }
    let mut out = vec![0u8; total as usize];
    let mut k = total as usize;
    let mut matches = Vec::new();
    // Current range: (a_start, a_end, b_start, b_end); none while a_start == n.
    let (mut ras, mut rae, mut rbs, mut rbe) = (n, n, 0, 0);
    let (mut i, mut j) = (n, m);
    while i > 0 && j > 0 {
        let mut emit = false;
        if a[i - 1] == b[j - 1] {
            out[k - 1] = a[i - 1];
            if ras == n {
                (ras, rae, rbs, rbe) = (i - 1, i - 1, j - 1, j - 1);
            } else if ras == i && rbs == j {
                ras -= 1;
                rbs -= 1;
            } else {
                emit = true;
            }
            if ras == 0 || rbs == 0 {
                emit = true;
            }
            k -= 1;
            i -= 1;
            j -= 1;
        } else {
            if t[j * w + i - 1] > t[(j - 1) * w + i] {
                i -= 1;
            } else {
                j -= 1;
            }
            if ras != n {
                emit = true;
            }
        }
        if emit {
            let match_len = (rae - ras + 1) as i64;
            if idx && (min_len == 0 || match_len >= min_len) {
                let pair = |s: usize, e: usize| {
                    Reply::Array(vec![Reply::Int(s as i64), Reply::Int(e as i64)])
                };
                let mut row = vec![pair(ras, rae), pair(rbs, rbe)];
                if with_len {
                    row.push(Reply::Int(match_len));
                }
                matches.push(Reply::Array(row));
            }
            ras = n;
        }
    }
    if idx {
        Reply::Map(vec![
            (Reply::bulk("matches"), Reply::Array(matches)),
            (Reply::bulk("len"), Reply::Int(i64::from(total))),
        ])
    } else {
        Reply::Bulk(Bytes::from(out))
    }
}

#[cfg(test)]
mod lcs_tests {
    use super::*;

    fn opts(o: &[&str]) -> Vec<Bytes> {
        o.iter()
            .map(|s| Bytes::copy_from_slice(s.as_bytes()))
            .collect()
    }

    // The examples of Redis's LCS documentation.
    #[test]
    fn lcs_matches_the_redis_documentation() {
        let (a, b) = (b"ohmytext", b"mynewtext");
        assert_eq!(lcs(a, b, &[]), Reply::bulk("mytext"));
        assert_eq!(lcs(a, b, &opts(&["LEN"])), Reply::Int(6));
        let range = |s: i64, e: i64| Reply::Array(vec![Reply::Int(s), Reply::Int(e)]);
        assert_eq!(
            lcs(a, b, &opts(&["IDX"])),
            Reply::Map(vec![
                (
                    Reply::bulk("matches"),
                    Reply::Array(vec![
                        Reply::Array(vec![range(4, 7), range(5, 8)]),
                        Reply::Array(vec![range(2, 3), range(0, 1)]),
                    ])
                ),
                (Reply::bulk("len"), Reply::Int(6)),
            ])
        );
        assert_eq!(
            lcs(a, b, &opts(&["IDX", "MINMATCHLEN", "4", "WITHMATCHLEN"])),
            Reply::Map(vec![
                (
                    Reply::bulk("matches"),
                    Reply::Array(vec![Reply::Array(vec![
                        range(4, 7),
                        range(5, 8),
                        Reply::Int(4)
                    ])])
                ),
                (Reply::bulk("len"), Reply::Int(6)),
            ])
        );
        assert_eq!(lcs(b"", b"abc", &[]), Reply::bulk(""));
        assert!(matches!(lcs(a, b, &opts(&["LEN", "IDX"])), Reply::Error(_)));
        assert!(matches!(lcs(a, b, &opts(&["BOGUS"])), Reply::Error(_)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn getrange_matches_redis() {
        let v = Bytes::from("This is a string");
        let range = |v: &Bytes, start, end| match super::range(v.len() as u64, start, end) {
            Some(r) => v.slice(r.start as usize..r.end as usize),
            None => Bytes::new(),
        };
        assert_eq!(range(&v, 0, 3), "This");
        assert_eq!(range(&v, -3, -1), "ing");
        assert_eq!(range(&v, 0, -1), "This is a string");
        assert_eq!(range(&v, 10, 100), "string");
        assert_eq!(range(&v, 5, 3), "");
        assert_eq!(range(&Bytes::new(), 0, -1), "");
    }
}
