//! The connected clients: the registry `CLIENT LIST` and `CLIENT INFO` print and
//! `CLIENT KILL` searches, and each connection's shared record (address, name, last
//! command, idle time, the kill signal its connection task waits on).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

use bytes::Bytes;
use parking_lot::Mutex;

use crate::table::TABLE;

/// One connection as other connections see it.
#[derive(Debug)]
pub struct Client {
    pub id: u64,
    pub addr: String,
    pub laddr: String,
    pub fd: i64,
    created: Instant,
    /// Milliseconds after the registry's start of the last command.
    last_active_ms: AtomicU64,
    /// 1 + the command table index of the last command (0: none yet).
    last_cmd: AtomicUsize,
    db: AtomicU8,
    proto: AtomicU8,
    name: Mutex<Option<Bytes>>,
    /// The ACL user it authenticated as (`None`: `default`).
    user: Mutex<Option<Bytes>>,
    lib: Mutex<(String, String)>,
    no_evict: AtomicBool,
    killed: AtomicBool,
    kill: tokio::sync::Notify,
    /// Blocked in a BLPOP or kin (CLIENT UNBLOCK acts only then).
    blocked: AtomicBool,
    /// How CLIENT UNBLOCK asked the blocked command to end (0: not asked).
    unblock_how: AtomicU8,
    unblock: tokio::sync::Notify,
}

/// How `CLIENT UNBLOCK` ends a blocked command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unblock {
    /// As if it timed out.
    Timeout,
    /// With the `UNBLOCKED` error.
    Error,
}

/// Marks a client blocked until dropped.
pub struct BlockedGuard<'a>(&'a Client);

impl Drop for BlockedGuard<'_> {
    fn drop(&mut self) {
        self.0.blocked.store(false, Ordering::Release);
        self.0.unblock_how.store(0, Ordering::Release);
    }
}

impl Client {
    pub fn name(&self) -> Option<Bytes> {
        self.name.lock().clone()
    }

    pub fn set_name(&self, name: Option<Bytes>) {
        *self.name.lock() = name;
    }

    /// The ACL user the connection authenticated as.
    pub fn user(&self) -> Bytes {
        self.user
            .lock()
            .clone()
            .unwrap_or_else(|| Bytes::from_static(b"default"))
    }

    pub fn set_user(&self, user: &[u8]) {
        *self.user.lock() = (user != b"default").then(|| Bytes::copy_from_slice(user));
    }

    /// `CLIENT SETINFO LIB-NAME|LIB-VER`.
    pub fn set_lib(&self, name: Option<String>, version: Option<String>) {
        let mut lib = self.lib.lock();
        if let Some(n) = name {
            lib.0 = n;
        }
        if let Some(v) = version {
            lib.1 = v;
        }
    }

    pub fn set_no_evict(&self, on: bool) {
        self.no_evict.store(on, Ordering::Relaxed);
    }

    /// Records a command about to run, and the session state shown by `CLIENT LIST`.
    pub(crate) fn touch(&self, clients: &Clients, table_index: usize, db: u8, proto: u8) {
        self.last_active_ms.store(
            clients.epoch.elapsed().as_millis() as u64,
            Ordering::Relaxed,
        );
        self.last_cmd.store(table_index + 1, Ordering::Relaxed);
        self.db.store(db, Ordering::Relaxed);
        self.proto.store(proto, Ordering::Relaxed);
    }

    /// Asks the connection to close (it finishes the command it is running first).
    pub fn kill(&self) {
        self.killed.store(true, Ordering::Relaxed);
        self.kill.notify_one();
    }

    pub fn is_killed(&self) -> bool {
        self.killed.load(Ordering::Relaxed)
    }

    /// Resolves once [`kill`](Self::kill) was called (at once if it already was).
    pub async fn killed(&self) {
        if !self.is_killed() {
            self.kill.notified().await;
        }
    }

    /// Marks the client blocked (see [`crate::blocking`]) while the guard lives.
    pub fn block(&self) -> BlockedGuard<'_> {
        self.unblock_how.store(0, Ordering::Release);
        self.blocked.store(true, Ordering::Release);
        BlockedGuard(self)
    }

    pub fn is_blocked(&self) -> bool {
        self.blocked.load(Ordering::Acquire)
    }

    /// `CLIENT UNBLOCK`: ends the client's blocked command; false if it is not blocked.
    pub fn unblock(&self, how: Unblock) -> bool {
        if !self.is_blocked() {
            return false;
        }
        let code = match how {
            Unblock::Timeout => 1,
            Unblock::Error => 2,
        };
        self.unblock_how.store(code, Ordering::Release);
        self.unblock.notify_one();
        true
    }

    /// Resolves when CLIENT UNBLOCK ends the blocked command, with how.
    pub async fn unblocked(&self) -> Unblock {
        loop {
            match self.unblock_how.load(Ordering::Acquire) {
                1 => return Unblock::Timeout,
                2 => return Unblock::Error,
                _ => self.unblock.notified().await,
            }
        }
    }

    fn age_secs(&self) -> u64 {
        self.created.elapsed().as_secs()
    }

    fn idle_secs(&self, clients: &Clients) -> u64 {
        let now = clients.epoch.elapsed().as_millis() as u64;
        now.saturating_sub(self.last_active_ms.load(Ordering::Relaxed)) / 1000
    }

    /// The client's `CLIENT LIST` line, in Redis 7.2's field order; `subs`: its
    /// channels, patterns and shard channels.
    pub fn line(&self, clients: &Clients, subs: (usize, usize, usize)) -> String {
        let name = self
            .name()
            .map(|n| String::from_utf8_lossy(&n).into_owned())
            .unwrap_or_default();
        let cmd = match self.last_cmd.load(Ordering::Relaxed) {
            0 => "NULL",
            i => TABLE.get(i - 1).map_or("NULL", |s| s.name),
        };
        let flags = if self.is_blocked() {
            "b"
        } else if subs.0 + subs.1 + subs.2 > 0 {
            "P"
        } else if self.no_evict.load(Ordering::Relaxed) {
            "e"
        } else {
            "N"
        };
        let (lib_name, lib_ver) = self.lib.lock().clone();
        let user = String::from_utf8_lossy(&self.user()).into_owned();
        format!(
            "id={} addr={} laddr={} fd={} name={name} age={} idle={} flags={flags} db={} sub={} psub={} ssub={} multi=-1 qbuf=0 qbuf-free=0 argv-mem=0 multi-mem=0 rbs=0 rbp=0 obl=0 oll=0 omem=0 tot-mem=0 events=r cmd={cmd} user={user} redir=-1 resp={} lib-name={lib_name} lib-ver={lib_ver}\n",
            self.id,
            self.addr,
            self.laddr,
            self.fd,
            self.age_secs(),
            self.idle_secs(clients),
            self.db.load(Ordering::Relaxed),
            subs.0,
            subs.1,
            subs.2,
            self.proto.load(Ordering::Relaxed),
        )
    }
}

