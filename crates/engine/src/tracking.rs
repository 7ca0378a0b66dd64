//! Client-side caching (CLIENT TRACKING, CACHING, GETREDIR, TRACKINGINFO) with Redis
//! 7's semantics: in the default mode the keys a tracking client reads are remembered
//! and it is told once when one changes; in BCAST mode it is told of every change of a
//! key under its prefixes. The message is a RESP3 push `invalidate [keys]` on the
//! client's own connection, or — with REDIRECT — on another client's: a RESP3 push, or
//! for a RESP2 client in subscribed mode a message on `__redis__:invalidate`. A flush
//! sends `invalidate` with a null to everyone. OPTIN/OPTOUT with CLIENT CACHING choose
//! which reads are remembered; NOLOOP skips the client's own writes.
//!
//! A change is seen where every write is: [`Engine::wrote_typed`] (after a
//! transaction's commit, with its other effects), plus expiry and eviction through the
//! table's removed-key hook. Reads are remembered by dispatch after a read-only
//! command. A key is written on the agent owning it but may be read and tracked on any
//! agent: an agent with tracking clients announces itself to the others
//! (`DMC.TRACKING`, on the first one and every few seconds after), and the others
//! send it the keys that change (`DMC.INVALIDATE`, through the relay). Keys are
//! tracked by name, whatever the database, as Redis does.
//!
//! The table of remembered keys is bounded (`tracking-table-max-keys`, 1 000 000 by
//! default): past it, keys are invalidated to make room, as Redis does.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use dmc_resp::Reply;
use parking_lot::Mutex;

use crate::pubsub::{Mailbox, Message};
use crate::{Engine, Session};

/// The channel a RESP2 redirect target hears invalidations on.
pub const CHANNEL: &str = "__redis__:invalidate";
/// How long another agent's announcement holds.
pub const PEER_TTL: Duration = Duration::from_secs(15);
/// How often an agent with tracking clients announces itself again.
pub const ANNOUNCE_EVERY: Duration = Duration::from_secs(5);

/// The client whose command changes keys, when it tracks with NOLOOP (its own changes
/// are not sent to it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Modifier {
    /// A client of this agent.
    Here(u64),
    /// A client of the agent at this address, whose write was forwarded here.
    Peer(Bytes, u64),
}

tokio::task_local! {
    pub(crate) static MODIFIER: Modifier;
}

tokio::task_local! {
    /// Set while a FLUSHALL or FLUSHDB deletes key by key: trackers get one
    /// invalidation of everything instead.
    pub(crate) static FLUSHING: ();
}

/// The NOLOOP client whose command runs on this task, if any.
pub(crate) fn modifier() -> Option<Modifier> {
    MODIFIER.try_with(Modifier::clone).ok()
}

/// A client's tracking options (its session holds them while tracking is on).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Mode {
    /// The client told instead (0: itself).
    pub redirect: u64,
    pub bcast: bool,
    pub optin: bool,
    pub optout: bool,
    pub noloop: bool,
    /// BCAST prefixes (none given: every key, the empty prefix).
    pub prefixes: Vec<Bytes>,
    /// CLIENT CACHING YES/NO given for the next command.
    pub caching: bool,
}

impl Mode {
    /// Whether a read the client makes now is remembered.
    fn remembers(&self) -> bool {
        // OPTIN: only after CACHING YES; OPTOUT: unless CACHING NO.
        !self.bcast && (!self.optin || self.caching) && (!self.optout || !self.caching)
    }
}

struct Tracker {
    mailbox: Arc<Mailbox>,
    redirect: u64,
    bcast: bool,
    noloop: bool,
    prefixes: Vec<Bytes>,
}

#[derive(Default)]
struct State {
    trackers: HashMap<u64, Tracker>,
    /// Default mode: key → the clients that read it since its last invalidation.
    keys: HashMap<Bytes, Vec<u64>>,
}

/// This agent's tracking clients and the other agents that have some.
#[derive(Default)]
pub struct Tracking {
    state: Mutex<State>,
    /// Tracking clients here (read on every write without the lock).
    local: AtomicUsize,
    /// Agents that announced tracking clients, until when.
    peers: Mutex<HashMap<String, Instant>>,
    /// Whether `peers` may be non-empty (read on every write without the lock).
    peers_any: AtomicUsize,
    /// `tracking-table-max-keys` (0: no limit).
    pub max_keys: AtomicU64,
    /// Invalidation messages sent.
    pub sent: AtomicU64,
}

impl Tracking {
    pub fn new() -> Tracking {
        let t = Tracking::default();
        t.max_keys.store(1_000_000, Ordering::Relaxed);
        t
    }

    /// Whether this agent has tracking clients.
    pub fn local(&self) -> bool {
        self.local.load(Ordering::Relaxed) > 0
    }

