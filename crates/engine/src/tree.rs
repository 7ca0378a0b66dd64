//! A large collection's copy-on-write B+-tree of chunks ([`dmc_umo::chunk`] fixes the
//! chunk format): records (one list element, one set member, ...) in leaves, every
//! inner entry carrying its subtree's record count (so the tree finds the i-th record
//! in O(height) chunk reads) and, in key-ordered trees, its subtree's first key.
//!
//! A [`Tree`] is a working copy: chunks are read as needed; a change copies the path
//! it touches into memory (the chunks it replaces are listed for freeing after the
//! commit), splits chunks past [`CHUNK_TARGET`], drops empty ones and merges small
//! leaves with a neighbour; [`Tree::write`] writes the copied nodes as new chunks
//! (children first) and returns the new root for the key's object, which the caller
//! commits with the single-key commit. Readers of another agent follow the root they
//! read: the chunks of that version stay valid until the grace period after the
//! commit that replaced them, and a chunk freed and reused later fails its owner tag
//! or generation check ([`TreeError::Stale`]: read again from the key).

use bytes::Bytes;
use dmc_umo::chunk::{self, CHUNK_HEADER, CHUNK_TARGET, INNER, LEAF, TreeRoot};
use dmc_umo::object::ChunkRef;
use dmc_umo::{Block, Pool, UmoError};

/// Leaf and inner bodies are split past this many bytes.
const BODY_TARGET: usize = CHUNK_TARGET - CHUNK_HEADER;
/// A leaf under this many bytes is merged with a neighbour when they fit together.
const MERGE_BELOW: usize = BODY_TARGET / 4;

#[derive(Debug, thiserror::Error)]
pub enum TreeError {
    /// A chunk failed its checks: the tree changed under a reader (or is corrupt).
    #[error("a collection chunk changed while it was read")]
    Stale,
    #[error(transparent)]
    Pool(#[from] UmoError),
}

impl From<chunk::BadChunk> for TreeError {
    fn from(_: chunk::BadChunk) -> Self {
        TreeError::Stale
    }
}

/// The key that orders a key-ordered tree's records (`None`: ordered by position).
pub type KeyOf = fn(&[u8]) -> Bytes;

#[derive(Debug, Clone, Copy)]
enum Link {
    Stored(ChunkRef),
    Mem(usize),
}

#[derive(Debug, Clone)]
struct Child {
    count: u64,
    link: Link,
    key: Bytes,
}

#[derive(Debug, Clone)]
enum Node {
    Leaf(Vec<Bytes>),
    Inner(Vec<Child>),
}

/// A record's bytes in a leaf body: varint length ‖ bytes.
fn put_record(out: &mut Vec<u8>, rec: &[u8]) {
    let mut len = rec.len() as u64;
    loop {
        let low = (len & 0x7f) as u8;
        len >>= 7;
        if len == 0 {
            out.push(low);
            break;
        }
        out.push(low | 0x80);
    }
    out.extend_from_slice(rec);
}

fn record_len(rec: &[u8]) -> usize {
    crate::packed::element_len(rec.len())
}

fn records(body: &Bytes, n: u16) -> Result<Vec<Bytes>, TreeError> {
    let mut out = Vec::with_capacity(n as usize);
    let mut at = 0usize;
    for _ in 0..n {
        let mut len: u64 = 0;
        let mut shift = 0;
        loop {
            let b = *body.get(at).ok_or(TreeError::Stale)?;
            at += 1;
            len |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                break;
            }
            shift += 7;
            if shift > 35 {
                return Err(TreeError::Stale);
            }
        }
        let end = at.checked_add(len as usize).filter(|&e| e <= body.len());
        let end = end.ok_or(TreeError::Stale)?;
        out.push(body.slice(at..end));
        at = end;
    }
    if at != body.len() {
        return Err(TreeError::Stale);
    }
    Ok(out)
}

fn leaf_bytes(items: &[Bytes]) -> usize {
    items.iter().map(|r| record_len(r)).sum()
}

fn inner_bytes(children: &[Child]) -> usize {
    children.iter().map(|c| 18 + c.key.len()).sum()
}

