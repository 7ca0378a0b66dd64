//! Returning a region moves the chunks of collection trees out of it: a list, a hash,
//! a set and a sorted set (two trees) grown into chunk trees read back whole after
//! every region they used is vacated, with their keys' heads and chunks copied
//! elsewhere.

mod support;

use dmc_resp::Reply;
use support::{Backend, cmd, engine};

#[tokio::test]
async fn vacated_regions_keep_every_tree_whole() {
    let (_h, engine) = engine(Backend::Local).await;
    let mut s = engine.new_session("t:1".into(), "t:2".into(), -1);
    let items: Vec<String> = (0..3000)
        .map(|i| format!("element-{i:05}-{}", "x".repeat(i % 40)))
        .collect();
    for chunk in items.chunks(100) {
        let mut push = vec!["RPUSH", "list"];
        push.extend(chunk.iter().map(|s| s.as_str()));
        engine.execute(&mut s, cmd(&push)).await;
        let mut sadd = vec!["SADD", "set"];
        sadd.extend(chunk.iter().map(|s| s.as_str()));
        engine.execute(&mut s, cmd(&sadd)).await;
        let mut hset = vec!["HSET", "hash"];
        for i in chunk {
            hset.extend([i.as_str(), "v"]);
        }
        engine.execute(&mut s, cmd(&hset)).await;
        let mut zadd = vec!["ZADD", "zset"];
        for i in chunk {
            zadd.extend([&i[8..13], i.as_str()]);
        }
        engine.execute(&mut s, cmd(&zadd)).await;
    }
    let encoding = |e: &str| cmd(&["OBJECT", "ENCODING", e]);
    assert_eq!(
        engine.execute(&mut s, encoding("list")).await.0,
        Reply::bulk("quicklist")
    );
    let regions: Vec<_> = engine
        .dht
        .used_by_region()
        .into_iter()
        .map(|(r, _)| r)
        .collect();
    assert!(
        regions.len() > 1,
        "the data spans several regions: {regions:?}"
    );
    let vacated = &regions[..regions.len() - 1];
    for r in vacated {
        engine.dht.vacate_region(*r).await.expect("vacate");
    }
    // No chunk of any tree is left in them (the pool returns them next).
    for key in ["list", "set", "hash", "zset"] {
        let Some(e) = engine.dht.get(0, key.as_bytes()).await.expect("a read") else {
            panic!("{key} is gone");
        };
        let roots = dmc_umo::chunk::TreeRoot::parse_all(&e.value);
        assert_eq!(roots.len(), if key == "zset" { 2 } else { 1 }, "{key}");
        let tag = dmc_engine::big::tag(0, key.as_bytes());
        let mut blocks = Vec::new();
        for root in roots {
            let tree = dmc_engine::tree::Tree::open(engine.dht.pool(), tag, root, None);
            blocks.extend(tree.blocks().await.expect("the chunks"));
        }
        assert!(blocks.len() > 10, "{key} has {} chunks", blocks.len());
        let stray: Vec<_> = blocks
            .iter()
            .filter(|b| vacated.contains(&b.addr.region()))
            .collect();
        assert!(
            stray.is_empty(),
            "{key}: {} chunks left in vacated regions",
            stray.len()
        );
    }
    let (list, _) = engine
        .execute(&mut s, cmd(&["LRANGE", "list", "0", "-1"]))
        .await;
    assert_eq!(
        list,
        Reply::Array(items.iter().map(|i| Reply::bulk(i.clone())).collect())
    );
    let (card, _) = engine.execute(&mut s, cmd(&["SCARD", "set"])).await;
    assert_eq!(card, Reply::Int(3000));
    let (members, _) = engine.execute(&mut s, cmd(&["SMEMBERS", "set"])).await;
    let Reply::Set(m) = members else {
        panic!("{members:?}")
    };
    assert_eq!(m.len(), 3000);
    let (len, _) = engine.execute(&mut s, cmd(&["HLEN", "hash"])).await;
    assert_eq!(len, Reply::Int(3000));
    let (v, _) = engine
        .execute(&mut s, cmd(&["HGET", "hash", &items[1234]]))
        .await;
    assert_eq!(v, Reply::bulk("v"));
    let (rank, _) = engine
        .execute(&mut s, cmd(&["ZRANK", "zset", &items[1234]]))
        .await;
    assert_eq!(rank, Reply::Int(1234));
    let (score, _) = engine
        .execute(&mut s, cmd(&["ZSCORE", "zset", &items[2345]]))
        .await;
    assert_eq!(score, Reply::Double(2345.0));
}
