//! The agent's local DRAM cache (DESIGN.md §5): inclusive (every cached key is also in
//! the pool), write-through (the engine writes the pool first, then tells the cache),
//! bounded in bytes, with hotness-aware admission: a value fetched after a miss enters a
//! full cache only if it is at least as hot as a sampled victim.
//!
//! Hotness is Redis's logarithmic LFU counter: a filled value brings the pool's counter
//! for its key, and local hits raise it with the same probabilistic rule. Each entry
//! remembers where its key's metadata is in the pool so local hits are reported there
//! (batched by the table). Keys the table evicts are dropped through its removal hook.
//!
//! **Warm entries** are keys of shards this agent backs up, fed by their primary
//! ([`LocalCache::warm_put`]). The feed is asynchronous and may lose updates, so a warm
//! entry is never served: it becomes an ordinary entry only when a read of the pool
//! replaces it (the takeover's revalidation, or a miss's fill).

use bytes::Bytes;
use std::hash::BuildHasher;

use dmc_dht::hash::key_hash;
use dmc_dht::policy::{LFU_INIT, lfu_should_increment};
use dmc_dht::{SlotRef, ValueKind};
use parking_lot::Mutex;
use smallvec::SmallVec;

mod shard;

use shard::{Item, Shard};

const SHARDS: usize = 16;
/// Victims sampled per admission decision.
const SAMPLES: usize = 5;

/// A value as the pool returned it, offered to the cache.
#[derive(Debug, Clone)]
pub struct Fetched {
    pub value: Bytes,
    pub kind: ValueKind,
    pub expire_at: Option<u64>,
    /// The key's LFU counter in the pool: its hotness for admission.
    pub lfu: u8,
    /// Where to report local hits.
    pub slot: Option<SlotRef>,
}

impl From<dmc_dht::Entry> for Fetched {
    fn from(e: dmc_dht::Entry) -> Self {
        Fetched {
            value: e.value,
            kind: e.kind,
            expire_at: e.expire_at,
            lfu: e.lfu,
            slot: Some(e.slot),
        }
    }
}

/// Counters for `INFO`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    pub keys: u64,
    pub bytes: u64,
    pub hits: u64,
    pub misses: u64,
    pub rejected: u64,
    /// Warm entries (fed by a primary, not yet revalidated) among `keys`.
    pub warm: u64,
}

/// What a change of hash-slot roles does to a cached key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// Stays as it is (the slot stayed this agent's).
    Keep,
    /// Stays, but must be revalidated before it is served (the slot left this agent,
    /// which backs it up now, or came to it).
    Warm,
    /// Dropped (neither owned nor backed up).
    Drop,
}

pub struct LocalCache {
    shards: Box<[Mutex<Shard>]>,
    shard_capacity: usize,
    /// Seeds the index hash with this process's random key: the key hash alone is
    /// unseeded, and a client that chose keys colliding in a shard's index would make
    /// every lookup there walk them all.
    seed: hashbrown::DefaultHashBuilder,
}

impl LocalCache {
    /// A cache of at most `capacity` bytes.
    pub fn new(capacity: usize) -> Self {
        LocalCache {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            shard_capacity: capacity / SHARDS,
            seed: hashbrown::DefaultHashBuilder::default(),
        }
    }

    /// The key's index hash and its shard. The shard comes from bits the shard's index
    /// does not use (it buckets by the low bits and tags by the top seven).
    fn shard(&self, db: u8, key: &[u8]) -> (u64, &Mutex<Shard>) {
        let h = self.seed.hash_one(key_hash(db, key));
        (h, &self.shards[(h >> 32) as usize % SHARDS])
    }