    /// Whether a change must be looked at: tracking clients here or on another agent.
    #[inline]
    pub fn active(&self) -> bool {
        self.local.load(Ordering::Relaxed) > 0 || self.peers_any.load(Ordering::Relaxed) > 0
    }

    /// Another agent (`addr`, its client address) has tracking clients.
    pub fn peer_announced(&self, addr: String) {
        let mut peers = self.peers.lock();
        peers.insert(addr, Instant::now() + PEER_TTL);
        self.peers_any.store(peers.len(), Ordering::Relaxed);
    }

    /// The agents to send changed keys to (announcements not yet expired).
    pub fn peers(&self) -> Vec<String> {
        let mut peers = self.peers.lock();
        let now = Instant::now();
        peers.retain(|_, until| *until > now);
        self.peers_any.store(peers.len(), Ordering::Relaxed);
        peers.keys().cloned().collect()
    }

    /// The keys remembered for default-mode clients.
    pub fn table_keys(&self) -> usize {
        self.state.lock().keys.len()
    }

    /// Clients with tracking on.
    pub fn clients(&self) -> usize {
        self.local.load(Ordering::Relaxed)
    }

    fn disable(&self, id: u64) {
        let mut st = self.state.lock();
        if st.trackers.remove(&id).is_some() {
            self.local.store(st.trackers.len(), Ordering::Relaxed);
        }
        if st.trackers.is_empty() {
            st.keys = HashMap::new();
        }
    }
}

/// Whether one prefix is a prefix of the other.
fn overlap(a: &[u8], b: &[u8]) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

impl Engine {
    /// `CLIENT TRACKING ON|OFF [REDIRECT id] [PREFIX p ...] [BCAST] [OPTIN] [OPTOUT]
    /// [NOLOOP]`, with Redis 7's checks in its order.
    pub(crate) fn client_tracking(&self, s: &mut Session, args: &[Bytes]) -> Reply {
        let mut mode = Mode::default();
        let mut prefixes: Vec<Bytes> = Vec::new();
        let mut i = 3;
        while i < args.len() {
            let opt = args[i].to_ascii_uppercase();
            let next = args.get(i + 1);
            match (&opt[..], next) {
                (b"REDIRECT", Some(id)) => {
                    let Some(id) = crate::parse_i64(id) else {
                        return Reply::err(crate::NOT_INTEGER);
                    };
                    if !self.clients.all().iter().any(|c| c.id as i64 == id) {
                        return Reply::err("ERR The client ID you want redirect to does not exist");
                    }
                    mode.redirect = id as u64;
                    i += 1;
                }
                (b"PREFIX", Some(p)) => {
                    prefixes.push(p.clone());
                    i += 1;
                }
                (b"BCAST", _) => mode.bcast = true,
                (b"OPTIN", _) => mode.optin = true,
                (b"OPTOUT", _) => mode.optout = true,
                (b"NOLOOP", _) => mode.noloop = true,
                _ => return Reply::err(crate::SYNTAX),
            }
            i += 1;
        }
        if args[2].eq_ignore_ascii_case(b"OFF") {
            self.tracking.disable(s.id);
            s.tracking = None;
            return Reply::ok();
        }
        if !args[2].eq_ignore_ascii_case(b"ON") {
            return Reply::err(crate::SYNTAX);
        }
        if !mode.bcast && !prefixes.is_empty() {
            return Reply::err("ERR PREFIX option requires BCAST mode to be enabled");
        }
        if let Some(old) = &s.tracking
            && old.bcast != mode.bcast
        {
            return Reply::err(
                "ERR You can't switch BCAST mode on/off before disabling tracking for this client, and then re-enabling it with a different mode.",
            );
        }
        if mode.bcast && (mode.optin || mode.optout) {
            return Reply::err("ERR OPTIN and OPTOUT are not compatible with BCAST");
        }
        if mode.optin && mode.optout {
            return Reply::err("ERR You can't specify both OPTIN mode and OPTOUT mode");
        }
        if let Some(old) = &s.tracking
            && ((mode.optin && old.optout) || (mode.optout && old.optin))
        {
            return Reply::err(
                "ERR You can't switch OPTIN/OPTOUT mode before disabling tracking for this client, and then re-enabling it with a different mode.",
            );
        }
        let existing = s
            .tracking
            .as_ref()
            .map(|m| m.prefixes.clone())
            .unwrap_or_default();
        if mode.bcast {
            for (at, p) in prefixes.iter().enumerate() {
                if let Some(e) = existing.iter().find(|e| overlap(e, p)) {
                    return Reply::Error(format!(
                        "ERR Prefix '{}' overlaps with an existing prefix '{}'. Prefixes for a single client must not overlap.",
                        String::from_utf8_lossy(p),
                        String::from_utf8_lossy(e)
                    ));
                }
                if let Some(other) = prefixes[at + 1..].iter().find(|o| overlap(o, p)) {
                    return Reply::Error(format!(
                        "ERR Prefix '{}' overlaps with another provided prefix '{}'. Prefixes for a single client must not overlap.",
                        String::from_utf8_lossy(p),
                        String::from_utf8_lossy(other)
                    ));
                }
            }
            mode.prefixes = existing;
            for p in prefixes {
                if !mode.prefixes.contains(&p) {
                    mode.prefixes.push(p);
                }
            }
            if mode.prefixes.is_empty() {
                mode.prefixes.push(Bytes::new());
            }
        }
        let mailbox = s
            .mailbox
            .clone()
            .unwrap_or_else(|| Arc::new(Mailbox::new(s.client.clone())));
        s.mailbox = Some(mailbox.clone());
        self.track(s.id, &mode, mailbox);
        s.tracking = Some(Box::new(mode));
        Reply::ok()
    }

