//! The list family: pushes, pops (with counts, LMPOP), LINDEX, LSET, LRANGE, LTRIM,
//! LREM, LINSERT, LPOS and LMOVE, with Redis 7 semantics and error texts. The blocking
//! forms wait in [`crate::blocking`] and pop here.
//!
//! A small list is stored packed ([`crate::packed`]: elements head to tail), a large
//! one as a chunk tree ordered by position ([`crate::tree`]); [`edit`] applies a change
//! to either and converts a packed list that outgrows [`crate::big::TREE_AT`]. Reads walk the
//! packed value or read the tree's chunks. Every push wakes the clients blocked on the
//! key.

mod edit;

pub(crate) use edit::{ListOp, Outcome, Stored, all};

use std::collections::VecDeque;

use bytes::Bytes;
use dmc_dht::{Change, ValueKind};
use dmc_resp::Reply;

use crate::collection::{MAX_LISTPACK_ENTRIES, MAX_LISTPACK_VALUE};
use crate::packed::{Corrupt, Packed, Writer, element_len};
use crate::table::ListCmd;
use crate::tree::{Tree, TreeError};
use crate::{Engine, NOT_INTEGER, SYNTAX, Session, notify, parse_i64};

const KIND: ValueKind = ValueKind::List;

/// Which end of a list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    Left,
    Right,
}

impl End {
    pub fn parse(arg: &[u8]) -> Option<End> {
        if arg.eq_ignore_ascii_case(b"LEFT") {
            Some(End::Left)
        } else if arg.eq_ignore_ascii_case(b"RIGHT") {
            Some(End::Right)
        } else {
            None
        }
    }
}

/// A list decoded for a change.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ListValue {
    /// Past the listpack limits once (OBJECT ENCODING `quicklist` from then on).
    pub big: bool,
    pub items: VecDeque<Bytes>,
}

impl ListValue {
    pub fn decode(p: &Packed) -> Result<ListValue, Corrupt> {
        let items: VecDeque<Bytes> = p.collect(1)?.into();
        Ok(ListValue { big: p.big, items })
    }

    pub fn push(&mut self, end: End, item: Bytes) {
        self.big |= item.len() > MAX_LISTPACK_VALUE;
        match end {
            End::Left => self.items.push_front(item),
            End::Right => self.items.push_back(item),
        }
        self.big |= self.items.len() > MAX_LISTPACK_ENTRIES;
    }

    pub fn pop(&mut self, end: End) -> Option<Bytes> {
        match end {
            End::Left => self.items.pop_front(),
            End::Right => self.items.pop_back(),
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let size = self.items.iter().map(|i| element_len(i.len())).sum();
        let mut w = Writer::new(self.big, size);
        for i in &self.items {
            w.element(i);
            w.entry();
        }
        w.finish()
    }

    pub fn into_change(self) -> Change {
        if self.items.is_empty() {
            Change::Delete
        } else {
            Change::Write(self.encode().into())
        }
    }
}

/// Redis's name for a packed list's encoding.
pub fn encoding(p: &Packed) -> &'static str {
    if p.big { "quicklist" } else { "listpack" }
}

/// Normalises an inclusive range `start..=stop` of a list of `len` (negative indexes
/// count from the end) into `Some((first, last))`, or `None` when empty.
pub fn range(start: i64, stop: i64, len: usize) -> Option<(usize, usize)> {
    let len = len as i64;
    let start = if start < 0 {
        (len + start).max(0)
    } else {
        start
    };
    let stop = if stop < 0 {
        len + stop
    } else {
        stop.min(len - 1)
    };
    (start <= stop && start < len && stop >= 0).then_some((start as usize, stop as usize))
}

macro_rules! tri {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(e) => return Reply::from(e),
        }
    };
}

