//! The compact encoding of a collection's value in the pool: one object holding every
//! element, rewritten out of place by each update (Redis's listpack, for the same
//! small shapes). It is a wire format: every agent of an instance reads what the owner
//! wrote, so it carries an encoding byte and is parsed without trusting a byte.
//!
//! ```text
//! value of a hash, list, set or zset key (object layout version 2, kind ≠ string):
//!  0     1           5
//! +-----+-----------+--------------------------------------------------+
//! | enc | count:u32 | count × entry, an entry = 1 element (list, set)   |
//! |     |           | or 2 (hash: field, value; zset: member, score)    |
//! +-----+-----------+--------------------------------------------------+
//! element: len:varint (LEB128, ≤ 5 bytes) ‖ len bytes
//! enc: PACKED (1) | BIG (0x80) once the collection outgrew Redis's listpack limits
//!      (kept when it shrinks again, as Redis never converts back)
//! hash: fields in insertion order      list: head to tail
//! set:  members in insertion order     zset: by (score, member); score = f64 LE (8 bytes)
//! ```
//!
//! [`Packed::parse`] checks the header; [`Elements`] walks the entries and stops with
//! [`Corrupt`] at the first element that does not fit, so a torn or foreign value is
//! an error, never a panic or an out-of-bounds read.

use bytes::Bytes;

/// The packed encoding.
pub const PACKED: u8 = 1;
/// Flag: the collection passed the listpack limits (OBJECT ENCODING names the big form).
pub const BIG: u8 = 0x80;
/// Bytes before the first entry.
pub const HEADER: usize = 5;

const _: () = assert!(HEADER == 1 + 4);

/// A value that is not a well-formed packed collection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a collection's value in the pool is malformed")]
pub struct Corrupt;

/// A parsed header over the value's bytes.
#[derive(Debug, Clone)]
pub struct Packed {
    pub big: bool,
    /// Entries (a hash's fields, a zset's members, a list's or set's elements).
    pub count: u32,
    body: Bytes,
}

impl Packed {
    pub fn parse(value: &Bytes) -> Result<Packed, Corrupt> {
        let (&enc, rest) = value.split_first().ok_or(Corrupt)?;
        if enc & !BIG != PACKED || rest.len() < 4 {
            return Err(Corrupt);
        }
        let count = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]);
        Ok(Packed {
            big: enc & BIG != 0,
            count,
            body: value.slice(HEADER..),
        })
    }

    /// The elements in order (entries of two elements come as two).
    pub fn elements(&self) -> Elements {
        Elements {
            body: self.body.clone(),
            at: 0,
        }
    }

    /// The elements, all of them, or [`Corrupt`].
    pub fn collect(&self, per_entry: usize) -> Result<Vec<Bytes>, Corrupt> {
        let want = self.count as usize * per_entry;
        let mut out = Vec::with_capacity(want.min(1 << 16));
        for e in self.elements() {
            out.push(e?);
        }
        if out.len() != want {
            return Err(Corrupt);
        }
        Ok(out)
    }
}

/// The elements of a packed value, each a slice of it (no copy).
pub struct Elements {
    body: Bytes,
    at: usize,
}

impl Iterator for Elements {
    type Item = Result<Bytes, Corrupt>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.at >= self.body.len() {
            return None;
        }
        let step = read_varint(&self.body[self.at..]).and_then(|(len, used)| {
            let start = self.at + used;
            let end = start.checked_add(len as usize).ok_or(Corrupt)?;
            if end > self.body.len() {
                return Err(Corrupt);
            }
            Ok((start, end))
        });
        match step {
            Ok((start, end)) => {
                self.at = end;
                Some(Ok(self.body.slice(start..end)))
            }
            Err(e) => {
                self.at = self.body.len();
                Some(Err(e))
            }
        }
    }
}

