//! Pub/sub on one agent, with Redis 7 semantics: the channels, patterns and shard
//! channels this agent's clients subscribe to, each subscriber's mailbox, and the
//! commands (SUBSCRIBE, PSUBSCRIBE, SSUBSCRIBE, their UNSUBSCRIBEs, PUBLISH, SPUBLISH,
//! PUBSUB). Messages are not data in the pool: a PUBLISH delivers to this agent's
//! subscribers here, and the agent's router sends it once to every other agent of the
//! instance, which delivers to its own (`compute-agent/src/routing/pubsub.rs`).
//!
//! A subscriber's messages wait in its [`Mailbox`] until its connection writes them
//! (at once when the client is idle, and before the reply of a command it runs, so a
//! client publishing to itself sees the message first, as in Redis). The mailbox's
//! bytes count against `client-output-buffer-limit pubsub`: past the hard limit, or
//! past the soft limit for longer than its seconds, the subscriber is disconnected
//! (a slow subscriber never holds the agent's memory).
//!
//! RESP2 clients with a subscription are in subscribed mode (only the subscribe
//! commands, PING, QUIT and RESET; PING answers `pong` as a message); RESP3 clients
//! run any command and receive messages as push frames.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use dmc_resp::Reply;
use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::clients::Client;
use crate::limits::OutputLimit;
use crate::table::Cmd;
use crate::{Engine, Session};

/// The name spaces a client subscribes in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Channel = 0,
    Pattern = 1,
    Shard = 2,
}

impl Kind {
    fn words(self) -> (&'static str, &'static str) {
        match self {
            Kind::Channel => ("subscribe", "unsubscribe"),
            Kind::Pattern => ("psubscribe", "punsubscribe"),
            Kind::Shard => ("ssubscribe", "sunsubscribe"),
        }
    }
}

/// A message on its way to one subscriber.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    /// To a channel subscriber.
    Message { channel: Bytes, payload: Bytes },
    /// To a subscriber of a pattern the channel matches.
    PMessage {
        pattern: Bytes,
        channel: Bytes,
        payload: Bytes,
    },
    /// To a shard channel subscriber (SPUBLISH).
    SMessage { channel: Bytes, payload: Bytes },
    /// To a MONITOR client: a command this agent ran, as Redis prints it.
    Monitor(String),
    /// To a client tracking keys (CLIENT TRACKING) or its redirect target: these keys
    /// changed (`None`: every key, a flush). `redirected`: sent to another client.
    Invalidate {
        keys: Option<Vec<Bytes>>,
        redirected: bool,
    },
    /// To a tracking client whose redirect target is gone.
    RedirectBroken(u64),
}

impl Message {
    /// The bytes it holds while queued (what the output buffer limit counts).
    fn size(&self) -> u64 {
        let n = match self {
            Message::Message { channel, payload } | Message::SMessage { channel, payload } => {
                channel.len() + payload.len()
            }
            Message::PMessage {
                pattern,
                channel,
                payload,
            } => pattern.len() + channel.len() + payload.len(),
            Message::Monitor(line) => line.len(),
            Message::Invalidate { keys, .. } => keys
                .as_ref()
                .map_or(0, |k| k.iter().map(|k| k.len() + 8).sum()),
            Message::RedirectBroken(_) => 8,
        };
        n as u64 + 32
    }

    /// The push frame a client speaking `proto` receives (an array in RESP2), or
    /// nothing: a RESP2 connection cannot take an invalidation of its own keys (only a
    /// redirect target in subscribed mode gets them, as `__redis__:invalidate`
    /// messages), as in Redis.
    pub fn reply(&self, proto: u8) -> Option<Reply> {
        let b = |x: &Bytes| Reply::Bulk(x.clone());
        Some(match self {
            Message::Message { channel, payload } => {
                Reply::Push(vec![Reply::bulk("message"), b(channel), b(payload)])
            }
            Message::PMessage {
                pattern,
                channel,
                payload,
            } => Reply::Push(vec![
                Reply::bulk("pmessage"),
                b(pattern),
                b(channel),
                b(payload),
            ]),
            Message::SMessage { channel, payload } => {
                Reply::Push(vec![Reply::bulk("smessage"), b(channel), b(payload)])
            }
            Message::Monitor(line) => Reply::Status(line.clone()),
            Message::Invalidate { keys, redirected } => {
                let keys = match keys {
                    Some(keys) => Reply::Array(keys.iter().map(b).collect()),
                    None => Reply::Null,
                };
                match (proto, redirected) {
                    (3.., _) => Reply::Push(vec![Reply::bulk("invalidate"), keys]),
                    (_, true) => Reply::Push(vec![
                        Reply::bulk("message"),
                        Reply::bulk(crate::tracking::CHANNEL),
                        keys,
                    ]),
                    (_, false) => return None,
                }
            }
            Message::RedirectBroken(id) if proto >= 3 => Reply::Push(vec![
                Reply::bulk("tracking-redir-broken"),
                Reply::Int(*id as i64),
            ]),
            Message::RedirectBroken(_) => return None,
        })
    }
}