/// Pops up to `count` elements from `end` of the list `key`: `None` when it does not
/// exist. The popped elements are in pop order.
pub(crate) async fn pop(
    engine: &Engine,
    db: u8,
    key: &[u8],
    end: End,
    count: usize,
) -> Result<Option<Vec<Bytes>>, Reply> {
    match edit::edit(engine, db, key, ListOp::Pop { end, count }).await? {
        Outcome::Popped(p) => {
            if p.as_ref().is_some_and(|items| !items.is_empty()) {
                announce_pop(engine, db, key, end).await;
            }
            Ok(p)
        }
        _ => Ok(None),
    }
}

/// Announces a pop from `end` of `key`, and its deletion if that emptied it.
async fn announce_pop(engine: &Engine, db: u8, key: &[u8], end: End) {
    let event = if end == End::Left { "lpop" } else { "rpop" };
    engine.notify(notify::LIST, event, db, key);
    engine.notify_if_emptied(db, key).await;
}

/// Announces a push onto `end` of `key`.
fn announce_push(engine: &Engine, db: u8, key: &[u8], end: End) {
    let event = if end == End::Left { "lpush" } else { "rpush" };
    engine.notify(notify::LIST, event, db, key);
}

/// Pushes `items` (in order) onto `end` of `key`; with `only_existing`, nothing happens
/// to a missing key. Returns the new length (0: missing and not created), and wakes
/// the clients blocked on the key.
pub(crate) async fn push(
    engine: &Engine,
    db: u8,
    key: &[u8],
    end: End,
    items: &[Bytes],
    only_existing: bool,
) -> Result<i64, Reply> {
    let op = ListOp::Push {
        end,
        items: items.to_vec(),
        only_existing,
    };
    let len = match edit::edit(engine, db, key, op).await? {
        Outcome::Len(n) => n,
        _ => 0,
    };
    if len > 0 {
        announce_push(engine, db, key, end);
        engine.blocking.wake(db, key);
    }
    Ok(len)
}

/// LMOVE's work: pops from `from` of `src`, pushes onto `to` of `dst`. `None` when
/// `src` is missing. A `dst` of another type is WRONGTYPE with nothing popped.
pub(crate) async fn move_one(
    engine: &Engine,
    db: u8,
    src: &[u8],
    dst: &[u8],
    from: End,
    to: End,
) -> Result<Option<Bytes>, Reply> {
    let _held = engine.lock_keys([src, dst].into_iter()).await;
    // The destination's type is checked before anything is popped.
    edit::load(engine, db, dst).await?;
    let popped = match edit::edit_locked(
        engine,
        db,
        src,
        ListOp::Pop {
            end: from,
            count: 1,
        },
    )
    .await?
    {
        Outcome::Popped(Some(mut items)) => items.pop(),
        _ => None,
    };
    let Some(item) = popped else {
        return Ok(None);
    };
    let push = ListOp::Push {
        end: to,
        items: vec![item.clone()],
        only_existing: false,
    };
    edit::edit_locked(engine, db, dst, push).await?;
    // Redis announces the push before the pop.
    announce_push(engine, db, dst, to);
    announce_pop(engine, db, src, from).await;
    engine.blocking.wake(db, dst);
    Ok(Some(item))
}