    /// The cached value, its type and where to report the hit, if the key is cached and
    /// live.
    pub fn get(
        &self,
        db: u8,
        key: &[u8],
        now_ms: u64,
        r: f64,
    ) -> Option<(Bytes, ValueKind, Option<SlotRef>)> {
        let (h, shard) = self.shard(db, key);
        let mut shard = shard.lock();
        let Some(i) = shard.find(h, db, key) else {
            shard.misses += 1;
            return None;
        };
        let item = &shard.items[i];
        if item.expire_at.is_some_and(|at| now_ms >= at) {
            shard.remove_at(i);
            shard.misses += 1;
            return None;
        }
        if item.warm {
            shard.misses += 1;
            return None;
        }
        shard.hits += 1;
        let item = &mut shard.items[i];
        if lfu_should_increment(item.lfu, r) {
            item.lfu += 1;
        }
        Some((item.value.clone(), item.kind, item.slot))
    }

    /// Call before reading the pool for a fill; pass the result to [`fill`](Self::fill).
    pub fn fill_ticket(&self, db: u8, key: &[u8]) -> u64 {
        self.shard(db, key).1.lock().writes
    }

    /// Offers a value read from the pool after a miss. It is dropped if a write reached
    /// the key's shard since `ticket` was taken (the value may be older than that
    /// write); otherwise it replaces a cached copy, or enters if there is room or it is
    /// at least as hot as the victims that would make room.
    pub fn fill(&self, ticket: u64, db: u8, key: &[u8], v: Fetched) {
        // A chunked string's pool form is a tree's root, not a value: readers assemble
        // or read pieces of it, and the cache holds values only.
        if v.kind == ValueKind::ChunkedString {
            return;
        }
        let (h, shard) = self.shard(db, key);
        let mut shard = shard.lock();
        if shard.writes != ticket {
            return;
        }
        self.admit(&mut shard, h, db, key, v);
    }

    /// Puts a new value into entry `i` while it still fits its shard: no rehash, no
    /// key copy. `slot: None` keeps the entry's pool reference unless it turns warm.
    /// Gives the value back (nothing changed) if it does not fit.
    #[allow(clippy::too_many_arguments)]
    fn replace_in_place(
        &self,
        shard: &mut Shard,
        i: usize,
        value: Bytes,
        kind: ValueKind,
        expire_at: Option<u64>,
        lfu: u8,
        slot: Option<SlotRef>,
        warm: bool,
    ) -> Result<(), Bytes> {
        let grows = value.len().saturating_sub(shard.items[i].value.len());
        if shard.bytes + grows > self.shard_capacity {
            return Err(value);
        }
        let item = &mut shard.items[i];
        let old_len = item.value.len();
        let new_len = value.len();
        item.value = value;
        item.kind = kind;
        item.expire_at = expire_at;
        item.lfu = item.lfu.max(lfu);
        let was_warm = std::mem::replace(&mut item.warm, warm);
        if slot.is_some() || warm {
            item.slot = slot;
        }
        shard.bytes = shard.bytes + new_len - old_len;
        shard.warm = shard.warm + usize::from(warm) - usize::from(was_warm);
        Ok(())
    }

    fn admit(&self, shard: &mut Shard, hash: u64, db: u8, key: &[u8], v: Fetched) {
        let Fetched {
            value,
            kind,
            expire_at,
            lfu,
            slot,
        } = v;
        let (value, lfu) = match shard.find(hash, db, key) {
            Some(i) => {
                match self.replace_in_place(shard, i, value, kind, expire_at, lfu, slot, false) {
                    Ok(()) => return,
                    // Too big to grow in place: a new entry, as hot as the old one.
                    Err(value) => {
                        let lfu = shard.items[i].lfu.max(lfu);
                        shard.remove_at(i);
                        (value, lfu)
                    }
                }
            }
            None => (value, lfu),
        };
        self.admit_new(
            shard,
            hash,
            db,
            key,
            Fetched {
                value,
                kind,
                expire_at,
                lfu,
                slot,
            },
        )
    }

    fn admit_new(&self, shard: &mut Shard, hash: u64, db: u8, key: &[u8], v: Fetched) {
        let Fetched {
            value,
            kind,
            expire_at,
            lfu,
            slot,
        } = v;
        let item = Item {
            hash,
            key: SmallVec::from_slice(key),
            value,
            expire_at,
            db,
            kind,
            lfu,
            warm: false,
            slot,
        };
        self.insert_admitted(shard, item);
    }

