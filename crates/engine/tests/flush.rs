//! FLUSHALL and FLUSHDB remove keys that expired but were not reclaimed yet: DBSIZE
//! counts those (as Redis's does), so leaving them made DBSIZE answer 1 after a
//! FLUSHALL (seen in the redis-py proxy-mode check) until active expiry came by.

mod support;

use std::time::{Duration, Instant};

use dmc_resp::Reply;
use support::{Backend, engine, run};

#[tokio::test]
async fn flushall_removes_expired_keys_not_yet_reclaimed() {
    let (_h, engine) = engine(Backend::Local).await;
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
