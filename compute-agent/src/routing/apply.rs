//! Installing a cluster map on this agent: giving up the shards it lost (waiting for its
//! one-sided writes in flight to them), fencing the shards it gains and taking them once
//! their previous owner has given them up, forgetting cached keys of slots that changed
//! hands, following the instance's limits; and draining the regions the manager is
//! taking back. Called by the map watcher ([`crate::membership`]); it never serves a
//! client command.
//!
//! The handoff of a shard: an owner releases what a map takes when it applies the map
//! (before it reports the map applied), and the new owner writes a gained shard only
//! after the manager says every other agent of the instance applied that map or lost
//! its lease. Memory nodes cannot refuse a one-sided write by epoch, so this order is
//! what keeps two owners from writing one slot.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use dmc_dht::owner::Lease;
use dmc_engine::cache::Keep;
use dmc_proto::cluster::ClusterMap;
use dmc_proto::shards::{AgentId, HASH_SLOTS};

use super::Router;

impl Router {
    /// Follows `map` as agent `me`: fences the slots gained, takes ownership, forgets
    /// cached keys of slots that changed hands, and drops connections to agents that
    /// left. Returns the version applied.
    pub async fn apply(self: &Arc<Self>, me: AgentId, map: ClusterMap) -> u64 {
        let _applying = self.applying.lock().await;
        let old = self.map();
        if old.as_ref().is_some_and(|o| o.version >= map.version) {
            return self.version();
        }
        // Where the regions' copies are (a failed node's gone, a primary moved, a copy
        // being filled) and which are frozen; the writes in flight under the old
        // placements are drained before the map is reported applied.
        let placements: Vec<dmc_umo::Placement> = map
            .regions
            .iter()
            .map(|r| dmc_umo::Placement {
                region: r.id,
                record: dmc_umo::RegionRecord {
                    primary: r.primary,
                    backups: r.backups.clone(),
                },
                filling: r.filling.clone(),
                frozen: r.frozen,
            })
            .collect();
        // Nodes the cluster gained first: placements may name them.
        if let Some(d) = self.dialer.get() {
            d.add_new(self.engine.dht.pool(), &map.pool);
        }
        if let Err(e) = self.engine.dht.place_regions(&placements).await {
            tracing::error!(error = %e, "applying the region placements");
        }
        let ownership = self.engine.dht.ownership();
        let mut changed = vec![false; HASH_SLOTS as usize];
        // First give up what this map takes away, so that no other agent waits on us
        // while we wait on it.
        for shard in 0..map.shards.shards.len() as u32 {
            let now = &map.shards.shards[shard as usize];
            let range = map.shards.slots(shard);
            let held = ownership.lease(range.start).is_some();
            if held && now.primary != Some(me) {
                ownership.release(range).await;
            }
        }
        let mut handoffs = Vec::new();
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
            match lease {
                // Gained: written once every agent that may have held it let it go.
                Some(l) if self.manager.is_some() => {
                    if ownership.lease(range.start).is_some() {
                        // Held at another epoch: its writes in flight end first.
                        ownership.release(range.clone()).await;
                    }
                    handoffs.push((range.clone(), l));
                }
                _ => ownership.assign(range.clone(), lease),
            }
            for s in range {
                changed[s as usize] = true;
            }
        }
        let owned = u64::from(ownership.owned_count());
        // Cached keys of slots that stayed this agent's stay; those of slots it gained
        // (revalidated at the takeover) or backs up are kept warm, never served until
        // checked against the pool; the rest are dropped.
        self.engine.reshape_cache(&|slot| {
            let primary = map.owner(slot).is_some_and(|a| a.id == me);
            match (primary, changed[slot as usize]) {
                (true, false) => Keep::Keep,
                (true, true) => Keep::Warm,
                (false, _) if map.shards.backs_up(slot, me) => Keep::Warm,
                (false, _) => Keep::Drop,
            }
        });
        // The instance's ACL users (an ACL SETUSER or DELUSER on any agent).
        if map.instance.acl_version > 0
            && let Err(e) = self
                .engine
                .acl
                .install(map.instance.acl.as_bytes(), map.instance.acl_version)
        {
            tracing::error!(version = map.instance.acl_version, error = %e, "the cluster map's ACL users cannot be installed");
        }
        // The instance's function libraries and loaded scripts (FUNCTION LOAD, SCRIPT
        // LOAD etc. on any agent).
        // Installed beside the map, not under it: a library's code runs (up to FUNCTION
        // LOAD's 500 ms each), and slot takeovers and hand-overs must not wait for it.
        // Installs keep their order (one at a time, an older version never after a
        // newer one).
        if map.instance.functions_version > 0 {
            let codes: Vec<String> =
                serde_json::from_str(&map.instance.functions).unwrap_or_default();
            let engine = self.engine.clone();
            let version = map.instance.functions_version;
            tokio::spawn(async move { engine.install_functions(&codes, version).await });
        }
        if map.instance.scripts_version > 0 {
            let bodies: Vec<String> =
                serde_json::from_str(&map.instance.scripts).unwrap_or_default();
            self.engine
                .scripts
                .install(&bodies, map.instance.scripts_version);
        }
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
        let map = Arc::new(map);
        self.warm.retarget(self, &map, me);
        *self.map.write() = Some(map);
        // Blocked clients re-check their keys: one whose slot moved away is answered
        // with the not-owner error, and its command is routed to the new owner.
        self.engine.blocking.wake_all();
        if !handoffs.is_empty() {
            self.take_over(version, handoffs);
        }
        self.version.send_replace(version);
        tracing::info!(
            version,
            owned_slots = owned,
            moved = changed.iter().filter(|c| **c).count(),
            "applied cluster map"
        );
        version
    }

    /// The manager accepted a heartbeat sent at `sent`: writes may start until one
    /// manager lease after it. The manager lets another agent take this one's shards
    /// only after hearing nothing from it for one and a half leases, so the extra half
    /// is the margin for clock-rate drift and for writes in flight at the deadline. A
    /// manager unreachable for longer than a lease pauses this agent's writes (TRYAGAIN)
    /// until a heartbeat is accepted again: an agent cannot tell a down manager from a
    /// partition that cut it off.
    pub fn renew_lease(&self, sent: std::time::Instant) {
        self.renew_lease_of(self.map().map_or(0, |m| m.lease_ms), sent);
    }

    /// [`renew_lease`](Self::renew_lease) with the manager's lease given (the first
    /// map, before it is applied).
    pub fn renew_lease_of(&self, lease_ms: u64, sent: std::time::Instant) {
        if lease_ms > 0 {
            let until = sent + std::time::Duration::from_millis(lease_ms);
            self.engine.dht.renew_lease(until);
        }
    }

    /// Takes the shards of map `version` gained from other agents once the manager says
    /// they are released to this one: every other agent of the instance applied the map
    /// (and so released what it held of them, whichever agents a shard went through on
    /// the way) or has been silent long enough that its lease ran out. Until then their
    /// writes answer TRYAGAIN, which clients retry.
    fn take_over(self: &Arc<Self>, version: u64, handoffs: Vec<(std::ops::Range<u16>, Lease)>) {
        let Some(url) = self.manager.clone() else {
            return;
        };
        let me = self.me.load(Ordering::Acquire);
        let this = self.clone();
        tokio::spawn(async move {
            let started = std::time::Instant::now();
            let mut pause = std::time::Duration::from_millis(2);
            loop {
                let u = url.clone();
                let released = tokio::task::spawn_blocking(move || {
                    dmc_process::membership::released(&u, me, version)
                })
                .await;
                match released {
                    Ok(Ok(true)) => break,
                    Ok(Ok(false)) => {}
                    Ok(Err(e)) => {
                        tracing::warn!(version, error = %e, "asking whether gained shards were released failed")
                    }
                    Err(e) => tracing::error!(error = %e, "the shard handoff task failed"),
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(std::time::Duration::from_millis(100));
            }
            let _applying = this.applying.lock().await;
            let map = this.map();
            let ownership = this.engine.dht.ownership();
            let mut gained = Vec::new();
            for (range, lease) in handoffs {
                // A newer map may have moved the shard again: it decides then.
                let current = map.as_ref().is_some_and(|m| {
                    m.shards
                        .shards
                        .get(lease.shard as usize)
                        .is_some_and(|s| s.epoch == lease.epoch && s.primary == Some(me))
                });
                if current {
                    // Transactions the previous owner left committed on some memory
                    // nodes and prepared on others are finished or undone everywhere,
                    if let Err(e) = this.engine.dht.settle_shard(lease.shard).await {
                        tracing::warn!(
                            shard = lease.shard, error = %e,
                            "settling the previous owner's transactions failed; their keys wait until the retry settles them"
                        );
                    }
                    // and its single-key commits left half-way (it died, or was cut off
                    // mid-write) are rolled forward or undone, before the first write.
                    if let Err(e) = this.engine.dht.recover_locked(range.clone()).await {
                        tracing::warn!(
                            slots = ?range, error = %e,
                            "resolving half-done commits of gained slots failed; their keys may answer TRYAGAIN"
                        );
                    }
                    ownership.assign(range.clone(), Some(lease));
                    gained.push(range);
                }
            }
            if !gained.is_empty() {
                this.took_over();
            }
            // A backup's warm keys of the gained slots become hits once checked against
            // the pool, in the background: the takeover does not wait for it (a warm
            // entry is a miss until then, never a stale hit).
            if !gained.is_empty() {
                let engine = this.engine.clone();
                tokio::spawn(async move {
                    for range in gained {
                        let checked = engine.revalidate_warm(range.clone()).await;
                        if checked != dmc_engine::warm::Revalidated::default() {
                            tracing::info!(
                                slots = ?range, confirmed = checked.confirmed, stale = checked.stale,
                                failed = checked.failed, "revalidated the warm cache of gained slots"
                            );
                        }
                    }
                });
            }
            // INFO's count follows the takeover, not only the map (it was stale here).
            this.engine
                .stats
                .owned_slots
                .store(u64::from(ownership.owned_count()), Ordering::Relaxed);
            tracing::debug!(
                version,
                waited_ms = started.elapsed().as_millis() as u64,
                "took over the shards gained"
            );
        });
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
