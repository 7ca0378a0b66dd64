//! The compute agent as users meet it: the real binary on a loopback port, driven by
//! `redis-cli` and `redis-benchmark`.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

use dmc_e2e::{Agent, MemoryNode};

#[test]
fn redis_cli_round_trips_string_and_key_commands() {
    // With a local cache (off by default over an embedded pool), so the cache's
    // invalidation on delete and expiry is exercised end to end.
    let agent = Agent::start(&["--local-cache-size", "16mb"]).unwrap();
    let cli = |args: &[&str]| agent.cli(args).unwrap().trim_end().to_string();
    assert_eq!(cli(&["PING"]), "PONG");
    assert_eq!(cli(&["SET", "k", "v"]), "OK");
    assert_eq!(cli(&["GET", "k"]), "v");
    assert_eq!(cli(&["SET", "k", "w", "NX"]), "");
    assert_eq!(cli(&["SET", "k", "w", "XX", "GET"]), "v");
    assert_eq!(cli(&["APPEND", "k", "xyz"]), "4");
    assert_eq!(cli(&["GETRANGE", "k", "1", "-1"]), "xyz");
    assert_eq!(cli(&["INCRBY", "n", "41"]), "41");
    assert_eq!(cli(&["INCR", "n"]), "42");
    assert_eq!(
        cli(&["INCR", "k"]),
        "ERR value is not an integer or out of range"
    );
    assert_eq!(cli(&["EXPIRE", "n", "100"]), "1");
    assert_eq!(cli(&["TTL", "n"]), "100");
    assert_eq!(cli(&["EXPIRE", "n", "50", "GT"]), "0");
    assert_eq!(cli(&["PERSIST", "n"]), "1");
    assert_eq!(cli(&["TTL", "n"]), "-1");
    assert_eq!(cli(&["MSET", "a", "1", "b", "2"]), "OK");
    assert_eq!(agent.cli(&["MGET", "a", "b", "nope"]).unwrap(), "1\n2\n\n");
    assert_eq!(cli(&["EXISTS", "a", "b", "nope"]), "2");
    assert_eq!(cli(&["DEL", "a", "b", "nope"]), "2");
    assert_eq!(
        cli(&["GET", "a"]),
        "",
        "a deleted key is not served from the local cache"
    );
    assert_eq!(cli(&["SET", "c", "1", "PX", "150"]), "OK");
    assert_eq!(cli(&["GET", "c"]), "1");
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(
        cli(&["GET", "c"]),
        "",
        "an expired key is not served from the local cache"
    );
    // Keyspace iteration and renames.
    assert_eq!(
        cli(&["MSET", "user:1", "a", "user:2", "b", "other", "c"]),
        "OK"
    );
    let mut keys: Vec<String> = agent
        .cli(&["KEYS", "user:*"])
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    keys.sort();
    assert_eq!(keys, vec!["user:1", "user:2"]);
    let mut seen = Vec::new();
    let mut cursor = "0".to_string();
    loop {
        let out = agent
            .cli(&["SCAN", &cursor, "MATCH", "user:*", "COUNT", "100"])
            .unwrap();
        let mut lines = out.lines();
        cursor = lines.next().unwrap().to_string();
        seen.extend(lines.map(String::from));
        if cursor == "0" {
            break;
        }
    }
    seen.sort();
    assert_eq!(
        seen,
        vec!["user:1", "user:2"],
        "SCAN returns every key once"
    );
    assert_eq!(cli(&["RENAME", "user:1", "user:9"]), "OK");
    assert_eq!(cli(&["GET", "user:9"]), "a");
    assert_eq!(cli(&["GET", "user:1"]), "");
    assert_eq!(cli(&["RENAMENX", "user:9", "user:2"]), "0");
    assert_eq!(cli(&["RENAME", "nope", "x"]), "ERR no such key");
    assert!(!cli(&["RANDOMKEY"]).is_empty());
    assert_eq!(cli(&["SELECT", "1"]), "OK");
    assert_eq!(cli(&["-n", "1", "GET", "k"]), "");
    assert_eq!(cli(&["-n", "1", "SET", "only-in-1", "x"]), "OK");
    assert_eq!(
        cli(&["-n", "1", "DBSIZE"]),
        "1",
        "DBSIZE counts its own database"
    );
    assert_eq!(cli(&["FLUSHDB"]), "OK");
    assert_eq!(cli(&["DBSIZE"]), "0");
    assert_eq!(cli(&["GET", "k"]), "", "FLUSHDB empties database 0");
    assert_eq!(
        cli(&["-n", "1", "GET", "only-in-1"]),
        "x",
        "and leaves database 1 alone"
    );
    assert_eq!(cli(&["FLUSHALL"]), "OK");
    assert_eq!(cli(&["-n", "1", "GET", "only-in-1"]), "");
    assert_eq!(
        cli(&["GET"]),
        "ERR wrong number of arguments for 'get' command"
    );
    assert!(cli(&["NOSUCH"]).starts_with("ERR unknown command 'NOSUCH'"));
    assert!(cli(&["INFO", "server"]).contains("redis_version:7.2.4"));
    // RESP3 and the raw/no-raw renderings.
    assert!(agent.cli(&["-3", "HELLO", "3"]).unwrap().contains("proto"));
    assert_eq!(cli(&["SET", "k", "wxyz"]), "OK");
    assert_eq!(
        agent.cli(&["--no-raw", "GET", "k"]).unwrap().trim_end(),
        "\"wxyz\""
    );
}

