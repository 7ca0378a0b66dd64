//! Hostile clients against the real agent (issue 13): inputs that crashed or stalled it
//! once, and the counts it must keep exact while a client misbehaves. After each, the
//! agent still answers and other clients see nothing.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use dmc_e2e::{Agent, PyClient, TestCluster, info_field, port_of, redis_cli};

/// A raw connection that sends bytes and reads one reply (or up to the timeout).
struct Raw(TcpStream);

impl Raw {
    fn connect(port: &str) -> Raw {
        let s = TcpStream::connect(format!("127.0.0.1:{port}")).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        Raw(s)
    }

    fn send(&mut self, bytes: &[u8]) {
        self.0.write_all(bytes).unwrap();
    }

    /// Reads until `want` bytes arrived, a CRLF-terminated reply is in, or EOF.
    fn reply(&mut self) -> String {
        let mut out = Vec::new();
        let mut buf = [0u8; 65536];
        loop {
            match self.0.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    out.extend_from_slice(&buf[..n]);
                    if out.ends_with(b"\r\n") {
                        break;
                    }
                }
            }
        }
        String::from_utf8_lossy(&out).into_owned()
    }
}

fn command(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// `CONFIG GET` with 100 000 stars overflowed the matcher's stack and aborted the
/// agent; `KEYS` with many stars against a key it cannot match burned a core for
/// more than 20 s. Both answer at once now.
#[test]
fn glob_bombs_answer_at_once() {
    let agent = Agent::start(&[]).unwrap();
    let port = agent.port();
    let mut c = Raw::connect(&port);
    let stars = vec![b'*'; 100_000];
    c.send(&command(&[b"CONFIG", b"GET", &stars]));
    let reply = c.reply();
    assert!(reply.starts_with('*'), "{reply}");
    assert!(reply.contains("maxmemory"), "{reply}");

    c.send(&command(&[b"SET", &[b'a'; 64], b"v"]));
    assert_eq!(c.reply(), "+OK\r\n");
    let bomb = "*a".repeat(20) + "*b";
    c.send(&command(&[b"KEYS", bomb.as_bytes()]));
    assert_eq!(c.reply(), "*0\r\n");
    c.send(&command(&[
        b"SCAN",
        b"0",
        b"MATCH",
        bomb.as_bytes(),
        b"COUNT",
        b"1000",
    ]));
    assert!(c.reply().starts_with("*2\r\n"));
    assert_eq!(redis_cli(&port, &["PING"]), "PONG");
    // A standalone agent has no peers: no one may claim to be one.
    c.send(&command(&[b"DMC.PEER", b""]));
    assert!(c.reply().starts_with("-NOPERM"));
}

/// A panic in one connection's task closes that connection only, and gives its
/// place in `connected_clients` back (the count was leaked before, and `maxclients`
/// eventually refused everyone).
#[test]
fn a_panicking_connection_leaks_no_count_and_hurts_no_other_client() {
    let agent = Agent::start_with_env(&[], &[("FAILPOINTS", "conn-panic=panic")]).unwrap();
    let port = agent.port();
    let mut bystander = Raw::connect(&port);
    bystander.send(&command(&[b"SET", b"k", b"v"]));
    assert_eq!(bystander.reply(), "+OK\r\n");
    for _ in 0..3 {
        let mut victim = Raw::connect(&port);
        victim.send(&command(&[b"PING"]));
        assert_eq!(victim.reply(), "+PONG\r\n");
        victim.send(&command(&[b"DMC.TEST.PANIC"]));
        let reply = victim.reply();
        assert!(
            !reply.contains("unknown command"),
            "the agent was built without its fail points: run the workspace's tests \
             (cargo test --workspace builds compute-agent with the failpoints feature)"
        );
        assert_eq!(reply, "", "the panicking connection is closed");
    }
    // The bystander and a redis-cli of INFO: exactly two clients.
    assert_eq!(info_field(&port, "clients", "connected_clients"), 2);
    bystander.send(&command(&[b"GET", b"k"]));
    assert_eq!(bystander.reply(), "$1\r\nv\r\n");
}

/// Malformed, oversized and half-sent requests get Redis's errors (or wait for the
/// rest) and the agent keeps serving everyone else.
#[test]
fn malformed_and_half_sent_requests_leave_the_agent_serving() {
    let agent = Agent::start(&[]).unwrap();
    let port = agent.port();
    let cases: [(&[u8], &str); 4] = [
        (
            b"*1\r\n$-5\r\n",
            "-ERR Protocol error: invalid bulk length\r\n",
        ),
        (
            b"*1\r\n:1\r\n",
            "-ERR Protocol error: expected '$', got ':'\r\n",
        ),
        (
            b"*x\r\n",
            "-ERR Protocol error: invalid multibulk length\r\n",
        ),
        (
            b"*1\r\n$1073741824\r\n",
            "-ERR Protocol error: invalid bulk length\r\n",
        ),
    ];
    for (wire, want) in cases {
        let mut c = Raw::connect(&port);
        c.send(wire);
        assert_eq!(c.reply(), want);
    }
    // Half-sent requests: the agent waits for the rest and serves others meanwhile.
    let mut halves = Vec::new();
    for i in 0..50 {
        let mut c = Raw::connect(&port);
        let wire = command(&[b"SET", format!("half{i}").as_bytes(), b"value"]);
        c.send(&wire[..wire.len() / 2]);
        halves.push((c, wire));
    }
    assert_eq!(redis_cli(&port, &["PING"]), "PONG");
    for (c, wire) in &mut halves {
        c.send(&wire[wire.len() / 2..]);
        assert_eq!(c.reply(), "+OK\r\n");
    }
    drop(halves);
    assert_eq!(redis_cli(&port, &["GET", "half7"]), "value");
}

/// Proxy mode: an MSET whose keys have several owners and whose last value is
/// missing indexed past its arguments while being split per owner, panicking the
/// connection's task. It gets the arity error now, from the agent that received it.
#[test]
fn odd_arity_multi_key_writes_in_proxy_mode_get_the_arity_error() {
    let c = TestCluster::start(
        &[
            "--region-size",
            "64mb",
            "--segment-size",
            "1mb",
            "--shards",
            "16",
        ],
        "log = \"warn\"\nrouting = \"proxy\"\ndrain-timeout = 5\n",
        2,
        "256mb",
    )
    .unwrap();
    let report = c.scale(2).unwrap();
    let port = port_of(&report["started"][0]);
    // Keys in many slots, so two owners are all but certain.
    let mut args: Vec<String> = vec!["MSET".into()];
    for i in 0..16 {
        args.push(format!("key{i}"));
        args.push("v".into());
    }
    args.push("dangling".into());
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let before = info_field(&port, "clients", "connected_clients");
    assert_eq!(
        redis_cli(&port, &refs),
        "ERR wrong number of arguments for 'mset' command"
    );
    assert_eq!(info_field(&port, "clients", "connected_clients"), before);
    // Forwarding between agents needs the cluster secret.
    let mut c = Raw::connect(&port);
    c.send(&command(&[b"DMC.PEER", b"wrong-secret"]));
    assert!(c.reply().starts_with("-NOPERM"));
    c.send(&command(&[b"DMC.PEER", dmc_e2e::TEST_SECRET.as_bytes()]));
    assert_eq!(c.reply(), "+OK\r\n");
    // The even form is split per owner and every key reads back through this agent.
    let even: Vec<&str> = refs[..refs.len() - 1].to_vec();
    assert_eq!(redis_cli(&port, &even), "OK");
    assert_eq!(redis_cli(&port, &["GET", "key11"]), "v");

    // The rest of the hostile set against a cluster member, with redis-py alongside.
    let client = PyClient::start(&port, &[]);
    let mut c = Raw::connect(&port);
    c.send(&command(&[b"CONFIG", b"GET", &vec![b'*'; 100_000]]));
    assert!(c.reply().starts_with('*'));
    let bomb = "*a".repeat(20) + "*b";
    c.send(&command(&[b"KEYS", bomb.as_bytes()]));
    assert!(c.reply().starts_with('*'));
    for wire in [&b"*1\r\n$-5\r\n"[..], b"*x\r\n", b"*1\r\n$1073741824\r\n"] {
        let mut bad = Raw::connect(&port);
        bad.send(wire);
        assert!(bad.reply().starts_with("-ERR Protocol error"));
    }
    // Odd-arity and cross-owner multi-key writes, pipelined, from one connection.
    let mut odd = Raw::connect(&port);
    let mut pipeline = Vec::new();
    for i in 0..50 {
        pipeline.extend(command(&[
            b"MSET",
            format!("p{i}").as_bytes(),
            b"1",
            format!("q{i}").as_bytes(),
        ]));
    }
    odd.send(&pipeline);
    let mut replies = String::new();
    while replies.matches("\r\n").count() < 50 {
        let more = odd.reply();
        assert!(!more.is_empty(), "the connection closed after {replies:?}");
        replies.push_str(&more);
    }
    assert_eq!(
        replies
            .matches("-ERR wrong number of arguments for 'mset' command")
            .count(),
        50
    );
    let result = client.finish();
    assert_eq!(result["errors"], 0, "{result}");
    assert_eq!(result["wrong"], 0, "{result}");
    assert_eq!(redis_cli(&port, &["PING"]), "PONG");
}

/// The client limits are settings with Redis's names, errors and bounds, and apply to
/// open connections at once.
#[test]
fn client_limits_are_settings_that_bite() {
    let agent = Agent::start(&[]).unwrap();
    let port = agent.port();
    let cli = |args: &[&str]| redis_cli(&port, args);
    // proto-max-bulk-len: a longer bulk is a protocol error.
    assert_eq!(cli(&["CONFIG", "SET", "proto-max-bulk-len", "1mb"]), "OK");
    assert_eq!(
        cli(&["CONFIG", "GET", "proto-max-bulk-len"]),
        "proto-max-bulk-len\n1048576"
    );
    assert_eq!(
        cli(&["CONFIG", "SET", "proto-max-bulk-len", "1000"]),
        "ERR CONFIG SET failed (possibly related to argument 'proto-max-bulk-len') - \
         argument must be between 1048576 and 9223372036854775807 inclusive"
    );
    let mut c = Raw::connect(&port);
    c.send(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$2000000\r\n");
    assert_eq!(c.reply(), "-ERR Protocol error: invalid bulk length\r\n");
    assert_eq!(cli(&["CONFIG", "SET", "proto-max-bulk-len", "512mb"]), "OK");

    // client-query-buffer-limit: a client whose unparsed input passes it is closed.
    assert_eq!(
        cli(&["CONFIG", "SET", "client-query-buffer-limit", "1mb"]),
        "OK"
    );
    let mut c = Raw::connect(&port);
    c.send(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$3000000\r\n");
    let chunk = vec![b'x'; 1 << 20];
    let mut closed = false;
    for _ in 0..2 {
        if c.0.write_all(&chunk).is_err() {
            closed = true;
        }
    }
    assert!(closed || c.reply().is_empty(), "the client was not closed");
    assert_eq!(
        cli(&["CONFIG", "SET", "client-query-buffer-limit", "1gb"]),
        "OK"
    );

    // client-output-buffer-limit normal: replies over the hard limit close the client.
    let mut setter = Raw::connect(&port);
    setter.send(&command(&[b"SET", b"big", &vec![b'v'; 2 << 20]]));
    assert_eq!(setter.reply(), "+OK\r\n");
    drop(setter);
    assert_eq!(
        cli(&[
            "CONFIG",
            "SET",
            "client-output-buffer-limit",
            "normal 1mb 0 0"
        ]),
        "OK"
    );
    assert_eq!(
        cli(&["CONFIG", "GET", "client-output-buffer-limit"]),
        "client-output-buffer-limit\nnormal 1048576 0 0 slave 268435456 67108864 60 pubsub 33554432 8388608 60"
    );
    let mut c = Raw::connect(&port);
    c.send(&command(&[b"GET", b"big"]));
    assert_eq!(
        c.reply(),
        "",
        "a reply over the hard limit closes the client"
    );
    assert_eq!(
        cli(&[
            "CONFIG",
            "SET",
            "client-output-buffer-limit",
            "normal 0 0 0"
        ]),
        "OK"
    );
    assert_eq!(cli(&["STRLEN", "big"]), (2 << 20).to_string());

    // maxclients: one more than allowed is refused with Redis's error.
    assert_eq!(cli(&["CONFIG", "SET", "maxclients", "3"]), "OK");
    let held: Vec<Raw> = (0..3).map(|_| Raw::connect(&port)).collect();
    let mut refused = Raw::connect(&port);
    refused.send(&command(&[b"PING"]));
    assert_eq!(refused.reply(), "-ERR max number of clients reached\r\n");
    drop(held);
    drop(refused);
    dmc_e2e::wait_until("the held clients to close", || {
        info_field(&port, "clients", "connected_clients") == 1
    });
    assert_eq!(cli(&["CONFIG", "SET", "maxclients", "10000"]), "OK");
}

/// Raises this process's open-file limit as far as allowed (the agent it starts
/// inherits it) and returns it.
fn raise_fd_limit() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit write and read the struct we own.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
        lim.rlim_cur = lim.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
    }
    lim.rlim_cur
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Many clients at once: a client that never reads its replies while another writes
/// 100 MB of values, thousands of idle connections, half-sent requests — and a redis-py
/// client alongside that sees no error. Afterwards the agent answers PING promptly,
/// `connected_clients` is exact and its memory stayed bounded.
#[test]
fn hostile_clients_alongside_a_well_behaved_one() {
    let fds = raise_fd_limit();
    let agent = Agent::start(&["--maxclients", "20000"]).unwrap();
    let port = agent.port();
    let pid = agent.child.id();
    let rss_before = rss_kib(pid);
    let client = PyClient::start(&port, &[]);

    // A slow reader: pipelines 2 000 GETs of a 1 MB value (2 GB of replies) and never
    // reads them. Its connection stalls; nothing of it piles up in the agent.
    let value = vec![b'x'; 1 << 20];
    let mut writer = Raw::connect(&port);
    writer.send(&command(&[b"SET", b"slow:v", &value]));
    assert_eq!(writer.reply(), "+OK\r\n");
    let mut slow = Raw::connect(&port);
    slow.0.set_nonblocking(true).unwrap();
    let get = command(&[b"GET", b"slow:v"]);
    let mut sent = 0;
    for _ in 0..2000 {
        match slow.0.write(&get) {
            Ok(n) if n == get.len() => sent += 1,
            _ => break,
        }
    }
    assert!(sent > 0);

    // Meanwhile another client writes 100 MB of values.
    for i in 0..100 {
        writer.send(&command(&[b"SET", format!("bulk:{i}").as_bytes(), &value]));
        assert_eq!(writer.reply(), "+OK\r\n");
    }

    // Thousands of idle connections.
    let idle_count = 10_000.min(fds.saturating_sub(1_000) as usize / 2);
    let idle: Vec<TcpStream> = (0..idle_count)
        .map(|_| TcpStream::connect(format!("127.0.0.1:{port}")).unwrap())
        .collect();
    dmc_e2e::wait_until("the idle connections to be counted", || {
        info_field(&port, "clients", "connected_clients") as usize >= idle_count
    });
    // Half-sent requests on a few of them.
    for s in idle.iter().take(100) {
        let mut s = s;
        let _ = s.write_all(b"*3\r\n$3\r\nSET\r\n$4\r\nhalf");
    }

    let mut probe = Raw::connect(&port);
    let start = std::time::Instant::now();
    probe.send(&command(&[b"PING"]));
    assert_eq!(probe.reply(), "+PONG\r\n");
    let ping = start.elapsed();
    eprintln!("PING with {idle_count} idle connections and a stalled reader: {ping:?}");
    assert!(ping < Duration::from_millis(100), "PING took {ping:?}");
    drop(probe);

    drop(idle);
    drop(slow);
    drop(writer);
    let result = client.finish();
    assert_eq!(result["errors"], 0, "{result}");
    assert_eq!(result["wrong"], 0, "{result}");
    dmc_e2e::wait_until("every hostile connection to be closed", || {
        info_field(&port, "clients", "connected_clients") == 1
    });
    // 100 MB of values, the local cache (64 MB) and the runtime; not 2 GB of replies.
    let grown = rss_kib(pid).saturating_sub(rss_before);
    eprintln!("agent RSS grew by {} MiB", grown / 1024);
    assert!(grown < 600 * 1024, "agent RSS grew by {} MiB", grown / 1024);
}

/// Before AUTH a client could send a million arguments or 512 MB bulks (Redis limits an
/// unauthenticated client to 10 arguments of 16 KiB, CVE-2021-32675): both are refused
/// now and the connection closed, while AUTH and a large write sent together still work.
#[test]
fn an_unauthenticated_client_is_held_to_redis_limits() {
    use dmc_e2e::{Frame, RespConn};
    let agent = Agent::start(&[]).unwrap();
    let port = agent.port();
    let mut admin = RespConn::connect(&port).unwrap();
    assert_eq!(
        admin.cmd(&["CONFIG", "SET", "requirepass", "pw"]).unwrap(),
        Frame::SimpleString(b"OK".to_vec())
    );
    let many: Vec<&[u8]> = vec![b"PING"; 11];
    let mut c = RespConn::connect(&port).unwrap();
    let reply = c.call(&many).unwrap();
    assert_eq!(
        dmc_e2e::error_text(&reply),
        "ERR Protocol error: unauthenticated multibulk length"
    );
    assert!(c.cmd(&["PING"]).is_err(), "the connection is closed");
    let mut c = RespConn::connect(&port).unwrap();
    let big = vec![b'x'; 16 * 1024 + 1];
    let reply = c.call(&[b"ECHO", &big]).unwrap();
    assert_eq!(
        dmc_e2e::error_text(&reply),
        "ERR Protocol error: unauthenticated bulk length"
    );
    // AUTH and a 1 MB write in one packet: the write is parsed after AUTH lifted the
    // limits.
    let mut c = Raw::connect(&port);
    let value = vec![b'v'; 1 << 20];
    let mut both = command(&[b"AUTH", b"pw"]);
    both.extend(command(&[b"SET", b"big", &value]));
    c.send(&both);
    let mut replies = c.reply();
    if !replies.contains("+OK\r\n+OK\r\n") {
        replies.push_str(&c.reply());
    }
    assert_eq!(replies, "+OK\r\n+OK\r\n");
}

/// Input that arrived while a command blocked (`BLPOP k 0`) was never checked against
/// `client-query-buffer-limit`: the buffer grew without bound. Now the client is closed
/// as soon as it passes the limit, as Redis does after every read.
#[test]
fn a_blocked_client_is_held_to_the_query_buffer_limit() {
    use dmc_e2e::{Frame, RespConn};
    let agent = Agent::start(&[]).unwrap();
    let port = agent.port();
    let mut admin = RespConn::connect(&port).unwrap();
    assert_eq!(
        admin
            .cmd(&["CONFIG", "SET", "client-query-buffer-limit", "1mb"])
            .unwrap(),
        Frame::SimpleString(b"OK".to_vec())
    );
    let mut c = Raw::connect(&port);
    c.send(&command(&[b"BLPOP", b"never", b"0"]));
    // A bulk announced as 8 MB, sent 2 MB in: held unparsed behind the BLPOP.
    c.send(b"*2\r\n$3\r\nSET\r\n$8000000\r\n");
    let chunk = vec![b'x'; 64 << 10];
    let mut closed = false;
    for _ in 0..32 {
        if c.0.write_all(&chunk).is_err() {
            closed = true;
            break;
        }
    }
    if !closed {
        // The agent closes the connection (the BLPOP may answer first): reads end at
        // EOF or a reset, not at the 30 s read timeout.
        let mut buf = [0u8; 1024];
        loop {
            match c.0.read(&mut buf) {
                Ok(0) => break,
                Ok(_) => continue,
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
                Err(e) => panic!("the blocked client was not closed: {e}"),
            }
        }
    }
    assert_eq!(
        admin.cmd(&["PING"]).unwrap(),
        Frame::SimpleString(b"PONG".to_vec())
    );
}

/// BLPOP with one key named 300 000 times registered and unregistered it that many
/// times, O(N²) under the agent's one waiters lock (Redis de-duplicates): it now times
/// out as any BLPOP does.
#[test]
fn a_blocking_pop_of_one_key_named_many_times_times_out() {
    use dmc_e2e::{Frame, RespConn};
    let agent = Agent::start(&[]).unwrap();
    let mut c = RespConn::connect(&agent.port()).unwrap();
    let mut args: Vec<&[u8]> = vec![b"BLPOP"];
    args.extend(std::iter::repeat_n(&b"same"[..], 300_000));
    args.push(b"0.1");
    assert_eq!(c.call(&args).unwrap(), Frame::Null);
    assert_eq!(
        c.cmd(&["PING"]).unwrap(),
        Frame::SimpleString(b"PONG".to_vec())
    );
}

/// `SORT … GET` reserved `elements × GETs` replies before reading anything: 100 000
/// elements and 500 000 GETs asked for 1.6 TB and aborted the agent. A reply past
/// 64 Mi elements is refused now.
#[test]
fn a_sort_that_would_answer_without_bound_is_refused() {
    use dmc_e2e::{Frame, RespConn};
    let agent = Agent::start(&[]).unwrap();
    let mut c = RespConn::connect(&agent.port()).unwrap();
    let values: Vec<String> = (0..100_000).map(|i| i.to_string()).collect();
    let mut push: Vec<&[u8]> = vec![b"RPUSH", b"many"];
    push.extend(values.iter().map(|v| v.as_bytes()));
    assert_eq!(c.call(&push).unwrap(), Frame::Integer(100_000));
    let mut sort: Vec<&[u8]> = vec![b"SORT", b"many", b"BY", b"nosort"];
    for _ in 0..500_000 {
        sort.extend([&b"GET"[..], &b"#"[..]]);
    }
    let reply = c.call(&sort).unwrap();
    assert!(
        dmc_e2e::error_text(&reply).contains("more than"),
        "{reply:?}"
    );
    assert_eq!(
        c.cmd(&["PING"]).unwrap(),
        Frame::SimpleString(b"PONG".to_vec())
    );
}

/// UNSUBSCRIBE of a client with N channels searched and shifted a list per channel,
/// O(N²): 200 000 channels now leave at once.
#[test]
fn leaving_many_channels_is_linear() {
    use dmc_e2e::{Frame, RespConn};
    let agent = Agent::start(&[]).unwrap();
    let mut c = RespConn::connect(&agent.port()).unwrap();
    let names: Vec<String> = (0..200_000).map(|i| format!("ch{i}")).collect();
    let mut subscribe: Vec<&[u8]> = vec![b"SUBSCRIBE"];
    subscribe.extend(names.iter().map(|n| n.as_bytes()));
    c.send(&subscribe).unwrap();
    for _ in 0..names.len() {
        c.read().unwrap();
    }
    c.send(&[b"UNSUBSCRIBE"]).unwrap();
    let mut last = None;
    for _ in 0..names.len() {
        last = Some(c.read().unwrap());
    }
    let Some(Frame::Array(confirmation)) = last else {
        panic!("the last confirmation: {last:?}");
    };
    assert_eq!(confirmation.get(2), Some(&Frame::Integer(0)));
    // No longer a subscriber: PING answers as usual.
    assert_eq!(
        c.cmd(&["PING"]).unwrap(),
        Frame::SimpleString(b"PONG".to_vec())
    );
}
