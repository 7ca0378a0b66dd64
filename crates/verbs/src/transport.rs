//! The transport interface every backend implements.
//!
//! A [`Transport`] is a connection to one memory node. It offers one-sided verbs, posted
//! in batches ([`Transport::post`] is one doorbell: every verb of the slice is issued
//! before any completion is awaited), and a request/response RPC channel
//! ([`Transport::call`]) for region management and commits. Callers above (`umo`) hold
//! one transport per memory node and never learn which backend they have.

use futures::future::BoxFuture;

use crate::error::VerbsError;
use crate::memory::RegionMemory;
use crate::wire::{Request, Response};
use crate::{NodeId, RegionId};

/// One one-sided verb. Results are written back in place: `Read` fills `buf`, `Cas`
/// and `Faa` set `old` to the word's previous value.
#[derive(Debug)]
pub enum Verb<'a> {
    Read {
        region: RegionId,
        offset: u64,
        buf: &'a mut [u8],
    },
    Write {
        region: RegionId,
        offset: u64,
        data: &'a [u8],
    },
    /// Swaps iff the word equals `expected`; `old` tells which happened.
    Cas {
        region: RegionId,
        offset: u64,
        expected: u64,
        new: u64,
        old: u64,
    },
    /// Wrapping add; `old` receives the previous value.
    Faa {
        region: RegionId,
        offset: u64,
        add: u64,
        old: u64,
    },
}

impl Verb<'_> {
    pub fn region(&self) -> RegionId {
        match self {
            Verb::Read { region, .. }
            | Verb::Write { region, .. }
            | Verb::Cas { region, .. }
            | Verb::Faa { region, .. } => *region,
        }
    }
}

/// Runs one verb against a region copy held in this address space.
pub fn execute(mem: &RegionMemory, verb: &mut Verb<'_>) -> Result<(), VerbsError> {
    match verb {
        Verb::Read { offset, buf, .. } => mem.read(*offset, buf),
        Verb::Write { offset, data, .. } => mem.write(*offset, data),
        Verb::Cas {
            offset,
            expected,
            new,
            old,
            ..
        } => {
            *old = mem.cas(*offset, *expected, *new)?;
            Ok(())
        }
        Verb::Faa {
            offset, add, old, ..
        } => {
            *old = mem.faa(*offset, *add)?;
            Ok(())
        }
    }
}

/// Starts loading the bytes `verb` will touch (see [`RegionMemory::prefetch`]).
pub fn prefetch(mem: &RegionMemory, verb: &Verb<'_>) {
    match verb {
        Verb::Read { offset, buf, .. } => mem.prefetch(*offset, buf.len()),
        Verb::Write { offset, data, .. } => mem.prefetch(*offset, data.len()),
        Verb::Cas { offset, .. } | Verb::Faa { offset, .. } => mem.prefetch(*offset, 8),
    }
}

/// A connection to one memory node.
pub trait Transport: Send + Sync {
    /// The node's id, as it reported itself.
    fn node(&self) -> NodeId;

    /// The backend's name (`local`, `shm`, `tcp`), for logs and metrics.
    fn backend(&self) -> &'static str;

