//! The sparse encoding: a run-length stream of three opcodes after the 16-byte
//! header, and Redis's in-place update algorithm (`hllSparseSet`), reproduced
//! step by step so that the bytes after every PFADD / PFMERGE are the ones
//! Redis 7.0 produces.
//!
//! ```text
//!   ZERO   00xxxxxx            xxxxxx + 1 registers at 0          (1..=64)
//!   XZERO  01xxxxxx yyyyyyyy   (xxxxxx << 8 | yyyyyyyy) + 1 at 0  (1..=16384)
//!   VAL    1vvvvvxx            xx + 1 registers (1..=4) at vvvvv + 1 (1..=32)
//!
//!   empty HLL:  XZERO:16384  = 0x7f 0xff
//!   a valid stream covers exactly 16384 registers, hence holds at most
//!   16384 opcodes (<= 32768 bytes); anything else is `Corrupt`.
//! ```
//!
//! Every byte access is bounds-checked: the stream may come from a client
//! (SET, RESTORE), and a malformed one yields [`HllError::Corrupt`], never a
//! panic. Decoding stops as soon as the register count passes 16384, so time
//! and memory stay bounded whatever the stream's length.

use super::estimate::HISTO_LEN;
use super::{HDR_LEN, HllError, REGISTERS, dense};
use std::fmt::Write as _;

/// Largest value a VAL opcode holds (`HLL_SPARSE_VAL_MAX_VALUE`).
pub const VAL_MAX_VALUE: u8 = 32;
/// Longest run of a VAL opcode (`HLL_SPARSE_VAL_MAX_LEN`).
const VAL_MAX_LEN: usize = 4;
/// Longest run of a ZERO opcode (`HLL_SPARSE_ZERO_MAX_LEN`).
const ZERO_MAX_LEN: usize = 64;
/// Longest run of an XZERO opcode (`HLL_SPARSE_XZERO_MAX_LEN`).
pub const XZERO_MAX_LEN: usize = 16384;

const XZERO_BIT: u8 = 0x40;
const VAL_BIT: u8 = 0x80;

const _: () = assert!(XZERO_MAX_LEN == REGISTERS);
const _: () = assert!((VAL_MAX_VALUE as usize) < HISTO_LEN);

/// One decoded opcode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Zero(usize),
    XZero(usize),
    Val { value: u8, len: usize },
}

impl Op {
    /// Registers covered.
    fn span(self) -> usize {
        match self {
            Op::Zero(n) | Op::XZero(n) => n,
            Op::Val { len, .. } => len,
        }
    }

    /// Bytes used.
    fn width(self) -> usize {
        match self {
            Op::XZero(_) => 2,
            _ => 1,
        }
    }

    /// Register value.
    fn value(self) -> u8 {
        match self {
            Op::Val { value, .. } => value,
            _ => 0,
        }
    }
}

fn is_xzero(b: u8) -> bool {
    b & 0xc0 == XZERO_BIT
}

fn is_zero(b: u8) -> bool {
    b & 0xc0 == 0
}

fn is_val(b: u8) -> bool {
    b & VAL_BIT != 0
}

fn val_value(b: u8) -> u8 {
    ((b >> 2) & 0x1f) + 1
}

fn val_len(b: u8) -> usize {
    usize::from(b & 0x3) + 1
}

fn val_byte(value: u8, len: usize) -> u8 {
    // value in 1..=32, len in 1..=4 at every call site.
    (((value.wrapping_sub(1) & 0x1f) << 2) | ((len.wrapping_sub(1) & 0x3) as u8)) | VAL_BIT
}

fn zero_byte(len: usize) -> u8 {
    (len.wrapping_sub(1) & 0x3f) as u8
}

fn xzero_bytes(len: usize) -> [u8; 2] {
    let l = len.wrapping_sub(1) & 0x3fff;
    [((l >> 8) as u8) | XZERO_BIT, (l & 0xff) as u8]
}

