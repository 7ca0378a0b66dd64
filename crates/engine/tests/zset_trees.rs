//! Sorted sets past the packed size are two chunk trees (by score, by member): every
//! rank, score and range command answers as a plain model of the set does, lexicographic
//! ranges work on one-score sets, and COPY gives a second key its own trees that stay
//! readable after the source is deleted (for hashes too: their trees are key-ordered).

mod support;

use dmc_resp::Reply;
use support::{Backend, engine, run};

fn bulks(items: &[&String]) -> Reply {
    Reply::Array(items.iter().map(|m| Reply::bulk((*m).clone())).collect())
}

#[tokio::test]
async fn a_large_sorted_set_answers_every_query_from_its_trees() {
    let (_h, engine) = engine(Backend::Local).await;
    let mut s = engine.new_session("t:1".into(), "t:2".into(), -1);
    // Member i scores i / 3 (three members per score: ties order by member).
    let n = 6000usize;
    let members: Vec<String> = (0..n).map(|i| format!("member:{i:06}")).collect();
    let score = |i: usize| (i / 3) as f64;
    for (c, chunk) in members.chunks(500).enumerate() {
        let mut zadd = vec!["ZADD".to_string(), "z".into()];
        for (j, m) in chunk.iter().enumerate() {
            zadd.push(score(c * 500 + j).to_string());
            zadd.push(m.clone());
        }
        let words: Vec<&str> = zadd.iter().map(String::as_str).collect();
        assert_eq!(run(&engine, &mut s, &words).await, Reply::Int(500));
    }
    let e = engine.dht.get(0, b"z").await.expect("a read").expect("z");
    assert_eq!(dmc_umo::chunk::TreeRoot::parse_all(&e.value).len(), 2);
    assert_eq!(
        run(&engine, &mut s, &["OBJECT", "ENCODING", "z"]).await,
        Reply::bulk("skiplist")
    );
    assert_eq!(
        run(&engine, &mut s, &["ZCARD", "z"]).await,
        Reply::Int(n as i64)
    );
    for i in [0, 1, 2, 2999, 4500, n - 1] {
        let m = members[i].as_str();
        assert_eq!(
            run(&engine, &mut s, &["ZRANK", "z", m]).await,
            Reply::Int(i as i64)
        );
        assert_eq!(
            run(&engine, &mut s, &["ZREVRANK", "z", m]).await,
            Reply::Int((n - 1 - i) as i64)
        );
        assert_eq!(
            run(&engine, &mut s, &["ZSCORE", "z", m]).await,
            Reply::Double(score(i))
        );
    }
    assert_eq!(
        run(&engine, &mut s, &["ZSCORE", "z", "nobody"]).await,
        Reply::Null
    );
    assert_eq!(
        run(&engine, &mut s, &["ZRANK", "z", "nobody"]).await,
        Reply::Null
    );
    // Scores 100..=200 hold members 300..=602; (100 excludes 300..=302.
    assert_eq!(
        run(&engine, &mut s, &["ZCOUNT", "z", "100", "200"]).await,
        Reply::Int(303)
    );
    assert_eq!(
        run(&engine, &mut s, &["ZCOUNT", "z", "(100", "(200"]).await,
        Reply::Int(297)
    );
    let want: Vec<&String> = members[303..308].iter().collect();
    assert_eq!(
        run(
            &engine,
            &mut s,
            &["ZRANGEBYSCORE", "z", "(100", "+inf", "LIMIT", "0", "5"]
        )
        .await,
        bulks(&want)
    );
    let want: Vec<&String> = members[590..=602].iter().rev().skip(2).take(4).collect();
    assert_eq!(
        run(
            &engine,
            &mut s,
            &[
                "ZRANGE", "z", "200", "(196", "BYSCORE", "REV", "LIMIT", "2", "4"
            ]
        )
        .await,
        bulks(&want)
    );
    let want: Vec<&String> = members[n - 3..].iter().rev().collect();
    assert_eq!(
        run(&engine, &mut s, &["ZREVRANGE", "z", "0", "2"]).await,
        bulks(&want)
    );
    let want: Vec<&String> = members[4000..4010].iter().collect();
    assert_eq!(
        run(&engine, &mut s, &["ZRANGE", "z", "4000", "4009"]).await,
        bulks(&want)
    );
    // A move changes both trees: member 0 to the top.
    assert_eq!(
        run(&engine, &mut s, &["ZADD", "z", "1e9", "member:000000"]).await,
        Reply::Int(0)
    );
    assert_eq!(
        run(&engine, &mut s, &["ZRANK", "z", "member:000000"]).await,
        Reply::Int(n as i64 - 1)
    );
    assert_eq!(
        run(&engine, &mut s, &["ZRANK", "z", "member:000001"]).await,
        Reply::Int(0)
    );
    // Removals by rank and score, pops.
    assert_eq!(
        run(&engine, &mut s, &["ZREMRANGEBYRANK", "z", "0", "98"]).await,
        Reply::Int(99)
    );
    assert_eq!(
        run(&engine, &mut s, &["ZREMRANGEBYSCORE", "z", "(33", "50"]).await,
        Reply::Int(51)
    );
    let popped = run(&engine, &mut s, &["ZPOPMAX", "z", "2"]).await;
    assert_eq!(
        popped,
        Reply::Array(vec![
            Reply::bulk("member:000000"),
            Reply::Double(1e9),
            Reply::bulk(members[n - 1].clone()),
            Reply::Double(score(n - 1)),
        ])
    );
    assert_eq!(
        run(&engine, &mut s, &["ZCARD", "z"]).await,
        Reply::Int(n as i64 - 99 - 51 - 2)
    );
    assert_eq!(
        run(&engine, &mut s, &["ZRANK", "z", "member:000100"]).await,
        Reply::Int(0)
    );
}

