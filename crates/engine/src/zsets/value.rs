//! A sorted set decoded from its packed value ([`crate::packed`]: member, score pairs
//! sorted by score then member), the score and lexicographic range arguments, and
//! Redis's ZADD flags. Pure: no I/O.

use std::collections::{BTreeSet, HashMap};

use bytes::Bytes;
use dmc_dht::Change;

use crate::collection::{MAX_LISTPACK_ENTRIES, MAX_LISTPACK_VALUE};
use crate::packed::{Corrupt, Packed, Writer, element_len};

/// A score with a total order (scores are never NaN; -0 is stored as 0).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Score(pub f64);

impl Eq for Score {}

impl PartialOrd for Score {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Score {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

fn normal(score: f64) -> f64 {
    if score == 0.0 { 0.0 } else { score }
}

/// A sorted set decoded for a change or a range query.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ZSetValue {
    /// Past the listpack limits once (OBJECT ENCODING `skiplist` from then on).
    pub big: bool,
    pub scores: HashMap<Bytes, f64>,
    pub sorted: BTreeSet<(Score, Bytes)>,
}

impl ZSetValue {
    pub fn decode(p: &Packed) -> Result<ZSetValue, Corrupt> {
        let mut z = ZSetValue {
            big: p.big,
            ..Default::default()
        };
        for (m, s) in pairs(p)? {
            z.scores.insert(m.clone(), s);
            z.sorted.insert((Score(s), m));
        }
        if z.scores.len() != p.count as usize {
            return Err(Corrupt);
        }
        Ok(z)
    }

    pub fn len(&self) -> usize {
        self.scores.len()
    }

    pub fn is_empty(&self) -> bool {
        self.scores.is_empty()
    }

    /// Sets `member`'s score; true if it is new.
    pub fn insert(&mut self, member: Bytes, score: f64) -> bool {
        let score = normal(score);
        self.big |= member.len() > MAX_LISTPACK_VALUE;
        let new = match self.scores.insert(member.clone(), score) {
            Some(old) => {
                self.sorted.remove(&(Score(old), member.clone()));
                false
            }
            None => true,
        };
        self.sorted.insert((Score(score), member));
        self.big |= self.scores.len() > MAX_LISTPACK_ENTRIES;
        new
    }

    pub fn remove(&mut self, member: &[u8]) -> bool {
        match self.scores.remove(member) {
            Some(s) => {
                self.sorted
                    .remove(&(Score(s), Bytes::copy_from_slice(member)));
                true
            }
            None => false,
        }
    }

    /// Members in order, ascending.
    pub fn ordered(&self) -> impl DoubleEndedIterator<Item = (&Bytes, f64)> + ExactSizeIterator {
        self.sorted.iter().map(|(s, m)| (m, s.0))
    }

    pub fn encode(&self) -> Vec<u8> {
        let size = self
            .sorted
            .iter()
            .map(|(_, m)| element_len(m.len()) + element_len(8))
            .sum();
        let mut w = Writer::new(self.big, size);
        for (s, m) in &self.sorted {
            w.element(m);
            w.element(&s.0.to_le_bytes());
            w.entry();
        }
        w.finish()
    }

    pub fn into_change(self) -> Change {
        if self.is_empty() {
            Change::Delete
        } else {
            Change::Write(self.encode().into())
        }
    }
}

/// The (member, score) pairs of a packed sorted set, in its order.
pub fn pairs(p: &Packed) -> Result<Vec<(Bytes, f64)>, Corrupt> {
    let mut out = Vec::with_capacity((p.count as usize).min(1 << 16));
    let mut it = p.elements();
    while let Some(m) = it.next() {
        let s = it.next().ok_or(Corrupt)??;
        let bytes: [u8; 8] = s[..].try_into().map_err(|_| Corrupt)?;
        let score = f64::from_le_bytes(bytes);
        if score.is_nan() {
            return Err(Corrupt);
        }
        out.push((m?, score));
    }
    if out.len() != p.count as usize {
        return Err(Corrupt);
    }
    Ok(out)
}

/// One end of a score range (`1.5`, `(1.5`, `-inf`, `+inf`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScoreBound {
    pub value: f64,
    pub exclusive: bool,
}

impl ScoreBound {
    pub fn parse(arg: &[u8]) -> Option<ScoreBound> {
        let (exclusive, text) = match arg.split_first() {
            Some((b'(', rest)) => (true, rest),
            _ => (false, arg),
        };
        let value = parse_score(text)?;
        Some(ScoreBound { value, exclusive })
    }
}

/// A score range `min..max` with Redis's exclusive ends.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScoreRange {
    pub min: ScoreBound,
    pub max: ScoreBound,
}

