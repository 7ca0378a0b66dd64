//! Object writes: a key and value written out of place to fresh blocks on every copy,
//! chained over several blocks when larger than the largest class, and objects freed
//! (chunks too). Called by the hash table before it commits a slot to the object.
//! An object is never written in place: it becomes visible only when a committed index
//! update points at it, and a failed write frees its blocks instead of leaving a torn one.

use super::{ObjectRef, Pool};
use crate::alloc::Block;
use crate::error::UmoError;
use crate::object::{self, ChunkRef, Head, ValueKind};

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
                        if let Some(root) = crate::chunk::TreeRoot::parse(&head[value]) {
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
