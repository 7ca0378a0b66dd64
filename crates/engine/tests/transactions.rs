//! MULTI/EXEC/DISCARD/WATCH/UNWATCH as Redis 7 answers them: queued replies, EXEC's
//! array of replies (a run-time error is that command's reply), EXECABORT after a
//! refused command, WATCH aborting EXEC (a null array) when another client changed a
//! watched key or it expired, and every type's commands, blocking ones included,
//! inside EXEC.

mod support;

use std::time::{Duration, Instant};

use dmc_resp::Reply;
use support::{Backend, engine, run};

const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

fn queued() -> Reply {
    Reply::Simple("QUEUED")
}

#[tokio::test]
async fn transactions_queue_run_abort_and_watch_as_redis_does() {
    let (_h, engine) = engine(Backend::Local).await;
    let mut a = engine.new_session("t:1".into(), "t:0".into(), -1);
    let mut b = engine.new_session("t:2".into(), "t:0".into(), -1);

    // A transaction of every type; a run-time error is that command's reply only.
    assert_eq!(run(&engine, &mut a, &["MULTI"]).await, Reply::ok());
    for cmd in [
        &["SET", "n", "1"][..],
        &["INCR", "n"],
        &["LPUSH", "n", "x"],
        &["RPUSH", "l", "a", "b"],
        &["SADD", "s", "m"],
        &["HSET", "h", "f", "v"],
        &["ZADD", "z", "1", "m"],
        &["LPOP", "l"],
        &["GET", "n"],
    ] {
        assert_eq!(run(&engine, &mut a, cmd).await, queued(), "{cmd:?}");
    }
    assert_eq!(
        run(&engine, &mut a, &["EXEC"]).await,
        Reply::Array(vec![
            Reply::ok(),
            Reply::Int(2),
            Reply::err(WRONGTYPE),
            Reply::Int(2),
            Reply::Int(1),
            Reply::Int(1),
            Reply::Int(1),
            Reply::bulk("a"),
            Reply::bulk("2"),
        ])
    );
    assert_eq!(
        run(&engine, &mut a, &["LRANGE", "l", "0", "-1"]).await,
        Reply::Array(vec![Reply::bulk("b")])
    );

    // A command refused while queuing aborts the whole transaction.
    assert_eq!(run(&engine, &mut a, &["MULTI"]).await, Reply::ok());
    assert_eq!(run(&engine, &mut a, &["SET", "n", "9"]).await, queued());
    assert!(
        matches!(run(&engine, &mut a, &["NOSUCH", "x"]).await, Reply::Error(e) if e.starts_with("ERR unknown command"))
    );
    assert!(
        matches!(run(&engine, &mut a, &["GET"]).await, Reply::Error(e) if e.contains("wrong number"))
    );
    assert_eq!(
        run(&engine, &mut a, &["EXEC"]).await,
        Reply::err("EXECABORT Transaction discarded because of previous errors.")
    );
    assert_eq!(run(&engine, &mut a, &["GET", "n"]).await, Reply::bulk("2"));

    // DISCARD, and the errors of misplaced transaction commands.
    assert_eq!(
        run(&engine, &mut a, &["EXEC"]).await,
        Reply::err("ERR EXEC without MULTI")
    );
    assert_eq!(
        run(&engine, &mut a, &["DISCARD"]).await,
        Reply::err("ERR DISCARD without MULTI")
    );
    assert_eq!(run(&engine, &mut a, &["MULTI"]).await, Reply::ok());
    assert_eq!(
        run(&engine, &mut a, &["MULTI"]).await,
        Reply::err("ERR MULTI calls can not be nested")
    );
    assert_eq!(
        run(&engine, &mut a, &["WATCH", "n"]).await,
        Reply::err("ERR WATCH inside MULTI is not allowed")
    );
    assert_eq!(run(&engine, &mut a, &["SET", "n", "9"]).await, queued());
    assert_eq!(run(&engine, &mut a, &["DISCARD"]).await, Reply::ok());
    assert_eq!(run(&engine, &mut a, &["GET", "n"]).await, Reply::bulk("2"));

    // WATCH: another client's write of a watched key aborts EXEC; an untouched one
    // does not; UNWATCH forgets.
    assert_eq!(
        run(&engine, &mut a, &["WATCH", "n", "other"]).await,
        Reply::ok()
    );
    assert_eq!(run(&engine, &mut b, &["SET", "n", "b"]).await, Reply::ok());
    assert_eq!(run(&engine, &mut a, &["MULTI"]).await, Reply::ok());
    assert_eq!(run(&engine, &mut a, &["SET", "n", "a"]).await, queued());
    assert_eq!(run(&engine, &mut a, &["EXEC"]).await, Reply::NullArray);
    assert_eq!(run(&engine, &mut a, &["GET", "n"]).await, Reply::bulk("b"));
    assert_eq!(run(&engine, &mut a, &["WATCH", "n"]).await, Reply::ok());
    assert_eq!(run(&engine, &mut a, &["MULTI"]).await, Reply::ok());
    assert_eq!(run(&engine, &mut a, &["SET", "n", "a"]).await, queued());
    assert_eq!(
        run(&engine, &mut a, &["EXEC"]).await,
        Reply::Array(vec![Reply::ok()])
    );
    assert_eq!(run(&engine, &mut a, &["WATCH", "n"]).await, Reply::ok());
    assert_eq!(run(&engine, &mut b, &["SET", "n", "b"]).await, Reply::ok());
    assert_eq!(run(&engine, &mut a, &["UNWATCH"]).await, Reply::ok());
    assert_eq!(run(&engine, &mut a, &["MULTI"]).await, Reply::ok());
    assert_eq!(run(&engine, &mut a, &["SET", "n", "a"]).await, queued());
    assert_eq!(
        run(&engine, &mut a, &["EXEC"]).await,
        Reply::Array(vec![Reply::ok()])
    );

    // A collection change and a TTL change of a watched key abort too, and so does
    // its expiry.
    assert_eq!(run(&engine, &mut a, &["WATCH", "l"]).await, Reply::ok());
    assert_eq!(
        run(&engine, &mut b, &["RPUSH", "l", "c"]).await,
        Reply::Int(2)
    );
    assert_eq!(run(&engine, &mut a, &["MULTI"]).await, Reply::ok());
    assert_eq!(run(&engine, &mut a, &["LPOP", "l"]).await, queued());
    assert_eq!(run(&engine, &mut a, &["EXEC"]).await, Reply::NullArray);
    assert_eq!(run(&engine, &mut a, &["WATCH", "l"]).await, Reply::ok());
    assert_eq!(
        run(&engine, &mut b, &["EXPIRE", "l", "100"]).await,
        Reply::Int(1)
    );
    assert_eq!(run(&engine, &mut a, &["MULTI"]).await, Reply::ok());
    assert_eq!(run(&engine, &mut a, &["LPOP", "l"]).await, queued());
    assert_eq!(run(&engine, &mut a, &["EXEC"]).await, Reply::NullArray);
    assert_eq!(
        run(&engine, &mut a, &["SET", "short", "v", "PX", "30"]).await,
        Reply::ok()
    );
    assert_eq!(run(&engine, &mut a, &["WATCH", "short"]).await, Reply::ok());
    let deadline = Instant::now() + Duration::from_secs(5);
    while run(&engine, &mut b, &["EXISTS", "short"]).await != Reply::Int(0) {
        assert!(Instant::now() < deadline, "the key never expired");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(run(&engine, &mut a, &["MULTI"]).await, Reply::ok());
    assert_eq!(run(&engine, &mut a, &["SET", "short", "w"]).await, queued());
    assert_eq!(run(&engine, &mut a, &["EXEC"]).await, Reply::NullArray);

    // A blocking pop inside EXEC does not block: it answers as if it timed out.
    assert_eq!(run(&engine, &mut a, &["MULTI"]).await, Reply::ok());
    assert_eq!(
        run(&engine, &mut a, &["BLPOP", "empty", "0"]).await,
        queued()
    );
    assert_eq!(
        run(&engine, &mut a, &["BZPOPMIN", "z", "0"]).await,
        queued()
    );
    let started = Instant::now();
    let got = run(&engine, &mut a, &["EXEC"]).await;
    assert!(started.elapsed() < Duration::from_secs(5), "EXEC blocked");
    assert_eq!(
        got,
        Reply::Array(vec![
            Reply::NullArray,
            Reply::Array(vec![Reply::bulk("z"), Reply::bulk("m"), Reply::Double(1.0)]),
        ])
    );
}