#[test]
fn redis_benchmark_completes_without_errors() {
    let agent = Agent::start(&[]).unwrap();
    let out = Command::new("redis-benchmark")
        .args([
            "-p",
            &agent.port(),
            "-t",
            "ping,set,get,incr,mset",
            "-P",
            "16",
            "-n",
            "20000",
            "-q",
        ])
        .output()
        .expect("redis-benchmark (apt-get install redis-tools)");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    for test in ["PING_MBULK", "SET", "GET", "INCR", "MSET"] {
        assert!(text.contains(&test.to_string()), "{test} ran: {text}");
    }
    assert!(!text.contains("ERR"), "no error replies: {text}");
    assert_eq!(
        agent.cli(&["GET", "counter:__rand_int__"]).unwrap().trim(),
        "20000",
        "every INCR counted"
    );
}

#[test]
fn redis_benchmark_collection_tests_complete_without_errors() {
    let agent = Agent::start(&[]).unwrap();
    let tests = "lpush,rpush,lpop,rpop,sadd,hset,spop,zadd,zpopmin,lrange_100,lrange_600";
    let out = Command::new("redis-benchmark")
        .args([
            "-p",
            &agent.port(),
            "-t",
            tests,
            "-P",
            "16",
            "-n",
            "3000",
            "-q",
        ])
        .output()
        .expect("redis-benchmark (apt-get install redis-tools)");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    for test in [
        "LPUSH",
        "RPUSH",
        "LPOP",
        "RPOP",
        "SADD",
        "HSET",
        "SPOP",
        "ZADD",
        "ZPOPMIN",
        "LRANGE_100",
        "LRANGE_600",
    ] {
        assert!(text.contains(test), "{test} ran: {text}");
    }
    assert!(
        !text.contains("ERR") && !text.contains("WRONGTYPE"),
        "no error replies: {text}"
    );
    // What the pushes left in redis-benchmark's list: the pops took as many as LPUSH and
    // RPUSH added, then the LRANGE tests pushed 600 of their own.
    let len: i64 = agent
        .cli(&["LLEN", "mylist"])
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(len >= 600, "mylist has {len} elements");
}

#[test]
fn malformed_input_gets_redis_errors_and_the_agent_keeps_serving() {
    let agent = Agent::start(&[]).unwrap();
    let exchange = |bytes: &[u8]| -> String {
        let mut s = TcpStream::connect(&agent.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(bytes).unwrap();
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out); // the agent closes after a protocol error
        String::from_utf8_lossy(&out).into_owned()
    };
    assert_eq!(
        exchange(b"*abc\r\n"),
        "-ERR Protocol error: invalid multibulk length\r\n"
    );
    assert_eq!(
        exchange(b"*1\r\n$1073741824\r\n"),
        "-ERR Protocol error: invalid bulk length\r\n"
    );
    assert_eq!(
        exchange(b"*1\r\n:5\r\n"),
        "-ERR Protocol error: expected '$', got ':'\r\n"
    );
    assert_eq!(
        exchange(b"SET \"unterminated\r\n"),
        "-ERR Protocol error: unbalanced quotes in request\r\n"
    );
    let garbage: Vec<u8> = (0..10_000u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 24) as u8)
        .collect();
    let _ = exchange(&garbage);
    // A half-sent request keeps its connection waiting, and nobody else.
    let mut half = TcpStream::connect(&agent.addr).unwrap();
    half.write_all(b"*2\r\n$3\r\nGET\r\n$5\r\nab").unwrap();
    assert_eq!(agent.cli(&["PING"]).unwrap().trim(), "PONG");
}

