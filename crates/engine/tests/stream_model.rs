//! Model-based test of streams, entries and consumer groups: random XADD (with exact
//! MAXLEN), XDEL, XTRIM MINID, XLEN, XRANGE, XREVRANGE, XGROUP CREATE, XREADGROUP (new
//! entries and a consumer's history), XACK, XCLAIM and XPENDING run through the engine
//! (on `local` and on `shm`) and against a plain model of Redis's semantics; every reply
//! must match. Entries are large enough that streams cross into the chunked form (their
//! entries in a tree) and back (emptied), so both forms and the change between them are
//! exercised. (Approximate `~` trimming follows Redis's node layout, checked against
//! redis-server by `tests/py/differential_check.py` instead.)

mod support;

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use dmc_resp::Reply;
use proptest::prelude::*;
use support::{Backend, engine};

const GROUPS: [&str; 2] = ["g1", "g2"];
const CONSUMERS: [&str; 2] = ["alice", "bob"];

#[derive(Debug, Clone)]
enum Op {
    /// XADD with an ID `gap` past the last, a value of `size` bytes, and MAXLEN = n.
    Add(u8, u16, Option<u8>),
    /// XDEL of the entry at this index (modulo the length), or of a missing ID.
    Del(u16),
    /// XTRIM MINID = the ID of the entry at this index.
    TrimMinId(u16),
    Len,
    Range(u16, u16, Option<u8>),
    RevRange(u8),
    Create(usize),
    Read(usize, usize, u8),
    History(usize, usize),
    Ack(usize, u16),
    Claim(usize, usize, u16),
    Pending(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (1u8..4, 1u16..400, proptest::option::weighted(0.1, 0u8..40))
            .prop_map(|(g, s, m)| Op::Add(g, s, m)),
        2 => any::<u16>().prop_map(Op::Del),
        1 => any::<u16>().prop_map(Op::TrimMinId),
        1 => Just(Op::Len),
        2 => (any::<u16>(), any::<u16>(), proptest::option::of(1u8..20))
            .prop_map(|(a, b, c)| Op::Range(a, b, c)),
        1 => (1u8..10).prop_map(Op::RevRange),
        1 => (0..GROUPS.len()).prop_map(Op::Create),
        3 => (0..GROUPS.len(), 0..CONSUMERS.len(), 0u8..8).prop_map(|(g, c, n)| Op::Read(g, c, n)),
        1 => (0..GROUPS.len(), 0..CONSUMERS.len()).prop_map(|(g, c)| Op::History(g, c)),
        2 => (0..GROUPS.len(), any::<u16>()).prop_map(|(g, i)| Op::Ack(g, i)),
        1 => (0..GROUPS.len(), 0..CONSUMERS.len(), any::<u16>()).prop_map(|(g, c, i)| Op::Claim(g, c, i)),
        1 => (0..GROUPS.len()).prop_map(Op::Pending),
    ]
}

#[derive(Default)]
struct Group {
    last: u64,
    /// Pending entry → its consumer.
    pel: BTreeMap<u64, usize>,
}

#[derive(Default)]
struct Model {
    exists: bool,
    last: u64,
    entries: BTreeMap<u64, usize>,
    groups: BTreeMap<usize, Group>,
}

fn id(n: u64) -> String {
    format!("{n}-0")
}

fn value(n: u64, size: usize) -> String {
    let unit = format!("{n}:");
    let mut v = unit.repeat(size / unit.len() + 1);
    v.truncate(size);
    v
}

fn ids_of(entries: &[u64]) -> Reply {
    Reply::Array(entries.iter().map(|n| Reply::bulk(id(*n))).collect())
}

/// The IDs of an entry list reply (a deleted entry's too).
fn entry_ids(r: &Reply) -> Option<Vec<String>> {
    let Reply::Array(items) = r else { return None };
    items
        .iter()
        .map(|e| match e {
            Reply::Array(pair) => match pair.first() {
                Some(Reply::Bulk(b)) => Some(String::from_utf8_lossy(b).into_owned()),
                _ => None,
            },
            _ => None,
        })
        .collect()
}

/// The entry IDs of an XREADGROUP reply of one stream (none: a null reply).
fn read_ids(r: &Reply) -> Option<Vec<String>> {
    match r {
        Reply::NullArray | Reply::Null => Some(Vec::new()),
        Reply::Array(streams) => match streams.first() {
            Some(Reply::Array(pair)) => entry_ids(pair.get(1)?),
            _ => None,
        },
        _ => None,
    }
}

fn nth(m: &Model, i: u16) -> Option<u64> {
    let n = m.entries.len();
    (n > 0).then(|| *m.entries.keys().nth(usize::from(i) % n).expect("in range"))
}

