//! The rebuild gates: per hash slot, one word that counts the inline single-key writes
//! (`write_now`) in flight and says whether a rebuild of the slot's subtables holds the
//! gate closed.
//!
//! An inline write never awaits, so it needs no queue: it enters with one atomic add
//! and leaves with one atomic subtract, and when the gate is closed it backs out and
//! hands its write to the awaited path (which waits on the slot's rebuild lock). A
//! rebuild closes the gate after it holds the rebuild lock, waits for the writes
//! inside to leave (microseconds: none of them awaits), and keeps it closed until it
//! is done. The tokio lock it replaces on this path released through its waiters'
//! mutex: two more locked instructions and a shared line per write.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// The closed bit; the bits below count the inline writes inside.
const CLOSED: u32 = 1 << 31;
/// Times a closing rebuild yields to other tasks, waiting for the writes inside to
/// leave, before it sleeps between looks.
const YIELDS_BEFORE_SLEEPING: u32 = 64;

/// One gate per hash slot.
pub(super) struct RebuildGates {
    words: Box<[AtomicU32]>,
}

/// An inline write inside a slot's gate: a rebuild closing the gate waits until it is
/// dropped.
#[must_use]
pub(super) struct Inside<'a>(&'a AtomicU32);

/// A slot's gate held closed: no inline write enters until it is dropped.
#[must_use]
pub(super) struct Closed<'a>(&'a AtomicU32);

impl RebuildGates {
    /// `slots` open gates.
    pub(super) fn new(slots: usize) -> Self {
        Self {
            words: (0..slots).map(|_| AtomicU32::new(0)).collect(),
        }
    }

    /// Enters `slot`'s gate; `None` when a rebuild holds it closed (or there is no
    /// such slot).
    pub(super) fn enter(&self, slot: u16) -> Option<Inside<'_>> {
        let word = self.words.get(slot as usize)?;
        // Acquire: what the last rebuild wrote before opening is seen.
        let before = word.fetch_add(1, Ordering::Acquire);
        if before & CLOSED != 0 {
            word.fetch_sub(1, Ordering::Release);
            return None;
        }
        Some(Inside(word))
    }

    /// The address of `slot`'s word, to prefetch.
    pub(super) fn word(&self, slot: u16) -> Option<&AtomicU32> {
        self.words.get(slot as usize)
    }

    /// Closes `slot`'s gate and waits until no inline write is inside. Only the holder
    /// of the slot's rebuild lock calls this, and every closed gate is opened again
    /// before that lock is released (by [`Closed`]'s drop, or by this future's if it
    /// is dropped while it waits), so the gate is open on entry.
    pub(super) async fn close(&self, slot: u16) -> Option<Closed<'_>> {
        let word = self.words.get(slot as usize)?;
        let before = word.fetch_or(CLOSED, Ordering::AcqRel);
        debug_assert_eq!(before & CLOSED, 0, "a gate closed twice");
        // The guard first: a rebuild cancelled while it waits reopens the gate.
        let closed = Closed(word);
        // Acquire: every write that left is seen. The writes inside leave within
        // microseconds: yield to other tasks a while before sleeping (tokio's timers
        // round up to the next millisecond).
        let mut turns = 0u32;
        while word.load(Ordering::Acquire) & !CLOSED != 0 {
            if turns < YIELDS_BEFORE_SLEEPING {
                turns += 1;
                tokio::task::yield_now().await;
            } else {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
        Some(closed)
    }
}

impl Drop for Inside<'_> {
    fn drop(&mut self) {
        // Release: the write's pool writes happen before the rebuild that waits it out.
        self.0.fetch_sub(1, Ordering::Release);
    }
}

impl Drop for Closed<'_> {
    fn drop(&mut self) {
        self.0.fetch_and(!CLOSED, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_closed_gate_turns_writes_away_until_opened() {
        let gates = RebuildGates::new(4);
        let closed = gates.close(2).await.expect("slot 2");
        assert!(gates.enter(2).is_none());
        assert!(gates.enter(1).is_some(), "other slots stay open");
        drop(closed);
        assert!(gates.enter(2).is_some());
        assert!(gates.enter(4).is_none(), "no such slot");
    }

    #[tokio::test]
    async fn closing_waits_for_the_writes_inside() {
        let gates = std::sync::Arc::new(RebuildGates::new(1));
        let inside = gates.enter(0).expect("open");
        let (tx, mut rx) = tokio::sync::oneshot::channel();
        let closer = {
            let gates = gates.clone();
            tokio::spawn(async move {
                let _closed = gates.close(0).await.expect("slot 0");
                let _ = tx.send(());
            })
        };
        // The closer cannot finish while a write is inside: give it turns to try.
        for _ in 0..50 {
            tokio::task::yield_now().await;
            assert!(rx.try_recv().is_err(), "closed over a write inside");
        }
        assert!(gates.enter(0).is_none(), "closing turns new writes away");
        drop(inside);
        closer.await.expect("closer");
        assert!(gates.enter(0).is_some(), "open again after the rebuild");
    }

    #[tokio::test]
    async fn a_close_given_up_while_waiting_opens_the_gate() {
        let gates = RebuildGates::new(1);
        let inside = gates.enter(0).expect("open");
        {
            let closing = gates.close(0);
            tokio::pin!(closing);
            // Polled until it waits on the write inside, then dropped (a cancelled
            // rebuild).
            assert!(futures::poll!(closing.as_mut()).is_pending());
            assert!(gates.enter(0).is_none(), "closed while waiting");
        }
        drop(inside);
        assert!(
            gates.enter(0).is_some(),
            "the dropped close opened the gate"
        );
    }

    #[test]
    fn a_turned_away_write_leaves_no_count() {
        let gates = RebuildGates::new(1);
        gates.words[0].fetch_or(CLOSED, Ordering::AcqRel);
        for _ in 0..3 {
            assert!(gates.enter(0).is_none());
        }
        assert_eq!(gates.words[0].load(Ordering::Acquire), CLOSED);
    }
}
