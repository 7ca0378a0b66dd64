//! Same-key write combining: many clients changing one list, set, hash and sorted set
//! at once get the answers they would have got one at a time (each push its own
//! length, each add its own count), every change lands, each client's changes land in
//! the order it sent them, and the changes were committed in fewer batches than there
//! were changes.

mod support;

use std::sync::atomic::Ordering;

use dmc_resp::Reply;
use support::{Backend, cmd, engine};

const CLIENTS: usize = 40;
const EACH: usize = 25;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_changes_of_one_key_are_combined_and_each_answered() {
    let (_h, engine) = engine(Backend::Local).await;
    let mut tasks = Vec::new();
    for c in 0..CLIENTS {
        let engine = engine.clone();
        tasks.push(tokio::spawn(async move {
            let mut s = engine.new_session(format!("t:{c}"), "t:0".into(), -1);
            let mut lens = Vec::new();
            for i in 0..EACH {
                let item = format!("c{c:02}-{i:03}");
                let (len, _) = engine
                    .execute(&mut s, cmd(&["RPUSH".into(), "list".into(), item.clone()]))
                    .await;
                lens.push(len);
                let (added, _) = engine
                    .execute(&mut s, cmd(&["SADD".into(), "set".into(), item.clone()]))
                    .await;
                assert_eq!(added, Reply::Int(1));
                let (added, _) = engine
                    .execute(
                        &mut s,
                        cmd(&["HSET".into(), "hash".into(), item.clone(), "v".into()]),
                    )
                    .await;
                assert_eq!(added, Reply::Int(1));
                let score = (c * EACH + i).to_string();
                let (added, _) = engine
                    .execute(&mut s, cmd(&["ZADD".into(), "zset".into(), score, item]))
                    .await;
                assert_eq!(added, Reply::Int(1));
            }
            lens
        }));
    }
    let mut lens = Vec::new();
    for t in tasks {
        lens.extend(t.await.expect("a client"));
    }
    // Each push answered the length right after it: every length once.
    let mut lens: Vec<i64> = lens
        .into_iter()
        .map(|r| match r {
            Reply::Int(n) => n,
            other => panic!("{other:?}"),
        })
        .collect();
    lens.sort_unstable();
    let n = (CLIENTS * EACH) as i64;
    assert_eq!(lens, (1..=n).collect::<Vec<_>>());

    let mut s = engine.new_session("t:check".into(), "t:0".into(), -1);
    let (all, _) = engine
        .execute(&mut s, cmd(&["LRANGE", "list", "0", "-1"]))
        .await;
    let Reply::Array(items) = all else {
        panic!("{all:?}")
    };
    assert_eq!(items.len() as i64, n);
    // Each client's pushes are in the order it sent them.
    for c in 0..CLIENTS {
        let mine: Vec<String> = items
            .iter()
            .filter_map(|r| match r {
                Reply::Bulk(b) => Some(String::from_utf8_lossy(b).into_owned()),
                _ => None,
            })
            .filter(|i| i.starts_with(&format!("c{c:02}-")))
            .collect();
        let want: Vec<String> = (0..EACH).map(|i| format!("c{c:02}-{i:03}")).collect();
        assert_eq!(mine, want);
    }
    for (card, key) in [("SCARD", "set"), ("HLEN", "hash"), ("ZCARD", "zset")] {
        let (got, _) = engine.execute(&mut s, cmd(&[card, key])).await;
        assert_eq!(got, Reply::Int(n), "{key}");
    }
    let changes = engine.stats.combined_changes.load(Ordering::Relaxed);
    let batches = engine.stats.combined_batches.load(Ordering::Relaxed);
    assert_eq!(changes as i64, 4 * n);
    assert!(batches < changes, "{changes} changes in {batches} batches");
}

