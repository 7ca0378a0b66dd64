//! FUNCTION and FCALL with the replies redis-server 7.0 gives (taken from it): a
//! library loads, lists with its functions, flags and code, is called by FCALL and
//! FCALL_RO (a function that writes refused by FCALL_RO), reports errors with the
//! function's name and its own line numbers, and is deleted and flushed.

mod support;

use bytes::Bytes;
use dmc_resp::Reply;
use support::{Backend, engine, run};

fn bulk(s: &str) -> Reply {
    Reply::Bulk(Bytes::copy_from_slice(s.as_bytes()))
}

fn err(s: &str) -> Reply {
    Reply::Error(s.to_string())
}

const LIB: &str = "#!lua name=lib
redis.register_function('f', function(keys, args)
  return redis.call('nosuch')
end)
redis.register_function{function_name='g', callback=function(keys, args) return redis.call('GET', keys[1]) end, flags={'no-writes'}, description='reads'}
redis.register_function('set', function(keys, args) return redis.call('SET', keys[1], args[1]) end)";

#[tokio::test]
async fn functions_load_list_call_and_go_as_redis_does() {
    let (_h, engine) = engine(Backend::Local).await;
    let mut s = engine.new_session("t:1".into(), "t:0".into(), -1);
    assert_eq!(
        run(&engine, &mut s, &["FUNCTION", "LOAD", LIB]).await,
        bulk("lib")
    );
    assert_eq!(
        run(&engine, &mut s, &["FUNCTION", "LOAD", LIB]).await,
        err("ERR Library 'lib' already exists")
    );
    assert_eq!(
        run(&engine, &mut s, &["FUNCTION", "LOAD", "REPLACE", LIB]).await,
        bulk("lib")
    );
    // Redis names the calling line (3); DMC names line 1 for a `redis.call` error
    // (docs/architecture.md, scripts).
    let Reply::Error(e) = run(&engine, &mut s, &["FCALL", "f", "0"]).await else {
        panic!("FCALL of a failing function");
    };
    assert!(
        e.starts_with("ERR Unknown Redis command called from script script: f, on @user_function:"),
        "{e}"
    );
    assert_eq!(
        run(&engine, &mut s, &["FCALL", "set", "1", "k", "v"]).await,
        Reply::Status("OK".into())
    );
    assert_eq!(
        run(&engine, &mut s, &["FCALL_RO", "g", "1", "k"]).await,
        bulk("v")
    );
    assert_eq!(
        run(&engine, &mut s, &["FCALL_RO", "set", "1", "k", "w"]).await,
        err("ERR Can not execute a script with write flag using *_ro command.")
    );
    assert_eq!(
        run(&engine, &mut s, &["FCALL", "nope", "0"]).await,
        err("ERR Function not found")
    );
    let Reply::Array(libs) = run(&engine, &mut s, &["FUNCTION", "LIST", "WITHCODE"]).await else {
        panic!("FUNCTION LIST");
    };
    let Some(Reply::Map(fields)) = libs.first() else {
        panic!("no library listed");
    };
    assert_eq!(fields[0], (bulk("library_name"), bulk("lib")));
    assert_eq!(fields[1], (bulk("engine"), bulk("LUA")));
    assert_eq!(fields[3], (bulk("library_code"), bulk(LIB)));
    let Reply::Array(functions) = &fields[2].1 else {
        panic!("functions");
    };
    assert_eq!(
        functions[1],
        Reply::Map(vec![
            (bulk("name"), bulk("g")),
            (bulk("description"), bulk("reads")),
            (
                bulk("flags"),
                Reply::Set(vec![Reply::Status("no-writes".into())])
            ),
        ])
    );
    // Load errors, worded as Redis's.
    for (code, reply) in [
        (
            "#!lua name=bad\nredis.register_function{function_name='h', callback=function() return 1 end, flags={'nope'}}",
            "ERR Error registering functions: ERR unknown flag given",
        ),
        ("#!lua\nreturn 1", "ERR Library name was not given"),
        ("#!py name=x\nreturn 1", "ERR Engine 'py' not found"),
        (
            "redis.register_function('f', function() return 1 end)",
            "ERR Missing library metadata",
        ),
        ("#!lua name=empty\nreturn 1", "ERR No functions registered"),
        (
            "#!lua name=other\nredis.register_function('g', function() return 1 end)",
            "ERR Function g already exists",
        ),
    ] {
        assert_eq!(
            run(&engine, &mut s, &["FUNCTION", "LOAD", code]).await,
            err(reply),
            "{code}"
        );
    }
    let Reply::Map(stats) = run(&engine, &mut s, &["FUNCTION", "STATS"]).await else {
        panic!("FUNCTION STATS");
    };
    assert_eq!(stats[0], (bulk("running_script"), Reply::Null));
    assert_eq!(
        run(&engine, &mut s, &["FUNCTION", "DELETE", "nolib"]).await,
        err("ERR Library not found")
    );
    assert_eq!(
        run(&engine, &mut s, &["FUNCTION", "DELETE", "lib"]).await,
        Reply::ok()
    );
    assert_eq!(
        run(&engine, &mut s, &["FCALL", "g", "1", "k"]).await,
        err("ERR Function not found")
    );
    assert_eq!(
        run(&engine, &mut s, &["FUNCTION", "LOAD", LIB]).await,
        bulk("lib")
    );
    assert_eq!(
        run(&engine, &mut s, &["FUNCTION", "FLUSH"]).await,
        Reply::ok()
    );
    assert_eq!(
        run(&engine, &mut s, &["FUNCTION", "LIST"]).await,
        Reply::Array(vec![])
    );
}

