//! Verified object reads: the head block from the primary (through a stack buffer for
//! small objects), a chained object's chunks in one batch, and db, key and checksum
//! checked. Called by the hash table after it read a slot.
//! Unverified bytes are never returned: a slot may point at a freed or reused block,
//! which reads as `ReadObject::Mismatch` (retry), not as a pool failure.

use bytes::Bytes;

use super::{ObjectRef, Pool, ReadObject};
use crate::error::UmoError;
use crate::object::{self, Head, ValueKind};

/// Checks a small inline object read whole: db, key and checksum; the value copied out.
fn verify_small(buf: &[u8], db: u8, key: &[u8]) -> ReadObject {
    match object::parse_head(buf) {
        Head::Inline {
            db: d,
            kind,
            key: k,
            value,
        } if d == db && buf[k.clone()] == *key => {
            ReadObject::Value(Bytes::copy_from_slice(&buf[value]), kind)
        }
        _ => ReadObject::Mismatch,
    }
}

/// A whole object as [`Pool::read_any`] found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredObject {
    pub db: u8,
    pub key: Bytes,
    pub value: Bytes,
    pub kind: ValueKind,
}

/// Objects up to this size are read through a stack buffer (two sizes, so that small
/// objects do not pay for zeroing a large one).
const SMALL_OBJECT: usize = 512;
const TINY_OBJECT: usize = 128;

impl Pool {
    /// Reads a small inline object right now (see [`read_now`](Self::read_now)) and
    /// verifies db, key and checksum. `None`: not possible inline (a chained or large
    /// object, or a backend that must be awaited).
    pub fn read_object_now(
        &self,
        obj: ObjectRef,
        db: u8,
        key: &[u8],
    ) -> Option<Result<ReadObject, UmoError>> {
        self.with_head_now(obj, |buf| verify_small(buf, db, key))
    }

    /// Whether the small inline object at `obj` holds `db`/`key` (checksum checked),
    /// read right now: its value's type, or `None` if it does not. The outer `None`: not
    /// possible inline, as for [`read_object_now`](Self::read_object_now).
    pub fn object_kind_now(
        &self,
        obj: ObjectRef,
        db: u8,
        key: &[u8],
    ) -> Option<Result<Option<ValueKind>, UmoError>> {
        self.with_head_now(obj, |buf| match object::parse_head(buf) {
            Head::Inline {
                db: d,
                kind,
                key: k,
                ..
            } if d == db && buf[k.clone()] == *key => Some(kind),
            _ => None,
        })
    }

    /// Reads the block of a small inline object right now, through a stack buffer of
    /// the smaller size that holds it, and runs `f` on its bytes. `None`: not possible
    /// inline (a chained or large object, or a backend that must be awaited).
    fn with_head_now<T>(
        &self,
        obj: ObjectRef,
        f: impl FnOnce(&[u8]) -> T,
    ) -> Option<Result<T, UmoError>> {
        let size = obj.block.size() as usize;
        if obj.chained || size > SMALL_OBJECT {
            return None;
        }
        let mut tiny = [0u8; TINY_OBJECT];
        let mut small;
        let buf = if size <= TINY_OBJECT {
            &mut tiny[..size]
        } else {
            small = [0u8; SMALL_OBJECT];
            &mut small[..size]
        };
        if let Err(e) = self.read_now(obj.block.addr, buf)? {
            return Some(Err(e));
        }
        Some(Ok(f(buf)))
    }

    /// Reads the object at `obj` from the primary and returns its value if it holds
    /// `db`/`key` and its checksum is right.
    pub async fn read_object(
        &self,
        obj: ObjectRef,
        db: u8,
        key: &[u8],
    ) -> Result<ReadObject, UmoError> {
        let size = obj.block.size() as usize;
        if !obj.chained && size <= SMALL_OBJECT {
            // Small objects: read into the stack and copy out just the value.
            if size <= TINY_OBJECT {
                let mut buf = [0u8; TINY_OBJECT];
                return self.read_small(obj, db, key, &mut buf[..size]).await;
            }
            let mut buf = [0u8; SMALL_OBJECT];
            return self.read_small(obj, db, key, &mut buf[..size]).await;
        }
        let mut head = vec![0u8; size];
        self.read(obj.block.addr, &mut head).await?;
        self.finish_read(head, db, key).await
    }

