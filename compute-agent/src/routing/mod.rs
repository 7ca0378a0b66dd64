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
//!
//! Which commands write, where their keys are, how a multi-key write splits and which
//! commands belong to the cluster all come from the engine's command table
//! ([`dmc_engine::table`]); this module never lists command names.
//!
//! | file | owns |
//! |---|---|
//! | `mod.rs` | the router, the route of one command, running it where it belongs |
//! | `acl.rs` | ACL changes stored at the manager, for every agent of the instance |
//! | `apply.rs` | installing a new cluster map; draining regions |
//! | `peers.rs` | pooled connections to other agents; forwarding single commands and runs |
//! | `cluster_cmds.rs` | CLUSTER, READONLY, READWRITE, ASKING answered from the map |
//! | `config_set.rs` | CONFIG SET of instance-wide settings through the manager |
//! | `functions.rs` | FUNCTION LOAD/DELETE/FLUSH/RESTORE and SCRIPT LOAD/FLUSH stored at the manager, for every agent |
//! | `transactions.rs` | MULTI/EXEC: queued here, run where all the keys are owned |
//! | `pubsub.rs` | PUBLISH and PUBSUB's counts on every agent of the instance |
//! | `relay.rs` | keyspace notifications, PUBLISH in EXEC/scripts and changed keys to the other agents |
//! | `tracking.rs` | CLIENT TRACKING across agents: announcing trackers, taking invalidations |
//! | `warm.rs` | feeding the backup agents of this agent's shards; `DMC.WARM` from primaries |

mod acl;
mod apply;
mod cluster_cmds;
mod config_set;
mod functions;
mod peers;
mod pubsub;
mod relay;
mod tracking;
mod transactions;
mod warm;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use dmc_dht::hash::key_slot;
use dmc_engine::table::{self, Family};
use dmc_engine::{Engine, Flow, NOT_OWNER, Session};
use dmc_proto::cluster::ClusterMap;
use dmc_resp::Reply;
use parking_lot::{Mutex, RwLock};
use serde::{Deserialize, Serialize};

use peers::PeerConn;

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

/// How long a command may keep waiting for the cluster map (or a takeover) to settle
/// before it answers TRYAGAIN. Time, not a count of tries: while many slots change
/// hands (a scale-in), every other slot's takeover wakes the waiting command too, and a
/// count would run out before its own slot is taken over.
const ROUTE_PATIENCE: Duration = Duration::from_secs(10);
/// A bound on the tries within that time.
const ATTEMPTS: usize = 256;

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

pub struct Router {
    engine: Arc<Engine>,
    mode: RoutingMode,
    /// Adds memory nodes the cluster gained to the pool (`pool.rs`).
    dialer: std::sync::OnceLock<Arc<crate::pool::NodeDialer>>,
    /// Takeovers completed (slots assigned) so far, and a wake-up for each: a
    /// command refused while this agent was taking its slot over retries at once.
    taken_over: AtomicU64,
    takeover: tokio::sync::Notify,
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
    /// Held while a map is applied, and by a shard takeover between checking that the
    /// shard is still this agent's and taking it, so a newer map cannot slip between.
    applying: tokio::sync::Mutex<()>,
    /// Forward to peers' TLS ports with this (when they have one).
    peer_tls: Option<tokio_rustls::TlsConnector>,
    /// Cache updates for the backup agents of the shards this agent is primary of.
    warm: Arc<warm::WarmFeed>,
}

