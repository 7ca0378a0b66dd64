//! Blocked clients: BLPOP, BRPOP, BLMOVE, BRPOPLPUSH, BLMPOP, BZPOPMIN, BZPOPMAX and
//! BZMPOP wait here until a push to one of their keys, their timeout, `CLIENT UNBLOCK`,
//! `CLIENT KILL` or their connection's end.
//!
//! Only the owner of a key's hash slot writes it, and every push runs there (proxy-mode
//! agents forward writes and blocking commands alike), so a registry per agent sees
//! every push that can wake a waiter. A waiter registers on its keys *before* its first
//! attempt, and a wake leaves a permit, so a push between the attempt and the wait is
//! never lost. Waiters of one key are woken in the order they blocked, and take the
//! key's write lock (a FIFO lock) in that order, which is Redis's fairness. A new
//! cluster map wakes everyone: a waiter whose key moved away gets the not-owner error
//! the agent's router re-routes.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use dmc_resp::Reply;
use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::clients::Unblock;
use crate::lists::{self, End};
use crate::table::{ListCmd, ZSetCmd};
use crate::zsets::{self, Extreme};
use crate::{Engine, SYNTAX, Session};

/// The longest timeout a blocking command may ask for (Redis refuses past this too).
const MAX_TIMEOUT: Duration = Duration::from_secs(365 * 24 * 3600);

/// The clients blocked on one key, oldest first.
type Waiters = Vec<Arc<Notify>>;

/// Who waits for which key.
#[derive(Default)]
pub struct Blocking {
    waiters: Mutex<HashMap<(u8, Bytes), Waiters>>,
    /// How many waiters are registered: a push checks this before taking the lock.
    count: AtomicUsize,
    /// Clients blocked right now.
    clients: AtomicUsize,
}

impl Blocking {
    /// Wakes the clients blocked on `key` (after a push to it), oldest first.
    pub fn wake(&self, db: u8, key: &[u8]) {
        if self.count.load(Ordering::Acquire) == 0 || crate::multi::defer_wake(db, key) {
            return;
        }
        let waiters = self.waiters.lock();
        if let Some(list) = waiters.get(&(db, Bytes::copy_from_slice(key))) {
            for w in list {
                w.notify_one();
            }
        }
    }

    /// Wakes every blocked client, to re-check where its keys live (a new cluster map)
    /// or to leave (shutdown).
    pub fn wake_all(&self) {
        for list in self.waiters.lock().values() {
            for w in list {
                w.notify_one();
            }
        }
    }

    /// Keys blocked clients wait on, counted once per client and key.
    pub fn blocked_keys(&self) -> usize {
        self.count.load(Ordering::Acquire)
    }

    /// Clients blocked right now (INFO `blocked_clients`).
    pub fn blocked_clients(&self) -> usize {
        self.clients.load(Ordering::Acquire)
    }

    fn register(&self, db: u8, keys: &[Bytes], w: &Arc<Notify>) {
        self.clients.fetch_add(1, Ordering::AcqRel);
        let mut waiters = self.waiters.lock();
        for k in keys {
            waiters.entry((db, k.clone())).or_default().push(w.clone());
            self.count.fetch_add(1, Ordering::AcqRel);
        }
    }

    fn unregister(&self, db: u8, keys: &[Bytes], w: &Arc<Notify>) {
        self.clients.fetch_sub(1, Ordering::AcqRel);
        let mut waiters = self.waiters.lock();
        for k in keys {
            let entry = (db, k.clone());
            if let Some(list) = waiters.get_mut(&entry) {
                if let Some(i) = list.iter().position(|x| Arc::ptr_eq(x, w)) {
                    list.remove(i);
                    self.count.fetch_sub(1, Ordering::AcqRel);
                }
                if list.is_empty() {
                    waiters.remove(&entry);
                }
            }
        }
    }
}

/// A registration that ends when dropped (the command returned or was cancelled).
struct Registered<'a> {
    blocking: &'a Blocking,
    db: u8,
    keys: &'a [Bytes],
    notify: Arc<Notify>,
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        self.blocking.unregister(self.db, self.keys, &self.notify);
    }
}

