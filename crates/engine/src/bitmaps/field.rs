//! BITFIELD: integers of 1 to 64 bits at any bit offset of a string, with Redis 7.0's
//! parsing, error texts and overflow rules (WRAP, SAT, FAIL). [`parse`] turns the
//! arguments into operations before anything is read; [`apply`] runs them on the
//! string's bytes.

use bytes::Bytes;

use super::bits::MAX_BYTES;
use crate::parse_i64;

pub const TYPE_ERR: &str = "ERR Invalid bitfield type. Use something like i16 u8. Note that u64 is not supported but i64 is.";
pub const OFFSET_ERR: &str = "ERR bit offset is not an integer or out of range";

/// What happens when SET or INCRBY leaves the integer's range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overflow {
    Wrap,
    Sat,
    Fail,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Get,
    Set(i64),
    IncrBy(i64),
}

/// One GET, SET or INCRBY.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldOp {
    pub kind: Kind,
    pub signed: bool,
    pub bits: u32,
    pub offset: u64,
    pub overflow: Overflow,
}

/// The operations of `BITFIELD key op...` (`args` from the first op on), or the
/// error reply's text. `read_only` is BITFIELD_RO, which takes only GET.
pub fn parse(args: &[Bytes], read_only: bool) -> Result<Vec<FieldOp>, &'static str> {
    let mut ops = Vec::new();
    let mut overflow = Overflow::Wrap;
    let mut i = 0;
    while i < args.len() {
        let rest = args.len() - i - 1;
        let name = &args[i];
        let is = |w: &[u8]| name.eq_ignore_ascii_case(w);
        if is(b"overflow") && rest >= 1 {
            let arg = &args[i + 1];
            overflow = if arg.eq_ignore_ascii_case(b"wrap") {
                Overflow::Wrap
            } else if arg.eq_ignore_ascii_case(b"sat") {
                Overflow::Sat
            } else if arg.eq_ignore_ascii_case(b"fail") {
                Overflow::Fail
            } else {
                return Err("ERR Invalid OVERFLOW type specified");
            };
            i += 2;
            continue;
        }
        let get = is(b"get") && rest >= 2;
        if !get && !((is(b"set") || is(b"incrby")) && rest >= 3) {
            return Err(crate::SYNTAX);
        }
        let (signed, bits) = field_type(&args[i + 1])?;
        let offset = field_offset(&args[i + 2], bits)?;
        let kind = if get {
            Kind::Get
        } else {
            let n = parse_i64(&args[i + 3]).ok_or(crate::NOT_INTEGER)?;
            if is(b"set") {
                Kind::Set(n)
            } else {
                Kind::IncrBy(n)
            }
        };
        ops.push(FieldOp {
            kind,
            signed,
            bits,
            offset,
            overflow,
        });
        i += if get { 3 } else { 4 };
    }
    if read_only && ops.iter().any(|o| o.kind != Kind::Get) {
        return Err("ERR BITFIELD_RO only supports the GET subcommand");
    }
    Ok(ops)
}

/// `i8`, `u16`, ...: signed up to 64 bits, unsigned up to 63.
fn field_type(arg: &[u8]) -> Result<(bool, u32), &'static str> {
    let (signed, digits) = match arg.split_first() {
        Some((b'i', d)) => (true, d),
        Some((b'u', d)) => (false, d),
        _ => return Err(TYPE_ERR),
    };
    match parse_i64(digits) {
        Some(n) if n >= 1 && n <= if signed { 64 } else { 63 } => Ok((signed, n as u32)),
        _ => Err(TYPE_ERR),
    }
}

/// A bit offset, or `#n` for the n-th field of this width.
fn field_offset(arg: &[u8], bits: u32) -> Result<u64, &'static str> {
    let (by_index, digits) = match arg.split_first() {
        Some((b'#', d)) => (true, d),
        _ => (false, arg),
    };
    let n = parse_i64(digits).ok_or(OFFSET_ERR)?;
    let n = if by_index {
        n.checked_mul(i64::from(bits)).ok_or(OFFSET_ERR)?
    } else {
        n
    };
    if n < 0 || (n as u64 >> 3) >= MAX_BYTES {
        return Err(OFFSET_ERR);
    }
    Ok(n as u64)
}