/// XADD, PFADD and SETBIT of one key from many clients at once: every XADD gets its own ID,
/// increasing in each client's order, every entry lands; PFADD answers and the count
/// are what one client sending everything would get; both were committed in fewer
/// batches than there were commands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_xadds_and_pfadds_of_one_key_are_combined() {
    let (_h, engine) = engine(Backend::Local).await;
    let mut tasks = Vec::new();
    for c in 0..CLIENTS {
        let engine = engine.clone();
        tasks.push(tokio::spawn(async move {
            let mut s = engine.new_session(format!("t:{c}"), "t:0".into(), -1);
            let mut ids = Vec::new();
            for i in 0..EACH {
                let item = format!("c{c:02}-{i:03}");
                let (id, _) = engine
                    .execute(
                        &mut s,
                        cmd(&[
                            "XADD".into(),
                            "stream".into(),
                            "*".into(),
                            "c".into(),
                            item.clone(),
                        ]),
                    )
                    .await;
                let Reply::Bulk(id) = id else {
                    panic!("{id:?}")
                };
                ids.push(String::from_utf8_lossy(&id).into_owned());
                let (added, _) = engine
                    .execute(&mut s, cmd(&["PFADD".into(), "hll".into(), item]))
                    .await;
                assert!(matches!(added, Reply::Int(0 | 1)), "{added:?}");
                // Each client sets its own bits: each was clear before.
                let bit = (c * EACH + i).to_string();
                let (old, _) = engine
                    .execute(
                        &mut s,
                        cmd(&["SETBIT".into(), "bits".into(), bit, "1".into()]),
                    )
                    .await;
                assert_eq!(old, Reply::Int(0));
            }
            ids
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        let ids = t.await.expect("a client");
        // A client's IDs increase in the order it sent its XADDs.
        let parsed: Vec<(u64, u64)> = ids
            .iter()
            .map(|id| {
                let (ms, seq) = id.split_once('-').expect("ms-seq");
                (ms.parse().unwrap(), seq.parse().unwrap())
            })
            .collect();
        assert!(parsed.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
        all.extend(parsed);
    }
    let n = CLIENTS * EACH;
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), n, "every XADD got its own ID");

    let mut s = engine.new_session("t:check".into(), "t:0".into(), -1);
    let (len, _) = engine.execute(&mut s, cmd(&["XLEN", "stream"])).await;
    assert_eq!(len, Reply::Int(n as i64));
    let (ones, _) = engine.execute(&mut s, cmd(&["BITCOUNT", "bits"])).await;
    assert_eq!(ones, Reply::Int(n as i64), "every SETBIT landed");
    // The same elements added by one client, one at a time, count the same.
    for c in 0..CLIENTS {
        for i in 0..EACH {
            let item = format!("c{c:02}-{i:03}");
            engine
                .execute(&mut s, cmd(&["PFADD".into(), "alone".into(), item]))
                .await;
        }
    }
    let (together, _) = engine.execute(&mut s, cmd(&["PFCOUNT", "hll"])).await;
    let (alone, _) = engine.execute(&mut s, cmd(&["PFCOUNT", "alone"])).await;
    assert_eq!(together, alone);
    // The same registers (the encoding may differ: when a sparse HLL turns dense
    // depends on the order its elements came in).
    let (same, _) = engine
        .execute(&mut s, cmd(&["PFDEBUG", "GETREG", "hll"]))
        .await;
    let (want, _) = engine
        .execute(&mut s, cmd(&["PFDEBUG", "GETREG", "alone"]))
        .await;
    assert_eq!(same, want);
    let changes = engine.stats.combined_changes.load(Ordering::Relaxed);
    let batches = engine.stats.combined_batches.load(Ordering::Relaxed);
    assert!(batches < changes, "{changes} changes in {batches} batches");
}

/// APPENDs to one log from many clients at once, past the size at which the string is
/// stored chunked: each APPEND answers the length right after its own record, and the
/// record is found there; every record lands; fewer batches than APPENDs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_appends_of_one_string_are_combined_and_each_answered() {
    const RECORD: usize = 700;
    let (_h, engine) = engine(Backend::Local).await;
    let record = |c: usize, i: usize| {
        let mut r = format!("c{c:02}-{i:03}:").into_bytes();
        r.resize(RECORD, b'.');
        String::from_utf8(r).expect("ascii")
    };
    let mut tasks = Vec::new();
    for c in 0..CLIENTS {
        let engine = engine.clone();
        tasks.push(tokio::spawn(async move {
            let mut s = engine.new_session(format!("t:{c}"), "t:0".into(), -1);
            let mut lens = Vec::new();
            for i in 0..EACH {
                let (len, _) = engine
                    .execute(&mut s, cmd(&["APPEND".into(), "log".into(), record(c, i)]))
                    .await;
                let Reply::Int(len) = len else {
                    panic!("{len:?}")
                };
                lens.push((len as usize, record(c, i)));
            }
            lens
        }));
    }
    let mut s = engine.new_session("t:check".into(), "t:0".into(), -1);
    let mut ends = Vec::new();
    for t in tasks {
        let lens = t.await.expect("a client");
        assert!(
            lens.windows(2).all(|w| w[0].0 < w[1].0),
            "a client's appends in order"
        );
        for (end, rec) in lens {
            let range = [
                "GETRANGE".to_string(),
                "log".into(),
                (end - RECORD).to_string(),
                (end - 1).to_string(),
            ];
            let (got, _) = engine.execute(&mut s, cmd(&range)).await;
            assert_eq!(
                got,
                Reply::bulk(rec),
                "the record ends where its APPEND said"
            );
            ends.push(end);
        }
    }
    let n = CLIENTS * EACH;
    ends.sort_unstable();
    assert_eq!(ends, (1..=n).map(|k| k * RECORD).collect::<Vec<_>>());
    let (len, _) = engine.execute(&mut s, cmd(&["STRLEN", "log"])).await;
    assert_eq!(len, Reply::Int((n * RECORD) as i64));
    let changes = engine.stats.combined_changes.load(Ordering::Relaxed);
    let batches = engine.stats.combined_batches.load(Ordering::Relaxed);
    assert!(batches < changes, "{changes} changes in {batches} batches");
}