impl Router {
    pub fn new(
        engine: Arc<Engine>,
        mode: RoutingMode,
        password: Option<Bytes>,
        manager: Option<String>,
        peer_tls: Option<tokio_rustls::TlsConnector>,
    ) -> Router {
        let warm = Arc::new(warm::WarmFeed::new(Arc::downgrade(&engine)));
        engine.set_cache_feed(warm.clone());
        Router {
            dialer: std::sync::OnceLock::new(),
            taken_over: AtomicU64::new(0),
            takeover: tokio::sync::Notify::new(),
            warm,
            peer_tls,
            manager,
            draining: Mutex::new(Vec::new()),
            vacating: tokio::sync::Mutex::new(()),
            applying: tokio::sync::Mutex::new(()),
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

    /// How to reach memory nodes the maps name that the pool does not yet.
    pub(crate) fn set_dialer(&self, dialer: Arc<crate::pool::NodeDialer>) {
        let _ = self.dialer.set(dialer);
    }

    pub fn mode(&self) -> RoutingMode {
        self.mode
    }

    pub fn map(&self) -> Option<Arc<ClusterMap>> {
        self.map.read().clone()
    }

    fn version(&self) -> u64 {
        *self.version.borrow()
    }

    /// Waits (at most `wait`) for a map newer than `seen`.
    async fn newer_map(&self, seen: u64, wait: Duration) {
        let mut rx = self.version.subscribe();
        let _ = tokio::time::timeout(wait, rx.wait_for(|v| *v > seen)).await;
    }

    /// Waits (at most `wait`) for a map newer than `seen`, or for a takeover of slots
    /// after the `taken` count (a slot this agent owns in its map but had not taken
    /// over yet answers "not the owner" until then).
    async fn newer_map_or_takeover(&self, seen: u64, taken: u64, wait: Duration) {
        let woken = self.takeover.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        if self.taken_over.load(Ordering::Acquire) != taken {
            return;
        }
        tokio::select! {
            _ = self.newer_map(seen, wait) => {}
            _ = woken => {}
        }
    }

    /// FLUSHALL, FLUSHDB and DBSIZE in proxy mode: this agent runs the command for the
    /// slots it owns and asks every other agent to run it for theirs; the first error
    /// is the answer, integers (DBSIZE) are added up, else this agent's reply. CONFIG
    /// SET notify-keyspace-events goes everywhere too: every agent announces its keys.
    async fn everywhere(
        &self,
        session: &mut Session,
        index: Option<usize>,
        args: Vec<Bytes>,
    ) -> (Reply, Flow) {
        let (mut reply, flow) = self.engine.execute_at(session, index, args.clone()).await;
        if matches!(reply, Reply::Error(_)) {
            return (reply, flow);
        }
        for addr in self.other_agents() {
            match self.forward(&addr, session, &args).await {
                Ok(Reply::Error(e)) => return (Reply::Error(e), flow),
                Ok(Reply::Int(n)) => {
                    if let Reply::Int(total) = &mut reply {
                        *total += n;
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    return (
                        Reply::err(format!("ERR agent {addr} did not answer: {e}")),
                        flow,
                    );
                }
            }
        }
        (reply, flow)
    }

    /// The addresses of the instance's other agents in the current map.
    fn other_agents(&self) -> Vec<String> {
        let me = self.me.load(Ordering::Acquire);
        self.map()
            .map(|m| {
                m.agents
                    .iter()
                    .filter(|a| a.id != me)
                    .map(|a| a.listen.clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// This agent's address in the current map (what the others dial).
    fn my_address(&self) -> Option<String> {
        let me = self.me.load(Ordering::Acquire);
        self.map()?
            .agents
            .iter()
            .find(|a| a.id == me)
            .map(|a| a.listen.clone())
    }

    /// Counts a completed takeover and wakes the commands waiting for one.
    fn took_over(&self) {
        self.taken_over.fetch_add(1, Ordering::AcqRel);
        self.takeover.notify_waiters();
    }

    /// Where `args` runs, from the command table: reads, commands without keys and
    /// commands of the wrong arity run here (the engine answers the arity error); a
    /// write runs at the owner of its keys' slots.
    fn route(&self, args: &[Bytes]) -> Route {
        self.route_spec(args.first().and_then(|name| table::lookup(name)), args)
    }

    /// [`route`](Self::route) of a command already looked up.
    fn route_spec(&self, spec: Option<&'static table::Spec>, args: &[Bytes]) -> Route {
        let guard = self.map.read();
        let Some(map) = guard.as_ref() else {
            return Route::Local;
        };
        let Some(spec) = spec else {
            return Route::Local;
        };
        // Writes run on their keys' owner, and so do blocking reads (XREAD BLOCK):
        // only the owner sees the writes that wake them.
        let blocking_read = spec.cmd == table::Cmd::Stream(table::StreamCmd::XRead)
            && dmc_engine::blocking::stream_block(args).is_some();
        if !(spec.is_write() || blocking_read) || !spec.arity_ok(args.len()) {
            return Route::Local;
        }
        let keys = spec.key_positions(args);
        let Some(&first_key) = keys.first() else {
            return Route::Local;
        };
        let me = self.me.load(Ordering::Acquire);
        // Owner address per key (`None`: this agent, or a slot with no owner yet,
        // which the engine refuses on its own).
        let owner = |i: usize| {
            let slot = key_slot(&args[i]);
            let o = map.owner(slot).filter(|a| a.id != me);
            (slot, o.map(|a| a.listen.clone()))
        };
        let (slot0, first) = owner(first_key);
        if keys[1..].iter().all(|&i| owner(i).1 == first) {
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
        let Some(width) = spec.split_width() else {
            return Route::CrossSlot;
        };
        let mut parts: Vec<(Option<String>, Vec<Bytes>)> = Vec::new();
        for &i in &keys {
            // A key group cut short (MSET with an odd number of arguments): the engine
            // answers the arity error here, nothing is split.
            let Some(group) = args.get(i..i + width) else {
                return Route::Local;
            };
            let addr = owner(i).1;
            match parts.iter_mut().find(|(a, _)| *a == addr) {
                Some((_, part)) => part.extend(group.iter().cloned()),
                None => {
                    let mut part = vec![args[0].clone()];
                    part.extend(group.iter().cloned());
                    parts.push((addr, part));
                }
            }
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
        let index = args.first().and_then(|name| table::lookup_index(name));
        self.execute_at(session, index, args, peer).await
    }

    /// [`execute`](Self::execute) of a command the caller looked up already: `index`
    /// is its row in the command table.
    pub async fn execute_at(
        &self,
        session: &mut Session,
        index: Option<usize>,
        args: Vec<Bytes>,
        peer: bool,
    ) -> (Reply, Flow) {
        if self.map.read().is_none() || !session.authenticated {
            return self.engine.execute_at(session, index, args).await;
        }
        let spec = index.and_then(|i| table::TABLE.get(i));
        if spec.is_some_and(|s| s.cmd == table::Cmd::Client)
            && args
                .get(1)
                .is_some_and(|a| a.eq_ignore_ascii_case(b"TRACKING"))
        {
            let done = self.engine.execute_at(session, index, args).await;
            Box::pin(self.after_client_tracking(session)).await;
            return done;
        }
        // The client's ACL user decides here, before anything is forwarded (the agent
        // a command is forwarded to trusts its peers).
        if !peer
            && let Some(spec) = spec.filter(|s| s.arity_ok(args.len()))
            && let Err(refused) = self.engine.acl_check(session, spec, &args)
        {
            if session.tx.in_multi() {
                session.tx.dirty = true;
            }
            return refused;
        }
        if let Some(spec) = spec.filter(|s| s.family() == Family::Cluster && s.arity_ok(args.len()))
        {
            return (
                self.cluster_command(session, spec.cmd, &args).await,
                Flow::Continue,
            );
        }
        if let Some(done) = Box::pin(self.config_set_requirepass(session, &args)).await {
            return done;
        }
        if let Some(done) = self.config_set(session, &args).await {
            return done;
        }
        if spec.is_some_and(|s| s.cmd == table::Cmd::Acl && s.arity_ok(args.len()))
            && let Some(done) = Box::pin(self.acl(session, &args)).await
        {
            return done;
        }
        if spec.is_some_and(|s| {
            matches!(s.cmd, table::Cmd::Function | table::Cmd::Script) && s.arity_ok(args.len())
        }) && let Some(done) = Box::pin(self.kept_change(session, index, &args, peer)).await
        {
            return done;
        }
        if let Some(done) = self.transaction(session, spec, index, &args, peer).await {
            return done;
        }
        // Boxed: its state (a loop over peers) would otherwise grow every command's
        // future, and every idle connection holds one.
        if spec.is_some_and(|s| s.family() == Family::PubSub)
            && let Some(done) = Box::pin(self.pubsub(session, spec, index, &args, peer)).await
        {
            return done;
        }
        // Commands about the whole keyspace, which each agent answers for the slots
        // it owns: in proxy mode the client's agent asks every agent and adds up.
        let everywhere = spec.is_some_and(|s| match s.cmd {
            table::Cmd::FlushAll | table::Cmd::FlushDb | table::Cmd::Dbsize => true,
            // Keys change on the agent owning them: every agent announces them.
            table::Cmd::Config => {
                args.get(1)
                    .is_some_and(|sub| sub.eq_ignore_ascii_case(b"SET"))
                    && args
                        .iter()
                        .skip(2)
                        .step_by(2)
                        .any(|name| name.eq_ignore_ascii_case(b"notify-keyspace-events"))
            }
            _ => false,
        });
        if everywhere
            && !peer
            && self.mode == RoutingMode::Proxy
            && spec.is_some_and(|s| s.arity_ok(args.len()))
        {
            return self.everywhere(session, index, args).await;
        }
        let patience = std::time::Instant::now() + ROUTE_PATIENCE;
        for attempt in 0..ATTEMPTS {
            let last = attempt + 1 == ATTEMPTS || std::time::Instant::now() >= patience;
            let seen = self.version();
            match self.route_spec(spec, &args) {
                Route::Local => {
                    let taken = self.taken_over.load(Ordering::Acquire);
                    let (reply, flow) = self.engine.execute_at(session, index, args.clone()).await;
                    if !last && not_owner(&reply) {
                        // Fenced: a newer map moved the slot, or this agent is still
                        // taking it over. Nothing was written.
                        self.newer_map_or_takeover(seen, taken, Duration::from_millis(500))
                            .await;
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
}

/// The position of the first key of a routed command (a routed command has one).
fn first_key(args: &[Bytes]) -> usize {
    args.first()
        .and_then(|name| table::lookup(name))
        .and_then(|spec| spec.key_positions(args).first().copied())
        .unwrap_or(0)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redirections_are_recognised() {
        assert!(redirected(&Reply::err("MOVED 1 x:1")));
        assert!(redirected(&Reply::err(format!(
            "{NOT_OWNER} 5 is owned by another agent"
        ))));
        assert!(!redirected(&Reply::err("ERR syntax error")));
    }
}
