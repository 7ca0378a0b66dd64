//! Backup agents' warm caches, the agent's side (DESIGN.md §5, agent replication):
//! feeding the backups of the shards this agent is primary of, and taking the feeds of
//! the shards it backs up (`DMC.WARM`).
//!
//! The engine hands every value this agent writes through or admits after a miss (and
//! every key it drops) to [`WarmFeed::feed`], which queues it, without a lock, for each
//! backup of the key's shard; one task per backup sends its queue in pipelined runs of
//! `DMC.WARM` over a peer connection, in order. The feed never waits: a full queue
//! (16 384 updates or 64 MiB: a slow or dead backup) drops updates and counts them,
//! which costs nothing in correctness, because a backup serves no warm entry before a
//! takeover has revalidated it against the pool ([`dmc_engine::warm`]). A backup new to
//! a shard first gets what the primary has cached of it (`send_hot_set`), so keys that
//! are read but no longer written reach it too. Called by the engine's read path
//! (feeding), the map applier (targets) and the connection loop (`DMC.WARM`); it
//! never decides who owns or backs up a shard (the manager's map does).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

use arc_swap::ArcSwap;
use bytes::Bytes;
use dmc_dht::hash::key_slot;
use dmc_engine::Engine;
use dmc_engine::warm::CacheFeed;
use dmc_proto::cluster::ClusterMap;
use dmc_proto::shards::AgentId;
use dmc_resp::Reply;
use parking_lot::Mutex;
use tokio::sync::mpsc;

use super::Router;

/// Updates queued per backup before new ones are dropped.
const QUEUE: usize = 16_384;
/// Bytes of keys and values queued per backup before new updates are dropped.
const QUEUE_BYTES: usize = 64 << 20;
/// Values larger than this are not fed (a backup drops the key instead): they would
/// crowd out many hot small ones, and a cache shard may not even hold them.
const MAX_FED_VALUE: usize = 1 << 20;
/// Updates sent per pipelined round trip.
const BATCH: usize = 256;

/// One change of the primary's cache, for a backup.
struct Update {
    db: u8,
    key: Bytes,
    /// Value, expiry (Unix ms), LFU counter; `None`: the key left the cache.
    value: Option<(Bytes, Option<u64>, u8)>,
}

impl Update {
    /// What the update holds in the queue.
    fn bytes(&self) -> usize {
        self.key.len() + self.value.as_ref().map_or(0, |(v, _, _)| v.len())
    }

    /// `DMC.WARM db key` (dropped) or `DMC.WARM db key expire-at-ms lfu value` (0: no
    /// expiry).
    fn command(&self) -> Vec<Bytes> {
        let mut args = vec![
            Bytes::from_static(b"DMC.WARM"),
            Bytes::from(self.db.to_string()),
            self.key.clone(),
        ];
        if let Some((value, expire_at, lfu)) = &self.value {
            args.push(Bytes::from(expire_at.unwrap_or(0).to_string()));
            args.push(Bytes::from(lfu.to_string()));
            args.push(value.clone());
        }
        args
    }
}

/// One backup's queue: bounded in updates by the channel and in bytes by `bytes`.
#[derive(Clone)]
struct Queue {
    tx: mpsc::Sender<Update>,
    bytes: Arc<AtomicUsize>,
}

/// Per shard (by index in the map), the queues of its backups: empty for shards this
/// agent is not primary of.
#[derive(Default)]
struct Targets {
    map: Option<Arc<ClusterMap>>,
    shards: Vec<Vec<Queue>>,
    /// The backups' addresses, as `shards`.
    addrs: Vec<Vec<String>>,
}

pub(super) struct WarmFeed {
    engine: Weak<Engine>,
    /// Whether any shard this agent is primary of has a backup (the fast exit).
    active: AtomicBool,
    targets: ArcSwap<Targets>,
    /// The queue of each backup (by listen address), kept across maps.
    queues: Mutex<HashMap<String, Queue>>,
}

impl WarmFeed {
    pub(super) fn new(engine: Weak<Engine>) -> WarmFeed {
        WarmFeed {
            engine,
            active: AtomicBool::new(false),
            targets: ArcSwap::from_pointee(Targets::default()),
            queues: Mutex::new(HashMap::new()),
        }
    }

