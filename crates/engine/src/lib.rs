//! The cache engine: Redis commands executed over the shared hash table.
//!
//! | module | owns |
//! |---|---|
//! | [`cache`] | the local DRAM cache: inclusive, write-through, hotness-aware admission |
//! | [`table`] | the command table: name, arity, flags, key positions, family, routing |
//! | [`dispatch`] | arity and auth checks, then the family that runs a command |
//! | [`pipeline`] | pipelined runs of GET or SET executed as one batch |
//! | [`read`] | reads (the local cache, then the pool) and telling the cache of writes |
//! | [`multi`] | MULTI/EXEC/WATCH, and the one commit of a transaction's or script's writes |
//! | [`tx_gate`] | this agent's commits in flight, for MGET's snapshot |
//! | [`strings`] | GET, SET and the string family |
//! | [`hashes`] | HSET, HGET and the hash family |
//! | [`lists`] | LPUSH, LRANGE and the list family |
//! | [`sets`] | SADD, SINTER and the set family |
//! | [`zsets`] | ZADD, ZRANGE and the sorted set family |
//! | [`blocking`] | blocked clients (BLPOP and kin): waiting, waking, timeouts |
//! | [`collection`] | what the collection families share: typed reads, changes, limits |
//! | [`packed`] | the compact encoding of a collection in the pool (a wire format) |
//! | [`tree`] | large collections: copy-on-write B+-trees of pool chunks |
//! | [`big`] | changes and reads of a collection stored packed or as a tree |
//! | [`keys`] | DEL, EXISTS, EXPIRE, TTL and the keyspace family |
//! | [`server`] | connection and server commands: PING, HELLO, SELECT, INFO, CONFIG, COMMAND |
//! | [`warm`] | backup agents' warm caches: the primary's feed, takeover revalidation |
//!
//! The engine never touches bytes on the wire: it takes parsed arguments and returns a
//! [`Reply`](dmc_resp::Reply). Writes are acknowledged only after the pool committed
//! them; the local cache is told afterwards (write-through).

/// Unwraps a result whose error is already the command's reply, returning the reply.
macro_rules! or_reply {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(r) => return r,
        }
    };
}

pub mod acl;
pub mod acl_cmd;
pub mod big;
pub mod bitmaps;
pub mod blocking;
pub mod cache;
pub mod client_cmd;
pub mod clients;
pub mod collection;
pub(crate) mod combine;
pub mod debug;
pub mod dispatch;
pub mod docs;
pub mod dump;
pub mod durability;
pub mod geo;
pub mod glob;
pub mod hashes;
pub mod hll;
pub mod hyperloglog;
pub mod introspect;
pub mod keys;
pub mod limits;
pub mod lists;
pub mod monitor;
pub mod multi;
pub mod notify;
pub mod packed;
pub mod pause;
pub mod pipeline;
pub mod pubsub;
pub mod rdb;
pub mod read;
pub mod relay;
pub mod scripting;
pub mod server;
pub mod sets;
pub mod slowlog;
pub mod sort;
pub mod stats;
pub mod streams;
pub mod strings;
pub mod subcommands;
pub mod table;
pub mod tracking;
pub mod tree;
pub mod tx_gate;
pub mod warm;
pub mod zsets;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use bytes::Bytes;
use dmc_dht::{Clock, Dht, DhtError};
use dmc_resp::Reply;

pub use dmc_dht as dht;
pub use stats::Stats;

/// Settings the engine serves from `CONFIG GET` and `INFO`.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    pub databases: u8,
    pub port: u16,
    pub requirepass: Option<Bytes>,
    pub maxclients: u64,
    pub proto_max_bulk_len: u64,
    pub client_query_buffer_limit: u64,
    pub output_limits: limits::OutputLimits,
    /// Bytes of the local DRAM cache (0: none).
    pub local_cache_bytes: usize,
    /// Close clients idle this many seconds (0: never).
    pub timeout_secs: u64,
    /// Redis Cluster mode (INFO `cluster_enabled:1`).
    pub cluster_enabled: bool,
    /// The cluster's cache instance this agent serves (INFO `dmc_instance`).
    pub instance: String,
    /// `enable-debug-command`: who may run DEBUG.
    pub debug_command: debug::Access,
    /// `aclfile`: the users, read at start and by ACL LOAD, written by ACL SAVE.
    pub aclfile: Option<std::path::PathBuf>,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            databases: 16,
            port: 6379,
            requirepass: None,
            maxclients: 10_000,
            proto_max_bulk_len: 512 << 20,
            client_query_buffer_limit: 1 << 30,
            output_limits: limits::OutputLimits::default(),
            local_cache_bytes: 64 << 20,
            timeout_secs: 0,
            cluster_enabled: false,
            instance: "default".into(),
            debug_command: debug::Access::No,
            aclfile: None,
        }
    }
}

