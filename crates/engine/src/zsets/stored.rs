//! A sorted set as stored, read and changed the same way in either form: packed
//! ([`ZSetValue`], decoded whole) while small, two chunk trees ([`crate::tree`]) once
//! the packed value passes [`big::TREE_AT`] bytes:
//!
//! ```text
//! by score:  records score_key(score):8 ‖ member        ordered by the whole record
//! by member: records xxh3(member):8 ‖ member ‖ score:f64 LE   ordered by all but the score
//! value:     root(by score, the big flag) ‖ root(by member)   (chunk::MAX_ROOTS = 2)
//! ```
//!
//! `score_key` maps a score to 8 bytes whose byte order is the scores' order, so the
//! by-score tree's position is the rank and a score bound is a seek: ZRANK, ZCOUNT,
//! the ZRANGE forms and pops read O(log n) chunks plus what they return; ZSCORE and
//! the member half of each change seek the by-member tree. A change edits both trees
//! and commits both roots in the key's one value ([`big::commit_trees`]), so readers
//! on other agents see all of it or none.
//!
//! [`Writer`] runs a change under the key's lock and retries it if eviction or expiry
//! changed the key meanwhile; readers [`load`] again when they meet a replaced chunk.

use bytes::Bytes;
use dmc_dht::{Change, ValueKind};
use dmc_resp::Reply;
use dmc_umo::chunk::TreeRoot;

use super::range::{By, RangeQuery};
use super::value::{LexBound, ZSetValue};
use crate::big::{self, hashed_key};
use crate::packed::{BIG, Packed};
use crate::tree::{Tree, TreeError};
use crate::{Engine, error_reply};

const KIND: ValueKind = ValueKind::ZSet;

/// Bytes whose order is the order of the scores (`f64::total_cmp`).
pub fn score_key(score: f64) -> [u8; 8] {
    let bits = score.to_bits();
    let key = if bits >> 63 == 1 {
        !bits
    } else {
        bits | 1 << 63
    };
    key.to_be_bytes()
}

fn score_of_key(key: [u8; 8]) -> f64 {
    let key = u64::from_be_bytes(key);
    f64::from_bits(if key >> 63 == 1 {
        key & !(1 << 63)
    } else {
        !key
    })
}

/// Scores are stored without a negative zero (Redis prints `0` for `-0`).
fn normal(score: f64) -> f64 {
    if score == 0.0 { 0.0 } else { score }
}

fn by_score_record(member: &[u8], score: f64) -> Bytes {
    let mut r = Vec::with_capacity(8 + member.len());
    r.extend_from_slice(&score_key(score));
    r.extend_from_slice(member);
    Bytes::from(r)
}

fn by_member_record(member: &[u8], score: f64) -> Bytes {
    let mut r = Vec::with_capacity(16 + member.len());
    r.extend_from_slice(&xxhash_rust::xxh3::xxh3_64(member).to_be_bytes());
    r.extend_from_slice(member);
    r.extend_from_slice(&score.to_le_bytes());
    Bytes::from(r)
}

fn by_score_key(r: &[u8]) -> Bytes {
    Bytes::copy_from_slice(r)
}

fn by_member_key(r: &[u8]) -> Bytes {
    Bytes::copy_from_slice(&r[..r.len().saturating_sub(8)])
}

/// A by-score record's member and score.
fn split_by_score(r: &Bytes) -> Result<(Bytes, f64), TreeError> {
    let key: [u8; 8] = r
        .get(..8)
        .and_then(|k| k.try_into().ok())
        .ok_or(TreeError::Stale)?;
    Ok((r.slice(8..), score_of_key(key)))
}

/// A by-member record's score.
fn score_in_member_record(r: &[u8]) -> Result<f64, TreeError> {
    let at = r.len().checked_sub(8).filter(|&a| a >= 8);
    let bytes: [u8; 8] = at
        .and_then(|a| r.get(a..))
        .and_then(|s| s.try_into().ok())
        .ok_or(TreeError::Stale)?;
    Ok(f64::from_le_bytes(bytes))
}

/// A sorted set in the form it is stored in (an absent key: an empty packed one).
pub enum ZSet<'p> {
    Packed(ZSetValue),
    Trees {
        by_score: Tree<'p>,
        by_member: Tree<'p>,
    },
}

