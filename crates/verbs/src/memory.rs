//! Raw region memory: the only place in DMC that touches pool bytes through pointers.
//!
//! A [`RegionMemory`] is one copy of a region, either private memory of this process
//! (the `local` backend and heap-backed memory nodes) or a `MAP_SHARED` mapping of a file
//! that other processes map too (the `shm` backend). Every operation is bounds-checked
//! here, so callers above never hold a pointer into the pool.
//!
//! Concurrency model: pool memory behaves like memory behind a NIC. Other processes (and
//! other tasks) read and write it at any time, so no Rust reference (`&[u8]`) to it is
//! ever created. Reads and writes are byte copies through raw pointers and may observe a
//! concurrent writer's partial bytes: that is the one-sided READ contract, and the layers
//! above detect it with checksums. 8-byte words are accessed with atomic instructions
//! (`CAS`, `FAA`, loads and stores), which is what makes concurrent updates exact.

use std::fs::File;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::RegionId;
use crate::error::VerbsError;

/// What keeps the memory of a [`RegionMemory`] alive: an anonymous (private) or file
/// (shared) mapping, page-aligned, so 8-byte atomics on it are aligned.
enum Backing {
    Map(#[allow(dead_code)] memmap2::MmapRaw),
}

/// One copy of a region, addressable by byte offset.
pub struct RegionMemory {
    region: RegionId,
    ptr: NonNull<u8>,
    len: usize,
    _backing: Backing,
}

// SAFETY: `RegionMemory` only hands out copies of bytes and atomic operations on the
// memory it points to; the backing (heap box or mapping) is owned by the struct and lives
// as long as the pointer. Sharing it across threads is the point of pool memory.
unsafe impl Send for RegionMemory {}
// SAFETY: see `Send`: every access goes through raw-pointer copies or atomics.
unsafe impl Sync for RegionMemory {}

impl std::fmt::Debug for RegionMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegionMemory")
            .field("region", &self.region)
            .field("len", &self.len)
            .finish()
    }
}

impl RegionMemory {
    /// Zeroed private memory of `len` bytes (rounded up to a multiple of 8), from an
    /// anonymous mapping: pages are materialised by the kernel on first touch, so a
    /// large, mostly empty region costs only what is written to it.
    pub fn heap(region: RegionId, len: u64) -> Result<Self, VerbsError> {
        let len = usize::try_from(len.div_ceil(8) * 8).map_err(|_| VerbsError::Io {
            context: "allocating region".into(),
            message: format!("size {len} does not fit this machine"),
        })?;
        let map = memmap2::MmapOptions::new()
            .len(len.max(8))
            .map_anon()
            .map_err(|e| VerbsError::io("allocating region memory", e))?;
        // Huge pages cut the TLB misses of random bucket and object reads; the kernel
        // may decline (THP off), which only costs speed.
        let _ = map.advise(memmap2::Advice::HugePage);
        let map = memmap2::MmapRaw::from(map);
        let ptr = NonNull::new(map.as_mut_ptr()).ok_or_else(|| VerbsError::Io {
            context: "allocating region memory".into(),
            message: "mmap returned a null pointer".into(),
        })?;
        Ok(Self {
            region,
            ptr,
            len,
            _backing: Backing::Map(map),
        })
    }

    /// Maps `file` (whose length is the region size) `MAP_SHARED`, read-write.
    pub fn map_file(region: RegionId, file: &File) -> Result<Self, VerbsError> {
        let map = memmap2::MmapOptions::new()
            .map_raw(file)
            .map_err(|e| VerbsError::io("mapping region file", e))?;
        let len = map.len();
        // As for heap regions; shared memory gets huge pages only where the
        // administrator enabled them for shmem (`shmem_enabled=advise`).
        let _ = map.advise(memmap2::Advice::HugePage);
        if len % 8 != 0 || !(map.as_mut_ptr() as usize).is_multiple_of(8) {
            return Err(VerbsError::Io {
                context: "mapping region file".into(),
                message: format!("length {len} is not a multiple of 8"),
            });
        }
        let ptr = NonNull::new(map.as_mut_ptr()).ok_or_else(|| VerbsError::Io {
            context: "mapping region file".into(),
            message: "mmap returned a null pointer".into(),
        })?;
        Ok(Self {
            region,
            ptr,
            len,
            _backing: Backing::Map(map),
        })
    }

    pub fn region(&self) -> RegionId {
        self.region
    }

