//! Traffic counters of this process's transports: posts (doorbells), one-sided verbs by
//! kind and the bytes they move, per backend, and the RPCs sent to memory nodes with
//! their bytes on the wire. What decides a backend's cost per operation is how many
//! verbs and round trips an operation needs; these counters measure it (INFO's
//! `dmc_pool_*` fields, the agent's metrics, `dmc-bench traffic`).
//!
//! Counting is on every verb of every request, so the counters are sharded: each thread
//! adds to its own cache line and a reader sums the shards.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crate::transport::Verb;

/// The backends counted, in the order of [`Traffic::backends`].
pub const BACKENDS: [&str; 4] = ["local", "shm", "tcp", "rdma"];

/// Counters of one backend's one-sided verbs.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct VerbCounts {
    /// Posted batches: one doorbell each (one RPC each over `tcp`).
    pub posts: u64,
    pub reads: u64,
    pub writes: u64,
    pub cas: u64,
    pub faa: u64,
    /// Bytes read and written by READ and WRITE (8 per atomic).
    pub bytes: u64,
}

impl VerbCounts {
    pub fn verbs(&self) -> u64 {
        self.reads + self.writes + self.cas + self.faa
    }

    /// What happened between `before` and `self`.
    pub fn since(&self, before: &VerbCounts) -> VerbCounts {
        VerbCounts {
            posts: self.posts.wrapping_sub(before.posts),
            reads: self.reads.wrapping_sub(before.reads),
            writes: self.writes.wrapping_sub(before.writes),
            cas: self.cas.wrapping_sub(before.cas),
            faa: self.faa.wrapping_sub(before.faa),
            bytes: self.bytes.wrapping_sub(before.bytes),
        }
    }
}

/// Everything counted so far.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Traffic {
    /// By backend, as [`BACKENDS`] names them.
    pub backends: [VerbCounts; 4],
    /// RPCs sent to memory nodes (over `tcp` every post is one).
    pub rpcs: u64,
    /// Bytes of RPC frames sent and received (what crosses the network on `tcp`).
    pub rpc_bytes_sent: u64,
    pub rpc_bytes_received: u64,
}

impl Traffic {
    /// The counts of the backend named `name`.
    pub fn backend(&self, name: &str) -> VerbCounts {
        BACKENDS
            .iter()
            .position(|b| *b == name)
            .and_then(|i| self.backends.get(i).copied())
            .unwrap_or_default()
    }

    /// All backends' verbs together.
    pub fn total(&self) -> VerbCounts {
        self.backends
            .iter()
            .fold(VerbCounts::default(), |a, b| VerbCounts {
                posts: a.posts + b.posts,
                reads: a.reads + b.reads,
                writes: a.writes + b.writes,
                cas: a.cas + b.cas,
                faa: a.faa + b.faa,
                bytes: a.bytes + b.bytes,
            })
    }

    pub fn since(&self, before: &Traffic) -> Traffic {
        let mut backends = [VerbCounts::default(); 4];
        for (i, b) in backends.iter_mut().enumerate() {
            *b = self.backends[i].since(&before.backends[i]);
        }
        Traffic {
            backends,
            rpcs: self.rpcs.wrapping_sub(before.rpcs),
            rpc_bytes_sent: self.rpc_bytes_sent.wrapping_sub(before.rpc_bytes_sent),
            rpc_bytes_received: self
                .rpc_bytes_received
                .wrapping_sub(before.rpc_bytes_received),
        }
    }
}

/// Words of one shard: 6 per backend, then the RPC counters.
const RPCS: usize = BACKENDS.len() * 6;
const WORDS: usize = RPCS + 3;
const SHARDS: usize = 16;

#[repr(align(128))]
struct Shard([AtomicU64; WORDS]);

#[allow(clippy::declare_interior_mutable_const)]
const ZERO: AtomicU64 = AtomicU64::new(0);
#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: Shard = Shard([ZERO; WORDS]);
static COUNTERS: [Shard; SHARDS] = [EMPTY; SHARDS];
static NEXT_SHARD: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static SHARD: Cell<usize> = const { Cell::new(usize::MAX) };
}

