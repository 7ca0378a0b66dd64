//! In-place edits and range reads of a string in either of its forms: plain (one
//! object, rewritten whole, as INCR is) or chunked ([`super::chunked`]: only the pieces
//! an edit touches are read and rewritten). SETBIT, SETRANGE, APPEND and BITFIELD are
//! [`Splice`]s; GETBIT, GETRANGE, STRLEN, BITCOUNT, BITPOS and BITFIELD_RO read a
//! [`View`]. An edit that leaves a plain string of [`CHUNKED_AT`] bytes or more
//! stores it chunked.

use std::ops::Range;

use bytes::Bytes;
use dmc_dht::{Change, DhtError, ValueKind};
use dmc_resp::Reply;

use super::chunked::{self, CHUNKED_AT, Form};
use crate::big::{READ_ATTEMPTS, commit_trees_with};
use crate::tree::TreeError;
use crate::{Engine, error_reply};

/// Times an edit starts over because the key changed under it.
const ATTEMPTS: usize = 8;

/// The bytes of a string an edit works on: those of its span (clamped to the string),
/// from `base`. Offsets are absolute; bytes past the string's end read as zero.
pub(crate) struct Window {
    base: u64,
    bytes: Vec<u8>,
    len: u64,
    exists: bool,
    /// The bytes written, `start..end`.
    dirty: Option<(u64, u64)>,
}

impl Window {
    /// The string's length.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the key exists (an edit that writes creates it).
    pub fn exists(&self) -> bool {
        self.exists
    }

    /// The byte at `pos` (zero past the end of the string).
    pub fn byte(&self, pos: u64) -> u8 {
        pos.checked_sub(self.base)
            .and_then(|rel| self.bytes.get(usize::try_from(rel).ok()?))
            .copied()
            .unwrap_or(0)
    }

    /// Writes `data` at `pos` (inside the edit's span), growing the string with zero
    /// bytes to reach it.
    pub fn put(&mut self, pos: u64, data: &[u8]) {
        let Some(rel) = pos.checked_sub(self.base) else {
            debug_assert!(false, "a write before its edit's span");
            return;
        };
        let (rel, end) = (rel as usize, rel as usize + data.len());
        let grown_from = self.base + self.bytes.len() as u64;
        if self.bytes.len() < end {
            self.bytes.resize(end, 0);
        }
        self.bytes[rel..end].copy_from_slice(data);
        // Zero bytes between the old end and `pos` are written too.
        self.mark(pos.min(grown_from), pos + data.len() as u64);
    }

    /// Edits the window as a vector whose index 0 is byte `base` (given): BITFIELD's
    /// arithmetic, which grows the vector as it needs.
    pub fn edit_raw<R>(&mut self, f: impl FnOnce(&mut Vec<u8>, u64) -> R) -> R {
        let out = f(&mut self.bytes, self.base);
        self.mark(self.base, self.base + self.bytes.len() as u64);
        out
    }

    fn mark(&mut self, start: u64, end: u64) {
        self.len = self.len.max(end);
        self.exists = true;
        self.dirty = Some(match self.dirty {
            Some((a, b)) => (a.min(start), b.max(end)),
            None => (start, end),
        });
    }
}

/// A change of a string's bytes in place.
pub(crate) trait Splice {
    type Out;
    /// The bytes `start..end` the change reads or writes, given the string's length.
    fn span(&self, len: u64) -> Range<u64>;
    /// Applies the change: whether the key must be written, and the answer. An error
    /// leaves the window as it was.
    fn apply(&self, w: &mut Window) -> Result<(bool, Self::Out), Reply>;
}

/// What the plain form's rewrite did.
enum Plain {
    Kept,
    Wrote,
    /// The result is long enough to store chunked: the value read and the new bytes.
    Grew(Option<Bytes>, Vec<u8>),
}