/// redis-cli in interactive mode, on a pseudo-terminal (`script`, TERM=dumb so its
/// line editor asks the terminal nothing): prompts, typed replies, and `HELP GET`
/// built from the agent's COMMAND DOCS.
#[test]
fn redis_cli_interactive_session() {
    let agent = Agent::start(&[]).unwrap();
    // `timeout` bounds the session should redis-cli ever wait for the terminal.
    let mut cli = Command::new("timeout")
        .args(["20", "script", "-qec"])
        .arg(format!("redis-cli -p {}", agent.port()))
        .arg("/dev/null")
        .env("TERM", "dumb")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("script (util-linux) runs redis-cli on a pty");
    let mut stdin = cli.stdin.take().unwrap();
    // Give redis-cli time to connect and print its first prompt before typing.
    std::thread::sleep(Duration::from_millis(500));
    stdin
        .write_all(b"SET greeting hello\nGET greeting\nINCR n\nHELP GET\nQUIT\n")
        .unwrap();
    // The pty keeps reading until QUIT; EOF after it ends `script`.
    std::thread::sleep(Duration::from_millis(500));
    drop(stdin);
    let out = cli.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).replace('\r', "");
    let prompt = format!("127.0.0.1:{}> ", agent.port());
    assert!(text.contains(&format!("{prompt}\"hello\"")), "{text}");
    assert!(text.contains(&format!("{prompt}(integer) 1")), "{text}");
    assert!(
        text.contains("Returns the string value of a key."),
        "{text}"
    );
}

