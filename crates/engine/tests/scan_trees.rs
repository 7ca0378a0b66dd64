//! HSCAN, SSCAN and ZSCAN of collections stored as trees page through them by hash
//! (COUNT elements a call, a cursor to go on), so a scan of a big collection is many
//! small replies, not one as large as HGETALL; and every element present for the whole
//! scan is returned although the collection changes between the pages.

mod support;

use std::collections::HashSet;

use dmc_resp::Reply;
use support::{Backend, engine, run};

fn w(words: &[&str]) -> Vec<String> {
    words.iter().map(|s| s.to_string()).collect()
}

#[tokio::test]
async fn scans_of_trees_page_and_return_every_lasting_element() {
    let (_h, engine) = engine(Backend::Local).await;
    let mut s = engine.new_session("t:1".into(), "t:2".into(), -1);
    let n = 3000;
    for c in 0..n / 500 {
        let (mut hset, mut sadd, mut zadd) =
            (w(&["HSET", "h"]), w(&["SADD", "s"]), w(&["ZADD", "z"]));
        for i in c * 500..(c + 1) * 500 {
            let e = format!("element-{i:05}");
            hset.extend([e.clone(), format!("v{i}")]);
            sadd.push(e.clone());
            zadd.extend([i.to_string(), e]);
        }
        run(&engine, &mut s, &hset).await;
        run(&engine, &mut s, &sadd).await;
        run(&engine, &mut s, &zadd).await;
    }
    for (scan, key, per) in [("HSCAN", "h", 2), ("SSCAN", "s", 1), ("ZSCAN", "z", 2)] {
        let mut cursor = "0".to_string();
        let mut seen = HashSet::new();
        let mut calls = 0;
        loop {
            let reply = run(&engine, &mut s, &w(&[scan, key, &cursor, "COUNT", "100"])).await;
            let Reply::Array(parts) = reply else {
                panic!("{scan}: {reply:?}")
            };
            let (Some(Reply::Bulk(next)), Some(Reply::Array(items))) =
                (parts.first(), parts.get(1))
            else {
                panic!("{scan}: {parts:?}")
            };
            assert!(
                items.len() <= 100 * per,
                "{scan}: a page of {}",
                items.len()
            );
            for e in items.iter().step_by(per) {
                let Reply::Bulk(e) = e else { panic!("{e:?}") };
                seen.insert(String::from_utf8_lossy(e).into_owned());
            }
            calls += 1;
            // Between pages: elements come and go; the lasting ones must all be seen.
            if calls == 5 {
                let (add, rem) = match scan {
                    "HSCAN" => (
                        w(&["HSET", key, "new-1", "x", "new-2", "y"]),
                        w(&["HDEL", key, "element-00007"]),
                    ),
                    "SSCAN" => (
                        w(&["SADD", key, "new-1", "new-2"]),
                        w(&["SREM", key, "element-00007"]),
                    ),
                    _ => (
                        w(&["ZADD", key, "1", "new-1", "2", "new-2"]),
                        w(&["ZREM", key, "element-00007"]),
                    ),
                };
                run(&engine, &mut s, &add).await;
                run(&engine, &mut s, &rem).await;
            }
            cursor = String::from_utf8_lossy(next).into_owned();
            if cursor == "0" {
                break;
            }
            assert!(calls < 1000, "{scan} does not end");
        }
        assert!(calls >= n / 100, "{scan}: {calls} calls for {n} elements");
        for i in (0..n).filter(|&i| i != 7) {
            assert!(
                seen.contains(&format!("element-{i:05}")),
                "{scan} missed element {i}"
            );
        }
    }
}
