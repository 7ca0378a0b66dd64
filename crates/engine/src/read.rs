//! The engine's read path and the local cache's coherence: a read is answered by the
//! local DRAM cache when it holds the key, else from the pool, and the value filled
//! into the cache if no write overtook the read; every committed write tells the cache
//! (write-through) and, through the cache feed, the backups of its shard
//! ([`crate::warm`]). Called by the command families and the pipelined fast paths; it
//! never writes to the pool.

use bytes::Bytes;
use dmc_dht::{DhtError, ValueKind};

use crate::{Engine, REFRESH_ODDS};

impl Engine {
    /// A string key's live value: from the local cache (the hit is reported to the
    /// pool's metadata in a batch), else from the pool (and offered to the cache). A key
    /// of another type is [`DhtError::WrongType`].
    pub async fn read(&self, db: u8, key: &[u8]) -> Result<Option<Bytes>, DhtError> {
        match self.read_typed(db, key).await? {
            Some((ValueKind::String, value)) => Ok(Some(value)),
            Some(_) => Err(DhtError::WrongType),
            None => Ok(None),
        }
    }

    /// A key's live value of any type, with its type (a collection in its pool
    /// encoding), read as [`read`](Self::read) reads strings. A chunked string is
    /// assembled and reported as a string.
    pub async fn read_typed(
        &self,
        db: u8,
        key: &[u8],
    ) -> Result<Option<(ValueKind, Bytes)>, DhtError> {
        match self.read_stored(db, key).await? {
            Some((ValueKind::ChunkedString, v)) => {
                crate::strings::chunked::assemble(self, db, key, v).await
            }
            found => Ok(found),
        }
    }

    /// A key's type as Redis names it (a chunked string is a string), without
    /// assembling a large string.
    pub async fn read_kind(&self, db: u8, key: &[u8]) -> Result<Option<ValueKind>, DhtError> {
        Ok(self
            .read_stored(db, key)
            .await?
            .map(|(kind, _)| kind.redis_type()))
    }

    /// A key's live value as the pool stores it, with its type: a chunked string is
    /// its tree's root ([`crate::strings::chunked`] reads it).
    pub async fn read_stored(
        &self,
        db: u8,
        key: &[u8],
    ) -> Result<Option<(ValueKind, Bytes)>, DhtError> {
        if let Some(found) = self.cached(db, key).await {
            return Ok(Some(found));
        }
        let ticket = self.cache_ticket(db, key);
        let Some(e) = self.dht.get(db, key).await? else {
            return Ok(None);
        };
        let found = (e.kind, e.value.clone());
        if let (Some(c), Some(t)) = (&self.cache, ticket) {
            if e.kind == ValueKind::String {
                self.feed_backups(db, key, Some((&e.value, e.expire_at, e.lfu)));
            }
            c.fill(t, db, key, e.into());
        }
        Ok(Some(found))
    }

    /// Values read from the pool with chunked strings assembled.
    async fn assembled(
        &self,
        db: u8,
        keys: &[&[u8]],
        mut got: Vec<Option<(ValueKind, Bytes)>>,
    ) -> Result<Vec<Option<(ValueKind, Bytes)>>, DhtError> {
        for (found, key) in got.iter_mut().zip(keys) {
            if let Some((kind, v)) = found
                && *kind == ValueKind::ChunkedString
            {
                *found = crate::strings::chunked::assemble(self, db, key, v.clone()).await?;
            }
        }
        Ok(got)
    }

    /// Whether this agent writes `key`'s hash slot. The local cache holds only such
    /// keys (DESIGN.md §5): another agent's writes would leave a copy of its keys stale.
    pub fn owns(&self, key: &[u8]) -> bool {
        let own = self.dht.ownership();
        // A standalone agent owns every slot: no hash-slot computation per read.
        own.owns_all() || own.lease(dmc_dht::hash::key_slot(key)).is_some()
    }

    /// A fill ticket for a key this agent may cache.
    fn cache_ticket(&self, db: u8, key: &[u8]) -> Option<u64> {
        let c = self.cache.as_ref()?;
        if crate::multi::in_exec() {
            // A transaction reads its own staged writes, which the cache must not hold.
            return None;
        }
        self.owns(key).then(|| c.fill_ticket(db, key))
    }

    /// The key's value from the local cache, with the hit reported to the pool, or
    /// `None` to read the pool. The cached value is right either way (the cache is
    /// write-through); a hit whose reference to the key's pool metadata is too old to
    /// write through, or unknown, sometimes goes to the pool instead, which records the
    /// hit there; the other such hits go unreported rather than risk a stale write.
    async fn cached(&self, db: u8, key: &[u8]) -> Option<(ValueKind, Bytes)> {
        let cache = self.cache.as_ref()?;
        // A transaction's reads see its staged writes, which the cache has not.
        if !self.owns(key) || crate::multi::in_exec() {
            return None;
        }
        let (value, kind, slot) = cache.get(db, key, self.now_ms(), dmc_proto::rng::next_f64())?;
        let fresh = match slot {
            Some(slot) => self.dht.record_hit(slot).await,
            None => false,
        };
        (fresh || dmc_proto::rng::next_f64() >= REFRESH_ODDS).then_some((kind, value))
    }

