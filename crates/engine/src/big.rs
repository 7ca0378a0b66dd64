//! Collections that may be stored either way: packed while small, a chunk tree
//! ([`crate::tree`]) once the packed value passes [`TREE_AT`] bytes. [`edit`] reads the
//! key, applies the caller's change to whichever form it finds (a closure per form),
//! converts a packed value that outgrew the limit, and commits only if the key still
//! holds what it read (under the key's lock nothing else of this agent writes it;
//! eviction or expiry may), else starts over. [`load`] gives readers the stored form.
//! Hashes and sets use it (their trees are ordered by `xxh3(field) ‖ field`).

use bytes::Bytes;
use dmc_dht::{Change, ValueKind};
use dmc_resp::Reply;
use dmc_umo::chunk::TreeRoot;
use futures::future::BoxFuture;

use crate::packed::{BIG, Corrupt, Packed};
use crate::tree::{KeyOf, Tree, TreeError};
use crate::{Engine, error_reply};

/// A packed collection past this many bytes is stored as a chunk tree instead.
pub const TREE_AT: usize = 4096;
/// Times a change starts over because the key changed under it.
const ATTEMPTS: usize = 8;
/// Times a read starts over because a chunk it reached was replaced meanwhile.
pub const READ_ATTEMPTS: usize = 8;

impl From<TreeError> for Reply {
    fn from(e: TreeError) -> Reply {
        match e {
            TreeError::Stale => {
                Reply::err("TRYAGAIN the collection changed while it was read, try again")
            }
            TreeError::Pool(p) => error_reply(p.into()),
        }
    }
}

/// How one collection type is stored.
pub struct Layout {
    pub kind: ValueKind,
    /// The key ordering the tree (`None`: by position).
    pub key_of: Option<KeyOf>,
    /// A packed value's records, in the tree's order.
    pub records_of: fn(&Packed) -> Result<Vec<Bytes>, Corrupt>,
}

/// The hash tag chunks of `key` carry.
pub fn tag(db: u8, key: &[u8]) -> u32 {
    dmc_dht::hash::key_hash(db, key) as u32
}

/// A collection as stored.
pub enum Stored {
    Packed(Packed),
    Tree(TreeRoot),
}

/// The collection `key` as stored (`None`: absent); WRONGTYPE for another type.
pub async fn load(
    engine: &Engine,
    db: u8,
    key: &[u8],
    kind: ValueKind,
) -> Result<Option<Stored>, Reply> {
    match engine.read_stored(db, key).await.map_err(error_reply)? {
        Some((k, _)) if k != kind => Err(error_reply(dmc_dht::DhtError::WrongType)),
        Some((_, v)) => match TreeRoot::parse(&v) {
            Some(root) => Ok(Some(Stored::Tree(root))),
            None => Ok(Some(Stored::Packed(Packed::parse(&v)?))),
        },
        None => Ok(None),
    }
}

/// Commits `change` if `key` still holds `old`; false if it changed meanwhile.
pub async fn commit(
    engine: &Engine,
    db: u8,
    key: &[u8],
    kind: ValueKind,
    old: Option<&Bytes>,
    change: Change,
) -> Result<bool, Reply> {
    let mut applied = false;
    engine
        .dht
        .update_kind(db, key, kind, |cur| {
            if cur != old {
                return Ok::<Change, Reply>(Change::Keep);
            }
            applied = true;
            Ok(change.clone())
        })
        .await
        .map_err(error_reply)??;
    Ok(applied)
}

/// A change of a tree: it takes the tree and gives it back with whether it changed it
/// and the command's answer (a boxed `Send` future, so that the connection task that
/// awaits it stays `Send`).
pub type TreeEdit<'p, 'c, T> = BoxFuture<'c, Result<(Tree<'p>, bool, T), Reply>>;
/// A read of a tree.
pub type TreeRead<'p, 'c, T> = BoxFuture<'c, Result<T, TreeError>>;

