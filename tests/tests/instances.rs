//! On-demand allocation: an instance's pool grows by regions the manager grants as it
//! fills (never past its maxmemory, copies on distinct memory nodes), and shrinking it
//! evicts per its policy, moves what is left out of a region, and returns the region.
//! Several instances share the memory nodes, each with its own keys, regions, agents
//! and limit.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use dmc_e2e::{ClusterManager, TestCluster, info_field, port_of, redis_cli};

fn region_files(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("region-"))
        .count()
}

fn regions(m: &ClusterManager) -> Vec<serde_json::Value> {
    serde_json::from_str::<serde_json::Value>(&m.cli(&["regions", "list", "--json"]).unwrap())
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

/// Two 256 MB memory nodes, 16 MB regions of 1 MB segments, 64 shards.
fn small_regions_cluster() -> TestCluster {
    TestCluster::start(
        &[
            "--region-size",
            "16mb",
            "--segment-size",
            "1mb",
            "--shards",
            "64",
        ],
        "log = \"warn\"\n",
        2,
        "256mb",
    )
    .unwrap()
}

#[test]
fn an_instance_grows_by_regions_and_shrinking_returns_one() {
    let c = small_regions_cluster();
    let (manager, node_dirs) = (&c.manager, &c.node_dirs);
    manager
        .cli(&[
            "instances",
            "resize",
            "default",
            "--maxmemory",
            "40mb",
            "--policy",
            "allkeys-lru",
        ])
        .unwrap();
    let port = port_of(&c.scale(1).unwrap()["started"][0]);
    assert_eq!(regions(manager).len(), 1, "the pool starts with one region");

    // ~24 MB of values: more than one 16 MB region holds.
    let out = Command::new("redis-benchmark")
        .args(["-p", &port, "-t", "set", "-n", "3000", "-r", "100000"])
        .args(["-d", "8000", "-c", "4", "-q"])
        .output()
        .expect("redis-benchmark (apt-get install redis-tools)");
    assert!(out.status.success());
    let grown = regions(manager);
    assert_eq!(grown.len(), 2, "a second region was granted: {grown:?}");
    for r in &grown {
        assert!(
            !r["backups"].as_array().unwrap().contains(&r["primary"]),
            "copies of region {} share a node",
            r["id"]
        );
    }
    assert_ne!(
        grown[0]["primary"], grown[1]["primary"],
        "primaries are spread over the nodes"
    );
    assert_eq!(region_files(node_dirs[0].path()), 2);
    // Used bytes per memory node, from the agents' reports (one heartbeat away).
    let status = manager
        .wait_for("used bytes on both nodes", |s| {
            s["nodes"].as_array().is_some_and(|n| {
                n.iter().all(|x| {
                    let used = x["used"].as_u64().unwrap_or(0);
                    used > 0 && used <= x["allocated"].as_u64().unwrap_or(0)
                })
            })
        })
        .unwrap();
    let inst = &status["instances"][0];
    assert!(inst["allocated"].as_u64().unwrap() <= 40 << 20, "{inst}");
    assert!(inst["used"].as_u64().unwrap() > 0, "{inst}");

    // Shrink through any agent, as a Redis operator would.
    assert_eq!(
        redis_cli(&port, &["config", "set", "maxmemory", "16mb"]),
        "OK"
    );
    assert!(redis_cli(&port, &["config", "get", "maxmemory"]).contains("16777216"));
    let deadline = Instant::now() + Duration::from_secs(30);
    while regions(manager).len() > 1 {
        assert!(
            Instant::now() < deadline,
            "no region was returned: {:?}",
            regions(manager)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        region_files(node_dirs[0].path()),
        1,
        "the node freed the region"
    );
    assert_eq!(
        region_files(node_dirs[1].path()),
        1,
        "the node freed the region"
    );
    assert!(info_field(&port, "stats", "evicted_keys") > 0);
    // What is left is still served.
    let dbsize: u64 = redis_cli(&port, &["dbsize"]).parse().unwrap();
    assert!(dbsize > 0);
    let key = redis_cli(&port, &["randomkey"]);
    assert_eq!(redis_cli(&port, &["strlen", &key]), "8000");
}

/// On-demand connections: an agent connects to a memory node only when it first needs a
/// region there, closes connections nothing used for a while, and INFO shows how many
/// are open. Three nodes with `r = 2`: the one region lives on two of them, so the
/// third is never connected after start-up.
#[test]
fn agents_connect_to_memory_nodes_on_demand_and_close_idle_ones() {
    let c = TestCluster::start(
        &["--region-size", "16mb", "--segment-size", "1mb"],
        "log = \"warn\"\n[pool]\nidle-connection-timeout = 1\n",
        3,
        "64mb",
    )
    .unwrap();
    let port = port_of(&c.scale(1).unwrap()["started"][0]);
    assert_eq!(info_field(&port, "cluster", "dmc_pool_nodes"), 3);
    let wait_for = |what: &str, check: &dyn Fn(u64) -> bool| {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let n = info_field(&port, "cluster", "dmc_pool_connections");
            if check(n) {
                return n;
            }
            assert!(Instant::now() < deadline, "{what}: {n} connections");
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    // The agent's maintenance (expiry sampling, the usage counter) keeps reading the
    // region's primary; the other nodes' connections close.
    wait_for("idle connections close", &|n| n == 1);
    // A write commits on both copies of the region, and nothing on the third node.
    assert_eq!(redis_cli(&port, &["set", "k", "v"]), "OK");
    wait_for("a write connects to the backup too", &|n| n == 2);
    assert_eq!(redis_cli(&port, &["get", "k"]), "v");
    wait_for("the backup's connection closes when idle", &|n| n == 1);
    assert_eq!(
        redis_cli(&port, &["set", "k", "w"]),
        "OK",
        "reconnected on demand"
    );
    assert_eq!(redis_cli(&port, &["get", "k"]), "w");
    assert!(info_field(&port, "cluster", "dmc_pool_connections") <= 2);
}

/// Two instances on the same memory nodes: the same key holds each instance's own
/// value, one instance filling past its maxmemory evicts its own keys only and never
/// takes a region of the other, and scaling one leaves the other's slots alone.
#[test]
fn instances_share_memory_nodes_but_not_keys_regions_or_slots() {
    let c = small_regions_cluster();
    let manager = &c.manager;
    let created = manager
        .cli(&[
            "instances",
            "create",
            "sessions",
            "--maxmemory",
            "32mb",
            "--policy",
            "allkeys-lru",
        ])
        .unwrap();
    assert!(created.contains("instance sessions created"), "{created}");
    let dup = manager.cli(&["instances", "create", "sessions", "--maxmemory", "1mb"]);
    assert!(dup.is_err(), "an instance name is unique: {dup:?}");
    let owners = |instance: &str| -> std::collections::BTreeSet<u64> {
        let rows: serde_json::Value = serde_json::from_str(
            &manager
                .cli(&["slots", "--instance", instance, "--json"])
                .unwrap(),
        )
        .unwrap();
        rows.as_array()
            .unwrap()
            .iter()
            .map(|r| r["primary"].as_u64().unwrap())
            .collect()
    };
    let a = port_of(&c.scale(1).unwrap()["started"][0]);
    let b = port_of(&c.scale_instance("sessions", 1).unwrap()["started"][0]);
    let (default_owners, session_owners) = (owners("default"), owners("sessions"));
    assert_eq!(default_owners.len(), 1);
    assert_eq!(session_owners.len(), 1);
    assert!(session_owners.is_disjoint(&default_owners));

    assert_eq!(redis_cli(&a, &["set", "user:1", "in-default"]), "OK");
    assert_eq!(redis_cli(&b, &["set", "user:1", "in-sessions"]), "OK");
    assert_eq!(redis_cli(&a, &["get", "user:1"]), "in-default");
    assert_eq!(redis_cli(&b, &["get", "user:1"]), "in-sessions");
    let info = redis_cli(&b, &["info", "cluster"]);
    assert!(info.contains("dmc_instance:sessions"), "{info}");

    // ~48 MB into a 32 MB instance: it evicts its own keys, in its own regions.
    let out = Command::new("redis-benchmark")
        .args(["-p", &b, "-t", "set", "-n", "6000", "-r", "100000"])
        .args(["-d", "8000", "-c", "2", "-q"])
        .output()
        .expect("redis-benchmark (apt-get install redis-tools)");
    let tail = |b: &[u8]| {
        let t = String::from_utf8_lossy(b);
        let cut = t.len().saturating_sub(300);
        t.get(cut..).unwrap_or_default().to_string()
    };
    assert!(
        out.status.success(),
        "{} {}",
        tail(&out.stdout),
        tail(&out.stderr)
    );
    assert!(info_field(&b, "stats", "evicted_keys") > 0);
    assert_eq!(info_field(&a, "stats", "evicted_keys"), 0);
    assert_eq!(redis_cli(&a, &["get", "user:1"]), "in-default");
    assert_eq!(redis_cli(&a, &["dbsize"]), "1");
    let all = regions(manager);
    let of = |name: &str| -> Vec<u64> {
        all.iter()
            .filter(|r| r["instance"] == name)
            .map(|r| r["id"].as_u64().unwrap())
            .collect()
    };
    let (ra, rb) = (of("default"), of("sessions"));
    assert_eq!(ra, vec![1], "default kept its one region: {all:?}");
    assert!(
        (1..=2).contains(&rb.len()) && !rb.contains(&1),
        "sessions holds at most 32 MB of regions of its own: {all:?}"
    );
    let status = manager.status().unwrap();
    let inst = |name: &str| {
        status["instances"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["name"] == name)
            .cloned()
            .unwrap()
    };
    assert_eq!(inst("sessions")["agents"], 1);
    assert_eq!(inst("sessions")["allocated"], rb.len() as u64 * (16 << 20));
    assert_eq!(inst("default")["allocated"], 16 << 20);

    // Scaling one instance re-assigns its slots only, and the new agent writes to its
    // own instance.
    let a2 = port_of(&c.scale_instance("default", 2).unwrap()["started"][0]);
    assert_eq!(owners("default").len(), 2);
    assert_eq!(owners("sessions"), session_owners);
    assert_eq!(redis_cli(&a2, &["get", "user:1"]), "in-default");
    for i in 0..20 {
        let k = format!("k{i}");
        assert_eq!(redis_cli(&a2, &["set", &k, "v"]), "OK");
        assert_eq!(redis_cli(&a, &["get", &k]), "v");
        assert_eq!(redis_cli(&b, &["exists", &k]), "0");
    }
    c.scale_instance("default", 1).unwrap();
    assert_eq!(owners("default"), default_owners);
    assert_eq!(owners("sessions"), session_owners);
    assert_eq!(redis_cli(&a, &["get", "k7"]), "v");
}