/// An edit that finds its key free and its string small and plain is written at once,
/// without a batch (as INCR is); one that grows the string past the chunked size, and
/// every later edit of the chunked string, goes through the key's batch.
#[tokio::test]
async fn a_small_string_edit_is_written_without_a_batch() {
    for backend in [Backend::Local, Backend::Shm] {
        let (_h, engine) = engine(backend).await;
        let mut s = engine.new_session("t:0".into(), "t:0".into(), -1);
        let batched = || engine.stats.combined_changes.load(Ordering::Relaxed);
        // Plain SETs first, of every size the edits write: they create the key's
        // partition and claim a segment for each block size, which the inline path
        // never waits for.
        for (key, value) in [("t", "abcd"), ("t", "abcdefgh"), ("s", "abc")] {
            let (ok, _) = engine.execute(&mut s, cmd(&["SET", key, value])).await;
            assert_eq!(ok, Reply::ok());
        }
        let edits = [
            (cmd(&["APPEND", "s", "d"]), Reply::Int(4)),
            (cmd(&["SETRANGE", "s", "6", "xy"]), Reply::Int(8)),
            (cmd(&["SETBIT", "s", "7", "0"]), Reply::Int(1)),
            (
                cmd(&["BITFIELD", "s", "SET", "u8", "#1", "66"]),
                Reply::Array(vec![Reply::Int(98)]),
            ),
        ];
        for (edit, answer) in edits {
            assert_eq!(engine.execute(&mut s, edit).await.0, answer);
        }
        assert_eq!(
            batched(),
            0,
            "{backend:?}: small edits went through a batch"
        );
        let (got, _) = engine.execute(&mut s, cmd(&["GET", "s"])).await;
        assert_eq!(got, Reply::bulk(b"`Bcd\0\0xy".to_vec()), "{backend:?}");
        // A far offset: the chunked form, written by the batch path.
        let (len, _) = engine
            .execute(&mut s, cmd(&["SETRANGE", "s", "20000", "z"]))
            .await;
        assert_eq!(len, Reply::Int(20001), "{backend:?}");
        let (len, _) = engine.execute(&mut s, cmd(&["APPEND", "s", "!"])).await;
        assert_eq!(len, Reply::Int(20002), "{backend:?}");
        assert_eq!(batched(), 2, "{backend:?}");
        let (got, _) = engine
            .execute(&mut s, cmd(&["GETRANGE", "s", "0", "8"]))
            .await;
        assert_eq!(got, Reply::bulk(b"`Bcd\0\0xy\0".to_vec()), "{backend:?}");
    }
}

