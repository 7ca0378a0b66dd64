//! Memory nodes and agents started with `--manager` register with the cluster manager
//! and keep their leases alive; a killed agent's lease lapses and `status` reports it
//! dead.

use std::time::Duration;

use dmc_e2e::{Agent, ClusterManager, MemoryNode};

#[test]
fn nodes_and_agents_register_heartbeat_and_lapse() {
    let dir = tempfile::tempdir().unwrap();
    let manager = ClusterManager::start(
        dir.path(),
        &[
            "--lease-ms",
            "2500",
            "--replicas",
            "1",
            "--region-size",
            "16mb",
            "--segment-size",
            "1mb",
        ],
    )
    .unwrap();
    let url = manager.url.clone();
    let node_dir = tempfile::tempdir().unwrap();
    let _node = MemoryNode::start_with(7, node_dir.path(), "64mb", &["--manager", &url]).unwrap();
    let mut agent = Agent::start(&["--manager", &url]).unwrap();
    let s = manager
        .wait_for("the node and the agent to register", |s| {
            s["nodes"]
                .as_array()
                .is_some_and(|n| n.len() == 1 && n[0]["alive"] == true)
                && s["agents"]
                    .as_array()
                    .is_some_and(|a| a.len() == 1 && a[0]["alive"] == true)
        })
        .unwrap();
    assert_eq!(s["nodes"][0]["id"], 7);
    assert_eq!(s["capacity"].as_u64(), Some(64 << 20));
    assert_eq!(s["agents"][0]["listen"], agent.addr.as_str());
    assert_eq!(
        s["agents"][0]["shards"], s["shards"],
        "the only agent owns every shard"
    );
    // Heartbeats keep the leases alive well past one lease...
    std::thread::sleep(Duration::from_millis(3000));
    let s = manager.status().unwrap();
    assert!(
        s["agents"][0]["alive"] == true && s["nodes"][0]["alive"] == true,
        "{s}"
    );
    // ...and a killed agent's lease lapses.
    agent.kill();
    manager
        .wait_for("the agent's lease to lapse", |s| {
            s["agents"][0]["alive"] == false
        })
        .unwrap();
}
