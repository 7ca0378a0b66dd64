//! Model-based tests of strings edited in place: random sequences of SETRANGE, APPEND,
//! SETBIT, BITFIELD, and the reads GET, GETRANGE, GETBIT, STRLEN, BITCOUNT, BITPOS,
//! run through the engine (on the `local` backend and on in-process memory nodes over
//! `shm`) and against a byte-vector model. Offsets reach far past the size at which a
//! string is stored chunked, so strings cross into the chunked form (growing by an
//! edit, created large by one) and back (SET), are copied (COPY) and deleted, and
//! every reply must match the model.

mod support;

use std::collections::HashMap;

use bytes::Bytes;
use dmc_resp::Reply;
use proptest::prelude::*;
use support::{Backend, engine};

const KEYS: [&str; 2] = ["a", "b"];
const NOT_INTEGER: &str = "ERR value is not an integer or out of range";

#[derive(Debug, Clone)]
enum Op {
    Set(usize, usize, u8),
    SetRange(usize, u64, usize, u8),
    Append(usize, usize, u8),
    SetBit(usize, u64, bool),
    GetBit(usize, u64),
    GetRange(usize, i64, i64),
    Strlen(usize),
    Get(usize),
    BitCount(usize, Option<(i64, i64)>),
    BitPos(usize, bool, Option<i64>),
    /// BITFIELD key SET u8 #index value
    FieldSet(usize, u64, u8),
    /// BITFIELD key INCRBY i16 offset by
    FieldIncr(usize, u64, i16),
    /// BITFIELD_RO key GET u16 offset
    FieldGet(usize, u64),
    Incr(usize),
    Del(usize),
    Copy(usize),
}

/// Bytes made from a seed: letters, never an integer.
fn bytes(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| b'a' + ((i as u64 * 7 + u64::from(seed)) % 26) as u8)
        .collect()
}

fn op() -> impl Strategy<Value = Op> {
    let k = 0..KEYS.len();
    prop_oneof![
        1 => (k.clone(), prop_oneof![1usize..200, 16_000usize..40_000], any::<u8>())
            .prop_map(|(k, n, s)| Op::Set(k, n, s)),
        3 => (k.clone(), 0u64..70_000, 1usize..3000, any::<u8>())
            .prop_map(|(k, o, n, s)| Op::SetRange(k, o, n, s)),
        2 => (k.clone(), 1usize..6000, any::<u8>()).prop_map(|(k, n, s)| Op::Append(k, n, s)),
        3 => (k.clone(), 0u64..600_000, any::<bool>()).prop_map(|(k, o, b)| Op::SetBit(k, o, b)),
        2 => (k.clone(), 0u64..700_000).prop_map(|(k, o)| Op::GetBit(k, o)),
        2 => (k.clone(), -80_000i64..80_000, -80_000i64..80_000)
            .prop_map(|(k, a, b)| Op::GetRange(k, a, b)),
        1 => k.clone().prop_map(Op::Strlen),
        1 => k.clone().prop_map(Op::Get),
        1 => (k.clone(), proptest::option::of((-80_000i64..80_000, -80_000i64..80_000)))
            .prop_map(|(k, r)| Op::BitCount(k, r)),
        1 => (k.clone(), any::<bool>(), proptest::option::of(-80_000i64..80_000))
            .prop_map(|(k, b, s)| Op::BitPos(k, b, s)),
        1 => (k.clone(), 0u64..70_000, any::<u8>()).prop_map(|(k, i, v)| Op::FieldSet(k, i, v)),
        1 => (k.clone(), 0u64..560_000, any::<i16>()).prop_map(|(k, o, by)| Op::FieldIncr(k, o, by)),
        1 => (k.clone(), 0u64..600_000).prop_map(|(k, o)| Op::FieldGet(k, o)),
        1 => k.clone().prop_map(Op::Incr),
        1 => k.clone().prop_map(Op::Del),
        1 => k.prop_map(Op::Copy),
    ]
}

fn get_bits(v: &[u8], offset: u64, bits: u64) -> u64 {
    (0..bits).fold(0, |acc, i| {
        let at = offset + i;
        let byte = v.get((at / 8) as usize).copied().unwrap_or(0);
        (acc << 1) | u64::from(byte >> (7 - at % 8) & 1)
    })
}