    /// Points the feed at the backups `map` gives the shards `me` is primary of,
    /// starting a sender for each new backup and ending those of backups gone.
    pub(super) fn retarget(&self, router: &Arc<Router>, map: &Arc<ClusterMap>, me: AgentId) {
        let before = self.targets.load_full();
        let mut queues = self.queues.lock();
        let mut used: Vec<String> = Vec::new();
        let mut shards = Vec::with_capacity(map.shards.shards.len());
        let mut addrs = Vec::with_capacity(map.shards.shards.len());
        // Per shard, the backups it did not have before: they get the shard's hot set.
        let mut fresh: Vec<Vec<Queue>> = Vec::with_capacity(map.shards.shards.len());
        for (i, s) in map.shards.shards.iter().enumerate() {
            let (mut senders, mut names, mut new) = (Vec::new(), Vec::new(), Vec::new());
            if s.primary == Some(me) {
                for b in &s.backups {
                    let Some(addr) = map.agent(*b).map(|a| a.listen.clone()) else {
                        continue;
                    };
                    let q = queues
                        .entry(addr.clone())
                        .or_insert_with(|| spawn_sender(addr.clone(), Arc::downgrade(router)))
                        .clone();
                    let had = before.addrs.get(i).is_some_and(|was| was.contains(&addr));
                    if !had {
                        new.push(q.clone());
                    }
                    senders.push(q);
                    names.push(addr.clone());
                    used.push(addr);
                }
            }
            shards.push(senders);
            addrs.push(names);
            fresh.push(new);
        }
        queues.retain(|addr, _| used.contains(addr));
        let active = shards.iter().any(|s| !s.is_empty());
        self.targets.store(Arc::new(Targets {
            map: Some(map.clone()),
            shards,
            addrs,
        }));
        if fresh.iter().any(|q| !q.is_empty()) {
            send_hot_set(self.engine.clone(), map.clone(), fresh);
        }
        self.active.store(active, Ordering::Release);
    }

    fn dropped(&self, n: u64) {
        if let Some(e) = self.engine.upgrade() {
            e.stats.warm_feed_dropped.fetch_add(n, Ordering::Relaxed);
        }
    }
}

impl CacheFeed for WarmFeed {
    fn feed(&self, db: u8, key: &[u8], value: Option<(&[u8], Option<u64>, u8)>) {
        if !self.active.load(Ordering::Acquire) {
            return;
        }
        let targets = self.targets.load();
        let Some(map) = &targets.map else {
            return;
        };
        let shard = map.shards.shard_of(key_slot(key)) as usize;
        let Some(senders) = targets.shards.get(shard).filter(|s| !s.is_empty()) else {
            return;
        };
        let key = Bytes::copy_from_slice(key);
        // A value too large to feed: the backup drops the key instead.
        let value = value
            .filter(|(v, _, _)| v.len() <= MAX_FED_VALUE)
            .map(|(v, e, l)| (Bytes::copy_from_slice(v), e, l));
        for q in senders {
            let update = Update {
                db,
                key: key.clone(),
                value: value.clone(),
            };
            let size = update.bytes();
            if q.bytes.fetch_add(size, Ordering::Relaxed) + size > QUEUE_BYTES {
                q.bytes.fetch_sub(size, Ordering::Relaxed);
                self.dropped(1);
                continue;
            }
            if q.tx.try_send(update).is_err() {
                q.bytes.fetch_sub(size, Ordering::Relaxed);
                self.dropped(1);
            }
        }
    }
}

/// Sends each new backup of a shard what this agent (its primary) has cached of it, so
/// a backup that joins late (a rescale, a replacement agent) knows the keys that are
/// read but no longer written. It waits for room in the backup's queue rather than
/// dropping, and runs beside the live updates (an entry it sends after a newer live
/// update only costs the revalidation that every warm entry gets anyway).
fn send_hot_set(engine: Weak<Engine>, map: Arc<ClusterMap>, fresh: Vec<Vec<Queue>>) {
    tokio::spawn(async move {
        let Some(cache) = engine.upgrade().and_then(|e| e.cache.clone()) else {
            return;
        };
        let shard_of = |key: &[u8]| map.shards.shard_of(key_slot(key)) as usize;
        let mut sent = 0u64;
        for part in 0..cache.parts() {
            let entries = cache.served_entries(part, &|key| {
                fresh.get(shard_of(key)).is_some_and(|q| !q.is_empty())
            });
            for (db, key, value, expire_at, lfu) in entries {
                let Some(queues) = fresh.get(shard_of(&key)) else {
                    continue;
                };
                for q in queues {
                    let update = Update {
                        db,
                        key: key.clone(),
                        value: Some((value.clone(), expire_at, lfu)),
                    };
                    let size = update.bytes();
                    while q.bytes.load(Ordering::Relaxed) + size > QUEUE_BYTES / 2 {
                        if q.tx.is_closed() {
                            return;
                        }
                        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                    }
                    q.bytes.fetch_add(size, Ordering::Relaxed);
                    if q.tx.send(update).await.is_err() {
                        return;
                    }
                    sent += 1;
                }
            }
        }
        tracing::debug!(sent, "sent new backups the hot set of their shards");
    });
}

