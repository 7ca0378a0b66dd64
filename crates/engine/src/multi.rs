//! MULTI, EXEC, DISCARD, WATCH and UNWATCH with Redis 7 semantics: after MULTI a
//! client's commands are checked (a known command, its arity, authentication) and
//! queued (`+QUEUED`); a command refused then makes EXEC answer EXECABORT. EXEC takes
//! the write locks of every key its commands and WATCH name, checks that no WATCHed
//! key changed since WATCH (else answers a null array and runs nothing), and runs the
//! queue with the locks held: no other command of this agent — the only writer of its
//! hash slots — runs between the transaction's commands, and an error of one command
//! is that command's reply while the others run, as in Redis.
//!
//! A WATCHed key's version is its slot word: every write of a key installs a new word
//! (a new object), so "unchanged" is "the same word"; a key that was live at WATCH
//! and expired since counts as changed, as in Redis 7.
//!
//! The queued commands' writes are staged and committed together as one pool
//! transaction when the queue has run ([`run_locked`]), so a reader on any agent sees
//! all of the transaction or none of it.

use std::sync::Arc;

use bytes::Bytes;
use dmc_dht::{DhtError, ValueKind};
use dmc_resp::Reply;
use parking_lot::Mutex;

use crate::table::{Cmd, TABLE};
use crate::{Engine, Session, error_reply};

/// A client's transaction state.
#[derive(Debug, Clone, Default)]
pub struct TxState {
    /// After MULTI: the queued commands (their table row and arguments).
    pub queue: Option<Vec<(usize, Vec<Bytes>)>>,
    /// A command was refused while queuing: EXEC answers EXECABORT.
    pub dirty: bool,
    /// WATCHed keys: (stored db, key, version at WATCH).
    pub watched: Vec<(u8, Bytes, u64)>,
}

impl TxState {
    pub fn in_multi(&self) -> bool {
        self.queue.is_some()
    }

    /// Forgets the queue and the watched keys (EXEC, DISCARD, RESET).
    pub fn clear(&mut self) {
        *self = TxState::default();
    }
}

/// What a transaction (an EXEC, a script) holds while its commands run.
struct Held {
    /// The key-lock stripes it holds, sorted.
    stripes: Vec<usize>,
    /// Stripes a script took mid-run for keys it did not declare.
    claimed: Arc<Claimed>,
    /// What its writes do once committed.
    effects: Arc<Effects>,
}

/// The stripes a script took for keys it writes without having declared them, held
/// until its commit.
#[derive(Default)]
struct Claimed {
    /// Whether there are any (so that `held` reads the lock only then).
    any: std::sync::atomic::AtomicBool,
    guards: Mutex<Vec<(usize, tokio::sync::OwnedMutexGuard<()>)>>,
}

impl Claimed {
    fn holds(&self, stripe: usize) -> bool {
        self.any.load(std::sync::atomic::Ordering::Acquire)
            && self.guards.lock().iter().any(|(s, _)| *s == stripe)
    }

    fn add(&self, stripe: usize, guard: tokio::sync::OwnedMutexGuard<()>) {
        self.guards.lock().push((stripe, guard));
        self.any.store(true, std::sync::atomic::Ordering::Release);
    }

    fn highest(&self) -> Option<usize> {
        self.guards.lock().iter().map(|(s, _)| *s).max()
    }
}

/// Why a script may not go on writing a key it did not declare.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum ClaimRefused {
    /// Another writer holds the key and the script has had no effect yet: run it again
    /// from the start with this key locked beside its declared ones.
    Restart,
    /// Another writer held the key past the wait a script that has had effects may
    /// take (waiting longer could close a cycle of waits).
    Busy,
    /// The script was stopped while it waited.
    Stopped,
}

/// How long a script that has had effects waits for a key below the ones it holds.
const CLAIM_WAIT: std::time::Duration = std::time::Duration::from_millis(200);

