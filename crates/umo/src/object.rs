//! The object format: how a key and its value sit in pool memory.
//!
//! ```text
//! inline object (header + key + value fit one block):
//!  0      4      8      10   11     12
//! +------+------+------+----+------+---------+-----------+
//! | crc  | vlen | klen | db | kind | key ... | value ... |
//! +------+------+------+----+------+---------+-----------+
//!
//! chained object (larger than the biggest block the allocator hands out):
//! +------+------+------+----+------+---------+---------+--------------------+
//! | crc  | vlen | 0    | db | kind | klen:u32| n:u32   | n × chunk ref:u64  |
//! +------+------+------+----+------+---------+---------+--------------------+
//! chunks hold key ‖ value in order; chunk ref = class << 48 | address
//! ```
//!
//! All integers little-endian. `kind` = layout version:4 | value type:3 | chained:1.
//! Version 1 ([`LAYOUT_VERSION`]) is a string (type bits zero), version 2
//! ([`TYPED_VERSION`]) any [`ValueKind`]: strings keep writing version 1, so an agent
//! older than the typed layout still reads every string, and a collection reads to it
//! as an invalid object rather than as a string of its encoded bytes. `crc` is CRC-32C over everything after it
//! in the head block, then the key, then the value: a reader that races a free and a
//! reuse of the block sees a key or checksum mismatch, never another key's bytes.

use crate::addr::GlobalAddr;

pub const LAYOUT_VERSION: u8 = 1;
/// The layout version of objects whose value is not a string.
pub const TYPED_VERSION: u8 = 2;

/// What a key's value is, recorded in its object's `kind` byte: Redis's data types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(u8)]
pub enum ValueKind {
    #[default]
    String = 0,
    Hash = 1,
    List = 2,
    Set = 3,
    ZSet = 4,
    Stream = 5,
    /// A string stored as a chunk tree of fixed-size pieces (a large string edited in
    /// place: SETBIT, SETRANGE, APPEND touch one piece, not the whole value). Its
    /// Redis type is a string; only the engine's string code reads its pool form.
    ChunkedString = 6,
}

impl ValueKind {
    pub const ALL: [ValueKind; 7] = [
        ValueKind::String,
        ValueKind::Hash,
        ValueKind::List,
        ValueKind::Set,
        ValueKind::ZSet,
        ValueKind::Stream,
        ValueKind::ChunkedString,
    ];

    pub fn from_bits(bits: u8) -> Option<ValueKind> {
        ValueKind::ALL.get(bits as usize).copied()
    }

    /// The name `TYPE` answers.
    pub fn name(self) -> &'static str {
        match self {
            ValueKind::String | ValueKind::ChunkedString => "string",
            ValueKind::Hash => "hash",
            ValueKind::List => "list",
            ValueKind::Set => "set",
            ValueKind::ZSet => "zset",
            ValueKind::Stream => "stream",
        }
    }

    /// The Redis type: a chunked string is a string.
    pub fn redis_type(self) -> ValueKind {
        match self {
            ValueKind::ChunkedString => ValueKind::String,
            k => k,
        }
    }

    /// Whether a change that writes a value of this kind may replace one of `found`
    /// without a type error: the same kind, or a string converted to its chunked form.
    pub fn replaces(self, found: ValueKind) -> bool {
        self == found || (self == ValueKind::ChunkedString && found == ValueKind::String)
    }
}
/// Bytes before the key of an inline object.
pub const HEADER: usize = 12;
/// Bytes before the chunk refs of a chained head.
pub const CHAINED_HEADER: usize = 20;
/// Redis's limit on a string value (`proto-max-bulk-len`), which chaining must reach.
pub const MAX_OBJECT: u64 = 512 << 20;

const KIND_INLINE: u8 = 0;
const KIND_CHAINED: u8 = 1;

const _: () = assert!(HEADER == 4 + 4 + 2 + 1 + 1);
const _: () = assert!(CHAINED_HEADER == HEADER + 4 + 4);

/// Bytes an inline object needs, or `None` if it must be chained (the key is longer
/// than 16 bits can say).
pub fn inline_len(key: &[u8], value_len: usize) -> Option<usize> {
    (key.len() <= u16::MAX as usize).then(|| HEADER + key.len() + value_len)
}

fn kind_byte(value: ValueKind, chained: u8) -> u8 {
    match value {
        ValueKind::String => (LAYOUT_VERSION << 4) | chained,
        typed => (TYPED_VERSION << 4) | ((typed as u8) << 1) | chained,
    }
}