impl<'p> ZSet<'p> {
    /// The set a stored value holds.
    fn open(engine: &'p Engine, db: u8, key: &[u8], value: &Bytes) -> Result<ZSet<'p>, Reply> {
        match TreeRoot::parse_all(value)[..] {
            [] => Ok(ZSet::Packed(ZSetValue::decode(&Packed::parse(value)?)?)),
            [by_score, by_member] => {
                let (pool, tag) = (engine.dht.pool(), big::tag(db, key));
                Ok(ZSet::Trees {
                    by_score: Tree::open(pool, tag, by_score, Some(by_score_key)),
                    by_member: Tree::open(pool, tag, by_member, Some(by_member_key)),
                })
            }
            _ => Err(crate::packed::Corrupt.into()),
        }
    }

    /// The trees, by score first, as the value holds their roots (none if packed).
    fn into_trees(self) -> Vec<Tree<'p>> {
        match self {
            ZSet::Packed(_) => Vec::new(),
            ZSet::Trees {
                by_score,
                by_member,
            } => vec![by_score, by_member],
        }
    }

    /// Two trees holding `z`'s members (nothing written yet).
    fn trees_of(engine: &'p Engine, db: u8, key: &[u8], z: &ZSetValue) -> ZSet<'p> {
        let (pool, tag) = (engine.dht.pool(), big::tag(db, key));
        let ordered = z.ordered().map(|(m, s)| by_score_record(m, s)).collect();
        let mut by_member: Vec<Bytes> = z.ordered().map(|(m, s)| by_member_record(m, s)).collect();
        by_member.sort_by_cached_key(|r| by_member_key(r));
        ZSet::Trees {
            by_score: Tree::build(pool, tag, BIG, ordered, Some(by_score_key)),
            by_member: Tree::build(pool, tag, 0, by_member, Some(by_member_key)),
        }
    }

    pub fn len(&self) -> u64 {
        match self {
            ZSet::Packed(z) => z.len() as u64,
            ZSet::Trees { by_score, .. } => by_score.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `member`'s score.
    pub async fn score(&self, member: &[u8]) -> Result<Option<f64>, TreeError> {
        match self {
            ZSet::Packed(z) => Ok(z.scores.get(member).copied()),
            ZSet::Trees { by_member, .. } => {
                let key = hashed_key(member);
                match by_member.seek(&key).await? {
                    (_, Some(r)) if by_member_key(&r) == key => {
                        Ok(Some(score_in_member_record(&r)?))
                    }
                    _ => Ok(None),
                }
            }
        }
    }

    /// Sets `member`'s score; true if it is new.
    pub async fn insert(&mut self, member: Bytes, score: f64) -> Result<bool, TreeError> {
        let score = normal(score);
        let old = self.score(&member).await?;
        match self {
            ZSet::Packed(z) => Ok(z.insert(member, score)),
            ZSet::Trees {
                by_score,
                by_member,
            } => {
                if old == Some(score) {
                    return Ok(false);
                }
                if let Some(o) = old {
                    by_score.remove_key(&by_score_record(&member, o)).await?;
                }
                by_score.upsert(by_score_record(&member, score)).await?;
                by_member.upsert(by_member_record(&member, score)).await?;
                Ok(old.is_none())
            }
        }
    }

    /// Removes `member`; true if it was there.
    pub async fn remove(&mut self, member: &[u8]) -> Result<bool, TreeError> {
        match self {
            ZSet::Packed(z) => Ok(z.remove(member)),
            ZSet::Trees {
                by_score,
                by_member,
            } => match by_member.remove_key(&hashed_key(member)).await? {
                Some(r) => {
                    let score = score_in_member_record(&r)?;
                    by_score.remove_key(&by_score_record(member, score)).await?;
                    Ok(true)
                }
                None => Ok(false),
            },
        }
    }

    /// `member`'s position in ascending order.
    pub async fn rank(&self, member: &[u8]) -> Result<Option<u64>, TreeError> {
        let Some(score) = self.score(member).await? else {
            return Ok(None);
        };
        match self {
            ZSet::Packed(z) => Ok(z.ordered().position(|(m, _)| m == member).map(|i| i as u64)),
            ZSet::Trees { by_score, .. } => Ok(Some(
                by_score.seek(&by_score_record(member, score)).await?.0,
            )),
        }
    }

    /// The members at positions `first..=last` (ascending, clamped to the set).
    pub async fn at(&self, first: u64, last: u64) -> Result<Vec<(Bytes, f64)>, TreeError> {
        match self {
            ZSet::Packed(z) => {
                let n = last.saturating_sub(first).saturating_add(1);
                Ok(z.ordered()
                    .skip(first as usize)
                    .take(n.min(z.len() as u64) as usize)
                    .map(|(m, s)| (m.clone(), s))
                    .collect())
            }
            ZSet::Trees { by_score, .. } => {
                let records = by_score.range(first, last).await?;
                records.iter().map(split_by_score).collect()
            }
        }
    }

    /// One ZSCAN page: members with scores and the next cursor (a packed set whole,
    /// cursor 0; trees page through the by-member tree, see [`Tree::scan_page`]).
    pub async fn scan_page(
        &self,
        cursor: u64,
        count: usize,
    ) -> Result<(Vec<(Bytes, f64)>, u64), TreeError> {
        match self {
            ZSet::Packed(_) => Ok((self.all().await?, 0)),
            ZSet::Trees { by_member, .. } => {
                let (records, next) = by_member.scan_page(cursor, count).await?;
                let mut page = Vec::with_capacity(records.len());
                for r in records {
                    let score = score_in_member_record(&r)?;
                    page.push((r.slice(8..r.len() - 8), score));
                }
                Ok((page, next))
            }
        }
    }

    /// Every member, ascending.
    pub async fn all(&self) -> Result<Vec<(Bytes, f64)>, TreeError> {
        self.at(0, u64::MAX).await
    }

    /// How many members come before the first whose by-score record is at least `key`.
    async fn before(&self, key: &[u8]) -> Result<u64, TreeError> {
        match self {
            ZSet::Packed(z) => Ok(z
                .ordered()
                .take_while(|(m, s)| by_score_record(m, *s)[..] < *key)
                .count() as u64),
            ZSet::Trees { by_score, .. } => Ok(by_score.seek(key).await?.0),
        }
    }

    /// How many members score below `bound` (`past`: or at it, for an inclusive
    /// upper or an exclusive lower end).
    async fn before_score(&self, value: f64, past: bool) -> Result<u64, TreeError> {
        let key = u64::from_be_bytes(score_key(normal(value)));
        // The first record of the next score up starts at key + 1 (no score maps to
        // u64::MAX: that is a NaN's).
        let key = if past { key.saturating_add(1) } else { key };
        self.before(&key.to_be_bytes()).await
    }

    /// How many members come before the first not below `member` (`past`: nor equal
    /// to it), comparing members only, in score order, as Redis's lexicographic
    /// commands do (they require one score for all members; otherwise the answer is
    /// the position this walk reaches).
    async fn before_member(&self, member: &[u8], past: bool) -> Result<u64, TreeError> {
        let below = |m: &[u8]| if past { m <= member } else { m < member };
        match self {
            ZSet::Packed(z) => Ok(z.ordered().take_while(|(m, _)| below(m)).count() as u64),
            ZSet::Trees { by_score, .. } => {
                let key_below = |k: &[u8]| k.get(8..).is_some_and(below);
                by_score.partition(&key_below).await
            }
        }
    }

    /// The positions `[start, end)` (ascending) a query's BY part selects, before
    /// LIMIT and REV.
    async fn span(&self, by: &By) -> Result<(u64, u64), TreeError> {
        let n = self.len();
        Ok(match by {
            By::Rank(..) => (0, n),
            By::Score(r) => {
                let lo = self.before_score(r.min.value, r.min.exclusive).await?;
                let hi = self.before_score(r.max.value, !r.max.exclusive).await?;
                (lo, hi.max(lo))
            }
            By::Lex(r) => {
                let lo = match &r.min {
                    LexBound::Min => 0,
                    LexBound::Max => n,
                    LexBound::Inclusive(m) => self.before_member(m, false).await?,
                    LexBound::Exclusive(m) => self.before_member(m, true).await?,
                };
                let hi = match &r.max {
                    LexBound::Min => 0,
                    LexBound::Max => n,
                    LexBound::Inclusive(m) => self.before_member(m, true).await?,
                    LexBound::Exclusive(m) => self.before_member(m, false).await?,
                };
                (lo, hi.max(lo))
            }
        })
    }

    /// How many members a score or lexicographic range holds.
    pub async fn count(&self, by: &By) -> Result<u64, TreeError> {
        let (lo, hi) = self.span(by).await?;
        Ok(hi - lo)
    }

    /// The ascending positions `first..=last` `q` selects and whether the reply
    /// runs backwards; `None`: nothing.
    pub async fn positions(&self, q: &RangeQuery) -> Result<Option<(u64, u64)>, TreeError> {
        let n = self.len();
        if let By::Rank(start, stop) = q.by {
            let Some((a, b)) = crate::lists::range(start, stop, n as usize) else {
                return Ok(None);
            };
            let (a, b) = (a as u64, b as u64);
            return Ok(Some(if q.rev {
                (n - 1 - b, n - 1 - a)
            } else {
                (a, b)
            }));
        }
        let (lo, hi) = self.span(&q.by).await?;
        let (offset, count) = match q.limit {
            Some((offset, _)) if offset < 0 => return Ok(None),
            Some((offset, count)) => (offset as u64, u64::try_from(count).unwrap_or(u64::MAX)),
            None => (0, u64::MAX),
        };
        let size = (hi - lo).saturating_sub(offset).min(count);
        if size == 0 {
            return Ok(None);
        }
        Ok(Some(if q.rev {
            (hi - offset - size, hi - offset - 1)
        } else {
            (lo + offset, lo + offset + size - 1)
        }))
    }

    /// The members `q` selects, in reply order.
    pub async fn select(&self, q: &RangeQuery) -> Result<Vec<(Bytes, f64)>, TreeError> {
        let Some((first, last)) = self.positions(q).await? else {
            return Ok(Vec::new());
        };
        let mut items = self.at(first, last).await?;
        if q.rev {
            items.reverse();
        }
        Ok(items)
    }

    /// Removes the members at positions `first..=last`; returns them.
    pub async fn remove_span(
        &mut self,
        first: u64,
        last: u64,
    ) -> Result<Vec<(Bytes, f64)>, TreeError> {
        let gone = self.at(first, last).await?;
        for (m, _) in &gone {
            self.remove(m).await?;
        }
        Ok(gone)
    }
}

/// `key`'s sorted set for a read (through the local cache; an absent key reads as
/// an empty set), or WRONGTYPE. A read that meets a replaced chunk
/// ([`TreeError::Stale`]) loads again, up to [`big::READ_ATTEMPTS`] times.
pub async fn load<'p>(engine: &'p Engine, db: u8, key: &[u8]) -> Result<ZSet<'p>, Reply> {
    match engine.read_stored(db, key).await.map_err(error_reply)? {
        Some((KIND, v)) => ZSet::open(engine, db, key, &v),
        Some(_) => Err(error_reply(dmc_dht::DhtError::WrongType)),
        None => Ok(ZSet::Packed(ZSetValue::default())),
    }
}

/// Times a change starts over because the key changed under it.
const ATTEMPTS: usize = 8;

/// One change of a sorted set under its key's lock: [`Writer::load`] the set, change
/// it, [`Writer::commit`] it; a commit that finds the key changed (eviction, expiry)
/// returns false, and the caller loads again.
pub struct Writer<'p> {
    engine: &'p Engine,
    db: u8,
    key: Bytes,
    old: Option<Bytes>,
    attempts: usize,
    _lock: Option<crate::KeyGuard<'p>>,
}