pub async fn run(engine: &Engine, s: &mut Session, cmd: ListCmd, args: &[Bytes]) -> Reply {
    let db = engine.physical_db(s.db);
    let key = &args[1];
    match cmd {
        ListCmd::LPush | ListCmd::RPush | ListCmd::LPushX | ListCmd::RPushX => {
            let end = match cmd {
                ListCmd::LPush | ListCmd::LPushX => End::Left,
                _ => End::Right,
            };
            let only_existing = matches!(cmd, ListCmd::LPushX | ListCmd::RPushX);
            Reply::Int(tri!(
                push(engine, db, key, end, &args[2..], only_existing).await
            ))
        }
        ListCmd::LPop | ListCmd::RPop => {
            let end = if cmd == ListCmd::LPop {
                End::Left
            } else {
                End::Right
            };
            let count = match args.get(2) {
                None => None,
                Some(c) => match parse_i64(c) {
                    Some(n) if n >= 0 => Some(n as usize),
                    _ => return Reply::err("ERR value is out of range, must be positive"),
                },
            };
            if args.len() > 3 {
                return Reply::Error(format!(
                    "ERR wrong number of arguments for '{}' command",
                    if end == End::Left { "lpop" } else { "rpop" }
                ));
            }
            let popped = tri!(pop(engine, db, key, end, count.unwrap_or(1)).await);
            match (popped, count) {
                (None, Some(_)) => Reply::NullArray,
                (None, None) => Reply::Null,
                (Some(items), Some(_)) => {
                    Reply::Array(items.into_iter().map(Reply::Bulk).collect())
                }
                (Some(mut items), None) => items.pop().map_or(Reply::Null, Reply::Bulk),
            }
        }
        ListCmd::LSet => {
            let Some(index) = parse_i64(&args[2]) else {
                return Reply::err(NOT_INTEGER);
            };
            let op = ListOp::Set {
                index,
                item: args[3].clone(),
            };
            tri!(edit::edit(engine, db, key, op).await);
            engine.notify(notify::LIST, "lset", db, key);
            Reply::ok()
        }
        ListCmd::LTrim => {
            let (Some(start), Some(stop)) = (parse_i64(&args[2]), parse_i64(&args[3])) else {
                return Reply::err(NOT_INTEGER);
            };
            tri!(edit::edit(engine, db, key, ListOp::Trim { start, stop }).await);
            engine.notify(notify::LIST, "ltrim", db, key);
            engine.notify_if_emptied(db, key).await;
            Reply::ok()
        }
        ListCmd::LRem => {
            let Some(count) = parse_i64(&args[2]) else {
                return Reply::err(NOT_INTEGER);
            };
            let op = ListOp::Rem {
                count,
                item: args[3].clone(),
            };
            match tri!(edit::edit(engine, db, key, op).await) {
                Outcome::Removed(n) => {
                    if n > 0 {
                        engine.notify(notify::LIST, "lrem", db, key);
                        engine.notify_if_emptied(db, key).await;
                    }
                    Reply::Int(n)
                }
                _ => Reply::Int(0),
            }
        }
        ListCmd::LInsert => {
            let after = if args[2].eq_ignore_ascii_case(b"AFTER") {
                true
            } else if args[2].eq_ignore_ascii_case(b"BEFORE") {
                false
            } else {
                return Reply::err(SYNTAX);
            };
            let op = ListOp::Insert {
                after,
                pivot: args[3].clone(),
                item: args[4].clone(),
            };
            match tri!(edit::edit(engine, db, key, op).await) {
                Outcome::Len(n) => {
                    if n > 0 {
                        engine.notify(notify::LIST, "linsert", db, key);
                    }
                    Reply::Int(n)
                }
                _ => Reply::Int(0),
            }
        }
        ListCmd::LMove | ListCmd::RPopLPush => {
            let (from, to) = if cmd == ListCmd::RPopLPush {
                (End::Right, End::Left)
            } else {
                match (End::parse(&args[3]), End::parse(&args[4])) {
                    (Some(f), Some(t)) => (f, t),
                    _ => return Reply::err(SYNTAX),
                }
            };
            match tri!(move_one(engine, db, key, &args[2], from, to).await) {
                Some(item) => Reply::Bulk(item),
                None => Reply::Null,
            }
        }
        ListCmd::LMPop => {
            let m = tri!(parse_mpop(args, 1));
            mpop_once(engine, db, &m).await.unwrap_or_else(|r| r)
        }
        ListCmd::BLPop
        | ListCmd::BRPop
        | ListCmd::BLMove
        | ListCmd::BRPopLPush
        | ListCmd::BLMPop => crate::blocking::run_list(engine, s, db, cmd, args).await,
        _ => read(engine, db, cmd, args).await,
    }
}

