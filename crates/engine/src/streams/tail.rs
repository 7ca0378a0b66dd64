//! A batch of XADDs on a chunked stream ([`super::stored`]) without reading the whole
//! stream: the batch loads the head and only the front entries its trims may remove
//! (whole nodes while the trim can reach them, and the next one), runs the same
//! [`XAddOp::apply`] as on a packed stream, then removes the trimmed entries from the
//! front of the tree and appends the new ones at its end — one path at each end, not
//! the stream. A batch whose result disagrees with the tree's count (node shapes that
//! do not describe the entries, e.g. after a foreign RESTORE) is left to the path that
//! reads the whole stream.

use std::ops::Bound;

use bytes::Bytes;
use dmc_dht::{Change, ValueKind};
use dmc_resp::Reply;
use dmc_umo::chunk::TreeRoot;

use super::add::{Strategy, XAddOp};
use super::id::StreamId;
use super::stored::{self, parse_record, record};
use super::value::StreamValue;
use crate::Engine;
use crate::big;
use crate::combine::Answer;
use crate::tree::TreeError;

const KIND: ValueKind = ValueKind::Stream;

/// What a batch on the tree came to.
pub(super) enum Outcome {
    Done(Vec<Answer<XAddOp>>),
    /// The key changed meanwhile: read it again.
    Changed,
    /// Run the batch on the whole stream instead.
    Whole,
}

/// The number of entries, from the front, that the trims of `ops` may remove or look
/// at on a stream of `count` entries described by `head`'s nodes.
fn front_window(head: &StreamValue, count: u64, ops: &[XAddOp]) -> u64 {
    let total = count + ops.len() as u64;
    let mut nodes = 0usize;
    for op in ops {
        let reach = match op.trim_strategy() {
            None => 0,
            Some(Strategy::MaxLen(max)) => {
                let remove = total.saturating_sub(max);
                let mut acc = 0u64;
                let mut n = 0;
                // Whole nodes while they may all go, then the one a trim stops in.
                while n < head.nodes.len() && acc <= remove {
                    acc += u64::from(head.nodes[n].live);
                    n += 1;
                }
                n
            }
            Some(Strategy::MinId(min)) => {
                let below = head.nodes.iter().take_while(|n| n.first < min).count();
                (below + 1).min(head.nodes.len())
            }
        };
        nodes = nodes.max(reach);
    }
    head.nodes
        .iter()
        .take(nodes)
        .map(|n| u64::from(n.live))
        .sum::<u64>()
        .min(count)
}

/// Applies `ops` to the chunked stream `key` read as `old` (its tree `root`, its head).
#[allow(clippy::too_many_arguments)]
pub(super) async fn add(
    engine: &Engine,
    db: u8,
    key: &[u8],
    ops: &[XAddOp],
    now: u64,
    old: &Bytes,
    root: TreeRoot,
    mut head: StreamValue,
) -> Result<Outcome, Reply> {
    let mut t = stored::open(engine, db, key, root);
    let window = front_window(&head, root.count, ops);
    let front = match window {
        0 => Vec::new(),
        n => match t.range(0, n - 1).await {
            Ok(recs) => recs,
            Err(TreeError::Stale) => return Ok(Outcome::Changed),
            Err(e) => return Err(e.into()),
        },
    };
    for rec in &front {
        let (id, fields) = parse_record(rec)?;
        head.entries.insert(id, fields);
    }
    let loaded: Vec<StreamId> = head.entries.keys().copied().collect();
    head.unloaded = root.count.saturating_sub(loaded.len() as u64);
    let last_before = head.last_id;
    let mut stream = Some(head);
    let answers: Vec<Answer<XAddOp>> = ops.iter().map(|op| op.apply(&mut stream, now)).collect();
    let wrote = answers
        .iter()
        .any(|a| a.as_ref().is_ok_and(|(r, _)| *r != Reply::Null));
    let Some(mut st) = stream.filter(|_| wrote) else {
        return Ok(Outcome::Done(answers));
    };
    // Trims remove from the front: a prefix of the loaded entries.
    let removed = loaded
        .iter()
        .take_while(|id| !st.entries.contains_key(id))
        .count();
    if loaded[removed..]
        .iter()
        .any(|id| !st.entries.contains_key(id))
    {
        return Ok(Outcome::Whole);
    }
    let edited = async {
        for _ in 0..removed {
            t.remove_at(0).await?;
        }
        let new = st
            .entries
            .range((Bound::Excluded(last_before), Bound::Unbounded));
        for (id, fields) in new {
            t.insert_at(t.len(), record(*id, fields)).await?;
        }
        Ok::<(), TreeError>(())
    };
    match edited.await {
        Ok(()) => {}
        Err(TreeError::Stale) => return Ok(Outcome::Changed),
        Err(e) => return Err(e.into()),
    }
    if t.len() != st.len() {
        return Ok(Outcome::Whole);
    }
    st.entries.clear();
    st.unloaded = 0;
    let committed = if t.is_empty() {
        // Trimmed to nothing: packed again (the key stays, as in Redis).
        let change = Change::Write(st.encode().into());
        big::commit(engine, db, key, KIND, Some(old), change).await?
    } else {
        let head = st.encode_head();
        let kinds = (KIND, Some(old));
        big::commit_trees_with(engine, db, key, kinds, vec![t], true, &head).await?
    };
    if !committed {
        return Ok(Outcome::Changed);
    }
    engine.wrote_typed(db, key, KIND, None);
    Ok(Outcome::Done(answers))
}
