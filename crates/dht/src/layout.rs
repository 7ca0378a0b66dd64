//! The hash table's layout in pool memory. Every structure here is a wire format.
//!
//! ```text
//! root block (the pool superblock's root points here):
//! +------------------+----------------+-----------------------------+
//! | magic "DMCDHT01" | version:u32    | buckets_per_subtable:u32    |  ... to 64 B
//! +------------------+----------------+-----------------------------+
//! | db map: 32 × u8 at byte 16: logical db i is stored as physical db i ^ map[i]  |
//! | (all zero: identity; SWAPDB swaps two entries in one transaction)              |
//! +------------------------------------------------------------------------------+
//! | slot_group_bits:u32 at byte 48: hash slots share a directory in groups of      |
//! | 2^bits consecutive slots, kept by the group's first slot (0: one per slot)     |
//! | adaptive block:u64 at byte 56: the adaptive policy's history counter and       |
//! | regret sums (`table/adaptive.rs`; 0 until an agent first needs it)             |
//! +------------------------------------------------------------------------------+
//! | slot table: 16384 × u64 directory refs (class << 48 | address, 0 = empty) |
//! +----------------------------------------------------------------------------+
//!
//! directory (one per Redis hash slot, extendible hashing):
//! +-------------------------+-------------------------------------------+
//! | global_depth:u64        | 2^global_depth × u64 subtable address     |
//! +-------------------------+-------------------------------------------+
//!
//! subtable: buckets_per_subtable × bucket
//! bucket (128 B, read with one READ):
//! +----------------+-------------+---------------------------------------+
//! | header:u64     | reserved:u64| 7 × slot (word:u64, meta:u64)         |
//! +----------------+-------------+---------------------------------------+
//! header: local_depth:8 | suffix:32 << 8 | hash slot:14 << 40 | EXT << 62 | MOVED << 63
//!
//! access-metadata area (only in a subtable whose headers carry EXT; made for policies
//! that rank keys by more than the slot's metadata, `table/access.rs`): after the
//! buckets, one 24-byte entry per slot, bucket by bucket, at
//! subtable + buckets × 128 + (bucket × 7 + slot) × 24:
//! +-----------------------------------------+-------------+--------------+
//! | insert_ms+1:40 | fp:8 << 40 | freq:16 << 48 | last_ms:u64 | own word:u64 |
//! +-----------------------------------------+-------------+--------------+
//!   (ms since the pool was formatted; fp = the key's fingerprint, so that a slot's
//!   next key never takes an entry over; freq counts accesses, the insert included, up
//!   to 65 535; an insert of 0 = no entry; the key's size is its slot word's)
//!
//! slot word (changed only by its shard's owner):
//!   fp:8 << 56 | size:8 << 48 | pointer:48        (word 0 = empty slot)
//!   or, with size 0, an eviction-history entry (empty to writers and readers):
//!   fp:8 << 56 | 0:8 << 48 | history counter:40 << 8 | experts:7 << 1, with the
//!   evicted key's 64-bit hash in the meta word
//!   size = object head class + 1, | 0x80 when the object is chained
//!   bit 0 of the pointer = LOCK (every size class is a multiple of 4 bytes from an
//!   aligned segment, so a committed pointer has it clear): set while a writer updates the slot (the one-sided single-key
//!   write, or a two-phase commit's prepare), and for good in a retired subtable.
//!   Readers ignore it; writers wait for it.
//! slot meta (eviction metadata):
//!   lfu:8 << 56 | access:16 << 40 | expire:40
//!   expire = ms since the pool was formatted + 1 (0 = no TTL);
//!   access = seconds since the pool was formatted, mod 2^16 (LRU clock);
//!   lfu = Redis's logarithmic frequency counter, at the top so that an FAA carry
//!         falls off the word instead of into another field.
//! ```

use dmc_umo::{Block, GlobalAddr, ObjectRef};