/// The task sending one backup its updates, in order, in pipelined runs; it ends when
/// the feed drops its queue (the agent is no longer a backup) or the router is gone.
fn spawn_sender(addr: String, router: Weak<Router>) -> Queue {
    let (tx, mut rx) = mpsc::channel::<Update>(QUEUE);
    let bytes = Arc::new(AtomicUsize::new(0));
    let queued = bytes.clone();
    tokio::spawn(async move {
        let mut batch: Vec<Update> = Vec::with_capacity(BATCH);
        while let Some(first) = rx.recv().await {
            batch.clear();
            batch.push(first);
            while batch.len() < BATCH {
                match rx.try_recv() {
                    Ok(u) => batch.push(u),
                    Err(_) => break,
                }
            }
            let Some(router) = router.upgrade() else {
                return;
            };
            // Counted until sent: the batch in flight is part of the bound.
            let size: usize = batch.iter().map(Update::bytes).sum();
            let commands: Vec<Vec<Bytes>> = batch.iter().map(Update::command).collect();
            let refs: Vec<&[Bytes]> = commands.iter().map(|c| &c[..]).collect();
            let failed = match router
                .forward_many(&addr, super::peers::Sender::AGENT, &refs)
                .await
            {
                Ok(replies) => replies
                    .iter()
                    .filter(|r| matches!(r, Reply::Error(_)))
                    .count(),
                Err(e) => {
                    tracing::debug!(backup = %addr, error = %e, "feeding a backup agent failed");
                    batch.len()
                }
            };
            drop(commands);
            batch.clear();
            queued.fetch_sub(size, Ordering::Relaxed);
            if failed > 0 {
                router.warm.dropped(failed as u64);
            }
        }
    });
    Queue { tx, bytes }
}

impl Router {
    /// `DMC.WARM db key [expire-at-ms lfu value]` from the primary of a shard this
    /// agent backs up: kept as a warm entry (ignored if this agent does not back the
    /// key's shard up in its map, or owns it now).
    pub fn warm(&self, args: &[Bytes]) -> Reply {
        let (Some(db), Some(key)) = (args.get(1), args.get(2)) else {
            return Reply::err("ERR wrong number of arguments for 'dmc.warm' command");
        };
        let Some(db) = parse::<u8>(db).filter(|d| *d < self.engine.config.databases) else {
            return Reply::err("ERR DMC.WARM database out of range");
        };
        let value = match args.get(3..).unwrap_or_default() {
            [] => None,
            [expire_at, lfu, value] => match (parse::<u64>(expire_at), parse::<u8>(lfu)) {
                (Some(e), Some(l)) => Some((value.clone(), (e > 0).then_some(e), l)),
                _ => return Reply::err("ERR DMC.WARM expects a numeric expiry and LFU counter"),
            },
            _ => return Reply::err("ERR wrong number of arguments for 'dmc.warm' command"),
        };
        let me = self.me.load(Ordering::Acquire);
        let backs_up = self
            .map()
            .is_some_and(|m| m.shards.backs_up(key_slot(key), me));
        if backs_up {
            self.engine.warm(db, key, value);
        }
        Reply::ok()
    }
}

fn parse<T: std::str::FromStr>(arg: &Bytes) -> Option<T> {
    std::str::from_utf8(arg).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A feed whose one shard has one backup queue with no sender draining it.
    fn feed_with_queue() -> (WarmFeed, mpsc::Receiver<Update>, Arc<AtomicUsize>) {
        let map: ClusterMap = serde_json::from_value(serde_json::json!({
            "version": 1,
            "shards": {"shards": [{"id": 0, "primary": 1, "backups": [2], "epoch": 1}]},
            "agents": [],
            "pool": {"transport": "tcp", "nodes": [], "node_ids": [], "replicas": 1,
                     "region_size": "64mb", "segment_size": "1mb"}
        }))
        .unwrap();
        let (tx, rx) = mpsc::channel(QUEUE);
        let bytes = Arc::new(AtomicUsize::new(0));
        let feed = WarmFeed::new(Weak::new());
        feed.targets.store(Arc::new(Targets {
            map: Some(Arc::new(map)),
            shards: vec![vec![Queue {
                tx,
                bytes: bytes.clone(),
            }]],
            addrs: vec![vec!["127.0.0.1:2".into()]],
        }));
        feed.active.store(true, Ordering::Release);
        (feed, rx, bytes)
    }

    /// A backup that does not drain its queue costs the primary at most QUEUE_BYTES:
    /// later updates are dropped, never buffered; oversized values are not fed.
    #[tokio::test]
    async fn a_stalled_backup_queue_is_bounded_in_bytes() {
        let (feed, mut rx, bytes) = feed_with_queue();
        let value = vec![7u8; 512 << 10];
        for i in 0..1000u32 {
            feed.feed(0, format!("k{i}").as_bytes(), Some((&value, None, 5)));
        }
        assert!(bytes.load(Ordering::Relaxed) <= QUEUE_BYTES);
        let mut queued = 0;
        while let Ok(u) = rx.try_recv() {
            queued += u.bytes();
        }
        assert!(
            (QUEUE_BYTES / 2..=QUEUE_BYTES).contains(&queued),
            "{queued}"
        );
        let huge = vec![0u8; MAX_FED_VALUE + 1];
        feed.feed(0, b"big", Some((&huge, None, 5)));
        let u = rx.try_recv().unwrap();
        assert!(u.value.is_none(), "an oversized value is fed as a drop");
    }
}