impl<'p> Writer<'p> {
    /// Takes `key`'s lock (`locked`: the caller holds it already).
    pub async fn lock(engine: &'p Engine, db: u8, key: &[u8], locked: bool) -> Writer<'p> {
        let lock = match locked {
            true => None,
            false => Some(engine.lock_key(key).await),
        };
        Writer {
            engine,
            db,
            key: Bytes::copy_from_slice(key),
            old: None,
            attempts: 0,
            _lock: lock,
        }
    }

    /// The set as stored now (an absent key: empty), or WRONGTYPE; TRYAGAIN once the
    /// change has started over too often.
    pub async fn load(&mut self) -> Result<ZSet<'p>, Reply> {
        self.attempts += 1;
        if self.attempts > ATTEMPTS {
            return Err(Reply::err(
                "TRYAGAIN too much contention on this key, try again",
            ));
        }
        let (engine, db) = (self.engine, self.db);
        match engine.dht.get(db, &self.key).await.map_err(error_reply)? {
            Some(e) if e.kind != KIND => Err(error_reply(dmc_dht::DhtError::WrongType)),
            Some(e) => {
                let z = ZSet::open(engine, db, &self.key, &e.value);
                self.old = Some(e.value);
                z
            }
            None => {
                self.old = None;
                Ok(ZSet::Packed(ZSetValue::default()))
            }
        }
    }

