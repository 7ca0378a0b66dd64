//! Hostile clients against the real agent (issue 13): inputs that crashed or stalled it
//! once, and the counts it must keep exact while a client misbehaves. After each, the
//! agent still answers and other clients see nothing.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use dmc_e2e::{Agent, TestCluster, info_field, port_of, redis_cli};

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
        assert_eq!(victim.reply(), "", "the panicking connection is closed");
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
    // The even form is split per owner and every key reads back through this agent.
    let even: Vec<&str> = refs[..refs.len() - 1].to_vec();
    assert_eq!(redis_cli(&port, &even), "OK");
    assert_eq!(redis_cli(&port, &["GET", "key11"]), "v");
}
