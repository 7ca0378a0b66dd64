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
//!
//! A segment whose blocks are all free again is taken back from its size class and
//! reused for whichever class needs one next (it stays claimed by this client), so
//! memory freed by values of one size serves values of another: a pool at its
//! maxmemory does not run out of segments for a class while others sit empty.

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
    /// Blocks back from limbo, handed out from the top (the last): most recently
    /// returned first, so a segment whose blocks sit low in the list can empty, except
    /// that a block coming back goes under the top one. The block the next allocation
    /// takes then stays the same as more come back, so it can be loaded ahead of its
    /// use ([`Allocator::next_block`]).
    free: Vec<GlobalAddr>,
    /// Next never-used block of the class's current segment, and how many remain.
    bump: Option<(GlobalAddr, u64)>,
    /// A fresh segment whose claim is in flight (its first block is handed out): no
    /// other block of it may be used until the claim is confirmed, since another
    /// client may win it.
    claiming: Option<(GlobalAddr, u64)>,
    /// Blocks of the class waiting out the grace period.
    limbo: u32,
}

/// What the allocator needs before it can satisfy a request.
#[derive(Debug, PartialEq, Eq)]
pub enum Need {
    /// A new region: no unclaimed segment is left.
    Region,
    /// The class's next segment is being claimed: try again in a moment.
    Claiming,
    /// The pool cannot grow and only one segment is spare, which is kept for a class
    /// with nothing in limbo: this class's blocks in limbo are free within the grace
    /// period, so try again in a moment.
    Reclaiming,
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

/// A segment this client carved, and how many of its blocks are out (allocated or in
/// limbo).
struct Carved {
    class: u8,
    out: u32,
}

pub struct Allocator {
    owner: u32,
    carved: hashbrown::HashMap<(RegionId, u64), Carved>,
    /// Segments this client claimed that are empty again (no claim needed to reuse).
    released: VecDeque<(RegionId, u64)>,
    /// Regions being returned to the pool: nothing is allocated in them any more.
    retired: hashbrown::HashSet<RegionId>,
    segment_size: u64,
    max_class: u32,
    classes: Vec<ClassState>,
    free_segments: VecDeque<(RegionId, u64)>,
    limbo: VecDeque<(Instant, Block)>,
    grace: Duration,
    /// The pool cannot grow: the last spare segment goes only to a class that has no
    /// blocks about to come back from limbo.
    scarce: bool,
    /// Segments being emptied for reuse by any class (their keys are being evicted):
    /// their free blocks wait here instead of serving their class again, since new
    /// values would refill the segment as fast as eviction empties it. Since when, and
    /// the free blocks held back.
    draining: hashbrown::HashMap<(RegionId, u64), (Instant, Vec<GlobalAddr>)>,
    /// How long a segment may drain before it serves its class again (it did not
    /// empty: keys of another client's hash slots, or chunks of chained values, stay
    /// in it); it is not drained again for four times as long.
    drain_give_up: Duration,
    /// Segments that did not empty, and when they were given back.
    gave_up: hashbrown::HashMap<(RegionId, u64), Instant>,
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
            carved: hashbrown::HashMap::new(),
            released: VecDeque::new(),
            retired: hashbrown::HashSet::new(),
            segment_size,
            max_class,
            classes: (0..NUM_CLASSES).map(|_| ClassState::default()).collect(),
            free_segments: VecDeque::new(),
            limbo: VecDeque::new(),
            grace,
            scarce: false,
            draining: hashbrown::HashMap::new(),
            drain_give_up: (grace * 8).max(Duration::from_millis(50)),
            gave_up: hashbrown::HashMap::new(),
            stats: AllocStats::default(),
        }
    }

    /// Whether the pool is at its limit (it cannot grow by another region). A pool
    /// that can grow again needs no segment emptied: draining ones serve their class.
    pub fn set_scarce(&mut self, scarce: bool) {
        self.scarce = scarce;
        if !scarce && !self.draining.is_empty() {
            self.undrain_stale(None);
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
        if self.retired.contains(&region) {
            return;
        }
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
        if let Some(block) = self.take_ready(class) {
            return Ok((block, None));
        }
        // The class's free list and segment are used up.
        let state = &self.classes[class as usize];
        if state.claiming.is_some() {
            return Err(Need::Claiming);
        }
        // Values of one size written while others of that size are evicted would take
        // every segment a full pool frees, starving the classes that have nothing
        // coming back (hash-table growth, a new value size).
        if self.scarce && state.limbo > 0 && self.released.len() + self.free_segments.len() <= 1 {
            return Err(Need::Reclaiming);
        }
        // An emptied segment of our own first; else claim a new one.
        let (region, index, fresh) = match self.released.pop_front() {
            Some((r, i)) => (r, i, false),
            None => {
                let (r, i) = self.free_segments.pop_front().ok_or(Need::Region)?;
                (r, i, true)
            }
        };
        let size = classes::size(class) as u64;
        let base = GlobalAddr::new(region, layout::segment_offset(index, self.segment_size));
        let blocks = self.segment_size / size;
        self.stats.segments += 1;
        self.carved
            .insert((region, index), Carved { class, out: 0 });
        let state = &mut self.classes[class as usize];
        if fresh {
            // Only the first block until the claim is confirmed.
            state.bump = None;
            state.claiming = Some((base.offset_by(size), blocks - 1));
            let claim = Claimed {
                region,
                entry_offset: layout::segment_entry_offset(index),
                entry: layout::segment_entry(class, self.owner),
            };
            return Ok((self.count(Block { addr: base, class }), Some(claim)));
        }
        state.bump = Some((base, blocks));
        self.take_ready(class)
            .map(|b| (b, None))
            .ok_or(Need::Region)
    }

    /// A block of `class` from its free list, else from its current segment, counted
    /// allocated; `None` when both are used up.
    fn take_ready(&mut self, class: u8) -> Option<Block> {
        let size = classes::size(class) as u64;
        let state = &mut self.classes[class as usize];
        let addr = match state.free.pop() {
            Some(addr) => addr,
            None => match state.bump {
                Some((addr, left)) if left > 0 => {
                    state.bump = Some((addr.offset_by(size), left - 1));
                    addr
                }
                _ => return None,
            },
        };
        Some(self.count(Block { addr, class }))
    }

    /// Up to `n` blocks for `len` bytes into `out`, each counted allocated, from the
    /// class's free list (after taking back blocks whose grace period passed) and its
    /// current segment, never claiming a segment: a per-thread cache's refill. The first
    /// block to hand out is last in `out`. Returns the class.
    pub fn alloc_ready(
        &mut self,
        len: u64,
        aligned: bool,
        now: Instant,
        n: usize,
        out: &mut Vec<GlobalAddr>,
    ) -> Option<u8> {
        let class = classes::best_fit(len, self.max_class, aligned)?;
        self.reclaim(now);
        let start = out.len();
        while out.len() - start < n
            && let Some(block) = self.take_ready(class)
        {
            out.push(block.addr);
        }
        out[start..].reverse();
        Some(class)
    }

    /// The block the next allocation of `class` will hand out, if it is known now (the
    /// top of the class's free list, else the next block of its segment).
    pub fn next_block(&self, class: u8) -> Option<GlobalAddr> {
        let state = self.classes.get(class as usize)?;
        state.free.last().copied().or(match state.bump {
            Some((addr, left)) if left > 0 => Some(addr),
            _ => None,
        })
    }

    /// The claim of the segment `block` (its first block) opened is recorded: the rest
    /// of the segment serves its class.
    pub fn confirm_claim(&mut self, block: Block) {
        let state = &mut self.classes[block.class as usize];
        state.bump = state.claiming.take();
    }

    /// Undoes the allocation of `block`, the first of a segment whose claim another
    /// client won: the segment is dropped, not reused.
    pub fn lost_claim(&mut self, block: Block) {
        let state = &mut self.classes[block.class as usize];
        state.claiming = None;
        state.bump = None;
        self.carved.remove(&self.segment_of(block.addr));
        self.stats.segments -= 1;
        self.stats.allocated -= block.size() as u64;
        self.stats.live_blocks -= 1;
    }

    fn count(&mut self, b: Block) -> Block {
        self.stats.allocated += b.size() as u64;
        self.stats.live_blocks += 1;
        let seg = self.segment_of(b.addr);
        if let Some(c) = self.carved.get_mut(&seg) {
            c.out += 1;
        }
        b
    }

    /// The segment (region, index) holding `addr`.
    fn segment_of(&self, addr: GlobalAddr) -> (RegionId, u64) {
        segment_key(addr, self.segment_size)
    }

    /// Stops allocating in `region` (it is being returned): its unused segments, free
    /// blocks and half-carved segments are dropped, and blocks freed there later are not
    /// reused.
    pub fn retire_region(&mut self, region: RegionId) {
        if !self.retired.insert(region) {
            return;
        }
        self.free_segments.retain(|(r, _)| *r != region);
        self.released.retain(|(r, _)| *r != region);
        for c in &mut self.classes {
            c.free.retain(|a| a.region() != region);
            if c.bump.is_some_and(|(a, _)| a.region() == region) {
                c.bump = None;
            }
            if c.claiming.is_some_and(|(a, _)| a.region() == region) {
                c.claiming = None;
            }
        }
        let before = self.carved.len();
        self.carved.retain(|(r, _), _| *r != region);
        self.stats.segments = self
            .stats
            .segments
            .saturating_sub((before - self.carved.len()) as u64);
    }

    /// Bytes of blocks this client has out (allocated or in limbo) per region, from the
    /// segments it carves. Blocks it frees of another client's segments still count
    /// for that client: across agents the figures are close, not exact.
    pub fn used_by_region(&self) -> Vec<(RegionId, u64)> {
        let mut per: std::collections::BTreeMap<RegionId, u64> = std::collections::BTreeMap::new();
        for ((region, _), c) in &self.carved {
            *per.entry(*region).or_default() += c.out as u64 * classes::size(c.class) as u64;
        }
        per.into_iter().collect()
    }

    /// Segments ready for any class without growing the pool.
    pub fn spare_segments(&self) -> usize {
        self.free_segments.len() + self.released.len()
    }

    /// Starts emptying the carved segment with the fewest blocks out (not one a class
    /// is still carving or claiming, nor one draining already or given up on lately):
    /// its free blocks stop serving its class, and it is released once its last block
    /// is freed. Returns its start address and length, for the caller to evict the
    /// keys there.
    pub fn drain_sparsest_segment(&mut self, now: Instant) -> Option<(GlobalAddr, u64)> {
        self.undrain_stale(Some(now));
        let retry_after = self.drain_give_up * 4;
        self.gave_up
            .retain(|_, at| now.saturating_duration_since(*at) < retry_after);
        let carving: Vec<(RegionId, u64)> = self
            .classes
            .iter()
            .flat_map(|c| [c.bump, c.claiming])
            .flatten()
            .filter(|(_, left)| *left > 0)
            .map(|(a, _)| self.segment_of(a))
            .collect();
        let (seg, class) = self
            .carved
            .iter()
            .filter(|(seg, _)| {
                !carving.contains(seg)
                    && !self.draining.contains_key(*seg)
                    && !self.gave_up.contains_key(*seg)
            })
            .min_by_key(|(seg, c)| (c.out, **seg))
            .map(|(seg, c)| (*seg, c.class))?;
        let size = self.segment_size;
        let free = &mut self.classes[class as usize].free;
        let held: Vec<GlobalAddr> = free
            .iter()
            .filter(|a| segment_key(**a, size) == seg)
            .copied()
            .collect();
        free.retain(|a| segment_key(*a, size) != seg);
        self.draining.insert(seg, (now, held));
        Some((
            GlobalAddr::new(seg.0, layout::segment_offset(seg.1, self.segment_size)),
            self.segment_size,
        ))
    }

    /// Segments draining for the give-up time or longer (all of them with `None`)
    /// serve their class again.
    fn undrain_stale(&mut self, now: Option<Instant>) {
        let give_up = self.drain_give_up;
        let stale: Vec<(RegionId, u64)> = self
            .draining
            .iter()
            .filter(|(_, (since, _))| {
                now.is_none_or(|n| n.saturating_duration_since(*since) >= give_up)
            })
            .map(|(seg, _)| *seg)
            .collect();
        for seg in stale {
            if let (Some((_, held)), Some(c)) = (self.draining.remove(&seg), self.carved.get(&seg))
            {
                self.classes[c.class as usize].free.extend(held);
            }
            if let Some(n) = now {
                self.gave_up.insert(seg, n);
            }
        }
    }

    /// Takes an emptied segment back from its class: its free blocks leave the class's
    /// free list (and the class stops bumping in it), and it waits in `released`.
    fn release(&mut self, seg: (RegionId, u64), class: u8) {
        self.carved.remove(&seg);
        self.draining.remove(&seg);
        let size = self.segment_size;
        let state = &mut self.classes[class as usize];
        state.free.retain(|a| segment_key(*a, size) != seg);
        if state.bump.is_some_and(|(a, _)| segment_key(a, size) == seg) {
            state.bump = None;
        }
        self.stats.segments = self.stats.segments.saturating_sub(1);
        self.released.push_back(seg);
    }

    /// Frees a block; it is reused only after the grace period.
    pub fn free(&mut self, block: Block, now: Instant) {
        self.stats.limbo_bytes += block.size() as u64;
        self.classes[block.class as usize].limbo += 1;
        self.limbo.push_back((now, block));
    }

    /// Returns blocks whose grace period has passed to their free lists.
    pub fn reclaim(&mut self, now: Instant) {
        if !self.draining.is_empty() {
            self.undrain_stale(Some(now));
        }
        while let Some((at, b)) = self.limbo.front().copied() {
            if now.duration_since(at) < self.grace {
                break;
            }
            self.limbo.pop_front();
            let state = &mut self.classes[b.class as usize];
            state.limbo = state.limbo.saturating_sub(1);
            self.stats.limbo_bytes -= b.size() as u64;
            self.restore(b);
        }
    }

    /// Takes back a block that was never used (a per-thread cache's): free at once, no
    /// grace period, as if never allocated.
    pub fn give_back(&mut self, block: Block) {
        self.restore(block);
    }

    /// Returns a block no one uses to its free list (or to its draining segment's held
    /// blocks), uncounting it; an emptied segment goes back to the spare ones.
    fn restore(&mut self, b: Block) {
        // A client also frees blocks another client allocated (the previous owner of a
        // hash slot): its own counts are approximate and never go negative.
        self.stats.allocated = self.stats.allocated.saturating_sub(b.size() as u64);
        self.stats.live_blocks = self.stats.live_blocks.saturating_sub(1);
        if self.retired.contains(&b.addr.region()) {
            return;
        }
        let seg = self.segment_of(b.addr);
        match self.draining.get_mut(&seg) {
            Some((_, held)) => held.push(b.addr),
            None => {
                // Under the top block, which `next_block` named.
                let free = &mut self.classes[b.class as usize].free;
                free.insert(free.len().saturating_sub(1), b.addr);
            }
        }
        let bumping = self.classes[b.class as usize]
            .bump
            .is_some_and(|(a, left)| left > 0 && self.segment_of(a) == seg);
        let empty = match self.carved.get_mut(&seg) {
            Some(c) if c.class == b.class => {
                c.out = c.out.saturating_sub(1);
                // The segment a class is still carving stays with it.
                c.out == 0 && !bumping
            }
            _ => false, // another client's segment: its block is reused as is
        };
        if empty {
            self.release(seg, b.class);
        }
    }
}