/// Applies `ops` in order to the string `key` with one commit (the caller holds the
/// key's lock): one answer per change. The cached copy is dropped if it wrote.
pub(crate) async fn splice_locked<S: Splice>(
    engine: &Engine,
    db: u8,
    key: &[u8],
    ops: &[S],
) -> Result<Vec<Result<S::Out, Reply>>, Reply> {
    for _ in 0..ATTEMPTS {
        let mut answers = Vec::with_capacity(ops.len());
        let mut plain = Plain::Kept;
        let rewritten = engine
            .dht
            .update_kind(db, key, ValueKind::String, |cur| {
                answers.clear();
                let mut w = Window {
                    base: 0,
                    bytes: cur.map(|v| v.to_vec()).unwrap_or_default(),
                    len: cur.map_or(0, |v| v.len() as u64),
                    exists: cur.is_some(),
                    dirty: None,
                };
                let mut write = false;
                for op in ops {
                    answers.push(op.apply(&mut w).map(|(wrote, out)| {
                        write |= wrote;
                        out
                    }));
                }
                if !write {
                    plain = Plain::Kept;
                    return Ok::<_, std::convert::Infallible>(Change::Keep);
                }
                if w.bytes.len() >= CHUNKED_AT {
                    plain = Plain::Grew(cur.cloned(), w.bytes);
                    return Ok(Change::Keep);
                }
                plain = Plain::Wrote;
                Ok(Change::Write(w.bytes.into()))
            })
            .await;
        match rewritten {
            Ok(Ok(())) => match plain {
                Plain::Kept => return Ok(answers),
                Plain::Wrote => {
                    engine.wrote(db, key, None);
                    return Ok(answers);
                }
                Plain::Grew(old, bytes) => {
                    let t = chunked::build(engine.dht.pool(), db, key, &bytes);
                    let tail = Form::tail(bytes.len() as u64);
                    let kinds = (ValueKind::ChunkedString, old.as_ref());
                    if commit_trees_with(engine, db, key, kinds, vec![t], false, &tail).await? {
                        engine.wrote_typed(db, key, ValueKind::ChunkedString, None);
                        return Ok(answers);
                    }
                }
            },
            Ok(Err(never)) => match never {},
            // Another type, or the chunked form.
            Err(DhtError::WrongType) => {
                if let Some(answers) = edit_chunked(engine, db, key, ops).await? {
                    return Ok(answers);
                }
            }
            Err(e) => return Err(error_reply(e)),
        }
    }
    Err(Reply::err(
        "TRYAGAIN too much contention on this key, try again",
    ))
}

/// Why an inline edit's change wrote nothing.
enum Unwritten<O> {
    /// The edit's answer: an error, or a change that changed nothing.
    Answer(Result<O, Reply>),
    /// The string would reach the chunked form: the batch path stores it.
    Declined,
}

/// [`splice_locked`] of one change without awaiting, as [`super::update`]'s inline
/// path does for INCR: when the key's lock is free, the string is plain (or absent)
/// and stays under [`CHUNKED_AT`] bytes, and the table writes it at once
/// ([`dmc_dht::Dht::update_now`]). `None`: nothing was done, and the batch path runs
/// the change (a chunked string, another type, a write the table left to its awaited
/// path, a key another edit holds).
pub(crate) fn splice_now<S: Splice>(
    engine: &Engine,
    db: u8,
    key: &[u8],
    op: &S,
) -> Option<Result<S::Out, Reply>> {
    let _g = engine.try_lock_key(key)?;
    let mut answer = None;
    let updated = engine.dht.update_now(db, key, |cur| {
        let len = cur.map_or(0, |v| v.len() as u64);
        // Checked before the window is built: a far offset would allocate up to it.
        if op.span(len).end >= CHUNKED_AT as u64 {
            return Err(Unwritten::Declined);
        }
        let mut w = Window {
            base: 0,
            bytes: cur.map(<[u8]>::to_vec).unwrap_or_default(),
            len,
            exists: cur.is_some(),
            dirty: None,
        };
        match op.apply(&mut w) {
            Ok((true, _)) if w.bytes.len() >= CHUNKED_AT => Err(Unwritten::Declined),
            Ok((true, out)) => {
                answer = Some(out);
                Ok(w.bytes)
            }
            Ok((false, out)) => Err(Unwritten::Answer(Ok(out))),
            Err(reply) => Err(Unwritten::Answer(Err(reply))),
        }
    })?;
    match updated {
        Ok(Ok(())) => {
            engine.wrote(db, key, None);
            answer.map(Ok)
        }
        Ok(Err(Unwritten::Answer(answer))) => Some(answer),
        Ok(Err(Unwritten::Declined)) | Err(DhtError::WrongType) => None,
        Err(e) => Some(Err(error_reply(e))),
    }
}

