//! Redis's RDB encoding, the pieces DUMP-style payloads are made of: lengths (6, 14,
//! 32 and 64 bits), strings (raw, integer-encoded and LZF-compressed), and the
//! footer a payload ends with (the RDB version, two bytes little-endian, then the
//! CRC-64 of everything before it, Redis's Jones polynomial, little-endian). FUNCTION
//! DUMP and RESTORE use them; DMC writes strings raw (any Redis reads them) and reads
//! every encoding Redis writes.
//!
//! Reading never trusts the payload: every length is checked against what is left
//! and against [`MAX_STRING`], so a hostile payload gets an error, not a huge
//! allocation or a panic.

use bytes::Bytes;

/// The RDB version Redis 7.0 writes (and the newest this reads).
pub const VERSION: u16 = 10;
/// The longest string a payload may hold (Redis's `proto-max-bulk-len` default).
pub const MAX_STRING: usize = 512 << 20;

const CRC64: crc::Crc<u64> = crc::Crc::<u64>::new(&crc::CRC_64_REDIS);

/// Why a payload cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RdbError {
    #[error("DUMP payload version or checksum are wrong")]
    Footer,
    #[error("the payload ends inside a value")]
    Truncated,
    #[error("the payload holds an unknown string encoding {0}")]
    Encoding(u8),
    #[error("the payload holds a string longer than {MAX_STRING} bytes")]
    TooLong,
    #[error("the payload's compressed string does not decompress")]
    Lzf,
}

/// Appends Redis's length encoding of `n`.
pub fn write_len(out: &mut Vec<u8>, n: u64) {
    if n < 1 << 6 {
        out.push(n as u8);
    } else if n < 1 << 14 {
        out.push(0x40 | (n >> 8) as u8);
        out.push(n as u8);
    } else if n <= u64::from(u32::MAX) {
        out.push(0x80);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    } else {
        out.push(0x81);
        out.extend_from_slice(&n.to_be_bytes());
    }
}

/// Appends `s` as a raw RDB string.
pub fn write_string(out: &mut Vec<u8>, s: &[u8]) {
    write_len(out, s.len() as u64);
    out.extend_from_slice(s);
}

/// Appends the footer: the RDB version and the CRC-64 of the payload with it.
pub fn finish(mut payload: Vec<u8>) -> Vec<u8> {
    payload.extend_from_slice(&VERSION.to_le_bytes());
    let crc = CRC64.checksum(&payload);
    payload.extend_from_slice(&crc.to_le_bytes());
    payload
}

/// The body of a payload (without its footer) if its version is one this reads and
/// its checksum matches, as Redis's `verifyDumpPayload` checks.
pub fn verify(payload: &[u8]) -> Result<&[u8], RdbError> {
    let Some(body_len) = payload.len().checked_sub(10) else {
        return Err(RdbError::Footer);
    };
    let (body, footer) = payload.split_at(body_len);
    let version = u16::from_le_bytes([footer[0], footer[1]]);
    if version > VERSION {
        return Err(RdbError::Footer);
    }
    let mut crc = [0u8; 8];
    crc.copy_from_slice(&footer[2..]);
    if CRC64.checksum(&payload[..body_len + 2]) != u64::from_le_bytes(crc) {
        return Err(RdbError::Footer);
    }
    Ok(body)
}

/// A cursor over a payload's body.
#[derive(Debug)]
pub struct Reader<'a> {
    rest: &'a [u8],
}

/// A length, or the string encoding it announces instead.
enum Len {
    Plain(u64),
    Encoded(u8),
}

impl<'a> Reader<'a> {
    pub fn new(body: &'a [u8]) -> Self {
        Reader { rest: body }
    }

    pub fn is_empty(&self) -> bool {
        self.rest.is_empty()
    }

    pub fn byte(&mut self) -> Result<u8, RdbError> {
        let (&b, rest) = self.rest.split_first().ok_or(RdbError::Truncated)?;
        self.rest = rest;
        Ok(b)
    }

