//! Model-based tests of the collection types: random sequences of hash, list, set and
//! sorted set commands run through the engine (on the `local` backend and on in-process
//! memory nodes over `shm`) and against a plain in-memory model of Redis's semantics;
//! every reply must match. Keys are shared across types, so WRONGTYPE and type changes
//! (DEL, then another type) are exercised, and long pushes and long values cross the
//! listpack limits (the one-way conversion to the big encodings) and the packed size
//! past which a collection is a chunk tree (splits, merges, shrinking; a sorted set's
//! two trees).

#[path = "../../dht/tests/common/mod.rs"]
mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::Backend;
use dmc_dht::{DhtConfig, SystemClock};
use dmc_engine::{Engine, EngineConfig, Session};
use dmc_resp::Reply;
use proptest::prelude::*;

const KEYS: [&str; 3] = ["a", "b", "c"];
const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

#[derive(Debug, Clone, PartialEq)]
enum Value {
    Hash(BTreeMap<Bytes, Bytes>),
    List(VecDeque<Bytes>),
    Set(BTreeSet<Bytes>),
    ZSet(BTreeMap<Bytes, f64>),
}

#[derive(Debug, Clone)]
enum Op {
    HSet(usize, Vec<(u8, usize)>),
    HDel(usize, Vec<u8>),
    HGet(usize, u8),
    HGetAll(usize),
    HIncrBy(usize, u8, i64),
    Push(usize, bool, Vec<u8>),
    Pop(usize, bool, Option<usize>),
    LRange(usize, i64, i64),
    LSet(usize, i64, u8),
    LRem(usize, i64, u8),
    LTrim(usize, i64, i64),
    SAdd(usize, Vec<u8>),
    SRem(usize, Vec<u8>),
    SMembers(usize),
    /// SPOP key count: random members, checked against the model and then removed.
    SPop(usize, usize),
    SInter(usize, usize),
    ZAdd(usize, Vec<(i8, u8)>),
    ZRem(usize, u8),
    ZIncrBy(usize, i8, u8),
    ZRange(usize, i64, i64),
    ZRangeByScore(usize, i8, i8),
    ZRank(usize, u8),
    ZPop(usize, bool, usize),
    ZScore(usize, u8),
    /// ZCOUNT key (lo hi: the lower end exclusive.
    ZCount(usize, i8, i8),
    ZRevRange(usize, i64, i64),
    ZRemRangeByRank(usize, i64, i64),
    Del(usize),
    Type(usize),
}

/// A sorted set member: one of 256, up to ~60 bytes, so that sorted sets pass the
/// packed size and become chunk trees.
fn member(i: u8) -> Bytes {
    Bytes::from(format!("m{i:03}").repeat(1 + usize::from(i % 15)))
}

/// A hash field: one of 128, so that a hash of long values passes the packed size and
/// becomes a chunk tree.
fn field(i: u8) -> Bytes {
    Bytes::from(format!("f{}", i % 128))
}

/// A set member: one of 256, up to ~70 bytes, so that sets become chunk trees.
fn set_member(i: u8) -> Bytes {
    Bytes::from(format!("s{i:03}").repeat(1 + usize::from(i % 17)))
}

/// A list element: one of twelve, 3 to 60 bytes long, so that long pushes make lists
/// past the packed limit (chunk trees).
fn item(i: u8) -> Bytes {
    Bytes::from(format!("i{:02}", i % 12).repeat(1 + usize::from(i % 5) * 5))
}

/// A value of `len` bytes: past 64 bytes a hash turns to its big encoding.
fn value(seed: u8, len: usize) -> Bytes {
    Bytes::from(vec![b'a' + seed % 26; len])
}

fn keys() -> std::ops::Range<usize> {
    0..KEYS.len()
}