/// LMPOP's and BLMPOP's arguments.
pub(crate) type MPop = crate::collection::MPop<End>;

/// Parses `numkeys key... LEFT|RIGHT [COUNT n]` starting at `args[at]`.
pub(crate) fn parse_mpop(args: &[Bytes], at: usize) -> Result<MPop, Reply> {
    crate::collection::parse_mpop(args, at, End::parse)
}

/// One LMPOP attempt: the first non-empty list's popped elements as `[key, [items]]`,
/// or `Ok(NullArray)` when every list is empty.
pub(crate) async fn mpop_once(engine: &Engine, db: u8, m: &MPop) -> Result<Reply, Reply> {
    for key in &m.keys {
        if let Some(items) = pop(engine, db, key, m.end, m.count).await? {
            return Ok(Reply::Array(vec![
                Reply::Bulk(key.clone()),
                Reply::Array(items.into_iter().map(Reply::Bulk).collect()),
            ]));
        }
    }
    Ok(Reply::NullArray)
}

/// Reads of a list that another agent may be rewriting start over this many times
/// when a chunk they reach was replaced meanwhile.
const READ_ATTEMPTS: usize = 8;

/// The read-only list commands.
async fn read(engine: &Engine, db: u8, cmd: ListCmd, args: &[Bytes]) -> Reply {
    for _ in 0..READ_ATTEMPTS {
        let stored = tri!(edit::load(engine, db, &args[1]).await);
        match stored {
            Some(Stored::Tree(root)) => {
                let tree = Tree::open(engine.dht.pool(), crate::big::tag(db, &args[1]), root, None);
                match read_tree(&tree, cmd, args).await {
                    Err(TreeError::Stale) => continue,
                    Err(e) => return Reply::from(e),
                    Ok(r) => return r,
                }
            }
            Some(Stored::Packed(p)) => return read_packed(Some(p), cmd, args),
            None => return read_packed(None, cmd, args),
        }
    }
    Reply::from(TreeError::Stale)
}

/// A list index argument as a position in a list of `len`, if inside it.
fn position(arg: &[u8], len: u64) -> Result<Option<u64>, Reply> {
    let index = parse_i64(arg).ok_or_else(|| Reply::err(NOT_INTEGER))?;
    let len = len as i64;
    let i = if index < 0 { len + index } else { index };
    Ok((0..len).contains(&i).then_some(i as u64))
}

async fn read_tree(tree: &Tree<'_>, cmd: ListCmd, args: &[Bytes]) -> Result<Reply, TreeError> {
    Ok(match cmd {
        ListCmd::LLen => Reply::Int(tree.len() as i64),
        ListCmd::LIndex => match position(&args[2], tree.len()) {
            Ok(Some(i)) => tree.get(i).await?.map_or(Reply::Null, Reply::Bulk),
            Ok(None) => Reply::Null,
            Err(r) => r,
        },
        ListCmd::LRange => {
            let (Some(start), Some(stop)) = (parse_i64(&args[2]), parse_i64(&args[3])) else {
                return Ok(Reply::err(NOT_INTEGER));
            };
            match range(start, stop, tree.len() as usize) {
                Some((first, last)) => Reply::Array(
                    tree.range(first as u64, last as u64)
                        .await?
                        .into_iter()
                        .map(Reply::Bulk)
                        .collect(),
                ),
                None => Reply::Array(Vec::new()),
            }
        }
        ListCmd::LPos => lpos(tree.range(0, u64::MAX).await?, args),
        _ => Reply::err("ERR internal: a write reached the list read path"),
    })
}

