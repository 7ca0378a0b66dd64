//! Staging buffers: registered memory that work requests read from and land in.
//!
//! Registering memory is a system call and pins pages, far too slow per verb, and a
//! caller's buffers are not registered; so a round copies its writes into a staging
//! buffer and its reads out of one. Buffers come in power-of-two sizes from 4 KiB to
//! [`super::transport::MAX_STAGE`] and go back to a free list of each size when a round
//! ends (a few per size are kept; the rest are deregistered).

use std::sync::Arc;

use parking_lot::Mutex;

use super::device::{Access, RcDevice, Registration};
use crate::error::VerbsError;
use crate::memory::RegionMemory;

const MIN_SIZE: usize = 4096;
/// Free buffers kept per size.
const KEEP: usize = 8;

/// Free buffers by size class (index: log2 of the size).
type FreeLists = Arc<Mutex<Vec<Vec<Arc<dyn Registration>>>>>;

/// Registered staging buffers of one device, by size class.
pub struct StagePool {
    device: Arc<dyn RcDevice>,
    free: FreeLists,
}

/// A staging buffer lent to one round; it goes back to its pool when dropped.
pub struct Stage {
    reg: Arc<dyn Registration>,
    class: usize,
    free: FreeLists,
}

impl Stage {
    pub fn registration(&self) -> &Arc<dyn Registration> {
        &self.reg
    }

    /// This buffer, never to go back to the pool (the device may still write it): it
    /// is deregistered when dropped.
    pub fn discarded(mut self) -> Stage {
        self.class = usize::MAX;
        self
    }
}

impl Drop for Stage {
    fn drop(&mut self) {
        let mut free = self.free.lock();
        if let Some(list) = free.get_mut(self.class)
            && list.len() < KEEP
        {
            list.push(self.reg.clone());
        }
    }
}

impl StagePool {
    pub fn new(device: Arc<dyn RcDevice>) -> Self {
        StagePool {
            device,
            free: Arc::new(Mutex::new(Vec::new())),
        }
    }

    /// A buffer of at least `len` bytes.
    pub fn take(&self, len: usize) -> Result<Stage, VerbsError> {
        let size = len.max(MIN_SIZE).next_power_of_two();
        let class = size.trailing_zeros() as usize;
        let reused = {
            let mut free = self.free.lock();
            if free.len() <= class {
                free.resize_with(class + 1, Vec::new);
            }
            free.get_mut(class).and_then(Vec::pop)
        };
        let reg = match reused {
            Some(reg) => reg,
            None => {
                let mem = Arc::new(RegionMemory::heap(0, size as u64)?);
                self.device.register(mem, Access::Local)?
            }
        };
        Ok(Stage {
            reg,
            class,
            free: self.free.clone(),
        })
    }

    /// Buffers waiting in the free lists (for tests).
    pub fn idle(&self) -> usize {
        self.free.lock().iter().map(Vec::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rdma::emulated::EmulatedFabric;

    #[test]
    fn buffers_are_reused_by_size_and_the_surplus_deregistered() {
        let fabric = EmulatedFabric::default();
        let pool = StagePool::new(fabric.device());
        let a = pool.take(100).unwrap();
        assert_eq!(a.registration().memory().len(), 4096);
        let addr = a.registration().addr();
        drop(a);
        let b = pool.take(4000).unwrap();
        assert_eq!(b.registration().addr(), addr, "the free buffer is reused");
        let big = pool.take(5000).unwrap();
        assert_eq!(big.registration().memory().len(), 8192);
        drop((b, big));
        assert_eq!(pool.idle(), 2);
        let many: Vec<Stage> = (0..KEEP + 3).map(|_| pool.take(10).unwrap()).collect();
        assert_eq!(fabric.registrations(), KEEP + 3 + 1);
        drop(many);
        assert_eq!(pool.idle(), KEEP + 1);
        assert_eq!(
            fabric.registrations(),
            KEEP + 1,
            "the surplus is deregistered"
        );
    }
}
