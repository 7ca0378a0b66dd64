//! `dmc-bench` against a real standalone agent for a few seconds: the summary's counts
//! add up (every request is a hit, a miss or a write; no errors) and the per-second
//! timeline sums to the same totals.

use std::process::Command;

use dmc_e2e::Agent;

fn bench(agent: &Agent, args: &[&str], dir: &std::path::Path) -> serde_json::Value {
    let json = dir.join("summary.json");
    let timeline = dir.join("timeline.csv");
    let out = Command::new(env!("CARGO_BIN_EXE_dmc-bench"))
        .args([
            "run",
            "-p",
            &agent.port(),
            "-q",
            "--warmup",
            "0.5",
            "--duration",
            "2",
        ])
        .args(args)
        .arg("--json")
        .arg(&json)
        .arg("--timeline")
        .arg(&timeline)
        .output()
        .expect("dmc-bench runs");
    assert!(
        out.status.success(),
        "dmc-bench failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let c = &s["counts"];
    let n = |k: &str| c[k].as_u64().unwrap();
    assert!(n("ops") > 0, "{s}");
    assert_eq!(n("errors"), 0, "{s}");
    assert_eq!(n("ops"), n("hits") + n("misses") + n("writes"), "{s}");
    assert_eq!(n("gets"), n("hits") + n("misses"));
    // The timeline's rows add up to the totals.
    let csv = std::fs::read_to_string(&timeline).unwrap();
    let ops: u64 = csv
        .lines()
        .skip(1)
        .map(|l| l.split(',').nth(1).unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(ops, n("ops"));
    s
}

#[test]
fn summary_counts_add_up_against_an_agent() {
    let agent = Agent::start(&[]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    // YCSB A over loaded keys: reads hit, updates write.
    let a = bench(&agent, &["-w", "a", "-n", "2000", "-c", "8"], dir.path());
    assert_eq!(a["counts"]["misses"].as_u64(), Some(0), "{a}");
    assert!(a["counts"]["writes"].as_u64().unwrap() > 0);
    assert!(a["latency_us"]["p99"].as_u64().unwrap() >= a["latency_us"]["p50"].as_u64().unwrap());
    // YCSB D over RESP3 with pipelining, and a fixed-rate read-modify-write mix (each
    // operation a GET and a SET of one key).
    bench(
        &agent,
        &[
            "-w",
            "d",
            "-n",
            "2000",
            "-c",
            "4",
            "-P",
            "8",
            "--resp",
            "3",
            "--no-load",
        ],
        dir.path(),
    );
    let f = bench(
        &agent,
        &[
            "-w",
            "custom",
            "--rmw",
            "1",
            "-n",
            "500",
            "--key-dist",
            "uniform",
            "--rate",
            "2000",
            "--no-load",
            "--key-size",
            "16-40",
        ],
        dir.path(),
    );
    assert_eq!(f["counts"]["gets"], f["counts"]["writes"], "{f}");
}

/// Three redis-server cluster nodes on free ports, joined with `redis-cli --cluster
/// create`; killed on drop.
struct RedisCluster {
    ports: Vec<u16>,
    children: Vec<std::process::Child>,
    _dir: tempfile::TempDir,
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn redis_cluster() -> RedisCluster {
    let dir = tempfile::tempdir().unwrap();
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let mut children = Vec::new();
    for p in &ports {
        let node_dir = dir.path().join(p.to_string());
        std::fs::create_dir_all(&node_dir).unwrap();
        children.push(
            Command::new("redis-server")
                .args([
                    "--port",
                    &p.to_string(),
                    "--bind",
                    "127.0.0.1",
                    "--cluster-enabled",
                    "yes",
                ])
                .args([
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--cluster-node-timeout",
                    "5000",
                ])
                .arg("--dir")
                .arg(&node_dir)
                .stdout(std::process::Stdio::null())
                .spawn()
                .expect("redis-server"),
        );
    }
    let cluster = RedisCluster {
        ports,
        children,
        _dir: dir,
    };
    let cli = |p: u16, args: &[&str]| {
        let out = Command::new("redis-cli")
            .args(["-p", &p.to_string()])
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    for p in &cluster.ports {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while cli(*p, &["PING"]).trim() != "PONG" {
            assert!(
                std::time::Instant::now() < deadline,
                "node {p} did not start"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
    let nodes: Vec<String> = cluster
        .ports
        .iter()
        .map(|p| format!("127.0.0.1:{p}"))
        .collect();
    let out = Command::new("redis-cli")
        .args(["--cluster", "create"])
        .args(&nodes)
        .args(["--cluster-yes"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    for p in &cluster.ports {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while !cli(*p, &["CLUSTER", "INFO"]).contains("cluster_state:ok") {
            assert!(
                std::time::Instant::now() < deadline,
                "cluster not ok on {p}"
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
    cluster
}

/// Cluster mode against a real three-node Redis Cluster: keys spread over all nodes,
/// no errors; and a client whose map sends everything to one node follows MOVED.
#[test]
fn cluster_mode_routes_by_slot_and_follows_moved() {
    let cluster = redis_cluster();
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("s.json");
    let out = Command::new(env!("CARGO_BIN_EXE_dmc-bench"))
        .args([
            "run",
            "--cluster",
            "-p",
            &cluster.ports[0].to_string(),
            "-q",
        ])
        .args([
            "-w",
            "a",
            "-n",
            "3000",
            "-c",
            "4",
            "-P",
            "4",
            "--warmup",
            "0.3",
            "--duration",
            "1.5",
        ])
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let c = &s["counts"];
    assert_eq!(c["errors"].as_u64(), Some(0), "{s}");
    assert_eq!(
        c["misses"].as_u64(),
        Some(0),
        "every loaded key is found: {s}"
    );
    assert!(c["ops"].as_u64().unwrap() > 0);
    for p in &cluster.ports {
        let out = Command::new("redis-cli")
            .args(["-p", &p.to_string(), "DBSIZE"])
            .output()
            .unwrap();
        let n: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
        assert!(n > 500, "node {p} holds {n} of 3000 keys");
    }

    // A stale map (every slot on the first node) is corrected by MOVED replies.
    use dmc_benches::loadgen::client::{ReplyKind, Target, encode};
    use dmc_benches::loadgen::cluster::{ClusterClient, Request, SlotMap};
    let seed = format!("127.0.0.1:{}", cluster.ports[0]);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let map = std::sync::Arc::new(std::sync::RwLock::new(SlotMap::single(&seed)));
        let target = Target {
            addr: seed.clone(),
            proto: 2,
            auth: None,
        };
        let mut client = ClusterClient::new(target, map);
        let reqs: Vec<Request> = (0..50)
            .map(|i| {
                let key = format!("moved:{i}").into_bytes();
                let mut wire = Vec::new();
                encode(&mut wire, &[b"SET", &key, b"v"]);
                Request { key, wire }
            })
            .collect();
        let replies = client.exec(&reqs).await.unwrap();
        assert!(
            replies.iter().all(|r| *r == ReplyKind::Value),
            "{replies:?}"
        );
        assert!(client.redirects > 0, "some keys live on other nodes");
        let before = client.redirects;
        client.exec(&reqs).await.unwrap();
        assert_eq!(client.redirects, before, "the map learned from MOVED");
    });
}
