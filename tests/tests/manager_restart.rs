//! Manager restarts in the middle of a region move (issue 15, item 5): a manager killed
//! with SIGKILL while it fills a new copy, while it migrates a region's primary role,
//! or right after a memory node died, is restarted on its state file and finishes what
//! was started: the fill starts again from scratch (the partial copy is never served)
//! and completes, the migration completes, and the failover and re-replication
//! complete. Clients see no error and lose no acknowledged write.

use std::process::{Command, Stdio};
use std::time::Duration;

use dmc_e2e::{
    PyClient, SECRET_ENV, TEST_SECRET, TestCluster, bin, port_of, redis_cli, region_settled,
    tcp_failover_args, wait_until,
};

const LEASE_MS: &str = "1500";

fn restart_args() -> Vec<&'static str> {
    let mut a = vec!["--region-size", "64mb", "--segment-size", "1mb"];
    a.extend_from_slice(&tcp_failover_args(LEASE_MS));
    a
}

fn region(c: &TestCluster, id: u64) -> serde_json::Value {
    c.regions()
        .into_iter()
        .find(|r| r["id"].as_u64() == Some(id))
        .unwrap_or_default()
}

/// A tcp cluster of three nodes and one launched agent holding keys k0..k299 = "v";
/// returns it and the agent's port.
fn one_agent_with_keys() -> (TestCluster, String) {
    let c = TestCluster::routed_tcp("proxy", 3, LEASE_MS).unwrap();
    let port = port_of(&c.scale(1).unwrap()["started"][0]);
    for i in 0..300 {
        assert_eq!(redis_cli(&port, &["SET", &format!("k{i}"), "v"]), "OK");
    }
    (c, port)
}

