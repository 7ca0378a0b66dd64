//! FLUSHALL and FLUSHDB remove keys that expired but were not reclaimed yet: DBSIZE
//! counts those (as Redis's does), so leaving them made DBSIZE answer 1 after a
//! FLUSHALL (seen in the redis-py proxy-mode check) until active expiry came by.

#[path = "../../dht/tests/common/mod.rs"]
mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::Backend;
use dmc_dht::{DhtConfig, SystemClock};
use dmc_engine::{Engine, EngineConfig, Session};
use dmc_resp::Reply;

async fn run(engine: &Engine, s: &mut Session, words: &[&str]) -> Reply {
    let args = words
        .iter()
        .map(|w| Bytes::copy_from_slice(w.as_bytes()))
        .collect();
    engine.execute(s, args).await.0
}

#[tokio::test]
async fn flushall_removes_expired_keys_not_yet_reclaimed() {
    let h = common::open(
        Backend::Local,
        DhtConfig::default(),
        Arc::new(SystemClock),
        Duration::from_millis(5),
    )
    .await;
    let engine = Engine::new(
        h.dht.clone(),
        Arc::new(SystemClock),
        EngineConfig::default(),
    );
    let mut s = engine.new_session("t:1".into(), "t:2".into(), -1);
    for flush in ["FLUSHALL", "FLUSHDB"] {
        assert_eq!(
            run(&engine, &mut s, &["SET", "short", "v", "PX", "20"]).await,
            Reply::ok()
        );
        assert_eq!(
            run(&engine, &mut s, &["RPUSH", "list", "a"]).await,
            Reply::Int(1)
        );
        assert_eq!(
            run(&engine, &mut s, &["PEXPIRE", "list", "20"]).await,
            Reply::Int(1)
        );
        let deadline = Instant::now() + Duration::from_secs(5);
        while run(&engine, &mut s, &["EXISTS", "short", "list"]).await != Reply::Int(0) {
            assert!(Instant::now() < deadline, "the keys never expired");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // Expired, not reclaimed: DBSIZE still counts them, as Redis's does.
        assert_eq!(run(&engine, &mut s, &["DBSIZE"]).await, Reply::Int(2));
        assert_eq!(run(&engine, &mut s, &[flush]).await, Reply::ok());
        assert_eq!(
            run(&engine, &mut s, &["DBSIZE"]).await,
            Reply::Int(0),
            "{flush}"
        );
    }
}