/// Where a descent goes.
#[derive(Clone, Copy)]
enum Nav<'k> {
    /// The record at this position (or the end, for an append).
    Index(u64),
    /// The first record whose key is not below this one.
    Key(&'k [u8]),
    /// The first record whose key the predicate says is not below the target (keys
    /// must be partitioned by it: those below first).
    Below(&'k (dyn Fn(&[u8]) -> bool + Sync)),
}

/// A tree being read or changed.
pub struct Tree<'p> {
    pool: &'p Pool,
    tag: u32,
    root: TreeRoot,
    top: Link,
    key_of: Option<KeyOf>,
    nodes: Vec<Node>,
    /// Chunks copied into memory by a change: freed once the change is committed.
    replaced: Vec<Block>,
}

/// A tree written by [`Tree::write`].
pub struct Written {
    /// The new root, for the key's value.
    pub root: TreeRoot,
    /// Chunks the new version no longer uses: free them after the commit.
    pub replaced: Vec<Block>,
    /// Chunks just written: free them if the commit fails.
    pub written: Vec<Block>,
}

impl<'p> Tree<'p> {
    /// The tree `root` names, owned by the key whose hash's low bits are `tag`.
    pub fn open(pool: &'p Pool, tag: u32, root: TreeRoot, key_of: Option<KeyOf>) -> Tree<'p> {
        Tree {
            pool,
            tag,
            root,
            top: Link::Stored(root.root),
            key_of,
            nodes: Vec::new(),
            replaced: Vec::new(),
        }
    }

    /// A new tree holding `records` in order (key-ordered trees: sorted by key).
    pub fn build(
        pool: &'p Pool,
        tag: u32,
        flags: u8,
        records: Vec<Bytes>,
        key_of: Option<KeyOf>,
    ) -> Tree<'p> {
        let mut t = Tree {
            pool,
            tag,
            root: TreeRoot {
                flags,
                height: 1,
                root: ChunkRef::unpack(0),
                count: 0,
                generation: 0,
            },
            top: Link::Mem(0),
            key_of,
            nodes: Vec::new(),
            replaced: Vec::new(),
        };
        // Leaves filled to about three quarters, then inner levels over them.
        let mut level: Vec<Child> = Vec::new();
        let mut leaf: Vec<Bytes> = Vec::new();
        let mut bytes = 0;
        let count = records.len() as u64;
        for r in records {
            if !leaf.is_empty() && bytes + record_len(&r) > BODY_TARGET * 3 / 4 {
                level.push(t.push_leaf(std::mem::take(&mut leaf)));
                bytes = 0;
            }
            bytes += record_len(&r);
            leaf.push(r);
        }
        level.push(t.push_leaf(leaf));
        let mut height = 1;
        while level.len() > 1 {
            let mut up = Vec::new();
            let mut group: Vec<Child> = Vec::new();
            let mut bytes = 0;
            for c in level {
                if !group.is_empty() && bytes + 18 + c.key.len() > BODY_TARGET * 3 / 4 {
                    up.push(t.push_inner(std::mem::take(&mut group)));
                    bytes = 0;
                }
                bytes += 18 + c.key.len();
                group.push(c);
            }
            up.push(t.push_inner(group));
            level = up;
            height += 1;
        }
        t.top = level.pop().map_or(Link::Mem(0), |c| c.link);
        t.root.height = height;
        t.root.count = count;
        t
    }

    fn push_leaf(&mut self, items: Vec<Bytes>) -> Child {
        let key = self.first_key_of_items(&items);
        let count = items.len() as u64;
        self.nodes.push(Node::Leaf(items));
        Child {
            count,
            link: Link::Mem(self.nodes.len() - 1),
            key,
        }
    }

    fn push_inner(&mut self, children: Vec<Child>) -> Child {
        let key = children.first().map(|c| c.key.clone()).unwrap_or_default();
        let count = children.iter().map(|c| c.count).sum();
        self.nodes.push(Node::Inner(children));
        Child {
            count,
            link: Link::Mem(self.nodes.len() - 1),
            key,
        }
    }

    fn first_key_of_items(&self, items: &[Bytes]) -> Bytes {
        match (self.key_of, items.first()) {
            (Some(k), Some(r)) => k(r),
            _ => Bytes::new(),
        }
    }