fn read_varint(b: &[u8]) -> Result<(u32, usize), Corrupt> {
    let mut v: u32 = 0;
    for (i, &byte) in b.iter().take(5).enumerate() {
        v |= ((byte & 0x7f) as u32)
            .checked_shl(7 * i as u32)
            .ok_or(Corrupt)?;
        if byte & 0x80 == 0 {
            return Ok((v, i + 1));
        }
    }
    Err(Corrupt)
}

/// Builds a packed value.
pub struct Writer {
    out: Vec<u8>,
    entries: u32,
}

impl Writer {
    pub fn new(big: bool, capacity: usize) -> Writer {
        let mut out = Vec::with_capacity(HEADER + capacity);
        out.push(PACKED | if big { BIG } else { 0 });
        out.extend_from_slice(&[0; 4]);
        Writer { out, entries: 0 }
    }

    /// Appends one element (call [`entry`](Self::entry) once per entry).
    pub fn element(&mut self, bytes: &[u8]) {
        let mut len = bytes.len() as u32;
        loop {
            let low = (len & 0x7f) as u8;
            len >>= 7;
            if len == 0 {
                self.out.push(low);
                break;
            }
            self.out.push(low | 0x80);
        }
        self.out.extend_from_slice(bytes);
    }

    /// Counts one entry.
    pub fn entry(&mut self) {
        self.entries += 1;
    }

    pub fn finish(mut self) -> Vec<u8> {
        self.out[1..HEADER].copy_from_slice(&self.entries.to_le_bytes());
        self.out
    }
}

/// Bytes an element of `len` bytes takes.
pub fn element_len(len: usize) -> usize {
    len + match len {
        0..=0x7f => 1,
        0x80..=0x3fff => 2,
        0x4000..=0x1f_ffff => 3,
        0x20_0000..=0xfff_ffff => 4,
        _ => 5,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_hash_of_two_fields_is_laid_out_as_the_diagram_says() {
        let mut w = Writer::new(false, 0);
        for (f, v) in [(&b"a"[..], &b"1"[..]), (b"bb", b"")] {
            w.element(f);
            w.element(v);
            w.entry();
        }
        let bytes = w.finish();
        assert_eq!(bytes, b"\x01\x02\x00\x00\x00\x01a\x011\x02bb\x00");
        let p = Packed::parse(&Bytes::from(bytes)).unwrap();
        assert_eq!((p.big, p.count), (false, 2));
        let all = p.collect(2).unwrap();
        assert_eq!(all, vec!["a", "1", "bb", ""]);
    }

    #[test]
    fn long_elements_take_multi_byte_lengths() {
        let long = vec![7u8; 20_000];
        let mut w = Writer::new(true, 0);
        w.element(&long);
        w.entry();
        let bytes = w.finish();
        assert_eq!(bytes.len(), HEADER + element_len(long.len()));
        let p = Packed::parse(&Bytes::from(bytes)).unwrap();
        assert!(p.big);
        assert_eq!(p.collect(1).unwrap()[0], long);
    }

    #[test]
    fn malformed_values_are_corrupt() {
        for bad in [
            &b""[..],
            b"\x01\x00",
            b"\x02\x00\x00\x00\x00",
            b"\x01\x01\x00\x00\x00\x05ab",
        ] {
            let parsed = Packed::parse(&Bytes::copy_from_slice(bad));
            assert!(
                parsed.is_err() || parsed.unwrap().collect(1).is_err(),
                "{bad:?}"
            );
        }
    }

    proptest! {
        #[test]
        fn elements_round_trip(elems in proptest::collection::vec(
            proptest::collection::vec(any::<u8>(), 0..300), 0..20)) {
            let mut w = Writer::new(false, 0);
            for e in &elems {
                w.element(e);
                w.entry();
            }
            let p = Packed::parse(&Bytes::from(w.finish())).unwrap();
            let got: Vec<Vec<u8>> = p.collect(1).unwrap().iter().map(|b| b.to_vec()).collect();
            prop_assert_eq!(got, elems);
        }

        #[test]
        fn parsing_any_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            if let Ok(p) = Packed::parse(&Bytes::from(bytes)) {
                for e in p.elements() {
                    let _ = e;
                }
            }
        }
    }
}