fn hash_op() -> impl Strategy<Value = Op> {
    let k = keys();
    prop_oneof![
        3 => (k.clone(), proptest::collection::vec((any::<u8>(), 0usize..120), 1..24)).prop_map(|(k, p)| Op::HSet(k, p)),
        1 => (k.clone(), proptest::collection::vec(any::<u8>(), 1..4)).prop_map(|(k, f)| Op::HDel(k, f)),
        1 => (k.clone(), any::<u8>()).prop_map(|(k, f)| Op::HGet(k, f)),
        1 => k.clone().prop_map(Op::HGetAll),
        1 => (k, any::<u8>(), -5i64..5).prop_map(|(k, f, n)| Op::HIncrBy(k, f, n)),
    ]
}

fn list_op() -> impl Strategy<Value = Op> {
    let k = keys();
    prop_oneof![
        3 => (k.clone(), any::<bool>(), proptest::collection::vec(any::<u8>(), 1..120)).prop_map(|(k, l, v)| Op::Push(k, l, v)),
        2 => (k.clone(), any::<bool>(), proptest::option::of(0usize..40)).prop_map(|(k, l, c)| Op::Pop(k, l, c)),
        1 => (k.clone(), -300i64..300, -300i64..300).prop_map(|(k, a, b)| Op::LRange(k, a, b)),
        1 => (k.clone(), -200i64..200, any::<u8>()).prop_map(|(k, i, v)| Op::LSet(k, i, v)),
        1 => (k.clone(), -3i64..3, any::<u8>()).prop_map(|(k, c, v)| Op::LRem(k, c, v)),
        1 => (k, -200i64..200, -200i64..200).prop_map(|(k, a, b)| Op::LTrim(k, a, b)),
    ]
}

fn set_op() -> impl Strategy<Value = Op> {
    let k = keys();
    prop_oneof![
        3 => (k.clone(), proptest::collection::vec(any::<u8>(), 1..40)).prop_map(|(k, m)| Op::SAdd(k, m)),
        1 => (k.clone(), proptest::collection::vec(any::<u8>(), 1..4)).prop_map(|(k, m)| Op::SRem(k, m)),
        1 => k.clone().prop_map(Op::SMembers),
        1 => (k.clone(), 1usize..30).prop_map(|(k, c)| Op::SPop(k, c)),
        1 => (k.clone(), k).prop_map(|(a, b)| Op::SInter(a, b)),
    ]
}

fn zset_op() -> impl Strategy<Value = Op> {
    let k = keys();
    prop_oneof![
        3 => (k.clone(), proptest::collection::vec((-10i8..10, any::<u8>()), 1..40)).prop_map(|(k, p)| Op::ZAdd(k, p)),
        1 => (k.clone(), any::<u8>()).prop_map(|(k, m)| Op::ZRem(k, m)),
        1 => (k.clone(), -3i8..3, any::<u8>()).prop_map(|(k, n, m)| Op::ZIncrBy(k, n, m)),
        1 => (k.clone(), -6i64..6, -6i64..6).prop_map(|(k, a, b)| Op::ZRange(k, a, b)),
        1 => (k.clone(), -10i8..10, -10i8..10).prop_map(|(k, a, b)| Op::ZRangeByScore(k, a, b)),
        1 => (k.clone(), any::<u8>()).prop_map(|(k, m)| Op::ZRank(k, m)),
        1 => (k.clone(), any::<bool>(), 1usize..4).prop_map(|(k, min, c)| Op::ZPop(k, min, c)),
        1 => (k.clone(), any::<u8>()).prop_map(|(k, m)| Op::ZScore(k, m)),
        1 => (k.clone(), -10i8..10, -10i8..10).prop_map(|(k, a, b)| Op::ZCount(k, a, b)),
        1 => (k.clone(), -300i64..300, -300i64..300).prop_map(|(k, a, b)| Op::ZRevRange(k, a, b)),
        1 => (k, -300i64..300, -300i64..300).prop_map(|(k, a, b)| Op::ZRemRangeByRank(k, a, b)),
    ]
}

