//! Readers of the compact encodings inside Redis's RDB values: listpacks (Redis 7),
//! ziplists (older dumps) and intsets. RESTORE of a payload from Redis reads small
//! hashes, lists, sets and sorted sets out of these; DMC never writes them.
//!
//! ```text
//! listpack: total:u32 LE | count:u16 LE | entry... | 0xFF
//!   entry:  encoding (7-bit uint, 6/12/32-bit string length, 13/16/24/32/64-bit int)
//!           | data | backlen (1-5 bytes, the entry's length)
//! ziplist:  total:u32 LE | tail:u32 LE | count:u16 LE | entry... | 0xFF
//!   entry:  prevlen (1 byte, or 0xFE + u32) | encoding (6/14/32-bit string length,
//!           16/32/64/24/8-bit int, 4-bit immediate 0..12) | data
//! intset:   width:u32 LE (2, 4 or 8) | count:u32 LE | count × int of width, LE
//! ```
//!
//! Every read is bounds-checked against the blob: a lying header or a truncated entry
//! is an error, never a panic or an allocation past the blob's size.

use bytes::Bytes;

/// Why a compact encoding cannot be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CompactError {
    #[error("the encoded collection is truncated or malformed")]
    Malformed,
}

use CompactError::Malformed;

/// A cursor over a blob.
struct Cursor<'a> {
    blob: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], CompactError> {
        let end = self.at.checked_add(n).ok_or(Malformed)?;
        let s = self.blob.get(self.at..end).ok_or(Malformed)?;
        self.at = end;
        Ok(s)
    }

    fn byte(&mut self) -> Result<u8, CompactError> {
        Ok(self.take(1)?[0])
    }

    fn le(&mut self, n: usize) -> Result<u64, CompactError> {
        let b = self.take(n)?;
        Ok(b.iter().rev().fold(0u64, |acc, &x| acc << 8 | u64::from(x)))
    }
}

/// Sign-extends the low `bits` bits of `v`.
fn signed(v: u64, bits: u32) -> i64 {
    let shift = 64 - bits;
    ((v << shift) as i64) >> shift
}

fn int(v: i64) -> Bytes {
    Bytes::from(v.to_string())
}

/// The entries of a listpack, in order.
pub fn listpack(blob: &[u8]) -> Result<Vec<Bytes>, CompactError> {
    let mut c = Cursor { blob, at: 0 };
    let total = c.le(4)? as usize;
    if total != blob.len() {
        return Err(Malformed);
    }
    let _count = c.le(2)?;
    let mut out = Vec::new();
    loop {
        let start = c.at;
        let enc = c.byte()?;
        let entry = match enc {
            0xff => break,
            e if e & 0x80 == 0 => int(i64::from(e & 0x7f)),
            e if e & 0xc0 == 0x80 => Bytes::copy_from_slice(c.take(usize::from(e & 0x3f))?),
            e if e & 0xe0 == 0xc0 => {
                let v = u64::from(e & 0x1f) << 8 | u64::from(c.byte()?);
                int(signed(v, 13))
            }
            e if e & 0xf0 == 0xe0 => {
                let n = usize::from(e & 0x0f) << 8 | usize::from(c.byte()?);
                Bytes::copy_from_slice(c.take(n)?)
            }
            0xf0 => {
                let n = c.le(4)? as usize;
                Bytes::copy_from_slice(c.take(n)?)
            }
            0xf1 => int(signed(c.le(2)?, 16)),
            0xf2 => int(signed(c.le(3)?, 24)),
            0xf3 => int(signed(c.le(4)?, 32)),
            0xf4 => int(c.le(8)? as i64),
            _ => return Err(Malformed),
        };
        // The back length: the entry's size in 7-bit groups.
        let len = c.at - start;
        let backlen = match len {
            0..=127 => 1,
            128..=16_382 => 2,
            16_383..=2_097_150 => 3,
            2_097_151..=268_435_454 => 4,
            _ => 5,
        };
        c.take(backlen)?;
        out.push(entry);
    }
    if c.at != blob.len() {
        return Err(Malformed);
    }
    Ok(out)
}

/// Builds a listpack as Redis's `lpAppend` does: an element that is a canonical
/// decimal integer is stored as an integer, anything else as a string.
#[derive(Debug, Default)]
pub struct ListpackWriter {
    body: Vec<u8>,
    count: usize,
}

impl ListpackWriter {
    pub fn new() -> ListpackWriter {
        ListpackWriter::default()
    }

    pub fn push(&mut self, element: &[u8]) {
        match canonical_int(element) {
            Some(v) => self.push_int(v),
            None => self.push_str(element),
        }
    }