/// One subscriber's queue of messages not yet written to it.
#[derive(Debug)]
pub struct Mailbox {
    client: Arc<Client>,
    queue: Mutex<Queue>,
    ready: Notify,
}

#[derive(Debug, Default)]
struct Queue {
    messages: VecDeque<Message>,
    bytes: u64,
    /// Since when the queue has been over the soft limit.
    over_soft_since: Option<Instant>,
}

impl Mailbox {
    pub(crate) fn new(client: Arc<Client>) -> Mailbox {
        Mailbox {
            client,
            queue: Mutex::new(Queue::default()),
            ready: Notify::new(),
        }
    }

    /// Queues `m`, or disconnects the subscriber if its queue is over `limit`.
    pub(crate) fn deliver(&self, m: Message, limit: OutputLimit) {
        let mut q = self.queue.lock();
        q.bytes += m.size();
        q.messages.push_back(m);
        let over_soft = limit.soft > 0 && q.bytes > limit.soft;
        let since = match over_soft {
            true => Some(*q.over_soft_since.get_or_insert_with(Instant::now)),
            false => {
                q.over_soft_since = None;
                None
            }
        };
        let soft_expired =
            since.is_some_and(|t| t.elapsed() >= Duration::from_secs(limit.soft_seconds));
        if (limit.hard > 0 && q.bytes > limit.hard) || soft_expired {
            tracing::warn!(
                bytes = q.bytes,
                "closing a subscriber over client-output-buffer-limit pubsub"
            );
            *q = Queue::default();
            drop(q);
            self.client.kill();
            return;
        }
        drop(q);
        self.ready.notify_one();
    }

    /// Takes every queued message (none: an empty list).
    pub fn take(&self) -> Vec<Message> {
        let mut q = self.queue.lock();
        q.bytes = 0;
        q.over_soft_since = None;
        q.messages.drain(..).collect()
    }

    /// Waits until a message is queued (cancel-safe: nothing is taken).
    pub async fn ready(&self) {
        loop {
            if !self.queue.lock().messages.is_empty() {
                return;
            }
            // A notification sent before this wait is kept as a permit.
            self.ready.notified().await;
        }
    }
}

/// What one client subscribes to.
struct ClientSubs {
    mailbox: Arc<Mailbox>,
    /// Per [`Kind`], in subscription order until one is left (then the last takes its
    /// place: leaving is O(1), so a client leaving N channels costs O(N), not O(N²)).
    names: [indexmap::IndexSet<Bytes>; 3],
}

impl ClientSubs {
    /// Redis's count in (un)subscribe replies: channels and patterns together, shard
    /// channels apart.
    fn count(&self, kind: Kind) -> i64 {
        match kind {
            Kind::Shard => self.names[2].len() as i64,
            _ => (self.names[0].len() + self.names[1].len()) as i64,
        }
    }

    fn total(&self) -> usize {
        self.names.iter().map(indexmap::IndexSet::len).sum()
    }
}

type Subscribers = HashMap<Bytes, HashMap<u64, Arc<Mailbox>>>;

#[derive(Default)]
struct Registry {
    /// Per [`Kind`]: name → subscribed clients.
    names: [Subscribers; 3],
    clients: HashMap<u64, ClientSubs>,
    /// MONITOR clients.
    monitors: HashMap<u64, Arc<Mailbox>>,
}

/// Every subscription of this agent's clients, and its MONITOR clients.
#[derive(Default)]
pub struct PubSub {
    registry: Mutex<Registry>,
    /// MONITOR clients (read on every command without the lock).
    monitoring: AtomicUsize,
}