fn crc(head_after_crc: &[u8], key: &[u8], value: &[u8]) -> u32 {
    let c = crc32c::crc32c(head_after_crc);
    let c = crc32c::crc32c_append(c, key);
    crc32c::crc32c_append(c, value)
}

/// The same checksum over bytes already contiguous (header after the crc, key, value):
/// one call instead of three, which matters for small objects.
fn crc_contiguous(after_crc: &[u8]) -> u32 {
    crc32c::crc32c(after_crc)
}

/// Encodes an inline object into `out` (cleared first).
pub fn encode_inline(db: u8, key: &[u8], kind: ValueKind, value: &[u8], out: &mut Vec<u8>) {
    out.clear();
    out.reserve(HEADER + key.len() + value.len());
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&(value.len() as u32).to_le_bytes());
    out.extend_from_slice(&(key.len() as u16).to_le_bytes());
    out.push(db);
    out.push(kind_byte(kind, KIND_INLINE));
    out.extend_from_slice(key);
    out.extend_from_slice(value);
    let c = crc_contiguous(&out[4..]);
    out[..4].copy_from_slice(&c.to_le_bytes());
}

/// A chunk of a chained object: where it is and its class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkRef {
    pub addr: GlobalAddr,
    pub class: u8,
}

impl ChunkRef {
    pub fn pack(self) -> u64 {
        ((self.class as u64) << 48) | self.addr.bits()
    }
    pub fn unpack(v: u64) -> Self {
        ChunkRef {
            addr: GlobalAddr::from_bits(v),
            class: (v >> 48) as u8,
        }
    }
}

/// Encodes the head block of a chained object.
pub fn encode_chained_head(
    db: u8,
    key: &[u8],
    kind: ValueKind,
    value: &[u8],
    chunks: &[ChunkRef],
) -> Vec<u8> {
    let mut out = Vec::with_capacity(CHAINED_HEADER + 8 * chunks.len());
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&(value.len() as u32).to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.push(db);
    out.push(kind_byte(kind, KIND_CHAINED));
    out.extend_from_slice(&(key.len() as u32).to_le_bytes());
    out.extend_from_slice(&(chunks.len() as u32).to_le_bytes());
    for c in chunks {
        out.extend_from_slice(&c.pack().to_le_bytes());
    }
    let c = crc(&out[4..], key, value);
    out[..4].copy_from_slice(&c.to_le_bytes());
    out
}

/// What a head block says, before the key is compared.
#[derive(Debug, PartialEq, Eq)]
pub enum Head {
    /// An inline object whose checksum holds; key and value are at these ranges.
    Inline {
        db: u8,
        kind: ValueKind,
        key: std::ops::Range<usize>,
        value: std::ops::Range<usize>,
    },
    /// A chained object; the checksum is verified once the chunks are read.
    Chained {
        db: u8,
        kind: ValueKind,
        klen: usize,
        vlen: usize,
        chunks: Vec<ChunkRef>,
        crc: u32,
        head_len: usize,
    },
    /// Not a valid object (torn, freed or reused): the reader retries from the index.
    Invalid,
}

fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Parses a head block read from the pool. Never panics, whatever the bytes.
pub fn parse_head(block: &[u8]) -> Head {
    if block.len() < HEADER {
        return Head::Invalid;
    }
    let stored = le32(block, 0);
    let vlen = le32(block, 4) as usize;
    let klen16 = u16::from_le_bytes([block[8], block[9]]) as usize;
    let db = block[10];
    let kind_bits = block[11];
    let value_kind = match kind_bits >> 4 {
        LAYOUT_VERSION if kind_bits & 0xe == 0 => ValueKind::String,
        TYPED_VERSION => match ValueKind::from_bits((kind_bits >> 1) & 7) {
            Some(k) => k,
            None => return Head::Invalid,
        },
        _ => return Head::Invalid,
    };
    let kind = value_kind;
    match kind_bits & 1 {
        KIND_INLINE => {
            let end = HEADER + klen16 + vlen;
            if end > block.len() {
                return Head::Invalid;
            }
            let key = HEADER..HEADER + klen16;
            let value = key.end..end;
            if crc_contiguous(&block[4..end]) != stored {
                return Head::Invalid;
            }
            Head::Inline {
                db,
                kind,
                key,
                value,
            }
        }
        KIND_CHAINED => {
            if block.len() < CHAINED_HEADER {
                return Head::Invalid;
            }
            let klen = le32(block, 12) as usize;
            let n = le32(block, 16) as usize;
            let head_len = CHAINED_HEADER + 8 * n;
            if n == 0 || head_len > block.len() || (klen + vlen) as u64 > MAX_OBJECT + (64 << 10) {
                return Head::Invalid;
            }
            let chunks = (0..n)
                .map(|i| {
                    let at = CHAINED_HEADER + 8 * i;
                    let mut w = [0u8; 8];
                    w.copy_from_slice(&block[at..at + 8]);
                    ChunkRef::unpack(u64::from_le_bytes(w))
                })
                .collect();
            Head::Chained {
                db,
                kind,
                klen,
                vlen,
                chunks,
                crc: stored,
                head_len,
            }
        }
        _ => Head::Invalid,
    }
}

