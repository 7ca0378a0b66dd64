//! The cache engine: Redis commands executed over the shared hash table.
//!
//! | module | owns |
//! |---|---|
//! | [`commands`] | the command table: name, arity, flags, key positions; dispatch |
//! | [`strings`] | GET, SET and the string family |
//! | [`keys`] | DEL, EXISTS, EXPIRE, TTL and the keyspace family |
//! | [`server`] | connection and server commands: PING, HELLO, SELECT, INFO, CONFIG, COMMAND |
//!
//! The engine never touches bytes on the wire: it takes parsed arguments and returns a
//! [`Reply`](dmc_resp::Reply). Writes are acknowledged only after the pool committed
//! them. The local DRAM cache of the design is not built yet.

pub mod commands;
pub mod keys;
pub mod server;
pub mod strings;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use bytes::Bytes;
use dmc_dht::{Clock, Dht, DhtError};
use dmc_resp::Reply;

pub use dmc_dht as dht;

/// Settings the engine serves from `CONFIG GET` and `INFO`.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    pub databases: u8,
    pub port: u16,
    pub requirepass: Option<Bytes>,
    pub maxclients: u64,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            databases: 16,
            port: 6379,
            requirepass: None,
            maxclients: 10_000,
        }
    }
}

/// Server-wide counters for `INFO`.
#[derive(Default)]
pub struct Stats {
    pub commands: AtomicU64,
    pub connections_received: AtomicU64,
    pub connected_clients: AtomicU64,
    pub rejected_connections: AtomicU64,
}

/// One client connection's state.
#[derive(Debug, Clone)]
pub struct Session {
    pub id: u64,
    pub db: u8,
    pub proto: u8,
    pub name: Option<Bytes>,
    pub authenticated: bool,
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
    started: Instant,
    next_client: AtomicU64,
    /// Read-modify-write commands of one key run one at a time on this agent (the agent
    /// is the only writer of its hash slots, so this makes INCR and friends atomic).
    key_locks: Vec<tokio::sync::Mutex<()>>,
}

const KEY_LOCKS: usize = 1024;

impl Engine {
    pub fn new(dht: Arc<Dht>, clock: Arc<dyn Clock>, config: EngineConfig) -> Arc<Engine> {
        Arc::new(Engine {
            dht,
            clock,
            config,
            stats: Stats::default(),
            started: Instant::now(),
            next_client: AtomicU64::new(1),
            key_locks: (0..KEY_LOCKS)
                .map(|_| tokio::sync::Mutex::new(()))
                .collect(),
        })
    }

    pub fn new_session(&self) -> Session {
        Session {
            id: self.next_client.fetch_add(1, Ordering::Relaxed),
            db: 0,
            proto: 2,
            name: None,
            authenticated: self.config.requirepass.is_none(),
        }
    }

    pub fn uptime_secs(&self) -> u64 {
        self.started.elapsed().as_secs()
    }

    pub(crate) fn key_lock(&self, key: &[u8]) -> &tokio::sync::Mutex<()> {
        let h = dmc_dht::hash::key_hash(0, key);
        &self.key_locks[(h % KEY_LOCKS as u64) as usize]
    }

    pub fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    /// Executes one command.
    pub async fn execute(&self, session: &mut Session, args: Vec<Bytes>) -> (Reply, Flow) {
        self.stats.commands.fetch_add(1, Ordering::Relaxed);
        commands::dispatch(self, session, args).await
    }
}

/// The one place pool and table failures become RESP errors.
pub fn error_reply(e: DhtError) -> Reply {
    match e {
        DhtError::OutOfMemory => {
            Reply::err("OOM command not allowed when used memory > 'maxmemory'.")
        }
        DhtError::NotOwner(slot) => Reply::err(format!(
            "TRYAGAIN hash slot {slot} is owned by another agent"
        )),
        DhtError::Contention(_) => {
            Reply::err("TRYAGAIN too much contention on this key, try again")
        }
        DhtError::Pool(dmc_umo::UmoError::TooLarge(_)) => {
            Reply::err("ERR string exceeds maximum allowed size (proto-max-bulk-len)")
        }
        other => Reply::err(format!("ERR memory pool: {other}")),
    }
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

pub const NOT_INTEGER: &str = "ERR value is not an integer or out of range";
pub const SYNTAX: &str = "ERR syntax error";