/// Changes `key` under its lock (taken here): `packed` edits a packed (or absent)
/// value (`None`: absent) and returns the change and the answer; `tree` edits a tree and says
/// whether it changed it.
pub async fn edit<'p, 'c, T>(
    engine: &'p Engine,
    db: u8,
    key: &[u8],
    layout: &Layout,
    packed: impl FnMut(Option<Packed>) -> Result<(Change, T), Reply>,
    tree: impl FnMut(Tree<'p>) -> TreeEdit<'p, 'c, T>,
) -> Result<T, Reply> {
    let _g = engine.lock_key(key).await;
    edit_locked(engine, db, key, layout, packed, tree).await
}

/// [`edit`] for a caller holding the key's lock.
pub async fn edit_locked<'p, 'c, T>(
    engine: &'p Engine,
    db: u8,
    key: &[u8],
    layout: &Layout,
    mut packed: impl FnMut(Option<Packed>) -> Result<(Change, T), Reply>,
    mut tree: impl FnMut(Tree<'p>) -> TreeEdit<'p, 'c, T>,
) -> Result<T, Reply> {
    let pool = engine.dht.pool();
    for _ in 0..ATTEMPTS {
        let cur = engine.dht.get(db, key).await.map_err(error_reply)?;
        let old = match &cur {
            Some(e) if e.kind != layout.kind => {
                return Err(error_reply(dmc_dht::DhtError::WrongType));
            }
            Some(e) => Some(e.value.clone()),
            None => None,
        };
        let committed = match old.as_ref().and_then(|v| TreeRoot::parse(v)) {
            Some(root) => {
                let t = Tree::open(pool, tag(db, key), root, layout.key_of);
                let (t, changed, answer) = tree(t).await?;
                if !changed {
                    return Ok(answer);
                }
                let kind = layout.kind;
                commit_trees(engine, db, key, kind, old.as_ref(), vec![t], true)
                    .await?
                    .then_some(answer)
            }
            None => {
                let p = old.as_ref().map(Packed::parse).transpose()?;
                let (change, answer) = packed(p)?;
                match change {
                    Change::Keep => return Ok(answer),
                    Change::Write(v) if v.len() > TREE_AT => {
                        convert(engine, db, key, layout, old.as_ref(), &v)
                            .await?
                            .then_some(answer)
                    }
                    change => commit(engine, db, key, layout.kind, old.as_ref(), change)
                        .await?
                        .then_some(answer),
                }
            }
        };
        if let Some(answer) = committed {
            engine.wrote_typed(db, key, layout.kind, None);
            return Ok(answer);
        }
    }
    Err(Reply::err(
        "TRYAGAIN too much contention on this key, try again",
    ))
}

/// A change's outcome on a tree: a client error inside (the tree as it was), a
/// failure of the tree outside.
pub type TreeOutcome<O> = Result<Result<(bool, O), Reply>, TreeError>;

/// A change of one collection as data, so that changes of one key can be applied in a
/// batch ([`edit_all`], [`crate::combine`]): on the decoded packed form and on the tree.
pub trait Edit: Send + Sync + Sized + 'static {
    /// The packed form decoded for changes.
    type Value: Send;
    /// A change's answer.
    type Out: Send + 'static;
    fn layout() -> &'static Layout;
    /// The packed value decoded (`None`: the key does not exist).
    fn decode(p: Option<Packed>) -> Result<Option<Self::Value>, Reply>;
    /// The change that stores `v` (`None` or empty: delete the key).
    fn encode(v: Option<Self::Value>) -> Change;
    /// The change on the decoded value: whether it changed it, and the answer. An
    /// error leaves the value as it was.
    fn apply_packed(&self, v: &mut Option<Self::Value>) -> Result<(bool, Self::Out), Reply>;
    /// The change on the tree: a client error inside (the tree as it was), a failure
    /// of the tree outside (which stops the batch: the tree may be half changed).
    fn apply_tree<'a, 'p: 'a>(
        &'a self,
        t: &'a mut Tree<'p>,
    ) -> BoxFuture<'a, TreeOutcome<Self::Out>>;
}

