//! A stream past the packed size keeps its entries in a chunk tree: an XADD writes one
//! path of it (not the stream), reads by range and XLEN read what they need, trims
//! remove its front, and COPY, RENAME, DUMP/RESTORE and an emptied stream behave as
//! with a packed one.

mod support;

use std::collections::HashSet;

use dmc_resp::Reply;
use dmc_umo::chunk::TreeRoot;
use support::{Backend, engine, run};

/// The roots of `key`'s value and the chunks of its entries tree.
async fn tree_of(engine: &dmc_engine::Engine, key: &str) -> (Vec<TreeRoot>, HashSet<u64>) {
    let e = engine
        .dht
        .get(0, key.as_bytes())
        .await
        .expect("a read")
        .expect("the key");
    let roots = TreeRoot::parse_all(&e.value);
    let mut chunks = HashSet::new();
    for root in &roots {
        let tag = dmc_engine::big::tag(0, key.as_bytes());
        let tree = dmc_engine::tree::Tree::open(engine.dht.pool(), tag, *root, None);
        for b in tree.blocks().await.expect("the chunks") {
            chunks.insert(b.addr.bits());
        }
    }
    (roots, chunks)
}

fn ids(r: &Reply) -> Vec<String> {
    let Reply::Array(items) = r else {
        panic!("{r:?}")
    };
    items
        .iter()
        .map(|e| match e {
            Reply::Array(pair) => match &pair[0] {
                Reply::Bulk(id) => String::from_utf8_lossy(id).into_owned(),
                other => panic!("{other:?}"),
            },
            other => panic!("{other:?}"),
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_stream_keeps_its_entries_in_a_tree_and_an_xadd_writes_one_path() {
    let (_h, engine) = engine(Backend::Local).await;
    let mut s = engine.new_session("t:1".into(), "t:2".into(), -1);
    const N: u64 = 5000;
    for i in 1..=N {
        let id = format!("{i}-0");
        let value = format!("value-{i}");
        run(&engine, &mut s, &["XADD", "q", &id, "f", &value]).await;
    }
    let (roots, before) = tree_of(&engine, "q").await;
    assert_eq!(roots.len(), 1, "the entries are in a tree");
    assert_eq!(roots[0].count, N);
    assert_eq!(
        run(&engine, &mut s, &["OBJECT", "ENCODING", "q"]).await,
        Reply::bulk("stream")
    );

    run(&engine, &mut s, &["XADD", "q", "5001-0", "f", "last"]).await;
    let (roots, after) = tree_of(&engine, "q").await;
    let written = after.difference(&before).count();
    let height = usize::from(roots[0].height);
    assert!(
        written <= height + 1,
        "an XADD wrote {written} chunks of a tree of height {height} and {} chunks",
        after.len()
    );

    assert_eq!(
        run(&engine, &mut s, &["XLEN", "q"]).await,
        Reply::Int(N as i64 + 1)
    );
    let r = run(&engine, &mut s, &["XRANGE", "q", "2500", "2502"]).await;
    assert_eq!(ids(&r), ["2500-0", "2501-0", "2502-0"]);
    let r = run(&engine, &mut s, &["XREVRANGE", "q", "+", "-", "COUNT", "2"]).await;
    assert_eq!(ids(&r), ["5001-0", "5000-0"]);

    // Trimmed from the front by whole nodes of 100 entries, as Redis does.
    run(
        &engine,
        &mut s,
        &["XADD", "q", "MAXLEN", "~", "1000", "5002-0", "f", "v"],
    )
    .await;
    let Reply::Int(len) = run(&engine, &mut s, &["XLEN", "q"]).await else {
        panic!("XLEN")
    };
    assert!((1000..1100).contains(&len), "{len} entries left");
    let r = run(&engine, &mut s, &["XRANGE", "q", "-", "+", "COUNT", "1"]).await;
    let first: u64 = ids(&r)[0].trim_end_matches("-0").parse().expect("an ID");
    assert_eq!(
        first,
        5002 - len as u64 + 1,
        "the oldest went, the rest stayed"
    );

    // Copied, renamed, dumped and restored: the same entries.
    let all = run(&engine, &mut s, &["XRANGE", "q", "-", "+"]).await;
    assert_eq!(
        run(&engine, &mut s, &["COPY", "q", "q2"]).await,
        Reply::Int(1)
    );
    assert_eq!(
        run(&engine, &mut s, &["RENAME", "q2", "q3"]).await,
        Reply::ok()
    );
    assert_eq!(run(&engine, &mut s, &["XRANGE", "q3", "-", "+"]).await, all);
    let Reply::Bulk(payload) = run(&engine, &mut s, &["DUMP", "q"]).await else {
        panic!("DUMP")
    };
    let restore = vec!["RESTORE".into(), "q4".into(), "0".into(), payload];
    assert_eq!(engine.execute(&mut s, restore).await.0, Reply::ok());
    assert_eq!(run(&engine, &mut s, &["XRANGE", "q4", "-", "+"]).await, all);
    run(&engine, &mut s, &["XADD", "q4", "9999-0", "f", "v"]).await;
    assert_eq!(
        tree_of(&engine, "q4").await.0.len(),
        1,
        "a restored stream is chunked on its next write"
    );

    // Emptied, it stays a key (as in Redis), packed again.
    assert_eq!(
        run(&engine, &mut s, &["XTRIM", "q", "MAXLEN", "0"]).await,
        Reply::Int(len)
    );
    assert_eq!(run(&engine, &mut s, &["XLEN", "q"]).await, Reply::Int(0));
    assert_eq!(run(&engine, &mut s, &["EXISTS", "q"]).await, Reply::Int(1));
    assert!(tree_of(&engine, "q").await.0.is_empty());
    assert_eq!(
        run(&engine, &mut s, &["XLEN", "q3"]).await,
        Reply::Int(len),
        "the copy kept its own entries"
    );
}