/// Runs `op` on the engine and the model; an error text when they disagree.
async fn step(
    engine: &dmc_engine::Engine,
    s: &mut dmc_engine::Session,
    m: &mut Model,
    op: &Op,
) -> Result<(), String> {
    let mut run = async |words: Vec<String>| support::run(engine, s, &words).await;
    let check = |what: &str, got: Reply, want: Reply| {
        if got == want {
            Ok(())
        } else {
            Err(format!("{what}: got {got:?}, want {want:?}"))
        }
    };
    match op {
        Op::Add(gap, size, maxlen) => {
            let n = m.last + u64::from(*gap);
            let mut words = vec!["XADD".into(), "s".into()];
            if let Some(max) = maxlen {
                words.extend(["MAXLEN".into(), "=".into(), max.to_string()]);
            }
            words.extend([id(n), "f".into(), value(n, usize::from(*size))]);
            let got = run(words).await;
            m.exists = true;
            m.last = n;
            m.entries.insert(n, usize::from(*size));
            if let Some(max) = maxlen {
                while m.entries.len() > usize::from(*max) {
                    m.entries.pop_first();
                }
            }
            check("XADD", got, Reply::bulk(id(n)))
        }
        Op::Del(i) => {
            let n = nth(m, *i).unwrap_or(m.last + 1000);
            let got = run(vec!["XDEL".into(), "s".into(), id(n)]).await;
            let want = i64::from(m.entries.remove(&n).is_some());
            check("XDEL", got, Reply::Int(want))
        }
        Op::TrimMinId(i) => {
            let Some(n) = nth(m, *i) else { return Ok(()) };
            let got = run(vec![
                "XTRIM".into(),
                "s".into(),
                "MINID".into(),
                "=".into(),
                id(n),
            ])
            .await;
            let before = m.entries.len();
            m.entries.retain(|k, _| *k >= n);
            check("XTRIM", got, Reply::Int((before - m.entries.len()) as i64))
        }
        Op::Len => {
            let got = run(vec!["XLEN".into(), "s".into()]).await;
            check("XLEN", got, Reply::Int(m.entries.len() as i64))
        }
        Op::Range(a, b, count) => {
            let (lo, hi) = (
                u64::from(*a.min(b)) % (m.last + 2),
                u64::from(*a.max(b)) % (m.last + 2),
            );
            let (lo, hi) = (lo.min(hi), lo.max(hi));
            let mut words = vec!["XRANGE".into(), "s".into(), id(lo), id(hi)];
            if let Some(c) = count {
                words.extend(["COUNT".into(), c.to_string()]);
            }
            let got = run(words).await;
            let take = count.map_or(usize::MAX, usize::from);
            let want: Vec<u64> = m
                .entries
                .range(lo..=hi)
                .map(|(k, _)| *k)
                .take(take)
                .collect();
            let got = entry_ids(&got).ok_or_else(|| format!("XRANGE: {got:?}"))?;
            check("XRANGE", ids_of_strings(got), ids_of(&want))
        }
        Op::RevRange(count) => {
            let got = run(vec![
                "XREVRANGE".into(),
                "s".into(),
                "+".into(),
                "-".into(),
                "COUNT".into(),
                count.to_string(),
            ])
            .await;
            let want: Vec<u64> = m
                .entries
                .keys()
                .rev()
                .take(usize::from(*count))
                .copied()
                .collect();
            let got = entry_ids(&got).ok_or_else(|| format!("XREVRANGE: {got:?}"))?;
            check("XREVRANGE", ids_of_strings(got), ids_of(&want))
        }
        Op::Create(g) => {
            let got = run(vec![
                "XGROUP".into(),
                "CREATE".into(),
                "s".into(),
                GROUPS[*g].into(),
                "0".into(),
                "MKSTREAM".into(),
            ])
            .await;
            m.exists = true;
            let want = if m.groups.contains_key(g) {
                Reply::err("BUSYGROUP Consumer Group name already exists")
            } else {
                m.groups.insert(*g, Group::default());
                Reply::ok()
            };
            check("XGROUP CREATE", got, want)
        }
        Op::Read(g, c, count) => {
            let mut words = vec![
                "XREADGROUP".into(),
                "GROUP".into(),
                GROUPS[*g].into(),
                CONSUMERS[*c].into(),
            ];
            if *count > 0 {
                words.extend(["COUNT".into(), count.to_string()]);
            }
            words.extend(["STREAMS".into(), "s".into(), ">".into()]);
            let got = run(words).await;
            let Some(group) = m.groups.get_mut(g) else {
                return match got {
                    Reply::Error(e) if e.starts_with("NOGROUP") => Ok(()),
                    other => Err(format!("XREADGROUP of no group: {other:?}")),
                };
            };
            let take = if *count == 0 {
                usize::MAX
            } else {
                usize::from(*count)
            };
            let want: Vec<u64> = m
                .entries
                .range(group.last + 1..)
                .map(|(k, _)| *k)
                .take(take)
                .collect();
            if let Some(&top) = want.last() {
                group.last = top;
            }
            for n in &want {
                group.pel.insert(*n, *c);
            }
            let got = read_ids(&got).ok_or_else(|| format!("XREADGROUP: {got:?}"))?;
            check("XREADGROUP >", ids_of_strings(got), ids_of(&want))
        }
        Op::History(g, c) => {
            let words = vec![
                "XREADGROUP".into(),
                "GROUP".into(),
                GROUPS[*g].into(),
                CONSUMERS[*c].into(),
                "STREAMS".into(),
                "s".into(),
                "0".into(),
            ];
            let got = run(words).await;
            let Some(group) = m.groups.get(g) else {
                return match got {
                    Reply::Error(e) if e.starts_with("NOGROUP") => Ok(()),
                    other => Err(format!("XREADGROUP of no group: {other:?}")),
                };
            };
            // Deleted entries show as their ID and a nil.
            let want: Vec<u64> = group
                .pel
                .iter()
                .filter(|(_, o)| **o == *c)
                .map(|(k, _)| *k)
                .collect();
            let got = read_ids(&got).ok_or_else(|| format!("XREADGROUP 0: {got:?}"))?;
            check("XREADGROUP 0", ids_of_strings(got), ids_of(&want))
        }
        Op::Ack(g, i) => {
            let Some(group) = m.groups.get_mut(g) else {
                return Ok(());
            };
            let n = match group.pel.len() {
                0 => 1,
                len => *group
                    .pel
                    .keys()
                    .nth(usize::from(*i) % len)
                    .expect("in range"),
            };
            let got = run(vec!["XACK".into(), "s".into(), GROUPS[*g].into(), id(n)]).await;
            let want = i64::from(group.pel.remove(&n).is_some());
            check("XACK", got, Reply::Int(want))
        }
        Op::Claim(g, c, i) => {
            let Some(group) = m.groups.get_mut(g) else {
                return Ok(());
            };
            let n = match group.pel.len() {
                0 => 1,
                len => *group
                    .pel
                    .keys()
                    .nth(usize::from(*i) % len)
                    .expect("in range"),
            };
            let got = run(vec![
                "XCLAIM".into(),
                "s".into(),
                GROUPS[*g].into(),
                CONSUMERS[*c].into(),
                "0".into(),
                id(n),
                "JUSTID".into(),
            ])
            .await;
            // A pending entry that was deleted leaves the PEL and is not claimed.
            let want = match group.pel.get(&n) {
                Some(_) if m.entries.contains_key(&n) => {
                    group.pel.insert(n, *c);
                    vec![n]
                }
                Some(_) => {
                    group.pel.remove(&n);
                    Vec::new()
                }
                None => Vec::new(),
            };
            check("XCLAIM", got, ids_of(&want))
        }
        Op::Pending(g) => {
            let got = run(vec!["XPENDING".into(), "s".into(), GROUPS[*g].into()]).await;
            let Some(group) = m.groups.get(g) else {
                return match got {
                    Reply::Error(e) if e.starts_with("NOGROUP") => Ok(()),
                    other => Err(format!("XPENDING of no group: {other:?}")),
                };
            };
            let count = match &got {
                Reply::Array(items) => items.first().cloned(),
                _ => None,
            };
            check(
                "XPENDING",
                count.unwrap_or(Reply::Null),
                Reply::Int(group.pel.len() as i64),
            )
        }
    }
}

