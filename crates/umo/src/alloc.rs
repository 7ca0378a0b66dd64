//! The client side of the three-level allocator: segments of the pool's regions are
//! claimed by this client and carved into blocks of one size class each.
//!
//! Level 1 (regions) belongs to whoever grows the pool ([`crate::pool`]); this module
//! owns levels 2 and 3. It is plain bookkeeping in DRAM, with no I/O: claiming a segment
//! returns the segment-table word the pool must write to every copy of the region.
//!
//! Freed blocks wait in a limbo queue for a grace period before reuse, longer than any
//! read in flight, so a reader that found a pointer just before the free still reads the
//! old object (and a slower one fails its key/checksum check instead of reading another
//! key's bytes).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use dmc_verbs::RegionId;

use crate::addr::GlobalAddr;
use crate::classes::{self, NUM_CLASSES};
use crate::layout;

/// An allocated block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Block {
    pub addr: GlobalAddr,
    pub class: u8,
}

impl Block {
    pub fn size(&self) -> u32 {
        classes::size(self.class)
    }
}

#[derive(Default)]
struct ClassState {
    free: Vec<GlobalAddr>,
    /// Next never-used block of the class's current segment, and how many remain.
    bump: Option<(GlobalAddr, u64)>,
}

/// What the allocator needs before it can satisfy a request.
#[derive(Debug, PartialEq, Eq)]
pub enum Need {
    /// A new region: no unclaimed segment is left.
    Region,
}

/// A segment this client claimed for a class; the pool persists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Claimed {
    pub region: RegionId,
    pub entry_offset: u64,
    pub entry: u64,
}

/// Counters of allocated memory.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllocStats {
    /// Bytes in live blocks (class sizes), limbo included.
    pub allocated: u64,
    pub live_blocks: u64,
    pub segments: u64,
    pub free_segments: u64,
    pub limbo_blocks: u64,
    /// Bytes of freed blocks still in their grace period (part of `allocated`).
    pub limbo_bytes: u64,
}

impl AllocStats {
    /// Bytes of blocks in use: allocated minus those waiting out their grace period.
    pub fn live(&self) -> u64 {
        self.allocated - self.limbo_bytes
    }
}

pub struct Allocator {
    owner: u32,
    segment_size: u64,
    max_class: u32,
    classes: Vec<ClassState>,
    free_segments: VecDeque<(RegionId, u64)>,
    limbo: VecDeque<(Instant, Block)>,
    grace: Duration,
    stats: AllocStats,
}

impl Allocator {
    pub fn new(owner: u32, segment_size: u64, grace: Duration) -> Self {
        // The biggest class must fit a segment several times over, or a segment of it
        // wastes most of its bytes.
        let max_class = classes::sizes()
            .iter()
            .copied()
            .filter(|&s| s as u64 * 4 <= segment_size)
            .max()
            .unwrap_or(classes::sizes()[0]);
        Allocator {
            owner,
            segment_size,
            max_class,
            classes: (0..NUM_CLASSES).map(|_| ClassState::default()).collect(),
            free_segments: VecDeque::new(),
            limbo: VecDeque::new(),
            grace,
            stats: AllocStats::default(),
        }
    }

    /// The largest block this allocator hands out; bigger objects chain blocks.
    pub fn max_block(&self) -> u32 {
        self.max_class
    }

    pub fn stats(&self) -> AllocStats {
        let mut s = self.stats.clone();
        s.free_segments = self.free_segments.len() as u64;
        s.limbo_blocks = self.limbo.len() as u64;
        s
    }

    /// Makes segments of a region available; `claimed` says which are taken already.
    pub fn add_region(
        &mut self,
        region: RegionId,
        region_size: u64,
        claimed: impl Fn(u64) -> bool,
    ) {
        for i in 0..layout::segments_per_region(region_size, self.segment_size) {
            if !claimed(i) {
                self.free_segments.push_back((region, i));
            }
        }
    }

    /// Allocates a block of at least `len` bytes (8-byte aligned if `aligned`). On
    /// success also returns a segment claim to persist, if one was made.
    pub fn alloc(
        &mut self,
        len: u64,
        aligned: bool,
        now: Instant,
    ) -> Result<(Block, Option<Claimed>), Need> {
        let Some(class) = classes::best_fit(len, self.max_class, aligned) else {
            // Callers chain objects longer than max_block(); anything else is a bug
            // upstream, surfaced as "need more memory" rather than a panic.
            return Err(Need::Region);
        };
        self.reclaim(now);
        let state = &mut self.classes[class as usize];
        let size = classes::size(class) as u64;
        if let Some(addr) = state.free.pop() {
            return Ok((self.count(Block { addr, class }), None));
        }
        let mut claim = None;
        if state.bump.is_none_or(|(_, left)| left == 0) {
            let (region, index) = self.free_segments.pop_front().ok_or(Need::Region)?;
            let base = GlobalAddr::new(region, layout::segment_offset(index, self.segment_size));
            state.bump = Some((base, self.segment_size / size));
            self.stats.segments += 1;
            claim = Some(Claimed {
                region,
                entry_offset: layout::segment_entry_offset(index),
                entry: layout::segment_entry(class, self.owner),
            });
        }
        let state = &mut self.classes[class as usize];
        let (addr, left) = state.bump.expect("a segment was just claimed");
        state.bump = Some((addr.offset_by(size), left - 1));
        Ok((self.count(Block { addr, class }), claim))
    }

