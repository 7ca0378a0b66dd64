//! A blocked client waits on each of its keys once, however often the command names
//! it (Redis de-duplicates): one key named N times was registered N times and
//! unregistered N times, O(N²) under the agent's one waiters lock.

mod support;

use std::time::{Duration, Instant};

use dmc_resp::Reply;
use support::{Backend, engine, run};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_named_many_times_is_waited_on_once() {
    let (_h, engine) = engine(Backend::Local).await;
    let popper = {
        let engine = engine.clone();
        tokio::spawn(async move {
            let mut s = engine.new_session("t:1".into(), "t:0".into(), -1);
            let mut words = vec!["BLPOP".to_string()];
            words.extend(std::iter::repeat_n("same".to_string(), 1000));
            words.push("0".into());
            run(&engine, &mut s, &words).await
        })
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while engine.blocking.blocked_keys() == 0 {
        assert!(Instant::now() < deadline, "the BLPOP never blocked");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(engine.blocking.blocked_keys(), 1);
    let mut s = engine.new_session("t:2".into(), "t:0".into(), -1);
    assert_eq!(
        run(&engine, &mut s, &["LPUSH", "same", "v"]).await,
        Reply::Int(1)
    );
    assert_eq!(
        popper.await.expect("the BLPOP's task"),
        Reply::Array(vec![Reply::bulk("same"), Reply::bulk("v")])
    );
    assert_eq!(engine.blocking.blocked_keys(), 0);
}
