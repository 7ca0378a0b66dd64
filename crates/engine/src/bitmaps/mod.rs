//! The bitmap family: SETBIT, GETBIT, BITCOUNT, BITPOS, BITOP, BITFIELD and
//! BITFIELD_RO on string values, with Redis 7.0's argument rules, replies and error
//! texts. The bit arithmetic is in [`bits`] and [`field`]; this file reads keys and
//! writes them back.
//!
//! Reads and writes go through [`crate::strings::splice`]: a plain string is rewritten
//! whole like INCR (`Dht::update_kind`, one probe, one-sided), a large (chunked) one
//! only in the pieces a change touches, and reads of a chunked string read the pieces
//! under the bits they ask for. A write that changes no bit of an existing string
//! writes nothing, as Redis then does not signal the key. SETBITs of one key that
//! arrive together are one batch ([`crate::combine`]).

mod bits;
mod field;

pub(crate) use field::Outcome;

use bytes::Bytes;
use dmc_dht::SetOptions;
use dmc_resp::Reply;

use std::ops::Range;

use crate::strings::edit::{self, Edited, StringEdit};
use crate::strings::splice::{Splice, Window, read_span};

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
            let byte = offset >> 3;
            let found = read_span(engine, db, &args[1], |_| byte..byte + 1).await;
            let v = or_reply!(found);
            let on = v.is_some_and(|v| v.byte(byte) & (0x80 >> (offset & 7)) != 0);
            Reply::Int(i64::from(on))
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
    match edit::submit(engine, db, key, StringEdit::SetBit(SetBitOp { offset, on })).await {
        Ok(Edited::Bit(old, signalled)) => {
            if signalled {
                engine.notify(notify::STRING, "setbit", db, key);
            }
            Reply::Int(i64::from(old))
        }
        Ok(_) => edit::mismatched(),
        Err(r) => r,
    }
}

/// A SETBIT, combined with the others of its key ([`StringEdit`]): a batch reads the
/// string once, sets every bit in arrival order and writes it once.
pub(crate) struct SetBitOp {
    offset: u64,
    on: bool,
}

impl Splice for SetBitOp {
    type Out = (bool, bool);

    fn span(&self, _len: u64) -> Range<u64> {
        let byte = self.offset >> 3;
        byte..byte + 1
    }

    fn apply(&self, w: &mut Window) -> Result<(bool, (bool, bool)), Reply> {
        let byte = self.offset >> 3;
        let mask = 0x80u8 >> (self.offset & 7);
        let cur = w.byte(byte);
        let old = cur & mask != 0;
        let changed = !w.exists() || byte >= w.len() || old != self.on;
        if changed {
            w.put(byte, &[if self.on { cur | mask } else { cur & !mask }]);
        }
        Ok((changed, (old, changed)))
    }
}

/// BITFIELD's writing form: its ops run on the bytes between the first and the last
/// they address.
pub(crate) struct FieldWrite(Vec<field::FieldOp>);

impl Splice for FieldWrite {
    /// The replies, and whether the key was written.
    type Out = (Vec<field::Outcome>, bool);

    fn span(&self, _len: u64) -> Range<u64> {
        field_span(&self.0)
    }

    fn apply(&self, w: &mut Window) -> Result<(bool, Self::Out), Reply> {
        let (exists, len) = (w.exists(), w.len());
        let (out, changed) = w.edit_raw(|v, base| field::apply(v, &shifted(&self.0, base)));
        // A new key or a grown string is written even when no bit changed (Redis
        // creates the key), an unchanged one is not.
        let write = changed || !exists || w.len() != len;
        Ok((write, (out, write)))
    }
}

/// The bytes BITFIELD's `ops` address.
fn field_span(ops: &[field::FieldOp]) -> Range<u64> {
    let first = ops.iter().map(|o| o.offset >> 3).min().unwrap_or(0);
    let last = ops
        .iter()
        .map(|o| (o.offset + u64::from(o.bits) - 1) >> 3)
        .max()
        .unwrap_or(0);
    first..last + 1
}