    /// The live values (with their types) of many keys of `db`: cached ones from the
    /// local cache (hits reported while the pool reference is fresh), the rest read
    /// from the pool in one batch whose memory accesses overlap (and offered to the
    /// cache).
    ///
    /// Several keys are read as of one instant (Redis's MGET is atomic): keys another
    /// agent owns, which its transactions may change while they are read, as a
    /// snapshot of the pool; this agent's own keys the fast way, again as a snapshot
    /// when one of this agent's transactions committed meanwhile.
    pub async fn read_many(
        &self,
        db: u8,
        keys: &[&[u8]],
    ) -> Result<Vec<Option<(ValueKind, Bytes)>>, DhtError> {
        if keys.len() < 2 || crate::multi::in_exec() {
            return self.read_each(db, keys).await;
        }
        if let Some(epoch) = self.commits.quiet()
            && keys.iter().all(|k| self.owns(k))
        {
            let out = self.read_each(db, keys).await?;
            if self.commits.unchanged(epoch) {
                return Ok(out);
            }
        }
        let got = self.dht.get_many_snapshot(db, keys).await?;
        let got = got
            .into_iter()
            .map(|e| e.map(|e| (e.kind, e.value)))
            .collect();
        self.assembled(db, keys, got).await
    }

    /// [`read_many`](Self::read_many) key by key: the cache, then the pool in a batch.
    async fn read_each(
        &self,
        db: u8,
        keys: &[&[u8]],
    ) -> Result<Vec<Option<(ValueKind, Bytes)>>, DhtError> {
        let mut out: Vec<Option<(ValueKind, Bytes)>> = vec![None; keys.len()];
        let mut missing: Vec<usize> = Vec::new();
        for (i, k) in keys.iter().enumerate() {
            match self.cached(db, k).await {
                Some(v) => out[i] = Some(v),
                None => missing.push(i),
            }
        }
        if missing.is_empty() {
            return Ok(out);
        }
        let wanted: Vec<&[u8]> = missing.iter().map(|&i| keys[i]).collect();
        let tickets: Vec<Option<u64>> = match &self.cache {
            Some(_) => wanted.iter().map(|k| self.cache_ticket(db, k)).collect(),
            None => Vec::new(),
        };
        let got = self.dht.get_many(db, &wanted).await?;
        for (n, (&i, e)) in missing.iter().zip(got).enumerate() {
            if let Some(e) = e {
                out[i] = Some((e.kind, e.value.clone()));
                if let (Some(c), Some(Some(t))) = (&self.cache, tickets.get(n)) {
                    if e.kind == ValueKind::String {
                        self.feed_backups(db, keys[i], Some((&e.value, e.expire_at, e.lfu)));
                    }
                    c.fill(*t, db, keys[i], e.into());
                }
            }
        }
        self.assembled(db, keys, out).await
    }

    /// Tells the cache about a string write the pool committed: the new value and
    /// expiry, or `None` to drop the key (deleted, or changed in a way the cache does
    /// not mirror).
    pub fn wrote(&self, db: u8, key: &[u8], now: Option<(&[u8], Option<u64>)>) {
        self.wrote_typed(db, key, ValueKind::String, now)
    }

    /// [`wrote`](Self::wrote) for a value of type `kind`. The backups' warm caches are
    /// fed strings only: a collection write drops their copy, and a backup that takes
    /// over reads the collection from the pool.
    pub fn wrote_typed(
        &self,
        db: u8,
        key: &[u8],
        kind: ValueKind,
        now: Option<(&[u8], Option<u64>)>,
    ) {
        if (self.cache.is_some() || self.tracking.active())
            && crate::multi::defer_cache_write(db, key, kind, now)
        {
            return;
        }
        // The NOLOOP writer is looked up (a task-local) only when someone tracks.
        if self.tracking.active() {
            self.key_changed(Some(key), crate::tracking::modifier());
        }
        if let Some(c) = &self.cache {
            if now.is_some() && !self.owns(key) {
                c.remove(db, key);
                return;
            }
            match now {
                // A copy: the argument is a slice of the connection's read buffer, which
                // a cached value must not keep alive.
                Some((value, expire_at)) => {
                    c.put(db, key, kind, Bytes::copy_from_slice(value), expire_at);
                    if kind == ValueKind::String {
                        let lfu = dmc_dht::policy::LFU_INIT;
                        self.feed_backups(db, key, Some((value, expire_at, lfu)));
                    } else {
                        self.feed_backups(db, key, None);
                    }
                }
                None => {
                    c.remove(db, key);
                    self.feed_backups(db, key, None);
                }
            }
        }
    }
}