pub const MAGIC: u64 = u64::from_le_bytes(*b"DMCDHT01");
/// Version 2 added slot groups (root byte 48) and eviction-history words (a zero size
/// byte), version 3 subtables with an access-metadata area (the EXT header flag); an
/// older table is upgraded when a client of this version opens it, so that clients
/// that know none of this refuse it.
pub const VERSION: u32 = 3;
/// The oldest version this build opens.
pub const OLDEST_VERSION: u32 = 1;
pub const ROOT_HEADER: u64 = 64;
pub const HASH_SLOTS: usize = 16384;
pub const ROOT_LEN: u64 = ROOT_HEADER + 8 * HASH_SLOTS as u64;

/// Where the db map starts in the root block, and how many databases it can remap.
pub const DB_MAP: u64 = 16;
pub const DB_MAP_LEN: usize = 32;
/// Where the slot-group size is in the root block, and its largest value (groups of
/// 1024 slots: 16 partitions).
pub const SLOT_GROUP_BITS: usize = 48;
pub const MAX_SLOT_GROUP_BITS: u32 = 10;
/// Where the root keeps the address of the adaptive policy's block (0: none yet).
pub const ADAPTIVE_BLOCK: u64 = 56;

pub const BUCKET: u64 = 128;
pub const BUCKET_HEADER: u64 = 16;
pub const SLOT: u64 = 16;
pub const SLOTS_PER_BUCKET: usize = 7;
pub const DIR_HEADER: u64 = 8;
/// Deepest a hash slot's directory may grow (2^20 subtables).
pub const MAX_DEPTH: u32 = 20;

const _: () = assert!(BUCKET_HEADER + SLOT * SLOTS_PER_BUCKET as u64 == BUCKET);
const _: () = assert!(ROOT_HEADER >= 16);
const _: () = assert!(SLOT_GROUP_BITS >= DB_MAP as usize + DB_MAP_LEN);
const _: () = assert!(SLOT_GROUP_BITS + 4 <= ADAPTIVE_BLOCK as usize);
const _: () = assert!(ADAPTIVE_BLOCK + 8 <= ROOT_HEADER);

pub const MOVED: u64 = 1 << 63;
/// A bucket-header flag: the subtable carries an access-metadata area.
pub const EXT: u64 = 1 << 62;
/// Bytes of one slot's access-metadata entry, and of one bucket's.
pub const EXT_ENTRY: u64 = 24;
pub const EXT_BUCKET: u64 = EXT_ENTRY * SLOTS_PER_BUCKET as u64;
/// A slot word's lock bit (see the diagram).
pub const LOCK: u64 = dmc_umo::WORD_LOCK;
const _: () = assert!(LOCK == 1);
const CHAINED: u8 = 0x80;

pub const EXPIRE_BITS: u32 = 40;
pub const EXPIRE_MASK: u64 = (1 << EXPIRE_BITS) - 1;
pub const ACCESS_SHIFT: u32 = 40;
pub const LFU_SHIFT: u32 = 56;

/// A bucket header: which hash slot, depth and suffix its subtable covers.
pub fn header(local_depth: u32, suffix: u64, slot: u16) -> u64 {
    (local_depth as u64) | ((suffix & 0xffff_ffff) << 8) | (((slot as u64) & 0x3fff) << 40)
}

/// Whether a subtable whose buckets carry header `h` has an access-metadata area.
pub fn header_ext(h: u64) -> bool {
    h & EXT != 0
}

/// Bytes of a subtable of `buckets` buckets, with or without an access-metadata area.
pub fn subtable_len(buckets: u64, ext: bool) -> u64 {
    buckets * (BUCKET + if ext { EXT_BUCKET } else { 0 })
}

/// The access-metadata entry of slot `i` of bucket `bucket` in the subtable at `st`.
pub fn ext_entry(st: GlobalAddr, buckets: u64, bucket: u64, i: usize) -> GlobalAddr {
    st.offset_by(buckets * BUCKET + bucket * EXT_BUCKET + i as u64 * EXT_ENTRY)
}

