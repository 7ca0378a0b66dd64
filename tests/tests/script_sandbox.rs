//! Scripts as a boundary (issue 42), against a real agent: each hostile script of the
//! issue's table, and the sandbox's other walls. After each, the agent answers, and the
//! next script — another user's included — finds the environment untouched.

use std::time::{Duration, Instant};

use dmc_e2e::{Agent, Frame, RespConn, error_text, wait_until};

fn agent() -> (Agent, RespConn) {
    let agent = Agent::start(&[]).expect("agent");
    let conn = RespConn::connect(&agent.port()).expect("connect");
    (agent, conn)
}

fn eval(c: &mut RespConn, body: &str) -> Frame {
    c.cmd(&["EVAL", body, "0"]).expect("EVAL")
}

fn bulk(text: &str) -> Frame {
    Frame::BulkString(text.as_bytes().to_vec())
}

fn assert_answers(c: &mut RespConn) {
    assert_eq!(
        c.cmd(&["PING"]).expect("PING"),
        Frame::SimpleString(b"PONG".to_vec())
    );
}

/// The agent's resident memory, in bytes.
fn rss(agent: &Agent) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", agent.child.id()))
        .expect("the agent's /proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .expect("VmRSS")
        * 1024
}

/// Lua 5.1's pattern matcher recursed once per `?` without a bound: this aborted the
/// agent (`tokio-rt-worker has overflowed its stack`; redis-server 7.0 segfaults).
#[test]
fn a_pattern_that_recursed_without_bound_is_an_error() {
    let (_agent, mut c) = agent();
    let reply = eval(
        &mut c,
        "return string.find(string.rep('a',200000),string.rep('a?',200000))",
    );
    assert!(
        error_text(&reply).contains("pattern too complex"),
        "{reply:?}"
    );
    assert_answers(&mut c);
}

/// A table that holds itself made the reply conversion walk 3^64 paths (the agent grew
/// past 8 GB); a string named many times made replies and packed strings far larger
/// than the Lua memory the script held. Each is an error at once now, and the agent's
/// memory stays small.
#[test]
fn values_built_by_reference_are_refused_at_once() {
    let (agent, mut c) = agent();
    let started = Instant::now();
    let reply = eval(&mut c, "local t={} t[1]=t t[2]=t t[3]=t return t");
    assert!(
        error_text(&reply).contains("reached lua stack limit"),
        "{reply:?}"
    );
    let shared = "local s=string.rep('x',4194304) local t={} for i=1,1000 do t[i]=s end ";
    for (tail, wanted) in [
        ("return t", "too large"),
        ("return cjson.encode(t)", "Cannot serialise"),
        ("return cmsgpack.pack(t)", "MessagePack pack"),
        (
            "local a={'MSET'} for i=1,60 do a[#a+1]='k'..i a[#a+1]=s end return redis.call(unpack(a))",
            "arguments are too large",
        ),
    ] {
        let reply = eval(&mut c, &format!("{shared}{tail}"));
        assert!(error_text(&reply).contains(wanted), "{tail}: {reply:?}");
    }
    let reply = eval(
        &mut c,
        "local t={} for i=1,64 do t[i]=t end return cmsgpack.pack(t)",
    );
    assert!(error_text(&reply).contains("MessagePack pack"), "{reply:?}");
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "took {:?}",
        started.elapsed()
    );
    assert_answers(&mut c);
    let rss = rss(&agent);
    assert!(rss < 1 << 30, "the agent holds {rss} bytes");
}