    /// The next `n` bytes.
    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], RdbError> {
        self.take(n)
    }

    /// The next `N` bytes as an array (a binary double, a fixed-width integer).
    pub fn array<const N: usize>(&mut self) -> Result<[u8; N], RdbError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], RdbError> {
        if n > self.rest.len() {
            return Err(RdbError::Truncated);
        }
        let (head, rest) = self.rest.split_at(n);
        self.rest = rest;
        Ok(head)
    }

    fn len_or_encoding(&mut self) -> Result<Len, RdbError> {
        let first = self.byte()?;
        Ok(match first >> 6 {
            0 => Len::Plain(u64::from(first & 0x3f)),
            1 => Len::Plain(u64::from(first & 0x3f) << 8 | u64::from(self.byte()?)),
            2 if first == 0x80 => {
                let b = self.take(4)?;
                Len::Plain(u64::from(u32::from_be_bytes([b[0], b[1], b[2], b[3]])))
            }
            2 if first == 0x81 => {
                let mut b = [0u8; 8];
                b.copy_from_slice(self.take(8)?);
                Len::Plain(u64::from_be_bytes(b))
            }
            2 => return Err(RdbError::Encoding(first)),
            _ => Len::Encoded(first & 0x3f),
        })
    }

    /// A length (a string encoding here is an error).
    pub fn len(&mut self) -> Result<u64, RdbError> {
        match self.len_or_encoding()? {
            Len::Plain(n) => Ok(n),
            Len::Encoded(e) => Err(RdbError::Encoding(e)),
        }
    }

    /// A bounded length, as a size.
    fn size(&mut self) -> Result<usize, RdbError> {
        let n = self.len()?;
        usize::try_from(n)
            .ok()
            .filter(|n| *n <= MAX_STRING)
            .ok_or(RdbError::TooLong)
    }

    /// A string in any of Redis's encodings.
    pub fn string(&mut self) -> Result<Bytes, RdbError> {
        match self.len_or_encoding()? {
            Len::Plain(n) => {
                let n = usize::try_from(n)
                    .ok()
                    .filter(|n| *n <= MAX_STRING)
                    .ok_or(RdbError::TooLong)?;
                Ok(Bytes::copy_from_slice(self.take(n)?))
            }
            // Integers: 8, 16 and 32 bits, little-endian, printed in decimal.
            Len::Encoded(0) => Ok(Bytes::from((self.byte()? as i8).to_string())),
            Len::Encoded(1) => {
                let b = self.take(2)?;
                Ok(Bytes::from(i16::from_le_bytes([b[0], b[1]]).to_string()))
            }
            Len::Encoded(2) => {
                let b = self.take(4)?;
                Ok(Bytes::from(
                    i32::from_le_bytes([b[0], b[1], b[2], b[3]]).to_string(),
                ))
            }
            Len::Encoded(3) => {
                let compressed = self.size()?;
                let plain = self.size()?;
                let data = self.take(compressed)?;
                // LZF expands at most 264 bytes from 2 (a back reference): a claim
                // past that is a lie, refused before allocating for it.
                if plain > compressed.saturating_mul(132).saturating_add(64) {
                    return Err(RdbError::Lzf);
                }
                if plain == 0 {
                    return Ok(Bytes::new());
                }
                let out = lzf::decompress(data, plain).map_err(|_| RdbError::Lzf)?;
                if out.len() != plain {
                    return Err(RdbError::Lzf);
                }
                Ok(Bytes::from(out))
            }
            Len::Encoded(e) => Err(RdbError::Encoding(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_round_trip_in_each_width() {
        for n in [0u64, 63, 64, 16_383, 16_384, u64::from(u32::MAX), 1 << 40] {
            let mut out = Vec::new();
            write_len(&mut out, n);
            assert_eq!(Reader::new(&out).len(), Ok(n), "{n}");
        }
    }

    /// FUNCTION DUMP of one library from redis-server 7.0.15: an LZF-compressed
    /// string under opcode 245, version 10 and the CRC-64.
    const REDIS_DUMP: &[u8] = b"\xf5\xc3@V@[\x1f#!lua name=mylib\nredis.register_\x0bfunction('my@\x0b\x02', @\x06`\x12\x11keys, args) return`\x0c\x07[1] end)\n\x00\x8dY6\xad\xc6\xe7\x07\xda";

    #[test]
    fn reads_what_redis_writes() {
        let body = verify(REDIS_DUMP).expect("Redis's footer");
        let mut r = Reader::new(body);
        assert_eq!(r.byte(), Ok(0xf5));
        assert_eq!(
            &r.string().expect("the library")[..],
            b"#!lua name=mylib\nredis.register_function('myfunc', function(keys, args) return args[1] end)"
        );
        assert!(r.is_empty());
    }

    #[test]
    fn a_payload_written_here_verifies_and_damage_does_not() {
        let mut body = vec![0xf5];
        write_string(&mut body, b"hello");
        let payload = finish(body.clone());
        assert_eq!(verify(&payload), Ok(&body[..]));
        for at in 0..payload.len() {
            let mut bad = payload.clone();
            bad[at] ^= 1;
            assert!(verify(&bad).is_err(), "a flipped byte at {at}");
        }
        assert_eq!(verify(b"short"), Err(RdbError::Footer));
    }

    #[test]
    fn hostile_lengths_are_refused_before_allocating() {
        // A 64-bit length far past the payload, and an LZF claim of 2^40 bytes.
        let mut huge = Vec::new();
        write_len(&mut huge, 1 << 40);
        assert_eq!(Reader::new(&huge).string(), Err(RdbError::TooLong));
        let lzf = [0xc3, 0x01, 0x81, 0, 0, 1, 0, 0, 0, 0, 0, 0];
        assert_eq!(Reader::new(&lzf).string(), Err(RdbError::TooLong));
        assert_eq!(
            Reader::new(&[0x05, b'a']).string(),
            Err(RdbError::Truncated)
        );
        assert_eq!(
            Reader::new(&[0xc0, 0xfe]).string().as_deref(),
            Ok(&b"-2"[..])
        );
    }
}
