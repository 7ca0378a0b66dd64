//! Stream IDs (`ms-seq`, two unsigned 64-bit numbers) and the ways commands spell
//! them, with Redis 7.0's parsing rules (`streamGenericParseIDOrReply`): `-` and `+`,
//! an incomplete `ms` (the missing sequence depends on the command), XADD's `*` and
//! `ms-*`, and the exclusive `(id` of XRANGE.

use std::fmt;

pub const INVALID_ID: &str = "ERR Invalid stream ID specified as stream command argument";

/// A stream entry's ID; ordered as Redis orders them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct StreamId {
    pub ms: u64,
    pub seq: u64,
}

impl StreamId {
    pub const MIN: StreamId = StreamId { ms: 0, seq: 0 };
    pub const MAX: StreamId = StreamId {
        ms: u64::MAX,
        seq: u64::MAX,
    };

    pub const fn new(ms: u64, seq: u64) -> StreamId {
        StreamId { ms, seq }
    }

    /// The next ID (`None` past the last possible one).
    pub fn next(self) -> Option<StreamId> {
        if self.seq < u64::MAX {
            Some(StreamId::new(self.ms, self.seq + 1))
        } else if self.ms < u64::MAX {
            Some(StreamId::new(self.ms + 1, 0))
        } else {
            None
        }
    }

    /// The previous ID (`None` before 0-0).
    pub fn prev(self) -> Option<StreamId> {
        if self.seq > 0 {
            Some(StreamId::new(self.ms, self.seq - 1))
        } else if self.ms > 0 {
            Some(StreamId::new(self.ms - 1, u64::MAX))
        } else {
            None
        }
    }

    pub fn is_zero(self) -> bool {
        self == StreamId::MIN
    }

    /// The 16 bytes it is stored as (big-endian, so bytes order as IDs do).
    pub fn to_bytes(self) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&self.ms.to_be_bytes());
        b[8..].copy_from_slice(&self.seq.to_be_bytes());
        b
    }

    pub fn from_bytes(b: [u8; 16]) -> StreamId {
        let mut ms = [0u8; 8];
        let mut seq = [0u8; 8];
        ms.copy_from_slice(&b[..8]);
        seq.copy_from_slice(&b[8..]);
        StreamId::new(u64::from_be_bytes(ms), u64::from_be_bytes(seq))
    }
}

impl fmt::Display for StreamId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.ms, self.seq)
    }
}

/// An ID as a command argument; `missing_seq` completes an `ms` without sequence;
/// `strict` refuses `-` and `+`.
pub fn parse(arg: &[u8], missing_seq: u64, strict: bool) -> Result<StreamId, &'static str> {
    match parse_generic(arg, missing_seq, strict, false)? {
        (id, true) => Ok(id),
        // `ms-*` is XADD's alone.
        (_, false) => Err(INVALID_ID),
    }
}

/// XADD's ID: a full ID, `ms` (sequence 0) or `ms-*`; the second value is false for
/// `ms-*` (the sequence is to be chosen).
pub fn parse_for_add(arg: &[u8]) -> Result<(StreamId, bool), &'static str> {
    parse_generic(arg, 0, true, true)
}

fn parse_generic(
    arg: &[u8],
    missing_seq: u64,
    strict: bool,
    seq_star: bool,
) -> Result<(StreamId, bool), &'static str> {
    if arg.len() > 127 {
        return Err(INVALID_ID);
    }
    match arg {
        b"-" if !strict => return Ok((StreamId::MIN, true)),
        b"+" if !strict => return Ok((StreamId::MAX, true)),
        b"-" | b"+" => return Err(INVALID_ID),
        _ => {}
    }
    let (ms, seq) = match arg.iter().position(|&b| b == b'-') {
        Some(dash) => (&arg[..dash], Some(&arg[dash + 1..])),
        None => (arg, None),
    };
    let ms = parse_u64(ms).ok_or(INVALID_ID)?;
    match seq {
        None => Ok((StreamId::new(ms, missing_seq), true)),
        Some(b"*") if seq_star => Ok((StreamId::new(ms, 0), false)),
        Some(s) => Ok((StreamId::new(ms, parse_u64(s).ok_or(INVALID_ID)?), true)),
    }
}

/// An interval end of XRANGE / XPENDING: `(id` excludes the ID (then `-` and `+` are
/// refused), else as [`parse`] without `strict`. The bool says "exclusive".
pub fn parse_interval(arg: &[u8], missing_seq: u64) -> Result<(StreamId, bool), &'static str> {
    if arg.len() > 1 && arg[0] == b'(' {
        return Ok((parse(&arg[1..], missing_seq, true)?, true));
    }
    Ok((parse(arg, missing_seq, false)?, false))
}

/// Redis's `string2ull` (which falls back on `strtoull`): leading white space and a
/// `+` are allowed, then decimal digits within 64 bits.
fn parse_u64(s: &[u8]) -> Option<u64> {
    let start = s
        .iter()
        .position(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\x0b' | b'\x0c' | b'\r'))?;
    let s = &s[start..];
    let digits = s.strip_prefix(b"+").unwrap_or(s);
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    digits.iter().try_fold(0u64, |n, d| {
        n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_parse_as_redis_parses_them() {
        assert_eq!(parse(b"5-3", 0, false), Ok(StreamId::new(5, 3)));
        assert_eq!(parse(b"5", 7, false), Ok(StreamId::new(5, 7)));
        assert_eq!(parse(b"-", 0, false), Ok(StreamId::MIN));
        assert_eq!(parse(b"+", 0, false), Ok(StreamId::MAX));
        assert_eq!(parse(b"+", 0, true), Err(INVALID_ID));
        assert_eq!(parse(b"5-*", 0, false), Err(INVALID_ID));
        assert_eq!(parse_for_add(b"5-*"), Ok((StreamId::new(5, 0), false)));
        assert_eq!(parse_for_add(b"5"), Ok((StreamId::new(5, 0), true)));
        assert_eq!(parse(b"01-+2", 0, false), Ok(StreamId::new(1, 2)));
        for bad in [
            &b""[..],
            b"x",
            b"-1",
            b"5-",
            b"1-2-3",
            b"18446744073709551616",
            b" ",
        ] {
            assert_eq!(parse(bad, 0, false), Err(INVALID_ID), "{bad:?}");
        }
        assert_eq!(parse_interval(b"(5-1", 0), Ok((StreamId::new(5, 1), true)));
        assert_eq!(parse_interval(b"(", 0), Err(INVALID_ID));
        assert_eq!(parse_interval(b"(+", 0), Err(INVALID_ID));
    }

    #[test]
    fn neighbours_and_bytes() {
        assert_eq!(StreamId::new(1, u64::MAX).next(), Some(StreamId::new(2, 0)));
        assert_eq!(StreamId::MAX.next(), None);
        assert_eq!(StreamId::new(2, 0).prev(), Some(StreamId::new(1, u64::MAX)));
        assert_eq!(StreamId::MIN.prev(), None);
        let id = StreamId::new(1 << 40, 9);
        assert_eq!(StreamId::from_bytes(id.to_bytes()), id);
        assert!(StreamId::new(1, 2).to_bytes() < StreamId::new(2, 0).to_bytes());
    }
}
