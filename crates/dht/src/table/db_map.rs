//! Logical to stored database numbers: the db map on the table root, `physical_db`, and
//! `SWAPDB` as one transaction on that map.
//!
//! The engine maps a logical database before each key operation; maintenance reloads
//! the map every tick. A swap never moves keys: only the map changes.

use std::sync::atomic::Ordering;

use dmc_umo::{Tx, TxOutcome, TxWrite};

use super::{Dht, DhtError, MAX_RETRIES};
use crate::layout::{self, le64};

impl Dht {
    /// The database number the keys of logical database `db` are stored under: the
    /// same number unless SWAPDB swapped it with another.
    pub fn physical_db(&self, db: u8) -> u8 {
        self.db_map[db as usize].load(Ordering::Relaxed)
    }

    /// The logical database (the one clients select) stored as `physical`: the inverse
    /// of [`physical_db`](Self::physical_db).
    pub fn logical_db(&self, physical: u8) -> u8 {
        (0..self.db_map.len())
            .find(|&db| self.db_map[db].load(Ordering::Relaxed) == physical)
            .map_or(physical, |db| db as u8)
    }

    async fn read_db_map(&self) -> Result<[u8; layout::DB_MAP_LEN], DhtError> {
        let mut map = [0u8; layout::DB_MAP_LEN];
        self.pool
            .read(self.root.offset_by(layout::DB_MAP), &mut map)
            .await?;
        Ok(map)
    }

    /// Reloads the db map from the pool (after another agent's SWAPDB).
    pub async fn load_db_map(&self) -> Result<(), DhtError> {
        let map = self.read_db_map().await?;
        for (i, x) in map.iter().enumerate() {
            self.db_map[i].store(i as u8 ^ x, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Swaps two logical databases (Redis's `SWAPDB`) by swapping which stored
    /// databases they name: one transaction on the table root, no key moves. Only the
    /// first [`layout::DB_MAP_LEN`] databases can be swapped.
    pub async fn swap_dbs(&self, a: u8, b: u8) -> Result<(), DhtError> {
        let n = layout::DB_MAP_LEN;
        if a as usize >= n || b as usize >= n {
            return Err(DhtError::Unsupported(format!(
                "SWAPDB is supported for databases 0 to {} on this pool",
                n - 1
            )));
        }
        for _ in 0..MAX_RETRIES {
            let old = self.read_db_map().await?;
            let mut new = old;
            // Stored as i ^ physical(i): swap the physical numbers.
            let (pa, pb) = (a ^ old[a as usize], b ^ old[b as usize]);
            new[a as usize] = a ^ pb;
            new[b as usize] = b ^ pa;
            let writes = (0..n / 8)
                .filter(|w| old[w * 8..w * 8 + 8] != new[w * 8..w * 8 + 8])
                .map(|w| TxWrite {
                    addr: self.root.offset_by(layout::DB_MAP + 8 * w as u64),
                    expect: Some(le64(&old, w * 8)),
                    new: le64(&new, w * 8),
                    in_word_lock: false,
                })
                .collect::<Vec<_>>();
            if writes.is_empty() {
                return Ok(());
            }
            let tx = Tx {
                shard: dmc_umo::pool::POOL_SHARD,
                epoch: 0,
                writes,
            };
            match self.pool.commit(std::slice::from_ref(&tx)).await.remove(0) {
                TxOutcome::Committed => return self.load_db_map().await,
                TxOutcome::Failed(e) => return Err(e.into()),
                _ => continue,
            }
        }
        Err(DhtError::Contention(0))
    }
}
