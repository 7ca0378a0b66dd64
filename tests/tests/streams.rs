//! Streams across an owner change: a consumer group's state (last delivered ID, pending
//! entries with their consumers and delivery counts, consumers) is part of the
//! stream's value in the pool, so when the manager moves a shard to another agent the
//! new owner serves the same group. A manager, two `shm` memory nodes with `r = 2`,
//! agents in proxy mode started by the manager's launcher, and redis-py.

use std::process::Command;

use dmc_e2e::{TestCluster, keys_owned_by, port_of};

/// `python3 -c SCRIPT PORT KEY...`, failing the test with its output unless it exits 0.
fn py(script: &str, port: &str, keys: &[String]) {
    let out = Command::new("python3")
        .args(["-c", script, port])
        .args(keys)
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Ten entries per stream, a group, and four of them read by `alice`. Every other
/// stream's entries are large enough that it is stored chunked (its entries in a tree).
const BEFORE: &str = r#"
import sys, redis
r = redis.Redis(port=int(sys.argv[1]), decode_responses=True)
for n, k in enumerate(sys.argv[2:]):
    for i in range(1, 11):
        r.xadd(k, {"n": i, "pad": "x" * (600 if n % 2 else 1)}, id=f"{i}-0")
    r.xgroup_create(k, "g", id="0")
    got = r.xreadgroup("g", "alice", {k: ">"}, count=4)
    assert [e[0] for e in got[0][1]] == ["1-0", "2-0", "3-0", "4-0"], got
"#;

/// Through an agent that now forwards to the key's new owner: alice's four entries
/// are still pending once each; bob reads the other six; a claim and an ack.
const AFTER_MOVE: &str = r#"
import sys, redis
r = redis.Redis(port=int(sys.argv[1]), decode_responses=True)
for k in sys.argv[2:]:
    p = r.xpending(k, "g")
    assert p["pending"] == 4 and p["min"] == "1-0" and p["max"] == "4-0", p
    assert p["consumers"] == [{"name": "alice", "pending": 4}], p
    rows = r.xpending_range(k, "g", "-", "+", 10)
    assert [x["times_delivered"] for x in rows] == [1, 1, 1, 1], rows
    got = r.xreadgroup("g", "bob", {k: ">"})
    assert [e[0] for e in got[0][1]] == [f"{i}-0" for i in range(5, 11)], got
    claimed = r.xclaim(k, "g", "bob", 0, ["1-0"])
    assert [(i, f["n"]) for i, f in claimed] == [("1-0", "1")], claimed
    assert r.xack(k, "g", "2-0") == 1
    p = r.xpending(k, "g")
    assert p["pending"] == 9, p
    assert sorted((c["name"], c["pending"]) for c in p["consumers"]) == [("alice", 2), ("bob", 7)], p
"#;

/// After the shard moved back: the same nine pending entries, everything read.
const AFTER_RETURN: &str = r#"
import sys, redis
r = redis.Redis(port=int(sys.argv[1]), decode_responses=True)
for k in sys.argv[2:]:
    p = r.xpending(k, "g")
    assert p["pending"] == 9, p
    rows = {x["message_id"]: x["times_delivered"] for x in r.xpending_range(k, "g", "-", "+", 10)}
    assert rows["1-0"] == 2 and rows["3-0"] == 1 and "2-0" not in rows, rows
    g = r.xinfo_groups(k)[0]
    assert g["last-delivered-id"] == "10-0" and g["entries-read"] == 10 and g["lag"] == 0, g
    assert r.xlen(k) == 10
"#;

#[test]
fn a_consumer_groups_pending_entries_survive_an_owner_change() {
    let c = TestCluster::routed("proxy", 2, &["--shards", "64"]).unwrap();
    let first = c.scale(1).unwrap();
    let port = port_of(&first["started"][0]);
    let (agents, _) = c.owners();
    let first_id = agents[0].0;
    let keys: Vec<String> = (0..40).map(|i| format!("jobs:{i}")).collect();
    py(BEFORE, &port, &keys);

    c.scale(3).unwrap();
    let (agents, rows) = c.owners();
    let moved: Vec<String> = agents
        .iter()
        .filter(|(id, _)| *id != first_id)
        .flat_map(|(id, _)| keys_owned_by(&rows, *id, &keys))
        .collect();
    assert!(!moved.is_empty(), "no stream changed owner: {rows:?}");
    // Asked through the first agent, which forwards every one of these to its new owner.
    py(AFTER_MOVE, &port, &moved);

    c.scale(1).unwrap();
    let (agents, _) = c.owners();
    let port = port_of(&serde_json::Value::String(agents[0].1.clone()));
    py(AFTER_RETURN, &port, &moved);
}