/// A key's access metadata as its entry stores it (see the diagram).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ExtEntry {
    /// ms since the pool was formatted, + 1 (0: no entry).
    pub insert: u64,
    /// The fingerprint of the key the entry is for.
    pub fp: u8,
    pub freq: u64,
    pub last_ms: u64,
    pub word: u64,
}

/// The largest count an entry records.
pub const EXT_MAX_FREQ: u64 = u16::MAX as u64;

impl ExtEntry {
    pub fn encode(&self) -> [u8; EXT_ENTRY as usize] {
        let mut b = [0u8; EXT_ENTRY as usize];
        let first = (self.insert & EXPIRE_MASK)
            | ((self.fp as u64) << 40)
            | (self.freq.min(EXT_MAX_FREQ) << 48);
        b[..8].copy_from_slice(&first.to_le_bytes());
        b[8..16].copy_from_slice(&self.last_ms.to_le_bytes());
        b[16..].copy_from_slice(&self.word.to_le_bytes());
        b
    }

    /// The entry in `b` (24 bytes), or `None` when it holds none.
    pub fn decode(b: &[u8]) -> Option<ExtEntry> {
        if b.len() < EXT_ENTRY as usize {
            return None;
        }
        let first = le64(b, 0);
        let insert = first & EXPIRE_MASK;
        (insert != 0).then(|| ExtEntry {
            insert,
            fp: (first >> 40) as u8,
            freq: first >> 48,
            last_ms: le64(b, 8),
            word: le64(b, 16),
        })
    }
}

pub fn header_depth(h: u64) -> u32 {
    (h & 0xff) as u32
}

pub fn header_suffix(h: u64) -> u64 {
    (h >> 8) & 0xffff_ffff
}

pub fn header_slot(h: u64) -> u16 {
    ((h >> 40) & 0x3fff) as u16
}

/// Whether a bucket with header `h` is live and covers `hash` in hash slot `slot`. The
/// slot check catches a stale directory whose subtable was freed and reused by
/// another hash slot's table.
pub fn header_covers(h: u64, hash: u64, slot: u16) -> bool {
    let d = header_depth(h);
    h & MOVED == 0
        && d <= 32
        && header_slot(h) == slot
        && (hash & ((1u64 << d) - 1)) == header_suffix(h)
}

/// A slot's atomic word.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SlotWord(pub u64);

impl SlotWord {
    pub const EMPTY: SlotWord = SlotWord(0);

    pub fn new(fp: u8, obj: ObjectRef) -> Self {
        let size = (obj.block.class + 1) | if obj.chained { CHAINED } else { 0 };
        SlotWord(((fp as u64) << 56) | ((size as u64) << 48) | obj.block.addr.bits())
    }

    /// No key, locked or not: 0, or an eviction-history entry (a zero size byte; see
    /// `adaptive::history_word`), which writers may take like an empty slot.
    pub fn is_empty(self) -> bool {
        self.0 & !LOCK == 0 || (self.0 >> 48) as u8 == 0
    }

    /// A writer holds the slot (or its subtable was retired).
    pub fn is_locked(self) -> bool {
        self.0 & LOCK != 0
    }

    /// The committed value, without the lock bit.
    pub fn unlocked(self) -> Self {
        SlotWord(self.0 & !LOCK)
    }

    pub fn fp(self) -> u8 {
        (self.0 >> 56) as u8
    }

    /// The object this slot points at, or `None` if the word is empty or malformed.
    pub fn object(self) -> Option<ObjectRef> {
        let size = (self.0 >> 48) as u8;
        let class = (size & !CHAINED).checked_sub(1)?;
        if class as usize >= dmc_umo::classes::NUM_CLASSES {
            return None;
        }
        let addr = GlobalAddr::from_bits(self.0 & !LOCK);
        (!addr.is_null()).then_some(ObjectRef {
            block: Block { addr, class },
            chained: size & CHAINED != 0,
        })
    }
}

/// A slot's metadata word.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SlotMeta(pub u64);

