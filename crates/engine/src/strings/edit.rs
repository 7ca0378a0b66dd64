//! In-place string edits as one batchable type: SETBIT, APPEND, SETRANGE and
//! BITFIELD's writing form that arrive together for one key are applied in arrival
//! order to one read of it and committed once ([`crate::combine`]): on a chunked
//! string one new tree version for the whole batch, on a plain one a single rewrite.
//! An edit that finds its key free and its string small and plain is written at once
//! instead, without a batch or an await (as INCR is).

use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use dmc_resp::Reply;
use futures::future::BoxFuture;

use super::splice::{Splice, Window, splice_locked, splice_now};
use super::{Append, SetRange};
use crate::Engine;
use crate::bitmaps::{FieldWrite, SetBitOp};
use crate::combine::{Answer, Batch, Combiner};

/// One in-place edit of a string.
pub(crate) enum StringEdit {
    SetBit(SetBitOp),
    Append(Append),
    SetRange(SetRange),
    Field(FieldWrite),
}

/// An edit's answer.
pub(crate) enum Edited {
    /// SETBIT: the bit before, and whether the key changed.
    Bit(bool, bool),
    /// APPEND, SETRANGE: the string's length after.
    Len(u64),
    /// BITFIELD: the replies, and whether the key was written.
    Field(Vec<crate::bitmaps::Outcome>, bool),
}

impl Splice for StringEdit {
    type Out = Edited;

    fn span(&self, len: u64) -> Range<u64> {
        match self {
            StringEdit::SetBit(op) => op.span(len),
            StringEdit::Append(op) => op.span(len),
            StringEdit::SetRange(op) => op.span(len),
            StringEdit::Field(op) => op.span(len),
        }
    }

    fn apply(&self, w: &mut Window) -> Result<(bool, Edited), Reply> {
        Ok(match self {
            StringEdit::SetBit(op) => {
                let (write, (old, changed)) = op.apply(w)?;
                (write, Edited::Bit(old, changed))
            }
            StringEdit::Append(op) => {
                let (write, len) = op.apply(w)?;
                (write, Edited::Len(len))
            }
            StringEdit::SetRange(op) => {
                let (write, len) = op.apply(w)?;
                (write, Edited::Len(len))
            }
            StringEdit::Field(op) => {
                let (write, (out, written)) = op.apply(w)?;
                (write, Edited::Field(out, written))
            }
        })
    }
}

impl Batch for StringEdit {
    type Out = Edited;

    fn combiner(engine: &Engine) -> &Combiner<Self> {
        &engine.string_edits
    }

    fn run(
        engine: Arc<Engine>,
        db: u8,
        key: Bytes,
        ops: Vec<Self>,
    ) -> BoxFuture<'static, Result<Vec<Answer<Self>>, Reply>> {
        Box::pin(async move { splice_locked(&engine, db, &key, &ops).await })
    }
}

/// Applies `edit` of `key` at once when nothing holds the key and the string stays
/// small and plain ([`splice_now`]); otherwise submits it to the key's batch and waits
/// for its answer.
pub(crate) async fn submit(
    engine: &Engine,
    db: u8,
    key: &[u8],
    edit: StringEdit,
) -> Answer<StringEdit> {
    if let Some(answer) = splice_now(engine, db, key, &edit) {
        return answer;
    }
    engine.string_edits.submit(engine, db, key, edit).await
}

/// The answer of a batch that answered with another edit's kind.
pub(crate) fn mismatched() -> Reply {
    Reply::err("ERR internal: an edit got another edit's answer")
}
