//! Warm caches of backup agents (DESIGN.md §5, agent replication). The primary of a
//! shard with backup agents tells them, asynchronously, every value it writes through
//! or admits after a miss (and every key it drops), through a [`CacheFeed`] the agent
//! installs; a backup keeps those as *warm* entries, never served. When a backup takes
//! the shard over, [`Engine::revalidate_warm`] reads every warm key of the gained slots
//! from the pool in overlapping batches, in the background, and keeps the pool's value,
//! so the promoted agent serves hits within moments and never a value its feed missed.
//! Called by the read path (feeding), the agent's connection loop (`DMC.WARM`) and its
//! router (roles changing, takeovers); it never writes to the pool.

use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use dmc_dht::hash::key_slot;

use crate::Engine;
use crate::cache::Keep;

/// Keys revalidated per pool batch at a takeover.
const REVALIDATE_BATCH: usize = 256;

/// Where a primary sends its cache updates for the backups of its shards.
pub trait CacheFeed: Send + Sync {
    /// `key` (of a slot this agent owns) now holds `value`, expiring at `expire_at`,
    /// with LFU counter `lfu`; `None`: it was deleted or left the cache.
    fn feed(&self, db: u8, key: &[u8], value: Option<(&[u8], Option<u64>, u8)>);
}

/// What a takeover's revalidation found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Revalidated {
    /// Warm values equal to the pool's: served from now on.
    pub confirmed: u64,
    /// Warm values the pool had changed or deleted: replaced or dropped.
    pub stale: u64,
    /// Keys left warm because the pool could not be read (they stay misses).
    pub failed: u64,
}

impl Engine {
    /// Installs the feed to the backup agents (once; later calls are ignored).
    pub fn set_cache_feed(&self, feed: Arc<dyn CacheFeed>) {
        let _ = self.cache_feed.set(feed);
    }

    /// Tells the backups of `key`'s shard about a change of the primary's cache.
    pub(crate) fn feed_backups(&self, db: u8, key: &[u8], value: Option<(&[u8], Option<u64>, u8)>) {
        if let Some(f) = self.cache_feed.get() {
            f.feed(db, key, value);
        }
    }

    /// A cache update from the primary of a shard this agent backs up (`DMC.WARM`):
    /// kept as a warm entry. Ignored (returns false) for a key this agent owns now,
    /// whose cache is its own.
    pub fn warm(&self, db: u8, key: &[u8], value: Option<(Bytes, Option<u64>, u8)>) -> bool {
        let Some(c) = &self.cache else {
            return false;
        };
        if self.owns(key) {
            return false;
        }
        match value {
            Some((v, expire_at, lfu)) => c.warm_put(db, key, v, expire_at, lfu),
            None => c.warm_remove(db, key),
        }
        self.stats.warm_fed.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Keeps, demotes to warm or drops every cached key as `keep` says of its hash
    /// slot (a new cluster map changed the slots' roles).
    pub fn reshape_cache(&self, keep: &dyn Fn(u16) -> Keep) {
        if let Some(c) = &self.cache {
            c.retain(&|_, key| keep(key_slot(key)));
        }
    }

    /// Reads every warm key of `slots` from the pool and puts the pool's value in its
    /// place (or drops it if the pool has none), for a takeover once this agent owns the
    /// slots. Each fill carries a ticket taken before the read, so a write of this
    /// agent that overtook it wins (the entry then stays warm: a miss, never stale).
    pub async fn revalidate_warm(&self, slots: Range<u16>) -> Revalidated {
        let mut out = Revalidated::default();
        let Some(c) = &self.cache else {
            return out;
        };
        let mut warm = c.warm_entries(&|key| slots.contains(&key_slot(key)));
        warm.sort_unstable_by_key(|(db, _, _)| *db);
        for batch in warm.chunk_by(|a, b| a.0 == b.0) {
            for part in batch.chunks(REVALIDATE_BATCH) {
                let db = part[0].0;
                let keys: Vec<&[u8]> = part.iter().map(|(_, k, _)| &k[..]).collect();
                let tickets: Vec<u64> = keys.iter().map(|k| c.fill_ticket(db, k)).collect();
                let got = match self.dht.get_many(db, &keys).await {
                    Ok(got) => got,
                    Err(e) => {
                        tracing::warn!(error = %e, keys = keys.len(), "revalidating warm keys failed; they stay misses");
                        out.failed += keys.len() as u64;
                        continue;
                    }
                };
                for (((_, key, fed), ticket), now) in part.iter().zip(tickets).zip(got) {
                    match now {
                        Some(e) => {
                            if e.value == *fed {
                                out.confirmed += 1;
                            } else {
                                out.stale += 1;
                            }
                            c.fill(ticket, db, key, e.into());
                        }
                        None => {
                            out.stale += 1;
                            c.warm_remove(db, key);
                        }
                    }
                }
            }
        }
        let st = &self.stats;
        st.warm_confirmed
            .fetch_add(out.confirmed, Ordering::Relaxed);
        st.warm_stale.fetch_add(out.stale, Ordering::Relaxed);
        out
    }
}