/// Any command: the types share the keys (WRONGTYPE, DEL and type changes).
fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => hash_op(),
        5 => list_op(),
        4 => set_op(),
        6 => zset_op(),
        1 => keys().prop_map(Op::Del),
        1 => keys().prop_map(Op::Type),
    ]
}

/// One type's commands with an occasional DEL: long runs that grow a collection
/// past the packed limit into a chunk tree and shrink it again.
fn focused(one: BoxedStrategy<Op>) -> impl Strategy<Value = Op> {
    prop_oneof![20 => one, 1 => keys().prop_map(Op::Del)]
}

fn b(s: impl Into<String>) -> Bytes {
    Bytes::from(s.into())
}

fn bulk(x: &Bytes) -> Reply {
    Reply::Bulk(x.clone())
}

fn score(s: f64) -> Reply {
    Reply::Double(s)
}

/// Redis's list range normalisation.
fn span(start: i64, stop: i64, len: usize) -> Option<(usize, usize)> {
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

fn zsorted(z: &BTreeMap<Bytes, f64>) -> Vec<(Bytes, f64)> {
    let mut v: Vec<(Bytes, f64)> = z.iter().map(|(m, s)| (m.clone(), *s)).collect();
    v.sort_by(|a, b| a.1.total_cmp(&b.1).then_with(|| a.0.cmp(&b.0)));
    v
}

/// The command `op` sends, and what the model answers (and how it changes).
fn step(model: &mut HashMap<Bytes, Value>, op: &Op) -> (Vec<Bytes>, Reply) {
    let key = |k: &usize| b(KEYS[*k]);
    // Takes the key's value of the wanted type out (`None`: absent), or WRONGTYPE.
    macro_rules! take {
        ($k:expr, $variant:ident, $empty:expr) => {
            match model.get(&key($k)) {
                Some(Value::$variant(v)) => v.clone(),
                Some(_) => return (cmd_of(op), Reply::err(WRONGTYPE)),
                None => $empty,
            }
        };
    }
    // Stores the new value back (an empty collection deletes the key).
    macro_rules! put {
        ($k:expr, $variant:ident, $v:expr) => {{
            let v = $v;
            if v.is_empty() {
                model.remove(&key($k));
            } else {
                model.insert(key($k), Value::$variant(v));
            }
        }};
    }
    let reply = match op {
        Op::HSet(k, pairs) => {
            let mut h = take!(k, Hash, BTreeMap::new());
            let mut added = 0;
            for (f, len) in pairs {
                added += h.insert(field(*f), value(*f, *len)).is_none() as i64;
            }
            put!(k, Hash, h);
            Reply::Int(added)
        }
        Op::HDel(k, fields) => {
            let mut h = take!(k, Hash, BTreeMap::new());
            let mut seen = BTreeSet::new();
            let n = fields
                .iter()
                .filter(|f| seen.insert(field(**f)) && h.remove(&field(**f)).is_some())
                .count();
            put!(k, Hash, h);
            Reply::Int(n as i64)
        }
        Op::HGet(k, f) => {
            let h = take!(k, Hash, BTreeMap::new());
            h.get(&field(*f)).map_or(Reply::Null, bulk)
        }
        Op::HGetAll(k) => {
            let h = take!(k, Hash, BTreeMap::new());
            Reply::Map(h.iter().map(|(f, v)| (bulk(f), bulk(v))).collect())
        }
        Op::HIncrBy(k, f, n) => {
            let mut h = take!(k, Hash, BTreeMap::new());
            let cur = h.get(&field(*f)).map(|v| {
                std::str::from_utf8(v)
                    .ok()
                    .and_then(|s| s.parse::<i64>().ok())
            });
            match cur {
                Some(None) => Reply::err("ERR hash value is not an integer"),
                other => {
                    let next = other.flatten().unwrap_or(0) + n;
                    h.insert(field(*f), b(next.to_string()));
                    put!(k, Hash, h);
                    Reply::Int(next)
                }
            }
        }
        Op::Push(k, left, items) => {
            let mut l = take!(k, List, VecDeque::new());
            for i in items {
                if *left {
                    l.push_front(item(*i));
                } else {
                    l.push_back(item(*i));
                }
            }
            let n = l.len() as i64;
            put!(k, List, l);
            Reply::Int(n)
        }
        Op::Pop(k, left, count) => {
            let exists = model.contains_key(&key(k));
            let mut l = take!(k, List, VecDeque::new());
            let mut popped = Vec::new();
            for _ in 0..count.unwrap_or(1) {
                match if *left { l.pop_front() } else { l.pop_back() } {
                    Some(i) => popped.push(bulk(&i)),
                    None => break,
                }
            }
            put!(k, List, l);
            match (count, exists) {
                (Some(_), false) => Reply::NullArray,
                (Some(_), true) => Reply::Array(popped),
                (None, _) => popped.pop().unwrap_or(Reply::Null),
            }
        }
        Op::LRange(k, a, z) => {
            let l = take!(k, List, VecDeque::new());
            match span(*a, *z, l.len()) {
                Some((f, t)) => Reply::Array(l.range(f..=t).map(bulk).collect()),
                None => Reply::Array(Vec::new()),
            }
        }
        Op::LSet(k, i, v) => {
            let exists = model.contains_key(&key(k));
            let mut l = take!(k, List, VecDeque::new());
            let len = l.len() as i64;
            let at = if *i < 0 { len + i } else { *i };
            if !exists {
                Reply::err("ERR no such key")
            } else if !(0..len).contains(&at) {
                Reply::err("ERR index out of range")
            } else {
                l[at as usize] = item(*v);
                put!(k, List, l);
                Reply::ok()
            }
        }
        Op::LRem(k, count, v) => {
            let mut l = take!(k, List, VecDeque::new());
            let target = item(*v);
            let limit = if *count == 0 {
                usize::MAX
            } else {
                count.unsigned_abs() as usize
            };
            let mut removed = 0;
            let mut items: Vec<Bytes> = l.drain(..).collect();
            if *count < 0 {
                items.reverse();
            }
            items.retain(|i| {
                let drop = removed < limit && *i == target;
                removed += drop as usize;
                !drop
            });
            if *count < 0 {
                items.reverse();
            }
            l.extend(items);
            put!(k, List, l);
            Reply::Int(removed as i64)
        }
        Op::LTrim(k, a, z) => {
            let mut l = take!(k, List, VecDeque::new());
            l = match span(*a, *z, l.len()) {
                Some((f, t)) => l.range(f..=t).cloned().collect(),
                None => VecDeque::new(),
            };
            put!(k, List, l);
            Reply::ok()
        }
        Op::SAdd(k, ms) => {
            let mut s = take!(k, Set, BTreeSet::new());
            let n = ms.iter().filter(|m| s.insert(set_member(**m))).count();
            put!(k, Set, s);
            Reply::Int(n as i64)
        }
        Op::SRem(k, ms) => {
            let mut s = take!(k, Set, BTreeSet::new());
            let n = ms.iter().filter(|m| s.remove(&set_member(**m))).count();
            put!(k, Set, s);
            Reply::Int(n as i64)
        }
        Op::SMembers(k) => {
            let s = take!(k, Set, BTreeSet::new());
            Reply::Set(s.iter().map(bulk).collect())
        }
        // Random: `run` checks the reply against the model and applies it.
        Op::SPop(k, _) => {
            let _ = take!(k, Set, BTreeSet::new());
            Reply::Null
        }
        Op::SInter(x, y) => {
            let s1 = take!(x, Set, BTreeSet::new());
            let s2 = take!(y, Set, BTreeSet::new());
            Reply::Set(s1.intersection(&s2).map(bulk).collect())
        }
        Op::ZAdd(k, pairs) => {
            let mut z = take!(k, ZSet, BTreeMap::new());
            let n = pairs
                .iter()
                .filter(|(s, m)| z.insert(member(*m), f64::from(*s)).is_none())
                .count();
            put!(k, ZSet, z);
            Reply::Int(n as i64)
        }
        Op::ZRem(k, m) => {
            let mut z = take!(k, ZSet, BTreeMap::new());
            let n = z.remove(&member(*m)).is_some() as i64;
            put!(k, ZSet, z);
            Reply::Int(n)
        }
        Op::ZIncrBy(k, by, m) => {
            let mut z = take!(k, ZSet, BTreeMap::new());
            let next = z.get(&member(*m)).copied().unwrap_or(0.0) + f64::from(*by);
            z.insert(member(*m), next);
            put!(k, ZSet, z);
            score(next)
        }
        Op::ZRange(k, a, e) => {
            let z = zsorted(&take!(k, ZSet, BTreeMap::new()));
            match span(*a, *e, z.len()) {
                Some((f, t)) => Reply::Array(z[f..=t].iter().map(|(m, _)| bulk(m)).collect()),
                None => Reply::Array(Vec::new()),
            }
        }
        Op::ZRangeByScore(k, lo, hi) => {
            let z = zsorted(&take!(k, ZSet, BTreeMap::new()));
            let (lo, hi) = (f64::from(*lo), f64::from(*hi));
            let mut out = Vec::new();
            for (m, s) in z.iter().filter(|(_, s)| *s >= lo && *s <= hi) {
                out.push(bulk(m));
                out.push(score(*s));
            }
            Reply::Array(out)
        }
        Op::ZRank(k, m) => {
            let z = zsorted(&take!(k, ZSet, BTreeMap::new()));
            z.iter()
                .position(|(x, _)| *x == member(*m))
                .map_or(Reply::Null, |i| Reply::Int(i as i64))
        }
        Op::ZPop(k, min, count) => {
            let mut z = take!(k, ZSet, BTreeMap::new());
            let sorted = zsorted(&z);
            let picked: Vec<(Bytes, f64)> = if *min {
                sorted.into_iter().take(*count).collect()
            } else {
                sorted.into_iter().rev().take(*count).collect()
            };
            let mut out = Vec::new();
            for (m, s) in picked {
                z.remove(&m);
                out.push(bulk(&m));
                out.push(score(s));
            }
            put!(k, ZSet, z);
            Reply::Array(out)
        }
        Op::ZScore(k, m) => {
            let z = take!(k, ZSet, BTreeMap::new());
            z.get(&member(*m)).map_or(Reply::Null, |s| score(*s))
        }
        Op::ZCount(k, lo, hi) => {
            let z = take!(k, ZSet, BTreeMap::new());
            let (lo, hi) = (f64::from(*lo), f64::from(*hi));
            Reply::Int(z.values().filter(|s| **s > lo && **s <= hi).count() as i64)
        }
        Op::ZRevRange(k, a, e) => {
            let mut z = zsorted(&take!(k, ZSet, BTreeMap::new()));
            z.reverse();
            match span(*a, *e, z.len()) {
                Some((f, t)) => Reply::Array(z[f..=t].iter().map(|(m, _)| bulk(m)).collect()),
                None => Reply::Array(Vec::new()),
            }
        }
        Op::ZRemRangeByRank(k, a, e) => {
            let mut z = take!(k, ZSet, BTreeMap::new());
            let sorted = zsorted(&z);
            let n = match span(*a, *e, sorted.len()) {
                Some((f, t)) => {
                    for (m, _) in &sorted[f..=t] {
                        z.remove(m);
                    }
                    t - f + 1
                }
                None => 0,
            };
            put!(k, ZSet, z);
            Reply::Int(n as i64)
        }
        Op::Del(k) => Reply::Int(model.remove(&key(k)).is_some() as i64),
        Op::Type(k) => Reply::Simple(match model.get(&key(k)) {
            None => "none",
            Some(Value::Hash(_)) => "hash",
            Some(Value::List(_)) => "list",
            Some(Value::Set(_)) => "set",
            Some(Value::ZSet(_)) => "zset",
        }),
    };
    (cmd_of(op), reply)
}

/// The command line of `op`.
fn cmd_of(op: &Op) -> Vec<Bytes> {
    let key = |k: &usize| b(KEYS[*k]);
    let mut a: Vec<Bytes> = Vec::new();
    match op {
        Op::HSet(k, pairs) => {
            a.extend([b("HSET"), key(k)]);
            for (f, len) in pairs {
                a.extend([field(*f), value(*f, *len)]);
            }
        }
        Op::HDel(k, fs) => {
            a.extend([b("HDEL"), key(k)]);
            a.extend(fs.iter().map(|f| field(*f)));
        }
        Op::HGet(k, f) => a.extend([b("HGET"), key(k), field(*f)]),
        Op::HGetAll(k) => a.extend([b("HGETALL"), key(k)]),
        Op::HIncrBy(k, f, n) => a.extend([b("HINCRBY"), key(k), field(*f), b(n.to_string())]),
        Op::Push(k, left, items) => {
            a.extend([b(if *left { "LPUSH" } else { "RPUSH" }), key(k)]);
            a.extend(items.iter().map(|i| item(*i)));
        }
        Op::Pop(k, left, count) => {
            a.extend([b(if *left { "LPOP" } else { "RPOP" }), key(k)]);
            a.extend(count.map(|c| b(c.to_string())));
        }
        Op::LRange(k, x, y) => a.extend([b("LRANGE"), key(k), b(x.to_string()), b(y.to_string())]),
        Op::LSet(k, i, v) => a.extend([b("LSET"), key(k), b(i.to_string()), item(*v)]),
        Op::LRem(k, c, v) => a.extend([b("LREM"), key(k), b(c.to_string()), item(*v)]),
        Op::LTrim(k, x, y) => a.extend([b("LTRIM"), key(k), b(x.to_string()), b(y.to_string())]),
        Op::SAdd(k, ms) | Op::SRem(k, ms) => {
            a.extend([
                b(if matches!(op, Op::SAdd(..)) {
                    "SADD"
                } else {
                    "SREM"
                }),
                key(k),
            ]);
            a.extend(ms.iter().map(|m| set_member(*m)));
        }
        Op::SMembers(k) => a.extend([b("SMEMBERS"), key(k)]),
        Op::SPop(k, c) => a.extend([b("SPOP"), key(k), b(c.to_string())]),
        Op::SInter(x, y) => a.extend([b("SINTER"), key(x), key(y)]),
        Op::ZAdd(k, pairs) => {
            a.extend([b("ZADD"), key(k)]);
            for (s, m) in pairs {
                a.extend([b(s.to_string()), member(*m)]);
            }
        }
        Op::ZRem(k, m) => a.extend([b("ZREM"), key(k), member(*m)]),
        Op::ZIncrBy(k, n, m) => a.extend([b("ZINCRBY"), key(k), b(n.to_string()), member(*m)]),
        Op::ZRange(k, x, y) => a.extend([b("ZRANGE"), key(k), b(x.to_string()), b(y.to_string())]),
        Op::ZRangeByScore(k, x, y) => a.extend([
            b("ZRANGEBYSCORE"),
            key(k),
            b(x.to_string()),
            b(y.to_string()),
            b("WITHSCORES"),
        ]),
        Op::ZRank(k, m) => a.extend([b("ZRANK"), key(k), member(*m)]),
        Op::ZPop(k, min, c) => a.extend([
            b(if *min { "ZPOPMIN" } else { "ZPOPMAX" }),
            key(k),
            b(c.to_string()),
        ]),
        Op::ZScore(k, m) => a.extend([b("ZSCORE"), key(k), member(*m)]),
        Op::ZCount(k, x, y) => {
            a.extend([b("ZCOUNT"), key(k), b(format!("({x}")), b(y.to_string())])
        }
        Op::ZRevRange(k, x, y) => {
            a.extend([b("ZREVRANGE"), key(k), b(x.to_string()), b(y.to_string())])
        }
        Op::ZRemRangeByRank(k, x, y) => a.extend([
            b("ZREMRANGEBYRANK"),
            key(k),
            b(x.to_string()),
            b(y.to_string()),
        ]),
        Op::Del(k) => a.extend([b("DEL"), key(k)]),
        Op::Type(k) => a.extend([b("TYPE"), key(k)]),
    }
    a
}

/// Replies whose order Redis leaves open (sets, hashes) in one order.
fn canonical(r: Reply) -> Reply {
    match r {
        Reply::Set(mut items) => {
            items.sort_by_key(|i| format!("{i:?}"));
            Reply::Set(items)
        }
        Reply::Map(mut pairs) => {
            pairs.sort_by_key(|(k, _)| format!("{k:?}"));
            Reply::Map(pairs)
        }
        other => other,
    }
}

fn run(backend: Backend, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(async {
        let h = common::open(
            backend,
            DhtConfig::default(),
            Arc::new(SystemClock),
            Duration::from_millis(20),
        )
        .await;
        let engine: Arc<Engine> = Engine::new(
            h.dht.clone(),
            Arc::new(SystemClock),
            EngineConfig::default(),
        );
        // RESP2: scores come flat (member, score, ...), as the model gives them.
        let mut session: Session = engine.new_session("test:1".into(), "test:2".into(), -1);
        let mut model = HashMap::new();
        for op in &ops {
            let (args, want) = step(&mut model, op);
            let (got, _) = engine.execute(&mut session, args.clone()).await;
            if let (Op::SPop(k, count), Reply::Set(popped)) = (op, &got) {
                let key = b(KEYS[*k]);
                let Some(Value::Set(set)) = model.get_mut(&key) else {
                    prop_assert!(
                        popped.is_empty(),
                        "{:?} popped {:?} from nothing",
                        args,
                        popped
                    );
                    continue;
                };
                prop_assert_eq!(popped.len(), (*count).min(set.len()), "{:?}", args);
                for m in popped {
                    let Reply::Bulk(m) = m else { panic!("{m:?}") };
                    prop_assert!(set.remove(m), "{:?} popped {:?}, not a member", args, m);
                }
                if set.is_empty() {
                    model.remove(&key);
                }
                continue;
            }
            prop_assert_eq!(canonical(got), canonical(want), "{:?}", args);
        }
        // The pool holds what the model holds, read back whole.
        for k in KEYS {
            let (got, _) = engine.execute(&mut session, vec![b("TYPE"), b(k)]).await;
            let want = match model.get(&b(k)) {
                None => "none",
                Some(Value::Hash(_)) => "hash",
                Some(Value::List(_)) => "list",
                Some(Value::Set(_)) => "set",
                Some(Value::ZSet(_)) => "zset",
            };
            prop_assert_eq!(got, Reply::Simple(want));
        }
        Ok(())
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn local_collections_match_the_model(ops in proptest::collection::vec(op(), 1..120)) {
        run(Backend::Local, ops)?;
    }

    #[test]
    fn shm_collections_match_the_model(ops in proptest::collection::vec(op(), 1..80)) {
        run(Backend::Shm, ops)?;
    }

    #[test]
    fn hashes_grown_into_trees_match_the_model(ops in proptest::collection::vec(focused(hash_op().boxed()), 1..150)) {
        run(Backend::Local, ops)?;
    }

    #[test]
    fn lists_grown_into_trees_match_the_model(ops in proptest::collection::vec(focused(list_op().boxed()), 1..150)) {
        run(Backend::Shm, ops)?;
    }

    #[test]
    fn sorted_sets_grown_into_trees_match_the_model(ops in proptest::collection::vec(focused(zset_op().boxed()), 1..150)) {
        run(Backend::Shm, ops)?;
    }

    #[test]
    fn sets_grown_into_trees_match_the_model(ops in proptest::collection::vec(focused(set_op().boxed()), 1..150)) {
        run(Backend::Local, ops)?;
    }
}