/// The last bit any SET or INCRBY of `ops` writes (`None`: only GETs).
pub fn highest_write(ops: &[FieldOp]) -> Option<u64> {
    ops.iter()
        .filter(|o| o.kind != Kind::Get)
        .map(|o| o.offset + u64::from(o.bits) - 1)
        .max()
}

/// An op's reply: an integer, or nil when FAIL refused it.
pub type Outcome = Option<i64>;

/// Runs `ops` on `v` in order (a write grows it with zeros first, as Redis does when
/// it looks the key up for writing); the replies, and whether any write changed a
/// bit.
pub fn apply(v: &mut Vec<u8>, ops: &[FieldOp]) -> (Vec<Outcome>, bool) {
    if let Some(last) = highest_write(ops) {
        let need = (last >> 3) as usize + 1;
        if v.len() < need {
            v.resize(need, 0);
        }
    }
    let mut changed = false;
    let out = ops
        .iter()
        .map(|op| {
            let old = read(v, op.offset, op.bits);
            let (target, reply_new) = match op.kind {
                Kind::Get => return Some(as_reply(op, old)),
                // A SET value is taken as given: -1 in an unsigned field is all ones,
                // which overflows it.
                Kind::Set(n) if op.signed => (i128::from(n), false),
                Kind::Set(n) => (i128::from(n as u64), false),
                Kind::IncrBy(by) if op.signed => {
                    (i128::from(sign_extend(old, op.bits)) + i128::from(by), true)
                }
                Kind::IncrBy(by) => (i128::from(old) + i128::from(by), true),
            };
            // FAIL refuses the op: nil, nothing written.
            let new = fit(op, target)?;
            let reply = Some(as_reply(op, if reply_new { new } else { old }));
            changed |= new != old;
            write(v, op.offset, op.bits, new);
            reply
        })
        .collect();
    (out, changed)
}

/// A GET's value, the bytes past the end of `v` read as zeros.
pub fn get(v: &[u8], op: &FieldOp) -> i64 {
    as_reply(op, read(v, op.offset, op.bits))
}

/// The field's bits as the reply shows them.
fn as_reply(op: &FieldOp, raw: u64) -> i64 {
    if op.signed {
        sign_extend(raw, op.bits)
    } else {
        raw as i64
    }
}

fn sign_extend(raw: u64, bits: u32) -> i64 {
    let shift = 64 - bits;
    ((raw << shift) as i64) >> shift
}

/// The raw bits that store `value` in the op's field by its overflow rule (WRAP keeps
/// the low bits, SAT the nearest bound); `None` when FAIL refuses it.
fn fit(op: &FieldOp, value: i128) -> Option<u64> {
    let bits = op.bits;
    let mask = if bits == 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    };
    let (min, max) = if op.signed {
        (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1)
    } else {
        (0, i128::from(mask))
    };
    let stored = if value > max || value < min {
        match op.overflow {
            Overflow::Fail => return None,
            Overflow::Sat if value > max => max,
            Overflow::Sat => min,
            Overflow::Wrap => value,
        }
    } else {
        value
    };
    Some(stored as u64 & mask)
}

/// The `bits` bits at `offset`, zero past the end of `v`.
fn read(v: &[u8], offset: u64, bits: u32) -> u64 {
    (0..u64::from(bits)).fold(0u64, |acc, j| {
        (acc << 1) | u64::from(super::bits::get(v, offset + j))
    })
}