fn set_bits(v: &mut Vec<u8>, offset: u64, bits: u64, value: u64) {
    let need = ((offset + bits - 1) / 8 + 1) as usize;
    if v.len() < need {
        v.resize(need, 0);
    }
    for i in 0..bits {
        let at = offset + i;
        let bit = (value >> (bits - 1 - i)) & 1;
        let mask = 0x80u8 >> (at % 8);
        let byte = &mut v[(at / 8) as usize];
        *byte = if bit == 1 {
            *byte | mask
        } else {
            *byte & !mask
        };
    }
}

/// Redis's byte range arithmetic (GETRANGE, BITCOUNT, BITPOS): `None` when empty.
fn span(len: usize, start: i64, end: i64) -> Option<(usize, usize)> {
    let len = len as i64;
    let norm = |i: i64| if i < 0 { (len + i).max(0) } else { i };
    let (s, e) = (norm(start), norm(end).min(len - 1));
    (len > 0 && s <= e && s < len).then_some((s as usize, e as usize))
}

fn int(n: i64) -> Reply {
    Reply::Int(n)
}

/// The command for `op` and the reply the model gives, applying it to the model.
fn step(model: &mut HashMap<usize, Vec<u8>>, op: &Op) -> (Vec<String>, Reply) {
    let key = |k: &usize| KEYS[*k].to_string();
    let s = |x: &str| x.to_string();
    match op {
        Op::Set(k, n, seed) => {
            let v = bytes(*n, *seed);
            model.insert(*k, v.clone());
            let text = String::from_utf8(v).expect("letters");
            (vec![s("SET"), key(k), text], Reply::ok())
        }
        Op::SetRange(k, off, n, seed) => {
            let data = bytes(*n, *seed);
            let v = model.entry(*k).or_default();
            let end = *off as usize + data.len();
            if v.len() < end {
                v.resize(end, 0);
            }
            v[*off as usize..end].copy_from_slice(&data);
            let text = String::from_utf8(data).expect("letters");
            let want = int(v.len() as i64);
            (vec![s("SETRANGE"), key(k), off.to_string(), text], want)
        }
        Op::Append(k, n, seed) => {
            let data = bytes(*n, *seed);
            let v = model.entry(*k).or_default();
            v.extend_from_slice(&data);
            let text = String::from_utf8(data).expect("letters");
            (vec![s("APPEND"), key(k), text], int(v.len() as i64))
        }
        Op::SetBit(k, off, on) => {
            let v = model.entry(*k).or_default();
            let old = get_bits(v, *off, 1);
            set_bits(v, *off, 1, u64::from(*on));
            let cmd = vec![
                s("SETBIT"),
                key(k),
                off.to_string(),
                s(if *on { "1" } else { "0" }),
            ];
            (cmd, int(old as i64))
        }
        Op::GetBit(k, off) => {
            let old = model.get(k).map_or(0, |v| get_bits(v, *off, 1));
            (vec![s("GETBIT"), key(k), off.to_string()], int(old as i64))
        }
        Op::GetRange(k, a, b) => {
            let v = model.get(k).cloned().unwrap_or_default();
            let got = span(v.len(), *a, *b).map_or(Vec::new(), |(x, y)| v[x..=y].to_vec());
            let cmd = vec![s("GETRANGE"), key(k), a.to_string(), b.to_string()];
            (cmd, Reply::Bulk(Bytes::from(got)))
        }
        Op::Strlen(k) => {
            let n = model.get(k).map_or(0, Vec::len);
            (vec![s("STRLEN"), key(k)], int(n as i64))
        }
        Op::Get(k) => {
            let want = model
                .get(k)
                .map_or(Reply::Null, |v| Reply::Bulk(Bytes::from(v.clone())));
            (vec![s("GET"), key(k)], want)
        }
        Op::BitCount(k, range) => {
            let v = model.get(k).cloned();
            let mut cmd = vec![s("BITCOUNT"), key(k)];
            let (a, b) = range.unwrap_or((0, -1));
            if range.is_some() {
                cmd.extend([a.to_string(), b.to_string()]);
            }
            let n = match v {
                Some(v) if !(a < 0 && b < 0 && a > b) => span(v.len(), a, b).map_or(0, |(x, y)| {
                    v[x..=y].iter().map(|c| c.count_ones()).sum::<u32>()
                }),
                _ => 0,
            };
            (cmd, int(i64::from(n)))
        }
        Op::BitPos(k, bit, start) => {
            let mut cmd = vec![s("BITPOS"), key(k), s(if *bit { "1" } else { "0" })];
            if let Some(st) = start {
                cmd.push(st.to_string());
            }
            let want = match model.get(k) {
                None => {
                    if *bit {
                        -1
                    } else {
                        0
                    }
                }
                Some(v) => match span(v.len(), start.unwrap_or(0), -1) {
                    None => -1,
                    Some((x, y)) => (x * 8..(y + 1) * 8)
                        .find(|&i| get_bits(v, i as u64, 1) == u64::from(*bit))
                        .map_or(if *bit { -1 } else { ((y + 1) * 8) as i64 }, |i| i as i64),
                },
            };
            (cmd, int(want))
        }
        Op::FieldSet(k, idx, value) => {
            let v = model.entry(*k).or_default();
            let old = get_bits(v, idx * 8, 8);
            set_bits(v, idx * 8, 8, u64::from(*value));
            let cmd = vec![
                s("BITFIELD"),
                key(k),
                s("SET"),
                s("u8"),
                format!("#{idx}"),
                value.to_string(),
            ];
            (cmd, Reply::Array(vec![int(old as i64)]))
        }
        Op::FieldIncr(k, off, by) => {
            let v = model.entry(*k).or_default();
            let old = get_bits(v, *off, 16) as u16 as i16;
            let new = old.wrapping_add(*by);
            set_bits(v, *off, 16, u64::from(new as u16));
            let cmd = vec![
                s("BITFIELD"),
                key(k),
                s("INCRBY"),
                s("i16"),
                off.to_string(),
                by.to_string(),
            ];
            (cmd, Reply::Array(vec![int(i64::from(new))]))
        }
        Op::FieldGet(k, off) => {
            let got = model.get(k).map_or(0, |v| get_bits(v, *off, 16));
            let cmd = vec![
                s("BITFIELD_RO"),
                key(k),
                s("GET"),
                s("u16"),
                off.to_string(),
            ];
            (cmd, Reply::Array(vec![int(got as i64)]))
        }
        Op::Incr(k) => match model.get(k) {
            None => {
                model.insert(*k, b"1".to_vec());
                (vec![s("INCR"), key(k)], int(1))
            }
            Some(v) => match std::str::from_utf8(v)
                .ok()
                .and_then(|t| t.parse::<i64>().ok())
            {
                Some(n) => {
                    model.insert(*k, (n + 1).to_string().into_bytes());
                    (vec![s("INCR"), key(k)], int(n + 1))
                }
                None => (vec![s("INCR"), key(k)], Reply::err(NOT_INTEGER)),
            },
        },
        Op::Del(k) => {
            let n = i64::from(model.remove(k).is_some());
            (vec![s("DEL"), key(k)], int(n))
        }
        Op::Copy(k) => {
            let other = 1 - *k;
            let n = match model.get(k).cloned() {
                Some(v) => {
                    model.insert(other, v);
                    1
                }
                None => 0,
            };
            let cmd = vec![s("COPY"), key(k), KEYS[other].to_string(), s("REPLACE")];
            (cmd, int(n))
        }
    }
}

