//! Which agent runs a command, and getting it there (DESIGN.md §5, routing).
//!
//! Every agent reads every key from the pool, so reads always run here. A write runs
//! here only if this agent owns the key's hash slot in the cluster map the manager
//! pushed; otherwise:
//!
//! * **proxy mode** (default): the write is forwarded to the owner over a pooled
//!   internal connection and its reply relayed, so a client that knows nothing of the
//!   cluster can use any agent. Multi-key writes whose keys have several owners
//!   (`MSET`, `DEL`, `UNLINK`, `TOUCH`) are split per owner; other such writes get
//!   `-CROSSSLOT`.
//! * **cluster mode**: the client is redirected with `-MOVED slot host:port`, as a
//!   Redis Cluster does, and `CLUSTER SLOTS/SHARDS/NODES/...` describe the agents.
//!
//! While the map changes (a rescale) an agent may briefly disagree with its peers. A
//! write refused for that reason (fenced at the memory nodes, or answered `-MOVED` by
//! the peer it was forwarded to) was not applied, so it is routed again once the map
//! moved on; the client sees no error. Forwarded commands are never forwarded again,
//! so disagreeing maps cannot bounce a command between agents.
//!
//! [`Router::apply`] installs a new map: slots this agent gains are fenced at the
//! memory nodes under their new epoch before it writes them, and cached keys of every
//! slot that changed hands are dropped from the local cache.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use dmc_dht::hash::key_slot;
use dmc_dht::owner::Lease;
use dmc_engine::{Engine, Flow, NOT_OWNER, Session, commands};
use dmc_proto::cluster::ClusterMap;
use dmc_proto::shards::{AgentId, HASH_SLOTS};
use dmc_resp::Reply;
use parking_lot::{Mutex, RwLock};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How clients are routed to the owner of a hash slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum RoutingMode {
    /// Any agent accepts any command and forwards writes to their owner.
    Proxy,
    /// Writes to slots owned elsewhere get `-MOVED` (Redis Cluster clients).
    Cluster,
}

/// The command a connection sends first to mark itself as another agent's forwarding
/// connection: commands on it are never forwarded again.
pub const PEER_HELLO: &[u8] = b"DMC.PEER";

/// Attempts at running a command while the cluster map changes under it.
const ATTEMPTS: usize = 12;
/// The longest a forwarded command may take before its connection is dropped.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(10);
/// Idle forwarding connections kept per peer.
const IDLE_PER_PEER: usize = 16;

/// Where a command runs.
#[derive(Debug, PartialEq, Eq)]
enum Route {
    Local,
    /// On the agent listening at this address.
    Forward(String),
    Moved {
        slot: u16,
        addr: String,
    },
    /// Parts of a multi-key write, each for one owner (`None`: here).
    Split(Vec<(Option<String>, Vec<Bytes>)>),
    CrossSlot,
}

/// An internal connection to another agent.
struct PeerConn {
    stream: TcpStream,
    buf: BytesMut,
    /// The database the connection has selected.
    db: u8,
    engine: Arc<Engine>,
}

impl Drop for PeerConn {
    fn drop(&mut self) {
        self.engine
            .stats
            .peer_connections
            .fetch_sub(1, Ordering::Relaxed);
    }
}

pub struct Router {
    engine: Arc<Engine>,
    mode: RoutingMode,
    /// This agent's id (0: standalone, owning everything).
    me: AtomicU64,
    map: RwLock<Option<Arc<ClusterMap>>>,
    /// The version of the map applied, for commands waiting for a newer one.
    version: tokio::sync::watch::Sender<u64>,
    peers: Mutex<HashMap<String, Vec<PeerConn>>>,
    password: Option<Bytes>,
    /// The cluster manager's URL (cluster members only).
    manager: Option<String>,
    /// Draining regions of the last map applied (a region that leaves the list was
    /// returned to the memory nodes, and is forgotten).
    draining: Mutex<Vec<u16>>,
    /// One vacating pass at a time.
    vacating: tokio::sync::Mutex<()>,
}

impl Router {
    pub fn new(
        engine: Arc<Engine>,
        mode: RoutingMode,
        password: Option<Bytes>,
        manager: Option<String>,
    ) -> Router {
        Router {
            manager,
            draining: Mutex::new(Vec::new()),
            vacating: tokio::sync::Mutex::new(()),
            engine,
            mode,
            me: AtomicU64::new(0),
            map: RwLock::new(None),
            version: tokio::sync::watch::Sender::new(0),
            peers: Mutex::new(HashMap::new()),
            password,
        }
    }

    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    pub fn mode(&self) -> RoutingMode {
        self.mode
    }

