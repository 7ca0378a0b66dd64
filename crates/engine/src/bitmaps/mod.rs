//! The bitmap family: SETBIT, GETBIT, BITCOUNT, BITPOS, BITOP, BITFIELD and
//! BITFIELD_RO on string values, with Redis 7.0's argument rules, replies and error
//! texts. The bit arithmetic is in [`bits`] and [`field`]; this file reads keys and
//! writes them back.
//!
//! A write is a read-modify-write of the whole string under the key's lock, committed
//! like INCR (`Dht::update_kind`, one probe, one-sided): a write that changes no bit
//! of an existing string writes nothing, as Redis then does not signal the key.
//! SETBITs of one key that arrive together are one batch ([`crate::combine`]).

mod bits;
mod field;

use std::sync::Arc;

use bytes::Bytes;
use dmc_dht::SetOptions;
use dmc_resp::Reply;
use futures::future::BoxFuture;

use crate::combine::{Answer, Batch, Combiner};

use crate::table::BitCmd;
use crate::{Engine, NOT_INTEGER, SYNTAX, Session, error_reply, notify, parse_i64};
use bits::{MAX_BYTES, Op};

const OFFSET_ERR: &str = field::OFFSET_ERR;

macro_rules! tri {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(e) => return error_reply(e),
        }
    };
}

pub async fn run(engine: &Engine, s: &mut Session, cmd: BitCmd, args: &[Bytes]) -> Reply {
    let db = engine.physical_db(s.db);
    match cmd {
        BitCmd::SetBit => setbit(engine, db, args).await,
        BitCmd::GetBit => {
            let Some(offset) = bit_offset(&args[2]) else {
                return Reply::err(OFFSET_ERR);
            };
            let v = tri!(engine.read(db, &args[1]).await).unwrap_or_default();
            Reply::Int(i64::from(bits::get(&v, offset)))
        }
        BitCmd::BitCount => bitcount(engine, db, args).await,
        BitCmd::BitPos => bitpos(engine, db, args).await,
        BitCmd::BitOp => bitop(engine, db, args).await,
        BitCmd::BitField | BitCmd::BitFieldRo => {
            bitfield(engine, db, args, cmd == BitCmd::BitFieldRo).await
        }
    }
}

/// A SETBIT / GETBIT offset: a bit inside Redis's largest string.
fn bit_offset(arg: &[u8]) -> Option<u64> {
    parse_i64(arg)
        .and_then(|n| u64::try_from(n).ok())
        .filter(|n| n >> 3 < MAX_BYTES)
}

async fn setbit(engine: &Engine, db: u8, args: &[Bytes]) -> Reply {
    const BIT_ERR: &str = "ERR bit is not an integer or out of range";
    let Some(offset) = bit_offset(&args[2]) else {
        return Reply::err(OFFSET_ERR);
    };
    let on = match parse_i64(&args[3]) {
        Some(0) => false,
        Some(1) => true,
        _ => return Reply::err(BIT_ERR),
    };
    let key = &args[1];
    match engine
        .setbit_batches
        .submit(engine, db, key, SetBitOp { offset, on })
        .await
    {
        Ok((old, signalled)) => {
            if signalled {
                engine.notify(notify::STRING, "setbit", db, key);
            }
            Reply::Int(i64::from(old))
        }
        Err(r) => r,
    }
}

/// A SETBIT waiting to be combined with the others of its key: a batch reads the
/// string once, sets every bit in arrival order and writes it once.
pub(crate) struct SetBitOp {
    offset: u64,
    on: bool,
}

impl Batch for SetBitOp {
    /// The bit before, and whether this SETBIT changed the key (created it, grew it
    /// or flipped the bit: what Redis announces).
    type Out = (bool, bool);

    fn combiner(engine: &Engine) -> &Combiner<Self> {
        &engine.setbit_batches
    }

    fn run(
        engine: Arc<Engine>,
        db: u8,
        key: Bytes,
        ops: Vec<Self>,
    ) -> BoxFuture<'static, Result<Vec<Answer<Self>>, Reply>> {
        Box::pin(async move {
            let mut answers = Vec::with_capacity(ops.len());
            crate::strings::rewrite_locked(&engine, db, &key, |cur| {
                answers.clear();
                let mut v = cur.map(<[u8]>::to_vec).unwrap_or_default();
                let mut exists = cur.is_some();
                let mut any = false;
                for op in &ops {
                    let len = v.len();
                    let old = bits::set(&mut v, op.offset, op.on);
                    let changed = !exists || v.len() != len || old != op.on;
                    exists = true;
                    any |= changed;
                    answers.push(Ok((old, changed)));
                }
                Ok::<_, std::convert::Infallible>(any.then_some(v))
            })
            .await?
            .unwrap_or_else(|never| match never {});
            Ok(answers)
        })
    }
}

/// Changes the string `key` in place under its lock: `f` edits the bytes (empty for a
/// missing key) and says whether it changed a bit. A missing key or a grown string is
/// written even when no bit changed (Redis creates the key), an unchanged one is not.
/// Whether anything was written; announces `setbit`.
async fn edit(
    engine: &Engine,
    db: u8,
    key: &Bytes,
    mut f: impl FnMut(&mut Vec<u8>) -> bool,
) -> Result<bool, Reply> {
    let written = crate::strings::rewrite(engine, db, key, |cur| {
        let mut v = cur.map(<[u8]>::to_vec).unwrap_or_default();
        let changed = f(&mut v);
        let grown = cur.is_none_or(|c| c.len() != v.len());
        Ok::<_, std::convert::Infallible>((changed || grown).then_some(v))
    })
    .await?
    .unwrap_or_else(|never| match never {});
    if written {
        engine.notify(notify::STRING, "setbit", db, key);
    }
    Ok(written)
}

