//! Large values over a `tcp` pool: a value far larger than one RPC frame (64 MiB) is
//! written and read through an agent whose memory nodes it reaches over tcp (every post
//! split into frames that fit, in order) and reads back byte for byte. Before the split
//! a 150 MiB value was acknowledged and then read as a missing key (the failed read of
//! its chunks was taken for a stale entry; now it would be an error). On failure the
//! test prints the cluster's logs.

use std::process::Command;

use dmc_e2e::{TestCluster, port_of};

const SCRIPT: &str = r#"
import hashlib, sys, redis
r = redis.Redis(port=int(sys.argv[1]), socket_timeout=120)
size = 150 << 20
v = bytes(range(256)) * (size // 256)
assert r.set("big", v)
n = r.strlen("big")
assert n == size, n
got = r.get("big")
assert got is not None and len(got) == size, len(got or b"")
assert hashlib.sha256(got).digest() == hashlib.sha256(v).digest(), "the value read back differs"
assert r.getrange("big", size - 4, size - 1) == v[-4:]
assert r.delete("big") == 1
print("ok")
"#;

#[test]
fn a_value_larger_than_a_frame_crosses_a_tcp_pool_in_pieces() {
    let c = TestCluster::routed_tcp("proxy", 2, "3000").unwrap();
    let started = c.scale(1).unwrap();
    let port = port_of(&started["started"][0]);
    let out = Command::new("python3")
        .args(["-c", SCRIPT, &port])
        .output()
        .expect("python3");
    if !out.status.success() {
        for e in walk(c.dir.path()) {
            if e.extension().is_some_and(|x| x == "log") {
                eprintln!(
                    "== {}\n{}",
                    e.display(),
                    std::fs::read_to_string(&e).unwrap_or_default()
                );
            }
        }
    }
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("ok"),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn walk(d: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(d).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}