    pub fn map(&self) -> Option<Arc<ClusterMap>> {
        self.map.read().clone()
    }

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
                if let Err(e) = self.engine.dht.pool().fence(l.shard, l.epoch).await {
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
        let pool = self.engine.dht.pool().clone();
        {
            let mut seen = self.draining.lock();
            for r in seen.iter().filter(|r| !map.draining.contains(r)) {
                pool.forget_region(*r);
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

    fn version(&self) -> u64 {
        *self.version.borrow()
    }

    /// Waits (at most `wait`) for a map newer than `seen`.
    async fn newer_map(&self, seen: u64, wait: Duration) {
        let mut rx = self.version.subscribe();
        let _ = tokio::time::timeout(wait, rx.wait_for(|v| *v > seen)).await;
    }

    fn route(&self, args: &[Bytes]) -> Route {
        let guard = self.map.read();
        let Some(map) = guard.as_ref() else {
            return Route::Local;
        };
        let Some(spec) = commands::lookup(&args[0]) else {
            return Route::Local;
        };
        if spec.first_key <= 0 || !spec.flags.contains(&"write") {
            return Route::Local;
        }
        let keys = key_positions(spec.first_key, spec.last_key, spec.step, args.len());
        if keys.is_empty() {
            return Route::Local;
        }
        let me = self.me.load(Ordering::Acquire);
        // Owner address per key (`None`: this agent, or a slot with no owner yet,
        // which the engine refuses on its own).
        let owner = |i: usize| {
            let slot = key_slot(&args[i]);
            let o = map.owner(slot).filter(|a| a.id != me);
            (slot, o.map(|a| a.listen.clone()))
        };
        let (slot0, first) = owner(keys[0]);
        let mut same = true;
        for &i in &keys[1..] {
            if owner(i).1 != first {
                same = false;
                break;
            }
        }
        if same {
            return match (first, self.mode) {
                (None, _) => Route::Local,
                (Some(addr), RoutingMode::Proxy) => Route::Forward(addr),
                (Some(addr), RoutingMode::Cluster) => Route::Moved { slot: slot0, addr },
            };
        }
        if self.mode == RoutingMode::Cluster {
            return Route::CrossSlot;
        }
        // Proxy mode: commands that are a sum of per-key commands are split by owner.
        let name = args[0].to_ascii_lowercase();
        let per_key = match name.as_slice() {
            b"mset" => 2,
            b"del" | b"unlink" | b"touch" => 1,
            _ => return Route::CrossSlot,
        };
        let mut parts: Vec<(Option<String>, Vec<Bytes>)> = Vec::new();
        for &i in &keys {
            let addr = owner(i).1;
            let part = match parts.iter_mut().position(|(a, _)| *a == addr) {
                Some(p) => &mut parts[p].1,
                None => {
                    parts.push((addr, vec![args[0].clone()]));
                    &mut parts.last_mut().expect("just pushed").1
                }
            };
            part.extend(args[i..i + per_key].iter().cloned());
        }
        Route::Split(parts)
    }

    /// Runs one command wherever it belongs. `peer`: the connection is another agent
    /// forwarding to this one.
    pub async fn execute(
        &self,
        session: &mut Session,
        args: Vec<Bytes>,
        peer: bool,
    ) -> (Reply, Flow) {
        if self.map.read().is_none() || !session.authenticated {
            return self.engine.execute(session, args).await;
        }
        if let Some(reply) = self.cluster_command(session, &args).await {
            return (reply, Flow::Continue);
        }
        if let Some(done) = self.config_set(session, &args).await {
            return done;
        }
        for attempt in 0..ATTEMPTS {
            let last = attempt + 1 == ATTEMPTS;
            let seen = self.version();
            match self.route(&args) {
                Route::Local => {
                    let (reply, flow) = self.engine.execute(session, args.clone()).await;
                    if !last && not_owner(&reply) {
                        // Fenced: a newer map moved the slot. Nothing was written.
                        self.newer_map(seen, Duration::from_millis(500)).await;
                        continue;
                    }
                    return (reply, flow);
                }
                Route::Forward(addr) if peer => {
                    // The forwarder thinks this agent owns the slot: one of the two
                    // maps is behind. Wait for ours, then tell it where the slot is.
                    if !last {
                        self.newer_map(seen, Duration::from_millis(250)).await;
                        if self.version() != seen {
                            continue;
                        }
                    }
                    let slot = key_slot(&args[first_key(&args)]);
                    return (moved(slot, &addr), Flow::Continue);
                }
                Route::Forward(addr) => {
                    self.engine.stats.commands.fetch_add(1, Ordering::Relaxed);
                    match self.forward(&addr, session, &args).await {
                        Ok(reply) if !redirected(&reply) => {
                            self.engine
                                .stats
                                .forwarded_commands
                                .fetch_add(1, Ordering::Relaxed);
                            return (reply, Flow::Continue);
                        }
                        Ok(reply) if last => return (reply, Flow::Continue),
                        Ok(_) => {}
                        Err(e) => {
                            tracing::debug!(%addr, error = %e, "forwarding failed; re-routing");
                        }
                    }
                    self.newer_map(seen, Duration::from_millis(250)).await;
                }
                Route::Moved { slot, addr } => {
                    self.engine
                        .stats
                        .moved_replies
                        .fetch_add(1, Ordering::Relaxed);
                    return (moved(slot, &addr), Flow::Continue);
                }
                Route::CrossSlot => {
                    return (
                        Reply::err("CROSSSLOT Keys in request don't hash to the same slot"),
                        Flow::Continue,
                    );
                }
                Route::Split(parts) => return (self.split(session, parts).await, Flow::Continue),
            }
        }
        (
            Reply::err("TRYAGAIN the cluster map is changing, try again"),
            Flow::Continue,
        )
    }

    /// `CONFIG SET maxmemory|maxmemory-policy` on a cluster member changes the instance
    /// at the manager, which pushes it to every agent; the reply waits until this agent
    /// follows it. Other parameters of the same command are set here as usual.
    async fn config_set(&self, session: &mut Session, args: &[Bytes]) -> Option<(Reply, Flow)> {
        let url = self.manager.clone()?;
        if args.len() < 4
            || !args.len().is_multiple_of(2)
            || !args[0].eq_ignore_ascii_case(b"config")
            || !args[1].eq_ignore_ascii_case(b"set")
        {
            return None;
        }
        let (mut maxmemory, mut policy) = (None, None);
        let mut rest = vec![args[0].clone(), args[1].clone()];
        let failed = |name: &str, why: &str| {
            Some((
                Reply::err(format!(
                    "ERR CONFIG SET failed (possibly related to argument '{name}') - {why}"
                )),
                Flow::Continue,
            ))
        };
        for pair in args[2..].chunks(2) {
            let value = std::str::from_utf8(&pair[1]).unwrap_or("");
            match pair[0].to_ascii_lowercase().as_slice() {
                b"maxmemory" => match value.parse::<dmc_proto::ByteSize>() {
                    Ok(v) => maxmemory = Some(v.0),
                    Err(_) => {
                        return failed("maxmemory", "argument couldn't be parsed into an integer");
                    }
                },
                b"maxmemory-policy" => {
                    if dmc_dht::RedisPolicy::parse(value).is_none() {
                        return failed("maxmemory-policy", "argument must be a maxmemory-policy");
                    }
                    policy = Some(value.to_ascii_lowercase());
                }
                _ => rest.extend(pair.iter().cloned()),
            }
        }
        if maxmemory.is_none() && policy.is_none() {
            return None;
        }
        let p = policy.clone();
        let instance = self.map().map(|m| m.instance.name.clone())?;
        let done = tokio::task::spawn_blocking(move || {
            dmc_process::membership::resize_instance(&url, &instance, maxmemory, p.as_deref())
        })
        .await;
        match done {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Some((Reply::err(format!("ERR {e}")), Flow::Continue)),
            Err(e) => return Some((Reply::err(format!("ERR {e}")), Flow::Continue)),
        }
        // Reply once this agent follows the change (so a CONFIG GET here shows it).
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        loop {
            let seen = self.version();
            let applied = self.map().is_some_and(|m| {
                maxmemory.is_none_or(|v| m.instance.maxmemory.0 == v)
                    && policy.as_ref().is_none_or(|p| m.instance.policy == *p)
            });
            if applied || tokio::time::Instant::now() > deadline {
                break;
            }
            self.newer_map(seen, Duration::from_millis(500)).await;
        }
        if rest.len() > 2 {
            return Some(self.engine.execute(session, rest).await);
        }
        Some((Reply::ok(), Flow::Continue))
    }

    /// Runs the per-owner parts of a split write and combines their replies: `OK` for
    /// MSET, the sum for DEL/UNLINK/TOUCH, the first error if any part failed.
    async fn split(
        &self,
        session: &mut Session,
        parts: Vec<(Option<String>, Vec<Bytes>)>,
    ) -> Reply {
        let mut sum = 0i64;
        let mut ok = false;
        for (addr, args) in parts {
            let reply = match addr {
                None => Box::pin(self.execute(session, args, false)).await.0,
                Some(addr) => match self.forward(&addr, session, &args).await {
                    Ok(r) if !redirected(&r) => r,
                    // The owner changed meanwhile: route that part again.
                    _ => Box::pin(self.execute(session, args, false)).await.0,
                },
            };
            match reply {
                Reply::Int(n) => sum += n,
                Reply::Simple(_) => ok = true,
                e @ Reply::Error(_) => return e,
                other => return other,
            }
        }
        if ok { Reply::ok() } else { Reply::Int(sum) }
    }

    /// Sends `args` to the agent at `addr` on a pooled connection and reads its reply.
    async fn forward(
        &self,
        addr: &str,
        session: &Session,
        args: &[Bytes],
    ) -> std::io::Result<Reply> {
        let mut replies = self.forward_many(addr, session, &[args]).await?;
        replies
            .pop()
            .ok_or_else(|| std::io::Error::other("no reply from the owner"))
    }

    /// Sends commands to the agent at `addr` pipelined on one pooled connection and
    /// reads their replies, in order.
    async fn forward_many(
        &self,
        addr: &str,
        session: &Session,
        commands: &[&[Bytes]],
    ) -> std::io::Result<Vec<Reply>> {
        let pooled = self.peers.lock().get_mut(addr).and_then(|v| v.pop());
        let mut conn = match pooled {
            Some(c) => c,
            None => self.connect(addr).await?,
        };
        let mut out = BytesMut::new();
        let select = conn.db != session.db;
        if select {
            encode_command(
                &[
                    Bytes::from_static(b"SELECT"),
                    Bytes::from(session.db.to_string()),
                ],
                &mut out,
            );
        }
        for args in commands {
            encode_command(args, &mut out);
        }
        let replies = tokio::time::timeout(FORWARD_TIMEOUT, async {
            conn.stream.write_all(&out).await?;
            if select {
                match conn.read_reply().await? {
                    Reply::Error(e) => {
                        return Err(std::io::Error::other(format!(
                            "the owner refused SELECT: {e}"
                        )));
                    }
                    _ => conn.db = session.db,
                }
            }
            let mut replies = Vec::with_capacity(commands.len());
            for _ in commands {
                replies.push(conn.read_reply().await?);
            }
            Ok(replies)
        })
        .await
        .map_err(|_| std::io::Error::other("the owner did not answer in time"))??;
        // Pooled only while the peer is in the map (it may have left meanwhile).
        let member = self
            .map()
            .is_some_and(|m| m.agents.iter().any(|a| a.listen == addr));
        let mut peers = self.peers.lock();
        let idle = peers.entry(addr.to_string()).or_default();
        if member && idle.len() < IDLE_PER_PEER {
            idle.push(conn);
        }
        Ok(replies)
    }

    /// Runs pipelined SETs of distinct keys (see `Engine::leading_sets`) where they
    /// belong: the ones this agent owns as one concurrent batch, the ones other agents
    /// own forwarded pipelined, one round trip per owner, all at once (writes of
    /// distinct keys commute); the rest (redirections in cluster mode, a slot that moved
    /// meanwhile) one at a time. Replies in command order.
    pub async fn set_run(
        &self,
        session: &mut Session,
        commands: &[Vec<Bytes>],
        peer: bool,
    ) -> Vec<Reply> {
        let engine = &self.engine;
        if self.map.read().is_none() {
            return engine.set_batch(session, commands).await;
        }
        let mut local = Vec::new();
        let mut remote: Vec<(String, Vec<usize>)> = Vec::new();
        for (i, c) in commands.iter().enumerate() {
            match self.route(c) {
                Route::Local => local.push(i),
                Route::Forward(addr) if !peer => {
                    match remote.iter_mut().find(|(a, _)| *a == addr) {
                        Some((_, v)) => v.push(i),
                        None => remote.push((addr, vec![i])),
                    }
                }
                // Redirections and the like: one at a time below.
                _ => {}
            }
        }
        let mut replies: Vec<Option<Reply>> = vec![None; commands.len()];
        {
            let shared: &Session = session;
            let local_cmds: Vec<Vec<Bytes>> = local.iter().map(|&i| commands[i].clone()).collect();
            let local_run = async {
                if local_cmds.is_empty() {
                    Vec::new()
                } else {
                    engine.set_batch(shared, &local_cmds).await
                }
            };
            let remote_runs = futures::future::join_all(remote.iter().map(|(addr, idx)| {
                let refs: Vec<&[Bytes]> = idx.iter().map(|&i| &commands[i][..]).collect();
                async move { self.forward_many(addr, shared, &refs).await }
            }));
            let (local_replies, remote_replies) = tokio::join!(local_run, remote_runs);
            for (&i, r) in local.iter().zip(local_replies) {
                // Fenced meanwhile (the slot moved): nothing was written; route it again.
                if !not_owner(&r) {
                    replies[i] = Some(r);
                }
            }
            for ((_, idx), got) in remote.iter().zip(remote_replies) {
                let Ok(got) = got else { continue };
                engine
                    .stats
                    .commands
                    .fetch_add(idx.len() as u64, Ordering::Relaxed);
                for (&i, r) in idx.iter().zip(got) {
                    if !redirected(&r) {
                        engine
                            .stats
                            .forwarded_commands
                            .fetch_add(1, Ordering::Relaxed);
                        replies[i] = Some(r);
                    }
                }
            }
        }
        let mut out = Vec::with_capacity(commands.len());
        for (i, r) in replies.into_iter().enumerate() {
            out.push(match r {
                Some(r) => r,
                None => {
                    Box::pin(self.execute(session, commands[i].clone(), peer))
                        .await
                        .0
                }
            });
        }
        out
    }

    /// The owner and length of the leading run of pipelined `commands` (at most `max`,
    /// at least two) that are writes this agent forwards to one and the same agent, so
    /// that [`forward_run`](Self::forward_run) sends them in one round trip. Proxy mode
    /// only, never on a connection of another agent.
    pub fn leading_forwards(
        &self,
        session: &Session,
        commands: &[Vec<Bytes>],
        max: usize,
        peer: bool,
    ) -> Option<(String, usize)> {
        if commands.len() < 2 || peer || !session.authenticated || self.mode != RoutingMode::Proxy {
            return None;
        }
        let owner = |args: &Vec<Bytes>| match args.is_empty() {
            true => None,
            false => match self.route(args) {
                Route::Forward(addr) => Some(addr),
                _ => None,
            },
        };
        let first = owner(&commands[0])?;
        let n = commands
            .iter()
            .take(max)
            .take_while(|c| owner(c).as_deref() == Some(first.as_str()))
            .count();
        (n >= 2).then_some((first, n))
    }

    /// Forwards a run found by [`leading_forwards`](Self::leading_forwards) to `addr` in
    /// one round trip. A reply saying the owner changed meanwhile (nothing was written)
    /// sends that command down the one-at-a-time path, which routes it again; so does a
    /// run whose connection failed.
    pub async fn forward_run(
        &self,
        session: &mut Session,
        addr: &str,
        commands: &[Vec<Bytes>],
    ) -> Vec<Reply> {
        let stats = &self.engine.stats;
        stats
            .commands
            .fetch_add(commands.len() as u64, Ordering::Relaxed);
        let refs: Vec<&[Bytes]> = commands.iter().map(|c| &c[..]).collect();
        let mut replies = Vec::with_capacity(commands.len());
        match self.forward_many(addr, session, &refs).await {
            Ok(got) => {
                for (args, reply) in commands.iter().zip(got) {
                    if redirected(&reply) {
                        replies.push(Box::pin(self.execute(session, args.clone(), false)).await.0);
                    } else {
                        stats.forwarded_commands.fetch_add(1, Ordering::Relaxed);
                        replies.push(reply);
                    }
                }
            }
            Err(e) => {
                tracing::debug!(%addr, error = %e, "forwarding a run failed; one at a time");
                for args in commands {
                    replies.push(Box::pin(self.execute(session, args.clone(), false)).await.0);
                }
            }
        }
        replies
    }

    async fn connect(&self, addr: &str) -> std::io::Result<PeerConn> {
        let stream = tokio::time::timeout(Duration::from_secs(2), TcpStream::connect(addr))
            .await
            .map_err(|_| std::io::Error::other("connecting timed out"))??;
        stream.set_nodelay(true)?;
        self.engine
            .stats
            .peer_connections
            .fetch_add(1, Ordering::Relaxed);
        let mut conn = PeerConn {
            stream,
            buf: BytesMut::with_capacity(4096),
            db: 0,
            engine: self.engine.clone(),
        };
        let mut out = BytesMut::new();
        if let Some(pw) = &self.password {
            encode_command(&[Bytes::from_static(b"AUTH"), pw.clone()], &mut out);
        }
        encode_command(&[Bytes::from_static(PEER_HELLO)], &mut out);
        conn.stream.write_all(&out).await?;
        if self.password.is_some()
            && let Reply::Error(e) = conn.read_reply().await?
        {
            return Err(std::io::Error::other(format!("peer refused AUTH: {e}")));
        }
        conn.read_reply().await?;
        tracing::debug!(%addr, "opened a forwarding connection");
        Ok(conn)
    }

    /// `CLUSTER ...`, `READONLY`, `READWRITE` and `ASKING`, answered from the map;
    /// `None` for every other command.
    async fn cluster_command(&self, session: &Session, args: &[Bytes]) -> Option<Reply> {
        let name = args[0].to_ascii_lowercase();
        let cluster = self.mode == RoutingMode::Cluster;
        let disabled = || Reply::err("ERR This instance has cluster support disabled");
        match name.as_slice() {
            b"readonly" | b"readwrite" | b"asking" => {
                Some(if cluster { Reply::ok() } else { disabled() })
            }
            b"cluster" if !cluster => Some(disabled()),
            b"cluster" => Some(self.cluster(session, args).await),
            _ => None,
        }
    }

    async fn cluster(&self, _session: &Session, args: &[Bytes]) -> Reply {
        let map = match self.map() {
            Some(m) => m,
            None => return Reply::err("ERR the agent has no cluster map yet"),
        };
        let me = self.me.load(Ordering::Acquire);
        let sub = args
            .get(1)
            .map(|a| a.to_ascii_lowercase())
            .unwrap_or_default();
        let arity = |n: usize| args.len() == n;
        let wrong = || {
            Reply::err(format!(
                "ERR unknown subcommand or wrong number of arguments for '{}'. Try CLUSTER HELP.",
                String::from_utf8_lossy(args.get(1).map(|a| &a[..]).unwrap_or(b""))
            ))
        };
        let ranges = owner_ranges(&map);
        match sub.as_slice() {
            b"myid" if arity(2) => Reply::Bulk(node_id(me).into()),
            b"keyslot" if arity(3) => Reply::Int(i64::from(key_slot(&args[2]))),
            b"slots" if arity(2) => Reply::Array(
                ranges
                    .iter()
                    .filter_map(|(first, last, owner)| {
                        let a = map.agent(*owner)?;
                        let (host, port) = split_addr(&a.listen);
                        Some(Reply::Array(vec![
                            Reply::Int(i64::from(*first)),
                            Reply::Int(i64::from(*last)),
                            Reply::Array(vec![
                                Reply::Bulk(host.into()),
                                Reply::Int(port),
                                Reply::Bulk(node_id(a.id).into()),
                            ]),
                        ]))
                    })
                    .collect(),
            ),
            b"shards" if arity(2) => Reply::Array(
                map.agents
                    .iter()
                    .map(|a| {
                        let (host, port) = split_addr(&a.listen);
                        let slots = ranges
                            .iter()
                            .filter(|r| r.2 == a.id)
                            .flat_map(|r| [Reply::Int(i64::from(r.0)), Reply::Int(i64::from(r.1))])
                            .collect();
                        let bulk = |s: &str| Reply::Bulk(Bytes::copy_from_slice(s.as_bytes()));
                        Reply::Map(vec![
                            (bulk("slots"), Reply::Array(slots)),
                            (
                                bulk("nodes"),
                                Reply::Array(vec![Reply::Map(vec![
                                    (bulk("id"), Reply::Bulk(node_id(a.id).into())),
                                    (bulk("port"), Reply::Int(port)),
                                    (bulk("ip"), bulk(&host)),
                                    (bulk("endpoint"), bulk(&host)),
                                    (bulk("role"), bulk("master")),
                                    (bulk("replication-offset"), Reply::Int(0)),
                                    (bulk("health"), bulk("online")),
                                ])]),
                            ),
                        ])
                    })
                    .collect(),
            ),
            b"nodes" if arity(2) => {
                let mut text = String::new();
                for a in &map.agents {
                    let flags = if a.id == me {
                        "myself,master"
                    } else {
                        "master"
                    };
                    let (host, port) = split_addr(&a.listen);
                    text.push_str(&format!(
                        "{} {host}:{port}@{} {flags} - 0 0 {} connected",
                        node_id(a.id),
                        port + 10000,
                        map.version
                    ));
                    for (first, last, owner) in &ranges {
                        if *owner == a.id {
                            if first == last {
                                text.push_str(&format!(" {first}"));
                            } else {
                                text.push_str(&format!(" {first}-{last}"));
                            }
                        }
                    }
                    text.push('\n');
                }
                Reply::Verbatim(text.into())
            }
            b"info" if arity(2) => {
                let assigned: u64 = ranges.iter().map(|r| u64::from(r.1 - r.0) + 1).sum();
                let state = if assigned == u64::from(HASH_SLOTS) {
                    "ok"
                } else {
                    "fail"
                };
                let text = format!(
                    "cluster_state:{state}\r\ncluster_slots_assigned:{assigned}\r\ncluster_slots_ok:{assigned}\r\n\
                     cluster_slots_pfail:0\r\ncluster_slots_fail:0\r\ncluster_known_nodes:{n}\r\n\
                     cluster_size:{n}\r\ncluster_current_epoch:{v}\r\ncluster_my_epoch:{v}\r\n\
                     cluster_stats_messages_sent:0\r\ncluster_stats_messages_received:0\r\n\
                     total_cluster_links_buffer_limit_exceeded:0\r\n",
                    n = map.agents.len(),
                    v = map.version
                );
                Reply::Verbatim(text.into())
            }
            b"countkeysinslot" if arity(3) => match parse_slot(&args[2]) {
                Some(slot) => match self.engine.dht.count_in_slot(slot).await {
                    Ok(n) => Reply::Int(n as i64),
                    Err(e) => dmc_engine::error_reply(e),
                },
                None => Reply::err("ERR Invalid slot"),
            },
            b"getkeysinslot" if arity(4) => {
                let (Some(slot), Some(count)) =
                    (parse_slot(&args[2]), dmc_engine::parse_i64(&args[3]))
                else {
                    return Reply::err("ERR Invalid slot or number of keys");
                };
                if count < 0 {
                    return Reply::err("ERR Invalid slot or number of keys");
                }
                match self.engine.dht.scan_slot(slot).await {
                    Ok(keys) => {
                        let mut keys: Vec<Bytes> = keys.into_iter().map(|(_, k)| k).collect();
                        keys.sort();
                        keys.dedup();
                        keys.truncate(count as usize);
                        Reply::Array(keys.into_iter().map(Reply::Bulk).collect())
                    }
                    Err(e) => dmc_engine::error_reply(e),
                }
            }
            _ => wrong(),
        }
    }
}

impl PeerConn {
    async fn read_reply(&mut self) -> std::io::Result<Reply> {
        loop {
            match redis_protocol::resp2::decode::decode(&self.buf) {
                Ok(Some((frame, used))) => {
                    let _ = self.buf.split_to(used);
                    return Ok(frame_to_reply(frame));
                }
                Ok(None) => {}
                Err(e) => return Err(std::io::Error::other(format!("bad reply from a peer: {e}"))),
            }
            self.buf.reserve(4096);
            if self.stream.read_buf(&mut self.buf).await? == 0 {
                return Err(std::io::Error::other("the peer closed the connection"));
            }
        }
    }
}

fn frame_to_reply(f: redis_protocol::resp2::types::OwnedFrame) -> Reply {
    use redis_protocol::resp2::types::OwnedFrame as F;
    match f {
        F::SimpleString(s) => match s.as_slice() {
            b"OK" => Reply::ok(),
            b"PONG" => Reply::Simple("PONG"),
            b"QUEUED" => Reply::Simple("QUEUED"),
            _ => Reply::Bulk(s.into()),
        },
        F::Error(e) => Reply::Error(e),
        F::Integer(i) => Reply::Int(i),
        F::BulkString(b) => Reply::Bulk(b.into()),
        F::Array(a) => Reply::Array(a.into_iter().map(frame_to_reply).collect()),
        F::Null => Reply::Null,
    }
}

fn encode_command(args: &[Bytes], out: &mut BytesMut) {
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

/// Argument positions of a command's keys from its table row (Redis's first key, last
/// key, step; a negative last key counts from the end).
fn key_positions(first: i32, last: i32, step: i32, argc: usize) -> Vec<usize> {
    if first <= 0 || step <= 0 || first as usize >= argc {
        return Vec::new();
    }
    let last = if last < 0 {
        argc as i32 + last
    } else {
        last.min(argc as i32 - 1)
    };
    (first..=last)
        .step_by(step as usize)
        .map(|i| i as usize)
        .collect()
}

fn first_key(args: &[Bytes]) -> usize {
    commands::lookup(&args[0])
        .map(|s| s.first_key.max(1) as usize)
        .unwrap_or(1)
        .min(args.len() - 1)
}

/// A write refused because this agent does not own the slot (anymore).
pub fn not_owner(reply: &Reply) -> bool {
    matches!(reply, Reply::Error(e) if e.starts_with(NOT_OWNER))
}

/// A reply saying the peer does not own the slot (its map or ours is behind).
fn redirected(reply: &Reply) -> bool {
    not_owner(reply) || matches!(reply, Reply::Error(e) if e.starts_with("MOVED "))
}

fn moved(slot: u16, addr: &str) -> Reply {
    Reply::err(format!("MOVED {slot} {addr}"))
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

/// A Redis Cluster node id (40 hex digits) for an agent.
fn node_id(id: AgentId) -> String {
    format!("{id:040x}")
}

fn split_addr(listen: &str) -> (String, i64) {
    match listen.rsplit_once(':') {
        Some((h, p)) => (h.to_string(), p.parse().unwrap_or(0)),
        None => (listen.to_string(), 0),
    }
}

fn parse_slot(arg: &[u8]) -> Option<u16> {
    dmc_engine::parse_i64(arg)
        .filter(|s| (0..i64::from(HASH_SLOTS)).contains(s))
        .map(|s| s as u16)
}

/// Maximal slot ranges with one owner: (first, last, agent).
fn owner_ranges(map: &ClusterMap) -> Vec<(u16, u16, AgentId)> {
    let mut out: Vec<(u16, u16, AgentId)> = Vec::new();
    for shard in &map.shards.shards {
        let Some(owner) = shard.primary else { continue };
        let r = map.shards.slots(shard.id);
        if r.is_empty() {
            continue;
        }
        match out.last_mut() {
            Some(last) if last.2 == owner && last.1 + 1 == r.start => last.1 = r.end - 1,
            _ => out.push((r.start, r.end - 1, owner)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_positions_follow_the_command_table() {
        assert_eq!(key_positions(1, 1, 1, 3), vec![1]); // SET k v
        assert_eq!(key_positions(1, -1, 2, 5), vec![1, 3]); // MSET a 1 b 2
        assert_eq!(key_positions(1, -1, 1, 4), vec![1, 2, 3]); // DEL a b c
        assert_eq!(key_positions(1, 2, 1, 3), vec![1, 2]); // RENAME a b
        assert!(key_positions(1, 1, 1, 1).is_empty()); // arity error: the engine says so
        assert!(key_positions(0, 0, 0, 2).is_empty());
    }

    #[test]
    fn owner_ranges_merge_adjacent_shards() {
        let mut shards = dmc_proto::shards::ShardMap::new(8);
        shards.assign(&[1, 2]);
        let map = ClusterMap {
            cluster_id: "c1".into(),
            version: 3,
            shards,
            agents: vec![],
            pool: dmc_proto::cluster::PoolSpec {
                transport: dmc_proto::cluster::PoolTransport::Shm,
                nodes: vec![],
                node_ids: vec![],
                replicas: 2,
                region_size: dmc_proto::ByteSize(1 << 30),
                segment_size: dmc_proto::ByteSize(16 << 20),
            },
            instance: Default::default(),
            draining: vec![],
        };
        let r = owner_ranges(&map);
        assert_eq!(r.first().map(|x| x.0), Some(0));
        assert_eq!(r.last().map(|x| x.1), Some(HASH_SLOTS - 1));
        let covered: u32 = r.iter().map(|x| u32::from(x.1 - x.0) + 1).sum();
        assert_eq!(covered, u32::from(HASH_SLOTS));
        assert!(
            r.windows(2)
                .all(|w| w[0].2 != w[1].2 && w[0].1 + 1 == w[1].0)
        );
    }

    #[test]
    fn replies_of_peers_decode() {
        let cases: [(&[u8], Reply); 4] = [
            (b"+OK\r\n", Reply::ok()),
            (b":3\r\n", Reply::Int(3)),
            (b"$-1\r\n", Reply::Null),
            (
                b"-MOVED 1 127.0.0.1:7000\r\n",
                Reply::err("MOVED 1 127.0.0.1:7000"),
            ),
        ];
        for (wire, want) in cases {
            let (f, n) = redis_protocol::resp2::decode::decode(wire)
                .unwrap()
                .unwrap();
            assert_eq!(n, wire.len());
            let got = frame_to_reply(f);
            assert_eq!(format!("{got:?}"), format!("{want:?}"));
        }
        assert!(redirected(&Reply::err("MOVED 1 x:1")));
        assert!(redirected(&Reply::err(format!(
            "{NOT_OWNER} 5 is owned by another agent"
        ))));
        assert!(!redirected(&Reply::err("ERR syntax error")));
    }
}