    /// Commits `z` (loaded by the last [`Writer::load`] and changed) if the key still
    /// holds what that load read; false if it changed meanwhile.
    pub async fn commit(&mut self, z: ZSet<'p>) -> Result<bool, Reply> {
        let (engine, db, key) = (self.engine, self.db, &self.key[..]);
        let old = self.old.as_ref();
        let committed = match z {
            z @ ZSet::Trees { .. } => {
                big::commit_trees(engine, db, key, KIND, old, z.into_trees(), true).await?
            }
            ZSet::Packed(z) if z.is_empty() => {
                big::commit(engine, db, key, KIND, old, Change::Delete).await?
            }
            ZSet::Packed(z) => {
                let v = z.encode();
                if v.len() <= big::TREE_AT {
                    big::commit(engine, db, key, KIND, old, Change::Write(v.into())).await?
                } else {
                    let trees = ZSet::trees_of(engine, db, key, &z).into_trees();
                    big::commit_trees(engine, db, key, KIND, old, trees, false).await?
                }
            }
        };
        if committed {
            engine.wrote_typed(db, key, KIND, None);
        }
        Ok(committed)
    }
}

/// Replaces `key` (of any type; the caller holds its lock) with a sorted set of `z`,
/// or deletes it when `z` is empty: the STORE forms, announcing `event` (or `del`).
pub async fn store(
    engine: &Engine,
    db: u8,
    key: &[u8],
    z: ZSetValue,
    event: &'static str,
) -> Result<(), Reply> {
    let v = z.encode();
    if z.is_empty() || v.len() <= big::TREE_AT {
        let value = (!z.is_empty()).then_some(v);
        return crate::collection::store(engine, db, key, (KIND, event), value).await;
    }
    let trees = ZSet::trees_of(engine, db, key, &z).into_trees();
    big::store_trees(engine, db, key, KIND, trees).await?;
    engine.notify(crate::notify::ZSET, event, db, key);
    Ok(())
}

