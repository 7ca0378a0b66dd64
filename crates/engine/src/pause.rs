//! CLIENT PAUSE / UNPAUSE on one agent, as Redis 7: for `timeout` ms the commands of
//! this agent's clients wait before they run — every command (`ALL`, the default) or
//! those that may write (`WRITE`: writes, EVAL and its kin, PUBLISH). A new pause keeps
//! the later end and the stricter mode; UNPAUSE ends it at once. CLIENT commands
//! themselves never wait (so UNPAUSE reaches a paused agent), and neither do other
//! agents' forwarded commands (the pause is this agent's clients', as in Redis it is a
//! server's). The connection loop calls [`Pause::wait`] before each client command.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::table::{self, Cmd};

#[derive(Debug, Clone, Copy)]
struct Paused {
    until: Instant,
    /// `ALL` (else `WRITE`).
    all: bool,
}

/// This agent's pause, if one is on.
#[derive(Debug, Default)]
pub struct Pause {
    on: AtomicBool,
    state: Mutex<Option<Paused>>,
    ended: Notify,
}

impl Pause {
    /// `CLIENT PAUSE`: pauses for `ms` milliseconds (`all`: every command).
    pub fn pause(&self, ms: u64, all: bool) {
        let until = Instant::now() + Duration::from_millis(ms);
        let mut s = self.state.lock();
        let next = match *s {
            Some(p) => Paused {
                until: p.until.max(until),
                all: p.all || all,
            },
            None => Paused { until, all },
        };
        *s = Some(next);
        self.on.store(true, Ordering::Release);
    }

    /// `CLIENT UNPAUSE`.
    pub fn unpause(&self) {
        *self.state.lock() = None;
        self.on.store(false, Ordering::Release);
        self.ended.notify_waiters();
    }

    /// Whether a pause may be on (one load: the connection loop asks per command).
    pub fn active(&self) -> bool {
        self.on.load(Ordering::Acquire)
    }

    /// Waits while a pause holds the command `args` back.
    pub async fn wait(&self, args: &[Bytes]) {
        let spec = args.first().and_then(|n| table::lookup(n));
        let Some(spec) = spec.filter(|s| s.cmd != Cmd::Client) else {
            return;
        };
        let writes = spec.is_write()
            || matches!(
                spec.cmd,
                Cmd::Eval | Cmd::EvalSha | Cmd::Publish | Cmd::SPublish
            );
        loop {
            // Registered before the state is read, so an UNPAUSE in between is seen.
            let ended = self.ended.notified();
            let until = {
                let s = self.state.lock();
                match *s {
                    Some(p) if Instant::now() < p.until && (p.all || writes) => p.until,
                    _ => return,
                }
            };
            tokio::select! {
                _ = ended => {}
                _ = tokio::time::sleep_until(until) => {}
            }
            let mut s = self.state.lock();
            if s.is_some_and(|p| Instant::now() >= p.until) {
                *s = None;
                self.on.store(false, Ordering::Release);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd(words: &[&str]) -> Vec<Bytes> {
        words.iter().map(|w| Bytes::from(w.to_string())).collect()
    }

    #[tokio::test(start_paused = true)]
    async fn writes_wait_out_a_write_pause_and_reads_do_not() {
        let p = Pause::default();
        p.pause(1000, false);
        let started = tokio::time::Instant::now();
        p.wait(&cmd(&["GET", "k"])).await;
        assert_eq!(started.elapsed(), Duration::ZERO, "a read runs");
        p.wait(&cmd(&["CLIENT", "UNPAUSE"])).await;
        assert_eq!(started.elapsed(), Duration::ZERO, "CLIENT never waits");
        p.wait(&cmd(&["SET", "k", "v"])).await;
        assert!(
            started.elapsed() >= Duration::from_millis(1000),
            "a write waits"
        );
        assert!(!p.active(), "the pause ended");
    }

    #[tokio::test(start_paused = true)]
    async fn unpause_releases_waiting_commands_at_once() {
        let p = std::sync::Arc::new(Pause::default());
        p.pause(60_000, true);
        let waiting = {
            let p = p.clone();
            tokio::spawn(async move { p.wait(&cmd(&["GET", "k"])).await })
        };
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "ALL holds reads too");
        p.unpause();
        waiting.await.unwrap();
    }
}
