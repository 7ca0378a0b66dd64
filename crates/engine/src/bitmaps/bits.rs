//! Bit arithmetic on a string's bytes, as Redis 7.0's `bitops.c` defines it: bit 0 is
//! the most significant bit of byte 0. Pure functions over slices, used by the bitmap
//! commands ([`super`]) and checked against a bit-by-bit model in the tests.

/// Redis's `proto-max-bulk-len`: a bit offset must address a byte below it.
pub const MAX_BYTES: u64 = 512 << 20;

/// The bit at `offset` (0 past the end).
pub fn get(v: &[u8], offset: u64) -> bool {
    let Ok(byte) = usize::try_from(offset >> 3) else {
        return false;
    };
    v.get(byte).is_some_and(|b| b & (0x80 >> (offset & 7)) != 0)
}

/// Sets the bit at `offset` to `on`, growing `v` with zero bytes to reach it; the
/// previous bit.
pub fn set(v: &mut Vec<u8>, offset: u64, on: bool) -> bool {
    let byte = (offset >> 3) as usize;
    if v.len() <= byte {
        v.resize(byte + 1, 0);
    }
    let mask = 0x80u8 >> (offset & 7);
    let old = v[byte] & mask != 0;
    if on {
        v[byte] |= mask;
    } else {
        v[byte] &= !mask;
    }
    old
}

/// A BITCOUNT / BITPOS range after Redis's index arithmetic: whole bytes
/// `start..=end` of the string, and in BIT mode the bits of the first and last byte
/// that lie outside the range (masks of the bits to leave out).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub start: usize,
    pub end: usize,
    /// Bits of byte `start` before the range.
    pub first_out: u8,
    /// Bits of byte `end` after the range.
    pub last_out: u8,
}

/// Redis's range arithmetic: negative indexes count from the end, then are clamped
/// into the string; `None` when the range is empty. `end` is the last index,
/// inclusive; `bits` says the indexes are bits, not bytes.
pub fn span(len: usize, start: i64, end: i64, bits: bool) -> Option<Span> {
    let total = if bits {
        (len as i64).saturating_mul(8)
    } else {
        len as i64
    };
    let norm = |i: i64| {
        if i < 0 {
            total.saturating_add(i).max(0)
        } else {
            i
        }
    };
    let (start, end) = (norm(start), norm(end).min(total - 1));
    if start > end || total == 0 {
        return None;
    }
    if !bits {
        return Some(Span {
            start: start as usize,
            end: end as usize,
            first_out: 0,
            last_out: 0,
        });
    }
    Some(Span {
        start: (start >> 3) as usize,
        end: (end >> 3) as usize,
        first_out: !(0xffu8 >> (start & 7)),
        last_out: 0xffu8.checked_shr(1 + (end & 7) as u32).unwrap_or(0),
    })
}

/// The set bits of `v` inside `span`.
pub fn count(v: &[u8], span: Span) -> u64 {
    let Some(bytes) = v.get(span.start..=span.end) else {
        return 0;
    };
    let mut n: u64 = popcount(bytes);
    n -= u64::from((bytes[0] & span.first_out).count_ones());
    if let Some(last) = bytes.last() {
        n -= u64::from((last & span.last_out).count_ones());
    }
    n
}

/// Set bits in `bytes`, eight bytes at a time.
pub fn popcount(bytes: &[u8]) -> u64 {
    let mut chunks = bytes.chunks_exact(8);
    let mut n = 0u64;
    for c in &mut chunks {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        n += u64::from(u64::from_ne_bytes(w).count_ones());
    }
    n + chunks
        .remainder()
        .iter()
        .map(|b| u64::from(b.count_ones()))
        .sum::<u64>()
}

/// BITPOS over `span` of `v`: the first bit equal to `bit`, as an absolute bit index.
/// `end_given` is Redis's rule for clear bits: without an explicit end the string
/// continues with zeros, so looking for 0 in all-ones answers the first bit past it;
/// with an explicit end that is -1.
pub fn position(v: &[u8], span: Span, bit: bool, end_given: bool) -> i64 {
    let Some(bytes) = v.get(span.start..=span.end) else {
        return -1;
    };
    let last = bytes.len() - 1;
    for (i, &b) in bytes.iter().enumerate() {
        // Bits outside the range look like the opposite of what is sought.
        let mut b = if bit { b } else { !b };
        if i == 0 {
            b &= !span.first_out;
        }
        if i == last {
            b &= !span.last_out;
        }
        if b != 0 {
            return ((span.start + i) as i64) * 8 + i64::from(b.leading_zeros());
        }
    }
    if bit || end_given {
        return -1;
    }
    // No clear bit: the first one past the range (the zero padding).
    (span.end as i64 + 1) * 8
}

/// BITOP's operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    And,
    Or,
    Xor,
    Not,
}