impl ScoreRange {
    pub fn contains(&self, s: f64) -> bool {
        let above = if self.min.exclusive {
            s > self.min.value
        } else {
            s >= self.min.value
        };
        let below = if self.max.exclusive {
            s < self.max.value
        } else {
            s <= self.max.value
        };
        above && below
    }
}

/// One end of a lexicographic range (`[a`, `(a`, `-`, `+`).
#[derive(Debug, Clone, PartialEq)]
pub enum LexBound {
    Min,
    Max,
    Inclusive(Bytes),
    Exclusive(Bytes),
}

impl LexBound {
    pub fn parse(arg: &Bytes) -> Option<LexBound> {
        match arg.first()? {
            b'-' if arg.len() == 1 => Some(LexBound::Min),
            b'+' if arg.len() == 1 => Some(LexBound::Max),
            b'[' => Some(LexBound::Inclusive(arg.slice(1..))),
            b'(' => Some(LexBound::Exclusive(arg.slice(1..))),
            _ => None,
        }
    }
}

/// A lexicographic range `min..max`.
#[derive(Debug, Clone, PartialEq)]
pub struct LexRange {
    pub min: LexBound,
    pub max: LexBound,
}

impl LexRange {
    pub fn contains(&self, m: &[u8]) -> bool {
        let above = match &self.min {
            LexBound::Min => true,
            LexBound::Max => false,
            LexBound::Inclusive(b) => m >= &b[..],
            LexBound::Exclusive(b) => m > &b[..],
        };
        let below = match &self.max {
            LexBound::Min => false,
            LexBound::Max => true,
            LexBound::Inclusive(b) => m <= &b[..],
            LexBound::Exclusive(b) => m < &b[..],
        };
        above && below
    }
}

/// A score argument: a float, `inf`, `+inf` or `-inf`; never NaN.
pub fn parse_score(b: &[u8]) -> Option<f64> {
    let s = std::str::from_utf8(b).ok()?;
    if s.is_empty() || s.contains(char::is_whitespace) {
        return None;
    }
    let v = match s.to_ascii_lowercase().as_str() {
        "inf" | "+inf" | "infinity" | "+infinity" => f64::INFINITY,
        "-inf" | "-infinity" => f64::NEG_INFINITY,
        _ => s.parse::<f64>().ok()?,
    };
    (!v.is_nan()).then_some(v)
}

/// ZADD's flags.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AddFlags {
    pub nx: bool,
    pub xx: bool,
    pub gt: bool,
    pub lt: bool,
    pub ch: bool,
    pub incr: bool,
}

impl AddFlags {
    /// Whether an update of an existing member from `old` to `new` is allowed.
    pub fn allows_update(&self, old: f64, new: f64) -> bool {
        !self.nx && (!self.gt || new > old) && (!self.lt || new < old)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_sort_by_score_then_member_and_round_trip() {
        let mut z = ZSetValue::default();
        assert!(z.insert("b".into(), 1.0));
        assert!(z.insert("a".into(), 1.0));
        assert!(z.insert("c".into(), -0.0));
        assert!(!z.insert("b".into(), 0.5));
        let order: Vec<&[u8]> = z.ordered().map(|(m, _)| &m[..]).collect();
        assert_eq!(order, vec![&b"c"[..], b"b", b"a"]);
        let p = Packed::parse(&Bytes::from(z.encode())).unwrap();
        assert_eq!(ZSetValue::decode(&p).unwrap(), z);
        assert!(z.remove(b"b") && !z.remove(b"b"));
    }

    #[test]
    fn ranges_parse_as_redis_does() {
        let r = ScoreRange {
            min: ScoreBound::parse(b"(1").unwrap(),
            max: ScoreBound::parse(b"+inf").unwrap(),
        };
        assert!(!r.contains(1.0) && r.contains(1.5) && r.contains(f64::INFINITY));
        assert!(ScoreBound::parse(b"nan").is_none() && ScoreBound::parse(b"x").is_none());
        let l = LexRange {
            min: LexBound::parse(&Bytes::from("[b")).unwrap(),
            max: LexBound::parse(&Bytes::from("(d")).unwrap(),
        };
        assert!(l.contains(b"b") && l.contains(b"c") && !l.contains(b"d") && !l.contains(b"a"));
        assert!(LexBound::parse(&Bytes::from("b")).is_none());
    }

    #[test]
    fn zadd_flags_gate_updates() {
        let gt = AddFlags {
            gt: true,
            ..Default::default()
        };
        assert!(gt.allows_update(1.0, 2.0) && !gt.allows_update(2.0, 1.0));
        let nx = AddFlags {
            nx: true,
            ..Default::default()
        };
        assert!(!nx.allows_update(1.0, 2.0));
    }
}