    /// Inserts `item` if it fits, or evicts colder sampled entries to make room.
    fn insert_admitted(&self, shard: &mut Shard, item: Item) {
        if item.bytes() > self.shard_capacity {
            shard.rejected += 1;
            return;
        }
        while shard.bytes + item.bytes() > self.shard_capacity {
            match shard.sample_victim::<SAMPLES>() {
                Some(v) if shard.items[v].lfu <= item.lfu => shard.remove_at(v),
                _ => {
                    shard.rejected += 1;
                    return;
                }
            }
        }
        shard.insert(item);
    }

    /// A value just written through to the pool (new keys start at `LFU_INIT`).
    pub fn put(&self, db: u8, key: &[u8], kind: ValueKind, value: Bytes, expire_at: Option<u64>) {
        let (h, shard) = self.shard(db, key);
        let mut shard = shard.lock();
        shard.writes += 1;
        self.admit(
            &mut shard,
            h,
            db,
            key,
            Fetched {
                value,
                kind,
                expire_at,
                lfu: LFU_INIT,
                slot: None,
            },
        );
    }

    /// A value the primary of a shard this agent backs up wrote or cached, as a warm
    /// entry (never served until revalidated). Does not count as a write: fills of
    /// keys this agent owns are not disturbed (it owns none of a backed-up shard).
    pub fn warm_put(&self, db: u8, key: &[u8], value: Bytes, expire_at: Option<u64>, lfu: u8) {
        let (h, shard) = self.shard(db, key);
        let mut shard = shard.lock();
        let value = match shard.find(h, db, key) {
            Some(i) => {
                let kind = ValueKind::String;
                match self.replace_in_place(&mut shard, i, value, kind, expire_at, lfu, None, true)
                {
                    Ok(()) => return,
                    Err(value) => {
                        shard.remove_at(i);
                        value
                    }
                }
            }
            None => value,
        };
        let item = Item {
            hash: h,
            key: SmallVec::from_slice(key),
            value,
            expire_at,
            db,
            kind: ValueKind::String,
            lfu,
            warm: true,
            slot: None,
        };
        self.insert_admitted(&mut shard, item);
    }

    /// Drops a warm entry (its primary deleted the key); an ordinary entry stays.
    pub fn warm_remove(&self, db: u8, key: &[u8]) {
        let (h, shard) = self.shard(db, key);
        let mut shard = shard.lock();
        if let Some(i) = shard.find(h, db, key).filter(|&i| shard.items[i].warm) {
            shard.remove_at(i);
        }
    }

    /// The warm entries whose key `wanted` accepts, with their values: what a takeover
    /// revalidates against the pool.
    pub fn warm_entries(&self, wanted: &dyn Fn(&[u8]) -> bool) -> Vec<(u8, Bytes, Bytes)> {
        let mut out = Vec::new();
        for s in self.shards.iter() {
            let shard = s.lock();
            for item in shard.items.iter().filter(|i| i.warm && wanted(&i.key)) {
                out.push((
                    item.db,
                    Bytes::copy_from_slice(&item.key),
                    item.value.clone(),
                ));
            }
        }
        out
    }

    /// How many lock shards the cache has ([`served_entries`](Self::served_entries)
    /// walks one at a time).
    pub fn parts(&self) -> usize {
        SHARDS
    }

    /// The served (not warm) string entries of lock shard `part` whose key `wanted`
    /// accepts, as (db, key, value, expiry, LFU counter): what a primary sends a new
    /// backup (collections are read from the pool by a backup that takes over).
    pub fn served_entries(
        &self,
        part: usize,
        wanted: &dyn Fn(&[u8]) -> bool,
    ) -> Vec<(u8, Bytes, Bytes, Option<u64>, u8)> {
        let Some(s) = self.shards.get(part) else {
            return Vec::new();
        };
        let shard = s.lock();
        shard
            .items
            .iter()
            .filter(|i| !i.warm && i.kind == ValueKind::String && wanted(&i.key))
            .map(|i| {
                let key = Bytes::copy_from_slice(&i.key);
                (i.db, key, i.value.clone(), i.expire_at, i.lfu)
            })
            .collect()
    }