    pub fn push_int(&mut self, v: i64) {
        let start = self.body.len();
        match v {
            0..=127 => self.body.push(v as u8),
            -4096..=4095 => {
                let u = (v as u64) & 0x1fff;
                self.body.push(0xc0 | (u >> 8) as u8);
                self.body.push(u as u8);
            }
            -32768..=32767 => {
                self.body.push(0xf1);
                self.body.extend_from_slice(&(v as i16).to_le_bytes());
            }
            -8_388_608..=8_388_607 => {
                self.body.push(0xf2);
                self.body.extend_from_slice(&(v as i32).to_le_bytes()[..3]);
            }
            -2_147_483_648..=2_147_483_647 => {
                self.body.push(0xf3);
                self.body.extend_from_slice(&(v as i32).to_le_bytes());
            }
            _ => {
                self.body.push(0xf4);
                self.body.extend_from_slice(&v.to_le_bytes());
            }
        }
        self.backlen(start);
    }

    fn push_str(&mut self, s: &[u8]) {
        let start = self.body.len();
        let n = s.len();
        if n < 64 {
            self.body.push(0x80 | n as u8);
        } else if n < 4096 {
            self.body.push(0xe0 | (n >> 8) as u8);
            self.body.push(n as u8);
        } else {
            self.body.push(0xf0);
            self.body.extend_from_slice(&(n as u32).to_le_bytes());
        }
        self.body.extend_from_slice(s);
        self.backlen(start);
    }

    /// The entry's length after it, in 7-bit groups (`lpEncodeBacklen`).
    fn backlen(&mut self, start: usize) {
        let l = (self.body.len() - start) as u64;
        let groups: &[u32] = match l {
            0..=127 => &[0],
            128..=16_382 => &[7, 0],
            16_383..=2_097_150 => &[14, 7, 0],
            2_097_151..=268_435_454 => &[21, 14, 7, 0],
            _ => &[28, 21, 14, 7, 0],
        };
        for (i, shift) in groups.iter().enumerate() {
            let b = ((l >> shift) & 127) as u8;
            self.body.push(if i == 0 { b } else { b | 128 });
        }
        self.count += 1;
    }

    pub fn finish(self) -> Vec<u8> {
        let total = self.body.len() + 7;
        let mut out = Vec::with_capacity(total);
        out.extend_from_slice(&(total as u32).to_le_bytes());
        out.extend_from_slice(&(self.count.min(65535) as u16).to_le_bytes());
        out.extend_from_slice(&self.body);
        out.push(0xff);
        out
    }
}

/// `string2ll`'s integers: an optional `-`, digits without a leading zero, in range.
fn canonical_int(s: &[u8]) -> Option<i64> {
    let digits = s.strip_prefix(b"-").unwrap_or(s);
    if digits.is_empty()
        || digits.len() > 20
        || !digits.iter().all(u8::is_ascii_digit)
        || (digits[0] == b'0' && (digits.len() > 1 || s.len() > 1))
    {
        return None;
    }
    std::str::from_utf8(s).ok()?.parse().ok()
}

/// The entries of a ziplist, in order.
pub fn ziplist(blob: &[u8]) -> Result<Vec<Bytes>, CompactError> {
    let mut c = Cursor { blob, at: 0 };
    let total = c.le(4)? as usize;
    if total != blob.len() {
        return Err(Malformed);
    }
    let _tail = c.le(4)?;
    let _count = c.le(2)?;
    let mut out = Vec::new();
    loop {
        let prev = c.byte()?;
        if prev == 0xff {
            break;
        }
        if prev == 0xfe {
            c.take(4)?;
        }
        let enc = c.byte()?;
        let entry = match enc >> 6 {
            0 => Bytes::copy_from_slice(c.take(usize::from(enc & 0x3f))?),
            1 => {
                let n = usize::from(enc & 0x3f) << 8 | usize::from(c.byte()?);
                Bytes::copy_from_slice(c.take(n)?)
            }
            2 => {
                let b = c.take(4)?;
                let n = u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize;
                Bytes::copy_from_slice(c.take(n)?)
            }
            _ => match enc {
                0xc0 => int(signed(c.le(2)?, 16)),
                0xd0 => int(signed(c.le(4)?, 32)),
                0xe0 => int(c.le(8)? as i64),
                0xf0 => int(signed(c.le(3)?, 24)),
                0xfe => int(signed(c.le(1)?, 8)),
                0xf1..=0xfd => int(i64::from(enc & 0x0f) - 1),
                _ => return Err(Malformed),
            },
        };
        out.push(entry);
    }
    if c.at != blob.len() {
        return Err(Malformed);
    }
    Ok(out)
}

