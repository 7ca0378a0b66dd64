//! Global addresses: a region and an offset packed into 48 bits.
//!
//! ```text
//!  47        32 31                              0
//! +------------+---------------------------------+
//! |  region    |            offset               |
//! +------------+---------------------------------+
//! ```
//!
//! 48 bits is what a hash-table slot has room for. Region 0 is never allocated, so the
//! all-zero address is null.

use dmc_verbs::RegionId;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct GlobalAddr(u64);

impl GlobalAddr {
    pub const NULL: GlobalAddr = GlobalAddr(0);
    pub const BITS: u32 = 48;
    pub const MAX_OFFSET: u64 = u32::MAX as u64;

    pub fn new(region: RegionId, offset: u64) -> Self {
        debug_assert!(offset <= Self::MAX_OFFSET, "offset {offset} beyond 32 bits");
        GlobalAddr(((region as u64) << 32) | (offset & Self::MAX_OFFSET))
    }

    /// Rebuilds an address from its 48-bit packed form (higher bits ignored).
    pub fn from_bits(bits: u64) -> Self {
        GlobalAddr(bits & ((1 << Self::BITS) - 1))
    }

    pub fn bits(self) -> u64 {
        self.0
    }

    pub fn region(self) -> RegionId {
        (self.0 >> 32) as RegionId
    }

    pub fn offset(self) -> u64 {
        self.0 & Self::MAX_OFFSET
    }

    pub fn is_null(self) -> bool {
        self.0 == 0
    }

    /// The address `delta` bytes further into the same region.
    pub fn offset_by(self, delta: u64) -> Self {
        GlobalAddr::new(self.region(), self.offset() + delta)
    }
}

impl std::fmt::Display for GlobalAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{:#x}", self.region(), self.offset())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packs_into_48_bits() {
        let a = GlobalAddr::new(0xffff, 0xffff_ffff);
        assert_eq!(a.bits() >> 48, 0);
        assert_eq!((a.region(), a.offset()), (0xffff, 0xffff_ffff));
        assert_eq!(GlobalAddr::from_bits(a.bits() | (0xab << 48)), a);
        assert!(GlobalAddr::NULL.is_null());
        assert_eq!(GlobalAddr::new(3, 8).offset_by(8), GlobalAddr::new(3, 16));
    }
}