/// Decodes the opcode at `pos` of `data`; `None` when `pos` is past the end or
/// an XZERO is cut in half.
pub fn decode_op(data: &[u8], pos: usize) -> Option<Op> {
    let b = *data.get(pos)?;
    Some(if is_zero(b) {
        Op::Zero(usize::from(b & 0x3f) + 1)
    } else if is_xzero(b) {
        let lo = *data.get(pos + 1)?;
        Op::XZero(((usize::from(b & 0x3f) << 8) | usize::from(lo)) + 1)
    } else {
        Op::Val {
            value: val_value(b),
            len: val_len(b),
        }
    })
}

/// Walks a whole opcode stream (without header), calling `f(first, op)` for
/// each opcode. `Corrupt` unless it covers exactly 16384 registers.
pub fn for_each_op(data: &[u8], mut f: impl FnMut(usize, Op)) -> Result<(), HllError> {
    let mut pos = 0;
    let mut idx = 0usize;
    while pos < data.len() {
        let op = decode_op(data, pos).ok_or(HllError::Corrupt)?;
        let span = op.span();
        if idx + span > REGISTERS {
            return Err(HllError::Corrupt);
        }
        f(idx, op);
        idx += span;
        pos += op.width();
    }
    if idx == REGISTERS {
        Ok(())
    } else {
        Err(HllError::Corrupt)
    }
}

/// Checks that a stream (without header) is well formed.
pub fn validate(data: &[u8]) -> Result<(), HllError> {
    for_each_op(data, |_, _| {})
}

/// `hllSparseRegHisto` (with the validity check of `hllCount`).
pub fn histogram(data: &[u8], histo: &mut [u32; HISTO_LEN]) -> Result<(), HllError> {
    for_each_op(data, |_, op| {
        if let Some(slot) = histo.get_mut(usize::from(op.value())) {
            *slot += op.span() as u32;
        }
    })
}

/// `hllMerge` for a sparse source.
pub fn merge_into(data: &[u8], max: &mut [u8; REGISTERS]) -> Result<(), HllError> {
    // Validate first: Redis leaves `max` partly updated on error, but the
    // command then fails and `max` is discarded, so this is not observable.
    validate(data)?;
    for_each_op(data, |first, op| {
        if let Op::Val { value, len } = op {
            for m in max.iter_mut().skip(first).take(len) {
                *m = (*m).max(value);
            }
        }
    })
}

/// `hllSparseToDense`: the dense bytes (header copied, encoding set to dense)
/// of the sparse HLL `bytes` (header included).
pub fn to_dense(bytes: &[u8]) -> Result<Vec<u8>, HllError> {
    let header = bytes.get(..HDR_LEN).ok_or(HllError::Corrupt)?;
    let data = bytes.get(HDR_LEN..).ok_or(HllError::Corrupt)?;
    let mut out = vec![0u8; HDR_LEN + dense::DENSE_DATA_LEN];
    validate(data)?;
    let (h, regs) = out.split_at_mut(HDR_LEN);
    h.copy_from_slice(header);
    if let Some(enc) = h.get_mut(4) {
        *enc = super::ENCODING_DENSE;
    }
    for_each_op(data, |first, op| {
        if let Op::Val { value, len } = op {
            for i in first..first + len {
                dense::set(regs, i, value);
            }
        }
    })?;
    Ok(out)
}

/// What [`set`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetOutcome {
    /// The register already held a value >= count.
    Unchanged,
    /// The stream was rewritten in place (cache invalidated).
    Updated,
    /// Redis's `goto promote`: the caller converts to dense and sets there.
    Promote,
}

