//! CLIENT TRACKING on one engine: what reaches a tracker's mailbox. The wire frames,
//! Redis's texts and two agents are `tests/py/tracking_check.py`; these are the
//! paths a client cannot drive on its own: a key that expires or is evicted, the
//! table's bound, a transaction's writes (announced after its commit), and a tracker
//! that leaves.

mod support;

use std::time::{Duration, Instant};

use bytes::Bytes;
use dmc_engine::pubsub::Message;
use dmc_engine::{Engine, Session};
use dmc_resp::Reply;
use support::{Backend, engine, run};

fn invalidated(keys: &[&str]) -> Message {
    Message::Invalidate {
        keys: Some(
            keys.iter()
                .map(|k| Bytes::copy_from_slice(k.as_bytes()))
                .collect(),
        ),
        redirected: false,
    }
}

/// The tracker's messages, waiting (until a deadline) for at least `n`.
async fn messages(s: &Session, n: usize) -> Vec<Message> {
    let mailbox = s.mailbox.as_ref().expect("a tracker has a mailbox");
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut got = Vec::new();
    while got.len() < n && Instant::now() < deadline {
        got.extend(mailbox.take());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    got
}

async fn tracker(engine: &Engine, words: &[&str]) -> Session {
    let mut s = engine.new_session("t:1".into(), "t:0".into(), -1);
    run(engine, &mut s, &["HELLO", "3"]).await;
    let mut on = vec!["CLIENT", "TRACKING", "on"];
    on.extend(words);
    assert_eq!(run(engine, &mut s, &on).await, Reply::ok());
    s
}

#[tokio::test]
async fn expiry_and_transactions_invalidate_once_committed() {
    let (_h, engine) = engine(Backend::Local).await;
    let mut w = engine.new_session("t:2".into(), "t:0".into(), -1);
    let mut t = tracker(&engine, &[]).await;
    run(&engine, &mut w, &["SET", "e", "1", "PX", "30"]).await;
    run(&engine, &mut t, &["GET", "e"]).await;
    tokio::time::sleep(Duration::from_millis(60)).await;
    // A read that finds it expired reclaims it: the tracker hears of it.
    assert_eq!(run(&engine, &mut w, &["GET", "e"]).await, Reply::Null);
    assert_eq!(messages(&t, 1).await, vec![invalidated(&["e"])]);

    run(&engine, &mut t, &["MGET", "a", "b"]).await;
    run(&engine, &mut w, &["MULTI"]).await;
    run(&engine, &mut w, &["SET", "a", "1"]).await;
    run(&engine, &mut w, &["SET", "b", "1"]).await;
    // Queued, not run: nothing yet.
    assert!(
        t.mailbox
            .as_ref()
            .map(|m| m.take())
            .unwrap_or_default()
            .is_empty()
    );
    run(&engine, &mut w, &["EXEC"]).await;
    let mut got = messages(&t, 2).await;
    got.sort_by_key(|m| format!("{m:?}"));
    assert_eq!(got, vec![invalidated(&["a"]), invalidated(&["b"])]);
}

#[tokio::test]
async fn the_table_is_bounded_and_a_leaving_tracker_is_forgotten() {
    let (_h, engine) = engine(Backend::Local).await;
    let mut admin = engine.new_session("t:2".into(), "t:0".into(), -1);
    run(
        &engine,
        &mut admin,
        &["CONFIG", "SET", "tracking-table-max-keys", "2"],
    )
    .await;
    let mut t = tracker(&engine, &[]).await;
    run(&engine, &mut t, &["MGET", "k1", "k2", "k3"]).await;
    // Past the bound a remembered key is given up, with an invalidation.
    assert_eq!(messages(&t, 1).await.len(), 1);
    let info = run(&engine, &mut admin, &["INFO", "stats"]).await;
    let (Reply::Verbatim(text) | Reply::Bulk(text)) = info else {
        panic!("INFO answered {info:?}");
    };
    assert!(String::from_utf8_lossy(&text).contains("tracking_total_keys:2"));
    // RESET ends tracking: later writes reach no one.
    run(&engine, &mut t, &["RESET"]).await;
    run(&engine, &mut admin, &["SET", "k1", "x"]).await;
    assert_eq!(engine.tracking.clients(), 0);
    assert_eq!(engine.tracking.table_keys(), 0);
}