/// Every open connection of this agent, by id.
#[derive(Debug)]
pub struct Clients {
    epoch: Instant,
    map: Mutex<BTreeMap<u64, std::sync::Arc<Client>>>,
}

impl Default for Clients {
    fn default() -> Self {
        Clients {
            epoch: Instant::now(),
            map: Mutex::new(BTreeMap::new()),
        }
    }
}

impl Clients {
    pub fn register(
        &self,
        id: u64,
        addr: String,
        laddr: String,
        fd: i64,
    ) -> std::sync::Arc<Client> {
        let client = std::sync::Arc::new(Client {
            id,
            addr,
            laddr,
            fd,
            created: Instant::now(),
            last_active_ms: AtomicU64::new(self.epoch.elapsed().as_millis() as u64),
            last_cmd: AtomicUsize::new(0),
            db: AtomicU8::new(0),
            proto: AtomicU8::new(2),
            name: Mutex::new(None),
            user: Mutex::new(None),
            lib: Mutex::new((String::new(), String::new())),
            no_evict: AtomicBool::new(false),
            killed: AtomicBool::new(false),
            kill: tokio::sync::Notify::new(),
            blocked: AtomicBool::new(false),
            unblock_how: AtomicU8::new(0),
            unblock: tokio::sync::Notify::new(),
        });
        self.map.lock().insert(id, client.clone());
        client
    }

    pub fn unregister(&self, id: u64) {
        self.map.lock().remove(&id);
    }

    pub fn len(&self) -> usize {
        self.map.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A snapshot of the registered clients, by id.
    pub fn all(&self) -> Vec<std::sync::Arc<Client>> {
        self.map.lock().values().cloned().collect()
    }
}

/// Which clients a `CLIENT KILL` filter list selects.
#[derive(Debug, Default)]
pub struct KillFilter {
    pub id: Option<u64>,
    pub addr: Option<String>,
    pub laddr: Option<String>,
    /// Clients authenticated as this ACL user (`USER`).
    pub user: Option<Bytes>,
    pub skip_me: bool,
    /// Only clients of at least this age (`MAXAGE`).
    pub max_age: Option<u64>,
    /// `TYPE` named something other than `normal`: nothing matches.
    pub none: bool,
}

impl KillFilter {
    pub fn matches(&self, c: &Client, me: u64) -> bool {
        !self.none
            && self.id.is_none_or(|id| c.id == id)
            && self.addr.as_ref().is_none_or(|a| &c.addr == a)
            && self.laddr.as_ref().is_none_or(|a| &c.laddr == a)
            && self.user.as_ref().is_none_or(|u| c.user() == *u)
            && self.max_age.is_none_or(|age| c.age_secs() >= age)
            && !(self.skip_me && c.id == me)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_lists_and_filters_clients() {
        let clients = Clients::default();
        let a = clients.register(1, "127.0.0.1:1000".into(), "127.0.0.1:6379".into(), 7);
        let b = clients.register(2, "127.0.0.1:1001".into(), "127.0.0.1:6379".into(), 8);
        b.set_name(Some(Bytes::from_static(b"worker")));
        a.touch(&clients, 0, 3, 3);
        assert_eq!(clients.len(), 2);
        let line = a.line(&clients, (0, 0, 0));
        assert!(line.starts_with("id=1 addr=127.0.0.1:1000 laddr=127.0.0.1:6379 fd=7 name= "));
        assert!(
            line.contains(" db=3 ") && line.contains(" resp=3 "),
            "{line}"
        );
        assert!(line.contains(&format!(" cmd={} ", TABLE[0].name)), "{line}");
        assert!(b.line(&clients, (0, 0, 0)).contains(" name=worker "));
        let by_addr = KillFilter {
            addr: Some("127.0.0.1:1001".into()),
            skip_me: true,
            ..KillFilter::default()
        };
        assert!(!by_addr.matches(&a, 1) && by_addr.matches(&b, 1));
        let all_but_me = KillFilter {
            skip_me: true,
            ..KillFilter::default()
        };
        assert!(!all_but_me.matches(&a, 1) && all_but_me.matches(&b, 1));
        b.kill();
        assert!(b.is_killed());
        clients.unregister(2);
        assert_eq!(clients.all().len(), 1);
    }
}