/// `hllSparseSet` on a whole sparse HLL (`buf` includes the header, whose
/// length counts against `sparse_max_bytes` as `sdslen` does in Redis).
///
/// The stream is expected to be validated; if it is not, a malformed part
/// met on the way gives `Corrupt` (never a panic).
pub fn set(
    buf: &mut Vec<u8>,
    index: usize,
    count: u8,
    sparse_max_bytes: usize,
) -> Result<SetOutcome, HllError> {
    if count > VAL_MAX_VALUE {
        return Ok(SetOutcome::Promote);
    }

    // Step 1: find the opcode covering `index`.
    let mut p = HDR_LEN;
    let mut first = 0usize;
    let mut prev: Option<usize> = None;
    let mut found: Option<Op> = None;
    while p < buf.len() {
        let op = decode_op(buf, p).ok_or(HllError::Corrupt)?;
        if index < first + op.span() {
            found = Some(op);
            break;
        }
        prev = Some(p);
        p += op.width();
        first += op.span();
        if first > REGISTERS {
            return Err(HllError::Corrupt);
        }
    }
    let op = found.ok_or(HllError::Corrupt)?;
    let span = op.span();

    // Step 2: the trivial cases A, B, C.
    let mut trivial = false;
    match op {
        Op::Val { value, len } => {
            if value >= count {
                return Ok(SetOutcome::Unchanged);
            }
            trivial = len == 1;
        }
        Op::Zero(len) => trivial = len == 1,
        Op::XZero(_) => {}
    }

    if trivial {
        let b = buf.get_mut(p).ok_or(HllError::Corrupt)?;
        *b = val_byte(count, 1);
    } else {
        // Case D: split the opcode into up to three.
        let mut seq: Vec<u8> = Vec::with_capacity(5);
        let last = first + span - 1;
        match op {
            Op::Zero(_) | Op::XZero(_) => {
                let push_zeros = |seq: &mut Vec<u8>, len: usize| {
                    if len > ZERO_MAX_LEN {
                        seq.extend_from_slice(&xzero_bytes(len));
                    } else {
                        seq.push(zero_byte(len));
                    }
                };
                if index != first {
                    push_zeros(&mut seq, index - first);
                }
                seq.push(val_byte(count, 1));
                if index != last {
                    push_zeros(&mut seq, last - index);
                }
            }
            Op::Val { value, .. } => {
                if index != first {
                    seq.push(val_byte(value, index - first));
                }
                seq.push(val_byte(count, 1));
                if index != last {
                    seq.push(val_byte(value, last - index));
                }
            }
        }

        // Step 3: substitute the sequence for the old opcode.
        let oldlen = op.width();
        if seq.len() > oldlen && buf.len() + (seq.len() - oldlen) > sparse_max_bytes {
            return Ok(SetOutcome::Promote);
        }
        if p + oldlen > buf.len() {
            return Err(HllError::Corrupt);
        }
        buf.splice(p..p + oldlen, seq);
    }

    // Step 4: merge adjacent VAL opcodes, scanning up to 5 opcodes from prev.
    let mut p = prev.unwrap_or(HDR_LEN);
    let mut scanlen = 5u32;
    while p < buf.len() && scanlen > 0 {
        scanlen -= 1;
        let Some(&b) = buf.get(p) else { break };
        if is_xzero(b) {
            p += 2;
            continue;
        } else if is_zero(b) {
            p += 1;
            continue;
        }
        let next = buf.get(p + 1).copied().filter(|&n| is_val(n));
        if let Some(next) = next {
            let (v1, v2) = (val_value(b), val_value(next));
            let len = val_len(b) + val_len(next);
            if v1 == v2 && len <= VAL_MAX_LEN {
                if let Some(n) = buf.get_mut(p + 1) {
                    *n = val_byte(v1, len);
                }
                buf.remove(p);
                // Re-examine the merged opcode against its right neighbour.
                continue;
            }
        }
        p += 1;
    }

    super::invalidate_cache_bytes(buf);
    Ok(SetOutcome::Updated)
}

/// `PFDEBUG DECODE`'s text for a stream (without header): `z:N`, `Z:N`,
/// `v:VALUE,LEN` separated by spaces. Like Redis it does not validate; a
/// trailing half XZERO reads its missing byte as 0 (the sds terminator).
pub fn decode_text(data: &[u8]) -> String {
    let mut out = String::new();
    let mut pos = 0;
    while let Some(&b) = data.get(pos) {
        if !out.is_empty() {
            out.push(' ');
        }
        // Writing to a String cannot fail.
        let _ = if is_zero(b) {
            pos += 1;
            write!(out, "z:{}", usize::from(b & 0x3f) + 1)
        } else if is_xzero(b) {
            let lo = data.get(pos + 1).copied().unwrap_or(0);
            pos += 2;
            write!(
                out,
                "Z:{}",
                ((usize::from(b & 0x3f) << 8) | usize::from(lo)) + 1
            )
        } else {
            pos += 1;
            write!(out, "v:{},{}", val_value(b), val_len(b))
        };
    }
    out
}