    fn track(&self, id: u64, mode: &Mode, mailbox: Arc<Mailbox>) {
        let t = &self.tracking;
        let mut st = t.state.lock();
        st.trackers.insert(
            id,
            Tracker {
                mailbox,
                redirect: mode.redirect,
                bcast: mode.bcast,
                noloop: mode.noloop,
                prefixes: mode.prefixes.clone(),
            },
        );
        t.local.store(st.trackers.len(), Ordering::Relaxed);
    }

    /// `CLIENT CACHING YES|NO`.
    pub(crate) fn client_caching(&self, s: &mut Session, arg: &[u8]) -> Reply {
        let Some(mode) = s.tracking.as_mut() else {
            return Reply::err(
                "ERR CLIENT CACHING can be called only when the client is in tracking mode with OPTIN or OPTOUT mode enabled",
            );
        };
        if arg.eq_ignore_ascii_case(b"YES") {
            if !mode.optin {
                return Reply::err(
                    "ERR CLIENT CACHING YES is only valid when tracking is enabled in OPTIN mode.",
                );
            }
        } else if arg.eq_ignore_ascii_case(b"NO") {
            if !mode.optout {
                return Reply::err(
                    "ERR CLIENT CACHING NO is only valid when tracking is enabled in OPTOUT mode.",
                );
            }
        } else {
            return Reply::err(crate::SYNTAX);
        }
        mode.caching = true;
        Reply::ok()
    }

    /// `CLIENT TRACKINGINFO`.
    pub(crate) fn client_trackinginfo(&self, s: &Session) -> Reply {
        let Some(mode) = &s.tracking else {
            return Reply::Map(vec![
                (Reply::bulk("flags"), Reply::Set(vec![Reply::bulk("off")])),
                (Reply::bulk("redirect"), Reply::Int(-1)),
                (Reply::bulk("prefixes"), Reply::Array(Vec::new())),
            ]);
        };
        let mut flags = vec![Reply::bulk("on")];
        for (on, name) in [
            (mode.bcast, "bcast"),
            (mode.optin, "optin"),
            (mode.optout, "optout"),
            (mode.optin && mode.caching, "caching-yes"),
            (mode.optout && mode.caching, "caching-no"),
            (mode.noloop, "noloop"),
            (
                mode.redirect != 0 && !self.clients.all().iter().any(|c| c.id == mode.redirect),
                "broken_redirect",
            ),
        ] {
            if on {
                flags.push(Reply::bulk(name));
            }
        }
        Reply::Map(vec![
            (Reply::bulk("flags"), Reply::Set(flags)),
            (Reply::bulk("redirect"), Reply::Int(mode.redirect as i64)),
            (
                Reply::bulk("prefixes"),
                Reply::Array(mode.prefixes.iter().cloned().map(Reply::Bulk).collect()),
            ),
        ])
    }

    /// After a command of a tracking client: remembers the keys a read-only one read
    /// (default mode, as OPTIN/OPTOUT and CLIENT CACHING allow), and ends a CLIENT
    /// CACHING's effect after the command it was for.
    pub(crate) fn after_tracked_command(
        &self,
        s: &mut Session,
        spec: &crate::table::Spec,
        args: &[Bytes],
    ) {
        let Some(mode) = s.tracking.as_mut() else {
            return;
        };
        if spec.has_flag("readonly") && mode.remembers() {
            let keys: Vec<Bytes> = spec
                .key_positions(args)
                .into_iter()
                .filter_map(|i| args.get(i).cloned())
                .collect();
            self.remember(s.id, keys);
        }
        if spec.cmd != crate::table::Cmd::Client && !s.tx.in_multi() {
            mode.caching = false;
        }
    }