/// The members of an intset, in order.
pub fn intset(blob: &[u8]) -> Result<Vec<Bytes>, CompactError> {
    let mut c = Cursor { blob, at: 0 };
    let width = c.le(4)? as usize;
    if !matches!(width, 2 | 4 | 8) {
        return Err(Malformed);
    }
    let count = c.le(4)? as usize;
    if count.checked_mul(width) != Some(blob.len() - 8) {
        return Err(Malformed);
    }
    (0..count)
        .map(|_| Ok(int(signed(c.le(width)?, width as u32 * 8))))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A listpack as Redis 7 writes `RPUSH l a 1 -1 300 -70000 <70-byte string>`.
    fn sample_listpack() -> Vec<u8> {
        let long = [b'x'; 70];
        let mut body = Vec::new();
        let mut entry = |e: &[u8]| {
            body.extend_from_slice(e);
            body.push(e.len() as u8);
        };
        entry(&[0x81, b'a']);
        entry(&[0x01]);
        entry(&[0xdf, 0xff]); // 13-bit -1
        entry(&[0xc1, 0x2c]); // 13-bit 300
        entry(&[0xf2, 0x90, 0xee, 0xfe]); // 24-bit -70000
        let mut s = vec![0xe0, 70]; // 12-bit string length
        s.extend_from_slice(&long);
        entry(&s);
        let mut lp = Vec::new();
        lp.extend_from_slice(&((body.len() + 7) as u32).to_le_bytes());
        lp.extend_from_slice(&6u16.to_le_bytes());
        lp.extend_from_slice(&body);
        lp.push(0xff);
        lp
    }

    #[test]
    fn listpack_entries_of_every_encoding() {
        let got = listpack(&sample_listpack()).expect("reads");
        let want: Vec<Bytes> = ["a", "1", "-1", "300", "-70000", &"x".repeat(70)]
            .iter()
            .map(|s| Bytes::copy_from_slice(s.as_bytes()))
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn written_listpacks_read_back() {
        let items: Vec<&[u8]> = vec![
            b"0",
            b"127",
            b"128",
            b"-1",
            b"4095",
            b"-4096",
            b"32767",
            b"-32768",
            b"8388607",
            b"-8388608",
            b"2147483647",
            b"-2147483648",
            b"9223372036854775807",
            b"-9223372036854775808",
            b"01",
            b"+1",
            b"-0",
            b"",
            b"x",
        ];
        let long = vec![b'y'; 5000];
        let mid = vec![b'z'; 200];
        let mut w = ListpackWriter::new();
        for i in &items {
            w.push(i);
        }
        w.push(&mid);
        w.push(&long);
        let got = listpack(&w.finish()).expect("reads");
        let mut want: Vec<Bytes> = items.iter().map(|i| Bytes::copy_from_slice(i)).collect();
        want.push(Bytes::from(mid));
        want.push(Bytes::from(long));
        assert_eq!(got, want);
    }

    #[test]
    fn damaged_blobs_are_errors_never_panics() {
        let lp = sample_listpack();
        for cut in 0..lp.len() {
            assert!(listpack(&lp[..cut]).is_err(), "cut at {cut}");
        }
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..2000 {
            let mut b = lp.clone();
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let i = (seed as usize) % b.len();
            b[i] = (seed >> 32) as u8;
            let _ = listpack(&b);
            let _ = ziplist(&b);
            let _ = intset(&b);
        }
    }

    #[test]
    fn intsets_of_each_width() {
        let mut b = Vec::new();
        b.extend_from_slice(&2u32.to_le_bytes());
        b.extend_from_slice(&2u32.to_le_bytes());
        b.extend_from_slice(&(-5i16).to_le_bytes());
        b.extend_from_slice(&7i16.to_le_bytes());
        assert_eq!(
            intset(&b).unwrap(),
            vec![Bytes::from("-5"), Bytes::from("7")]
        );
        b[4] = 3;
        assert_eq!(intset(&b), Err(Malformed));
    }

    #[test]
    fn ziplist_entries() {
        // prevlen 0, 6-bit string "ab"; prevlen 4, immediate 5; prevlen 2, int16 -2.
        let body = [0x00, 0x02, b'a', b'b', 0x04, 0xf6, 0x02, 0xc0, 0xfe, 0xff];
        let mut zl = Vec::new();
        zl.extend_from_slice(&((body.len() + 11) as u32).to_le_bytes());
        zl.extend_from_slice(&0u32.to_le_bytes());
        zl.extend_from_slice(&3u16.to_le_bytes());
        zl.extend_from_slice(&body);
        zl.push(0xff);
        assert_eq!(
            ziplist(&zl).unwrap(),
            vec![Bytes::from("ab"), Bytes::from("5"), Bytes::from("-2")]
        );
    }
}
