//! List changes on either representation, through [`crate::big::edit_locked`]: a
//! packed value (decoded, edited, encoded; past [`crate::big::TREE_AT`] bytes it becomes
//! a chunk tree) or a chunk tree (edited on the copied path, written as new chunks).
//! Changes of one key that arrive together are applied as one batch with one commit
//! ([`crate::combine`]).

use bytes::Bytes;
use dmc_dht::{Change, ValueKind};
use dmc_resp::Reply;
use futures::future::BoxFuture;

use super::{End, KIND, ListValue, range};
use crate::Engine;
use crate::packed::Packed;
use crate::tree::{Tree, TreeError};

/// One list change (owning its elements, so that a same-key batch can run it).
#[derive(Debug, Clone)]
pub(crate) enum ListOp {
    Push {
        end: End,
        items: Vec<Bytes>,
        only_existing: bool,
    },
    Pop {
        end: End,
        count: usize,
    },
    Set {
        index: i64,
        item: Bytes,
    },
    Trim {
        start: i64,
        stop: i64,
    },
    Rem {
        count: i64,
        item: Bytes,
    },
    Insert {
        after: bool,
        pivot: Bytes,
        item: Bytes,
    },
}

/// What a change answers.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Outcome {
    /// The list's length after a push or insert (0: no list; -1: no pivot).
    Len(i64),
    /// Popped elements, `None` when the key does not exist.
    Popped(Option<Vec<Bytes>>),
    /// Elements removed (LREM).
    Removed(i64),
    Done,
}

/// How lists are stored: trees ordered by position.
const LAYOUT: crate::big::Layout = crate::big::Layout {
    kind: KIND,
    key_of: None,
    records_of: packed_records,
};

fn packed_records(p: &Packed) -> Result<Vec<Bytes>, crate::packed::Corrupt> {
    p.collect(1)
}

/// Applies `op` to `key`: queued behind the key's other list changes, committed in
/// one batch with them ([`crate::combine`]).
pub(crate) async fn edit(
    engine: &Engine,
    db: u8,
    key: &[u8],
    op: ListOp,
) -> Result<Outcome, Reply> {
    engine.list_batches.submit(engine, db, key, op).await
}

/// [`edit`] for a caller holding the key's lock (a command changing two keys).
pub(crate) async fn edit_locked(
    engine: &Engine,
    db: u8,
    key: &[u8],
    op: ListOp,
) -> Result<Outcome, Reply> {
    crate::big::edit_one(engine, db, key, &op).await
}

impl crate::big::Edit for ListOp {
    type Value = ListValue;
    type Out = Outcome;

    fn layout() -> &'static crate::big::Layout {
        &LAYOUT
    }

    fn decode(p: Option<Packed>) -> Result<Option<ListValue>, Reply> {
        Ok(p.map(|p| ListValue::decode(&p)).transpose()?)
    }

    fn encode(v: Option<ListValue>) -> Change {
        match v {
            Some(l) if !l.items.is_empty() => Change::Write(l.encode().into()),
            _ => Change::Delete,
        }
    }

    fn apply_packed(&self, v: &mut Option<ListValue>) -> Result<(bool, Outcome), Reply> {
        apply_packed(v, self)
    }

    fn apply_tree<'a, 'p: 'a>(
        &'a self,
        t: &'a mut Tree<'p>,
    ) -> BoxFuture<'a, crate::big::TreeOutcome<Outcome>> {
        Box::pin(apply_tree(t, self))
    }
}

crate::combine::batched_edit!(ListOp, list_batches);

/// The change on a decoded list (`None`: the key does not exist): whether it changed
/// the list, and the answer.
fn apply_packed(list: &mut Option<ListValue>, op: &ListOp) -> Result<(bool, Outcome), Reply> {
    match op {
        ListOp::Push {
            end,
            items,
            only_existing,
        } => {
            if *only_existing && list.is_none() {
                return Ok((false, Outcome::Len(0)));
            }
            let l = list.get_or_insert_with(ListValue::default);
            for i in items {
                l.push(*end, i.clone());
            }
            Ok((true, Outcome::Len(l.items.len() as i64)))
        }
        ListOp::Pop { end, count } => {
            let Some(l) = list else {
                return Ok((false, Outcome::Popped(None)));
            };
            let popped: Vec<Bytes> = (0..*count).map_while(|_| l.pop(*end)).collect();
            Ok((!popped.is_empty(), Outcome::Popped(Some(popped))))
        }
        ListOp::Set { index, item } => {
            let Some(l) = list else {
                return Err(Reply::err("ERR no such key"));
            };
            let at = index_in(*index, l.items.len() as u64)?;
            l.big |= item.len() > crate::collection::MAX_LISTPACK_VALUE;
            l.items[at as usize] = item.clone();
            Ok((true, Outcome::Done))
        }
        ListOp::Trim { start, stop } => {
            let Some(l) = list else {
                return Ok((false, Outcome::Done));
            };
            match range(*start, *stop, l.items.len()) {
                Some((first, last)) => {
                    l.items.truncate(last + 1);
                    l.items.drain(..first);
                }
                None => l.items.clear(),
            }
            Ok((true, Outcome::Done))
        }
        ListOp::Rem { count, item } => {
            let Some(l) = list else {
                return Ok((false, Outcome::Removed(0)));
            };
            let all: Vec<Bytes> = l.items.iter().cloned().collect();
            let gone = removals(&all, item, *count);
            for &i in gone.iter().rev() {
                l.items.remove(i);
            }
            Ok((!gone.is_empty(), Outcome::Removed(gone.len() as i64)))
        }
        ListOp::Insert { after, pivot, item } => {
            let Some(l) = list else {
                return Ok((false, Outcome::Len(0)));
            };
            let Some(at) = l.items.iter().position(|i| i == pivot) else {
                return Ok((false, Outcome::Len(-1)));
            };
            l.big |= item.len() > crate::collection::MAX_LISTPACK_VALUE;
            l.items.insert(at + *after as usize, item.clone());
            l.big |= l.items.len() > crate::collection::MAX_LISTPACK_ENTRIES;
            Ok((true, Outcome::Len(l.items.len() as i64)))
        }
    }
}