/// A pipeline mixing GET runs (read as one batch) and runs of SETs and counter updates
/// (written together) with other writes, wrong arity, errors, a protocol error and
/// other databases answers exactly as running the commands one by one would.
#[test]
fn pipelined_gets_answer_in_order_around_writes() {
    let agent = Agent::start(&[]).unwrap();
    let cmd = |args: &[&str]| -> String {
        let mut c = format!("*{}\r\n", args.len());
        for a in args {
            c += &format!("${}\r\n{a}\r\n", a.len());
        }
        c
    };
    let mut pipeline = String::new();
    let mut expect = String::new();
    for (args, reply) in [
        (&["SET", "pa", "1"][..], "+OK\r\n"),
        (&["GET", "pa"], "$1\r\n1\r\n"),
        (&["GET", "pb"], "$-1\r\n"),
        (&["GET", "pa"], "$1\r\n1\r\n"),
        (&["SET", "pb", "22"], "+OK\r\n"),
        (&["get", "pb"], "$2\r\n22\r\n"),
        (
            &["GET", "pa", "extra"],
            "-ERR wrong number of arguments for 'get' command\r\n",
        ),
        (&["GET", "pa"], "$1\r\n1\r\n"),
        (&["SELECT", "1"], "+OK\r\n"),
        (&["GET", "pa"], "$-1\r\n"),
        (&["GET", "pb"], "$-1\r\n"),
        (&["DEL", "pa"], ":0\r\n"),
        (&["SELECT", "0"], "+OK\r\n"),
        (&["DEL", "pa"], ":1\r\n"),
        (&["GET", "pa"], "$-1\r\n"),
        (&["GET", "pb"], "$2\r\n22\r\n"),
        // Runs of SETs of distinct keys go concurrently; a repeated key ends the run.
        (&["SET", "sa", "1"], "+OK\r\n"),
        (&["SET", "sb", "2"], "+OK\r\n"),
        (&["SET", "sa", "3"], "+OK\r\n"),
        (&["SET", "sc", "4", "GET"], "$-1\r\n"),
        (&["SET", "sb", "5", "NX"], "$-1\r\n"),
        (&["SET", "sd", "6", "BOGUS"], "-ERR syntax error\r\n"),
        (&["GET", "sa"], "$1\r\n3\r\n"),
        (&["GET", "sb"], "$1\r\n2\r\n"),
        (&["GET", "sd"], "$-1\r\n"),
        // Counter updates join the runs of writes; each answers as it would alone.
        (&["INCR", "ca"], ":1\r\n"),
        (&["INCRBY", "cb", "5"], ":5\r\n"),
        (&["SET", "cs", "x"], "+OK\r\n"),
        (&["DECRBY", "sa", "10"], ":-7\r\n"),
        (
            &["INCR", "cs"],
            "-ERR value is not an integer or out of range\r\n",
        ),
        (
            &["INCRBY", "cd", "ten"],
            "-ERR value is not an integer or out of range\r\n",
        ),
        (&["DECR", "ca"], ":0\r\n"),
        (
            &["DECRBY", "ce", "-9223372036854775808"],
            "-ERR decrement would overflow\r\n",
        ),
        (
            &["INCR", "cf", "extra"],
            "-ERR wrong number of arguments for 'incr' command\r\n",
        ),
        (&["RPUSH", "cl", "a"], ":1\r\n"),
        (
            &["INCR", "cl"],
            "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
        ),
        (&["GET", "ca"], "$1\r\n0\r\n"),
        (&["GET", "cs"], "$1\r\nx\r\n"),
    ] {
        pipeline += &cmd(args);
        expect += reply;
    }
    // A protocol error after the run: everything before it is answered first.
    pipeline += "*1\r\n:5\r\n";
    expect += "-ERR Protocol error: expected '$', got ':'\r\n";
    let mut s = TcpStream::connect(&agent.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(pipeline.as_bytes()).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    assert_eq!(String::from_utf8_lossy(&out), expect);
}

/// CLIENT LIST shows every connection with its name and address, CLIENT KILL closes
/// the ones a filter selects (not the caller, by default), CLIENT REPLY drops replies.
#[test]
fn client_list_kill_and_reply_modes() {
    let agent = Agent::start(&[]).unwrap();
    let mut idle = TcpStream::connect(&agent.addr).unwrap();
    idle.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    idle.write_all(b"CLIENT SETNAME sleeper\r\n").unwrap();
    let mut ok = [0u8; 5];
    idle.read_exact(&mut ok).unwrap();
    assert_eq!(&ok, b"+OK\r\n");
    let list = agent.cli(&["CLIENT", "LIST"]).unwrap();
    let line = list
        .lines()
        .find(|l| l.contains(" name=sleeper "))
        .unwrap_or_else(|| panic!("no sleeper in {list}"));
    assert!(line.contains(" cmd=client "), "{line}");
    let addr = line
        .split(' ')
        .find_map(|f| f.strip_prefix("addr="))
        .unwrap()
        .to_string();
    assert_eq!(
        agent
            .cli(&["CLIENT", "KILL", "ADDR", &addr])
            .unwrap()
            .trim(),
        "1"
    );
    let mut rest = Vec::new();
    assert_eq!(idle.read_to_end(&mut rest).unwrap(), 0, "killed: closed");
    assert!(!agent.cli(&["CLIENT", "LIST"]).unwrap().contains("sleeper"));
    assert_eq!(
        agent.cli(&["CLIENT", "KILL", &addr]).unwrap().trim(),
        "ERR No such client"
    );
    // The caller is skipped by default. (Earlier redis-cli connections close
    // asynchronously: wait until the list holds only the one asking.)
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while agent
        .cli(&["CLIENT", "LIST"])
        .unwrap()
        .trim()
        .lines()
        .count()
        > 1
    {
        assert!(std::time::Instant::now() < deadline, "clients linger");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        agent
            .cli(&["CLIENT", "KILL", "SKIPME", "yes"])
            .unwrap()
            .trim(),
        "0"
    );

    let mut s = TcpStream::connect(&agent.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(
        b"CLIENT REPLY SKIP\r\nECHO skipped\r\nECHO one\r\nCLIENT REPLY OFF\r\n\
          ECHO off\r\nCLIENT REPLY ON\r\nECHO two\r\nQUIT\r\n",
    )
    .unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    assert_eq!(
        String::from_utf8_lossy(&out),
        "$3\r\none\r\n+OK\r\n$3\r\ntwo\r\n+OK\r\n"
    );
}

/// Redis's `timeout`: after CONFIG SET timeout 1 an idle client is closed, a busy one
/// is not; persistence settings DMC does not have are refused, not ignored.
#[test]
fn idle_clients_are_closed_after_timeout() {
    let agent = Agent::start(&[]).unwrap();
    assert_eq!(
        agent
            .cli(&["CONFIG", "SET", "timeout", "1"])
            .unwrap()
            .trim(),
        "OK"
    );
    let mut idle = TcpStream::connect(&agent.addr).unwrap();
    idle.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let started = std::time::Instant::now();
    let mut rest = Vec::new();
    assert_eq!(
        idle.read_to_end(&mut rest).unwrap(),
        0,
        "closed by the agent"
    );
    assert!(started.elapsed() < Duration::from_secs(8));
    assert!(
        agent
            .cli(&["CONFIG", "SET", "appendonly", "yes"])
            .unwrap()
            .starts_with("ERR CONFIG SET failed")
    );
    assert_eq!(
        agent.cli(&["CONFIG", "SET", "save", ""]).unwrap().trim(),
        "OK"
    );
}

/// An agent over two memory nodes (shm, r = 2) is SIGKILLed and restarted on the same
/// pool: every acknowledged write is there.
#[test]
fn sigkilled_agent_loses_no_acknowledged_write() {
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let n1 = MemoryNode::start(1, dirs[0].path(), "512mb").unwrap();
    let n2 = MemoryNode::start(2, dirs[1].path(), "512mb").unwrap();
    let flags = [
        "--pool-backend",
        "shm",
        "--pool-node",
        n1.endpoint.as_str(),
        "--pool-node",
        n2.endpoint.as_str(),
        "--replicas",
        "2",
    ];
    let mut agent = Agent::start(&flags).unwrap();
    let mut script = String::new();
    for i in 0..2000 {
        script.push_str(&format!("SET key:{i} value:{i}\n"));
    }
    let mut cli = Command::new("redis-cli")
        .args(["-p", &agent.port()])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    cli.stdin
        .take()
        .unwrap()
        .write_all(script.as_bytes())
        .unwrap();
    let out = cli.wait_with_output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| *l == "OK")
            .count(),
        2000,
        "all acknowledged"
    );
    agent.kill();
    let agent = Agent::start(&flags).unwrap();
    for i in (0..2000).step_by(97) {
        assert_eq!(
            agent.cli(&["GET", &format!("key:{i}")]).unwrap().trim(),
            format!("value:{i}")
        );
    }
    let keys: Vec<String> = (0..2000).map(|i| format!("key:{i}")).collect();
    let mut args = vec!["MGET"];
    args.extend(keys.iter().map(|k| k.as_str()));
    let all = agent.cli(&args).unwrap();
    assert_eq!(
        all.lines().filter(|l| l.starts_with("value:")).count(),
        2000
    );
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| {
            l.strip_prefix("VmRSS:")
                .map(|v| v.trim().trim_end_matches(" kB").parse().unwrap())
        })
        .unwrap()
}

