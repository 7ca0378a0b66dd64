//! A large string's chunked form: once an in-place edit (SETBIT, SETRANGE, APPEND,
//! BITFIELD) leaves a string of [`CHUNKED_AT`] bytes or more, it is stored as a chunk
//! tree ordered by position ([`crate::tree`]) whose records are the string's
//! [`PIECE`]-byte pieces, every one full but the last. The key's object then holds
//! the tree's root and the string's length ([`Form`]) under the kind
//! [`ValueKind::ChunkedString`](dmc_dht::ValueKind), so a reader can never take the
//! root for the string's bytes.
//!
//! An edit reads and rewrites the pieces it touches, not the whole value (a SETBIT on
//! a 100 MB bitmap writes one leaf and the path above it); a read of a byte range reads
//! the pieces under it. Every other reader gets the string assembled
//! ([`assemble`], through [`Engine::read_typed`]). A SET replaces the tree with a plain
//! string (freeing its chunks as any overwrite frees a collection's).

use bytes::Bytes;
use dmc_dht::{DhtError, ValueKind};
use dmc_umo::Pool;
use dmc_umo::chunk::{ROOT_LEN, TreeRoot};

use crate::Engine;
use crate::big::{READ_ATTEMPTS, tag};
use crate::tree::{Tree, TreeError};

/// A string an in-place edit leaves at least this long is stored chunked.
pub const CHUNKED_AT: usize = 16 << 10;
/// Bytes per piece (the tree's records).
pub const PIECE: u64 = 1024;

/// A chunked string's value in its object: the tree's root, then the string's length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Form {
    pub root: TreeRoot,
    pub len: u64,
}

impl Form {
    pub fn parse(value: &[u8]) -> Option<Form> {
        let root = TreeRoot::parse(value)?;
        let len: [u8; 8] = value.get(ROOT_LEN..ROOT_LEN + 8)?.try_into().ok()?;
        Some(Form {
            root,
            len: u64::from_le_bytes(len),
        })
    }

    /// The bytes that follow the root in the object.
    pub fn tail(len: u64) -> [u8; 8] {
        len.to_le_bytes()
    }
}

fn malformed() -> DhtError {
    DhtError::Corrupt("a chunked string's root is malformed".into())
}

/// Opens the tree of the chunked string `value` of `key`.
pub fn open<'p>(
    pool: &'p Pool,
    db: u8,
    key: &[u8],
    value: &[u8],
) -> Result<(Tree<'p>, u64), DhtError> {
    let form = Form::parse(value).ok_or_else(malformed)?;
    Ok((Tree::open(pool, tag(db, key), form.root, None), form.len))
}

/// A new tree holding `bytes` (not written yet).
pub fn build<'p>(pool: &'p Pool, db: u8, key: &[u8], bytes: &[u8]) -> Tree<'p> {
    let pieces = bytes
        .chunks(PIECE as usize)
        .map(Bytes::copy_from_slice)
        .collect();
    Tree::build(pool, tag(db, key), 0, pieces, None)
}

/// Bytes `lo..hi` of the string in `t` (`hi` at most its length).
pub async fn read_range(t: &Tree<'_>, lo: u64, hi: u64) -> Result<Vec<u8>, TreeError> {
    if lo >= hi {
        return Ok(Vec::new());
    }
    let (first, last) = (lo / PIECE, (hi - 1) / PIECE);
    let pieces = t.range(first, last).await?;
    let want = usize::try_from(hi - lo).map_err(|_| TreeError::Stale)?;
    let mut out = Vec::with_capacity(want);
    for (n, p) in pieces.iter().enumerate() {
        let at = (first + n as u64) * PIECE;
        let end = at + p.len() as u64;
        let (a, b) = (lo.max(at), hi.min(end));
        if a > b || (end < hi && p.len() as u64 != PIECE) {
            return Err(TreeError::Stale);
        }
        out.extend_from_slice(&p[(a - at) as usize..(b - at) as usize]);
    }
    if out.len() != want {
        return Err(TreeError::Stale);
    }
    Ok(out)
}

/// Writes `data` at byte `pos` (at most `len`: no gap) of the string in `t` of length
/// `len`, growing it as needed: only the pieces under `pos..pos + data.len()` change.
pub async fn write_at(
    t: &mut Tree<'_>,
    len: &mut u64,
    pos: u64,
    data: &[u8],
) -> Result<(), TreeError> {
    if data.is_empty() {
        return Ok(());
    }
    if pos > *len {
        return Err(TreeError::Stale);
    }
    let end = pos + data.len() as u64;
    let new_len = (*len).max(end);
    for i in pos / PIECE..=(end - 1) / PIECE {
        let (at, piece_end) = (i * PIECE, ((i + 1) * PIECE).min(new_len));
        let stored = i < t.len();
        let covered = pos <= at && end >= piece_end;
        let mut piece = match (stored, covered) {
            (true, false) => t.get(i).await?.ok_or(TreeError::Stale)?.to_vec(),
            _ => Vec::new(),
        };
        piece.resize((piece_end - at) as usize, 0);
        let (a, b) = (pos.max(at), end.min(piece_end));
        piece[(a - at) as usize..(b - at) as usize]
            .copy_from_slice(&data[(a - pos) as usize..(b - pos) as usize]);
        if stored {
            t.replace_at(i, piece.into()).await?;
        } else {
            t.insert_at(i, piece.into()).await?;
        }
    }
    *len = new_len;
    Ok(())
}