impl PubSub {
    /// Subscribes client `id` to `names` in `kind`; one confirmation per name, with
    /// the client's count after it. Returns them and the client's mailbox (`mailbox`,
    /// if the client has one already: it monitors).
    pub fn subscribe(
        &self,
        client: &Arc<Client>,
        id: u64,
        kind: Kind,
        names: &[Bytes],
        mailbox: Option<Arc<Mailbox>>,
    ) -> (Vec<Reply>, Arc<Mailbox>) {
        let mut r = self.registry.lock();
        let Registry {
            names: by_name,
            clients,
            ..
        } = &mut *r;
        let subs = clients.entry(id).or_insert_with(|| ClientSubs {
            mailbox: mailbox.unwrap_or_else(|| Arc::new(Mailbox::new(client.clone()))),
            names: Default::default(),
        });
        let mut replies = Vec::with_capacity(names.len());
        for name in names {
            let holders = by_name[kind as usize].entry(name.clone()).or_default();
            if holders.insert(id, subs.mailbox.clone()).is_none() {
                subs.names[kind as usize].insert(name.clone());
            }
            replies.push(confirmation(kind.words().0, Some(name), subs.count(kind)));
        }
        (replies, subs.mailbox.clone())
    }

    /// Unsubscribes client `id` from `names` in `kind` (none: from every one); one
    /// confirmation per name, or one with a null name when there was nothing to leave.
    /// Returns them and whether the client still has a subscription.
    pub fn unsubscribe(&self, id: u64, kind: Kind, names: &[Bytes]) -> (Vec<Reply>, bool) {
        let mut r = self.registry.lock();
        let Registry {
            names: by_name,
            clients,
            ..
        } = &mut *r;
        let word = kind.words().1;
        let Some(subs) = clients.get_mut(&id) else {
            let replies = match names.is_empty() {
                true => vec![confirmation(word, None, 0)],
                false => names
                    .iter()
                    .map(|n| confirmation(word, Some(n), 0))
                    .collect(),
            };
            return (replies, false);
        };
        let leave: Vec<Bytes> = match names.is_empty() {
            true => subs.names[kind as usize].iter().cloned().collect(),
            false => names.to_vec(),
        };
        let mut replies = Vec::with_capacity(leave.len().max(1));
        for name in &leave {
            if subs.names[kind as usize].swap_remove(name) {
                let map = &mut by_name[kind as usize];
                if let Some(holders) = map.get_mut(name) {
                    holders.remove(&id);
                    if holders.is_empty() {
                        map.remove(name);
                    }
                }
            }
            replies.push(confirmation(word, Some(name), subs.count(kind)));
        }
        if leave.is_empty() {
            replies.push(confirmation(word, None, subs.count(kind)));
        }
        let still = subs.total() > 0;
        if !still {
            clients.remove(&id);
        }
        (replies, still)
    }

    /// Makes client `id` a MONITOR client; returns its mailbox (`mailbox`, if it has
    /// one already as a subscriber).
    pub fn monitor(
        &self,
        client: &Arc<Client>,
        id: u64,
        mailbox: Option<Arc<Mailbox>>,
    ) -> Arc<Mailbox> {
        let mailbox = mailbox.unwrap_or_else(|| Arc::new(Mailbox::new(client.clone())));
        let mut r = self.registry.lock();
        r.monitors.insert(id, mailbox.clone());
        self.monitoring.store(r.monitors.len(), Ordering::Relaxed);
        mailbox
    }

    /// The mailbox of client `id` if it subscribes to anything (a RESP2 redirect
    /// target of CLIENT TRACKING must be in subscribed mode).
    pub fn mailbox_of(&self, id: u64) -> Option<Arc<Mailbox>> {
        self.registry
            .lock()
            .clients
            .get(&id)
            .map(|c| c.mailbox.clone())
    }

    /// Whether any client monitors this agent.
    pub fn monitored(&self) -> bool {
        self.monitoring.load(Ordering::Relaxed) > 0
    }

    /// Sends a command's MONITOR line to every MONITOR client.
    pub fn feed_monitors(&self, line: &str, limit: OutputLimit) {
        for mailbox in self.registry.lock().monitors.values() {
            mailbox.deliver(Message::Monitor(line.to_string()), limit);
        }
    }