    /// Every chunk of the stored tree (read-only trees: nodes copied into memory by a
    /// change are not chunks yet): for MEMORY USAGE and tests.
    pub async fn blocks(&self) -> Result<Vec<Block>, TreeError> {
        let mut out = Vec::new();
        let mut todo = vec![(self.top, self.root.height)];
        while let Some((link, level)) = todo.pop() {
            let Link::Stored(r) = link else { continue };
            out.extend(chunk::block_of(r));
            if level > 1
                && let Node::Inner(children) = self.load(r).await?
            {
                todo.extend(children.into_iter().map(|c| (c.link, level - 1)));
            }
        }
        Ok(out)
    }

    pub fn len(&self) -> u64 {
        self.root.count
    }

    /// The key that orders `rec` in this tree (`None`: a position-ordered tree).
    pub fn key_of(&self, rec: &[u8]) -> Option<Bytes> {
        self.key_of.map(|k| k(rec))
    }

    /// One page of a scan of a tree ordered by `hash:8 ‖ ...` keys (hash and set
    /// trees, a sorted set's by-member tree): `count` records (at least one) from the
    /// first whose hash is not below `cursor`, and the cursor of the next page, the
    /// hash of the record after them (0: the scan is done). A record present for the
    /// whole scan is returned at least once however the tree changes between pages
    /// (Redis's SCAN guarantee): a page starts at a hash, never at a position.
    pub async fn scan_page(
        &self,
        cursor: u64,
        count: usize,
    ) -> Result<(Vec<Bytes>, u64), TreeError> {
        let (first, _) = self.seek(&cursor.to_be_bytes()).await?;
        let last = first.saturating_add(count.max(1) as u64 - 1);
        let page = self.range(first, last).await?;
        let next = match self.get(first + page.len() as u64).await? {
            Some(r) => {
                let key = self.key_of(&r).ok_or(TreeError::Stale)?;
                let hash: [u8; 8] = key
                    .get(..8)
                    .and_then(|h| h.try_into().ok())
                    .ok_or(TreeError::Stale)?;
                // A next hash of 0 (one in 2^64) restarts at 1: the rest of hash 0
                // is skipped rather than the scan never ending.
                u64::from_be_bytes(hash).max(1)
            }
            None => 0,
        };
        Ok((page, next))
    }

    pub fn is_empty(&self) -> bool {
        self.root.count == 0
    }

    /// Reads the chunk `r` (of a tree of this generation) as a node.
    async fn load(&self, r: ChunkRef) -> Result<Node, TreeError> {
        let block = chunk::block_of(r).ok_or(TreeError::Stale)?;
        let mut buf = vec![0u8; block.size() as usize];
        self.pool.read(block.addr, &mut buf).await?;
        let c = chunk::parse(&buf, Some(self.tag), self.root.generation)?;
        let (kind, n, body_len) = (c.kind, c.n, c.body.len());
        let buf = Bytes::from(buf);
        let body = buf.slice(CHUNK_HEADER..CHUNK_HEADER + body_len);
        match kind {
            LEAF => Ok(Node::Leaf(records(&body, n)?)),
            _ => {
                let c = chunk::parse(&buf, Some(self.tag), self.root.generation)?;
                Ok(Node::Inner(
                    chunk::inner_entries(&c)?
                        .into_iter()
                        .map(|e| Child {
                            count: e.count,
                            link: Link::Stored(e.child),
                            key: Bytes::copy_from_slice(e.key),
                        })
                        .collect(),
                ))
            }
        }
    }

