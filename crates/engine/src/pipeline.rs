//! Pipelined fast paths: a run of `GET key` read from the pool as one batch, a run of
//! SETs and counter updates (INCR and its kin) of distinct keys written together, and
//! the keys of a pipeline's other commands loaded ahead.
//!
//! The connection loop asks how long a run is ([`Engine::leading_gets`],
//! [`Engine::leading_writes`]) and runs it here instead of through [`crate::dispatch`];
//! which commands qualify is the command table's [`FastPath`] of each entry. A run must
//! answer exactly what running its commands one by one would.

use std::sync::atomic::Ordering;

use bytes::Bytes;
use dmc_resp::Reply;

use crate::table::{self, Cmd, FastPath};
use crate::{Engine, Session, error_reply, strings};

/// Commands of one pipeline whose keys [`Engine::prefetch_keys`] loads ahead, at most.
const PREFETCH_AHEAD: usize = 128;

/// Whether two keys are equal, comparing their lengths and last eight bytes first:
/// a run's keys are compared pairwise, and keys that differ mostly differ at the end
/// (`key:000000012345`), where the first test tells them apart without a `memcmp`.
fn same_key(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len()
        && match (a.last_chunk::<8>(), b.last_chunk::<8>()) {
            (Some(x), Some(y)) => x == y && a == b,
            _ => a == b,
        }
}

/// The fast path the table gives a command's name.
fn fast_path(args: &[Bytes]) -> FastPath {
    args.first()
        .map_or(FastPath::None, |name| table::fast_path_of(name))
}

impl Engine {
    /// Whether the fast paths may take the session's commands: [`Session::plain`], and
    /// its user may run anything, as of the current users (after a change, the next
    /// command through dispatch takes the user's new rules).
    pub fn plain(&self, session: &Session) -> bool {
        session.plain()
            && (session.peer
                || (session.user.unrestricted() && session.acl_generation == self.acl.generation()))
    }

    /// Starts loading what a pipeline's commands that name one key first (SET, INCR,
    /// HSET, ...; not GET, whose batches stage their own reads) will touch in the pool:
    /// the key's lock stripe, buckets and object. Over in-process memory the commands
    /// then run one after another without waiting, and their cache misses overlap only
    /// if they are all started first. Nothing for a lone command or a session already in
    /// MULTI (the commands of a pipeline that opens with MULTI are loaded, and then
    /// queued: wasted, never wrong, as for keys another agent owns); at most the first
    /// [`PREFETCH_AHEAD`] commands (what is loaded must still be in the cache when its
    /// command runs).
    pub fn prefetch_keys(&self, session: &Session, commands: &[Vec<Bytes>]) {
        if commands.len() < 2 || !self.plain(session) {
            return;
        }
        let keys = commands.iter().take(PREFETCH_AHEAD).filter_map(|a| {
            let spec = table::lookup(a.first()?)?;
            if spec.first_key != 1 || spec.fast_path() == FastPath::Get {
                return None;
            }
            a.get(1).map(|k| &k[..])
        });
        // The key's lock stripe too: taking it is the write's first locked instruction.
        let keys = keys.inspect(|key| self.prefetch_key_lock(key));
        self.dht
            .prefetch_buckets(self.physical_db(session.db), keys);
    }

    /// How many of the leading `commands` are plain `GET key` that
    /// [`get_batch`](Self::get_batch) may run together (at most `max`). Consecutive
    /// reads of one connection see no write of its own between them, so reading them
    /// as one batch answers exactly what running them one by one would.
    pub fn leading_gets(&self, session: &Session, commands: &[Vec<Bytes>], max: usize) -> usize {
        // In MULTI commands are queued, not run.
        if !self.plain(session) {
            return 0;
        }
        commands
            .iter()
            .take(max)
            .take_while(|a| a.len() == 2 && fast_path(a) == FastPath::Get)
            .count()
    }

    /// Runs pipelined `GET`s together (see [`leading_gets`](Self::leading_gets)).
    pub async fn get_batch(&self, session: &Session, commands: &[Vec<Bytes>]) -> Vec<Reply> {
        self.stats
            .commands
            .fetch_add(commands.len() as u64, Ordering::Relaxed);
        if let Some(get) = table::lookup_index(b"get") {
            session
                .client
                .touch(&self.clients, get, session.db, session.proto);
        }
        let keys: Vec<&[u8]> = commands.iter().map(|a| &a[1][..]).collect();
        let db = self.physical_db(session.db);
        match self.read_many(db, &keys).await {
            Ok(values) => values
                .into_iter()
                .map(|v| match v {
                    Some((dmc_dht::ValueKind::String, v)) => Reply::Bulk(v),
                    Some(_) => {
                        self.stats.error_replies.fetch_add(1, Ordering::Relaxed);
                        error_reply(dmc_dht::DhtError::WrongType)
                    }
                    None => Reply::Null,
                })
                .collect(),
            // The batch failed: read key by key, so only the keys that fail get errors.
            Err(_) => {
                let mut replies = Vec::with_capacity(keys.len());
                for k in keys {
                    replies.push(match self.read(db, k).await {
                        Ok(v) => v.map(Reply::Bulk).unwrap_or(Reply::Null),
                        Err(e) => {
                            self.stats.error_replies.fetch_add(1, Ordering::Relaxed);
                            error_reply(e)
                        }
                    });
                }
                replies
            }
        }
    }