/// `key`'s value with a chunked string assembled (read again if it changed while its
/// pieces were read): `value` is what was read of it, chunked.
pub async fn assemble(
    engine: &Engine,
    db: u8,
    key: &[u8],
    mut value: Bytes,
) -> Result<Option<(ValueKind, Bytes)>, DhtError> {
    let pool = engine.dht.pool();
    for _ in 0..READ_ATTEMPTS {
        let (t, len) = open(pool, db, key, &value)?;
        match read_range(&t, 0, len).await {
            Ok(bytes) => return Ok(Some((ValueKind::String, bytes.into()))),
            Err(TreeError::Pool(e)) => return Err(e.into()),
            Err(TreeError::Stale) => {}
        }
        match engine.dht.get(db, key).await? {
            Some(e) if e.kind == ValueKind::ChunkedString => value = e.value,
            Some(e) => return Ok(Some((e.kind, e.value))),
            None => return Ok(None),
        }
    }
    Err(DhtError::Contention(dmc_dht::hash::key_slot(key)))
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn pool() -> std::sync::Arc<Pool> {
        let config = dmc_umo::PoolConfig {
            replicas: 1,
            region_size: 16 << 20,
            segment_size: 1 << 20,
            ..dmc_umo::PoolConfig::default()
        };
        Pool::embedded(64 << 20, config)
            .await
            .expect("an embedded pool")
    }

    #[tokio::test]
    async fn an_edit_of_a_megabyte_rewrites_one_path_of_chunks_not_the_string() {
        let pool = pool().await;
        let mut model: Vec<u8> = (0..1u32 << 20).map(|i| (i % 251) as u8).collect();
        let built = build(&pool, 0, b"k", &model)
            .write()
            .await
            .expect("written");
        let height = built.root.height as usize;
        assert!(built.written.len() > 256, "a megabyte is many chunks");
        let mut t = Tree::open(&pool, tag(0, b"k"), built.root, None);
        let mut len = model.len() as u64;
        // One byte in the middle, and bytes across a piece boundary.
        write_at(&mut t, &mut len, 500_000, &[0xff])
            .await
            .expect("a write");
        write_at(&mut t, &mut len, 3 * PIECE - 2, b"abcd")
            .await
            .expect("a write");
        model[500_000] = 0xff;
        model[3 * PIECE as usize - 2..3 * PIECE as usize + 2].copy_from_slice(b"abcd");
        let edited = t.write().await.expect("written");
        assert!(
            edited.written.len() <= 2 * height + 1,
            "{} chunks written for two small edits of a tree of height {height}",
            edited.written.len()
        );
        let t = Tree::open(&pool, tag(0, b"k"), edited.root, None);
        let back = read_range(&t, 0, len).await.expect("read back");
        assert!(back == model, "the string reads back as edited");
        let mid = read_range(&t, 499_990, 500_010).await.expect("a range");
        assert_eq!(mid, model[499_990..500_010]);
    }

    #[tokio::test]
    async fn appends_and_writes_past_the_end_grow_the_string_with_full_pieces() {
        let pool = pool().await;
        let mut model = vec![7u8; 20_000];
        let mut t = build(&pool, 0, b"k", &model);
        let mut len = model.len() as u64;
        for (pos, data) in [
            (20_000u64, vec![1u8; 3000]),
            (23_000, vec![2; 1]),
            (10, vec![3; 5000]),
        ] {
            write_at(&mut t, &mut len, pos, &data)
                .await
                .expect("a write");
            let end = pos as usize + data.len();
            if model.len() < end {
                model.resize(end, 0);
            }
            model[pos as usize..end].copy_from_slice(&data);
        }
        assert_eq!(len, model.len() as u64);
        assert_eq!(
            t.len(),
            len.div_ceil(PIECE),
            "every piece but the last is full"
        );
        let back = read_range(&t, 0, len).await.expect("read back");
        assert!(back == model);
        let past = len + 1;
        assert!(matches!(
            write_at(&mut t, &mut len, past, b"gap").await,
            Err(TreeError::Stale)
        ));
    }

    #[test]
    fn the_form_round_trips_and_refuses_short_values() {
        let root = TreeRoot {
            flags: 0,
            height: 2,
            root: dmc_umo::object::ChunkRef::unpack(0x0003_0000_0000_1000),
            count: 17,
            generation: 4,
        };
        let mut v = Vec::new();
        root.encode(&mut v);
        assert_eq!(Form::parse(&v), None, "the length is missing");
        v.extend_from_slice(&Form::tail(16_999));
        assert_eq!(Form::parse(&v), Some(Form { root, len: 16_999 }));
        assert_eq!(Form::parse(b"plain string bytes of no tree at all"), None);
    }
}