/// `BYTE` or `BIT` (true).
fn bit_unit(arg: &[u8]) -> Option<bool> {
    if arg.eq_ignore_ascii_case(b"bit") {
        Some(true)
    } else if arg.eq_ignore_ascii_case(b"byte") {
        Some(false)
    } else {
        None
    }
}

async fn bitcount(engine: &Engine, db: u8, args: &[Bytes]) -> Reply {
    // Redis looks the key up before it parses the range: a missing key is 0 whatever
    // follows.
    let Some(v) = tri!(engine.read(db, &args[1]).await) else {
        return Reply::Int(0);
    };
    let span = match args.len() {
        2 => bits::span(v.len(), 0, -1, false),
        4 | 5 => {
            let (Some(start), Some(end)) = (parse_i64(&args[2]), parse_i64(&args[3])) else {
                return Reply::err(NOT_INTEGER);
            };
            if start < 0 && end < 0 && start > end {
                return Reply::Int(0);
            }
            let in_bits = match args.get(4) {
                Some(unit) => match bit_unit(unit) {
                    Some(b) => b,
                    None => return Reply::err(SYNTAX),
                },
                None => false,
            };
            bits::span(v.len(), start, end, in_bits)
        }
        _ => return Reply::err(SYNTAX),
    };
    Reply::Int(span.map_or(0, |sp| bits::count(&v, sp) as i64))
}

async fn bitpos(engine: &Engine, db: u8, args: &[Bytes]) -> Reply {
    let bit = match parse_i64(&args[2]) {
        Some(0) => false,
        Some(1) => true,
        Some(_) => return Reply::err("ERR The bit argument must be 1 or 0."),
        None => return Reply::err(NOT_INTEGER),
    };
    let Some(v) = tri!(engine.read(db, &args[1]).await) else {
        return Reply::Int(if bit { -1 } else { 0 });
    };
    if args.len() > 6 {
        return Reply::err(SYNTAX);
    }
    let mut end_given = false;
    let span = if args.len() == 3 {
        bits::span(v.len(), 0, -1, false)
    } else {
        let Some(start) = parse_i64(&args[3]) else {
            return Reply::err(NOT_INTEGER);
        };
        let in_bits = match args.get(5) {
            Some(unit) => match bit_unit(unit) {
                Some(b) => b,
                None => return Reply::err(SYNTAX),
            },
            None => false,
        };
        let end = match args.get(4) {
            Some(end) => {
                end_given = true;
                match parse_i64(end) {
                    Some(e) => e,
                    None => return Reply::err(NOT_INTEGER),
                }
            }
            None => -1,
        };
        bits::span(v.len(), start, end, in_bits)
    };
    Reply::Int(span.map_or(-1, |sp| bits::position(&v, sp, bit, end_given)))
}

async fn bitop(engine: &Engine, db: u8, args: &[Bytes]) -> Reply {
    let name = &args[1];
    let op = if name.eq_ignore_ascii_case(b"and") {
        Op::And
    } else if name.eq_ignore_ascii_case(b"or") {
        Op::Or
    } else if name.eq_ignore_ascii_case(b"xor") {
        Op::Xor
    } else if name.eq_ignore_ascii_case(b"not") {
        Op::Not
    } else {
        return Reply::err(SYNTAX);
    };
    if op == Op::Not && args.len() != 4 {
        return Reply::err("ERR BITOP NOT must be called with a single source key.");
    }
    let dest = &args[2];
    let _g = engine.lock_key(dest).await;
    let mut sources = Vec::with_capacity(args.len() - 3);
    for key in &args[3..] {
        sources.push(tri!(engine.read(db, key).await).unwrap_or_default());
    }
    let slices: Vec<&[u8]> = sources.iter().map(|s| &s[..]).collect();
    let out = bits::op(op, &slices);
    drop(sources);
    let len = out.len() as i64;
    if out.is_empty() {
        if tri!(engine.dht.delete(db, dest).await) {
            engine.wrote(db, dest, None);
            engine.notify(notify::GENERIC, "del", db, dest);
        }
    } else {
        tri!(engine.dht.set(db, dest, &out, SetOptions::default()).await);
        engine.wrote(db, dest, Some((&out, None)));
        engine.notify(notify::STRING, "set", db, dest);
    }
    Reply::Int(len)
}

async fn bitfield(engine: &Engine, db: u8, args: &[Bytes], read_only: bool) -> Reply {
    let ops = match field::parse(&args[2..], read_only) {
        Ok(ops) => ops,
        Err(text) => return Reply::err(text),
    };
    let outcomes = if field::highest_write(&ops).is_none() {
        let v = tri!(engine.read(db, &args[1]).await).unwrap_or_default();
        ops.iter().map(|op| Some(field::get(&v, op))).collect()
    } else {
        let mut outcomes = Vec::new();
        let edited = edit(engine, db, &args[1], |v| {
            let (out, changed) = field::apply(v, &ops);
            outcomes = out;
            changed
        })
        .await;
        if let Err(r) = edited {
            return r;
        }
        outcomes
    };
    Reply::Array(
        outcomes
            .into_iter()
            .map(|o| o.map_or(Reply::Null, Reply::Int))
            .collect(),
    )
}
