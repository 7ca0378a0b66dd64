//! One lock shard of the local cache: its entries in a dense vector (admission samples
//! victims from it uniformly) and an index from each key's 64-bit hash to its entry.
//!
//! The hash is computed once per request (the same hash picks the shard; the cache
//! seeds it per process) and kept in the entry, so the index never hashes a key and
//! never reads a key to rehash. Keys up to [`INLINE_KEY`] bytes live inside the entry:
//! a hit on such a key reads the index (small, and warm in the core's cache) and one
//! entry, not a key allocation besides.

use bytes::Bytes;
use dmc_dht::{SlotRef, ValueKind};
use hashbrown::HashTable;
use smallvec::SmallVec;

/// Keys up to this many bytes are stored inside their entry.
pub const INLINE_KEY: usize = 24;

/// Bookkeeping bytes charged per entry on top of key and value.
pub const OVERHEAD: usize = 64;

pub struct Item {
    /// The key's index hash (`LocalCache::shard`).
    pub hash: u64,
    pub key: SmallVec<[u8; INLINE_KEY]>,
    pub value: Bytes,
    pub expire_at: Option<u64>,
    pub db: u8,
    /// A string, or a collection in its pool encoding.
    pub kind: ValueKind,
    pub lfu: u8,
    /// Fed by another agent and not yet checked against the pool: never served.
    pub warm: bool,
    pub slot: Option<SlotRef>,
}

impl Item {
    pub fn bytes(&self) -> usize {
        self.key.len() + self.value.len() + OVERHEAD
    }
}

#[derive(Default)]
pub struct Shard {
    /// Positions in `items`, by the entry's hash.
    index: HashTable<usize>,
    /// Dense, so that victims can be sampled uniformly.
    pub items: Vec<Item>,
    pub bytes: usize,
    /// Warm entries among `items`.
    pub warm: usize,
    /// Bumped by every write-through and removal: a fill that started before a write
    /// of the shard finished must not install what it read (it may be older).
    pub writes: u64,
    /// `INFO` counters, kept under the shard's lock (no line shared between cores).
    pub hits: u64,
    pub misses: u64,
    pub rejected: u64,
}

impl Shard {
    /// The position of `key` of `db`, whose hash is `hash`.
    pub fn find(&self, hash: u64, db: u8, key: &[u8]) -> Option<usize> {
        let items = &self.items;
        self.index
            .find(hash, |&i| {
                let item = &items[i];
                item.hash == hash && item.db == db && item.key[..] == *key
            })
            .copied()
    }

    /// Removes the entry at `i`; the last entry takes its place.
    pub fn remove_at(&mut self, i: usize) {
        let item = self.items.swap_remove(i);
        let found = self.index.find_entry(item.hash, |&j| j == i);
        debug_assert!(found.is_ok(), "every entry has its position in the index");
        if let Ok(entry) = found {
            entry.remove();
        }
        self.bytes -= item.bytes();
        self.warm -= usize::from(item.warm);
        let moved_from = self.items.len();
        if let Some(moved) = self.items.get(i) {
            let pos = self.index.find_mut(moved.hash, |&j| j == moved_from);
            debug_assert!(
                pos.is_some(),
                "the moved entry has its position in the index"
            );
            if let Some(pos) = pos {
                *pos = i;
            }
        }
    }

    #[cfg(test)]
    fn index_len(&self) -> usize {
        self.index.len()
    }

    /// Adds an entry for a key not in the shard.
    pub fn insert(&mut self, item: Item) {
        self.bytes += item.bytes();
        self.warm += usize::from(item.warm);
        let items = &self.items;
        self.index
            .insert_unique(item.hash, items.len(), |&j| items[j].hash);
        self.items.push(item);
    }

    /// The coldest of `SAMPLES` sampled entries.
    pub fn sample_victim<const SAMPLES: usize>(&self) -> Option<usize> {
        let n = self.items.len() as u64;
        if n == 0 {
            return None;
        }
        let picks: [usize; SAMPLES] = std::array::from_fn(|_| dmc_proto::rng::below(n) as usize);
        picks.into_iter().min_by_key(|&i| self.items[i].lfu)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dmc_dht::hash::key_hash;

    fn item(db: u8, key: &[u8]) -> Item {
        Item {
            hash: key_hash(db, key),
            key: SmallVec::from_slice(key),
            value: Bytes::from_static(b"v"),
            expire_at: None,
            db,
            kind: ValueKind::String,
            lfu: 5,
            warm: false,
            slot: None,
        }
    }

    /// Against a model: after random inserts and removals (the last entry moving into
    /// each hole), every key is found at the position holding it, short and long keys
    /// alike, and only there; removed keys are gone; the index holds one position per
    /// entry.
    #[test]
    fn positions_follow_swap_removals() {
        let mut s = Shard::default();
        let mut model: Vec<(u8, Vec<u8>)> = Vec::new();
        let mut removed: Vec<(u8, Vec<u8>)> = Vec::new();
        let mut x = 99u64;
        for step in 0..5_000u32 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let db = (x % 3) as u8;
            let remove = (x >> 8).is_multiple_of(3);
            let n = (x >> 16) % 400;
            let key = if step % 5 == 0 {
                format!("a-key-longer-than-twenty-four-bytes:{n}")
            } else {
                format!("k{n}")
            }
            .into_bytes();
            let h = key_hash(db, &key);
            match (s.find(h, db, &key), remove) {
                (Some(i), true) => {
                    s.remove_at(i);
                    let at = model.iter().position(|(d, k)| *d == db && *k == key);
                    model.swap_remove(at.expect("the model holds what the shard holds"));
                    removed.push((db, key));
                }
                (None, _) => {
                    s.insert(item(db, &key));
                    removed.retain(|(d, k)| !(*d == db && *k == key));
                    model.push((db, key));
                }
                _ => {}
            }
            assert_eq!(s.items.len(), model.len());
            assert_eq!(s.index_len(), model.len());
        }
        assert!(!removed.is_empty() && model.iter().any(|(d, _)| *d != 0));
        for (i, (db, key)) in model.iter().enumerate() {
            assert_eq!(s.find(key_hash(*db, key), *db, key), Some(i));
            let other = (db + 1) % 3;
            if !model.iter().any(|(d, k)| *d == other && k == key) {
                assert_eq!(s.find(key_hash(other, key), other, key), None);
            }
        }
        for (db, key) in &removed {
            assert_eq!(
                s.find(key_hash(*db, key), *db, key),
                None,
                "removed keys are gone"
            );
        }
        assert_eq!(
            s.bytes,
            s.items.iter().map(Item::bytes).sum::<usize>(),
            "bytes follow the entries"
        );
    }
}