fn shard() -> &'static Shard {
    let i = SHARD.with(|s| {
        if s.get() == usize::MAX {
            s.set(NEXT_SHARD.fetch_add(1, Ordering::Relaxed) % SHARDS);
        }
        s.get()
    });
    &COUNTERS[i % SHARDS]
}

fn add(word: usize, n: u64) {
    if let Some(w) = shard().0.get(word) {
        w.fetch_add(n, Ordering::Relaxed);
    }
}

/// Counts one post of `verbs` on backend `backend` (an index into [`BACKENDS`]).
pub(crate) fn post(backend: usize, verbs: &[Verb<'_>]) {
    let base = backend * 6;
    let s = shard();
    let bump = |i: usize, n: u64| {
        if let Some(w) = s.0.get(base + i) {
            w.fetch_add(n, Ordering::Relaxed);
        }
    };
    bump(0, 1);
    let mut bytes = 0u64;
    let mut kinds = [0u64; 4];
    for v in verbs {
        match v {
            Verb::Read { buf, .. } => {
                kinds[0] += 1;
                bytes += buf.len() as u64;
            }
            Verb::Write { data, .. } => {
                kinds[1] += 1;
                bytes += data.len() as u64;
            }
            Verb::Cas { .. } => {
                kinds[2] += 1;
                bytes += 8;
            }
            Verb::Faa { .. } => {
                kinds[3] += 1;
                bytes += 8;
            }
        }
    }
    for (i, n) in kinds.into_iter().enumerate() {
        if n > 0 {
            bump(1 + i, n);
        }
    }
    bump(5, bytes);
}

/// Counts one RPC of `bytes` bytes sent.
pub(crate) fn rpc_sent(bytes: usize) {
    add(RPCS, 1);
    add(RPCS + 1, bytes as u64);
}

/// Counts `bytes` bytes of RPC responses received.
pub(crate) fn rpc_received(bytes: usize) {
    add(RPCS + 2, bytes as u64);
}

pub(crate) const LOCAL: usize = 0;
pub(crate) const SHM: usize = 1;
pub(crate) const TCP: usize = 2;
pub(crate) const RDMA: usize = 3;

/// The counters so far (summed over shards; counts racing with the sum may land in
/// the next one).
pub fn traffic() -> Traffic {
    let mut words = [0u64; WORDS];
    for s in &COUNTERS {
        for (w, c) in words.iter_mut().zip(&s.0) {
            *w += c.load(Ordering::Relaxed);
        }
    }
    let mut t = Traffic::default();
    for (i, b) in t.backends.iter_mut().enumerate() {
        let w = &words[i * 6..i * 6 + 6];
        *b = VerbCounts {
            posts: w[0],
            reads: w[1],
            writes: w[2],
            cas: w[3],
            faa: w[4],
            bytes: w[5],
        };
    }
    t.rpcs = words[RPCS];
    t.rpc_bytes_sent = words[RPCS + 1];
    t.rpc_bytes_received = words[RPCS + 2];
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn posts_count_verbs_by_kind_and_bytes() {
        let before = traffic();
        let mut buf = [0u8; 100];
        post(
            RDMA,
            &[
                Verb::Read {
                    region: 1,
                    offset: 0,
                    buf: &mut buf,
                },
                Verb::Write {
                    region: 1,
                    offset: 0,
                    data: b"abc",
                },
                Verb::Cas {
                    region: 1,
                    offset: 0,
                    expected: 0,
                    new: 1,
                    old: 0,
                },
            ],
        );
        rpc_sent(40);
        rpc_received(25);
        let d = traffic().since(&before);
        // Other tests of this process may count meanwhile: at least ours are there.
        let r = d.backend("rdma");
        assert!(r.posts >= 1 && r.reads >= 1 && r.writes >= 1 && r.cas >= 1);
        assert!(r.bytes >= 111);
        assert!(d.rpcs >= 1 && d.rpc_bytes_sent >= 40 && d.rpc_bytes_received >= 25);
    }
}
