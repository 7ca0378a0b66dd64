//! Installing a cluster map on this agent: fencing the shards it gains, taking and
//! giving up ownership, forgetting cached keys of slots that changed hands, following
//! the instance's limits; and draining the regions the manager is taking back. Called
//! by the map watcher ([`crate::membership`]); it never serves a client command.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use dmc_dht::owner::Lease;
use dmc_proto::cluster::ClusterMap;
use dmc_proto::shards::{AgentId, HASH_SLOTS};

use super::Router;

impl Router {
    /// Follows `map` as agent `me`: fences the slots gained, takes ownership, forgets
    /// cached keys of slots that changed hands, and drops connections to agents that
    /// left. Returns the version applied.
    pub async fn apply(&self, me: AgentId, map: ClusterMap) -> u64 {
        let old = self.map();
        if old.as_ref().is_some_and(|o| o.version >= map.version) {
            return self.version();
        }
        let ownership = self.engine.dht.ownership();
        let mut changed = vec![false; HASH_SLOTS as usize];
        for shard in 0..map.shards.shards.len() as u32 {
            let now = &map.shards.shards[shard as usize];
            // Unchanged primary and epoch: the shard stayed where it was.
            if old.as_ref().is_some_and(|o| {
                o.shards
                    .shards
                    .get(shard as usize)
                    .is_some_and(|b| (b.primary, b.epoch) == (now.primary, now.epoch))
            }) {
                continue;
            }
            let range = map.shards.slots(shard);
            let lease = (now.primary == Some(me)).then_some(Lease {
                shard,
                epoch: now.epoch,
            });
            if let Some(l) = lease {
                // Fence first: from here the previous owner cannot start a commit (one
                // it prepared before may still finish; its locks make this agent wait).
                if let Err(e) = self.engine.dht.fence_shard(l.shard, l.epoch).await {
                    tracing::warn!(shard, epoch = l.epoch, error = %e, "fencing a gained shard failed");
                }
            }
            ownership.assign(range.clone(), lease);
            for s in range {
                changed[s as usize] = true;
            }
        }
        let owned = u64::from(ownership.owned_count());
        self.engine.forget_slots(&|slot| changed[slot as usize]);
        // The instance's limit and policy (a resize or CONFIG SET on any agent).
        let dht = &self.engine.dht;
        dht.set_maxmemory(map.instance.maxmemory.0);
        dht.set_eviction_limit(eviction_limit(&map));
        match dmc_dht::RedisPolicy::parse(&map.instance.policy) {
            Some(p) => dht.set_policy(p),
            None => {
                tracing::warn!(policy = %map.instance.policy, "unknown maxmemory-policy in the cluster map")
            }
        }
        {
            let listening: Vec<&str> = map.agents.iter().map(|a| a.listen.as_str()).collect();
            self.peers
                .lock()
                .retain(|addr, _| listening.contains(&addr.as_str()));
        }
        let version = map.version;
        let stats = &self.engine.stats;
        stats.agent_id.store(me, Ordering::Relaxed);
        stats.map_version.store(version, Ordering::Relaxed);
        stats.owned_slots.store(owned, Ordering::Relaxed);
        self.me.store(me, Ordering::Release);
        *self.map.write() = Some(Arc::new(map));
        self.version.send_replace(version);
        tracing::info!(
            version,
            owned_slots = owned,
            moved = changed.iter().filter(|c| **c).count(),
            "applied cluster map"
        );
        version
    }

    /// Acts on the map's draining regions: forgets those returned since the last map,
    /// and (in the background) vacates the rest for this agent's slots and reports each
    /// to the manager. Runs after every map applied, since a rescale hands slots to
    /// agents that must vacate them too.
    pub fn drain(self: &Arc<Self>, me: AgentId) {
        let Some(map) = self.map() else { return };
        {
            let mut seen = self.draining.lock();
            for r in seen.iter().filter(|r| !map.draining.contains(r)) {
                self.engine.dht.forget_region(*r);
            }
            seen.clone_from(&map.draining);
        }
        if map.draining.is_empty() {
            return;
        }
        let (this, url) = match &self.manager {
            Some(u) => (self.clone(), u.clone()),
            None => return,
        };
        tokio::spawn(async move {
            let _one = this.vacating.lock().await;
            for &region in &map.draining {
                match this.engine.dht.vacate_region(region).await {
                    Ok((moved, evicted)) => {
                        tracing::info!(
                            region,
                            moved,
                            evicted,
                            version = map.version,
                            "vacated a draining region"
                        );
                        let u = url.clone();
                        let v = map.version;
                        let sent = tokio::task::spawn_blocking(move || {
                            dmc_process::membership::report_vacated(&u, region, me, v)
                        })
                        .await;
                        if let Ok(Err(e)) = sent {
                            tracing::warn!(region, error = %e, "reporting a vacated region failed");
                        }
                    }
                    Err(e) => tracing::warn!(region, error = %e, "vacating a region failed"),
                }
            }
        });
    }
}

/// Share of its regions' bytes an instance fills before it evicts: region headers,
/// the partly used segment each agent holds per size class, and blocks waiting out
/// their grace period make the last bytes of a region unusable.
const FILL: f64 = 0.85;

/// Where an instance's agents start evicting: the manager grants regions only while
/// they fit maxmemory, so the data must fit the regions that do.
fn eviction_limit(map: &ClusterMap) -> u64 {
    let (max, region) = (map.instance.maxmemory.0, map.pool.region_size.0);
    if max == 0 || region == 0 {
        return 0;
    }
    let regions = (max / region).max(1);
    ((regions * region) as f64 * FILL) as u64
}