    /// Forgets every subscription of client `id` and its MONITOR (its connection
    /// closed, or RESET).
    pub fn remove_client(&self, id: u64) {
        let mut r = self.registry.lock();
        if r.monitors.remove(&id).is_some() {
            self.monitoring.store(r.monitors.len(), Ordering::Relaxed);
        }
        let Registry {
            names: by_name,
            clients,
            ..
        } = &mut *r;
        let Some(subs) = clients.remove(&id) else {
            return;
        };
        for (kind, names) in subs.names.iter().enumerate() {
            for name in names {
                if let Some(holders) = by_name[kind].get_mut(name) {
                    holders.remove(&id);
                    if holders.is_empty() {
                        by_name[kind].remove(name);
                    }
                }
            }
        }
    }

    /// Delivers `payload` on `channel` to this agent's subscribers: of the channel and
    /// of every pattern it matches (PUBLISH), or of the shard channel (SPUBLISH).
    /// Returns how many received it.
    pub fn publish(
        &self,
        shard: bool,
        channel: &Bytes,
        payload: &Bytes,
        limit: OutputLimit,
    ) -> i64 {
        let r = self.registry.lock();
        let mut n = 0;
        let mut deliver = |holders: &HashMap<u64, Arc<Mailbox>>, m: &dyn Fn() -> Message| {
            for mailbox in holders.values() {
                mailbox.deliver(m(), limit);
                n += 1;
            }
        };
        let (c, p) = (channel.clone(), payload.clone());
        if shard {
            if let Some(holders) = r.names[Kind::Shard as usize].get(channel) {
                deliver(holders, &|| Message::SMessage {
                    channel: c.clone(),
                    payload: p.clone(),
                });
            }
            return n;
        }
        if let Some(holders) = r.names[Kind::Channel as usize].get(channel) {
            deliver(holders, &|| Message::Message {
                channel: c.clone(),
                payload: p.clone(),
            });
        }
        for (pattern, holders) in &r.names[Kind::Pattern as usize] {
            if crate::glob::glob(pattern, channel, false) {
                deliver(holders, &|| Message::PMessage {
                    pattern: pattern.clone(),
                    channel: c.clone(),
                    payload: p.clone(),
                });
            }
        }
        n
    }

    /// Channels (or shard channels) with a subscriber here, matching `pattern`.
    pub fn channels(&self, shard: bool, pattern: Option<&[u8]>) -> Vec<Bytes> {
        let r = self.registry.lock();
        let kind = if shard { Kind::Shard } else { Kind::Channel };
        r.names[kind as usize]
            .keys()
            .filter(|c| pattern.is_none_or(|p| crate::glob::glob(p, c, false)))
            .cloned()
            .collect()
    }

    /// Subscribers here of `channel` (or of the shard channel).
    pub fn numsub(&self, shard: bool, channel: &[u8]) -> i64 {
        let r = self.registry.lock();
        let kind = if shard { Kind::Shard } else { Kind::Channel };
        r.names[kind as usize]
            .get(channel)
            .map_or(0, |h| h.len() as i64)
    }

    /// Patterns with a subscriber here.
    pub fn numpat(&self) -> i64 {
        self.registry.lock().names[1].len() as i64
    }

    /// Client `id`'s subscriptions: (channels, patterns, shard channels).
    pub fn counts(&self, id: u64) -> (usize, usize, usize) {
        self.registry
            .lock()
            .clients
            .get(&id)
            .map_or((0, 0, 0), |s| {
                (s.names[0].len(), s.names[1].len(), s.names[2].len())
            })
    }

    /// Channels and patterns subscribed on this agent (INFO `pubsub_channels`,
    /// `pubsub_patterns`, `pubsubshard_channels`).
    pub fn totals(&self) -> (usize, usize, usize) {
        let r = self.registry.lock();
        (r.names[0].len(), r.names[1].len(), r.names[2].len())
    }
}

fn confirmation(word: &'static str, name: Option<&Bytes>, count: i64) -> Reply {
    Reply::Push(vec![
        Reply::bulk(word),
        name.map_or(Reply::Null, |n| Reply::Bulk(n.clone())),
        Reply::Int(count),
    ])
}

/// Whether `cmd` subscribes or unsubscribes.
pub fn is_subscription(cmd: Cmd) -> bool {
    matches!(
        cmd,
        Cmd::Subscribe
            | Cmd::Unsubscribe
            | Cmd::PSubscribe
            | Cmd::PUnsubscribe
            | Cmd::SSubscribe
            | Cmd::SUnsubscribe
    )
}