/// Many clients SET and INCR one key at once: every INCR answers its own value (each
/// of 1..=n once, whatever batch it was combined into), the counter ends at n, and a
/// SET's value is the key's until the next write. Rounds repeat until a change found
/// the key taken and was combined (two runtime threads make that happen within a
/// round or two), then the combined path is checked the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_sets_and_incrs_of_one_key_are_combined_and_each_answered() {
    let (_h, engine) = engine(Backend::Local).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut round = 0;
    loop {
        round += 1;
        let key = format!("n{round}");
        let mut tasks = Vec::new();
        for c in 0..CLIENTS {
            let (engine, key) = (engine.clone(), key.clone());
            tasks.push(tokio::spawn(async move {
                let mut s = engine.new_session(format!("t:{c}"), "t:0".into(), -1);
                let mut got = Vec::new();
                for _ in 0..EACH {
                    let (n, _) = engine.execute(&mut s, cmd(&["INCR", &key])).await;
                    let Reply::Int(n) = n else { panic!("{n:?}") };
                    got.push(n);
                }
                let mine = format!("{key}:{c}");
                let (ok, _) = engine.execute(&mut s, cmd(&["SET", &mine, "v"])).await;
                assert_eq!(ok, Reply::ok());
                got
            }));
        }
        let mut all = Vec::new();
        for t in tasks {
            let got = t.await.expect("a client");
            assert!(
                got.windows(2).all(|w| w[0] < w[1]),
                "a client's INCRs in order"
            );
            all.extend(got);
        }
        all.sort_unstable();
        let n = (CLIENTS * EACH) as i64;
        assert_eq!(all, (1..=n).collect::<Vec<_>>(), "round {round}");
        let mut s = engine.new_session("t:check".into(), "t:0".into(), -1);
        let (v, _) = engine.execute(&mut s, cmd(&["GET", &key])).await;
        assert_eq!(v, Reply::bulk(n.to_string()), "round {round}");
        // SETs of one key from every client: each answered OK, one of them last.
        let mut sets = Vec::new();
        for c in 0..CLIENTS {
            let (engine, key) = (engine.clone(), key.clone());
            sets.push(tokio::spawn(async move {
                let mut s = engine.new_session(format!("t:{c}"), "t:0".into(), -1);
                for i in 0..EACH {
                    let value = format!("c{c}-{i}");
                    let (ok, _) = engine.execute(&mut s, cmd(&["SET", &key, &value])).await;
                    assert_eq!(ok, Reply::ok());
                }
            }));
        }
        for t in sets {
            t.await.expect("a client");
        }
        let (v, _) = engine.execute(&mut s, cmd(&["GET", &key])).await;
        let Reply::Bulk(v) = v else { panic!("{v:?}") };
        let last = |c: usize| format!("c{c}-{}", EACH - 1).into_bytes();
        assert!(
            (0..CLIENTS).any(|c| v[..] == last(c)[..]),
            "a client's last SET wins: {v:?}"
        );
        if engine.stats.combined_changes.load(Ordering::Relaxed) > 0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no change was ever combined"
        );
    }
}