/// Applies `ops` in order to `key` with one commit (the caller holds the key's lock):
/// one answer per change, an error of one change leaving the others be.
pub async fn edit_all<E: Edit>(
    engine: &Engine,
    db: u8,
    key: &[u8],
    ops: &[E],
) -> Result<Vec<Result<E::Out, Reply>>, Reply> {
    edit_locked(
        engine,
        db,
        key,
        E::layout(),
        |cur| {
            let mut value = E::decode(cur)?;
            let mut changed = false;
            let mut answers = Vec::with_capacity(ops.len());
            for op in ops {
                answers.push(op.apply_packed(&mut value).map(|(c, out)| {
                    changed |= c;
                    out
                }));
            }
            let change = if changed {
                E::encode(value)
            } else {
                Change::Keep
            };
            Ok((change, answers))
        },
        |mut t| {
            Box::pin(async move {
                let mut changed = false;
                let mut answers = Vec::with_capacity(ops.len());
                for op in ops {
                    let answer = op.apply_tree(&mut t).await.map_err(Reply::from)?;
                    answers.push(answer.map(|(c, out)| {
                        changed |= c;
                        out
                    }));
                }
                Ok((t, changed, answers))
            })
        },
    )
    .await
}

/// [`edit_all`] of one change.
pub async fn edit_one<E: Edit>(
    engine: &Engine,
    db: u8,
    key: &[u8],
    op: &E,
) -> Result<E::Out, Reply> {
    let mut answers = edit_all(engine, db, key, std::slice::from_ref(op)).await?;
    answers
        .pop()
        .unwrap_or_else(|| Err(Reply::err("ERR internal: a change lost its answer")))
}

/// Stores the packed value `v` (past the limit) as a chunk tree instead.
async fn convert(
    engine: &Engine,
    db: u8,
    key: &[u8],
    layout: &Layout,
    old: Option<&Bytes>,
    v: &Bytes,
) -> Result<bool, Reply> {
    let pool = engine.dht.pool();
    let mut records = (layout.records_of)(&Packed::parse(v)?)?;
    if let Some(key_of) = layout.key_of {
        records.sort_by_cached_key(|r| key_of(r));
    }
    let t = Tree::build(pool, tag(db, key), BIG, records, layout.key_of);
    commit_trees(engine, db, key, layout.kind, old, vec![t], false).await
}

/// Writes `trees` (the value's trees, in order; the first root carries the flags) and
/// commits their roots as `key`'s value if it still holds `old`; when every tree is
/// empty, deletes the key instead. `shares_old`: the old value is a version of these
/// trees (its chunks the new one no longer uses are freed here, the rest are shared);
/// else the old value is freed whole. On no commit, frees what was written. Returns
/// whether it committed.
pub async fn commit_trees(
    engine: &Engine,
    db: u8,
    key: &[u8],
    kind: ValueKind,
    old: Option<&Bytes>,
    trees: Vec<Tree<'_>>,
    shares_old: bool,
) -> Result<bool, Reply> {
    commit_trees_with(engine, db, key, (kind, old), trees, shares_old, &[]).await
}