    /// Posts a batch of one-sided verbs and completes when all have completed. Verbs
    /// execute in order; on the first failure the rest are not executed.
    fn post<'a, 'b: 'a>(
        &'a self,
        verbs: &'a mut [Verb<'b>],
    ) -> BoxFuture<'a, Result<(), VerbsError>>;

    /// Runs the batch to completion right now if this backend can (the memory is in
    /// this address space and every region is at hand), skipping the future machinery
    /// of [`post`](Self::post); `None` means the caller must use `post`.
    fn post_now(&self, _verbs: &mut [Verb<'_>]) -> Option<Result<(), VerbsError>> {
        None
    }

    /// Starts loading `len` bytes at `offset` of `region` into this core's cache, when
    /// the memory is in this address space: a hint that never fails and returns at
    /// once. A caller about to touch many cold places (a pipeline's buckets, the block
    /// the next allocation hands out) issues them first, so their misses overlap
    /// instead of each stalling in turn. Backends whose memory is remote ignore it.
    fn prefetch(&self, _region: RegionId, _offset: u64, _len: usize) {}

    /// [`prefetch`](Self::prefetch) of every (region, offset, length) of `hints`, with
    /// the region map looked up once instead of once per hint.
    fn prefetch_many(&self, hints: &[(RegionId, u64, usize)]) {
        for &(region, offset, len) in hints {
            self.prefetch(region, offset, len);
        }
    }

    /// Whether [`post_now`](Self::post_now) completes one-sided verbs (the memory is in
    /// this address space): callers may then prefer several small reads over one batch.
    fn completes_inline(&self) -> bool {
        false
    }

    /// Whether [`call`](Self::call) is a plain function call in this process (the
    /// `local` backend): batching RPCs then buys nothing.
    fn calls_inline(&self) -> bool {
        false
    }

    /// Sends one RPC. An error response arrives as `Err`.
    fn call(&self, req: Request) -> BoxFuture<'_, Result<Response, VerbsError>>;

    /// Forgets what this connection keeps of the node's copy of `region` (the `shm`
    /// backend's mapping of its file): the copy was dropped and created anew by someone
    /// else (the manager filling a copy on a node that held the region before), and
    /// verbs must reach the new one. The next verb on the region opens it again.
    fn forget_region(&self, _region: RegionId) {}

    /// Drops the connection at once because the node was failed over: requests in
    /// flight fail now instead of waiting out their timeout, and nothing this client
    /// queued for the node is delivered later (a healed partition must not land old
    /// writes in copies the manager refilled since). The next use connects anew.
    fn abort(&self) -> BoxFuture<'_, ()> {
        Box::pin(std::future::ready(()))
    }
}

/// Single-verb conveniences over [`Transport::post`].
impl dyn Transport + '_ {
    pub async fn read(
        &self,
        region: RegionId,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<(), VerbsError> {
        self.post(&mut [Verb::Read {
            region,
            offset,
            buf,
        }])
        .await
    }

    pub async fn write(
        &self,
        region: RegionId,
        offset: u64,
        data: &[u8],
    ) -> Result<(), VerbsError> {
        self.post(&mut [Verb::Write {
            region,
            offset,
            data,
        }])
        .await
    }

    /// Returns the word's previous value.
    pub async fn cas(
        &self,
        region: RegionId,
        offset: u64,
        expected: u64,
        new: u64,
    ) -> Result<u64, VerbsError> {
        let mut v = [Verb::Cas {
            region,
            offset,
            expected,
            new,
            old: 0,
        }];
        self.post(&mut v).await?;
        match v {
            [Verb::Cas { old, .. }] => Ok(old),
            _ => unreachable!("the batch holds the CAS it was built with"),
        }
    }

    /// Returns the word's previous value.
    pub async fn faa(&self, region: RegionId, offset: u64, add: u64) -> Result<u64, VerbsError> {
        let mut v = [Verb::Faa {
            region,
            offset,
            add,
            old: 0,
        }];
        self.post(&mut v).await?;
        match v {
            [Verb::Faa { old, .. }] => Ok(old),
            _ => unreachable!("the batch holds the FAA it was built with"),
        }
    }

    pub async fn create_region(&self, region: RegionId, size: u64) -> Result<(), VerbsError> {
        self.call(Request::CreateRegion { region, size })
            .await
            .map(|_| ())
    }

    pub async fn drop_region(&self, region: RegionId) -> Result<(), VerbsError> {
        self.call(Request::DropRegion { region }).await.map(|_| ())
    }

    pub async fn list_regions(&self) -> Result<Vec<(RegionId, u64)>, VerbsError> {
        match self.call(Request::ListRegions).await? {
            Response::Regions(list) => Ok(list),
            other => Err(unexpected(&other)),
        }
    }
}

/// The error for a response of the wrong kind.
pub fn unexpected(resp: &Response) -> VerbsError {
    VerbsError::Malformed(format!("unexpected response {resp:?}"))
}