/// Writes the low `bits` bits of `value` at `offset` (inside `v`).
fn write(v: &mut Vec<u8>, offset: u64, bits: u32, value: u64) {
    for j in 0..u64::from(bits) {
        let on = value >> (u64::from(bits) - 1 - j) & 1 == 1;
        super::bits::set(v, offset + j, on);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ops(line: &str) -> Result<Vec<FieldOp>, &'static str> {
        let args: Vec<Bytes> = line
            .split(' ')
            .map(|w| Bytes::copy_from_slice(w.as_bytes()))
            .collect();
        parse(&args, false)
    }

    fn run(v: &mut Vec<u8>, line: &str) -> Vec<Outcome> {
        apply(v, &ops(line).expect("parses")).0
    }

    #[test]
    fn redis_documentation_examples() {
        let mut v = Vec::new();
        assert_eq!(run(&mut v, "INCRBY i5 100 1 GET u4 0"), [Some(1), Some(0)]);
        let mut v = Vec::new();
        let line = "incrby u2 100 1 OVERFLOW SAT incrby u2 102 1";
        assert_eq!(run(&mut v, line), [Some(1), Some(1)]);
        assert_eq!(run(&mut v, line), [Some(2), Some(2)]);
        assert_eq!(run(&mut v, line), [Some(3), Some(3)]);
        assert_eq!(run(&mut v, line), [Some(0), Some(3)]);
        assert_eq!(run(&mut v, "OVERFLOW FAIL incrby u2 102 1"), [None]);
    }

    #[test]
    fn set_returns_the_old_value_and_fits_the_new_one() {
        let mut v = Vec::new();
        assert_eq!(
            run(&mut v, "SET i8 0 -1 GET u8 0 GET i8 0"),
            [Some(0), Some(255), Some(-1)]
        );
        assert_eq!(run(&mut v, "SET u8 #1 300 GET u8 8"), [Some(0), Some(44)]);
        assert_eq!(
            run(&mut v, "OVERFLOW SAT SET u8 8 300 GET u8 8"),
            [Some(44), Some(255)]
        );
        assert_eq!(
            run(&mut v, "OVERFLOW SAT SET i8 0 -300 GET i8 0"),
            [Some(-1), Some(-128)]
        );
        assert_eq!(
            run(&mut v, "OVERFLOW FAIL SET u8 8 -1 GET u8 8"),
            [None, Some(255)]
        );
        assert_eq!(
            run(&mut v, "SET i64 0 -9223372036854775808 GET i64 0").len(),
            2
        );
        let mut v = Vec::new();
        assert_eq!(
            run(
                &mut v,
                "INCRBY i64 0 9223372036854775807 OVERFLOW SAT INCRBY i64 0 1"
            ),
            [Some(i64::MAX), Some(i64::MAX)]
        );
        assert_eq!(
            run(&mut v, "OVERFLOW WRAP INCRBY i64 0 1"),
            [Some(i64::MIN)]
        );
        assert_eq!(run(&mut v, "INCRBY u63 64 -1"), [Some(i64::MAX)]);
    }

    #[test]
    fn bad_arguments_give_redis_errors() {
        assert_eq!(ops("GET u64 0"), Err(TYPE_ERR));
        assert_eq!(ops("GET i65 0"), Err(TYPE_ERR));
        assert_eq!(ops("GET x8 0"), Err(TYPE_ERR));
        assert_eq!(ops("GET u8 -1"), Err(OFFSET_ERR));
        assert_eq!(ops("GET u8 4294967296"), Err(OFFSET_ERR));
        assert_eq!(ops("GET u8 #536870912"), Err(OFFSET_ERR));
        assert_eq!(ops("GET u8"), Err(crate::SYNTAX));
        assert_eq!(ops("SET u8 0 x"), Err(crate::NOT_INTEGER));
        assert_eq!(
            ops("OVERFLOW nope"),
            Err("ERR Invalid OVERFLOW type specified")
        );
        let args = [
            Bytes::from_static(b"SET"),
            "u8".into(),
            "0".into(),
            "1".into(),
        ];
        assert_eq!(
            parse(&args, true),
            Err("ERR BITFIELD_RO only supports the GET subcommand")
        );
    }
}