/// Parses a blocking command's timeout in seconds (a float; 0 waits for ever).
pub fn timeout_arg(arg: &[u8]) -> Result<Option<Duration>, Reply> {
    let secs = std::str::from_utf8(arg)
        .ok()
        .filter(|s| !s.is_empty() && !s.contains(char::is_whitespace))
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|f| f.is_finite())
        .ok_or_else(|| Reply::err("ERR timeout is not a float or out of range"))?;
    if secs < 0.0 {
        return Err(Reply::err("ERR timeout is negative"));
    }
    if secs == 0.0 {
        return Ok(None);
    }
    let d = Duration::try_from_secs_f64(secs)
        .ok()
        .filter(|d| *d <= MAX_TIMEOUT)
        .ok_or_else(|| Reply::err("ERR timeout is out of range"))?;
    Ok(Some(d))
}

/// Where a blocking command's timeout argument is, from its arguments (for callers
/// that forward it and must wait as long): `None` for a command that does not block.
pub fn timeout_position(name: &[u8], argc: usize) -> Option<usize> {
    let lower = name.to_ascii_lowercase();
    match &lower[..] {
        b"blpop" | b"brpop" | b"bzpopmin" | b"bzpopmax" | b"brpoplpush" => argc.checked_sub(1),
        b"blmove" => Some(5),
        b"blmpop" | b"bzmpop" => Some(1),
        _ => None,
    }
}

/// XREAD's and XREADGROUP's `BLOCK milliseconds` (before STREAMS), for callers that
/// forward them: `None` when the command does not block, `Some(None)` for ever.
pub fn stream_block(args: &[Bytes]) -> Option<Option<Duration>> {
    let name = args.first()?;
    if !name.eq_ignore_ascii_case(b"xread") && !name.eq_ignore_ascii_case(b"xreadgroup") {
        return None;
    }
    let end = args
        .iter()
        .position(|a| a.eq_ignore_ascii_case(b"streams"))
        .unwrap_or(args.len());
    let at = args[..end]
        .iter()
        .position(|a| a.eq_ignore_ascii_case(b"block"))?;
    let ms = crate::parse_i64(args.get(at + 1)?)?;
    Some((ms > 0).then(|| Duration::from_millis(ms as u64)))
}

/// Runs `attempt` until it answers, blocking between attempts on `keys` until a push,
/// the timeout (answered with a null array, as Redis does), CLIENT UNBLOCK or the
/// client's end.
pub(crate) async fn block<F, Fut>(
    engine: &Engine,
    s: &Session,
    db: u8,
    keys: &[Bytes],
    timeout: Option<Duration>,
    mut attempt: F,
) -> Reply
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<Reply>, Reply>>,
{
    if crate::multi::in_exec() {
        // Inside EXEC a blocking command does not block (Redis: as if it timed out).
        return match attempt().await {
            Ok(Some(reply)) => reply,
            Ok(None) => Reply::NullArray,
            Err(e) => e,
        };
    }
    // Each key once (Redis de-duplicates): a key named N times registered and
    // unregistered N times, O(N²) under the agent's one waiters lock.
    let mut seen = std::collections::HashSet::with_capacity(keys.len());
    let unique: Vec<Bytes> = keys.iter().filter(|k| seen.insert(*k)).cloned().collect();
    let reg = Registered {
        blocking: &engine.blocking,
        db,
        keys: &unique,
        notify: Arc::new(Notify::new()),
    };
    engine.blocking.register(db, &unique, &reg.notify);
    let deadline = timeout.map(|t| tokio::time::Instant::now() + t);
    let _blocked = s.client.block();
    loop {
        match attempt().await {
            Ok(Some(reply)) => return reply,
            Ok(None) => {}
            Err(e) => return e,
        }
        let timer = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = reg.notify.notified() => {}
            _ = timer => return Reply::NullArray,
            _ = s.client.killed() => return Reply::NullArray,
            how = s.client.unblocked() => return match how {
                Unblock::Timeout => Reply::NullArray,
                Unblock::Error => Reply::err("UNBLOCKED client unblocked via CLIENT UNBLOCK"),
            },
        }
    }
}