/// The opcode stream of `createHLLObject`: XZERO runs covering every register.
pub fn empty_stream() -> Vec<u8> {
    let mut out = Vec::with_capacity(REGISTERS.div_ceil(XZERO_MAX_LEN) * 2);
    let mut left = REGISTERS;
    while left > 0 {
        let run = left.min(XZERO_MAX_LEN);
        out.extend_from_slice(&xzero_bytes(run));
        left -= run;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opcode_bytes() {
        assert_eq!(empty_stream(), vec![0x7f, 0xff]);
        assert_eq!(val_byte(1, 1), 0x80);
        assert_eq!(val_byte(32, 4), 0xff);
        assert_eq!(zero_byte(64), 0x3f);
        assert_eq!(xzero_bytes(1000), [0x43, 0xe7]);
        assert_eq!(decode_op(&[0x43], 0), None);
        assert_eq!(decode_op(&[0x43, 0xe7], 0), Some(Op::XZero(1000)));
    }

    #[test]
    fn redis_doc_example_decodes() {
        // XZERO:1000 VAL:2,1 ZERO:19 VAL:3,2 XZERO:15362
        let mut s = xzero_bytes(1000).to_vec();
        s.push(val_byte(2, 1));
        s.push(zero_byte(19));
        s.push(val_byte(3, 2));
        s.extend_from_slice(&xzero_bytes(15362));
        assert_eq!(decode_text(&s), "Z:1000 v:2,1 z:19 v:3,2 Z:15362");
        let mut max = [0u8; REGISTERS];
        merge_into(&s, &mut max).unwrap();
        assert_eq!((max[999], max[1000], max[1001]), (0, 2, 0));
        assert_eq!((max[1020], max[1021], max[1022]), (3, 3, 0));
    }

    #[test]
    fn validation_rejects_bad_streams() {
        assert_eq!(validate(&[]), Err(HllError::Corrupt));
        assert_eq!(validate(&[0x7f]), Err(HllError::Corrupt));
        assert_eq!(validate(&[0x7f, 0xfe]), Err(HllError::Corrupt));
        assert_eq!(validate(&[0x7f, 0xff, 0x00]), Err(HllError::Corrupt));
        assert_eq!(validate(&[0x7f, 0xfe, 0x80]), Ok(()));
        // Many XZERO runs: stops early, whatever the length.
        let huge = [0x7f, 0xff].repeat(100_000);
        assert_eq!(validate(&huge), Err(HllError::Corrupt));
    }

    #[test]
    fn set_splits_and_merges() {
        let mut buf = vec![0u8; HDR_LEN];
        buf.extend_from_slice(&empty_stream());
        assert_eq!(set(&mut buf, 10, 3, 3000), Ok(SetOutcome::Updated));
        assert_eq!(decode_text(&buf[HDR_LEN..]), "z:10 v:3,1 Z:16373");
        assert_eq!(set(&mut buf, 11, 3, 3000), Ok(SetOutcome::Updated));
        assert_eq!(decode_text(&buf[HDR_LEN..]), "z:10 v:3,2 Z:16372");
        assert_eq!(set(&mut buf, 11, 2, 3000), Ok(SetOutcome::Unchanged));
        assert_eq!(set(&mut buf, 9, 40, 3000), Ok(SetOutcome::Promote));
        // Growing past the limit promotes.
        let len = buf.len();
        assert_eq!(set(&mut buf, 5000, 1, len), Ok(SetOutcome::Promote));
        assert_eq!(buf.len(), len);
        assert_eq!(buf[15] & 0x80, 0x80);
    }
}