    /// Undoes the allocation of `block`, the first of a segment whose claim another
    /// client won: the segment is dropped, not reused.
    pub fn lost_claim(&mut self, block: Block) {
        self.classes[block.class as usize].bump = None;
        self.stats.segments -= 1;
        self.stats.allocated -= block.size() as u64;
        self.stats.live_blocks -= 1;
    }

    fn count(&mut self, b: Block) -> Block {
        self.stats.allocated += b.size() as u64;
        self.stats.live_blocks += 1;
        b
    }

    /// Frees a block; it is reused only after the grace period.
    pub fn free(&mut self, block: Block, now: Instant) {
        self.stats.limbo_bytes += block.size() as u64;
        self.limbo.push_back((now, block));
    }

    /// Returns blocks whose grace period has passed to their free lists.
    pub fn reclaim(&mut self, now: Instant) {
        while let Some((at, b)) = self.limbo.front().copied() {
            if now.duration_since(at) < self.grace {
                break;
            }
            self.limbo.pop_front();
            self.stats.allocated -= b.size() as u64;
            self.stats.limbo_bytes -= b.size() as u64;
            self.stats.live_blocks -= 1;
            self.classes[b.class as usize].free.push(b.addr);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashSet;

    const SEG: u64 = 1 << 20;

    fn alloc_with_region(
        a: &mut Allocator,
        len: u64,
        now: Instant,
        next_region: &mut u16,
    ) -> Block {
        loop {
            match a.alloc(len, false, now) {
                Ok((b, _)) => return b,
                Err(Need::Region) => {
                    a.add_region(*next_region, 4 * SEG + layout::REGION_HEADER, |_| false);
                    *next_region += 1;
                }
            }
        }
    }

    #[test]
    fn blocks_are_reused_only_after_grace() {
        let t0 = Instant::now();
        let mut a = Allocator::new(1, SEG, Duration::from_secs(1));
        a.add_region(1, 2 * SEG + layout::REGION_HEADER, |_| false);
        let (b1, claim) = a.alloc(60, false, t0).unwrap();
        assert!(
            claim.is_some(),
            "the first block of a class claims a segment"
        );
        a.free(b1, t0);
        let (b2, claim) = a.alloc(60, false, t0).unwrap();
        assert!(claim.is_none());
        assert_ne!(b1, b2, "no reuse inside the grace period");
        let (b3, _) = a.alloc(60, false, t0 + Duration::from_secs(2)).unwrap();
        assert_eq!(b3, b1, "reuse after the grace period");
    }

    #[test]
    fn aligned_requests_get_aligned_blocks() {
        let t0 = Instant::now();
        let mut a = Allocator::new(1, SEG, Duration::ZERO);
        a.add_region(1, SEG + layout::REGION_HEADER, |_| false);
        for _ in 0..5 {
            let (b, _) = a.alloc(20, true, t0).unwrap();
            assert_eq!(b.addr.offset() % 8, 0);
        }
    }

    #[test]
    fn out_of_segments_asks_for_a_region() {
        let t0 = Instant::now();
        let mut a = Allocator::new(1, SEG, Duration::ZERO);
        assert_eq!(a.alloc(16, false, t0).err(), Some(Need::Region));
        assert_eq!(a.max_block(), 235_000);
    }

    proptest! {
        /// Against a model: live blocks never overlap, stay inside their segment, and the
        /// allocated-bytes counter equals the sum of live block sizes.
        #[test]
        fn live_blocks_never_overlap(ops in proptest::collection::vec((any::<bool>(), 1u64..20_000), 1..300)) {
            let t0 = Instant::now();
            let mut a = Allocator::new(1, SEG, Duration::ZERO);
            let mut next_region = 1u16;
            let mut live: Vec<Block> = Vec::new();
            for (is_alloc, len) in ops {
                if is_alloc || live.is_empty() {
                    let b = alloc_with_region(&mut a, len, t0, &mut next_region);
                    prop_assert!(b.size() as u64 >= len);
                    let seg_off = (b.addr.offset() - layout::REGION_HEADER) % SEG;
                    prop_assert!(seg_off + b.size() as u64 <= SEG, "block crosses its segment");
                    live.push(b);
                } else {
                    let b = live.swap_remove(len as usize % live.len());
                    a.free(b, t0);
                    a.reclaim(t0);
                }
                let total: u64 = live.iter().map(|b| b.size() as u64).sum();
                prop_assert_eq!(a.stats().allocated, total);
            }
            let mut spans: Vec<(u64, u64)> = live.iter().map(|b| (b.addr.bits(), b.addr.bits() + b.size() as u64)).collect();
            spans.sort();
            for w in spans.windows(2) {
                prop_assert!(w[0].1 <= w[1].0, "overlap {:?}", w);
            }
            let uniq: HashSet<_> = live.iter().map(|b| b.addr).collect();
            prop_assert_eq!(uniq.len(), live.len());
        }
    }
}