/// Lua 5.1 runs bytecode unverified (CVE-2015-4335): neither EVAL nor `loadstring` /
/// `load` in a script accepts it.
#[test]
fn bytecode_is_refused_everywhere() {
    let (_agent, mut c) = agent();
    let Frame::BulkString(dump) = eval(&mut c, "return string.dump(function() return 42 end)")
    else {
        panic!("string.dump did not answer a string");
    };
    assert_eq!(dump.first(), Some(&0x1b), "a Lua 5.1 binary chunk");
    let reply = c.call(&[b"EVAL", &dump, b"0"]).expect("EVAL");
    assert!(
        error_text(&reply).contains("Error compiling script"),
        "{reply:?}"
    );
    assert_eq!(
        eval(
            &mut c,
            "local f, e = loadstring(string.dump(function() return 42 end)) return {tostring(f), e}"
        ),
        Frame::Array(vec![bulk("nil"), bulk("attempt to load a binary chunk")])
    );
    let reply = eval(
        &mut c,
        "local d = string.dump(function() return 42 end) local once = false \
         local f, e = load(function() if once then return nil end once = true return d end) \
         return tostring(f) .. ' ' .. e",
    );
    let Frame::BulkString(text) = reply else {
        panic!("load: {reply:?}");
    };
    let text = String::from_utf8_lossy(&text);
    assert!(
        text.starts_with("nil ") && text.ends_with("attempt to load a binary chunk"),
        "{text}"
    );
    assert_eq!(
        eval(&mut c, "return loadstring('return 7')()"),
        Frame::Integer(7)
    );
}

/// Redis's read-only tables (CVE-2022-24735's class): a script can change nothing that
/// the next script — here another user's — finds.
#[test]
fn no_script_changes_what_the_next_one_finds() {
    let (agent, mut c) = agent();
    for attack in [
        "redis.call = function() return 'pwned' end return 1",
        "redis.pcall = function() return 'pwned' end return 1",
        "cjson.encode = function() return 'pwned' end return 1",
        "getmetatable('').__index = {rep = function() return 'pwned' end} return 1",
        "getmetatable('').__index.rep = function() return 'pwned' end return 1",
        "string.rep = function() return 'pwned' end return 1",
        "rawset(string, 'rep', function() return 'pwned' end) return 1",
        "table.insert(redis, 'x') return 1",
        "setmetatable(_G, {}) return 1",
        "local g = getmetatable(_G) g.__index = {} return 1",
        "planted = 1 return 1",
        "rawset(_G, 'planted', 1) return 1",
        "_G.redis = {call = function() return 'pwned' end} return 1",
    ] {
        let reply = eval(&mut c, attack);
        assert!(
            error_text(&reply).contains("Attempt to modify a readonly table"),
            "{attack}: {reply:?}"
        );
    }
    let reply = eval(&mut c, "setfenv(0, {}) return 1");
    assert!(
        error_text(&reply).contains("cannot change environment"),
        "{reply:?}"
    );
    // A script's own environment change lasts for its run only.
    let planting = "if ARGV[1] == 'plant' then \
        setfenv(1, {redis = {call = function() return 'pwned' end}}) return 'planted' end \
        return redis.call('PING')";
    assert_eq!(
        c.cmd(&["EVAL", planting, "0", "plant"]).expect("EVAL"),
        bulk("planted")
    );
    assert_eq!(
        c.cmd(&["EVAL", planting, "0", "later"]).expect("EVAL"),
        Frame::SimpleString(b"PONG".to_vec())
    );
    assert_eq!(
        eval(&mut c, "collectgarbage('stop') return 1"),
        Frame::Integer(1)
    );
    // Another user, on another connection, finds everything as it was.
    assert_eq!(
        c.cmd(&["ACL", "SETUSER", "bob", "on", ">pw", "~*", "+@all"])
            .expect("ACL"),
        Frame::SimpleString(b"OK".to_vec())
    );
    let mut bob = RespConn::connect(&agent.port()).expect("connect");
    assert_eq!(
        bob.cmd(&["AUTH", "bob", "pw"]).expect("AUTH"),
        Frame::SimpleString(b"OK".to_vec())
    );
    assert_eq!(
        eval(
            &mut bob,
            "return {redis.call('PING'), ('ab'):rep(2), string.rep('c', 2), cjson.encode({1}), tostring(rawget(_G, 'planted'))}"
        ),
        Frame::Array(vec![
            Frame::SimpleString(b"PONG".to_vec()),
            bulk("abab"),
            bulk("cc"),
            bulk("[1]"),
            bulk("nil"),
        ])
    );
}