/// Makes the script running on this task hold the locks of `keys`, which it writes
/// without having declared them. A stripe above every stripe it holds is waited for
/// (in stripe order, as [`Engine::lock_keys`] takes them, so no cycle of waits can
/// form); one below is taken only if free — else the script restarts with it declared
/// (`may_restart`: it has had no effect yet), or waits at most [`CLAIM_WAIT`]. Every
/// wait ends early when `stopped()` turns true. Outside a transaction, nothing to do.
pub(crate) async fn claim_for_script(
    engine: &Engine,
    keys: &[&[u8]],
    may_restart: bool,
    stopped: &(dyn Fn() -> bool + Sync),
) -> Result<(), ClaimRefused> {
    let Ok((declared, claimed)) = HELD.try_with(|h| (h.stripes.clone(), h.claimed.clone())) else {
        return Ok(());
    };
    let mut wanted = Engine::stripes_of(keys.iter().copied());
    wanted.retain(|s| declared.binary_search(s).is_err() && !claimed.holds(*s));
    for stripe in wanted {
        let Some(lock) = engine.key_lock(stripe) else {
            continue;
        };
        let highest = declared.last().copied().max(claimed.highest());
        let ordered = highest.is_none_or(|h| stripe > h);
        let guard = match lock.clone().try_lock_owned() {
            Ok(g) => g,
            Err(_) if !ordered && may_restart => return Err(ClaimRefused::Restart),
            Err(_) => {
                let wait = lock.clone().lock_owned();
                tokio::pin!(wait);
                let started = std::time::Instant::now();
                loop {
                    let tick = std::time::Duration::from_millis(10);
                    match tokio::time::timeout(tick, &mut wait).await {
                        Ok(g) => break g,
                        Err(_) if stopped() => return Err(ClaimRefused::Stopped),
                        Err(_) if !ordered && started.elapsed() >= CLAIM_WAIT => {
                            return Err(ClaimRefused::Busy);
                        }
                        Err(_) => {}
                    }
                }
            }
        };
        claimed.add(stripe, guard);
    }
    Ok(())
}