    /// The node behind `link`, read-only (loaded, or the in-memory copy).
    async fn node(&self, link: Link) -> Result<std::borrow::Cow<'_, Node>, TreeError> {
        match link {
            Link::Mem(i) => self
                .nodes
                .get(i)
                .map(std::borrow::Cow::Borrowed)
                .ok_or(TreeError::Stale),
            Link::Stored(r) => Ok(std::borrow::Cow::Owned(self.load(r).await?)),
        }
    }

    /// The in-memory copy of the node behind `link`, copying it in if stored.
    async fn own(&mut self, link: Link) -> Result<usize, TreeError> {
        match link {
            Link::Mem(i) => Ok(i),
            Link::Stored(r) => {
                let node = self.load(r).await?;
                if let Some(b) = chunk::block_of(r) {
                    self.replaced.push(b);
                }
                self.nodes.push(node);
                Ok(self.nodes.len() - 1)
            }
        }
    }

    /// Which child of `children` a descent takes, and the records before it in this
    /// node; `base` is the records before the node.
    fn pick(&self, children: &[Child], nav: &Nav<'_>, base: u64) -> (usize, u64) {
        match nav {
            Nav::Index(i) => {
                let i = i.saturating_sub(base);
                let mut before: u64 = 0;
                for (pos, c) in children.iter().enumerate() {
                    // An index equal to the total goes to the last child (an append).
                    if i < before.saturating_add(c.count) || pos + 1 == children.len() {
                        return (pos, before);
                    }
                    before = before.saturating_add(c.count);
                }
                (0, 0)
            }
            Nav::Key(_) | Nav::Below(_) => {
                // The last child whose first key is below the target (or equal to it,
                // for a key).
                let mut pos = 0;
                let mut before: u64 = 0;
                for (p, c) in children.iter().enumerate().skip(1) {
                    let go = match nav {
                        Nav::Key(k) => &c.key[..] <= *k,
                        Nav::Below(below) => below(&c.key),
                        Nav::Index(_) => false,
                    };
                    if !go {
                        break;
                    }
                    before = before.saturating_add(children[p - 1].count);
                    pos = p;
                }
                (pos, before)
            }
        }
    }

    /// Where `nav` leads in a leaf's records: the offset.
    fn offset(&self, items: &[Bytes], nav: &Nav<'_>, before: u64) -> usize {
        match nav {
            Nav::Index(i) => i.saturating_sub(before).min(items.len() as u64) as usize,
            Nav::Key(k) => match self.key_of {
                Some(key_of) => items.partition_point(|r| &key_of(r)[..] < *k),
                None => items.len(),
            },
            Nav::Below(below) => match self.key_of {
                Some(key_of) => items.partition_point(|r| below(&key_of(r))),
                None => items.len(),
            },
        }
    }

    /// Read-only descent: the leaf's records, the offset in it, and the rank of its
    /// first record.
    async fn find(&self, nav: &Nav<'_>) -> Result<(Vec<Bytes>, usize, u64), TreeError> {
        let mut link = self.top;
        let mut before = 0;
        for _ in 0..=chunk::MAX_HEIGHT {
            match &*self.node(link).await? {
                Node::Leaf(items) => {
                    let off = self.offset(items, nav, before);
                    return Ok((items.clone(), off, before));
                }
                Node::Inner(children) => {
                    if children.is_empty() {
                        return Err(TreeError::Stale);
                    }
                    let (pos, b) = self.pick(children, nav, before);
                    before += b;
                    link = children[pos].link;
                }
            }
        }
        Err(TreeError::Stale)
    }

    /// The record at position `i`.
    pub async fn get(&self, i: u64) -> Result<Option<Bytes>, TreeError> {
        if i >= self.len() {
            return Ok(None);
        }
        let (items, off, _) = self.find(&Nav::Index(i)).await?;
        Ok(items.get(off).cloned())
    }

    /// The records at positions `first..=last` (clamped to the tree).
    pub async fn range(&self, first: u64, last: u64) -> Result<Vec<Bytes>, TreeError> {
        let last = last.min(self.len().saturating_sub(1));
        let mut out = Vec::new();
        if self.is_empty() || first > last {
            return Ok(out);
        }
        let mut at = first;
        while at <= last {
            let (items, off, _) = self.find(&Nav::Index(at)).await?;
            if off >= items.len() {
                return Err(TreeError::Stale);
            }
            let take = ((last - at + 1) as usize).min(items.len() - off);
            out.extend_from_slice(&items[off..off + take]);
            at += take as u64;
        }
        Ok(out)
    }

    /// In a key-ordered tree: the rank of the first record whose key is not below
    /// `key`, and that record.
    pub async fn seek(&self, key: &[u8]) -> Result<(u64, Option<Bytes>), TreeError> {
        if self.is_empty() {
            return Ok((0, None));
        }
        let (items, off, before) = self.find(&Nav::Key(key)).await?;
        match items.get(off) {
            Some(r) => Ok((before + off as u64, Some(r.clone()))),
            // Past this leaf's end: the next record, if any, starts the next leaf.
            None => {
                let rank = before + off as u64;
                Ok((rank, self.get(rank).await?))
            }
        }
    }

    /// In a key-ordered tree: the rank of the first record whose key `below` says is
    /// not below the target; the keys must be partitioned by `below` (every key it
    /// holds below comes first).
    pub async fn partition(
        &self,
        below: &(dyn Fn(&[u8]) -> bool + Sync),
    ) -> Result<u64, TreeError> {
        if self.is_empty() {
            return Ok(0);
        }
        let (_, off, before) = self.find(&Nav::Below(below)).await?;
        Ok(before + off as u64)
    }

    /// Copies the path to `nav` into memory: the inner nodes with the child taken,
    /// the leaf and the offset in it.
    async fn own_path(
        &mut self,
        nav: &Nav<'_>,
    ) -> Result<(Vec<(usize, usize)>, usize, usize), TreeError> {
        let top = self.own(self.top).await?;
        self.top = Link::Mem(top);
        let mut path = Vec::new();
        let mut at = top;
        let mut before = 0;
        for _ in 0..=chunk::MAX_HEIGHT {
            let pick = match &self.nodes[at] {
                Node::Leaf(items) => {
                    let off = self.offset(items, nav, before);
                    return Ok((path, at, off));
                }
                Node::Inner(children) if children.is_empty() => return Err(TreeError::Stale),
                Node::Inner(children) => {
                    let (pos, b) = self.pick(children, nav, before);
                    (pos, b, children[pos].link)
                }
            };
            let (pos, b, link) = pick;
            before += b;
            let child = self.own(link).await?;
            if let Node::Inner(children) = &mut self.nodes[at] {
                children[pos].link = Link::Mem(child);
            }
            path.push((at, pos));
            at = child;
        }
        Err(TreeError::Stale)
    }

    /// Inserts `rec` at position `i` (0..=len).
    pub async fn insert_at(&mut self, i: u64, rec: Bytes) -> Result<(), TreeError> {
        let (path, leaf, off) = self.own_path(&Nav::Index(i)).await?;
        if let Node::Leaf(items) = &mut self.nodes[leaf] {
            items.insert(off.min(items.len()), rec);
        }
        self.root.count += 1;
        self.fix(path, leaf, 1).await
    }

    /// In a key-ordered tree: inserts `rec`, or replaces the record of the same key.
    /// Returns the record replaced.
    pub async fn upsert(&mut self, rec: Bytes) -> Result<Option<Bytes>, TreeError> {
        let Some(key_of) = self.key_of else {
            return Err(TreeError::Stale);
        };
        let key = key_of(&rec);
        let (path, leaf, off) = self.own_path(&Nav::Key(&key)).await?;
        let mut old = None;
        if let Node::Leaf(items) = &mut self.nodes[leaf] {
            match items.get(off) {
                Some(r) if key_of(r) == key => old = Some(std::mem::replace(&mut items[off], rec)),
                _ => items.insert(off, rec),
            }
        }
        let delta = i64::from(old.is_none());
        self.root.count += delta as u64;
        self.fix(path, leaf, delta).await?;
        Ok(old)
    }

    /// In a key-ordered tree: removes the record of `key`, if any.
    pub async fn remove_key(&mut self, key: &[u8]) -> Result<Option<Bytes>, TreeError> {
        let Some(key_of) = self.key_of else {
            return Err(TreeError::Stale);
        };
        let (rank, found) = self.seek(key).await?;
        match found {
            Some(r) if key_of(&r) == key => self.remove_at(rank).await,
            _ => Ok(None),
        }
    }

    /// Removes the record at position `i`.
    pub async fn remove_at(&mut self, i: u64) -> Result<Option<Bytes>, TreeError> {
        if i >= self.len() {
            return Ok(None);
        }
        let (path, leaf, off) = self.own_path(&Nav::Index(i)).await?;
        let removed = match &mut self.nodes[leaf] {
            Node::Leaf(items) if off < items.len() => items.remove(off),
            _ => return Err(TreeError::Stale),
        };
        self.root.count -= 1;
        self.fix(path, leaf, -1).await?;
        Ok(Some(removed))
    }

    /// Replaces the record at position `i`.
    pub async fn replace_at(&mut self, i: u64, rec: Bytes) -> Result<(), TreeError> {
        let (path, leaf, off) = self.own_path(&Nav::Index(i)).await?;
        match &mut self.nodes[leaf] {
            Node::Leaf(items) if off < items.len() => items[off] = rec,
            _ => return Err(TreeError::Stale),
        }
        self.fix(path, leaf, 0).await
    }

    fn first_key(&self, idx: usize) -> Bytes {
        match &self.nodes[idx] {
            Node::Leaf(items) => self.first_key_of_items(items),
            Node::Inner(children) => children.first().map(|c| c.key.clone()).unwrap_or_default(),
        }
    }

    /// After a change of `delta` records in `leaf`: counts and first keys up the path,
    /// splits of overfull nodes, removal of empty ones, merges of small leaves, and a
    /// root that grows or shrinks.
    async fn fix(
        &mut self,
        mut path: Vec<(usize, usize)>,
        leaf: usize,
        delta: i64,
    ) -> Result<(), TreeError> {
        for &(parent, pos) in &path {
            if let Node::Inner(children) = &mut self.nodes[parent] {
                children[pos].count = children[pos].count.saturating_add_signed(delta);
            }
        }
        if delta < 0
            && let Some(pos) = self.merge_small_leaf(&path, leaf).await?
            && let Some(last) = path.last_mut()
        {
            last.1 = pos;
        }
        let mut child = leaf;
        for &(parent, pos) in path.iter().rev() {
            let key = self.first_key(child);
            let (empty, split) = self.split_or_empty(child);
            if let Node::Inner(children) = &mut self.nodes[parent] {
                if empty {
                    children.remove(pos);
                } else {
                    children[pos].key = key;
                    if let Some(right) = split {
                        let left_count = children[pos].count.saturating_sub(right.count);
                        children[pos].count = left_count;
                        children.insert(pos + 1, right);
                    }
                }
            }
            child = parent;
        }
        // The top: split into a new root, or shrink while it has one child.
        let (empty, split) = self.split_or_empty(child);
        if let Some(right) = split {
            let left = Child {
                count: self.root.count.saturating_sub(right.count),
                link: Link::Mem(child),
                key: self.first_key(child),
            };
            self.nodes.push(Node::Inner(vec![left, right]));
            self.top = Link::Mem(self.nodes.len() - 1);
            self.root.height += 1;
        } else if empty {
            self.nodes[child] = Node::Leaf(Vec::new());
            self.top = Link::Mem(child);
            self.root.height = 1;
        }
        while self.root.height > 1 {
            let Link::Mem(t) = self.top else { break };
            let only = match &self.nodes[t] {
                Node::Inner(children) if children.len() == 1 => children[0].link,
                _ => break,
            };
            self.top = only;
            self.root.height -= 1;
        }
        Ok(())
    }

    /// Whether node `idx` is empty now, or the right half split off it if overfull.
    fn split_or_empty(&mut self, idx: usize) -> (bool, Option<Child>) {
        let right = match &mut self.nodes[idx] {
            Node::Leaf(items) if items.is_empty() => return (true, None),
            Node::Inner(children) if children.is_empty() => return (true, None),
            Node::Leaf(items) if items.len() > 1 && leaf_bytes(items) > BODY_TARGET => {
                let half = leaf_bytes(items) / 2;
                let mut acc = 0;
                let at = items
                    .iter()
                    .position(|r| {
                        acc += record_len(r);
                        acc > half
                    })
                    .unwrap_or(items.len() / 2)
                    .clamp(1, items.len() - 1);
                Node::Leaf(items.split_off(at))
            }
            Node::Inner(children) if children.len() > 2 && inner_bytes(children) > BODY_TARGET => {
                let at = children.len() / 2;
                Node::Inner(children.split_off(at))
            }
            _ => return (false, None),
        };
        let count = match &right {
            Node::Leaf(items) => items.len() as u64,
            Node::Inner(children) => children.iter().map(|c| c.count).sum(),
        };
        self.nodes.push(right);
        let r = self.nodes.len() - 1;
        (
            false,
            Some(Child {
                count,
                link: Link::Mem(r),
                key: self.first_key(r),
            }),
        )
    }

    /// Merges a leaf that shrank below a quarter with its right (else left) sibling
    /// when the two fit in one chunk. Returns the leaf's new position in its parent.
    async fn merge_small_leaf(
        &mut self,
        path: &[(usize, usize)],
        leaf: usize,
    ) -> Result<Option<usize>, TreeError> {
        let Some(&(parent, pos)) = path.last() else {
            return Ok(None);
        };
        let small = match &self.nodes[leaf] {
            Node::Leaf(items) => !items.is_empty() && leaf_bytes(items) < MERGE_BELOW,
            Node::Inner(_) => false,
        };
        let siblings = match &self.nodes[parent] {
            Node::Inner(children) => children.len(),
            Node::Leaf(_) => 0,
        };
        if !small || siblings < 2 {
            return Ok(None);
        }
        let other = if pos + 1 < siblings { pos + 1 } else { pos - 1 };
        let link = match &self.nodes[parent] {
            Node::Inner(children) => children[other].link,
            Node::Leaf(_) => return Ok(None),
        };
        let sibling = match &*self.node(link).await? {
            Node::Leaf(items) => items.clone(),
            Node::Inner(_) => return Ok(None),
        };
        let mine = match &self.nodes[leaf] {
            Node::Leaf(items) => items.clone(),
            Node::Inner(_) => return Ok(None),
        };
        if leaf_bytes(&mine) + leaf_bytes(&sibling) > BODY_TARGET * 3 / 4 {
            return Ok(None);
        }
        if let Link::Stored(r) = link
            && let Some(b) = chunk::block_of(r)
        {
            self.replaced.push(b);
        }
        let merged: Vec<Bytes> = if other > pos {
            mine.into_iter().chain(sibling).collect()
        } else {
            sibling.into_iter().chain(mine).collect()
        };
        let n = merged.len() as u64;
        let key = self.first_key_of_items(&merged);
        self.nodes[leaf] = Node::Leaf(merged);
        let at = pos.min(other);
        if let Node::Inner(children) = &mut self.nodes[parent] {
            children.remove(other);
            children[at] = Child {
                count: n,
                link: Link::Mem(leaf),
                key,
            };
        }
        Ok(Some(at))
    }

    /// Writes the changed nodes as new chunks (children before parents) and returns
    /// the new root. Nothing is visible until the caller commits the root.
    pub async fn write(mut self) -> Result<Written, TreeError> {
        let generation = self.root.generation + 1;
        let mut written: Vec<Block> = Vec::new();
        let mut bodies: Vec<(Block, Vec<u8>)> = Vec::new();
        let result = async {
            let mut stored: Vec<Option<ChunkRef>> = vec![None; self.nodes.len()];
            let top = match self.top {
                Link::Stored(r) => r,
                Link::Mem(t) => {
                    // Post-order over the in-memory nodes, without recursion.
                    let mut stack = vec![(t, false)];
                    while let Some((idx, ready)) = stack.pop() {
                        if !ready {
                            stack.push((idx, true));
                            if let Node::Inner(children) = &self.nodes[idx] {
                                for c in children {
                                    if let Link::Mem(m) = c.link {
                                        stack.push((m, false));
                                    }
                                }
                            }
                            continue;
                        }
                        let (kind, n, body) = match &self.nodes[idx] {
                            Node::Leaf(items) => {
                                let mut body = Vec::with_capacity(leaf_bytes(items));
                                for r in items {
                                    put_record(&mut body, r);
                                }
                                (LEAF, items.len(), body)
                            }
                            Node::Inner(children) => {
                                let mut body = Vec::with_capacity(inner_bytes(children));
                                for c in children {
                                    let r = match c.link {
                                        Link::Stored(r) => r,
                                        Link::Mem(m) => stored[m].ok_or(TreeError::Stale)?,
                                    };
                                    chunk::put_inner(&mut body, c.count, r, &c.key);
                                }
                                (INNER, children.len(), body)
                            }
                        };
                        let n = u16::try_from(n).map_err(|_| TreeError::Stale)?;
                        let bytes = chunk::encode(kind, n, self.tag, generation, &body);
                        let block = self.pool.alloc(bytes.len() as u64, false).await?;
                        written.push(block);
                        stored[idx] = Some(ChunkRef {
                            addr: block.addr,
                            class: block.class,
                        });
                        bodies.push((block, bytes));
                    }
                    stored[t].ok_or(TreeError::Stale)?
                }
            };
            let writes: Vec<(dmc_umo::GlobalAddr, &[u8])> = bodies
                .iter()
                .map(|(b, bytes)| (b.addr, &bytes[..]))
                .collect();
            self.pool.write_all(&writes).await?;
            Ok::<ChunkRef, TreeError>(top)
        }
        .await;
        match result {
            Ok(top) => Ok(Written {
                root: TreeRoot {
                    root: top,
                    generation,
                    ..self.root
                },
                replaced: std::mem::take(&mut self.replaced),
                written,
            }),
            Err(e) => {
                for b in written {
                    self.pool.free(b);
                }
                Err(e)
            }
        }
    }
}