/// Commands Redis flags `noscript` are refused inside scripts; ACL (whose container has
/// no flags of its own) among them: a script changed this agent's users.
#[test]
fn acl_is_refused_inside_scripts() {
    let (_agent, mut c) = agent();
    for body in [
        "return redis.call('ACL','SETUSER','eve','on','nopass','+@all','~*')",
        "return redis.call('ACL','DELUSER','default')",
        "return redis.call('ACL','WHOAMI')",
        "return redis.call('CONFIG','SET','maxmemory','1')",
        "return redis.call('MULTI')",
    ] {
        let reply = eval(&mut c, body);
        assert!(
            error_text(&reply).contains("This Redis command is not allowed from script"),
            "{body}: {reply:?}"
        );
    }
    assert_eq!(
        c.cmd(&["ACL", "USERS"]).expect("ACL USERS"),
        Frame::Array(vec![bulk("default")])
    );
}

/// SCRIPT KILL stops a script inside a long C call (pattern matching) and one that
/// catches errors with `pcall`; `string.rep('', 2^31-1)` no longer runs for seconds.
#[test]
fn script_kill_stops_long_c_calls_and_pcall_loops() {
    let (agent, mut c) = agent();
    for body in [
        "return string.find(string.rep('a', 100000), '.-.-.-.-.-.-b')",
        "while true do pcall(function() while true do end end) end",
        "local co = coroutine.create(function() while true do end end) while true do coroutine.resume(co) end",
    ] {
        let mut script = RespConn::connect(&agent.port()).expect("connect");
        script
            .cmd(&["CLIENT", "SETNAME", "looper"])
            .expect("SETNAME");
        script
            .send(&[b"EVAL", body.as_bytes(), b"0"])
            .expect("send");
        wait_until("SCRIPT KILL answers OK", || {
            matches!(c.cmd(&["SCRIPT", "KILL"]), Ok(Frame::SimpleString(_)))
        });
        let reply = script.read().expect("the script's reply");
        assert!(
            error_text(&reply).contains("Script killed by user with SCRIPT KILL"),
            "{body}: {reply:?}"
        );
    }
    let started = Instant::now();
    assert_eq!(
        eval(&mut c, "return #string.rep('', 2^31-1)"),
        Frame::Integer(0)
    );
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_answers(&mut c);
}