impl SlotMeta {
    pub fn new(expire: u64, access: u16, lfu: u8) -> Self {
        SlotMeta(
            (expire & EXPIRE_MASK)
                | ((access as u64) << ACCESS_SHIFT)
                | ((lfu as u64) << LFU_SHIFT),
        )
    }
    /// Encoded expiry: 0 = none, else ms since the pool epoch + 1.
    pub fn expire(self) -> u64 {
        self.0 & EXPIRE_MASK
    }
    pub fn access(self) -> u16 {
        (self.0 >> ACCESS_SHIFT) as u16
    }
    pub fn lfu(self) -> u8 {
        (self.0 >> LFU_SHIFT) as u8
    }
    pub fn with_expire(self, expire: u64) -> Self {
        SlotMeta((self.0 & !EXPIRE_MASK) | (expire & EXPIRE_MASK))
    }
}

/// Reads a little-endian u64 at `at` (callers index inside blocks they read whole).
pub fn le64(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

/// A directory reference in the slot table: the directory's class and address.
pub fn dir_ref(block: Block) -> u64 {
    ((block.class as u64) << 48) | block.addr.bits()
}

pub fn dir_block(r: u64) -> Option<Block> {
    let addr = GlobalAddr::from_bits(r);
    let class = (r >> 48) as u8;
    (!addr.is_null() && (class as usize) < dmc_umo::classes::NUM_CLASSES)
        .then_some(Block { addr, class })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_pack_and_unpack() {
        let obj = ObjectRef {
            block: Block {
                addr: GlobalAddr::new(3, 4096),
                class: 11,
            },
            chained: true,
        };
        let w = SlotWord::new(0xab, obj);
        assert_eq!(w.fp(), 0xab);
        assert_eq!(w.object(), Some(obj));
        assert!(SlotWord::EMPTY.object().is_none());
        let m = SlotMeta::new(12345, 777, 9);
        assert_eq!((m.expire(), m.access(), m.lfu()), (12345, 777, 9));
        assert_eq!(m.with_expire(0).access(), 777);
        // An FAA carry out of the LFU byte leaves the other fields alone.
        let carried = SlotMeta(
            m.0.wrapping_add(255u64 << LFU_SHIFT)
                .wrapping_add(2u64 << LFU_SHIFT),
        );
        assert_eq!((carried.expire(), carried.access()), (12345, 777));
    }

    #[test]
    fn headers_cover_their_suffix() {
        let h = header(2, 0b10, 77);
        assert!(header_covers(h, 0b1110, 77));
        assert!(
            !header_covers(h, 0b1110, 78),
            "another hash slot's subtable"
        );
        assert!(!header_covers(h, 0b1101, 77));
        assert!(!header_covers(h | MOVED, 0b1110, 77));
        assert!(header_covers(header(0, 0, 16383), 12345, 16383));
        assert!(header_covers(header(2, 0b10, 77) | EXT, 0b1110, 77));
        assert!(header_ext(header(2, 0b10, 77) | EXT));
        assert!(!header_ext(header(2, 0b10, 77)));
    }

    #[test]
    fn access_entries_roundtrip_and_sit_after_the_buckets() {
        let e = ExtEntry {
            insert: 12345,
            fp: 0xa5,
            freq: 7,
            last_ms: 99999,
            word: u64::MAX,
        };
        assert_eq!(ExtEntry::decode(&e.encode()), Some(e));
        assert_eq!(ExtEntry::decode(&[0u8; 24]), None, "an unwritten entry");
        let busy = ExtEntry {
            freq: u64::MAX,
            ..e
        };
        assert_eq!(
            ExtEntry::decode(&busy.encode()).map(|d| d.freq),
            Some(EXT_MAX_FREQ)
        );
        let st = GlobalAddr::new(1, 4096);
        assert_eq!(ext_entry(st, 4, 0, 0), st.offset_by(512));
        assert_eq!(ext_entry(st, 4, 3, 6), st.offset_by(512 + 3 * 168 + 6 * 24));
        assert_eq!(subtable_len(4, true), 512 + 4 * 168);
    }
}
