//! EVAL, EVALSHA, EVAL_RO and SCRIPT answer as redis-server 7.0 does (the expected
//! replies and error texts below were taken from it): conversions both ways, redis.call
//! and redis.pcall errors, the sandbox (no loadfile, read-only globals), read-only
//! scripts refusing writes, and a script's writes and reads of every type.

mod support;

use dmc_resp::Reply;
use support::{Backend, engine, run};

/// A bulk reply of the bytes written in hex.
fn hex(h: &str) -> Reply {
    let bytes: Vec<u8> = (0..h.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&h[i..i + 2], 16).expect("hex"))
        .collect();
    Reply::Bulk(bytes.into())
}

fn script_err(text: &str, sha: &str) -> Reply {
    Reply::Error(format!("{text} script: {sha}, on @user_script:1."))
}

#[tokio::test]
async fn scripts_answer_as_redis_does() {
    let (_h, engine) = engine(Backend::Local).await;
    let mut s = engine.new_session("t:1".into(), "t:0".into(), -1);
    let eval = |body: &'static str| ["EVAL", body, "0"];

    assert_eq!(run(&engine, &mut s, &["SET", "s", "x"]).await, Reply::ok());
    assert_eq!(
        run(&engine, &mut s, &eval("return redis.call('lpush','s','x')")).await,
        script_err(
            "WRONGTYPE Operation against a key holding the wrong kind of value",
            "1bae58f5987a5f51b4735899cd21a9fd9c5bd4db"
        )
    );
    assert_eq!(
        run(
            &engine,
            &mut s,
            &eval("return redis.pcall('lpush','s','x')")
        )
        .await,
        Reply::err("WRONGTYPE Operation against a key holding the wrong kind of value")
    );
    assert_eq!(
        run(&engine, &mut s, &eval("return foo")).await,
        script_err(
            "ERR user_script:1: Script attempted to access nonexistent global variable 'foo'",
            "47e30a5d10d5694f99208f9adc4fe3bf2450edbd"
        )
    );
    assert_eq!(
        run(&engine, &mut s, &eval("foo = 1")).await,
        script_err(
            "ERR user_script:1: Attempt to modify a readonly table",
            "e1934c7d679df0a682fa283afb2bdeec6495d463"
        )
    );
    assert_eq!(
        run(&engine, &mut s, &eval("return {1,2,{3,'a'},nil,5}")).await,
        Reply::Array(vec![
            Reply::Int(1),
            Reply::Int(2),
            Reply::Array(vec![Reply::Int(3), Reply::bulk("a")]),
        ])
    );
    assert_eq!(
        run(&engine, &mut s, &eval("return 3.99")).await,
        Reply::Int(3)
    );
    assert_eq!(
        run(&engine, &mut s, &eval("return {ok='FINE'}")).await,
        Reply::Status("FINE".into())
    );
    assert_eq!(
        run(&engine, &mut s, &eval("return {err='MYERR bad'}")).await,
        Reply::err("MYERR bad")
    );
    assert_eq!(
        run(&engine, &mut s, &eval("return redis.error_reply('X y')")).await,
        Reply::err("X y")
    );
    assert_eq!(
        run(
            &engine,
            &mut s,
            &["EVAL", "return redis.call('get', KEYS[1])", "1", "nokey"]
        )
        .await,
        Reply::Null
    );
    assert_eq!(
        run(&engine, &mut s, &eval("return (")).await,
        Reply::err(
            "ERR Error compiling script (new function): user_script:1: unexpected symbol near '<eof>'"
        )
    );
    assert_eq!(
        run(&engine, &mut s, &eval("error('boom')")).await,
        script_err(
            "ERR user_script:1: boom",
            "82903a0434f1503e152f89c03c9acd881a0e8150"
        )
    );
    assert_eq!(
        run(&engine, &mut s, &eval("return redis.call('nosuch')")).await,
        script_err(
            "ERR Unknown Redis command called from script",
            "206396248e12c6e742fd7296250433c8d7343b74"
        )
    );
    assert_eq!(
        run(
            &engine,
            &mut s,
            &["EVAL_RO", "return redis.call('set','a','b')", "0"]
        )
        .await,
        script_err(
            "ERR Write commands are not allowed from read-only scripts.",
            "ff967d0ae0e68b4f9e360fa91c54598bc25ad9b6"
        )
    );
    assert_eq!(
        run(
            &engine,
            &mut s,
            &["EVALSHA", "0000000000000000000000000000000000000000", "0"]
        )
        .await,
        Reply::err("NOSCRIPT No matching script. Please use EVAL.")
    );
    assert_eq!(
        run(&engine, &mut s, &eval("return redis.call('multi')")).await,
        script_err(
            "ERR This Redis command is not allowed from script",
            "c329a1a294be6bf95b44144f7502610661ae925a"
        )
    );
    assert_eq!(
        run(&engine, &mut s, &eval("return loadfile")).await,
        script_err(
            "ERR user_script:1: Script attempted to access nonexistent global variable 'loadfile'",
            "a08fbe72c95f67027cc9b6349f5d335b598397b7"
        )
    );
    assert_eq!(
        run(&engine, &mut s, &eval("return type(os)")).await,
        script_err(
            "ERR user_script:1: Script attempted to access nonexistent global variable 'os'",
            "88bfcb2247db0b6fa4925f3cddc3fd0651459f99"
        )
    );
    assert_eq!(
        run(&engine, &mut s, &eval("return redis.sha1hex('')")).await,
        Reply::bulk("da39a3ee5e6b4b0d3255bfef95601890afd80709")
    );
    assert_eq!(
        run(&engine, &mut s, &eval("return true")).await,
        Reply::Int(1)
    );
    assert_eq!(
        run(&engine, &mut s, &eval("return false")).await,
        Reply::Null
    );

    // SCRIPT LOAD / EXISTS / EVALSHA / FLUSH.
    let body = "return {KEYS[1], ARGV[1], redis.call('incrby', KEYS[1], ARGV[1])}";
    let Reply::Bulk(sha) = run(&engine, &mut s, &["SCRIPT", "LOAD", body]).await else {
        panic!("SCRIPT LOAD")
    };
    let sha = String::from_utf8_lossy(&sha).into_owned();
    assert_eq!(
        run(&engine, &mut s, &["SCRIPT", "EXISTS", &sha, "ffff"]).await,
        Reply::Array(vec![Reply::Int(1), Reply::Int(0)])
    );
    assert_eq!(
        run(&engine, &mut s, &["EVALSHA", &sha, "1", "counter", "5"]).await,
        Reply::Array(vec![
            Reply::bulk("counter"),
            Reply::bulk("5"),
            Reply::Int(5)
        ])
    );
    assert_eq!(
        run(&engine, &mut s, &["SCRIPT", "FLUSH"]).await,
        Reply::ok()
    );
    assert_eq!(
        run(&engine, &mut s, &["SCRIPT", "EXISTS", &sha]).await,
        Reply::Array(vec![Reply::Int(0)])
    );
    assert_eq!(
        run(&engine, &mut s, &["EVAL", "return 1", "2", "a"]).await,
        Reply::err("ERR Number of keys can't be greater than number of args")
    );

    // Every type from a script (blocking commands are refused, as in Redis 7).
    let body = "redis.call('rpush', KEYS[1], 'a', 'b'); redis.call('sadd', KEYS[2], 'm'); \
                redis.call('hset', KEYS[3], 'f', 'v'); redis.call('zadd', KEYS[4], 2, 'z'); \
                return {redis.call('lpop', KEYS[1]), redis.call('scard', KEYS[2]), \
                redis.call('hget', KEYS[3], 'f'), redis.call('zscore', KEYS[4], 'z')}";
    assert_eq!(
        run(
            &engine,
            &mut s,
            &["EVAL", body, "4", "{t}l", "{t}s", "{t}h", "{t}z"]
        )
        .await,
        Reply::Array(vec![
            Reply::bulk("a"),
            Reply::Int(1),
            Reply::bulk("v"),
            Reply::bulk("2"),
        ])
    );
    assert_eq!(
        run(
            &engine,
            &mut s,
            &eval("return redis.call('blpop','nothing',0)")
        )
        .await,
        script_err(
            "ERR This Redis command is not allowed from script",
            "b109b1578bc7fbc96e1c2229f1f4da4a93d3ffc5"
        )
    );
}