/// One client connection's state.
#[derive(Debug, Clone)]
pub struct Session {
    pub id: u64,
    pub db: u8,
    pub proto: u8,
    pub authenticated: bool,
    /// The ACL user the connection runs as ([`acl_cmd`]) ...
    pub user: Arc<acl::User>,
    /// ... as of this generation of the users.
    pub acl_generation: u64,
    /// Another agent of the cluster (`DMC.PEER`).
    pub peer: bool,
    /// A peer session running a client's commands as that client's user (`DMC.USER`):
    /// checked here as any client is — scripts' calls, SORT's patterns and what a
    /// forwarded command reaches are this agent's to check. Without it a peer session
    /// runs the agent's own commands, unchecked.
    pub acts_for_client: bool,
    /// The connection's record in the client registry (name, kill signal, ...).
    pub client: Arc<clients::Client>,
    /// `CLIENT REPLY OFF`.
    pub reply_off: bool,
    /// Replies still to drop: `CLIENT REPLY SKIP` drops its own and the next one.
    pub skip_replies: u8,
    /// MULTI's queue and WATCHed keys ([`multi`]).
    pub tx: multi::TxState,
    /// Subscribed to a channel, pattern or shard channel ([`pubsub`]): a RESP2
    /// client is in subscribed mode.
    pub subscribed: bool,
    /// Where this client's messages wait: set by its first subscription (or MONITOR),
    /// kept until the connection wrote what it holds after the last unsubscription.
    pub mailbox: Option<Arc<pubsub::Mailbox>>,
    /// After MONITOR ([`monitor`]).
    pub monitoring: bool,
    /// A script's session: its commands show as `lua` in MONITOR.
    pub in_script: bool,
    /// CLIENT TRACKING's options while it is on (boxed: most clients never track).
    pub tracking: Option<Box<tracking::Mode>>,
    /// On a peer connection: the NOLOOP tracker (agent address, client id) the next
    /// command was forwarded for (`DMC.ORIGIN`).
    pub origin: Option<(Bytes, u64)>,
    /// When the connection began running the current command, for the slow log (the
    /// connection reads the clock per command anyway; dispatch takes it) ...
    pub started: Option<std::time::Instant>,
    /// ... and how long the command ran, measured once by dispatch for both the slow log
    /// and the connection's latency metric.
    pub took: Option<std::time::Duration>,
}

impl Session {
    /// Whether the reply of the command that just ran goes to the client
    /// (`CLIENT REPLY`); call once per command.
    pub fn should_reply(&mut self) -> bool {
        if self.skip_replies > 0 {
            self.skip_replies -= 1;
            return false;
        }
        !self.reply_off
    }

    /// Whether the pipelined fast paths may take this client's commands: it is
    /// authenticated, not queuing a MULTI, not tracking keys (its reads are
    /// remembered by dispatch), and not in RESP2 subscribed mode (each of
    /// its commands is checked by [`dispatch`]); [`Engine::plain`] adds its ACL user.
    pub fn plain(&self) -> bool {
        self.authenticated
            && !self.tx.in_multi()
            && !(self.subscribed && self.proto < 3)
            && self.tracking.is_none()
    }
}

/// A key's write lock, held until dropped (or held already by the EXEC this command
/// runs in).
pub enum KeyGuard<'a> {
    Locked(tokio::sync::MutexGuard<'a, ()>),
    Held,
}

/// What the connection does after a reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    Continue,
    /// Send the reply, then close (QUIT).
    Close,
}