/// FUNCTION DUMP of `mylib` from redis-server 7.0.15 (its code LZF-compressed).
const REDIS_DUMP: &[u8] = b"\xf5\xc3@V@[\x1f#!lua name=mylib\nredis.register_\x0bfunction('my@\x0b\x02', @\x06`\x12\x11keys, args) return`\x0c\x07[1] end)\n\x00\x8dY6\xad\xc6\xe7\x07\xda";

#[tokio::test]
async fn a_redis_dump_restores_and_a_dump_round_trips() {
    let (_h, engine) = engine(Backend::Local).await;
    let mut s = engine.new_session("t:1".into(), "t:0".into(), -1);
    let restore = |payload: &[u8], policy: Option<&str>| {
        let mut args = vec![
            Bytes::from_static(b"FUNCTION"),
            Bytes::from_static(b"RESTORE"),
            Bytes::copy_from_slice(payload),
        ];
        args.extend(policy.map(|p| Bytes::copy_from_slice(p.as_bytes())));
        args
    };
    let (reply, _) = engine.execute(&mut s, restore(REDIS_DUMP, None)).await;
    assert_eq!(reply, Reply::ok());
    assert_eq!(
        run(&engine, &mut s, &["FCALL", "myfunc", "0", "hello"]).await,
        bulk("hello")
    );
    // Loaded already: APPEND refuses, nothing changes.
    let (reply, _) = engine
        .execute(&mut s, restore(REDIS_DUMP, Some("append")))
        .await;
    assert_eq!(reply, err("ERR Library mylib already exists"));
    assert_eq!(
        run(&engine, &mut s, &["FUNCTION", "LOAD", LIB]).await,
        bulk("lib")
    );
    let Reply::Bulk(dump) = run(&engine, &mut s, &["FUNCTION", "DUMP"]).await else {
        panic!("FUNCTION DUMP");
    };
    let listed = run(&engine, &mut s, &["FUNCTION", "LIST", "WITHCODE"]).await;
    run(&engine, &mut s, &["FUNCTION", "FLUSH"]).await;
    let (reply, _) = engine.execute(&mut s, restore(&dump, Some("FLUSH"))).await;
    assert_eq!(reply, Reply::ok());
    assert_eq!(
        run(&engine, &mut s, &["FUNCTION", "LIST", "WITHCODE"]).await,
        listed
    );
    // A damaged payload, a payload of something else, a bad policy.
    let mut damaged = dump.to_vec();
    damaged[3] ^= 1;
    let (reply, _) = engine.execute(&mut s, restore(&damaged, None)).await;
    assert_eq!(reply, err("ERR DUMP payload version or checksum are wrong"));
    let mut other = vec![0u8];
    dmc_engine::rdb::write_string(&mut other, b"x");
    let (reply, _) = engine
        .execute(&mut s, restore(&dmc_engine::rdb::finish(other), None))
        .await;
    assert_eq!(reply, err("ERR given type is not a function"));
    let (reply, _) = engine.execute(&mut s, restore(&dump, Some("MERGE"))).await;
    assert_eq!(
        reply,
        err("ERR Wrong restore policy given, value should be either FLUSH, APPEND or REPLACE.")
    );
}