    /// How many of the leading `commands` are writes of distinct keys that
    /// [`write_batch`](Self::write_batch) may run together (at most `max`): SETs and
    /// counter updates (INCR, DECR, INCRBY, DECRBY) with the right number of
    /// arguments. Writes of different keys commute, so their replies are what running
    /// them in order would give, and their commits can share the group committer's
    /// round trips.
    pub fn leading_writes(&self, session: &Session, commands: &[Vec<Bytes>], max: usize) -> usize {
        if !self.plain(session) {
            return 0;
        }
        let mut keys: Vec<&[u8]> = Vec::new();
        for a in commands.iter().take(max) {
            let batched = a
                .first()
                .and_then(|name| table::lookup(name))
                .is_some_and(|spec| {
                    matches!(spec.fast_path(), FastPath::Set | FastPath::Counter)
                        && spec.arity_ok(a.len())
                });
            match a.get(1) {
                Some(key) if batched && !keys.iter().any(|k| same_key(k, key)) => keys.push(key),
                _ => break,
            }
        }
        keys.len()
    }

    /// Runs pipelined writes of distinct keys together (see
    /// [`leading_writes`](Self::leading_writes)); replies in command order.
    pub async fn write_batch(&self, session: &Session, commands: &[Vec<Bytes>]) -> Vec<Reply> {
        self.stats
            .commands
            .fetch_add(commands.len() as u64, Ordering::Relaxed);
        if let Some(last) = commands
            .last()
            .and_then(|a| table::lookup_index(a.first()?))
        {
            session
                .client
                .touch(&self.clients, last, session.db, session.proto);
        }
        let db = self.physical_db(session.db);
        let cmd_of = |a: &[Bytes]| {
            a.first()
                .and_then(|name| table::lookup(name))
                .map(|s| s.cmd)
        };
        // Those the table writes at once first (no future per command), then the rest
        // together; a placeholder holds each awaited one's place.
        let mut replies = Vec::with_capacity(commands.len());
        let mut waiting = Vec::new();
        // The inline writes read the table's clock (expiry checks, access times) once
        // between them; a SET's EX or PX is still counted from the engine's clock.
        self.dht.at_one_time(|| {
            for (i, a) in commands.iter().enumerate() {
                let now = match cmd_of(a) {
                    Some(Cmd::Set) => strings::set_now(self, db, a),
                    Some(cmd) => strings::counter_now(self, db, cmd, a),
                    None => Some(Reply::err("ERR unknown command")),
                };
                match now {
                    Some(reply) => replies.push(reply),
                    None => {
                        waiting.push(i);
                        replies.push(Reply::Null);
                    }
                }
            }
        });
        if !waiting.is_empty() {
            let awaited = futures::future::join_all(waiting.iter().map(|&i| {
                let a = &commands[i];
                async move {
                    match cmd_of(a) {
                        Some(Cmd::Set) => strings::set_declined(self, db, a).await,
                        Some(cmd) => strings::counter_declined(self, db, cmd, a).await,
                        None => Reply::err("ERR unknown command"),
                    }
                }
            }))
            .await;
            for (i, reply) in waiting.into_iter().zip(awaited) {
                replies[i] = reply;
            }
        }
        let errors = replies
            .iter()
            .filter(|r| matches!(r, Reply::Error(_)))
            .count();
        self.stats
            .error_replies
            .fetch_add(errors as u64, Ordering::Relaxed);
        replies
    }
}

#[cfg(test)]
mod tests {
    use super::same_key;

    #[test]
    fn same_key_is_equality() {
        let keys: [&[u8]; 7] = [
            b"",
            b"a",
            b"key:000000012345",
            b"key:000000012346",
            b"kez:000000012345",
            b"key:00000012345",
            b"a much longer key:000000012345",
        ];
        for a in keys {
            for b in keys {
                assert_eq!(same_key(a, b), a == b, "{a:?} {b:?}");
            }
        }
    }
}