    fn remember(&self, id: u64, keys: Vec<Bytes>) {
        let t = &self.tracking;
        let max = t.max_keys.load(Ordering::Relaxed) as usize;
        let mut evicted = Vec::new();
        {
            let mut st = t.state.lock();
            for key in keys {
                let ids = st.keys.entry(key).or_default();
                if !ids.contains(&id) {
                    ids.push(id);
                }
            }
            // Over the limit: some keys are invalidated to make room, as Redis does.
            if max > 0 && st.keys.len() > max {
                let over = st.keys.len() - max;
                evicted.extend(st.keys.keys().take(over).cloned());
            }
        }
        for k in evicted {
            self.invalidate_here(Some(&k), None);
        }
    }

    /// A key changed on this agent (`None`: everything, a flush): told to the
    /// trackers here and queued for the agents that track. `modifier`: the client
    /// that changed it, if known (for NOLOOP).
    pub(crate) fn key_changed(&self, key: Option<&[u8]>, modifier: Option<Modifier>) {
        if !self.tracking.active() || (key.is_some() && FLUSHING.try_with(|_| ()).is_ok()) {
            return;
        }
        if self.tracking.local() {
            let here = match &modifier {
                Some(Modifier::Here(id)) => Some(*id),
                _ => None,
            };
            self.invalidate_here(key, here);
        }
        if self.tracking.peers_any.load(Ordering::Relaxed) > 0 {
            self.relay
                .push_invalidation(key.map(Bytes::copy_from_slice), modifier);
        }
    }

    /// Tells this agent's trackers that `key` changed (`None`: every key).
    pub fn invalidate_here(&self, key: Option<&[u8]>, modifier: Option<u64>) {
        let t = &self.tracking;
        let limit = self.limits.output().pubsub;
        // Each tracker to tell: its own mailbox, its redirect target, the keys.
        let mut sends: Vec<(Arc<Mailbox>, u64, Option<Vec<Bytes>>)> = Vec::new();
        {
            let mut st = t.state.lock();
            let skip = |id: u64, tr: &Tracker| tr.noloop && modifier == Some(id);
            match key {
                None => {
                    st.keys.clear();
                    sends.extend(
                        st.trackers
                            .values()
                            .map(|tr| (tr.mailbox.clone(), tr.redirect, None)),
                    );
                }
                Some(key) => {
                    let one = || Some(vec![Bytes::copy_from_slice(key)]);
                    for id in st.keys.remove(key).unwrap_or_default() {
                        if let Some(tr) = st.trackers.get(&id)
                            && !tr.bcast
                            && !skip(id, tr)
                        {
                            sends.push((tr.mailbox.clone(), tr.redirect, one()));
                        }
                    }
                    for (&id, tr) in &st.trackers {
                        if tr.bcast
                            && !skip(id, tr)
                            && tr.prefixes.iter().any(|p| key.starts_with(p))
                        {
                            sends.push((tr.mailbox.clone(), tr.redirect, one()));
                        }
                    }
                }
            }
        }
        for (own, redirect, keys) in sends {
            let (mailbox, redirected) = match redirect {
                0 => (Some(own.clone()), false),
                target => (self.mailbox_of(target), true),
            };
            match mailbox {
                Some(m) => {
                    t.sent.fetch_add(1, Ordering::Relaxed);
                    m.deliver(Message::Invalidate { keys, redirected }, limit);
                }
                // A redirect target that is gone: the tracking client is told (RESP3);
                // one that is connected but cannot take it (RESP2, not subscribed) is not.
                None if !self.clients.all().iter().any(|c| c.id == redirect) => {
                    own.deliver(Message::RedirectBroken(redirect), limit)
                }
                None => {}
            }
        }
    }

    /// Where client `id` receives invalidations it is the redirect target of: its own
    /// tracking mailbox, else its subscriber's.
    fn mailbox_of(&self, id: u64) -> Option<Arc<Mailbox>> {
        let own = self
            .tracking
            .state
            .lock()
            .trackers
            .get(&id)
            .map(|t| t.mailbox.clone());
        own.or_else(|| self.pubsub.mailbox_of(id))
    }

    /// A client's connection ended, or it ran RESET: its tracking ends.
    pub fn forget_tracker(&self, id: u64) {
        self.tracking.disable(id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn which_reads_are_remembered() {
        let mut m = Mode::default();
        assert!(m.remembers());
        m.optin = true;
        assert!(!m.remembers());
        m.caching = true;
        assert!(m.remembers());
        let mut m = Mode {
            optout: true,
            ..Mode::default()
        };
        assert!(m.remembers());
        m.caching = true;
        assert!(!m.remembers());
        let m = Mode {
            bcast: true,
            ..Mode::default()
        };
        assert!(!m.remembers());
    }

    #[test]
    fn prefixes_overlap_when_one_starts_the_other() {
        assert!(overlap(b"a", b"ab"));
        assert!(overlap(b"ab", b"a"));
        assert!(overlap(b"", b"x"));
        assert!(!overlap(b"ab", b"ac"));
    }
}
