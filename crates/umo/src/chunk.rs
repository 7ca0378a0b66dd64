//! Chunk trees: a large collection's value is a tree of pool blocks ("chunks") whose
//! root the key's object names. The object owns the tree: freeing the object (a
//! delete, an eviction, an expiry, an overwrite by another value) frees every chunk,
//! while an update that copies only a path of the tree frees only what it replaced.
//! This file fixes the chunk format and the root's place in the value, and frees
//! trees; what a leaf's entries mean is the engine's.
//!
//! ```text
//! chunk (a pool block, at most CHUNK_TARGET bytes unless one entry is larger):
//!  0      4     5      6      8        12       16            24
//! +------+-----+------+------+--------+--------+-------------+------------------+
//! | crc  | ver | kind | n:u16| len:u32| tag:u32| generation:u64     | body (len - 24)  |
//! +------+-----+------+------+--------+--------+-------------+------------------+
//! crc: CRC-32C of bytes 4..len      kind: 0 leaf, 1 inner
//! tag: the owning key's hash (low 32 bits): a block freed and reused by another key
//!      fails it
//! gen: the tree generation that wrote the chunk; a reader of generation G refuses a
//!      chunk newer than G (one freed and reused by a later update of the same key)
//! inner body: n × (count:u64 ‖ child:u64 (class << 48 | address) ‖ key_len:u16 ‖
//!             key: the child's first key, empty in position-ordered trees)
//! leaf body:  n entries, opaque here
//!
//! root, at the start of a typed value (object layout version 2):
//!  0      1        2          10         18        26
//! +------+--------+----------+----------+---------+
//! | TREE | height | root:u64 | count:u64| generation:u64 |  (type-specific fields follow)
//! +------+--------+----------+----------+---------+
//! TREE = 2, optionally | 0x80 (the engine's "big" flag); height 1: the root is a leaf
//! A value may hold up to MAX_ROOTS trees, their roots back to back (a sorted set: one
//! by score, one by member); the object owns every one of them.
//! ```

use crate::addr::GlobalAddr;
use crate::alloc::Block;
use crate::object::ChunkRef;

/// The first byte of a typed value that is a chunk tree's root (without flags).
pub const TREE: u8 = 2;
/// Flags the engine may set in the first byte.
pub const TREE_FLAGS: u8 = 0x80;
pub const CHUNK_VERSION: u8 = 1;
pub const CHUNK_HEADER: usize = 24;
/// Chunks are split past this size (a single entry may make one larger).
pub const CHUNK_TARGET: usize = 4096;
pub const LEAF: u8 = 0;
pub const INNER: u8 = 1;
/// Bytes of a root before any type-specific field.
pub const ROOT_LEN: usize = 26;
/// Most trees one value holds.
pub const MAX_ROOTS: usize = 2;
/// Deepest tree a reader follows (a 255-way tree of height 12 holds any pool).
pub const MAX_HEIGHT: u8 = 12;

const _: () = assert!(CHUNK_HEADER == 4 + 1 + 1 + 2 + 4 + 4 + 8);
const _: () = assert!(ROOT_LEN == 1 + 1 + 8 + 8 + 8);

/// A tree's root as its value records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TreeRoot {
    pub flags: u8,
    pub height: u8,
    pub root: ChunkRef,
    pub count: u64,
    pub generation: u64,
}

fn le64(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

impl TreeRoot {
    /// The root at the start of `value`, if the value is a tree.
    pub fn parse(value: &[u8]) -> Option<TreeRoot> {
        if value.len() < ROOT_LEN || value[0] & !TREE_FLAGS != TREE {
            return None;
        }
        let height = value[1];
        (1..=MAX_HEIGHT).contains(&height).then(|| TreeRoot {
            flags: value[0] & TREE_FLAGS,
            height,
            root: ChunkRef::unpack(le64(value, 2)),
            count: le64(value, 10),
            generation: le64(value, 18),
        })
    }

    /// Every root at the start of `value`, back to back (at most [`MAX_ROOTS`]).
    pub fn parse_all(value: &[u8]) -> Vec<TreeRoot> {
        let mut out = Vec::new();
        while out.len() < MAX_ROOTS
            && let Some(root) = value.get(out.len() * ROOT_LEN..).and_then(TreeRoot::parse)
        {
            out.push(root);
        }
        out
    }

    /// Appends the root's bytes to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(TREE | (self.flags & TREE_FLAGS));
        out.push(self.height);
        out.extend_from_slice(&self.root.pack().to_le_bytes());
        out.extend_from_slice(&self.count.to_le_bytes());
        out.extend_from_slice(&self.generation.to_le_bytes());
    }
}

/// Whether a typed value of this first byte is a tree's root (its object owns chunks).
pub fn is_tree_value(value: &[u8]) -> bool {
    value.first().is_some_and(|b| b & !TREE_FLAGS == TREE)
}

/// A chunk that failed its checks: torn, freed and reused, or newer than the reader.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a collection chunk in the pool is stale or malformed")]
pub struct BadChunk;

/// A verified chunk.
#[derive(Debug, Clone, Copy)]
pub struct Chunk<'a> {
    pub kind: u8,
    pub n: u16,
    pub body: &'a [u8],
}

/// Encodes a chunk.
pub fn encode(kind: u8, n: u16, tag: u32, generation: u64, body: &[u8]) -> Vec<u8> {
    let len = CHUNK_HEADER + body.len();
    let mut out = Vec::with_capacity(len);
    out.extend_from_slice(&[0; 4]);
    out.push(CHUNK_VERSION);
    out.push(kind);
    out.extend_from_slice(&n.to_le_bytes());
    out.extend_from_slice(&(len as u32).to_le_bytes());
    out.extend_from_slice(&tag.to_le_bytes());
    out.extend_from_slice(&generation.to_le_bytes());
    out.extend_from_slice(body);
    let crc = crc32c::crc32c(&out[4..]);
    out[..4].copy_from_slice(&crc.to_le_bytes());
    out
}

