//! Object writes: a key and value written out of place to fresh blocks on every copy,
//! chained over several blocks when larger than the largest class, and objects freed
//! (chunks too). Called by the hash table before it commits a slot to the object.
//! An object is never written in place: it becomes visible only when a committed index
//! update points at it, and a failed write frees its blocks instead of leaving a torn one.

use std::sync::atomic::Ordering;

use super::{ObjectRef, Pool};
use crate::alloc::Block;
use crate::error::UmoError;
use crate::object::{self, ChunkRef, Head, ValueKind};

/// Tries at finishing an inline object write before it is given up (its block freed
/// as it is): a node that fails them all this long is failed over meanwhile.
const UNFINISHED_TRIES: usize = 64;

/// A thread's encode buffer for inline writes is dropped past this size.
const ENCODED_KEPT: usize = 4096;

thread_local! {
    static ENCODED: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl Pool {
    /// Writes `key` → `value` (of type `kind`) out of place to every copy and returns
    /// where it is. The object is invisible until a committed index update points at it.
    pub async fn write_object(
        &self,
        db: u8,
        key: &[u8],
        kind: ValueKind,
        value: &[u8],
    ) -> Result<ObjectRef, UmoError> {
        let total = key.len() as u64 + value.len() as u64;
        if total > object::MAX_OBJECT + u16::MAX as u64 {
            return Err(UmoError::TooLarge(total));
        }
        let max = self.max_block() as usize;
        if let Some(len) = object::inline_len(key, value.len())
            && len <= max
        {
            let block = self.alloc(len as u64, false).await?;
            let mut buf = Vec::new();
            object::encode_inline(db, key, kind, value, &mut buf);
            if let Err(e) = self.write_all(&[(block.addr, &buf)]).await {
                self.free(block);
                return Err(e);
            }
            // A tree's root owns its chunks: the slot word says so (the chained
            // bit), so that freeing the object frees them too.
            let owns_tree = kind != ValueKind::String && crate::chunk::is_tree_value(value);
            return Ok(ObjectRef {
                block,
                chained: owns_tree,
            });
        }
        self.write_chained(db, key, kind, value, max).await
    }

    /// [`write_object`](Self::write_object) right now, for a string that fits one
    /// block, if its block is at hand and every copy completes verbs inline. `None`
    /// means use `write_object`: nothing was written, or the bytes reached some copies
    /// only and the block is kept until [`finish_object_writes`](Self::finish_object_writes)
    /// has written them to every copy.
    pub fn write_object_now(
        &self,
        db: u8,
        key: &[u8],
        value: &[u8],
    ) -> Option<Result<ObjectRef, UmoError>> {
        let len = object::inline_len(key, value.len())?;
        if len > self.max_block() as usize {
            return None;
        }
        let block = match self.alloc_now(len as u64, false)? {
            Ok(b) => b,
            Err(e) => return Some(Err(e)),
        };
        // Encoded in this thread's buffer: no allocation per write. A write that
        // reached some copies only takes the bytes with it.
        let attempt = |buf: &mut Vec<u8>| {
            object::encode_inline(db, key, ValueKind::String, value, buf);
            let written = self
                .write_all_now(block.addr, buf)
                .map(|w| w.map_err(|_| std::mem::take(buf)));
            if buf.capacity() > ENCODED_KEPT {
                *buf = Vec::new();
            }
            written
        };
        let written = ENCODED
            .try_with(|buf| attempt(&mut buf.borrow_mut()))
            .unwrap_or_else(|_| attempt(&mut Vec::new()));
        match written {
            Some(Ok(())) => Some(Ok(ObjectRef {
                block,
                chained: false,
            })),
            // Some copies may have the bytes and others not (a connection not open
            // yet, a region file not mapped yet): the awaited path finishes the write
            // before the block is freed, so no copy keeps bytes the others lack.
            Some(Err(buf)) => {
                let mut unfinished = self.unfinished.lock();
                unfinished.push((block, buf, 0));
                self.unfinished_count
                    .store(unfinished.len(), Ordering::Relaxed);
                None
            }
            None => {
                self.free(block);
                None
            }
        }
    }

    /// Finishes the object writes the inline path left on some copies only
    /// ([`write_object_now`](Self::write_object_now)): each is written to every copy
    /// (waiting out a failed node as [`write_all`](Self::write_all) does) and its block
    /// freed; one that still fails is kept for the next call, at most
    /// [`UNFINISHED_TRIES`] times. The engine's fallback and the maintenance tick call
    /// this.
    pub async fn finish_object_writes(&self) {
        if self.unfinished_count.load(Ordering::Relaxed) == 0 {
            return;
        }
        let pending: Vec<(Block, Vec<u8>, usize)> = {
            let mut unfinished = self.unfinished.lock();
            self.unfinished_count.store(0, Ordering::Relaxed);
            std::mem::take(&mut *unfinished)
        };
        for (block, bytes, tries) in pending {
            match self.write_all(&[(block.addr, &bytes)]).await {
                Ok(()) => self.free(block),
                Err(e) if tries + 1 < UNFINISHED_TRIES => {
                    tracing::debug!(error = %e, "finishing an object write failed; retrying");
                    let mut unfinished = self.unfinished.lock();
                    unfinished.push((block, bytes, tries + 1));
                    self.unfinished_count
                        .store(unfinished.len(), Ordering::Relaxed);
                }
                Err(e) => {
                    tracing::warn!(error = %e, "an object write left on some copies could not be finished; its block is freed");
                    self.free(block);
                }
            }
        }
    }

    async fn write_chained(
        &self,
        db: u8,
        key: &[u8],
        kind: ValueKind,
        value: &[u8],
        chunk: usize,
    ) -> Result<ObjectRef, UmoError> {
        let total = key.len() + value.len();
        let n = total.div_ceil(chunk);
        let mut blocks: Vec<Block> = Vec::with_capacity(n + 1);
        let result = async {
            let mut buf = Vec::with_capacity(chunk);
            for i in 0..n {
                let (start, end) = (i * chunk, ((i + 1) * chunk).min(total));
                buf.clear();
                if start < key.len() {
                    buf.extend_from_slice(&key[start..end.min(key.len())]);
                }
                if end > key.len() {
                    buf.extend_from_slice(
                        &value[start.max(key.len()) - key.len()..end - key.len()],
                    );
                }
                let b = self.alloc(buf.len() as u64, false).await?;
                blocks.push(b);
                self.write_all(&[(b.addr, &buf)]).await?;
            }
            let refs: Vec<ChunkRef> = blocks
                .iter()
                .map(|b| ChunkRef {
                    addr: b.addr,
                    class: b.class,
                })
                .collect();
            let head = object::encode_chained_head(db, key, kind, value, &refs);
            let hb = self.alloc(head.len() as u64, false).await?;
            blocks.push(hb);
            self.write_all(&[(hb.addr, &head)]).await?;
            Ok(ObjectRef {
                block: hb,
                chained: true,
            })
        }
        .await;
        if result.is_err() {
            for b in blocks {
                self.free(b);
            }
        }
        result
    }

    /// Frees an object (and its chunks, or the chunk tree it owns) after the grace
    /// period.
    pub async fn free_object(&self, obj: ObjectRef) {
        if obj.chained {
            let mut head = vec![0u8; obj.block.size() as usize];
            if self.read(obj.block.addr, &mut head).await.is_ok() {
                match object::parse_head(&head) {
                    Head::Chained { chunks, .. } => {
                        for c in chunks {
                            self.free(Block {
                                addr: c.addr,
                                class: c.class,
                            });
                        }
                    }
                    Head::Inline { kind, value, .. } if kind != ValueKind::String => {
                        for root in crate::chunk::TreeRoot::parse_all(&head[value]) {
                            self.free_tree(root).await;
                        }
                    }
                    _ => {}
                }
            }
        }
        self.free(obj.block);
    }

    /// Frees only the object's own block: its new version shares the chunk tree (a
    /// copy-on-write update freed the chunks it replaced itself).
    pub fn free_head(&self, obj: ObjectRef) {
        self.free(obj.block);
    }

    /// Frees every chunk of a tree. Inner chunks are read to find their children;
    /// leaves are freed unread. A chunk that fails its checks is not followed (it was
    /// freed already, or never written).
    pub async fn free_tree(&self, root: crate::chunk::TreeRoot) {
        let mut todo = vec![(root.root, root.height)];
        while let Some((r, level)) = todo.pop() {
            let Some(block) = crate::chunk::block_of(r) else {
                continue;
            };
            if level > 1 {
                let mut buf = vec![0u8; block.size() as usize];
                if self.read(block.addr, &mut buf).await.is_err() {
                    continue;
                }
                if let Ok(c) = crate::chunk::parse(&buf, None, u64::MAX)
                    && c.kind == crate::chunk::INNER
                    && let Ok(children) = crate::chunk::inner_entries(&c)
                {
                    todo.extend(children.iter().map(|e| (e.child, level - 1)));
                }
            }
            self.free(block);
        }
    }
}

/// A tree whose chunks in a range were copied out of it.
pub struct RelocatedTree {
    /// The tree's new root (its chunks outside the range are shared with the old one).
    pub root: crate::chunk::TreeRoot,
    /// The copied chunks' old blocks: free them once the new root is committed.
    pub old: Vec<Block>,
    /// The new blocks: free them if the commit fails.
    pub new: Vec<Block>,
}

impl Pool {
    /// Copies the chunks of `root`'s tree that lie where `inside` says (and, copy on
    /// write, their ancestors) to fresh blocks; `None` when no chunk is there. The
    /// copies keep their owner tag and generation, so readers of the tree accept them.
    pub async fn relocate_tree(
        &self,
        root: crate::chunk::TreeRoot,
        inside: &(dyn Fn(crate::GlobalAddr) -> bool + Sync),
    ) -> Result<Option<RelocatedTree>, UmoError> {
        let mut moved = RelocatedTree {
            root,
            old: Vec::new(),
            new: Vec::new(),
        };
        let result = self
            .relocate_chunk(root.root, root.height, inside, None, &mut moved)
            .await;
        match result {
            Ok(Some(r)) => {
                moved.root.root = r;
                Ok(Some(moved))
            }
            Ok(None) => Ok(None),
            Err(e) => {
                for b in moved.new {
                    self.free(b);
                }
                Err(e)
            }
        }
    }

    /// Relocates (as [`Pool::relocate_tree`]) every tree a typed value holds: the
    /// value with the new roots (its other bytes kept), or `None` when no chunk of
    /// any of them is where `inside` says.
    pub async fn relocate_value_trees(
        &self,
        value: &[u8],
        inside: &(dyn Fn(crate::GlobalAddr) -> bool + Sync),
    ) -> Result<Option<(Vec<u8>, RelocatedTree)>, UmoError> {
        let roots = crate::chunk::TreeRoot::parse_all(value);
        let mut all = RelocatedTree {
            root: match roots.first() {
                Some(r) => *r,
                None => return Ok(None),
            },
            old: Vec::new(),
            new: Vec::new(),
        };
        let mut out = Vec::with_capacity(value.len());
        let mut moved = false;
        for root in &roots {
            match self.relocate_tree(*root, inside).await {
                Ok(Some(t)) => {
                    moved = true;
                    t.root.encode(&mut out);
                    all.old.extend(t.old);
                    all.new.extend(t.new);
                }
                Ok(None) => root.encode(&mut out),
                Err(e) => {
                    all.new.iter().for_each(|b| self.free(*b));
                    return Err(e);
                }
            }
        }
        if !moved {
            return Ok(None);
        }
        out.extend_from_slice(
            value
                .get(roots.len() * crate::chunk::ROOT_LEN..)
                .unwrap_or_default(),
        );
        Ok(Some((out, all)))
    }

    /// A copy of `root`'s whole tree whose chunks carry the owner tag `tag` (another
    /// key's), chunk by chunk: the shape, counts and keys stay as they are. Returns the
    /// copy's root and its blocks (free them if the copy is not committed); the
    /// source is untouched.
    pub async fn copy_tree(
        &self,
        root: crate::chunk::TreeRoot,
        tag: u32,
    ) -> Result<(crate::chunk::TreeRoot, Vec<Block>), UmoError> {
        let mut copy = RelocatedTree {
            root,
            old: Vec::new(),
            new: Vec::new(),
        };
        let everything = |_: crate::GlobalAddr| true;
        let result = self
            .relocate_chunk(root.root, root.height, &everything, Some(tag), &mut copy)
            .await;
        match result {
            Ok(Some(r)) => {
                copy.root.root = r;
                Ok((copy.root, copy.new))
            }
            Ok(None) => {
                for b in copy.new {
                    self.free(b);
                }
                Err(UmoError::Layout(
                    "a collection tree changed while it was copied".into(),
                ))
            }
            Err(e) => {
                for b in copy.new {
                    self.free(b);
                }
                Err(e)
            }
        }
    }

    /// Relocates the subtree at `r` (of `level`, 1 = a leaf): its new ref if it or a
    /// descendant moved. `retag` gives the copies another owner. Depth is the tree's
    /// height, at most `chunk::MAX_HEIGHT`.
    fn relocate_chunk<'a>(
        &'a self,
        r: ChunkRef,
        level: u8,
        inside: &'a (dyn Fn(crate::GlobalAddr) -> bool + Sync),
        retag: Option<u32>,
        moved: &'a mut RelocatedTree,
    ) -> futures::future::BoxFuture<'a, Result<Option<ChunkRef>, UmoError>> {
        Box::pin(async move {
            let Some(block) = crate::chunk::block_of(r) else {
                return Ok(None);
            };
            if level <= 1 && !inside(r.addr) {
                return Ok(None);
            }
            let mut buf = vec![0u8; block.size() as usize];
            self.read(block.addr, &mut buf).await?;
            let Ok(c) = crate::chunk::parse(&buf, None, u64::MAX) else {
                // A copy must not keep a link to the source's chunk.
                return match retag {
                    Some(_) => Err(UmoError::Layout(
                        "a collection tree changed while it was copied".into(),
                    )),
                    None => Ok(None),
                };
            };
            let (own_tag, generation) = crate::chunk::owner(&buf);
            let tag = retag.unwrap_or(own_tag);
            let (kind, n) = (c.kind, c.n);
            let mut body = c.body.to_vec();
            let mut changed = inside(r.addr);
            if kind == crate::chunk::INNER && level > 1 {
                let children: Vec<(u64, ChunkRef, Vec<u8>)> = crate::chunk::inner_entries(&c)
                    .unwrap_or_default()
                    .into_iter()
                    .map(|e| (e.count, e.child, e.key.to_vec()))
                    .collect();
                let mut rebuilt = Vec::with_capacity(body.len());
                for (count, child, key) in children {
                    let relocated = self.relocate_chunk(child, level - 1, inside, retag, moved);
                    let child = match relocated.await? {
                        Some(new) => {
                            changed = true;
                            new
                        }
                        None => child,
                    };
                    crate::chunk::put_inner(&mut rebuilt, count, child, &key);
                }
                body = rebuilt;
            }
            if !changed {
                return Ok(None);
            }
            let bytes = crate::chunk::encode(kind, n, tag, generation, &body);
            let fresh = self.alloc(bytes.len() as u64, false).await?;
            moved.new.push(fresh);
            self.write_all(&[(fresh.addr, &bytes)]).await?;
            moved.old.push(block);
            Ok(Some(ChunkRef {
                addr: fresh.addr,
                class: fresh.class,
            }))
        })
    }
}