#[tokio::test]
async fn lexicographic_ranges_seek_a_one_score_tree() {
    let (_h, engine) = engine(Backend::Local).await;
    let mut s = engine.new_session("t:1".into(), "t:2".into(), -1);
    let words: Vec<String> = (0..4000).map(|i| format!("w{:05}", i * 7 % 4000)).collect();
    for chunk in words.chunks(400) {
        let mut zadd = vec!["ZADD", "lex"];
        for w in chunk {
            zadd.extend(["0", w.as_str()]);
        }
        run(&engine, &mut s, &zadd).await;
    }
    let mut sorted: Vec<&String> = words.iter().collect();
    sorted.sort();
    assert_eq!(
        run(&engine, &mut s, &["OBJECT", "ENCODING", "lex"]).await,
        Reply::bulk("skiplist")
    );
    let want: Vec<&String> = sorted[1000..1010].to_vec();
    assert_eq!(
        run(
            &engine,
            &mut s,
            &["ZRANGEBYLEX", "lex", "[w01000", "(w01010"]
        )
        .await,
        bulks(&want)
    );
    assert_eq!(
        run(&engine, &mut s, &["ZLEXCOUNT", "lex", "(w01000", "+"]).await,
        Reply::Int(2999)
    );
    let want: Vec<&String> = sorted[3990..].iter().rev().copied().collect();
    assert_eq!(
        run(&engine, &mut s, &["ZREVRANGEBYLEX", "lex", "+", "[w03990"]).await,
        bulks(&want)
    );
    assert_eq!(
        run(&engine, &mut s, &["ZREMRANGEBYLEX", "lex", "-", "(w00100"]).await,
        Reply::Int(100)
    );
    assert_eq!(
        run(&engine, &mut s, &["ZCARD", "lex"]).await,
        Reply::Int(3900)
    );
}

#[tokio::test]
async fn copies_of_trees_are_their_own_and_keep_their_order() {
    let (_h, engine) = engine(Backend::Local).await;
    let mut s = engine.new_session("t:1".into(), "t:2".into(), -1);
    for c in 0..10 {
        let mut zadd = vec!["ZADD".to_string(), "z".into()];
        let mut hset = vec!["HSET".to_string(), "h".into()];
        for i in c * 300..(c + 1) * 300 {
            zadd.extend([i.to_string(), format!("m{i}")]);
            hset.extend([format!("field{i}"), format!("value{i}")]);
        }
        let zadd: Vec<&str> = zadd.iter().map(String::as_str).collect();
        let hset: Vec<&str> = hset.iter().map(String::as_str).collect();
        run(&engine, &mut s, &zadd).await;
        run(&engine, &mut s, &hset).await;
    }
    assert_eq!(
        run(&engine, &mut s, &["COPY", "z", "z2"]).await,
        Reply::Int(1)
    );
    assert_eq!(
        run(&engine, &mut s, &["COPY", "h", "h2"]).await,
        Reply::Int(1)
    );
    assert_eq!(
        run(&engine, &mut s, &["DEL", "z", "h"]).await,
        Reply::Int(2)
    );
    assert_eq!(
        run(&engine, &mut s, &["ZCARD", "z2"]).await,
        Reply::Int(3000)
    );
    for i in [0, 1777, 2999] {
        let m = format!("m{i}");
        assert_eq!(
            run(&engine, &mut s, &["ZSCORE", "z2", &m]).await,
            Reply::Double(i as f64)
        );
        assert_eq!(
            run(&engine, &mut s, &["ZRANK", "z2", &m]).await,
            Reply::Int(i as i64)
        );
        let f = format!("field{i}");
        assert_eq!(
            run(&engine, &mut s, &["HGET", "h2", &f]).await,
            Reply::bulk(format!("value{i}"))
        );
    }
    // The copy changes on its own.
    assert_eq!(
        run(&engine, &mut s, &["ZREM", "z2", "m5"]).await,
        Reply::Int(1)
    );
    assert_eq!(
        run(&engine, &mut s, &["ZRANK", "z2", "m6"]).await,
        Reply::Int(5)
    );
}