pub struct Engine {
    pub dht: Arc<Dht>,
    pub clock: Arc<dyn Clock>,
    pub config: EngineConfig,
    pub stats: Stats,
    pub cache: Option<Arc<cache::LocalCache>>,
    pub clients: clients::Clients,
    /// Client limits (`maxclients`, buffer limits), changed by CONFIG SET.
    pub limits: limits::ClientLimits,
    /// Idle clients are closed after this many seconds (0: never), Redis's `timeout`.
    pub timeout_secs: AtomicU64,
    /// A random 40-hex-digit id of this process's run (INFO `run_id`).
    pub run_id: String,
    started: Instant,
    next_client: AtomicU64,
    /// Read-modify-write commands of one key run one at a time on this agent (the agent
    /// is the only writer of its hash slots, so this makes INCR and friends atomic).
    /// tokio's mutex: first come, first served, so a writer waiting for a hot key's
    /// stripe is not starved by the inline writers that `try_lock` it. (`futures`'
    /// mutex releases with one atomic instead of a mutex of waiters, a little cheaper
    /// per write, but lets a newcomer take the stripe ahead of a woken waiter, without
    /// bound.)
    /// Each in an `Arc`, so a script can hold a stripe it took mid-run until its commit
    /// ([`multi::claim_for_script`]).
    key_locks: Vec<Arc<tokio::sync::Mutex<()>>>,
    /// Clients blocked on keys (BLPOP and kin) and the pushes that wake them.
    pub blocking: blocking::Blocking,
    /// The ACL users this agent checks commands against, and its ACL log.
    pub acl: acl_cmd::AclState,
    /// This agent's transactions committing, for MGET's snapshot.
    pub(crate) commits: tx_gate::CommitGate,
    /// Where cache updates of shards with backup agents go (cluster members).
    cache_feed: std::sync::OnceLock<Arc<dyn warm::CacheFeed>>,
    /// This engine, for tasks it starts (same-key batch workers).
    me: std::sync::Weak<Engine>,
    /// Lua scripts seen, by SHA-1.
    pub scripts: scripting::Scripts,
    /// FUNCTION's libraries.
    pub functions: scripting::functions::Functions,
    /// Same-key batches of list changes.
    pub(crate) list_batches: combine::Combiner<lists::ListOp>,
    /// Same-key batches of set changes (SADD, SREM).
    pub(crate) set_batches: combine::Combiner<sets::SetOp>,
    /// Same-key batches of hash changes (HSET, HDEL).
    pub(crate) hash_batches: combine::Combiner<hashes::HashOp>,
    /// Same-key batches of sorted set changes.
    pub(crate) zset_batches: combine::Combiner<zsets::ZSetOp>,
    /// XADDs waiting to be combined, per stream.
    pub(crate) xadd_batches: combine::Combiner<streams::XAddOp>,
    /// In-place string edits (SETBIT, APPEND, SETRANGE, BITFIELD) waiting to be
    /// combined, per key.
    pub(crate) string_edits: combine::Combiner<strings::edit::StringEdit>,
    /// SETs and counter changes that found their key taken, waiting to be combined.
    pub(crate) string_writes: combine::Combiner<strings::combined::StringWrite>,
    /// PFADDs waiting to be combined, per key.
    pub(crate) pfadd_batches: combine::Combiner<hyperloglog::PfAddOp>,
    /// This agent's subscribers.
    pub pubsub: pubsub::PubSub,
    /// The slow log and the latency monitor.
    pub slowlog: slowlog::SlowLog,
    /// CLIENT PAUSE.
    pub pause: pause::Pause,
    /// `notify-keyspace-events`.
    pub notifications: notify::Notifications,
    /// Messages this agent publishes outside a client's PUBLISH, for the other agents.
    pub relay: relay::Relay,
    /// CLIENT TRACKING.
    pub tracking: tracking::Tracking,
}

const KEY_LOCKS: usize = 1024;
/// Share of cache hits with a stale pool reference that re-read the pool to refresh it.
const REFRESH_ODDS: f64 = 1.0 / 16.0;

