//! Copy-free region migration (issue 15, item 4): with redis-py clients writing and
//! reading through an agent, every region's primary role moves to its backup and back
//! (`cluster-manager regions migrate ID --to NODE`). No client sees an error or a
//! wrong value, each migration reports how long writes to the region waited, and
//! afterwards every copy equals its primary.

use dmc_e2e::{PyClient, TestCluster, port_of, redis_cli, wait_until};

#[test]
fn regions_migrate_under_load_without_a_client_error() {
    let _serial = dmc_e2e::one_at_a_time();
    let c = TestCluster::routed("proxy", 3, &["--shards", "16", "--lease-ms", "2000"]).unwrap();
    let report = c.scale(2).unwrap();
    let ports: Vec<String> = (0..2).map(|i| port_of(&report["started"][i])).collect();
    let clients: Vec<PyClient> = ports
        .iter()
        .zip(["one", "two"])
        .map(|(p, prefix)| PyClient::start(p, &["--prefix", prefix]))
        .collect();
    let mut blocks = Vec::new();
    for round in 0..3 {
        for r in c.regions() {
            let id = r["id"].as_u64().unwrap().to_string();
            let to = r["backups"][0].as_u64().unwrap().to_string();
            let out = c
                .manager
                .cli(&["regions", "migrate", &id, "--to", &to, "--json"])
                .unwrap();
            let m: serde_json::Value = serde_json::from_str(&out).unwrap();
            eprintln!("migration: {m}");
            assert_eq!(m["to"].as_u64().unwrap().to_string(), to, "{m}");
            blocks.push(m["write_block_ms"].as_f64().unwrap());
            let now = c
                .regions()
                .into_iter()
                .find(|x| x["id"] == r["id"])
                .unwrap();
            assert_eq!(now["primary"], r["backups"][0], "round {round}: {now}");
            assert_eq!(now["backups"][0], r["primary"], "round {round}: {now}");
        }
    }
    // Refused: a node that holds no copy.
    let r = &c.regions()[0];
    let stranger = (1..=3u64)
        .find(|n| r["primary"].as_u64() != Some(*n) && r["backups"][0].as_u64() != Some(*n))
        .unwrap()
        .to_string();
    let id = r["id"].as_u64().unwrap().to_string();
    let refused = c
        .manager
        .cli(&["regions", "migrate", &id, "--to", &stranger])
        .unwrap_err()
        .to_string();
    assert!(refused.contains("holds no complete copy"), "{refused}");
    let results: Vec<serde_json::Value> = clients.into_iter().map(|c| c.finish()).collect();
    blocks.sort_by(f64::total_cmp);
    eprintln!(
        "{} migrations, write block ms: median {:.2}, max {:.2}; clients: {results:?}",
        blocks.len(),
        blocks[blocks.len() / 2],
        blocks[blocks.len() - 1]
    );
    for r in &results {
        assert_eq!(r["errors"], 0, "{r}");
        assert_eq!(r["wrong"], 0, "{r}");
        assert_eq!(r["missing"], 0, "{r}");
    }
    assert_eq!(redis_cli(&ports[0], &["MSET", "a", "1", "b", "2"]), "OK");
    assert_eq!(redis_cli(&ports[1], &["MGET", "a", "b"]), "1\n2");
    c.wait_copies_identical();
}

/// `nodes drain`: the node that holds a primary gives the role to its backup, its
/// copies are filled on the third node and dropped, and it can be removed, while a
/// redis-py client writes and reads without an error.
#[test]
fn a_drained_node_gives_up_every_copy_under_load_and_can_be_removed() {
    let _serial = dmc_e2e::one_at_a_time();
    let c = TestCluster::routed("proxy", 3, &["--shards", "16", "--lease-ms", "2000"]).unwrap();
    let port = port_of(&c.scale(1).unwrap()["started"][0]);
    let client = PyClient::start(&port, &[]);
    let node = c.regions()[0]["primary"].as_u64().unwrap();
    let out = c
        .manager
        .cli(&["nodes", "drain", &node.to_string(), "--json"])
        .unwrap();
    let d: serde_json::Value = serde_json::from_str(&out).unwrap();
    eprintln!("drain: {d}");
    assert!(!d["migrated"].as_array().unwrap().is_empty(), "{d}");
    assert!(!d["filled"].as_array().unwrap().is_empty(), "{d}");
    for r in c.regions() {
        assert_ne!(r["primary"].as_u64(), Some(node), "{r}");
        assert!(
            !r["backups"]
                .as_array()
                .unwrap()
                .iter()
                .any(|b| b.as_u64() == Some(node)),
            "{r}"
        );
        assert_eq!(r["backups"].as_array().unwrap().len(), 1, "{r}");
    }
    let dir = c.node_dirs[node as usize - 1].path().to_path_buf();
    wait_until("the drained node's copies to be dropped", || {
        std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .flatten()
            .all(|e| !e.file_name().to_string_lossy().starts_with("region-"))
    });
    c.manager
        .cli(&["nodes", "remove", &node.to_string()])
        .unwrap();
    let result = client.finish();
    eprintln!("client during the drain: {result}");
    assert_eq!(result["errors"], 0, "{result}");
    assert_eq!(result["wrong"], 0, "{result}");
    assert_eq!(result["missing"], 0, "{result}");
    c.wait_copies_identical();
}