/// A list index (negative from the end) as a position, or Redis's range error.
fn index_in(index: i64, len: u64) -> Result<u64, Reply> {
    let len = len as i64;
    let at = if index < 0 { len + index } else { index };
    if !(0..len).contains(&at) {
        return Err(Reply::err("ERR index out of range"));
    }
    Ok(at as u64)
}

/// The positions LREM removes from `all`: up to |count| elements equal to `item`, from
/// the head when count ≥ 0, the tail when negative; all of them for 0. Ascending.
fn removals(all: &[Bytes], item: &[u8], count: i64) -> Vec<usize> {
    let limit = if count == 0 {
        usize::MAX
    } else {
        count.unsigned_abs() as usize
    };
    let matches = all
        .iter()
        .enumerate()
        .filter(|(_, i)| &i[..] == item)
        .map(|(n, _)| n);
    let mut out: Vec<usize> = if count >= 0 {
        matches.take(limit).collect()
    } else {
        let mut v: Vec<usize> = matches.collect();
        v.reverse();
        v.truncate(limit);
        v
    };
    out.sort_unstable();
    out
}

/// The change on a tree: a client error of the change (an index out of range) inside,
/// a failure of the tree (a chunk unreadable) outside, which stops the batch: the tree
/// may be half changed then.
async fn apply_tree(
    t: &mut Tree<'_>,
    op: &ListOp,
) -> Result<Result<(bool, Outcome), Reply>, TreeError> {
    Ok(Ok(match op {
        ListOp::Push { end, items, .. } => {
            for i in items {
                let at = if *end == End::Left { 0 } else { t.len() };
                t.insert_at(at, i.clone()).await?;
            }
            (true, Outcome::Len(t.len() as i64))
        }
        ListOp::Pop { end, count } => {
            let mut popped = Vec::with_capacity((*count).min(t.len() as usize));
            while popped.len() < *count && !t.is_empty() {
                let at = if *end == End::Left { 0 } else { t.len() - 1 };
                match t.remove_at(at).await? {
                    Some(i) => popped.push(i),
                    None => break,
                }
            }
            (!popped.is_empty(), Outcome::Popped(Some(popped)))
        }
        ListOp::Set { index, item } => {
            let at = match index_in(*index, t.len()) {
                Ok(at) => at,
                Err(e) => return Ok(Err(e)),
            };
            t.replace_at(at, item.clone()).await?;
            (true, Outcome::Done)
        }
        ListOp::Trim { start, stop } => {
            let len = t.len();
            let (first, last) = match range(*start, *stop, len as usize) {
                Some((f, l)) => (f as u64, l as u64),
                None => (len, len),
            };
            let mut changed = false;
            // From the tail, then the head (positions stay valid).
            for at in (last.saturating_add(1)..len).rev() {
                changed |= t.remove_at(at).await?.is_some();
            }
            let keep_first = first.min(t.len());
            for _ in 0..keep_first {
                changed |= t.remove_at(0).await?.is_some();
            }
            if first >= len {
                while !t.is_empty() {
                    changed |= t.remove_at(t.len() - 1).await?.is_some();
                }
            }
            (changed, Outcome::Done)
        }
        ListOp::Rem { count, item } => {
            let all = t.range(0, u64::MAX).await?;
            let gone = removals(&all, item, *count);
            for &i in gone.iter().rev() {
                t.remove_at(i as u64).await?;
            }
            (!gone.is_empty(), Outcome::Removed(gone.len() as i64))
        }
        ListOp::Insert { after, pivot, item } => {
            let all = t.range(0, u64::MAX).await?;
            let Some(at) = all.iter().position(|i| i == pivot) else {
                return Ok(Ok((false, Outcome::Len(-1))));
            };
            t.insert_at(at as u64 + *after as u64, item.clone()).await?;
            (true, Outcome::Len(t.len() as i64))
        }
    }))
}

pub(crate) use crate::big::Stored;

/// Every element of the list `key`, head to tail (empty: absent); WRONGTYPE for
/// another type. SORT reads lists through it.
pub(crate) async fn all(engine: &Engine, db: u8, key: &[u8]) -> Result<Vec<Bytes>, Reply> {
    crate::big::read(
        engine,
        db,
        key,
        &LAYOUT,
        |p| match p {
            Some(p) => Ok(p.collect(1)?),
            None => Ok(Vec::new()),
        },
        |t| futures::FutureExt::boxed(async move { t.range(0, u64::MAX).await }),
    )
    .await
}

/// The list `key` as stored (`None`: absent); WRONGTYPE for another type.
pub(crate) async fn load(engine: &Engine, db: u8, key: &[u8]) -> Result<Option<Stored>, Reply> {
    crate::big::load(engine, db, key, ValueKind::List).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lrem_positions_count_from_either_end() {
        let all: Vec<Bytes> = ["a", "b", "a", "c", "a"]
            .iter()
            .map(|s| Bytes::from(*s))
            .collect();
        assert_eq!(removals(&all, b"a", 2), vec![0, 2]);
        assert_eq!(removals(&all, b"a", -1), vec![4]);
        assert_eq!(removals(&all, b"a", 0), vec![0, 2, 4]);
        assert!(removals(&all, b"z", 0).is_empty());
    }
}