    /// Drops a key (deleted, evicted, or changed in a way the cache does not mirror).
    pub fn remove(&self, db: u8, key: &[u8]) {
        let (h, shard) = self.shard(db, key);
        let mut shard = shard.lock();
        shard.writes += 1;
        if let Some(i) = shard.find(h, db, key) {
            shard.remove_at(i);
        }
    }

    /// Keeps, demotes to warm or drops each key as `keep` says (a change of
    /// hash-slot roles).
    pub fn retain(&self, keep: &dyn Fn(u8, &[u8]) -> Keep) {
        for s in self.shards.iter() {
            let mut shard = s.lock();
            shard.writes += 1;
            let mut i = 0;
            while i < shard.items.len() {
                let item = &mut shard.items[i];
                match keep(item.db, &item.key) {
                    Keep::Keep => i += 1,
                    Keep::Warm => {
                        let was_warm = std::mem::replace(&mut item.warm, true);
                        item.slot = None;
                        shard.warm += usize::from(!was_warm);
                        i += 1;
                    }
                    Keep::Drop => shard.remove_at(i),
                }
            }
        }
    }

    pub fn stats(&self) -> CacheStats {
        let mut stats = CacheStats::default();
        for s in self.shards.iter() {
            let s = s.lock();
            stats.keys += s.items.len() as u64;
            stats.bytes += s.bytes as u64;
            stats.warm += s.warm as u64;
            stats.hits += s.hits;
            stats.misses += s.misses;
            stats.rejected += s.rejected;
        }
        stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn hundred_bytes(lfu: u8) -> Fetched {
        Fetched {
            value: Bytes::from(vec![0u8; 100]),
            kind: ValueKind::String,
            expire_at: None,
            lfu,
            slot: None,
        }
    }

    #[test]
    fn hits_misses_expiry_and_removal() {
        let c = LocalCache::new(1 << 20);
        c.put(0, b"k", ValueKind::String, Bytes::from("v"), Some(100));
        assert_eq!(c.get(0, b"k", 50, 0.5).map(|v| v.0), Some(Bytes::from("v")));
        assert!(c.get(1, b"k", 50, 0.5).is_none(), "databases are separate");
        assert!(
            c.get(0, b"k", 100, 0.5).is_none(),
            "expired entries are never returned"
        );
        c.put(0, b"k", ValueKind::String, Bytes::from("w"), None);
        c.remove(0, b"k");
        assert!(c.get(0, b"k", 0, 0.5).is_none());
    }

    #[test]
    fn bounded_in_bytes_and_hot_entries_stay() {
        let c = LocalCache::new(SHARDS * 10_000);
        // Hot keys first.
        for i in 0..20u32 {
            let k = format!("hot{i}");
            c.fill(
                c.fill_ticket(0, k.as_bytes()),
                0,
                k.as_bytes(),
                hundred_bytes(200),
            );
        }
        for i in 0..5000u32 {
            let k = format!("cold{i}");
            c.fill(
                c.fill_ticket(0, k.as_bytes()),
                0,
                k.as_bytes(),
                hundred_bytes(0),
            );
        }
        let s = c.stats();
        assert!(s.bytes <= (SHARDS * 10_000) as u64, "{s:?}");
        let hot = (0..20u32)
            .filter(|i| c.get(0, format!("hot{i}").as_bytes(), 0, 0.9).is_some())
            .count();
        assert_eq!(hot, 20, "cold fills never displace hotter entries");
        assert!(s.keys < 5020, "cold fills displaced each other: {s:?}");
        // A fill colder than everything it samples is turned away.
        let c = LocalCache::new(SHARDS * 1_000);
        for i in 0..200u32 {
            let k = format!("hot{i}");
            c.fill(
                c.fill_ticket(0, k.as_bytes()),
                0,
                k.as_bytes(),
                hundred_bytes(200),
            );
        }
        c.fill(c.fill_ticket(0, b"cold"), 0, b"cold", hundred_bytes(0));
        assert!(c.get(0, b"cold", 0, 0.9).is_none() && c.stats().rejected > 0);
    }

    #[test]
    fn a_fill_older_than_a_write_is_refused() {
        let c = LocalCache::new(1 << 20);
        let ticket = c.fill_ticket(0, b"k"); // a reader misses and goes to the pool…
        c.put(0, b"k", ValueKind::String, Bytes::from("new"), None); // …a write completes meanwhile…
        let old = Fetched {
            value: Bytes::from("old"),
            kind: ValueKind::String,
            expire_at: None,
            lfu: 5,
            slot: None,
        };
        c.fill(ticket, 0, b"k", old); // …and the stale fill loses
        assert_eq!(
            c.get(0, b"k", 0, 0.5).map(|v| v.0),
            Some(Bytes::from("new"))
        );
    }

    #[test]
    fn warm_entries_are_never_served_until_a_pool_read_replaces_them() {
        let c = LocalCache::new(1 << 20);
        c.warm_put(0, b"k", Bytes::from("fed"), None, 5);
        assert!(c.get(0, b"k", 0, 0.5).is_none(), "a warm entry is a miss");
        assert_eq!(c.stats().warm, 1);
        let listed = c.warm_entries(&|_| true);
        assert_eq!(listed, vec![(0, Bytes::from("k"), Bytes::from("fed"))]);
        // The takeover reads the pool and fills: the pool's value, served from now on.
        let t = c.fill_ticket(0, b"k");
        c.fill(
            t,
            0,
            b"k",
            Fetched {
                value: Bytes::from("pool"),
                kind: ValueKind::String,
                expire_at: None,
                lfu: 5,
                slot: None,
            },
        );
        assert_eq!(
            c.get(0, b"k", 0, 0.5).map(|v| v.0),
            Some(Bytes::from("pool"))
        );
        assert_eq!(c.stats().warm, 0);
        // A warm removal leaves an ordinary entry alone; a role change demotes it.
        c.warm_remove(0, b"k");
        assert!(c.get(0, b"k", 0, 0.5).is_some());
        c.retain(&|_, _| Keep::Warm);
        assert!(c.get(0, b"k", 0, 0.5).is_none());
        assert_eq!(c.stats().warm, 1);
        c.warm_remove(0, b"k");
        assert_eq!(
            c.stats(),
            CacheStats {
                hits: 2,
                misses: 2,
                ..CacheStats::default()
            }
        );
        c.warm_put(0, b"gone", Bytes::from("x"), None, 5);
        c.retain(&|_, _| Keep::Drop);
        assert_eq!(c.stats().keys, 0);
    }

    /// Against a model: what the cache returns is always the last value put for the key.
    #[test]
    fn never_returns_a_stale_value() {
        let c = LocalCache::new(SHARDS * 2_000);
        let mut model: HashMap<u32, u32> = HashMap::new();
        let mut x = 12345u64;
        for step in 0..20_000u32 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let k = (x % 300) as u32;
            let key = format!("k{k}");
            match x % 4 {
                0 | 1 => {
                    c.put(
                        0,
                        key.as_bytes(),
                        ValueKind::String,
                        Bytes::from(step.to_string()),
                        None,
                    );
                    model.insert(k, step);
                }
                2 => {
                    c.remove(0, key.as_bytes());
                    model.remove(&k);
                }
                _ => {
                    if let Some((v, _, _)) = c.get(0, key.as_bytes(), 0, 0.5) {
                        assert_eq!(
                            Some(&v[..]),
                            model
                                .get(&k)
                                .map(|s| s.to_string())
                                .as_deref()
                                .map(str::as_bytes)
                        );
                    }
                }
            }
        }
    }
}