/// [`splice_locked`] on a chunked string: `None` when the key changed meanwhile.
async fn edit_chunked<S: Splice>(
    engine: &Engine,
    db: u8,
    key: &[u8],
    ops: &[S],
) -> Result<Option<Vec<Result<S::Out, Reply>>>, Reply> {
    let e = match engine.dht.get(db, key).await.map_err(error_reply)? {
        Some(e) if e.kind == ValueKind::ChunkedString => e,
        Some(e) if e.kind != ValueKind::String => {
            return Err(error_reply(DhtError::WrongType));
        }
        _ => return Ok(None),
    };
    let (mut t, mut len) =
        chunked::open(engine.dht.pool(), db, key, &e.value).map_err(error_reply)?;
    let mut answers = Vec::with_capacity(ops.len());
    let mut write = false;
    for op in ops {
        let span = op.span(len);
        let lo = span.start.min(len);
        let hi = span.end.clamp(lo, len);
        let bytes = match chunked::read_range(&t, lo, hi).await {
            Ok(b) => b,
            Err(TreeError::Stale) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let mut w = Window {
            base: lo,
            bytes,
            len,
            exists: true,
            dirty: None,
        };
        match op.apply(&mut w) {
            Ok((wrote, out)) => {
                if wrote && let Some((a, b)) = w.dirty {
                    let data = &w.bytes[(a - lo) as usize..(b - lo) as usize];
                    match chunked::write_at(&mut t, &mut len, a, data).await {
                        Ok(()) => {}
                        Err(TreeError::Stale) => return Ok(None),
                        Err(e) => return Err(e.into()),
                    }
                }
                write |= wrote;
                answers.push(Ok(out));
            }
            Err(r) => answers.push(Err(r)),
        }
    }
    if !write {
        return Ok(Some(answers));
    }
    let kinds = (ValueKind::ChunkedString, Some(&e.value));
    let tail = Form::tail(len);
    if !commit_trees_with(engine, db, key, kinds, vec![t], true, &tail).await? {
        return Ok(None);
    }
    engine.wrote_typed(db, key, ValueKind::ChunkedString, None);
    Ok(Some(answers))
}

/// Bytes of a string read for a command: those of the span asked for (clamped to the
/// string), from `base`; all of a plain string.
pub(crate) struct View {
    pub base: u64,
    pub bytes: Bytes,
    /// The string's length.
    pub len: u64,
}

impl View {
    /// The byte at `pos` (zero outside what was read).
    pub fn byte(&self, pos: u64) -> u8 {
        pos.checked_sub(self.base)
            .and_then(|rel| self.bytes.get(usize::try_from(rel).ok()?))
            .copied()
            .unwrap_or(0)
    }

    /// Bytes `start..end` (absolute, inside what was read).
    pub fn slice(&self, start: u64, end: u64) -> Bytes {
        let rel = |p: u64| (p.saturating_sub(self.base) as usize).min(self.bytes.len());
        let (a, b) = (rel(start), rel(end));
        self.bytes.slice(a..b.max(a))
    }
}

/// Reads the string `key` for a command that needs the bytes `span(len)` of it (the
/// string's length given): `None` for a missing key, WRONGTYPE for another type.
pub(crate) async fn read_span(
    engine: &Engine,
    db: u8,
    key: &[u8],
    span: impl Fn(u64) -> Range<u64>,
) -> Result<Option<View>, Reply> {
    let pool = engine.dht.pool();
    for _ in 0..READ_ATTEMPTS {
        let (kind, value) = match engine.read_stored(db, key).await.map_err(error_reply)? {
            Some(found) => found,
            None => return Ok(None),
        };
        match kind {
            ValueKind::String => {
                return Ok(Some(View {
                    base: 0,
                    len: value.len() as u64,
                    bytes: value,
                }));
            }
            ValueKind::ChunkedString => {}
            _ => return Err(error_reply(DhtError::WrongType)),
        }
        let (t, len) = chunked::open(pool, db, key, &value).map_err(error_reply)?;
        let want = span(len);
        let lo = want.start.min(len);
        let hi = want.end.clamp(lo, len);
        match chunked::read_range(&t, lo, hi).await {
            Ok(bytes) => {
                return Ok(Some(View {
                    base: lo,
                    bytes: bytes.into(),
                    len,
                }));
            }
            Err(TreeError::Stale) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Err(Reply::err(
        "TRYAGAIN the string changed while it was read, try again",
    ))
}