/// BLPOP, BRPOP, BLMOVE, BRPOPLPUSH, BLMPOP.
pub async fn run_list(engine: &Engine, s: &Session, db: u8, cmd: ListCmd, args: &[Bytes]) -> Reply {
    match cmd {
        ListCmd::BLPop | ListCmd::BRPop => {
            let end = if cmd == ListCmd::BLPop {
                End::Left
            } else {
                End::Right
            };
            let timeout = match timeout_arg(&args[args.len() - 1]) {
                Ok(t) => t,
                Err(r) => return r,
            };
            let keys = &args[1..args.len() - 1];
            block(engine, s, db, keys, timeout, || async move {
                for k in keys {
                    if let Some(mut items) = lists::pop(engine, db, k, end, 1).await?
                        && let Some(item) = items.pop()
                    {
                        return Ok(Some(Reply::Array(vec![
                            Reply::Bulk(k.clone()),
                            Reply::Bulk(item),
                        ])));
                    }
                }
                Ok(None)
            })
            .await
        }
        ListCmd::BLMove | ListCmd::BRPopLPush => {
            let (from, to, at) = if cmd == ListCmd::BRPopLPush {
                (End::Right, End::Left, 3)
            } else {
                match (End::parse(&args[3]), End::parse(&args[4])) {
                    (Some(f), Some(t)) => (f, t, 5),
                    _ => return Reply::err(SYNTAX),
                }
            };
            let timeout = match timeout_arg(&args[at]) {
                Ok(t) => t,
                Err(r) => return r,
            };
            let (src, dst) = (&args[1], &args[2]);
            block(engine, s, db, &args[1..2], timeout, || async move {
                Ok(lists::move_one(engine, db, src, dst, from, to)
                    .await?
                    .map(Reply::Bulk))
            })
            .await
        }
        ListCmd::BLMPop => {
            let timeout = match timeout_arg(&args[1]) {
                Ok(t) => t,
                Err(r) => return r,
            };
            let m = match lists::parse_mpop(args, 2) {
                Ok(m) => m,
                Err(r) => return r,
            };
            let keys = m.keys.clone();
            let m = &m;
            block(engine, s, db, &keys, timeout, || async move {
                match lists::mpop_once(engine, db, m).await? {
                    Reply::NullArray => Ok(None),
                    r => Ok(Some(r)),
                }
            })
            .await
        }
        _ => Reply::err("ERR internal: not a blocking list command"),
    }
}

/// BZPOPMIN, BZPOPMAX, BZMPOP.
pub async fn run_zset(engine: &Engine, s: &Session, db: u8, cmd: ZSetCmd, args: &[Bytes]) -> Reply {
    if cmd == ZSetCmd::BZMPop {
        let timeout = match timeout_arg(&args[1]) {
            Ok(t) => t,
            Err(r) => return r,
        };
        let m = match zsets::parse_mpop(args, 2) {
            Ok(m) => m,
            Err(r) => return r,
        };
        let keys = m.keys.clone();
        let m = &m;
        return block(engine, s, db, &keys, timeout, || async move {
            match zsets::mpop_once(engine, db, m).await? {
                Reply::NullArray => Ok(None),
                r => Ok(Some(r)),
            }
        })
        .await;
    }
    let end = if cmd == ZSetCmd::BZPopMin {
        Extreme::Min
    } else {
        Extreme::Max
    };
    let timeout = match timeout_arg(&args[args.len() - 1]) {
        Ok(t) => t,
        Err(r) => return r,
    };
    let keys = &args[1..args.len() - 1];
    block(engine, s, db, keys, timeout, || async move {
        for k in keys {
            if let Some(mut items) = zsets::pop(engine, db, k, end, 1).await?
                && let Some((m, score)) = items.pop()
            {
                return Ok(Some(Reply::Array(vec![
                    Reply::Bulk(k.clone()),
                    Reply::Bulk(m),
                    Reply::Double(score),
                ])));
            }
        }
        Ok(None)
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_parse_as_redis_does() {
        assert_eq!(timeout_arg(b"0").ok(), Some(None));
        assert_eq!(
            timeout_arg(b"0.5").ok(),
            Some(Some(Duration::from_millis(500)))
        );
        assert!(timeout_arg(b"-1").is_err());
        assert!(timeout_arg(b"abc").is_err());
        assert!(timeout_arg(b"1e300").is_err());
        assert_eq!(timeout_position(b"BLPOP", 4), Some(3));
        assert_eq!(timeout_position(b"blmpop", 6), Some(1));
        assert_eq!(timeout_position(b"lpop", 2), None);
    }

    #[test]
    fn a_wake_before_the_wait_is_kept() {
        let b = Blocking::default();
        let n = Arc::new(Notify::new());
        let keys = [Bytes::from("k")];
        b.register(0, &keys, &n);
        b.wake(0, b"k");
        b.unregister(0, &keys, &n);
        assert_eq!(b.blocked_keys(), 0);
        // The permit the wake left is there for the waiter's next wait.
        let waited = futures::FutureExt::now_or_never(n.notified());
        assert!(waited.is_some());
    }
}