fn ids_of_strings(ids: Vec<String>) -> Reply {
    Reply::Array(
        ids.into_iter()
            .map(|s| Reply::Bulk(Bytes::from(s)))
            .collect(),
    )
}

fn run_ops(backend: Backend, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(async {
        let (_h, engine) = engine(backend).await;
        let mut s = engine.new_session("t:1".into(), "t:2".into(), -1);
        let mut m = Model::default();
        for op in &ops {
            if let Err(e) = step(&engine, &mut s, &mut m, op).await {
                return Err(TestCaseError::fail(format!("{op:?}: {e}")));
            }
        }
        // Every entry reads back, in order.
        let got = support::run(&engine, &mut s, &["XRANGE", "s", "-", "+"]).await;
        let want: BTreeSet<u64> = m.entries.keys().copied().collect();
        let got = entry_ids(&got).unwrap_or_default();
        let want: Vec<String> = want.into_iter().map(id).collect();
        prop_assert_eq!(got, want);
        Ok(())
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn local_streams_and_groups_match_the_model(ops in proptest::collection::vec(op(), 1..150)) {
        run_ops(Backend::Local, ops)?;
    }

    #[test]
    fn shm_streams_and_groups_match_the_model(ops in proptest::collection::vec(op(), 1..100)) {
        run_ops(Backend::Shm, ops)?;
    }
}
