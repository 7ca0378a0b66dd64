//! Keyspace notifications (`notify-keyspace-events`), with Redis 7's classes, channels
//! and event names: a command that changes a key tells [`Engine::notify`] what it did
//! (`set`, `lpush`, `del`, `expired`, ...), which publishes `event` on
//! `__keyspace@<db>__:<key>` and `key` on `__keyevent@<db>__:<event>` when the class
//! is enabled. Expiry and eviction come from the table's removed-key hook.
//!
//! Delivery is pub/sub's: to this agent's subscribers at once, and to every other
//! agent's through the [`crate::relay::Relay`] (keys are written on the agent owning
//! them, so a subscriber on any agent hears about every key of the instance). Inside a
//! transaction (EXEC, a script) the events wait for its commit, so a transaction that
//! fails to commit announces nothing. With no class enabled (the default) a command
//! pays one atomic load.

use std::sync::atomic::{AtomicU32, Ordering};

use bytes::{BufMut, Bytes, BytesMut};

use crate::Engine;

/// The channel kinds: with neither, nothing is published.
pub const KEYSPACE: u32 = 1 << 0;
pub const KEYEVENT: u32 = 1 << 1;
/// Event classes, as Redis names them (`g`, `$`, `l`, `s`, `h`, `z`, `x`, `e`, `t`,
/// `m`, `d`, `n`).
pub const GENERIC: u32 = 1 << 2;
pub const STRING: u32 = 1 << 3;
pub const LIST: u32 = 1 << 4;
pub const SET: u32 = 1 << 5;
pub const HASH: u32 = 1 << 6;
pub const ZSET: u32 = 1 << 7;
pub const EXPIRED: u32 = 1 << 8;
pub const EVICTED: u32 = 1 << 9;
pub const STREAM: u32 = 1 << 10;
pub const KEY_MISS: u32 = 1 << 11;
pub const MODULE: u32 = 1 << 12;
pub const NEW: u32 = 1 << 13;
/// `A`: every class but key misses and new keys.
pub const ALL: u32 =
    GENERIC | STRING | LIST | SET | HASH | ZSET | EXPIRED | EVICTED | STREAM | MODULE;

/// The class letters in the order Redis prints them after `A`'s members.
const LETTERS: [(char, u32); 10] = [
    ('g', GENERIC),
    ('$', STRING),
    ('l', LIST),
    ('s', SET),
    ('h', HASH),
    ('z', ZSET),
    ('x', EXPIRED),
    ('e', EVICTED),
    ('t', STREAM),
    ('d', MODULE),
];

/// The class of events about a value of `kind`.
pub fn class_of(kind: dmc_dht::ValueKind) -> u32 {
    use dmc_dht::ValueKind as K;
    match kind {
        K::String | K::ChunkedString => STRING,
        K::List => LIST,
        K::Set => SET,
        K::Hash => HASH,
        K::ZSet => ZSET,
        K::Stream => STREAM,
    }
}

/// Parses a `notify-keyspace-events` value; `None` on a character Redis refuses.
pub fn parse(text: &str) -> Option<u32> {
    let mut flags = 0;
    for c in text.chars() {
        flags |= match c {
            'A' => ALL,
            'K' => KEYSPACE,
            'E' => KEYEVENT,
            'm' => KEY_MISS,
            'n' => NEW,
            c => LETTERS.iter().find(|(l, _)| *l == c)?.1,
        };
    }
    Some(flags)
}

/// Prints flags as `CONFIG GET notify-keyspace-events` does.
pub fn format(flags: u32) -> String {
    let mut out = String::new();
    if flags & ALL == ALL {
        out.push('A');
    } else {
        out.extend(
            LETTERS
                .iter()
                .filter(|(_, f)| flags & f != 0)
                .map(|(c, _)| *c),
        );
    }
    for (c, f) in [
        ('K', KEYSPACE),
        ('E', KEYEVENT),
        ('m', KEY_MISS),
        ('n', NEW),
    ] {
        if flags & f != 0 {
            out.push(c);
        }
    }
    out
}

/// The enabled classes.
#[derive(Debug, Default)]
pub struct Notifications {
    flags: AtomicU32,
}

