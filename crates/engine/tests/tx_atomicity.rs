//! A transaction's writes become visible at once: readers — on the writing agent and
//! on another agent of the same pool, which reads the keys one-sided — never see part
//! of an EXEC or a script, and a transaction reads its own writes before they commit.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use bytes::Bytes;
use dmc_engine::{Engine, EngineConfig};
use dmc_resp::Reply;
use support::common;
use support::run;

/// Reads of a written pair each reader must have made while the writer ran.
const READS: u64 = 1000;

async fn agent(
    nodes: &[dmc_verbs::server::LoopbackNode],
    id: u32,
    owned: std::ops::Range<u16>,
) -> Arc<Engine> {
    let dht = common::client(nodes, id, owned, id).await;
    Engine::new(dht, Arc::new(dmc_dht::SystemClock), EngineConfig::default())
}

fn pair(reply: &Reply) -> (Option<Bytes>, Option<Bytes>) {
    let Reply::Array(items) = reply else {
        panic!("MGET answered {reply:?}");
    };
    let value = |r: &Reply| match r {
        Reply::Bulk(b) => Some(b.clone()),
        Reply::Null => None,
        other => panic!("MGET item {other:?}"),
    };
    (value(&items[0]), value(&items[1]))
}

/// Polls `MGET a b` on `engine` until `done`, asserting the two are always equal,
/// and counts the reads that saw a written pair in `seen`.
async fn read_pairs(engine: Arc<Engine>, done: Arc<AtomicBool>, seen: Arc<AtomicU64>) {
    let mut s = engine.new_session("r:1".into(), "r:0".into(), -1);
    while !done.load(Ordering::Acquire) {
        let reply = run(&engine, &mut s, &["MGET", "{t}a", "{t}b"]).await;
        let (a, b) = pair(&reply);
        assert_eq!(a, b, "a reader saw part of a transaction");
        if a.is_some() {
            seen.fetch_add(1, Ordering::Relaxed);
        }
        tokio::task::yield_now().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_on_every_agent_see_all_of_a_transaction_or_none() {
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let nodes = common::two_nodes(&dirs).await;
    let writer = agent(&nodes, 1, 0..dmc_dht::layout::HASH_SLOTS as u16).await;
    let other = agent(&nodes, 2, 0..0).await;
    assert!(!other.owns(b"{t}a"), "the reader agent owns nothing");

    let done = Arc::new(AtomicBool::new(false));
    let seen = [(); 2].map(|_| Arc::new(AtomicU64::new(0)));
    let readers: Vec<_> = [writer.clone(), other.clone()]
        .into_iter()
        .zip(&seen)
        .map(|(e, n)| tokio::spawn(read_pairs(e, done.clone(), n.clone())))
        .collect();

    let mut s = writer.new_session("w:1".into(), "w:0".into(), -1);
    let script = "redis.call('SET', KEYS[1], ARGV[1]) redis.call('SET', KEYS[2], ARGV[1])";
    let mut i = 0u64;
    // Until both readers read enough pairs (or one failed).
    while seen.iter().any(|n| n.load(Ordering::Relaxed) < READS)
        && !readers.iter().any(|r| r.is_finished())
    {
        i += 1;
        let v = i.to_string();
        if i.is_multiple_of(2) {
            run(&writer, &mut s, &["MULTI"]).await;
            run(&writer, &mut s, &["SET", "{t}a", &v]).await;
            run(&writer, &mut s, &["SET", "{t}b", &v]).await;
            let reply = run(&writer, &mut s, &["EXEC"]).await;
            assert_eq!(reply, Reply::Array(vec![Reply::ok(), Reply::ok()]));
        } else {
            let reply = run(&writer, &mut s, &["EVAL", script, "2", "{t}a", "{t}b", &v]).await;
            assert_eq!(reply, Reply::Null);
        }
    }
    done.store(true, Ordering::Release);
    for r in readers {
        r.await.expect("a reader failed");
    }
    assert!(i > 10, "the writer wrote while the readers read");
}

#[tokio::test]
async fn a_transaction_reads_its_own_writes_before_they_commit() {
    let (_h, engine) = support::engine(common::Backend::Local).await;
    let mut s = engine.new_session("t:1".into(), "t:0".into(), -1);
    run(&engine, &mut s, &["SET", "gone", "x"]).await;
    run(&engine, &mut s, &["RPUSH", "list", "a"]).await;
    run(&engine, &mut s, &["MULTI"]).await;
    for c in [
        &["SET", "k", "1"][..],
        &["INCR", "k"],
        &["GET", "k"],
        &["DEL", "gone"],
        &["EXISTS", "gone"],
        &["EXPIRE", "k", "100"],
        &["TTL", "k"],
        &["RPUSH", "list", "b"],
        &["LRANGE", "list", "0", "-1"],
        &["KEYS", "*"],
        &["DEL", "k"],
        &["GET", "k"],
    ] {
        assert_eq!(
            run(&engine, &mut s, c).await,
            Reply::Simple("QUEUED"),
            "{c:?}"
        );
    }
    let Reply::Array(replies) = run(&engine, &mut s, &["EXEC"]).await else {
        panic!("EXEC did not answer an array");
    };
    let bulk = |v: &str| Reply::Bulk(Bytes::copy_from_slice(v.as_bytes()));
    let mut keys = replies[9].clone();
    if let Reply::Array(k) = &mut keys {
        k.sort_by_key(|r| format!("{r:?}"));
    }
    assert_eq!(
        replies,
        vec![
            Reply::ok(),
            Reply::Int(2),
            bulk("2"),
            Reply::Int(1),
            Reply::Int(0),
            Reply::Int(1),
            Reply::Int(100),
            Reply::Int(2),
            Reply::Array(vec![bulk("a"), bulk("b")]),
            keys.clone(),
            Reply::Int(1),
            Reply::Null,
        ]
    );
    assert_eq!(keys, Reply::Array(vec![bulk("k"), bulk("list")]));
    // Committed: the list has both, the deleted keys are gone, DBSIZE counts one key.
    assert_eq!(
        run(&engine, &mut s, &["LRANGE", "list", "0", "-1"]).await,
        Reply::Array(vec![bulk("a"), bulk("b")])
    );
    assert_eq!(
        run(&engine, &mut s, &["EXISTS", "gone", "k"]).await,
        Reply::Int(0)
    );
    assert_eq!(run(&engine, &mut s, &["DBSIZE"]).await, Reply::Int(1));
}