/// Ten thousand idle connections: the agent keeps serving everyone else, with bounded
/// memory, and forgets them when they close.
#[test]
fn ten_thousand_idle_connections() {
    // This process and the agent (which inherits the limit) need the descriptors.
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit write/read only the struct passed by pointer.
    unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) };
    let want: libc::rlim_t = 10_500;
    if lim.rlim_cur < want {
        assert!(
            lim.rlim_max >= want,
            "RLIMIT_NOFILE hard limit {} is below {want}",
            lim.rlim_max
        );
        let raised = libc::rlimit {
            rlim_cur: lim.rlim_max,
            rlim_max: lim.rlim_max,
        };
        // SAFETY: as above.
        let ok = unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0;
        assert!(ok, "cannot raise RLIMIT_NOFILE to {}", lim.rlim_max);
    }
    let agent = Agent::start(&["--maxclients", "20000"]).unwrap();
    let pid = agent.child.id();
    let before = rss_kib(pid);
    let mut idle = Vec::with_capacity(10_000);
    for _ in 0..10_000 {
        idle.push(TcpStream::connect(&agent.addr).unwrap());
    }
    assert_eq!(
        agent.cli(&["SET", "still", "serving"]).unwrap().trim(),
        "OK"
    );
    assert_eq!(agent.cli(&["GET", "still"]).unwrap().trim(), "serving");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let info = agent.cli(&["INFO", "clients"]).unwrap();
        if info.contains("connected_clients:10001") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "agent did not see the connections: {info}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let during = rss_kib(pid);
    let per_conn = (during.saturating_sub(before)) * 1024 / 10_000;
    eprintln!(
        "agent RSS {before} KiB -> {during} KiB with 10 000 idle connections ({per_conn} B each)"
    );
    assert!(
        per_conn < 16 << 10,
        "an idle connection costs {per_conn} bytes"
    );
    drop(idle);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !agent
        .cli(&["INFO", "clients"])
        .unwrap()
        .contains("connected_clients:1\r")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "closed connections were not forgotten"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `--metrics-listen` serves Prometheus text with the agent's counters.