impl Notifications {
    pub fn flags(&self) -> u32 {
        self.flags.load(Ordering::Relaxed)
    }

    pub fn set(&self, flags: u32) {
        self.flags.store(flags, Ordering::Relaxed);
    }

    /// The flags, if events of `class` are published (the class is on, and a channel
    /// kind).
    #[inline]
    fn wanted(&self, class: u32) -> Option<u32> {
        let flags = self.flags();
        (flags & class != 0 && flags & (KEYSPACE | KEYEVENT) != 0).then_some(flags)
    }
}

/// `__keyspace@<db>__:<key>` or `__keyevent@<db>__:<event>`.
fn channel(kind: &str, db: u8, name: &[u8]) -> Bytes {
    let mut c = BytesMut::with_capacity(16 + name.len());
    c.put_slice(b"__key");
    c.put_slice(kind.as_bytes());
    c.put_slice(format!("@{db}__:").as_bytes());
    c.put_slice(name);
    c.freeze()
}

impl Engine {
    /// A command changed `key` of stored database `db` (see the module doc): `event`
    /// of `class` is published if enabled.
    #[inline]
    pub(crate) fn notify(&self, class: u32, event: &'static str, db: u8, key: &[u8]) {
        let Some(flags) = self.notifications.wanted(class) else {
            return;
        };
        if crate::multi::defer_notify(class, event, db, key) {
            return;
        }
        self.publish_event(flags, event, db, key);
    }

    /// After elements were removed from collection `key`: `del` if that emptied it
    /// (and so deleted it). Looks only when `del` would be published.
    pub(crate) async fn notify_if_emptied(&self, db: u8, key: &[u8]) {
        if self.notifications.wanted(GENERIC).is_none() {
            return;
        }
        if let Ok(false) = self.dht.exists(db, key).await {
            self.notify(GENERIC, "del", db, key);
        }
    }

    /// Publishes one event now, here and (through the relay) on every other agent.
    pub(crate) fn publish_event(&self, flags: u32, event: &str, db: u8, key: &[u8]) {
        let db = self.dht.logical_db(db);
        let limit = self.limits.output().pubsub;
        let send = |channel: Bytes, payload: Bytes| {
            self.pubsub.publish(false, &channel, &payload, limit);
            self.relay.push(false, channel, payload);
        };
        if flags & KEYSPACE != 0 {
            send(
                channel("space", db, key),
                Bytes::copy_from_slice(event.as_bytes()),
            );
        }
        if flags & KEYEVENT != 0 {
            send(
                channel("event", db, event.as_bytes()),
                Bytes::copy_from_slice(key),
            );
        }
    }

    /// The table removed a key on its own (the removed-key hook): the cache drops it,
    /// trackers are told, and `expired` or `evicted` is published.
    pub(crate) fn removed(&self, db: u8, key: &[u8], why: dmc_dht::Removal) {
        if let Some(c) = &self.cache {
            c.remove(db, key);
        }
        self.key_changed(Some(key), None);
        match why {
            dmc_dht::Removal::Expired => self.notify(EXPIRED, "expired", db, key),
            dmc_dht::Removal::Evicted => self.notify(EVICTED, "evicted", db, key),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_parse_and_print_as_redis_does() {
        assert_eq!(parse(""), Some(0));
        assert_eq!(parse("KEA").map(format).as_deref(), Some("AKE"));
        assert_eq!(parse("Ex$").map(format).as_deref(), Some("$xE"));
        assert_eq!(parse("gKl").map(format).as_deref(), Some("glK"));
        // A and its members: still A.
        assert_eq!(parse("g$lshzxetdA").map(format).as_deref(), Some("A"));
        assert_eq!(parse("Kmn").map(format).as_deref(), Some("Kmn"));
        assert_eq!(parse("KEw"), None);
        assert_eq!(parse("K E"), None);
    }

    #[test]
    fn channels_are_redis_names() {
        assert_eq!(&channel("space", 3, b"k:1")[..], b"__keyspace@3__:k:1");
        assert_eq!(&channel("event", 0, b"set")[..], b"__keyevent@0__:set");
    }
}
