//! Time as an input: the table reads the wall clock through [`Clock`] so tests can move
//! it (expiry, LRU idle time) without sleeping; a synchronous batch of commands can
//! read it once for all of them ([`frozen`]).

use std::cell::Cell;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

pub trait Clock: Send + Sync {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> u64;
}

/// The system's wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0)
    }
}

/// A clock tests set and advance by hand.
#[derive(Debug, Clone)]
pub struct ManualClock(Arc<AtomicU64>);

impl ManualClock {
    pub fn new(start_ms: u64) -> Self {
        ManualClock(Arc::new(AtomicU64::new(start_ms)))
    }
    pub fn advance(&self, ms: u64) {
        self.0.fetch_add(ms, Ordering::SeqCst);
    }
    pub fn set(&self, ms: u64) {
        self.0.store(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

thread_local! {
    /// The time a [`frozen`] scope on this thread runs at, and whose clock it is.
    static FROZEN: Cell<Option<(usize, u64)>> = const { Cell::new(None) };
}

/// Runs `f` on this thread with the time of the clock identified by `owner` fixed at
/// `ms`: [`frozen_ms`] answers it for that owner inside `f`. Scopes nest; the outer
/// one's time is back when the inner one ends, even by unwinding.
pub(crate) fn frozen<R>(owner: usize, ms: u64, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<(usize, u64)>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let _ = FROZEN.try_with(|t| t.set(self.0));
        }
    }
    let _restore = Restore(
        FROZEN
            .try_with(|t| t.replace(Some((owner, ms))))
            .ok()
            .flatten(),
    );
    f()
}

/// The time of the [`frozen`] scope this thread runs in, if it is `owner`'s.
pub(crate) fn frozen_ms(owner: usize) -> Option<u64> {
    match FROZEN.try_with(Cell::get) {
        Ok(Some((o, ms))) if o == owner => Some(ms),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frozen_scopes_answer_their_owner_and_nest() {
        assert_eq!(frozen_ms(1), None);
        frozen(1, 100, || {
            assert_eq!(frozen_ms(1), Some(100));
            assert_eq!(frozen_ms(2), None, "another clock's time is its own");
            frozen(1, 200, || assert_eq!(frozen_ms(1), Some(200)));
            assert_eq!(frozen_ms(1), Some(100), "the outer time is back");
        });
        assert_eq!(frozen_ms(1), None);
        let unwound = std::panic::catch_unwind(|| frozen(1, 300, || panic!("in the scope")));
        assert!(unwound.is_err());
        assert_eq!(frozen_ms(1), None, "restored by unwinding");
    }
}