    pub fn len(&self) -> u64 {
        self.len as u64
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The first byte's address, for registering the memory with an RDMA device (which
    /// then reads and writes it by DMA, as a peer process does through a mapping). No
    /// Rust code dereferences it; the memory stays mapped as long as `self` lives.
    pub fn base_addr(&self) -> usize {
        self.ptr.as_ptr() as usize
    }

    fn check(&self, offset: u64, len: usize) -> Result<usize, VerbsError> {
        let end = offset.checked_add(len as u64);
        match end {
            Some(end) if end <= self.len as u64 => Ok(offset as usize),
            _ => Err(VerbsError::OutOfBounds {
                region: self.region,
                offset,
                len: len as u64,
                size: self.len as u64,
            }),
        }
    }

    fn word(&self, offset: u64) -> Result<&AtomicU64, VerbsError> {
        if !offset.is_multiple_of(8) {
            return Err(VerbsError::Misaligned { offset });
        }
        let at = self.check(offset, 8)?;
        // SAFETY: `at..at+8` is inside the region (checked above), the region start is
        // 8-byte aligned (heap words or a page-aligned mapping) and `offset` is a
        // multiple of 8, so the pointer is a valid, aligned `AtomicU64` for as long as
        // `self` lives. All concurrent access to pool words is atomic or a raw copy.
        Ok(unsafe { AtomicU64::from_ptr(self.ptr.as_ptr().add(at) as *mut u64) })
    }

    /// Copies `buf.len()` bytes at `offset` into `buf` (a one-sided READ).
    pub fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), VerbsError> {
        let at = self.check(offset, buf.len())?;
        // SAFETY: the source range is inside the region (checked), `buf` is a distinct
        // local buffer, and no reference to pool memory is formed: a concurrent writer
        // can only make the copied bytes stale or mixed, which readers detect.
        unsafe {
            std::ptr::copy_nonoverlapping(self.ptr.as_ptr().add(at), buf.as_mut_ptr(), buf.len())
        };
        Ok(())
    }

    /// Asks the CPU to start loading `offset..offset+len` into cache without waiting for
    /// it: the shared-memory equivalent of posting a READ to a NIC. A batch prefetches
    /// every range before copying any, so its memory latencies overlap instead of
    /// adding up. Out-of-range requests are ignored (the copy reports them).
    pub fn prefetch(&self, offset: u64, len: usize) {
        let Ok(at) = self.check(offset, len) else {
            return;
        };
        let base = self.ptr.as_ptr() as usize + at;
        let mut line = base & !63;
        while line < base + len {
            prefetch_line(line as *const u8);
            line += 64;
        }
    }

    /// Copies `data` to `offset` (a one-sided WRITE). One or two aligned words are
    /// stored atomically, in order (a slot's metadata word, or a backup's slot word
    /// and metadata), as a NIC writes an aligned word whole.
    pub fn write(&self, offset: u64, data: &[u8]) -> Result<(), VerbsError> {
        if offset.is_multiple_of(8) && (data.len() == 8 || data.len() == 16) {
            self.check(offset, data.len())?;
            for (i, w) in data.chunks_exact(8).enumerate() {
                let mut word = [0u8; 8];
                word.copy_from_slice(w);
                self.store(offset + 8 * i as u64, u64::from_le_bytes(word))?;
            }
            return Ok(());
        }
        let at = self.check(offset, data.len())?;
        // SAFETY: the destination range is inside the region (checked) and does not
        // overlap `data`, a local buffer. See `read` for the concurrency contract.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.as_ptr().add(at), data.len())
        };
        Ok(())
    }

    /// Compare-and-swap on the 8-byte word at `offset`; returns the previous value
    /// (the swap happened iff it equals `expected`).
    pub fn cas(&self, offset: u64, expected: u64, new: u64) -> Result<u64, VerbsError> {
        let word = self.word(offset)?;
        Ok(
            match word.compare_exchange(expected, new, Ordering::AcqRel, Ordering::Acquire) {
                Ok(old) | Err(old) => old,
            },
        )
    }

    /// Fetch-and-add on the 8-byte word at `offset` (wrapping); returns the previous value.
    pub fn faa(&self, offset: u64, add: u64) -> Result<u64, VerbsError> {
        Ok(self.word(offset)?.fetch_add(add, Ordering::AcqRel))
    }

    /// Atomic 8-byte load.
    pub fn load(&self, offset: u64) -> Result<u64, VerbsError> {
        Ok(self.word(offset)?.load(Ordering::Acquire))
    }

    /// Atomic 8-byte store.
    pub fn store(&self, offset: u64, value: u64) -> Result<(), VerbsError> {
        self.word(offset)?.store(value, Ordering::Release);
        Ok(())
    }
}

/// Asks the CPU to start loading the cache line holding `addr` without waiting for
/// it (any address: a prefetch never faults). For this process's own structures as
/// well as region memory.
pub fn prefetch_line(addr: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint that never faults and does not access memory
    // architecturally, whatever the address.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(addr.cast::<i8>())
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = addr;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heap_bounds_and_atomics() {
        let m = RegionMemory::heap(1, 64).unwrap();
        m.write(8, b"abcdefgh").unwrap();
        let mut buf = [0u8; 8];
        m.read(8, &mut buf).unwrap();
        assert_eq!(&buf, b"abcdefgh");
        assert!(m.read(60, &mut buf).is_err());
        assert!(m.read(u64::MAX - 2, &mut buf).is_err());
        assert_eq!(m.cas(0, 0, 7).unwrap(), 0);
        assert_eq!(m.cas(0, 0, 9).unwrap(), 7);
        assert_eq!(m.faa(0, 3).unwrap(), 7);
        assert_eq!(m.load(0).unwrap(), 10);
        assert!(matches!(m.cas(4, 0, 1), Err(VerbsError::Misaligned { .. })));
    }

    #[test]
    fn file_mapping_is_shared_between_mappings() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r");
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        f.set_len(4096).unwrap();
        let a = RegionMemory::map_file(1, &f).unwrap();
        let b = RegionMemory::map_file(1, &f).unwrap();
        a.faa(16, 5).unwrap();
        assert_eq!(b.faa(16, 1).unwrap(), 5);
        assert_eq!(a.load(16).unwrap(), 6);
    }
}