/// Whether a RESP2 client in subscribed mode may run `cmd`.
pub fn allowed_in_subscribed_mode(cmd: Cmd) -> bool {
    is_subscription(cmd) || matches!(cmd, Cmd::Ping | Cmd::Quit | Cmd::Reset)
}

/// Redis's refusal of a command in subscribed mode (`name`: `get`, `pubsub|numpat`).
pub fn refused_in_subscribed_mode(name: &str) -> Reply {
    Reply::Error(format!(
        "ERR Can't execute '{name}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / \
         RESET are allowed in this context"
    ))
}

/// Runs a pub/sub command on this agent alone (the router adds the other agents'
/// subscribers to PUBLISH and PUBSUB).
pub fn run(engine: &Engine, s: &mut Session, cmd: Cmd, args: &[Bytes]) -> Reply {
    let names = args.get(1..).unwrap_or_default();
    let limit = engine.limits.output().pubsub;
    match cmd {
        Cmd::Subscribe | Cmd::PSubscribe | Cmd::SSubscribe => {
            let kind = match cmd {
                Cmd::Subscribe => Kind::Channel,
                Cmd::PSubscribe => Kind::Pattern,
                _ => Kind::Shard,
            };
            let (replies, mailbox) =
                engine
                    .pubsub
                    .subscribe(&s.client, s.id, kind, names, s.mailbox.clone());
            s.mailbox = Some(mailbox);
            s.subscribed = true;
            Reply::Several(replies)
        }
        Cmd::Unsubscribe | Cmd::PUnsubscribe | Cmd::SUnsubscribe => {
            let kind = match cmd {
                Cmd::Unsubscribe => Kind::Channel,
                Cmd::PUnsubscribe => Kind::Pattern,
                _ => Kind::Shard,
            };
            let (replies, still) = engine.pubsub.unsubscribe(s.id, kind, names);
            // The mailbox stays until the connection wrote what it holds.
            s.subscribed = still;
            Reply::Several(replies)
        }
        Cmd::Publish | Cmd::SPublish => {
            let shard = cmd == Cmd::SPublish;
            let here = engine.pubsub.publish(shard, &args[1], &args[2], limit);
            // The router sends a client's own PUBLISH to the other agents; inside EXEC
            // or a script the relay does (the reply counts this agent's receivers).
            if crate::multi::in_exec() {
                engine.relay.push(shard, args[1].clone(), args[2].clone());
            }
            Reply::Int(here)
        }
        _ => pubsub_command(engine, args),
    }
}