/// Verifies a chained object's checksum once its payload (key ‖ value) is assembled.
pub fn chained_crc_ok(
    head: &[u8],
    head_len: usize,
    stored: u32,
    payload: &[u8],
    klen: usize,
) -> bool {
    head_len <= head.len()
        && klen <= payload.len()
        && crc(&head[4..head_len], &payload[..klen], &payload[klen..]) == stored
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn inline_roundtrip_and_bench_object_is_60_bytes() {
        let mut out = Vec::new();
        encode_inline(
            3,
            b"key:000000000001",
            ValueKind::String,
            &[7u8; 32],
            &mut out,
        );
        assert_eq!(out.len(), 60);
        assert_eq!(out[11], 0x10, "strings keep the version-1 kind byte");
        match parse_head(&out) {
            Head::Inline {
                db,
                kind,
                key,
                value,
            } => {
                assert_eq!((db, kind), (3, ValueKind::String));
                assert_eq!(&out[key], b"key:000000000001");
                assert_eq!(&out[value], &[7u8; 32]);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn contiguous_crc_equals_the_piecewise_definition() {
        let (h, k, v) = (b"12345678", b"some key", b"and a value of some length");
        let mut all = h.to_vec();
        all.extend_from_slice(k);
        all.extend_from_slice(v);
        assert_eq!(crc_contiguous(&all), crc(h, k, v));
    }

    #[test]
    fn chained_head_roundtrip() {
        let chunks = [ChunkRef {
            addr: GlobalAddr::new(2, 4096),
            class: 56,
        }];
        let head = encode_chained_head(0, b"k", ValueKind::Hash, b"value", &chunks);
        match parse_head(&head) {
            Head::Chained {
                kind,
                klen,
                vlen,
                chunks: c,
                crc,
                head_len,
                ..
            } => {
                assert_eq!(kind, ValueKind::Hash);
                assert_eq!((klen, vlen, c.as_slice()), (1, 5, &chunks[..]));
                assert!(chained_crc_ok(&head, head_len, crc, b"kvalue", 1));
                assert!(!chained_crc_ok(&head, head_len, crc, b"kvaluX", 1));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn every_kind_round_trips_and_unknown_kinds_are_invalid() {
        let mut out = Vec::new();
        for kind in ValueKind::ALL {
            encode_inline(1, b"k", kind, b"v", &mut out);
            match parse_head(&out) {
                Head::Inline { kind: k, .. } => assert_eq!(k, kind),
                other => panic!("{other:?}"),
            }
        }
        // Type 7 is no type; a version-1 byte with type bits set is no object.
        for bad in [
            (TYPED_VERSION << 4) | (7 << 1),
            (LAYOUT_VERSION << 4) | (1 << 1),
        ] {
            encode_inline(1, b"k", ValueKind::String, b"v", &mut out);
            out[11] = bad;
            let c = crc_contiguous(&out[4..]);
            out[..4].copy_from_slice(&c.to_le_bytes());
            assert_eq!(parse_head(&out), Head::Invalid);
        }
    }

    proptest! {
        #[test]
        fn any_single_bit_flip_is_detected(key in proptest::collection::vec(any::<u8>(), 0..40),
                                          value in proptest::collection::vec(any::<u8>(), 0..80),
                                          bit in any::<usize>()) {
            let mut out = Vec::new();
            encode_inline(0, &key, ValueKind::String, &value, &mut out);
            let bit = bit % (out.len() * 8);
            out[bit / 8] ^= 1 << (bit % 8);
            match parse_head(&out) {
                Head::Invalid => {}
                // CRC-32C catches every single-bit error, header fields included.
                Head::Inline { .. } => prop_assert!(false, "a flipped bit passed the checksum"),
                // The kind nibble flipped to "chained": the chunk checksum will fail.
                Head::Chained { .. } => {}
            }
        }

        #[test]
        fn parse_never_panics(block in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = parse_head(&block);
        }
    }
}