/// A script that loops forever holds its thread until SCRIPT KILL, sent from another
/// client, stops it; the agent serves meanwhile and afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn script_kill_stops_a_script_that_never_ends() {
    let (_h, engine) = engine(Backend::Local).await;
    let mut other = engine.new_session("t:2".into(), "t:0".into(), -1);
    assert_eq!(
        run(&engine, &mut other, &["SCRIPT", "KILL"]).await,
        Reply::err("NOTBUSY No scripts in execution right now.")
    );
    let looping = {
        let engine = engine.clone();
        tokio::spawn(async move {
            let mut s = engine.new_session("t:1".into(), "t:0".into(), -1);
            run(&engine, &mut s, &["EVAL", "while true do end", "0"]).await
        })
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        match run(&engine, &mut other, &["SCRIPT", "KILL"]).await {
            Reply::Simple("OK") => break,
            Reply::Error(e) if e.starts_with("NOTBUSY") => {
                assert!(
                    std::time::Instant::now() < deadline,
                    "the script never started"
                );
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            other => panic!("SCRIPT KILL: {other:?}"),
        }
    }
    assert_eq!(
        looping.await.expect("the script's task"),
        Reply::err(
            "ERR Script killed by user with SCRIPT KILL... script: 694a5fe1ddb97a4c6a1bf299d9537c7d3d0f84e7, on @user_script:1."
        )
    );
    assert_eq!(
        run(&engine, &mut other, &["SET", "after", "1"]).await,
        Reply::ok()
    );
}