/// Parses and verifies a chunk read from a block: checksum, version, length, the
/// owner's `tag` (`None`: any) and a generation no newer than `max_gen`.
pub fn parse(block: &[u8], tag: Option<u32>, max_gen: u64) -> Result<Chunk<'_>, BadChunk> {
    if block.len() < CHUNK_HEADER {
        return Err(BadChunk);
    }
    let len = le32(block, 8) as usize;
    if !(CHUNK_HEADER..=block.len()).contains(&len)
        || block[4] != CHUNK_VERSION
        || crc32c::crc32c(&block[4..len]) != le32(block, 0)
        || tag.is_some_and(|t| t != le32(block, 12))
        || le64(block, 16) > max_gen
    {
        return Err(BadChunk);
    }
    let kind = block[5];
    if kind != LEAF && kind != INNER {
        return Err(BadChunk);
    }
    Ok(Chunk {
        kind,
        n: u16::from_le_bytes([block[6], block[7]]),
        body: &block[CHUNK_HEADER..len],
    })
}

/// A verified chunk's owner tag and generation.
pub fn owner(block: &[u8]) -> (u32, u64) {
    if block.len() < CHUNK_HEADER {
        return (0, 0);
    }
    (le32(block, 12), le64(block, 16))
}

/// One child of an inner chunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InnerEntry<'a> {
    pub count: u64,
    pub child: ChunkRef,
    pub key: &'a [u8],
}

/// Appends an inner entry to a body.
pub fn put_inner(out: &mut Vec<u8>, count: u64, child: ChunkRef, key: &[u8]) {
    out.extend_from_slice(&count.to_le_bytes());
    out.extend_from_slice(&child.pack().to_le_bytes());
    let klen = u16::try_from(key.len()).unwrap_or(u16::MAX);
    out.extend_from_slice(&klen.to_le_bytes());
    out.extend_from_slice(&key[..klen as usize]);
}

/// The entries of an inner chunk's body, or `BadChunk` if they do not fit it.
pub fn inner_entries<'a>(c: &Chunk<'a>) -> Result<Vec<InnerEntry<'a>>, BadChunk> {
    let mut out = Vec::with_capacity(c.n as usize);
    let mut at = 0;
    for _ in 0..c.n {
        let head = c.body.get(at..at + 18).ok_or(BadChunk)?;
        let klen = u16::from_le_bytes([head[16], head[17]]) as usize;
        let key = c.body.get(at + 18..at + 18 + klen).ok_or(BadChunk)?;
        out.push(InnerEntry {
            count: le64(head, 0),
            child: ChunkRef::unpack(le64(head, 8)),
            key,
        });
        at += 18 + klen;
    }
    if at != c.body.len() {
        return Err(BadChunk);
    }
    Ok(out)
}

/// The block a chunk ref names, if its class is real.
pub fn block_of(r: ChunkRef) -> Option<Block> {
    ((r.class as usize) < crate::classes::NUM_CLASSES && !r.addr.is_null()).then_some(Block {
        addr: r.addr,
        class: r.class,
    })
}

/// Whether `addr` is a plausible chunk address (not null).
pub fn plausible(addr: GlobalAddr) -> bool {
    !addr.is_null()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_round_trip_and_refuse_the_wrong_owner_or_a_newer_generation() {
        let mut body = Vec::new();
        let child = ChunkRef {
            addr: GlobalAddr::new(3, 4096),
            class: 7,
        };
        put_inner(&mut body, 42, child, b"k1");
        put_inner(&mut body, 7, child, b"");
        let bytes = encode(INNER, 2, 0xabcd, 5, &body);
        let c = parse(&bytes, Some(0xabcd), 5).unwrap();
        let e = inner_entries(&c).unwrap();
        assert_eq!(e.len(), 2);
        assert_eq!((e[0].count, e[0].child, e[0].key), (42, child, &b"k1"[..]));
        assert!(
            parse(&bytes, Some(0xabce), 5).is_err(),
            "another key's chunk"
        );
        assert!(
            parse(&bytes, Some(0xabcd), 4).is_err(),
            "newer than the reader"
        );
        let mut torn = bytes.clone();
        torn[30] ^= 1;
        assert!(parse(&torn, None, 9).is_err());
    }

    #[test]
    fn roots_round_trip_one_or_two_to_a_value() {
        let r = TreeRoot {
            flags: 0x80,
            height: 3,
            root: ChunkRef {
                addr: GlobalAddr::new(1, 64),
                class: 9,
            },
            count: 1_000_000,
            generation: 12,
        };
        let mut v = Vec::new();
        r.encode(&mut v);
        assert_eq!(v.len(), ROOT_LEN);
        assert!(is_tree_value(&v));
        assert_eq!(TreeRoot::parse(&v), Some(r));
        assert_eq!(TreeRoot::parse(b"\x01\x00\x00"), None);
        assert_eq!(TreeRoot::parse_all(&v), vec![r]);
        let second = TreeRoot {
            flags: 0,
            count: 7,
            ..r
        };
        second.encode(&mut v);
        assert_eq!(TreeRoot::parse_all(&v), vec![r, second]);
        // A third root is not one this format has.
        r.encode(&mut v);
        assert_eq!(TreeRoot::parse_all(&v).len(), MAX_ROOTS);
    }
}