impl Engine {
    pub fn new(dht: Arc<Dht>, clock: Arc<dyn Clock>, config: EngineConfig) -> Arc<Engine> {
        let cache = (config.local_cache_bytes > 0)
            .then(|| Arc::new(cache::LocalCache::new(config.local_cache_bytes)));
        let limits = limits::ClientLimits::new(
            config.proto_max_bulk_len,
            config.client_query_buffer_limit,
            config.maxclients,
            config.output_limits,
        );
        use acl::Users;
        let acl = acl_cmd::AclState::new(config.requirepass.as_deref(), config.aclfile.clone())
            .unwrap_or_else(|e| {
                // The agent checks its aclfile before it starts: only a file changed since.
                tracing::error!(error = %e, "the aclfile cannot be loaded; only the default user exists");
                acl_cmd::AclState::with_users(Users::new(config.requirepass.as_deref()), None)
            });
        let engine = Arc::new_cyclic(|me| Engine {
            me: me.clone(),
            list_batches: combine::Combiner::default(),
            scripts: scripting::Scripts::default(),
            functions: scripting::functions::Functions::default(),
            set_batches: combine::Combiner::default(),
            hash_batches: combine::Combiner::default(),
            zset_batches: combine::Combiner::default(),
            xadd_batches: combine::Combiner::default(),
            pfadd_batches: combine::Combiner::default(),
            string_edits: combine::Combiner::default(),
            string_writes: combine::Combiner::default(),
            pubsub: pubsub::PubSub::default(),
            slowlog: slowlog::SlowLog::default(),
            pause: pause::Pause::default(),
            cache,
            dht,
            clock,
            timeout_secs: AtomicU64::new(config.timeout_secs),
            config,
            stats: Stats::default(),
            clients: clients::Clients::default(),
            limits,
            run_id: dmc_proto::rng::hex_id(40),
            started: Instant::now(),
            next_client: AtomicU64::new(1),
            key_locks: (0..KEY_LOCKS)
                .map(|_| Arc::new(tokio::sync::Mutex::new(())))
                .collect(),
            cache_feed: std::sync::OnceLock::new(),
            blocking: blocking::Blocking::default(),
            commits: tx_gate::CommitGate::default(),
            acl,
            notifications: notify::Notifications::default(),
            relay: relay::Relay::default(),
            tracking: tracking::Tracking::new(),
        });
        // Keys the table evicts or reclaims leave the cache too (it stays inclusive),
        // and are announced.
        let me = Arc::downgrade(&engine);
        engine.dht.on_removed(move |db, key, why| {
            if let Some(engine) = me.upgrade() {
                engine.removed(db, key, why);
            }
        });
        engine
    }

    /// A new connection's session, registered for `CLIENT LIST`/`KILL` until the
    /// caller unregisters it from [`clients`](Self::clients). `addr` and `laddr` are
    /// the peer's and our address as `ip:port`.
    pub fn new_session(&self, addr: String, laddr: String, fd: i64) -> Session {
        let id = self.next_client.fetch_add(1, Ordering::Relaxed);
        let (user, acl_generation, authenticated) = acl_cmd::initial(self);
        Session {
            id,
            db: 0,
            proto: 2,
            authenticated,
            user,
            acl_generation,
            peer: false,
            acts_for_client: false,
            client: self.clients.register(id, addr, laddr, fd),
            reply_off: false,
            skip_replies: 0,
            tx: multi::TxState::default(),
            subscribed: false,
            mailbox: None,
            monitoring: false,
            in_script: false,
            tracking: None,
            origin: None,
            started: None,
            took: None,
        }
    }

    pub fn uptime_secs(&self) -> u64 {
        self.started.elapsed().as_secs()
    }

    /// Key-lock stripe `stripe` (a script takes it as its own, [`multi::claim_for_script`]).
    pub(crate) fn key_lock(&self, stripe: usize) -> Option<&Arc<tokio::sync::Mutex<()>>> {
        self.key_locks.get(stripe)
    }

    /// The stripe of the key locks `key` belongs to.
    pub(crate) fn key_stripe(key: &[u8]) -> usize {
        (dmc_dht::hash::key_hash(0, key) % KEY_LOCKS as u64) as usize
    }

