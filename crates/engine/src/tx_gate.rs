//! Transactions committing on this agent, for readers that must not see part of one:
//! an MGET of keys this agent owns reads its keys one by one (the local cache, then the
//! pool), which is a snapshot only if no transaction committed meanwhile. A commit
//! bumps an epoch as it starts and as it ends; a reader that finds one running, or the
//! epoch moved across its reads, reads again as a snapshot
//! ([`dmc_dht::Dht::get_many_snapshot`]).

use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Default)]
pub struct CommitGate {
    running: AtomicU64,
    epoch: AtomicU64,
}

/// A commit in progress; dropping it ends it.
pub struct Committing<'a>(&'a CommitGate);

impl CommitGate {
    /// A transaction starts committing (its pool commit and its cache write-throughs).
    pub fn begin(&self) -> Committing<'_> {
        self.running.fetch_add(1, Ordering::SeqCst);
        self.epoch.fetch_add(1, Ordering::SeqCst);
        Committing(self)
    }

    /// The epoch, when no commit is running: pass it to [`unchanged`](Self::unchanged)
    /// after reading.
    pub fn quiet(&self) -> Option<u64> {
        let epoch = self.epoch.load(Ordering::SeqCst);
        (self.running.load(Ordering::SeqCst) == 0).then_some(epoch)
    }

    /// Whether no commit started or ended since [`quiet`](Self::quiet) gave `epoch`.
    pub fn unchanged(&self, epoch: u64) -> bool {
        self.epoch.load(Ordering::SeqCst) == epoch
    }
}

impl Drop for Committing<'_> {
    fn drop(&mut self) {
        self.0.epoch.fetch_add(1, Ordering::SeqCst);
        self.0.running.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_overlapping_a_commit_is_told() {
        let gate = CommitGate::default();
        let before = gate.quiet().expect("no commit yet");
        assert!(gate.unchanged(before));
        let c = gate.begin();
        assert!(gate.quiet().is_none(), "a commit runs");
        assert!(!gate.unchanged(before));
        drop(c);
        let after = gate.quiet().expect("the commit ended");
        assert!(gate.unchanged(after));
        assert_ne!(before, after);
    }
}
