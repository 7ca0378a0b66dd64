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
            return Ok(ObjectRef {
                block,
                chained: false,
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

    /// Frees an object (and its chunks) after the grace period.
    pub async fn free_object(&self, obj: ObjectRef) {
        if obj.chained {
            let mut head = vec![0u8; obj.block.size() as usize];
            if self.read(obj.block.addr, &mut head).await.is_ok()
                && let Head::Chained { chunks, .. } = object::parse_head(&head)
            {
                for c in chunks {
                    self.free(Block {
                        addr: c.addr,
                        class: c.class,
                    });
                }
            }
        }
        self.free(obj.block);
    }
}
