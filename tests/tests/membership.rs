//! Memory nodes and agents started with `--manager` register with the cluster manager
//! and keep their leases alive; a killed agent's lease lapses and `status` reports it
//! dead.

use std::time::Duration;

use dmc_e2e::{Agent, ClusterManager, MemoryNode};

/// A manager with lease `lease_ms`, one memory node (id 7, 64 MB) and one agent that
/// joined it; the temporary directories live as long as the returned value.
struct Cluster {
    manager: ClusterManager,
    _node: MemoryNode,
    agent: Agent,
    _dirs: [tempfile::TempDir; 2],
}

fn cluster(lease_ms: &str) -> Cluster {
    let dir = tempfile::tempdir().unwrap();
    let manager = ClusterManager::start(
        dir.path(),
        &[
            "--lease-ms",
            lease_ms,
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
    let node = MemoryNode::start_with(7, node_dir.path(), "64mb", &["--manager", &url]).unwrap();
    let agent = Agent::start(&["--manager", &url]).unwrap();
    Cluster {
        manager,
        _node: node,
        agent,
        _dirs: [dir, node_dir],
    }
}

#[test]
fn nodes_and_agents_register_heartbeat_and_lapse() {
    let Cluster {
        manager,
        mut agent,
        _node,
        _dirs,
    } = cluster("2500");
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

/// An agent cut off from the manager stops writing once its lease would have run out
/// (the manager could then give its shards away), keeps serving reads, and writes
/// again as soon as a heartbeat is accepted.
#[test]
fn an_agent_that_loses_the_manager_stops_writing_until_it_is_back() {
    let c = cluster("1500");
    let (manager, port) = (&c.manager, c.agent.port());
    dmc_e2e::wait_until("the agent to accept writes", || {
        dmc_e2e::redis_cli(&port, &["SET", "k", "before"]) == "OK"
    });
    let pid = manager.child.id() as i32;
    // SAFETY: signalling a child process this test started.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    dmc_e2e::wait_until("writes to pause", || {
        dmc_e2e::redis_cli(&port, &["SET", "k", "during"]).contains("lease lapsed")
    });
    // Reads go on (the polls above wrote "during" until the lease ran out).
    assert_eq!(dmc_e2e::redis_cli(&port, &["GET", "k"]), "during");
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0);
    dmc_e2e::wait_until("writes to resume", || {
        dmc_e2e::redis_cli(&port, &["SET", "k", "after"]) == "OK"
    });
    assert_eq!(dmc_e2e::redis_cli(&port, &["GET", "k"]), "after");
}