/// BITOP of `sources` (a missing key is an empty string): as long as the longest,
/// shorter ones padded with zeros.
pub fn op(op: Op, sources: &[&[u8]]) -> Vec<u8> {
    let len = sources.iter().map(|s| s.len()).max().unwrap_or(0);
    let Some((first, rest)) = sources.split_first() else {
        return Vec::new();
    };
    let mut out = first.to_vec();
    out.resize(len, 0);
    match op {
        Op::Not => out.iter_mut().for_each(|b| *b = !*b),
        Op::And => {
            for s in rest {
                for (i, o) in out.iter_mut().enumerate() {
                    *o &= s.get(i).copied().unwrap_or(0);
                }
            }
        }
        Op::Or | Op::Xor => {
            for s in rest {
                for (o, b) in out.iter_mut().zip(s.iter()) {
                    if op == Op::Or {
                        *o |= b;
                    } else {
                        *o ^= b;
                    }
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// The model: a string as a vector of bits.
    fn bits_of(v: &[u8]) -> Vec<bool> {
        (0..v.len() as u64 * 8).map(|i| get(v, i)).collect()
    }

    /// The model's range: Redis's arithmetic on bit indexes directly (in BYTE mode,
    /// a byte range is the bits of those bytes).
    fn model_range(len: usize, start: i64, end: i64, bit_mode: bool) -> Option<(usize, usize)> {
        let total = if bit_mode { len as i64 * 8 } else { len as i64 };
        let norm = |i: i64| if i < 0 { (total + i).max(0) } else { i };
        let (s, e) = (norm(start), norm(end).min(total - 1));
        if s > e || total == 0 {
            return None;
        }
        Some(if bit_mode {
            (s as usize, e as usize)
        } else {
            (s as usize * 8, e as usize * 8 + 7)
        })
    }

    #[test]
    fn redis_examples() {
        // BITCOUNT mykey ... from Redis's documentation ("foobar").
        let v = b"foobar";
        assert_eq!(count(v, span(6, 0, -1, false).unwrap()), 26);
        assert_eq!(count(v, span(6, 0, 0, false).unwrap()), 4);
        assert_eq!(count(v, span(6, 1, 1, false).unwrap()), 6);
        assert_eq!(count(v, span(6, 1, 1, true).unwrap()), 1);
        assert_eq!(count(v, span(6, 5, 30, true).unwrap()), 17);
        // BITPOS mykey ... (\xff\xf0\x00).
        let v = [0xff, 0xf0, 0x00];
        assert_eq!(
            position(&v, span(3, 0, -1, false).unwrap(), false, false),
            12
        );
        let v = [0x00, 0xff, 0xf0];
        assert_eq!(position(&v, span(3, 0, -1, false).unwrap(), true, false), 8);
        assert_eq!(
            position(&v, span(3, 2, -1, false).unwrap(), true, false),
            16
        );
        assert_eq!(position(&v, span(3, 2, -1, true).unwrap(), true, true), 8);
        assert_eq!(position(&v, span(3, 7, 15, true).unwrap(), true, true), 8);
        let v = [0x00, 0x00, 0x00];
        assert_eq!(
            position(&v, span(3, 0, -1, false).unwrap(), true, false),
            -1
        );
        let v = [0xff, 0xff];
        assert_eq!(
            position(&v, span(2, 0, -1, false).unwrap(), false, false),
            16
        );
        assert_eq!(
            position(&v, span(2, 0, -1, false).unwrap(), false, true),
            -1
        );
        assert!(span(0, 0, -1, false).is_none());
        assert!(span(3, -1, -3, false).is_none());
    }

    proptest! {
        #[test]
        fn count_and_position_match_the_bit_model(
            v in proptest::collection::vec(any::<u8>(), 0..24),
            start in -200i64..200,
            end in -200i64..200,
            bit_mode in any::<bool>(),
            bit in any::<bool>(),
            end_given in any::<bool>(),
        ) {
            let model = bits_of(&v);
            let range = model_range(v.len(), start, end, bit_mode);
            let got = span(v.len(), start, end, bit_mode);
            prop_assert_eq!(range.is_some(), got.is_some());
            if let (Some((s, e)), Some(sp)) = (range, got) {
                let ones = model[s..=e].iter().filter(|b| **b).count() as u64;
                prop_assert_eq!(count(&v, sp), ones);
                let want = match model[s..=e].iter().position(|b| *b == bit) {
                    Some(p) => (s + p) as i64,
                    None if bit || end_given => -1,
                    None => (sp.end as i64 + 1) * 8,
                };
                prop_assert_eq!(position(&v, sp, bit, end_given), want);
            }
        }

        #[test]
        fn set_and_op_match_the_bit_model(
            a in proptest::collection::vec(any::<u8>(), 0..16),
            b in proptest::collection::vec(any::<u8>(), 0..16),
            offset in 0u64..200,
            on in any::<bool>(),
        ) {
            let mut v = a.clone();
            let before = get(&a, offset);
            prop_assert_eq!(set(&mut v, offset, on), before);
            let mut model = bits_of(&a);
            if model.len() <= offset as usize {
                model.resize(((offset as usize >> 3) + 1) * 8, false);
            }
            model[offset as usize] = on;
            prop_assert_eq!(bits_of(&v), model);

            let len = a.len().max(b.len());
            let bit = |s: &[u8], i: u64| get(s, i);
            for (o, f) in [
                (Op::And, (|x: bool, y: bool| x & y) as fn(bool, bool) -> bool),
                (Op::Or, |x, y| x | y),
                (Op::Xor, |x, y| x ^ y),
            ] {
                let out = op(o, &[&a, &b]);
                prop_assert_eq!(out.len(), len);
                for i in 0..len as u64 * 8 {
                    prop_assert_eq!(bit(&out, i), f(bit(&a, i), bit(&b, i)));
                }
            }
            let not = op(Op::Not, &[&a]);
            prop_assert_eq!(not.len(), a.len());
            for i in 0..a.len() as u64 * 8 {
                prop_assert_eq!(bit(&not, i), !bit(&a, i));
            }
        }
    }
}