    async fn read_small(
        &self,
        obj: ObjectRef,
        db: u8,
        key: &[u8],
        buf: &mut [u8],
    ) -> Result<ReadObject, UmoError> {
        self.read(obj.block.addr, buf).await?;
        Ok(verify_small(buf, db, key))
    }

    /// Reads whatever object is at `obj`, verifying only its checksum: the key, db and
    /// value, or `None` if the block holds no valid object (eviction uses this to learn
    /// which key it removes).
    pub async fn read_any(&self, obj: ObjectRef) -> Result<Option<StoredObject>, UmoError> {
        let mut head = vec![0u8; obj.block.size() as usize];
        self.read(obj.block.addr, &mut head).await?;
        Ok(self
            .verify(head, None)
            .await?
            .map(|(db, payload, klen, kind)| StoredObject {
                db,
                key: payload.slice(..klen),
                value: payload.slice(klen..),
                kind,
            }))
    }

    /// Completes a verified read given the head block's bytes.
    pub async fn finish_read(
        &self,
        head: Vec<u8>,
        db: u8,
        key: &[u8],
    ) -> Result<ReadObject, UmoError> {
        Ok(match self.verify(head, Some((db, key))).await? {
            Some((_, payload, klen, kind)) => ReadObject::Value(payload.slice(klen..), kind),
            None => ReadObject::Mismatch,
        })
    }

    /// Checks a head block (and a chained object's chunks) and, if `expect` is given,
    /// the db and key. Returns the db, the bytes holding key ‖ value, the key length and
    /// the value's type.
    async fn verify(
        &self,
        head: Vec<u8>,
        expect: Option<(u8, &[u8])>,
    ) -> Result<Option<(u8, Bytes, usize, ValueKind)>, UmoError> {
        match object::parse_head(&head) {
            Head::Inline {
                db,
                kind,
                key: k,
                value,
            } => {
                if expect.is_some_and(|(d, key)| d != db || head[k.clone()] != *key) {
                    return Ok(None);
                }
                Ok(Some((
                    db,
                    Bytes::from(head).slice(k.start..value.end),
                    k.len(),
                    kind,
                )))
            }
            Head::Chained {
                db,
                kind,
                klen,
                vlen,
                chunks,
                crc,
                head_len,
            } => {
                if expect.is_some_and(|(d, key)| d != db || klen != key.len()) {
                    return Ok(None);
                }
                let mut payload = vec![0u8; klen + vlen];
                let mut reads = Vec::with_capacity(chunks.len());
                let mut rest = &mut payload[..];
                for c in &chunks {
                    let take = if (c.class as usize) < crate::classes::NUM_CLASSES {
                        (crate::classes::size(c.class) as usize).min(rest.len())
                    } else {
                        0
                    };
                    if take == 0 {
                        return Ok(None);
                    }
                    let (now, later) = rest.split_at_mut(take);
                    reads.push((c.addr, now));
                    rest = later;
                }
                if !rest.is_empty() {
                    return Ok(None);
                }
                match self.read_batch(&mut reads).await {
                    Ok(()) => {}
                    // Freed-and-reused chunk refs may point anywhere: an address the
                    // node refuses is a stale index entry, not a pool failure.
                    Err(e) if e.is_bad_address() => return Ok(None),
                    // A failure of the node or of the way to it is not an absent key.
                    Err(e) => return Err(e),
                }
                if !object::chained_crc_ok(&head, head_len, crc, &payload, klen)
                    || expect.is_some_and(|(_, key)| payload[..klen] != *key)
                {
                    return Ok(None);
                }
                Ok(Some((db, Bytes::from(payload), klen, kind)))
            }
            Head::Invalid => Ok(None),
        }
    }
}