/// `ops` with their offsets taken from byte `base` on.
fn shifted(ops: &[field::FieldOp], base: u64) -> Vec<field::FieldOp> {
    ops.iter()
        .map(|o| field::FieldOp {
            offset: o.offset - base * 8,
            ..*o
        })
        .collect()
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
    let span_of = |len: u64| -> Result<Option<bits::Span>, Reply> {
        let len = len as usize;
        Ok(match args.len() {
            2 => bits::span(len, 0, -1, false),
            4 | 5 => {
                let (Some(start), Some(end)) = (parse_i64(&args[2]), parse_i64(&args[3])) else {
                    return Err(Reply::err(NOT_INTEGER));
                };
                if start < 0 && end < 0 && start > end {
                    return Ok(None);
                }
                let in_bits = match args.get(4) {
                    Some(unit) => bit_unit(unit).ok_or_else(|| Reply::err(SYNTAX))?,
                    None => false,
                };
                bits::span(len, start, end, in_bits)
            }
            _ => return Err(Reply::err(SYNTAX)),
        })
    };
    let bytes_of = |len| span_of(len).ok().flatten().map_or(0..0, byte_range);
    let Some(v) = or_reply!(read_span(engine, db, &args[1], bytes_of).await) else {
        return Reply::Int(0);
    };
    let span = or_reply!(span_of(v.len));
    Reply::Int(span.map_or(0, |sp| bits::count(&v.bytes, relative(sp, v.base)) as i64))
}

async fn bitpos(engine: &Engine, db: u8, args: &[Bytes]) -> Reply {
    let bit = match parse_i64(&args[2]) {
        Some(0) => false,
        Some(1) => true,
        Some(_) => return Reply::err("ERR The bit argument must be 1 or 0."),
        None => return Reply::err(NOT_INTEGER),
    };
    if args.len() > 6 {
        return bitpos_missing_or(engine, db, &args[1], bit, Reply::err(SYNTAX)).await;
    }
    let end_given = args.len() > 4;
    let span_of = |len: u64| -> Result<Option<bits::Span>, Reply> {
        let len = len as usize;
        if args.len() == 3 {
            return Ok(bits::span(len, 0, -1, false));
        }
        let start = parse_i64(&args[3]).ok_or_else(|| Reply::err(NOT_INTEGER))?;
        let in_bits = match args.get(5) {
            Some(unit) => bit_unit(unit).ok_or_else(|| Reply::err(SYNTAX))?,
            None => false,
        };
        let end = match args.get(4) {
            Some(end) => parse_i64(end).ok_or_else(|| Reply::err(NOT_INTEGER))?,
            None => -1,
        };
        Ok(bits::span(len, start, end, in_bits))
    };
    let bytes_of = |len| span_of(len).ok().flatten().map_or(0..0, byte_range);
    let Some(v) = or_reply!(read_span(engine, db, &args[1], bytes_of).await) else {
        return Reply::Int(if bit { -1 } else { 0 });
    };
    let span = or_reply!(span_of(v.len));
    Reply::Int(span.map_or(-1, |sp| {
        match bits::position(&v.bytes, relative(sp, v.base), bit, end_given) {
            -1 => -1,
            at => at + (v.base * 8) as i64,
        }
    }))
}

/// BITPOS with too many arguments: Redis looks the key up first, so a missing key
/// still answers.
async fn bitpos_missing_or(engine: &Engine, db: u8, key: &[u8], bit: bool, err: Reply) -> Reply {
    match or_reply!(read_span(engine, db, key, |_| 0..0).await) {
        None => Reply::Int(if bit { -1 } else { 0 }),
        Some(_) => err,
    }
}

/// The bytes a span covers.
fn byte_range(sp: bits::Span) -> Range<u64> {
    sp.start as u64..sp.end as u64 + 1
}

/// `sp` in bytes read from byte `base` on.
fn relative(sp: bits::Span, base: u64) -> bits::Span {
    bits::Span {
        start: sp.start - base as usize,
        end: sp.end - base as usize,
        ..sp
    }
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
        let span = field_span(&ops);
        match or_reply!(read_span(engine, db, &args[1], |_| span.clone()).await) {
            Some(v) => {
                let ops = shifted(&ops, v.base);
                ops.iter()
                    .map(|op| Some(field::get(&v.bytes, op)))
                    .collect()
            }
            None => ops.iter().map(|op| Some(field::get(&[], op))).collect(),
        }
    } else {
        let key = &args[1];
        match edit::submit(engine, db, key, StringEdit::Field(FieldWrite(ops))).await {
            Ok(Edited::Field(outcomes, written)) => {
                if written {
                    engine.notify(notify::STRING, "setbit", db, key);
                }
                outcomes
            }
            Ok(_) => return edit::mismatched(),
            Err(r) => return r,
        }
    };
    Reply::Array(
        outcomes
            .into_iter()
            .map(|o| o.map_or(Reply::Null, Reply::Int))
            .collect(),
    )
}