/// The effects of a transaction's writes outside the pool, held until its one commit
/// made them visible: the local cache's write-through (and the backups' feed), and
/// waking clients blocked on keys it pushed to.
#[derive(Default)]
struct Effects {
    cache: Mutex<Vec<CacheWrite>>,
    wakes: Mutex<Vec<(u8, Bytes)>>,
    /// Keyspace notifications: `(class, event, db, key)`.
    notes: Mutex<Vec<(u32, &'static str, u8, Bytes)>>,
}

/// A write-through of the local cache (see [`Engine::wrote_typed`]).
type CacheWrite = (u8, Bytes, ValueKind, Option<(Bytes, Option<u64>)>);

tokio::task_local! {
    static HELD: Held;
}

/// Whether the EXEC running on this task holds key-lock stripe `stripe` (its commands
/// take no lock of their own for it).
pub(crate) fn held(stripe: usize) -> bool {
    HELD.try_with(|h| h.stripes.binary_search(&stripe).is_ok() || h.claimed.holds(stripe))
        .unwrap_or(false)
}

/// Whether this task runs the commands of an EXEC or a script (their writes are
/// staged, blocking commands do not block there, and same-key batches run on the task
/// itself).
pub(crate) fn in_exec() -> bool {
    HELD.try_with(|_| ()).is_ok()
}

/// Inside a transaction: holds a local-cache write-through until the commit and
/// returns `true`; `false` outside one (write through now).
pub(crate) fn defer_cache_write(
    db: u8,
    key: &[u8],
    kind: ValueKind,
    now: Option<(&[u8], Option<u64>)>,
) -> bool {
    HELD.try_with(|h| {
        let now = now.map(|(v, at)| (Bytes::copy_from_slice(v), at));
        h.effects
            .cache
            .lock()
            .push((db, Bytes::copy_from_slice(key), kind, now));
    })
    .is_ok()
}

/// Inside a transaction: holds the wake-up of clients blocked on `key` until the
/// commit (they would find the pool unchanged) and returns `true`.
pub(crate) fn defer_wake(db: u8, key: &[u8]) -> bool {
    HELD.try_with(|h| {
        h.effects
            .wakes
            .lock()
            .push((db, Bytes::copy_from_slice(key)))
    })
    .is_ok()
}

/// Inside a transaction: holds a keyspace notification until the commit (a failed
/// commit announces nothing) and returns `true`.
pub(crate) fn defer_notify(class: u32, event: &'static str, db: u8, key: &[u8]) -> bool {
    HELD.try_with(|h| {
        h.effects
            .notes
            .lock()
            .push((class, event, db, Bytes::copy_from_slice(key)))
    })
    .is_ok()
}

/// While `session` is in MULTI: queues the command at table row `index` (or answers
/// why it cannot be queued) and returns the reply; `None` for the commands that run
/// even then (EXEC, DISCARD, MULTI, WATCH, QUIT, RESET).
pub(crate) fn queue(
    engine: &Engine,
    session: &mut Session,
    index: Option<usize>,
    args: &[Bytes],
) -> Option<Reply> {
    let tx = &mut session.tx;
    tx.queue.as_ref()?;
    let Some(spec) = index.and_then(|i| TABLE.get(i)) else {
        tx.dirty = true;
        return Some(crate::dispatch::unknown(args));
    };
    if matches!(
        spec.cmd,
        Cmd::Exec | Cmd::Discard | Cmd::Multi | Cmd::Watch | Cmd::Quit | Cmd::Reset
    ) {
        return None;
    }
    // A subscription answers once per channel, which an EXEC's array cannot hold
    // (Redis 7.0 writes a malformed reply there).
    if crate::pubsub::is_subscription(spec.cmd) {
        tx.dirty = true;
        return Some(Reply::err("ERR Command not allowed inside a transaction"));
    }
    if !spec.arity_ok(args.len()) {
        tx.dirty = true;
        return Some(Reply::Error(format!(
            "ERR wrong number of arguments for '{}' command",
            spec.name
        )));
    }
    if !session.authenticated && !spec.has_flag("no-auth") {
        tx.dirty = true;
        return Some(Reply::err("NOAUTH Authentication required."));
    }
    // A command the user may not run is refused now, as Redis does, and again when
    // EXEC runs it (its user may have changed meanwhile).
    if let Err((reply, _)) = crate::acl_cmd::check(engine, session, spec, args) {
        session.tx.dirty = true;
        return Some(reply);
    }
    let Some(queue) = session.tx.queue.as_mut() else {
        return Some(Reply::err("ERR internal: the transaction's queue is gone"));
    };
    queue.push((index.unwrap_or(0), args.to_vec()));
    Some(Reply::Simple("QUEUED"))
}

pub async fn run(engine: &Engine, session: &mut Session, cmd: Cmd, args: &[Bytes]) -> Reply {
    match cmd {
        Cmd::Multi => {
            if session.tx.in_multi() {
                return Reply::err("ERR MULTI calls can not be nested");
            }
            session.tx.queue = Some(Vec::new());
            session.tx.dirty = false;
            Reply::ok()
        }
        Cmd::Discard => {
            if !session.tx.in_multi() {
                return Reply::err("ERR DISCARD without MULTI");
            }
            session.tx.clear();
            Reply::ok()
        }
        Cmd::Watch => {
            if session.tx.in_multi() {
                return Reply::err("ERR WATCH inside MULTI is not allowed");
            }
            let db = engine.physical_db(session.db);
            for key in &args[1..] {
                match engine.dht.version(db, key).await {
                    Ok(v) => session.tx.watched.push((db, key.clone(), v)),
                    Err(e) => return error_reply(e),
                }
            }
            Reply::ok()
        }
        Cmd::Unwatch => {
            session.tx.watched.clear();
            Reply::ok()
        }
        Cmd::Exec => exec(engine, session).await,
        _ => Reply::err("ERR internal: not a transaction command"),
    }
}

/// EXEC: the queued commands under the locks of all their keys, or EXECABORT, or a
/// null array when a WATCHed key changed.
async fn exec(engine: &Engine, session: &mut Session) -> Reply {
    let Some(queue) = session.tx.queue.take() else {
        return Reply::err("ERR EXEC without MULTI");
    };
    let dirty = session.tx.dirty;
    let watched = std::mem::take(&mut session.tx.watched);
    session.tx.clear();
    if dirty {
        return Reply::err("EXECABORT Transaction discarded because of previous errors.");
    }
    let mut keys: Vec<Bytes> = watched.iter().map(|(_, k, _)| k.clone()).collect();
    for (index, args) in &queue {
        if let Some(spec) = TABLE.get(*index) {
            keys.extend(
                spec.key_positions(args)
                    .into_iter()
                    .filter_map(|i| args.get(i).cloned()),
            );
        }
    }
    let ran = run_locked(engine, &keys, async {
        for (db, key, seen) in &watched {
            match engine.dht.version(*db, key).await {
                Ok(now) if now == *seen => {}
                Ok(_) => return Reply::NullArray,
                Err(e) => return error_reply(e),
            }
        }
        let mut replies = Vec::with_capacity(queue.len());
        for (index, args) in queue {
            let (reply, _) = Box::pin(crate::dispatch::dispatch_at(
                engine,
                session,
                Some(index),
                args,
            ))
            .await;
            replies.push(reply);
        }
        Reply::Array(replies)
    })
    .await;
    ran.unwrap_or_else(error_reply)
}

/// Runs `work` holding the write locks of `keys` (an EXEC, a script) as one
/// transaction: the commands it runs take no lock of their own for them, same-key
/// batches run on this task, blocking commands do not block, and every write is staged
/// ([`dmc_dht::Dht::stage`]) and committed at the end in one pool transaction, after
/// which the cache write-throughs and wake-ups it held happen. Nested (a script run by
/// an EXEC), the outer one's locks are not taken again and the outer one commits. An
/// error is the commit's: nothing of the work is visible then.
pub(crate) async fn run_locked<T>(
    engine: &Engine,
    keys: &[Bytes],
    work: impl Future<Output = T>,
) -> Result<T, DhtError> {
    let _locks = engine.lock_keys(keys.iter().map(|k| &k[..])).await;
    let mut stripes = Engine::stripes_of(keys.iter().map(|k| &k[..]));
    if let Ok((outer, claimed, effects)) =
        HELD.try_with(|h| (h.stripes.clone(), h.claimed.clone(), h.effects.clone()))
    {
        stripes.extend(outer);
        stripes.sort_unstable();
        stripes.dedup();
        let held = Held {
            stripes,
            claimed,
            effects,
        };
        return Ok(HELD.scope(held, work).await);
    }
    let effects = Arc::new(Effects::default());
    // Kept here, not only in the scope's `Held`: what a script claims stays locked
    // until its commit below.
    let claimed = Arc::new(Claimed::default());
    let held = Held {
        stripes,
        claimed: claimed.clone(),
        effects: effects.clone(),
    };
    let (out, staged) = engine.dht.stage(HELD.scope(held, work)).await;
    // MGETs of this agent that overlap the commit read a snapshot instead.
    let _committing = (!staged.is_empty()).then(|| engine.commits.begin());
    engine.dht.commit_staged(staged).await?;
    let cache = std::mem::take(&mut *effects.cache.lock());
    for (db, key, kind, now) in cache {
        engine.wrote_typed(db, &key, kind, now.as_ref().map(|(v, at)| (&v[..], *at)));
    }
    let wakes = std::mem::take(&mut *effects.wakes.lock());
    for (db, key) in wakes {
        engine.blocking.wake(db, &key);
    }
    let notes = std::mem::take(&mut *effects.notes.lock());
    for (class, event, db, key) in notes {
        engine.notify(class, event, db, &key);
    }
    Ok(out)
}