/// PUBSUB CHANNELS / NUMSUB / NUMPAT / SHARDCHANNELS / SHARDNUMSUB / HELP.
fn pubsub_command(engine: &Engine, args: &[Bytes]) -> Reply {
    let sub = String::from_utf8_lossy(&args[1]).to_ascii_uppercase();
    let ps = &engine.pubsub;
    let bulks = |v: Vec<Bytes>| Reply::Array(v.into_iter().map(Reply::Bulk).collect());
    let numsub = |shard: bool| {
        let mut out = Vec::new();
        for c in &args[2..] {
            out.push(Reply::Bulk(c.clone()));
            out.push(Reply::Int(ps.numsub(shard, c)));
        }
        Reply::Array(out)
    };
    match (sub.as_str(), args.len()) {
        ("CHANNELS", 2 | 3) => bulks(ps.channels(false, args.get(2).map(|p| &p[..]))),
        ("SHARDCHANNELS", 2 | 3) => bulks(ps.channels(true, args.get(2).map(|p| &p[..]))),
        ("NUMSUB", _) => numsub(false),
        ("SHARDNUMSUB", _) => numsub(true),
        ("NUMPAT", 2) => Reply::Int(ps.numpat()),
        ("HELP", 2) => crate::subcommands::help(&[
            "PUBSUB <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "CHANNELS [<pattern>]",
            "    Return the currently active channels matching a <pattern> (default: '*').",
            "NUMPAT",
            "    Return number of subscriptions to patterns.",
            "NUMSUB [<channel> ...]",
            "    Return the number of subscribers for the specified channels, excluding",
            "    pattern subscriptions(default: no channels).",
            "SHARDCHANNELS [<pattern>]",
            "    Return the currently active shard level channels matching a <pattern> (default: '*').",
            "SHARDNUMSUB [<shardchannel> ...]",
            "    Return the number of subscribers for the specified shard level channel(s)",
            "HELP",
            "    Prints this help.",
        ]),
        _ => crate::subcommands::refused(
            "PUBSUB",
            &args[1],
            &[
                "CHANNELS",
                "SHARDCHANNELS",
                "NUMSUB",
                "SHARDNUMSUB",
                "NUMPAT",
                "HELP",
            ],
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client() -> Arc<Client> {
        crate::clients::Clients::default().register(1, String::new(), String::new(), 0)
    }

    fn b(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    const NO_LIMIT: OutputLimit = OutputLimit {
        hard: 0,
        soft: 0,
        soft_seconds: 0,
    };

    #[test]
    fn channel_and_pattern_subscribers_get_each_message_once() {
        let ps = PubSub::default();
        let c = client();
        let (replies, mailbox) = ps.subscribe(&c, 1, Kind::Channel, &[b("news"), b("news")], None);
        assert_eq!(replies.len(), 2);
        assert_eq!(
            ps.counts(1),
            (1, 0, 0),
            "a channel twice is one subscription"
        );
        ps.subscribe(&c, 1, Kind::Pattern, &[b("n*")], None);
        assert_eq!(ps.publish(false, &b("news"), &b("hi"), NO_LIMIT), 2);
        assert_eq!(ps.publish(false, &b("other"), &b("x"), NO_LIMIT), 0);
        assert_eq!(ps.publish(true, &b("news"), &b("x"), NO_LIMIT), 0);
        let got = mailbox.take();
        assert_eq!(got.len(), 2);
        assert!(matches!(&got[0], Message::Message { payload, .. } if payload == "hi"));
        assert!(matches!(&got[1], Message::PMessage { pattern, .. } if pattern == "n*"));
        assert!(mailbox.take().is_empty());
    }

    #[test]
    fn unsubscribing_from_everything_leaves_no_trace() {
        let ps = PubSub::default();
        let c = client();
        ps.subscribe(&c, 1, Kind::Channel, &[b("a"), b("b")], None);
        ps.subscribe(&c, 1, Kind::Shard, &[b("s")], None);
        let (replies, still) = ps.unsubscribe(1, Kind::Channel, &[]);
        assert_eq!(replies.len(), 2);
        assert!(still, "the shard channel is left");
        let (_, still) = ps.unsubscribe(1, Kind::Shard, &[b("s")]);
        assert!(!still);
        assert_eq!(ps.totals(), (0, 0, 0));
        // Nothing to leave: one confirmation with a null name and a count of 0.
        let (replies, _) = ps.unsubscribe(1, Kind::Pattern, &[]);
        assert_eq!(
            replies,
            vec![Reply::Push(vec![
                Reply::bulk("punsubscribe"),
                Reply::Null,
                Reply::Int(0)
            ])]
        );
    }

    #[test]
    fn a_subscriber_over_the_hard_limit_is_disconnected_and_its_queue_dropped() {
        let ps = PubSub::default();
        let c = client();
        let (_, mailbox) = ps.subscribe(&c, 1, Kind::Channel, &[b("a")], None);
        let limit = OutputLimit {
            hard: 1000,
            soft: 0,
            soft_seconds: 0,
        };
        let payload = Bytes::from(vec![b'x'; 300]);
        for _ in 0..3 {
            ps.publish(false, &b("a"), &payload, limit);
        }
        assert!(!c.is_killed());
        ps.publish(false, &b("a"), &payload, limit);
        assert!(c.is_killed(), "over 1000 bytes queued");
        assert!(mailbox.take().is_empty());
    }

    #[test]
    fn removing_a_client_removes_its_names() {
        let ps = PubSub::default();
        let c = client();
        ps.subscribe(&c, 1, Kind::Channel, &[b("a")], None);
        ps.subscribe(&c, 2, Kind::Channel, &[b("a")], None);
        ps.subscribe(&c, 1, Kind::Pattern, &[b("*")], None);
        ps.remove_client(1);
        assert_eq!(ps.totals(), (1, 0, 0));
        assert_eq!(ps.numsub(false, b"a"), 1);
        assert_eq!(ps.publish(false, &b("a"), &b("m"), NO_LIMIT), 1);
    }
}