/// FUNCTION LOAD stops a library's code after 500 ms, as Redis does.
#[test]
fn function_load_of_a_library_that_loops_times_out() {
    let (_agent, mut c) = agent();
    let started = Instant::now();
    let reply = c
        .cmd(&[
            "FUNCTION",
            "LOAD",
            "#!lua name=spin\nlocal a = 1 while true do a = a + 1 end",
        ])
        .expect("FUNCTION LOAD");
    assert!(
        error_text(&reply).contains("FUNCTION LOAD timeout"),
        "{reply:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    let reply = c
        .cmd(&[
            "FUNCTION",
            "LOAD",
            "#!lua name=spinc\nlocal x = string.find(string.rep('a', 100000), '.-.-.-.-.-.-b')",
        ])
        .expect("FUNCTION LOAD");
    assert!(
        error_text(&reply).contains("FUNCTION LOAD timeout"),
        "{reply:?}"
    );
    // Loading only registers: the library's own code may not run commands.
    let reply = c
        .cmd(&[
            "FUNCTION",
            "LOAD",
            "#!lua name=reads\nlocal v = redis.call('GET', 'x')\nredis.register_function('f', function() return v end)",
        ])
        .expect("FUNCTION LOAD");
    assert!(
        error_text(&reply).contains("not available while FUNCTION LOAD"),
        "{reply:?}"
    );
    assert_eq!(
        c.cmd(&["FUNCTION", "LIST"]).expect("FUNCTION LIST"),
        Frame::Array(vec![])
    );
    assert_answers(&mut c);
}

/// Two scripts that each declare one key and write the other's (and a script against
/// an EXEC of both keys) used to wait for each other's lock for good: both keys
/// answered BUSY and SCRIPT KILL changed nothing. Now a script that finds an undeclared
/// key held starts again with it locked in order, so all finish, and the keys are
/// writable at once.
#[test]
fn scripts_that_write_each_others_keys_both_finish() {
    let (agent, mut c) = agent();
    // Spins long enough that both scripts hold their declared key at once.
    let body = "local n = 0 for i = 1, 3000000 do n = n + 1 end \
                redis.call('SET', ARGV[1], ARGV[2]) return redis.call('GET', KEYS[1])";
    for round in 0..3 {
        let mut one = RespConn::connect(&agent.port()).expect("connect");
        let mut two = RespConn::connect(&agent.port()).expect("connect");
        let mut exec = RespConn::connect(&agent.port()).expect("connect");
        c.cmd(&["MSET", "ka", "a0", "kb", "b0"]).expect("MSET");
        let started = Instant::now();
        one.cmd(&["CLIENT", "SETNAME", "one"]).expect("name");
        one.send(&[b"EVAL", body.as_bytes(), b"1", b"ka", b"kb", b"from-one"])
            .expect("send");
        two.send(&[b"EVAL", body.as_bytes(), b"1", b"kb", b"ka", b"from-two"])
            .expect("send");
        exec.cmd(&["MULTI"]).expect("MULTI");
        exec.cmd(&["SET", "kb", "from-exec"]).expect("queued");
        exec.cmd(&["SET", "ka", "from-exec"]).expect("queued");
        exec.send(&[b"EXEC"]).expect("send");
        for (who, conn) in [("one", &mut one), ("two", &mut two)] {
            let reply = conn.read().expect("a script's reply");
            assert!(
                matches!(reply, Frame::BulkString(_)),
                "round {round}, script {who}: {reply:?}"
            );
        }
        let reply = exec.read().expect("EXEC's reply");
        assert!(matches!(reply, Frame::Array(_)), "round {round}: {reply:?}");
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "round {round} took {:?}",
            started.elapsed()
        );
        assert_eq!(
            c.cmd(&["SET", "ka", "after"]).expect("SET"),
            Frame::SimpleString(b"OK".to_vec())
        );
        assert_eq!(
            c.cmd(&["SET", "kb", "after"]).expect("SET"),
            Frame::SimpleString(b"OK".to_vec())
        );
    }
    assert_answers(&mut c);
}

/// A script that wrote and then spins holds its keys; SCRIPT KILL answers UNKILLABLE
/// (as Redis), and the keys are writable once it ends.
#[test]
fn a_script_that_wrote_is_unkillable_and_frees_its_keys_when_done() {
    let (agent, mut c) = agent();
    let mut script = RespConn::connect(&agent.port()).expect("connect");
    script
        .send(&[
            b"EVAL",
            b"redis.call('SET', KEYS[1], 'x') local n = 0 for i = 1, 20000000 do n = n + 1 end return n",
            b"1",
            b"held",
        ])
        .expect("send");
    wait_until("the script is running", || {
        match c.cmd(&["SCRIPT", "KILL"]) {
            Ok(Frame::Error(e)) => e.starts_with("UNKILLABLE"),
            _ => false,
        }
    });
    assert_eq!(
        script.read().expect("the script's reply"),
        Frame::Integer(20_000_000)
    );
    assert_eq!(
        c.cmd(&["SET", "held", "after"]).expect("SET"),
        Frame::SimpleString(b"OK".to_vec())
    );
}
