//! Pub/sub on one engine as Redis 7.0 answers it (texts and shapes taken from
//! redis-server 7.0): confirmations with their counts, RESP2 subscribed mode (only the
//! subscribe commands, PING as `pong`, QUIT, RESET), RESP3 clients running anything,
//! messages in each subscriber's mailbox in publication order, RESET and MULTI.
//! The wire bytes, delivery while idle and across agents are `tests/py/pubsub_check.py`.

mod support;

use dmc_engine::pubsub::Message;
use dmc_resp::Reply;
use support::{Backend, engine, run};

fn push(items: &[&str], count: i64) -> Reply {
    let mut v: Vec<Reply> = items.iter().map(|s| Reply::bulk(s.to_string())).collect();
    v.push(Reply::Int(count));
    Reply::Push(v)
}

#[tokio::test]
async fn subscribed_mode_allows_what_redis_allows() {
    let (_h, engine) = engine(Backend::Local).await;
    let mut s = engine.new_session("t:1".into(), "t:0".into(), -1);
    assert_eq!(
        run(&engine, &mut s, &["SUBSCRIBE", "a", "b"]).await,
        Reply::Several(vec![
            push(&["subscribe", "a"], 1),
            push(&["subscribe", "b"], 2)
        ])
    );
    assert_eq!(
        run(&engine, &mut s, &["PSUBSCRIBE", "x*"]).await,
        Reply::Several(vec![push(&["psubscribe", "x*"], 3)])
    );
    // Shard channels are counted apart.
    assert_eq!(
        run(&engine, &mut s, &["SSUBSCRIBE", "s"]).await,
        Reply::Several(vec![push(&["ssubscribe", "s"], 1)])
    );
    assert_eq!(
        run(&engine, &mut s, &["GET", "k"]).await,
        Reply::err(
            "ERR Can't execute 'get': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / \
             RESET are allowed in this context"
        )
    );
    assert_eq!(
        run(&engine, &mut s, &["PUBSUB", "NUMPAT"]).await,
        Reply::err(
            "ERR Can't execute 'pubsub|numpat': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING \
             / QUIT / RESET are allowed in this context"
        )
    );
    assert_eq!(
        run(&engine, &mut s, &["PING"]).await,
        Reply::Array(vec![Reply::bulk("pong"), Reply::bulk("")])
    );
    assert_eq!(
        run(&engine, &mut s, &["PING", "hi"]).await,
        Reply::Array(vec![Reply::bulk("pong"), Reply::bulk("hi")])
    );
    // Leaving everything ends subscribed mode.
    assert_eq!(
        run(&engine, &mut s, &["UNSUBSCRIBE"]).await,
        Reply::Several(vec![
            push(&["unsubscribe", "a"], 2),
            push(&["unsubscribe", "b"], 1)
        ])
    );
    run(&engine, &mut s, &["PUNSUBSCRIBE"]).await;
    assert_eq!(
        run(&engine, &mut s, &["SUNSUBSCRIBE"]).await,
        Reply::Several(vec![push(&["sunsubscribe", "s"], 0)])
    );
    assert_eq!(
        run(&engine, &mut s, &["UNSUBSCRIBE"]).await,
        Reply::Several(vec![Reply::Push(vec![
            Reply::bulk("unsubscribe"),
            Reply::Null,
            Reply::Int(0)
        ])])
    );
    assert_eq!(run(&engine, &mut s, &["PING"]).await, Reply::Simple("PONG"));
    assert_eq!(run(&engine, &mut s, &["GET", "k"]).await, Reply::Null);
}

#[tokio::test]
async fn messages_wait_in_each_subscribers_mailbox_in_order() {
    let (_h, engine) = engine(Backend::Local).await;
    let mut a = engine.new_session("t:1".into(), "t:0".into(), -1);
    let mut b = engine.new_session("t:2".into(), "t:0".into(), -1);
    let mut publisher = engine.new_session("t:3".into(), "t:0".into(), -1);
    // RESP3: a subscribed client runs any command.
    run(&engine, &mut a, &["HELLO", "3"]).await;
    run(&engine, &mut a, &["SUBSCRIBE", "news"]).await;
    assert_eq!(run(&engine, &mut a, &["SET", "k", "v"]).await, Reply::ok());
    run(&engine, &mut b, &["PSUBSCRIBE", "n*"]).await;
    for i in 0..10 {
        let reply = run(
            &engine,
            &mut publisher,
            &["PUBLISH", "news", &format!("m{i}")],
        )
        .await;
        assert_eq!(reply, Reply::Int(2));
    }
    assert_eq!(
        run(&engine, &mut publisher, &["PUBLISH", "other", "x"]).await,
        Reply::Int(0)
    );
    let got = a.mailbox.as_ref().expect("a mailbox").take();
    let want: Vec<Message> = (0..10)
        .map(|i| Message::Message {
            channel: "news".into(),
            payload: format!("m{i}").into(),
        })
        .collect();
    assert_eq!(got, want);
    let got = b.mailbox.as_ref().expect("a mailbox").take();
    assert_eq!(got.len(), 10);
    assert!(matches!(&got[9], Message::PMessage { pattern, payload, .. }
        if pattern == "n*" && payload == "m9"));
    assert_eq!(
        run(
            &engine,
            &mut publisher,
            &["PUBSUB", "NUMSUB", "news", "none"]
        )
        .await,
        Reply::Array(vec![
            Reply::bulk("news"),
            Reply::Int(1),
            Reply::bulk("none"),
            Reply::Int(0)
        ])
    );
    // RESET leaves every subscription.
    assert_eq!(
        run(&engine, &mut b, &["RESET"]).await,
        Reply::Simple("RESET")
    );
    assert_eq!(
        run(&engine, &mut publisher, &["PUBSUB", "NUMPAT"]).await,
        Reply::Int(0)
    );
    assert_eq!(run(&engine, &mut b, &["GET", "k"]).await, Reply::bulk("v"));
}

#[tokio::test]
async fn a_subscription_inside_multi_aborts_the_transaction() {
    let (_h, engine) = engine(Backend::Local).await;
    let mut s = engine.new_session("t:1".into(), "t:0".into(), -1);
    run(&engine, &mut s, &["MULTI"]).await;
    assert_eq!(
        run(&engine, &mut s, &["SUBSCRIBE", "a"]).await,
        Reply::err("ERR Command not allowed inside a transaction")
    );
    assert_eq!(
        run(&engine, &mut s, &["PUBLISH", "a", "m"]).await,
        Reply::Simple("QUEUED")
    );
    assert!(matches!(run(&engine, &mut s, &["EXEC"]).await,
        Reply::Error(e) if e.starts_with("EXECABORT")));
    assert!(!s.subscribed);
}
