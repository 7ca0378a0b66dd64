//! The pool's own metadata layout: the superblock (in region 1, or the region a pool is
//! configured with: one per cache instance) and the segment table at
//! the head of every region.
//!
//! ```text
//! every region:
//! 0                  32 KiB                      64 KiB
//! +------------------+---------------------------+----------------------------------+
//! | superblock       | segment table             | segment 0 | segment 1 | ...      |
//! | (its region only)| u64 per segment           |                                  |
//! +------------------+---------------------------+----------------------------------+
//!
//! superblock:
//!  0 magic "DMCPOOL1"   8 version:u32   12 replicas:u32   16 region_size:u64
//! 24 segment_size:u64  32 created_unix_ms:u64  40 root:u64 (hash-table root, 0 = none)
//! 48 used:u64 (bytes of live blocks, every client's fetch-and-adds)  56 reserved .. 64
//! 64 region table: 16 B per region id 1.. =
//!                         primary:u32 backup:u32 backup:u32 flags:u32 (bit 0 present,
//!                         bits 8..15 backup count)
//!
//! segment table entry: state:u8 (0 free, 1 slab) | class:u8 << 8 | owner:u32 << 32
//! ```
//!
//! Region 1 is replicated like any other region, so the superblock survives the loss of
//! `r-1` memory nodes. Every copy is written by the pool client that changes it.

use dmc_verbs::{NodeId, RegionId};

use crate::error::UmoError;

pub const LAYOUT_VERSION: u32 = 1;
pub const MAGIC: u64 = u64::from_le_bytes(*b"DMCPOOL1");
/// The region holding the superblock.
pub const SUPER_REGION: RegionId = 1;

pub const SB_ROOT: u64 = 40;
/// The pool-wide count of bytes in live blocks, kept by every client's fetch-and-adds.
pub const SB_USED: u64 = 48;
pub const SB_LEN: usize = 64;
pub const REGION_TABLE: u64 = 64;
pub const REGION_ENTRY: u64 = 16;
pub const SEGMENT_TABLE: u64 = 32 << 10;
pub const REGION_HEADER: u64 = 64 << 10;
pub const MAX_BACKUPS: usize = 2;
/// Region ids the superblock can describe.
pub const MAX_REGIONS: u64 = (SEGMENT_TABLE - REGION_TABLE) / REGION_ENTRY;
/// Segments a region can have.
pub const MAX_SEGMENTS: u64 = (REGION_HEADER - SEGMENT_TABLE) / 8;

const _: () = assert!(REGION_TABLE >= SB_LEN as u64);
const _: () = assert!(MAX_REGIONS >= 2000);
const _: () = assert!(MAX_SEGMENTS == 4096);

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Superblock {
    pub replicas: u32,
    pub region_size: u64,
    pub segment_size: u64,
    pub created_ms: u64,
    pub root: u64,
}

impl Superblock {
    pub fn encode(&self) -> [u8; SB_LEN] {
        let mut b = [0u8; SB_LEN];
        b[0..8].copy_from_slice(&MAGIC.to_le_bytes());
        b[8..12].copy_from_slice(&LAYOUT_VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&self.replicas.to_le_bytes());
        b[16..24].copy_from_slice(&self.region_size.to_le_bytes());
        b[24..32].copy_from_slice(&self.segment_size.to_le_bytes());
        b[32..40].copy_from_slice(&self.created_ms.to_le_bytes());
        b[40..48].copy_from_slice(&self.root.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8; SB_LEN]) -> Result<Self, UmoError> {
        let u64_at = |at: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[at..at + 8]);
            u64::from_le_bytes(w)
        };
        let u32_at = |at: usize| u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        if u64_at(0) != MAGIC {
            return Err(UmoError::Layout("region 1 holds no DMC superblock".into()));
        }
        if u32_at(8) != LAYOUT_VERSION {
            return Err(UmoError::Layout(format!(
                "pool layout version {} is not supported (this build: {LAYOUT_VERSION})",
                u32_at(8)
            )));
        }
        Ok(Superblock {
            replicas: u32_at(12),
            region_size: u64_at(16),
            segment_size: u64_at(24),
            created_ms: u64_at(32),
            root: u64_at(40),
        })
    }
}

/// Where a region's copies live, as the superblock records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegionRecord {
    pub primary: NodeId,
    pub backups: Vec<NodeId>,
}

impl RegionRecord {
    pub fn offset(region: RegionId) -> u64 {
        REGION_TABLE + (region as u64 - 1) * REGION_ENTRY
    }

    pub fn encode(&self) -> [u8; REGION_ENTRY as usize] {
        let mut b = [0u8; REGION_ENTRY as usize];
        b[0..4].copy_from_slice(&self.primary.to_le_bytes());
        for (i, n) in self.backups.iter().take(MAX_BACKUPS).enumerate() {
            b[4 + 4 * i..8 + 4 * i].copy_from_slice(&n.to_le_bytes());
        }
        let flags = 1u32 | ((self.backups.len().min(MAX_BACKUPS) as u32) << 8);
        b[12..16].copy_from_slice(&flags.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8]) -> Option<Self> {
        let u32_at = |at: usize| u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        let flags = u32_at(12);
        if flags & 1 == 0 {
            return None;
        }
        let n = ((flags >> 8) & 0xff) as usize;
        Some(RegionRecord {
            primary: u32_at(0),
            backups: (0..n.min(MAX_BACKUPS)).map(|i| u32_at(4 + 4 * i)).collect(),
        })
    }
}

pub fn segment_entry(class: u8, owner: u32) -> u64 {
    1 | ((class as u64) << 8) | ((owner as u64) << 32)
}

pub fn segment_entry_offset(index: u64) -> u64 {
    SEGMENT_TABLE + index * 8
}

/// Offset of segment `index` in its region.
pub fn segment_offset(index: u64, segment_size: u64) -> u64 {
    REGION_HEADER + index * segment_size
}

/// How many segments a region of `region_size` holds.
pub fn segments_per_region(region_size: u64, segment_size: u64) -> u64 {
    (region_size.saturating_sub(REGION_HEADER) / segment_size).min(MAX_SEGMENTS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn superblock_and_records_roundtrip() {
        let sb = Superblock {
            replicas: 2,
            region_size: 1 << 30,
            segment_size: 16 << 20,
            created_ms: 123,
            root: 0,
        };
        assert_eq!(Superblock::decode(&sb.encode()).unwrap(), sb);
        assert!(Superblock::decode(&[0; SB_LEN]).is_err());
        let r = RegionRecord {
            primary: 4,
            backups: vec![5, 6],
        };
        assert_eq!(RegionRecord::decode(&r.encode()), Some(r));
        assert_eq!(RegionRecord::decode(&[0; 16]), None);
        assert_eq!(segments_per_region(1 << 30, 16 << 20), 63);
    }
}