    /// Takes `key`'s write lock: at once when it is free (no future to build, poll
    /// and drop: most writes find their stripe free), else in turn; inside an EXEC that
    /// holds the stripe already ([`multi::held`]), nothing to take.
    pub(crate) async fn lock_key(&self, key: &[u8]) -> KeyGuard<'_> {
        match self.try_lock_key(key) {
            Some(guard) => guard,
            None => KeyGuard::Locked(self.key_locks[Self::key_stripe(key)].lock().await),
        }
    }

    /// [`lock_key`](Self::lock_key) if that takes no waiting; `None` when another
    /// writer holds the key's stripe.
    pub(crate) fn try_lock_key(&self, key: &[u8]) -> Option<KeyGuard<'_>> {
        let stripe = Self::key_stripe(key);
        if multi::held(stripe) {
            return Some(KeyGuard::Held);
        }
        self.key_locks[stripe].try_lock().ok().map(KeyGuard::Locked)
    }

    /// Starts loading `key`'s lock stripe into the cache (a hint).
    pub(crate) fn prefetch_key_lock(&self, key: &[u8]) {
        if let Some(lock) = self.key_locks.get(Self::key_stripe(key)) {
            dmc_verbs::memory::prefetch_line(Arc::as_ptr(lock).cast());
        }
    }

    /// The stored database behind the logical one a client selected (see SWAPDB).
    pub fn physical_db(&self, db: u8) -> u8 {
        self.dht.physical_db(db)
    }

    /// The write locks of many keys, taken in stripe order (so two multi-key writers
    /// cannot deadlock), each stripe once; stripes an EXEC holds already are skipped.
    pub async fn lock_keys<'a>(&self, keys: impl Iterator<Item = &'a [u8]>) -> Vec<KeyGuard<'_>> {
        let mut stripes: Vec<usize> = keys.map(Self::key_stripe).collect();
        stripes.sort_unstable();
        stripes.dedup();
        let mut held = Vec::with_capacity(stripes.len());
        for i in stripes {
            if multi::held(i) {
                continue;
            }
            held.push(KeyGuard::Locked(self.key_locks[i].lock().await));
        }
        held
    }

    /// The stripes of `keys`, sorted and each once (what [`Engine::lock_keys`] takes).
    pub(crate) fn stripes_of<'a>(keys: impl Iterator<Item = &'a [u8]>) -> Vec<usize> {
        let mut stripes: Vec<usize> = keys.map(Self::key_stripe).collect();
        stripes.sort_unstable();
        stripes.dedup();
        stripes
    }

    pub fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }
}

/// The one place pool and table failures become RESP errors.
pub fn error_reply(e: DhtError) -> Reply {
    match e {
        DhtError::OutOfMemory => {
            Reply::err("OOM command not allowed when used memory > 'maxmemory'.")
        }
        DhtError::NotOwner(slot) => {
            Reply::err(format!("{NOT_OWNER} {slot} is owned by another agent"))
        }
        DhtError::LeaseExpired | DhtError::Pool(dmc_umo::UmoError::LeaseLapsed) => Reply::err(
            "TRYAGAIN this agent's lease lapsed (the cluster manager does not answer); writes resume when it does",
        ),
        DhtError::Contention(_) => {
            Reply::err("TRYAGAIN too much contention on this key, try again")
        }
        DhtError::Pool(dmc_umo::UmoError::TooLarge(_)) => {
            Reply::err("ERR string exceeds maximum allowed size (proto-max-bulk-len)")
        }
        DhtError::Pool(dmc_umo::UmoError::Frozen(_)) => Reply::err(
            "TRYAGAIN the key's memory region is being moved; nothing was written, try again",
        ),
        DhtError::WrongType => Reply::err(WRONGTYPE),
        DhtError::Unsupported(text) => Reply::err(format!("ERR {text}")),
        other => Reply::err(format!("ERR memory pool: {other}")),
    }
}

/// An argument in upper case (subcommand and option names), lossy for non-UTF-8.
pub(crate) fn upper(arg: &[u8]) -> String {
    String::from_utf8_lossy(arg).to_ascii_uppercase()
}

/// Parses a Redis integer argument.
pub fn parse_i64(arg: &[u8]) -> Option<i64> {
    let s = std::str::from_utf8(arg).ok()?;
    if s.is_empty()
        || s.len() > 20
        || s.starts_with('+')
        || (s.len() > 1 && s.starts_with('0'))
        || s.starts_with("-0")
    {
        return None;
    }
    s.parse().ok()
}

/// How a write to a hash slot this agent does not (or no longer) own is refused; the
/// agent's router recognises it and re-routes the command under a newer cluster map.
pub const NOT_OWNER: &str = "TRYAGAIN hash slot";

pub const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";
pub const NOT_INTEGER: &str = "ERR value is not an integer or out of range";
pub const SYNTAX: &str = "ERR syntax error";