/// The segment holding `addr`: its region and index there.
fn segment_key(addr: GlobalAddr, segment_size: u64) -> (RegionId, u64) {
    let index = addr.offset().saturating_sub(layout::REGION_HEADER) / segment_size;
    (addr.region(), index)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashSet;

    const SEG: u64 = 1 << 20;

    impl Allocator {
        /// `alloc`, with a segment claim confirmed at once (as the pool does when it
        /// wins the claim).
        fn alloc_confirmed(
            &mut self,
            len: u64,
            aligned: bool,
            now: Instant,
        ) -> Result<(Block, Option<Claimed>), Need> {
            let (b, claim) = self.alloc(len, aligned, now)?;
            if claim.is_some() {
                self.confirm_claim(b);
            }
            Ok((b, claim))
        }
    }

    #[test]
    fn a_segment_being_claimed_serves_nothing_else_until_confirmed() {
        let t0 = Instant::now();
        let mut a = Allocator::new(1, SEG, Duration::from_millis(10));
        a.add_region(1, 2 * SEG + layout::REGION_HEADER, |_| false);
        let (first, claim) = a.alloc(100, false, t0).unwrap();
        assert!(claim.is_some());
        // Another task of the client: the segment may still go to another client.
        assert_eq!(a.alloc(100, false, t0).err(), Some(Need::Claiming));
        a.lost_claim(first);
        let (again, claim) = a.alloc(100, false, t0).unwrap();
        assert!(claim.is_some(), "the next segment needs its own claim");
        assert_ne!(a.segment_of(again.addr), a.segment_of(first.addr));
        a.confirm_claim(again);
        let (next, claim) = a.alloc(100, false, t0).unwrap();
        assert!(claim.is_none());
        assert_eq!(a.segment_of(next.addr), a.segment_of(again.addr));
    }

    /// An allocator over one region of `segments` segments, filled with 4 KiB blocks.
    fn full_of_4k(segments: u64, grace: Duration, now: Instant) -> (Allocator, Vec<Block>) {
        let mut a = Allocator::new(1, SEG, grace);
        a.add_region(1, segments * SEG + layout::REGION_HEADER, |_| false);
        let mut big = Vec::new();
        while let Ok((b, _)) = a.alloc_confirmed(4000, false, now) {
            big.push(b);
        }
        (a, big)
    }

    #[test]
    fn emptied_segments_serve_other_classes() {
        let t0 = Instant::now();
        let grace = Duration::from_millis(10);
        let (mut a, big) = full_of_4k(2, grace, t0);
        assert!(big.len() >= 400, "{}", big.len());
        assert_eq!(
            a.alloc_confirmed(100, false, t0),
            Err(Need::Region),
            "no segment left"
        );
        for b in big {
            a.free(b, t0);
        }
        // After the grace period the emptied segments go to the small class.
        let later = t0 + grace * 2;
        let (small, claim) = a
            .alloc_confirmed(100, false, later)
            .expect("a released segment");
        assert!(claim.is_none(), "a released segment is still this client's");
        assert_eq!(small.addr.region(), 1);
    }

    /// A full pool writing values of one size while it evicts: the segment being
    /// emptied does not take new values (which would refill it as fast as it empties),
    /// so it is released and serves a class that had no segment; one that does not
    /// empty in time serves its class again.
    #[test]
    fn a_draining_segment_is_not_refilled_and_is_released_once_empty() {
        let t0 = Instant::now();
        let grace = Duration::from_millis(10);
        let (mut a, big) = full_of_4k(2, grace, t0);
        // Free one block in each segment, and all but one of the second segment.
        let second = a.segment_of(big.last().unwrap().addr);
        let (in_second, in_first): (Vec<Block>, Vec<Block>) =
            big.iter().partition(|b| a.segment_of(b.addr) == second);
        a.free(in_first[0], t0);
        for b in &in_second[1..] {
            a.free(*b, t0);
        }
        let t1 = t0 + grace * 2;
        a.reclaim(t1);
        let (start, len) = a.drain_sparsest_segment(t1).expect("a segment to drain");
        assert_eq!(a.segment_of(start), second);
        assert_eq!(len, SEG);
        // New values of the class go elsewhere: only the first segment's free block.
        let (b, _) = a.alloc_confirmed(4000, false, t1).unwrap();
        assert_ne!(a.segment_of(b.addr), second);
        assert_eq!(a.alloc_confirmed(4000, false, t1), Err(Need::Region));
        // The last block of the draining segment is freed: it serves another class.
        a.free(in_second[0], t1);
        let t2 = t1 + grace * 2;
        let (small, _) = a
            .alloc_confirmed(100, false, t2)
            .expect("the drained segment");
        assert_eq!(a.segment_of(small.addr), second);

        // A segment that never empties (another client's keys stay in it) gives its
        // free blocks back to its class after the give-up time.
        let (mut a, big) = full_of_4k(1, grace, t0);
        a.free(big[0], t0);
        a.reclaim(t1);
        assert!(a.drain_sparsest_segment(t1).is_some());
        assert_eq!(a.alloc_confirmed(4000, false, t1), Err(Need::Region));
        let t3 = t1 + a.drain_give_up;
        let (again, _) = a.alloc_confirmed(4000, false, t3).expect("its block back");
        assert_eq!(again.addr, big[0].addr);
        // It is not drained again at once (it would not empty now either).
        a.free(again, t3);
        a.reclaim(t3);
        assert_eq!(a.drain_sparsest_segment(t3), None);
        assert!(a.drain_sparsest_segment(t3 + a.drain_give_up * 4).is_some());
    }

    #[test]
    fn a_scarce_pool_keeps_its_last_segment_for_a_class_with_nothing_in_limbo() {
        let t0 = Instant::now();
        let grace = Duration::from_millis(10);
        let mut a = Allocator::new(1, SEG, grace);
        a.add_region(1, 2 * SEG + layout::REGION_HEADER, |_| false);
        // Fill the first segment exactly.
        let per_segment = (SEG
            / classes::size(classes::best_fit(4000, u32::MAX, false).unwrap()) as u64)
            as usize;
        let mut blocks: Vec<Block> = (0..per_segment)
            .map(|_| a.alloc_confirmed(4000, false, t0).unwrap().0)
            .collect();
        assert_eq!(a.spare_segments(), 1);
        a.set_scarce(true);
        a.free(blocks.pop().unwrap(), t0);
        // The class has a block in limbo: it waits rather than take the last segment...
        assert_eq!(a.alloc_confirmed(4000, false, t0), Err(Need::Reclaiming));
        // ...which a class with nothing in limbo gets.
        assert!(a.alloc_confirmed(100, false, t0).is_ok());
        // After the grace period the waiting class has its block back.
        assert!(a.alloc_confirmed(4000, false, t0 + grace * 2).is_ok());
    }

    fn alloc_with_region(
        a: &mut Allocator,
        len: u64,
        now: Instant,
        next_region: &mut u16,
    ) -> Block {
        loop {
            match a.alloc_confirmed(len, false, now) {
                Ok((b, _)) => return b,
                Err(Need::Region) => {
                    a.add_region(*next_region, 4 * SEG + layout::REGION_HEADER, |_| false);
                    *next_region += 1;
                }
                Err(Need::Claiming) => unreachable!("claims are confirmed at once here"),
                Err(Need::Reclaiming) => unreachable!("the pool is never scarce here"),
            }
        }
    }

    #[test]
    fn blocks_are_reused_only_after_grace() {
        let t0 = Instant::now();
        let mut a = Allocator::new(1, SEG, Duration::from_secs(1));
        a.add_region(1, 2 * SEG + layout::REGION_HEADER, |_| false);
        let (b1, claim) = a.alloc_confirmed(60, false, t0).unwrap();
        assert!(
            claim.is_some(),
            "the first block of a class claims a segment"
        );
        a.free(b1, t0);
        let (b2, claim) = a.alloc_confirmed(60, false, t0).unwrap();
        assert!(claim.is_none());
        assert_ne!(b1, b2, "no reuse inside the grace period");
        let (b3, _) = a
            .alloc_confirmed(60, false, t0 + Duration::from_secs(2))
            .unwrap();
        assert_eq!(b3, b1, "reuse after the grace period");
    }

    #[test]
    fn next_block_names_what_the_next_allocation_hands_out() {
        let t0 = Instant::now();
        let grace = Duration::from_millis(10);
        let mut a = Allocator::new(1, SEG, grace);
        a.add_region(1, 2 * SEG + layout::REGION_HEADER, |_| false);
        let blocks: Vec<Block> = (0..8)
            .map(|_| a.alloc_confirmed(60, false, t0).unwrap().0)
            .collect();
        let class = blocks[0].class;
        // Within the segment: the next block in line.
        let next = a.next_block(class).unwrap();
        assert_eq!(a.alloc_confirmed(60, false, t0).unwrap().0.addr, next);
        // Blocks back from limbo, freed one by one: a block predicted before another
        // comes back is still the one handed out (the pool's prefetch loaded it), so
        // returning blocks go under the top one.
        for (i, b) in blocks.iter().enumerate() {
            a.free(*b, t0 + grace * i as u32);
        }
        let mut now = t0 + grace * 2;
        a.reclaim(now);
        for _ in 0..4 {
            let predicted = a.next_block(class).unwrap();
            now += grace;
            let (got, _) = a.alloc_confirmed(60, false, now).unwrap();
            assert_eq!(got.addr, predicted);
        }
    }

    #[test]
    fn aligned_requests_get_aligned_blocks() {
        let t0 = Instant::now();
        let mut a = Allocator::new(1, SEG, Duration::ZERO);
        a.add_region(1, SEG + layout::REGION_HEADER, |_| false);
        for _ in 0..5 {
            let (b, _) = a.alloc_confirmed(20, true, t0).unwrap();
            assert_eq!(b.addr.offset() % 8, 0);
        }
    }

    #[test]
    fn out_of_segments_asks_for_a_region() {
        let t0 = Instant::now();
        let mut a = Allocator::new(1, SEG, Duration::ZERO);
        assert_eq!(a.alloc_confirmed(16, false, t0).err(), Some(Need::Region));
        assert_eq!(a.max_block(), 235_000);
    }

    proptest! {
        /// Against a model: live blocks never overlap, stay inside their segment, and the
        /// allocated-bytes counter equals the sum of live block sizes, also while
        /// segments are drained for reuse (and given back when they do not empty), and
        /// while a per-thread cache takes blocks in batches (`alloc_ready`), hands some
        /// out and gives the rest back.
        #[test]
        fn live_blocks_never_overlap(ops in proptest::collection::vec((0u8..8, 1u64..20_000), 1..300)) {
            let t0 = Instant::now();
            let mut a = Allocator::new(1, SEG, Duration::ZERO);
            let mut next_region = 1u16;
            let mut live: Vec<Block> = Vec::new();
            // A cache's blocks: allocated, not handed out.
            let mut cached: Vec<Block> = Vec::new();
            for (i, (op, len)) in ops.into_iter().enumerate() {
                let now = t0 + Duration::from_millis(i as u64);
                match op {
                    4 => {
                        a.drain_sparsest_segment(now);
                    }
                    5 => {
                        let mut out = Vec::new();
                        if let Some(class) = a.alloc_ready(len, false, now, len as usize % 5, &mut out) {
                            prop_assert!(out.len() <= len as usize % 5);
                            for addr in out {
                                prop_assert!(classes::size(class) as u64 >= len);
                                cached.push(Block { addr, class });
                            }
                        }
                    }
                    6 => {
                        for b in cached.drain(..) {
                            a.give_back(b);
                        }
                    }
                    7 if !cached.is_empty() => {
                        live.push(cached.swap_remove(len as usize % cached.len()));
                    }
                    0 | 1 | 7 => {
                        let b = alloc_with_region(&mut a, len, now, &mut next_region);
                        prop_assert!(b.size() as u64 >= len);
                        let seg_off = (b.addr.offset() - layout::REGION_HEADER) % SEG;
                        prop_assert!(seg_off + b.size() as u64 <= SEG, "block crosses its segment");
                        live.push(b);
                    }
                    _ if live.is_empty() => {}
                    _ => {
                        let b = live.swap_remove(len as usize % live.len());
                        a.free(b, now);
                        a.reclaim(now);
                    }
                }
                let total: u64 = live.iter().chain(&cached).map(|b| b.size() as u64).sum();
                prop_assert_eq!(a.stats().allocated, total);
            }
            live.extend(cached);
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
