//! Script chaos (issue 42): for 60 s, 8 clients over two agents run randomly chosen
//! scripts — declared and undeclared keys, errors, deep and self-holding tables, long
//! loops, SCRIPT KILL, connections dropped mid-script — beside plain writers.
//! Afterwards every key is writable through both agents, both answer PING at once, and
//! each agent's memory stays under a stated bound.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use dmc_e2e::{Frame, RespConn, TestCluster, port_of};

/// How long the clients run.
const CHAOS: Duration = Duration::from_secs(60);
/// Keys per group the scripts and writers share (few, so they collide).
const KEYS: u64 = 8;
/// Hash-tag groups (slots) of keys.
const GROUPS: u64 = 4;
/// `lua-memory-limit` set on each agent, and the resident memory each may reach.
const LUA_MEMORY: &str = "256mb";
const RSS_BOUND: u64 = 1 << 30;

/// xorshift64*: a client's choices, repeatable from its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// Two keys of [`GROUPS`] hash tags (slots): a script declares the first and
    /// writes the second, mostly of the same group (one owner), sometimes of another
    /// (which the other agent may own: refused there, as Redis Cluster does).
    fn keys(&mut self) -> (String, String) {
        let g = self.below(GROUPS);
        let h = if self.below(4) == 0 {
            self.below(GROUPS)
        } else {
            g
        };
        (
            format!("chaos:{{g{g}}}:k{}", self.below(KEYS)),
            format!("chaos:{{g{h}}}:k{}", self.below(KEYS)),
        )
    }
}

/// One client's loop until `stop`; counts the replies it got.
fn client(port: String, seed: u64, stop: Arc<AtomicBool>, replies: Arc<AtomicU64>) {
    let mut rng = Rng(seed | 1);
    let mut c = RespConn::connect(&port).expect("connect");
    while !stop.load(Ordering::Relaxed) {
        let (k1, k2) = rng.keys();
        let n = rng.below(100).to_string();
        let op = rng.below(9);
        let reply = match op {
            // A script writing its declared key and one it did not declare.
            0 | 1 => c.cmd(&[
                "EVAL",
                "redis.call('SET', KEYS[1], ARGV[2]) return redis.call('INCR', ARGV[1])",
                "1",
                &k1,
                &k2,
                &n,
            ]),
            // A script that errors half-way.
            2 => c.cmd(&[
                "EVAL",
                "redis.call('INCR', KEYS[1]) return redis.call('NOSUCHCOMMAND')",
                "1",
                &k1,
            ]),
            // Deep, self-holding and wide-by-reference results.
            3 => c.cmd(&[
                "EVAL",
                "local t={} t[1]=t t[2]=t return t",
                "0",
            ]),
            4 => c.cmd(&[
                "EVAL",
                "local s=string.rep('x',1048576) local t={} for i=1,300 do t[i]=s end return cjson.encode(t)",
                "0",
            ]),
            // A long read-only loop over a declared key (killable).
            5 => c.cmd(&[
                "EVAL",
                "local n = 0 for i = 1, 3000000 do n = n + 1 end return redis.call('GET', KEYS[1])",
                "1",
                &k1,
            ]),
            6 => c.cmd(&["SCRIPT", "KILL"]),
            // A long script whose client leaves without reading its reply.
            7 => {
                let mut gone = RespConn::connect(&port).expect("connect");
                let _ = gone.send(&[
                    b"EVAL",
                    b"local n = 0 for i = 1, 2000000 do n = n + 1 end redis.call('SET', KEYS[1], n) return n",
                    b"1",
                    k1.as_bytes(),
                ]);
                drop(gone);
                Ok(Frame::Null)
            }
            // A plain writer.
            _ => c.cmd(&["SET", &k1, &n]),
        };
        match reply {
            Ok(_) => {
                replies.fetch_add(1, Ordering::Relaxed);
            }
            // A read timeout or a closed connection is a failure: nothing here may
            // stall a client.
            Err(e) => panic!("client {seed}, operation {op} on {k1}/{k2}: {e}"),
        }
    }
}

fn resident_bytes(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kib| kib * 1024)
}

#[test]
fn scripts_in_chaos_leave_every_key_writable_and_both_agents_answering() {
    let cluster = TestCluster::routed("proxy", 2, &["--shards", "64"]).unwrap();
    cluster.scale(2).unwrap();
    let (agents, _) = cluster.owners();
    assert_eq!(agents.len(), 2, "{agents:?}");
    let ports: Vec<String> = agents
        .iter()
        .map(|(_, listen)| port_of(&serde_json::json!(listen)))
        .collect();
    for port in &ports {
        let mut c = RespConn::connect(port).unwrap();
        assert_eq!(
            c.cmd(&["CONFIG", "SET", "lua-memory-limit", LUA_MEMORY])
                .unwrap(),
            Frame::SimpleString(b"OK".to_vec())
        );
    }
    let stop = Arc::new(AtomicBool::new(false));
    let replies = Arc::new(AtomicU64::new(0));
    let clients: Vec<_> = (0..8u64)
        .map(|i| {
            let port = ports[i as usize % 2].clone();
            let (stop, replies) = (stop.clone(), replies.clone());
            std::thread::spawn(move || client(port, 0x9e37_79b9_7f4a_7c15 ^ i, stop, replies))
        })
        .collect();
    let started = Instant::now();
    while started.elapsed() < CHAOS {
        std::thread::sleep(Duration::from_millis(200));
    }
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.join().expect("a client failed");
    }
    eprintln!(
        "{} replies in {:?}",
        replies.load(Ordering::Relaxed),
        started.elapsed()
    );
    for port in &ports {
        let mut c = RespConn::connect(port).unwrap();
        for (g, k) in (0..GROUPS).flat_map(|g| (0..KEYS).map(move |k| (g, k))) {
            let key = format!("chaos:{{g{g}}}:k{k}");
            assert_eq!(
                c.cmd(&["SET", &key, "after"]).unwrap(),
                Frame::SimpleString(b"OK".to_vec()),
                "{key} through {port}"
            );
        }
        let mut took: Vec<Duration> = (0..5)
            .map(|_| {
                let at = Instant::now();
                assert_eq!(
                    c.cmd(&["PING"]).unwrap(),
                    Frame::SimpleString(b"PONG".to_vec())
                );
                at.elapsed()
            })
            .collect();
        took.sort();
        assert!(
            took[2] < Duration::from_millis(10),
            "agent {port} answers PING in {:?}",
            took[2]
        );
    }
    let launched = cluster.manager.launched();
    assert_eq!(launched.len(), 2, "{launched:?}");
    for (listen, pid) in launched {
        let rss = resident_bytes(pid as u32);
        assert!(
            rss < RSS_BOUND,
            "agent {listen} holds {rss} bytes (bound {RSS_BOUND})"
        );
    }
}