/// [`commit_trees`] of a value that carries `tail` after its roots (a chunked
/// string's length).
pub async fn commit_trees_with(
    engine: &Engine,
    db: u8,
    key: &[u8],
    (kind, old): (ValueKind, Option<&Bytes>),
    trees: Vec<Tree<'_>>,
    shares_old: bool,
    tail: &[u8],
) -> Result<bool, Reply> {
    let pool = engine.dht.pool();
    if trees.iter().all(Tree::is_empty) {
        // Deleting the key frees the old trees whole.
        return commit(engine, db, key, kind, old, Change::Delete).await;
    }
    let (mut head, mut replaced, mut written) = (Vec::new(), Vec::new(), Vec::new());
    for t in trees {
        match t.write().await {
            Ok(w) => {
                w.root.encode(&mut head);
                replaced.extend(w.replaced);
                written.extend(w.written);
            }
            Err(e) => {
                written.into_iter().for_each(|b| pool.free(b));
                return Err(e.into());
            }
        }
    }
    head.extend_from_slice(tail);
    let change = match shares_old {
        true => Change::WriteSharing(head.into()),
        false => Change::Write(head.into()),
    };
    match commit(engine, db, key, kind, old, change).await {
        Ok(true) => {
            replaced.into_iter().for_each(|b| pool.free(b));
            Ok(true)
        }
        other => {
            written.into_iter().for_each(|b| pool.free(b));
            other
        }
    }
}

/// Replaces `key` (of any type; the caller holds its lock) with a value of `kind`
/// holding `trees` (built by [`Tree::build`], not written yet): the STORE forms of
/// results too large to pack.
pub async fn store_trees(
    engine: &Engine,
    db: u8,
    key: &[u8],
    kind: ValueKind,
    trees: Vec<Tree<'_>>,
) -> Result<(), Reply> {
    store_trees_expiring(engine, db, key, kind, trees, dmc_dht::SetExpiry::Clear).await
}

/// [`store_trees`] with the key's new expiry (RESTORE with a TTL).
pub async fn store_trees_expiring(
    engine: &Engine,
    db: u8,
    key: &[u8],
    kind: ValueKind,
    trees: Vec<Tree<'_>>,
    expiry: dmc_dht::SetExpiry,
) -> Result<(), Reply> {
    let pool = engine.dht.pool();
    let (mut head, mut written) = (Vec::new(), Vec::new());
    for t in trees {
        match t.write().await {
            Ok(w) => {
                w.root.encode(&mut head);
                written.extend(w.written);
            }
            Err(e) => {
                written.into_iter().for_each(|b| pool.free(b));
                return Err(e.into());
            }
        }
    }
    let opts = dmc_dht::SetOptions {
        kind,
        expiry,
        ..Default::default()
    };
    if let Err(e) = engine.dht.set(db, key, &head, opts).await {
        written.into_iter().for_each(|b| pool.free(b));
        return Err(error_reply(e));
    }
    engine.wrote_typed(db, key, kind, None);
    Ok(())
}

/// `xxh3(name) ‖ name`: the key hash and set trees are ordered by, so that a scan's
/// cursor can be a hash (every element present for the whole scan is returned).
pub fn hashed_key(name: &[u8]) -> Bytes {
    let mut k = Vec::with_capacity(8 + name.len());
    k.extend_from_slice(&xxhash_rust::xxh3::xxh3_64(name).to_be_bytes());
    k.extend_from_slice(name);
    Bytes::from(k)
}

/// Runs `read` on the stored collection, starting over (up to [`READ_ATTEMPTS`]) when
/// a chunk it reaches was replaced meanwhile.
pub async fn read<'p, 'c, T>(
    engine: &'p Engine,
    db: u8,
    key: &[u8],
    layout: &Layout,
    mut packed: impl FnMut(Option<Packed>) -> Result<T, Reply>,
    mut tree: impl FnMut(Tree<'p>) -> TreeRead<'p, 'c, T>,
) -> Result<T, Reply> {
    for _ in 0..READ_ATTEMPTS {
        match load(engine, db, key, layout.kind).await? {
            Some(Stored::Tree(root)) => {
                let t = Tree::open(engine.dht.pool(), tag(db, key), root, layout.key_of);
                match tree(t).await {
                    Err(TreeError::Stale) => continue,
                    other => return other.map_err(Reply::from),
                }
            }
            Some(Stored::Packed(p)) => return packed(Some(p)),
            None => return packed(None),
        }
    }
    Err(Reply::from(TreeError::Stale))
}