#[test]
fn a_fill_cut_off_by_a_manager_crash_is_done_again_after_the_restart() {
    let (mut c, port) = one_agent_with_keys();
    let r = c.regions()[0].clone();
    let id = r["id"].as_u64().unwrap();
    let target = (1..=3u64)
        .find(|n| {
            r["primary"].as_u64() != Some(*n)
                && !r["backups"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|b| b.as_u64() == Some(*n))
        })
        .unwrap();
    // A slow fill (1 MiB a second of a 64 MiB region), cut off by the crash.
    let mut copy = Command::new(bin("cluster-manager").unwrap())
        .env(SECRET_ENV, TEST_SECRET)
        .args([
            "--manager",
            &c.manager.url,
            "regions",
            "copy",
            &id.to_string(),
        ])
        .args(["--to", &target.to_string(), "--rate", "1mb"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_until("the region to be filling", || {
        region(&c, id)["filling"]
            .as_array()
            .is_some_and(|f| f.iter().any(|n| n.as_u64() == Some(target)))
    });
    let file = c.node_dirs[target as usize - 1]
        .path()
        .join(format!("region-{id:05}.mem"));
    assert!(file.exists(), "the fill created its copy");
    c.manager.kill();
    let _ = copy.wait();
    c.manager.restart(&restart_args()).unwrap();
    wait_until("the fill to be done again and finished", || {
        let r = region(&c, id);
        r["filling"].as_array().is_none_or(|f| f.is_empty())
            && r["frozen"] != true
            && r["backups"]
                .as_array()
                .is_some_and(|b| b.iter().any(|n| n.as_u64() == Some(target)))
    });
    assert!(file.exists(), "the new copy is there");
    for i in 0..300 {
        assert_eq!(redis_cli(&port, &["GET", &format!("k{i}")]), "v");
    }
    assert_eq!(redis_cli(&port, &["SET", "after", "restart"]), "OK");
    assert_eq!(redis_cli(&port, &["MSET", "a", "1", "b", "2"]), "OK");
    c.wait_copies_identical();
}

/// The migration waits for the (paused) agent to acknowledge the freeze when the
/// manager dies; the restarted manager finds the region frozen with its target
/// recorded and finishes the move.
#[test]
fn a_migration_cut_off_by_a_manager_crash_is_finished_after_the_restart() {
    let (mut c, port) = one_agent_with_keys();
    let r = c.regions()[0].clone();
    let id = r["id"].as_u64().unwrap();
    let to = r["backups"][0].as_u64().unwrap();
    let (_, pid) = c.manager.launched()[0].clone();
    // SAFETY: kill(2) with plain integers.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    let mut migrate = Command::new(bin("cluster-manager").unwrap())
        .env(SECRET_ENV, TEST_SECRET)
        .args(["--manager", &c.manager.url, "regions", "migrate"])
        .args([&id.to_string(), "--to", &to.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_until("the region to be frozen", || {
        region(&c, id)["frozen"] == true
    });
    c.manager.kill();
    let _ = migrate.wait();
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGCONT) };
    c.manager.restart(&restart_args()).unwrap();
    wait_until("the migration to be finished", || {
        let r = region(&c, id);
        region_settled(&r) && r["primary"].as_u64() == Some(to)
    });
    for i in 0..300 {
        assert_eq!(redis_cli(&port, &["GET", &format!("k{i}")]), "v");
    }
    assert_eq!(redis_cli(&port, &["SET", "after", "restart"]), "OK");
    c.wait_copies_identical();
}

#[test]
fn a_manager_crash_right_after_a_node_failure_still_ends_with_two_copies() {
    let mut c = TestCluster::routed_tcp("proxy", 3, LEASE_MS).unwrap();
    let port = port_of(&c.scale(1).unwrap()["started"][0]);
    let client = PyClient::start(&port, &[]);
    std::thread::sleep(Duration::from_millis(500));
    let victim = c.regions()[0]["primary"].as_u64().unwrap();
    c.nodes[victim as usize - 1].kill();
    c.manager.kill();
    std::thread::sleep(Duration::from_millis(300));
    c.manager.restart(&restart_args()).unwrap();
    wait_until("the failed node's copies to be replaced", || {
        let regions = c.regions();
        !regions.is_empty()
            && regions.iter().all(|r| {
                region_settled(r)
                    && r["primary"].as_u64() != Some(victim)
                    && r["backups"][0].as_u64() != Some(victim)
            })
    });
    std::thread::sleep(Duration::from_millis(500));
    let result = client.finish();
    eprintln!("client across a node failure and a manager restart: {result}");
    assert_eq!(result["errors"], 0, "{result}");
    assert_eq!(result["wrong"], 0, "{result}");
    assert_eq!(result["missing"], 0, "{result}");
    c.wait_copies_identical();
}

/// An agent killed with SIGKILL while the manager is down too: the restarted manager
/// (which counts every agent as heard from at its start) sees the launched agent's
/// process gone, hands its shards to the survivor and starts a replacement; every
/// acknowledged write reads back through the survivor.
#[test]
fn an_agent_killed_with_the_manager_is_failed_over_after_the_restart() {
    let mut c = TestCluster::routed_tcp("proxy", 3, LEASE_MS).unwrap();
    let started = c.scale(2).unwrap();
    let port = port_of(&started["started"][0]);
    let keys: Vec<String> = (0..200).map(|i| format!("k{i}")).collect();
    for k in &keys {
        assert_eq!(redis_cli(&port, &["SET", k, "v"]), "OK");
    }
    let victim_listen = started["started"][1].as_str().unwrap().to_string();
    let (agents, _) = c.owners();
    let victim = agents.iter().find(|(_, l)| *l == victim_listen).unwrap().0;
    let (_, pid) = c
        .manager
        .launched()
        .into_iter()
        .find(|(l, _)| *l == victim_listen)
        .unwrap();
    // SAFETY: kill(2) with plain integers.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    c.manager.kill();
    c.manager.restart(&restart_args()).unwrap();
    wait_until("the dead agent's shards to have a live owner", || {
        let (_, rows) = c.owners();
        !rows.is_empty() && rows.iter().all(|r| r.primary != victim)
    });
    for k in &keys {
        wait_until("the key to read back", || {
            redis_cli(&port, &["GET", k]) == "v"
        });
    }
    assert_eq!(redis_cli(&port, &["SET", "after", "restart"]), "OK");
    c.wait_copies_identical();
}