/// A script past `busy-reply-threshold` makes commands on its keys answer BUSY (as
/// Redis answers every command then); commands on other keys run meanwhile, and after
/// SCRIPT KILL the key is served again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_on_a_long_scripts_keys_answer_busy_past_the_threshold() {
    let (_h, engine) = engine(Backend::Local).await;
    let mut other = engine.new_session("t:2".into(), "t:0".into(), -1);
    assert_eq!(
        run(
            &engine,
            &mut other,
            &["CONFIG", "GET", "busy-reply-threshold"]
        )
        .await,
        Reply::Map(vec![(
            Reply::bulk("busy-reply-threshold"),
            Reply::bulk("5000")
        )])
    );
    let looping = {
        let engine = engine.clone();
        tokio::spawn(async move {
            let mut s = engine.new_session("t:1".into(), "t:0".into(), -1);
            run(&engine, &mut s, &["EVAL", "while true do end", "1", "held"]).await
        })
    };
    // Under the threshold a reader of the key is served (the committed value).
    assert_eq!(
        run(&engine, &mut other, &["GET", "held"]).await,
        Reply::Null
    );
    assert_eq!(
        run(
            &engine,
            &mut other,
            &["CONFIG", "SET", "busy-reply-threshold", "0"]
        )
        .await,
        Reply::ok()
    );
    let busy = Reply::err(
        "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.",
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while run(&engine, &mut other, &["GET", "held"]).await != busy {
        assert!(
            std::time::Instant::now() < deadline,
            "the key never answered BUSY"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    // Other keys are served meanwhile.
    assert_eq!(
        run(&engine, &mut other, &["SET", "free", "1"]).await,
        Reply::ok()
    );
    assert_eq!(
        run(&engine, &mut other, &["SCRIPT", "KILL"]).await,
        Reply::ok()
    );
    let _ = looping.await;
    assert_eq!(
        run(&engine, &mut other, &["GET", "held"]).await,
        Reply::Null
    );
}

/// Scripts' `cjson` and `bit` libraries give what redis-server 7.0 gives (outputs taken
/// from it; only cjson.decode's error text differs: serde_json reports its own).
#[tokio::test]
async fn cjson_and_bit_answer_as_redis_does() {
    let (_h, engine) = engine(Backend::Local).await;
    let mut s = engine.new_session("t:1".into(), "t:0".into(), -1);
    let bulk = |t: &str| Reply::bulk(t.to_string());
    let ints = |v: &[i64]| Reply::Array(v.iter().map(|&n| Reply::Int(n)).collect());
    let cases: Vec<(&str, Reply)> = vec![
        ("return cjson.encode({1,2,3})", bulk("[1,2,3]")),
        ("return cjson.encode({a=1})", bulk(r#"{"a":1}"#)),
        ("return cjson.encode({})", bulk("{}")),
        (
            r#"return cjson.encode("a/b\"c\n\1")"#,
            bulk(r#""a\/b\"c\n\u0001""#),
        ),
        (
            "return cjson.encode({1.5, 0.1, 1e20, -0, 123456789012345})",
            bulk("[1.5,0.1,1e+20,-0,1.2345678901234e+14]"),
        ),
        ("return cjson.encode({[1]=1,[3]=3})", bulk("[1,null,3]")),
        (
            "return cjson.encode({true, false, cjson.null})",
            bulk("[true,false,null]"),
        ),
        (
            r#"return cjson.decode('[1,2,{"a":null}]')[3].a == cjson.null and 1 or 0"#,
            Reply::Int(1),
        ),
        (
            r#"return cjson.decode('{"x":[1,"two",3.5]}').x[2]"#,
            bulk("two"),
        ),
        ("return tostring(cjson.decode('3.25'))", bulk("3.25")),
        (
            "return {bit.band(0xff, 0x0f), bit.bor(1,2,4), bit.bxor(5,3), bit.bnot(0), \
             bit.lshift(1,31), bit.rshift(-1, 28), bit.arshift(-16, 2), bit.tobit(4294967297)}",
            ints(&[15, 7, 6, -1, -2147483648, 15, -4, 1]),
        ),
        (
            "return {bit.tohex(255), bit.tohex(-1, -4), bit.tohex(305419896, 2), \
             bit.rol(1, 33), bit.ror(1,1), bit.bswap(0x12345678)}",
            Reply::Array(vec![
                bulk("000000ff"),
                bulk("FFFF"),
                bulk("78"),
                Reply::Int(2),
                Reply::Int(-2147483648),
                Reply::Int(2018915346),
            ]),
        ),
    ];
    for (body, want) in cases {
        assert_eq!(
            run(&engine, &mut s, &["EVAL", body, "0"]).await,
            want,
            "{body}"
        );
    }
    for (body, text, sha) in [
        (
            "return cjson.encode({[1]=1,[20]=3})",
            "ERR user_script:1: Cannot serialise table: excessively sparse array",
            "599049a94af36a079b8c19b2e9635d7951cda076",
        ),
        (
            "return cjson.encode(math.huge)",
            "ERR user_script:1: Cannot serialise number: must not be NaN or Inf",
            "457685e99227c138c112e42b2109a0d5a6d1ad23",
        ),
        (
            "return cjson.encode(function() end)",
            "ERR user_script:1: Cannot serialise function: type not supported",
            "c6600573aa08cdf0af5da6e0ef682db69a3acc00",
        ),
    ] {
        assert_eq!(
            run(&engine, &mut s, &["EVAL", body, "0"]).await,
            script_err(text, sha),
            "{body}"
        );
    }
    // Nesting past 1000 levels is an error, not a recursion the script controls.
    let deep = "local t = {} local c = t for i = 1, 2000 do c[1] = {} c = c[1] end \
                return cjson.encode(t)";
    assert!(matches!(run(&engine, &mut s, &["EVAL", deep, "0"]).await,
        Reply::Error(e) if e.contains("Cannot serialise, excessive nesting (1001)")));
    let deep = "return cjson.decode(string.rep('[', 100000))";
    assert!(matches!(run(&engine, &mut s, &["EVAL", deep, "0"]).await,
        Reply::Error(e) if e.contains("recursion limit")));
}

/// `cmsgpack` packs the bytes redis-server 7.0 packs and unpacks what it unpacks
/// (expected bytes and replies taken from it).
#[tokio::test]
async fn cmsgpack_answers_as_redis_does() {
    let (_h, engine) = engine(Backend::Local).await;
    let mut s = engine.new_session("t:1".into(), "t:0".into(), -1);
    let packed = [
        (
            r#"return cmsgpack.pack({name="Joe"})"#,
            "81a46e616d65a34a6f65",
        ),
        (
            "return cmsgpack.pack(1, -1, 127, 128, 255, 256, 65536, -33, -129, -32769, \
             4294967296, -2147483649)",
            "01ff7fcc80ccffcd0100ce00010000d0dfd1ff7fd2ffff7fffcf0000000100000000d3ffffffff7fffffff",
        ),
        (
            "return cmsgpack.pack(1.5, 0.1, true, false, nil)",
            "ca3fc00000cb3fb999999999999ac3c2c0",
        ),
        (
            r#"return cmsgpack.pack({1,2,{3,4}}, "", {})"#,
            "930102920304a090",
        ),
        // Nesting past 16 levels packs as nil.
        (
            "local t = {} local c = t for i = 1, 20 do c[1] = {} c = c[1] end \
             return cmsgpack.pack(t)",
            "91919191919191919191919191919191c0",
        ),
    ];
    for (body, want) in packed {
        assert_eq!(
            run(&engine, &mut s, &["EVAL", body, "0"]).await,
            hex(want),
            "{body}"
        );
    }
    let bulk = |t: &str| Reply::bulk(t.to_string());
    let unpacked = [
        (
            r#"local t = cmsgpack.unpack(cmsgpack.pack({name="Joe", list={1,2,3}}))
               return {t.name, t.list[3]}"#,
            vec![bulk("Joe"), Reply::Int(3)],
        ),
        (
            r#"return {cmsgpack.unpack(cmsgpack.pack(1, "two", 3.5))}"#,
            vec![Reply::Int(1), bulk("two"), Reply::Int(3)],
        ),
        (
            "return {cmsgpack.unpack_one(cmsgpack.pack(1, 2, 3))}",
            vec![Reply::Int(1), Reply::Int(1)],
        ),
        (
            "return {cmsgpack.unpack_limit(cmsgpack.pack(1, 2, 3), 2)}",
            vec![Reply::Int(2), Reply::Int(1), Reply::Int(2)],
        ),
        (
            "return {cmsgpack.unpack_one(cmsgpack.pack(1, 2), 1)}",
            vec![Reply::Int(-1), Reply::Int(2)],
        ),
    ];
    for (body, want) in unpacked {
        assert_eq!(
            run(&engine, &mut s, &["EVAL", body, "0"]).await,
            Reply::Array(want),
            "{body}"
        );
    }
    // Truncated input is an error; a hostile length claims nothing it does not hold.
    assert_eq!(
        run(
            &engine,
            &mut s,
            &["EVAL", r#"return cmsgpack.unpack("\220\0")"#, "0"]
        )
        .await,
        script_err(
            "ERR user_script:1: Missing bytes in input.",
            "62f1b0d80697c8c3e0386e3c8ae3c65f409d7bef"
        )
    );
    let huge = r#"return cmsgpack.unpack("\223\255\255\255\255\1")"#;
    assert!(matches!(run(&engine, &mut s, &["EVAL", huge, "0"]).await,
        Reply::Error(e) if e.contains("Missing bytes in input.")));
    let deep = "return cmsgpack.unpack(string.rep('\\145', 100000))";
    assert!(matches!(run(&engine, &mut s, &["EVAL", deep, "0"]).await,
        Reply::Error(e) if e.contains("nesting too deep")));
}

/// `struct` packs and unpacks what redis-server 7.0 does, with its error texts (taken
/// from it).
#[tokio::test]
async fn struct_answers_as_redis_does() {
    let (_h, engine) = engine(Backend::Local).await;
    let mut s = engine.new_session("t:1".into(), "t:0".into(), -1);
    let packed = [
        (
            "return struct.pack('bBhHlLi3I2', -1, 255, -300, 65535, -5, 7, -70000, 513)",
            "ffffd4fefffffbffffffffffffff070000000000000090eefe0102",
        ),
        ("return struct.pack('!4 b i', 1, 2)", "0100000002000000"),
        ("return struct.pack('>d', 1.5)", "3ff8000000000000"),
        ("return struct.pack('c3 s', 'abcdef', 'xy')", "616263787900"),
    ];
    for (body, want) in packed {
        assert_eq!(
            run(&engine, &mut s, &["EVAL", body, "0"]).await,
            hex(want),
            "{body}"
        );
    }
    let bulk = |t: &str| Reply::bulk(t.to_string());
    for (body, want) in [
        (
            "return {struct.unpack('b c0', struct.pack('b', 3) .. 'xyzw')}",
            Reply::Array(vec![bulk("xyz"), Reply::Int(5)]),
        ),
        (
            "return {struct.unpack('>I h', struct.pack('>I h', 4000000000, -2))}",
            Reply::Array(vec![Reply::Int(4000000000), Reply::Int(-2), Reply::Int(7)]),
        ),
        ("return struct.size('>I i2 d !4 h')", Reply::Int(16)),
    ] {
        assert_eq!(
            run(&engine, &mut s, &["EVAL", body, "0"]).await,
            want,
            "{body}"
        );
    }
    for (body, text) in [
        (
            "return {struct.unpack('>i', 'ab')}",
            "bad argument #2 to 'unpack' (data string too short)",
        ),
        (
            "return struct.pack('c5', 'ab')",
            "bad argument #3 to 'pack' (string too short)",
        ),
        (
            "return struct.size('s')",
            "bad argument #1 to 'size' (option 's' has no fixed size)",
        ),
        (
            "return struct.pack('q', 1)",
            "bad argument #1 to 'pack' (invalid format option 'q')",
        ),
        (
            "return struct.pack('i40', 1)",
            "integral size 40 is larger than limit of 32",
        ),
        (
            "return {struct.unpack('s', 'abc')}",
            "unfinished string in data",
        ),
    ] {
        assert!(
            matches!(run(&engine, &mut s, &["EVAL", body, "0"]).await,
                Reply::Error(e) if e.starts_with(&format!("ERR user_script:1: {text} script:"))),
            "{body}"
        );
    }
}
