//! Traffic counters of this process's transports: posts (doorbells), one-sided verbs by
//! kind and the bytes they move, per backend, and the RPCs sent to memory nodes with
//! their bytes on the wire. What decides a backend's cost per operation is how many
//! verbs and round trips an operation needs; these counters measure it (INFO's
//! `dmc_pool_*` fields, the agent's metrics, `dmc-bench traffic`).
//!
//! Counting is on every verb of every request, so each thread counts in a shard of its
//! own, on its own cache line, with a plain load and store (its only writer): no
//! locked instruction on the verb path, where one would also wait for the object bytes
//! just written to drain. A reader sums the live threads' shards and what exited
//! threads counted.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

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

/// One thread's counters. Only that thread adds to them; readers load them.
#[repr(align(128))]
struct Shard([AtomicU64; WORDS]);

impl Shard {
    fn new() -> Shard {
        Shard(std::array::from_fn(|_| AtomicU64::new(0)))
    }

    /// Adds `n` to word `i`: a plain read and write, as this thread is its only writer.
    fn bump(&self, i: usize, n: u64) {
        if let Some(w) = self.0.get(i) {
            w.store(w.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
        }
    }
}

/// The live threads' shards, and the sums of those whose threads exited.
struct Registry {
    live: Vec<Arc<Shard>>,
    retired: [u64; WORDS],
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    live: Vec::new(),
    retired: [0; WORDS],
});

/// Counts made while a thread's own shard is already gone (its thread-local
/// destructors running), added atomically.
static LATE: [AtomicU64; WORDS] = [const { AtomicU64::new(0) }; WORDS];

fn registry() -> std::sync::MutexGuard<'static, Registry> {
    REGISTRY.lock().unwrap_or_else(|e| e.into_inner())
}

/// A thread's registration: its counts move to the retired sums when it exits.
struct Mine(Arc<Shard>);

impl Mine {
    fn register() -> Mine {
        let shard = Arc::new(Shard::new());
        registry().live.push(shard.clone());
        Mine(shard)
    }
}

impl Drop for Mine {
    fn drop(&mut self) {
        let mut reg = registry();
        for (sum, w) in reg.retired.iter_mut().zip(&self.0.0) {
            *sum = sum.wrapping_add(w.load(Ordering::Relaxed));
        }
        reg.live.retain(|s| !Arc::ptr_eq(s, &self.0));
    }
}

thread_local! {
    static MINE: Mine = Mine::register();
}

/// Runs `f` on this thread's shard, or on a scratch one added to [`LATE`] while the
/// thread exits.
fn with_shard(f: impl FnOnce(&Shard)) {
    let mut f = Some(f);
    let mine = MINE.try_with(|m| {
        if let Some(f) = f.take() {
            f(&m.0);
        }
    });
    if let (Err(_), Some(f)) = (mine, f) {
        // Not on the hot path: only a thread's exit gets here.
        let late = Shard::new();
        f(&late);
        for (sum, w) in LATE.iter().zip(&late.0) {
            sum.fetch_add(w.load(Ordering::Relaxed), Ordering::Relaxed);
        }
    }
}

fn add(word: usize, n: u64) {
    with_shard(|s| s.bump(word, n));
}

/// Counts one post of `verbs` on backend `backend` (an index into [`BACKENDS`]).
pub(crate) fn post(backend: usize, verbs: &[Verb<'_>]) {
    let base = backend * 6;
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
    with_shard(|s| {
        s.bump(base, 1);
        for (i, n) in kinds.into_iter().enumerate() {
            if n > 0 {
                s.bump(base + 1 + i, n);
            }
        }
        s.bump(base + 5, bytes);
    });
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

/// The counters so far (summed over threads; counts racing with the sum may land in
/// the next one).
pub fn traffic() -> Traffic {
    let mut words = [0u64; WORDS];
    {
        let reg = registry();
        for (w, r) in words.iter_mut().zip(&reg.retired) {
            *w = w.wrapping_add(*r);
        }
        for s in &reg.live {
            for (w, c) in words.iter_mut().zip(&s.0) {
                *w = w.wrapping_add(c.load(Ordering::Relaxed));
            }
        }
    }
    for (w, c) in words.iter_mut().zip(&LATE) {
        *w = w.wrapping_add(c.load(Ordering::Relaxed));
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

    #[test]
    fn an_exited_threads_counts_stay_and_its_shard_goes() {
        let before = traffic();
        let shard = std::thread::spawn(|| {
            rpc_sent(1000);
            MINE.with(|m| Arc::downgrade(&m.0))
        })
        .join()
        .unwrap();
        let d = traffic().since(&before);
        assert!(d.rpcs >= 1 && d.rpc_bytes_sent >= 1000);
        // Neither the registry nor anything else keeps the exited thread's shard.
        assert!(shard.upgrade().is_none());
    }
}