/// Writes the non-empty `z` as `key`'s value (whatever its type was), expiring as
/// `expiry` says, without announcing it: RESTORE announces its own event.
pub async fn write_quietly(
    engine: &Engine,
    db: u8,
    key: &[u8],
    z: &ZSetValue,
    expiry: dmc_dht::SetExpiry,
) -> Result<(), Reply> {
    let v = z.encode();
    if v.len() <= big::TREE_AT {
        let opts = dmc_dht::SetOptions {
            kind: KIND,
            expiry,
            ..Default::default()
        };
        engine
            .dht
            .set(db, key, &v, opts)
            .await
            .map_err(crate::error_reply)?;
        engine.wrote_typed(db, key, KIND, None);
        return Ok(());
    }
    let trees = ZSet::trees_of(engine, db, key, z).into_trees();
    big::store_trees_expiring(engine, db, key, KIND, trees, expiry).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn score_keys_sort_as_scores_do() {
        let scores = [
            f64::NEG_INFINITY,
            -1e300,
            -2.5,
            -f64::MIN_POSITIVE,
            0.0,
            f64::MIN_POSITIVE,
            1.0,
            1.5,
            1e300,
            f64::INFINITY,
        ];
        for w in scores.windows(2) {
            assert!(score_key(w[0]) < score_key(w[1]), "{} < {}", w[0], w[1]);
        }
        for s in scores {
            assert_eq!(score_of_key(score_key(s)), s);
        }
        assert!(u64::from_be_bytes(score_key(f64::INFINITY)) < u64::MAX);
    }

    #[test]
    fn records_give_back_member_and_score() {
        let r = by_score_record(b"alice", -3.25);
        assert_eq!(split_by_score(&r).unwrap(), (Bytes::from("alice"), -3.25));
        let m = by_member_record(b"alice", -3.25);
        assert_eq!(score_in_member_record(&m).unwrap(), -3.25);
        assert_eq!(by_member_key(&m), hashed_key(b"alice"));
        assert!(score_in_member_record(b"short").is_err());
        assert!(split_by_score(&Bytes::from_static(b"abc")).is_err());
    }
}