fn read_packed(p: Option<Packed>, cmd: ListCmd, args: &[Bytes]) -> Reply {
    match cmd {
        ListCmd::LLen => Reply::Int(p.map_or(0, |p| p.count as i64)),
        ListCmd::LIndex => {
            let len = p.as_ref().map_or(0, |p| u64::from(p.count));
            let Some(i) = tri!(position(&args[2], len)) else {
                return Reply::Null;
            };
            match p.and_then(|p| p.elements().nth(i as usize)) {
                Some(item) => Reply::Bulk(tri!(item)),
                None => Reply::from(Corrupt),
            }
        }
        ListCmd::LRange => {
            let (Some(start), Some(stop)) = (parse_i64(&args[2]), parse_i64(&args[3])) else {
                return Reply::err(NOT_INTEGER);
            };
            let Some(p) = p else {
                return Reply::Array(Vec::new());
            };
            let Some((first, last)) = range(start, stop, p.count as usize) else {
                return Reply::Array(Vec::new());
            };
            let mut out = Vec::with_capacity(last - first + 1);
            for item in p.elements().skip(first).take(last - first + 1) {
                out.push(Reply::Bulk(tri!(item)));
            }
            Reply::Array(out)
        }
        ListCmd::LPos => {
            let items = match &p {
                Some(p) => tri!(p.collect(1)),
                None => Vec::new(),
            };
            lpos(items, args)
        }
        _ => Reply::err("ERR internal: a write reached the list read path"),
    }
}

/// `LPOS key element [RANK rank] [COUNT num-matches] [MAXLEN len]`.
fn lpos(items: Vec<Bytes>, args: &[Bytes]) -> Reply {
    let (mut rank, mut count, mut maxlen) = (1i64, None, 0usize);
    let mut i = 3;
    while i < args.len() {
        let Some(v) = args.get(i + 1) else {
            return Reply::err(SYNTAX);
        };
        let Some(n) = parse_i64(v) else {
            return Reply::err(NOT_INTEGER);
        };
        let opt = &args[i];
        if opt.eq_ignore_ascii_case(b"RANK") {
            if n == 0 {
                return Reply::err(
                    "ERR RANK can't be zero: use 1 to start from the first match, 2 from the second ... or use negative to start from the end of the list",
                );
            }
            if n == i64::MIN {
                return Reply::err("ERR value is out of range");
            }
            rank = n;
        } else if opt.eq_ignore_ascii_case(b"COUNT") {
            if n < 0 {
                return Reply::err("ERR COUNT can't be negative");
            }
            count = Some(n as usize);
        } else if opt.eq_ignore_ascii_case(b"MAXLEN") {
            if n < 0 {
                return Reply::err("ERR MAXLEN can't be negative");
            }
            maxlen = n as usize;
        } else {
            return Reply::err(SYNTAX);
        }
        i += 2;
    }
    let len = items.len();
    let order: Box<dyn Iterator<Item = usize>> = if rank > 0 {
        Box::new(0..len)
    } else {
        Box::new((0..len).rev())
    };
    let scan = if maxlen == 0 { len } else { maxlen };
    let want = match count {
        Some(0) => usize::MAX,
        Some(c) => c,
        None => 1,
    };
    let mut skip = rank.unsigned_abs() as usize - 1;
    let mut found = Vec::new();
    for idx in order.take(scan) {
        if items[idx] == args[2] {
            if skip > 0 {
                skip -= 1;
                continue;
            }
            found.push(idx as i64);
            if found.len() >= want {
                break;
            }
        }
    }
    match count {
        Some(_) => Reply::Array(found.into_iter().map(Reply::Int).collect()),
        None => found.first().map_or(Reply::Null, |&i| Reply::Int(i)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_follow_redis() {
        assert_eq!(range(0, -1, 3), Some((0, 2)));
        assert_eq!(range(-2, 10, 3), Some((1, 2)));
        assert_eq!(range(5, 10, 3), None);
        assert_eq!(range(2, 1, 3), None);
        assert_eq!(range(-10, -5, 3), None);
        assert_eq!(range(0, 0, 0), None);
    }
}