#[test]
fn prometheus_metrics_are_served() {
    // Port 0: a port picked beforehand could be taken meanwhile (10 000 client
    // connections of another test once took it as their source port).
    let agent = Agent::start(&["--metrics-listen", "127.0.0.1:0"]).unwrap();
    let metrics = agent
        .metrics
        .clone()
        .expect("the ready line names the metrics address");
    assert_eq!(agent.cli(&["SET", "m", "1"]).unwrap().trim(), "OK");
    let mut s = TcpStream::connect(&metrics).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).unwrap();
    assert!(body.starts_with("HTTP/1.0 200 OK"), "{body}");
    assert!(
        body.contains("# TYPE dmc_agent_commands_total counter"),
        "{body}"
    );
    let commands: f64 = body
        .lines()
        .find_map(|l| l.strip_prefix("dmc_agent_commands_total "))
        .and_then(|v| v.parse().ok())
        .unwrap();
    assert!(commands >= 1.0);
    // The SET was timed under its command family.
    let strings = body
        .lines()
        .find_map(|l| {
            l.strip_prefix("dmc_agent_command_duration_seconds_count{family=\"strings\"} ")
        })
        .and_then(|v| v.trim().parse::<f64>().ok())
        .unwrap_or(0.0);
    assert!(strings >= 1.0, "{body}");
}

/// `AUTH [user] password` and `HELLO 3 AUTH user password` follow Redis's rules for the
/// `default` user: the password is `requirepass`; any other user name is refused.
#[test]
fn auth_checks_the_user_and_the_password() {
    let agent = Agent::start(&["--requirepass", "s3cret"]).unwrap();
    let port = agent.port();
    let run = |script: &str| {
        let out = Command::new("redis-cli")
            .args(["-p", &port])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .and_then(|mut c| {
                c.stdin.take().unwrap().write_all(script.as_bytes())?;
                c.wait_with_output()
            })
            .unwrap();
        // redis-cli follows an error with an empty line when not on a terminal.
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| !l.is_empty())
            .map(|l| format!("{l}\n"))
            .collect::<String>()
    };
    assert_eq!(run("GET k\n").trim(), "NOAUTH Authentication required.");
    assert_eq!(
        run("AUTH someone s3cret\nGET k\n"),
        "WRONGPASS invalid username-password pair or user is disabled.\nNOAUTH Authentication required.\n"
    );
    assert_eq!(
        run("AUTH default wrong\n").trim(),
        "WRONGPASS invalid username-password pair or user is disabled."
    );
    assert_eq!(run("AUTH default s3cret\nSET k v\nGET k\n"), "OK\nOK\nv\n");
    assert_eq!(run("AUTH s3cret\nGET k\n"), "OK\nv\n");
    assert!(run("HELLO 3 AUTH default s3cret\nGET k\n").ends_with("v\n"));
    assert!(
        run("HELLO 3 AUTH other s3cret\n").starts_with("WRONGPASS"),
        "HELLO AUTH checks the user too"
    );
    drop(agent);
    // No requirepass: the default user is `nopass`.
    let open = Agent::start(&[]).unwrap();
    assert_eq!(
        open.cli(&["AUTH", "default", "anything"]).unwrap().trim(),
        "OK"
    );
    assert!(
        open.cli(&["AUTH", "anything"])
            .unwrap()
            .starts_with("ERR AUTH <password> called without")
    );
    assert!(
        open.cli(&["AUTH", "other", "x"])
            .unwrap()
            .starts_with("WRONGPASS")
    );
}

/// An agent that cannot start (its metrics address is taken) is reported as exited,
/// with its status, as soon as it exits: the harness used to wait out 20 s and say it
/// never reported ready.
#[test]
fn an_agent_that_cannot_start_is_reported_at_once() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let err = Agent::start(&["--metrics-listen", &addr])
        .err()
        .expect("the metrics address is taken");
    assert!(
        err.to_string().contains("exited before it was ready"),
        "{err:#}"
    );
}