fn run(backend: Backend, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(async {
        let (_h, engine) = engine(backend).await;
        let mut session = engine.new_session("test:1".into(), "test:2".into(), -1);
        let mut model = HashMap::new();
        for op in &ops {
            let (words, want) = step(&mut model, op);
            let got = support::run(&engine, &mut session, &words).await;
            prop_assert_eq!(got, want, "{:?}", op);
        }
        for (k, name) in KEYS.iter().enumerate() {
            let got = support::run(&engine, &mut session, &["GET", name]).await;
            let want = model
                .get(&k)
                .map_or(Reply::Null, |v| Reply::Bulk(Bytes::from(v.clone())));
            prop_assert_eq!(got, want);
            let kind = support::run(&engine, &mut session, &["TYPE", name]).await;
            let want = if model.contains_key(&k) {
                "string"
            } else {
                "none"
            };
            prop_assert_eq!(kind, Reply::Simple(want));
        }
        Ok(())
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn local_strings_edited_in_place_match_the_model(ops in proptest::collection::vec(op(), 1..60)) {
        run(Backend::Local, ops)?;
    }

    #[test]
    fn shm_strings_edited_in_place_match_the_model(ops in proptest::collection::vec(op(), 1..40)) {
        run(Backend::Shm, ops)?;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_edit_stores_the_string_chunked_and_every_command_still_sees_a_string() {
    let (h, engine) = engine(Backend::Local).await;
    let mut s = engine.new_session("test:1".into(), "test:2".into(), -1);
    let kind = |key: &'static str| {
        let dht = h.dht.clone();
        async move {
            let e = dht.get(0, key.as_bytes()).await.expect("a read");
            e.map(|e| e.kind)
        }
    };
    let run = |words: &'static [&'static str]| {
        let engine = engine.clone();
        let mut s = engine.new_session("test:3".into(), "test:4".into(), -1);
        async move { support::run(&engine, &mut s, words).await }
    };
    assert_eq!(run(&["SETBIT", "k", "8000000", "1"]).await, Reply::Int(0));
    assert_eq!(kind("k").await, Some(dmc_dht::ValueKind::ChunkedString));
    assert_eq!(run(&["STRLEN", "k"]).await, Reply::Int(1_000_001));
    assert_eq!(run(&["TYPE", "k"]).await, Reply::Simple("string"));
    assert_eq!(run(&["OBJECT", "ENCODING", "k"]).await, Reply::bulk("raw"));
    assert_eq!(run(&["BITCOUNT", "k"]).await, Reply::Int(1));
    assert_eq!(run(&["BITPOS", "k", "1"]).await, Reply::Int(8_000_000));
    match run(&["MEMORY", "USAGE", "k"]).await {
        Reply::Int(n) => assert!(n > 1_000_000, "MEMORY USAGE counts the chunks: {n}"),
        other => panic!("{other:?}"),
    }
    // The TTL survives an edit; INCR and PFADD refuse the string as Redis would.
    assert_eq!(run(&["EXPIRE", "k", "1000"]).await, Reply::Int(1));
    assert_eq!(
        run(&["SETRANGE", "k", "10", "hello"]).await,
        Reply::Int(1_000_001)
    );
    assert!(matches!(run(&["TTL", "k"]).await, Reply::Int(n) if n > 990));
    assert_eq!(
        run(&["GETRANGE", "k", "8", "16"]).await,
        Reply::bulk("\0\0hello\0\0")
    );
    assert_eq!(run(&["INCR", "k"]).await, Reply::err(NOT_INTEGER));
    assert!(
        matches!(run(&["PFADD", "k", "x"]).await, Reply::Error(e) if e.starts_with("WRONGTYPE"))
    );
    assert!(
        matches!(run(&["LPUSH", "k", "x"]).await, Reply::Error(e) if e.starts_with("WRONGTYPE"))
    );
    // Moved, copied, dumped and restored, it is the same string.
    let Reply::Bulk(whole) = run(&["GET", "k"]).await else {
        panic!("GET of a chunked string");
    };
    assert_eq!(whole.len(), 1_000_001);
    assert_eq!(run(&["RENAME", "k", "k2"]).await, Reply::ok());
    assert_eq!(run(&["COPY", "k2", "k3"]).await, Reply::Int(1));
    assert_eq!(kind("k3").await, Some(dmc_dht::ValueKind::ChunkedString));
    assert_eq!(run(&["SETBIT", "k3", "0", "1"]).await, Reply::Int(0));
    assert_eq!(
        run(&["GETBIT", "k2", "0"]).await,
        Reply::Int(0),
        "a copy has its own chunks"
    );
    let Reply::Bulk(payload) = run(&["DUMP", "k2"]).await else {
        panic!("DUMP of a chunked string");
    };
    let restore = vec![
        Bytes::from("RESTORE"),
        Bytes::from("k4"),
        Bytes::from("0"),
        payload,
    ];
    assert_eq!(engine.execute(&mut s, restore).await.0, Reply::ok());
    assert_eq!(run(&["GET", "k4"]).await, Reply::Bulk(whole.clone()));
    assert_eq!(run(&["GET", "k2"]).await, Reply::Bulk(whole.clone()));
    // GETSET answers the old value whole; SET stores a plain string again.
    assert_eq!(run(&["GETSET", "k2", "small"]).await, Reply::Bulk(whole));
    assert_eq!(kind("k2").await, Some(dmc_dht::ValueKind::String));
    assert_eq!(run(&["APPEND", "k2", "!"]).await, Reply::Int(6));
    assert_eq!(kind("k2").await, Some(dmc_dht::ValueKind::String));
}
