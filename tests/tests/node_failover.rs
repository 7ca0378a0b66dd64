//! Memory-node failover (issue 15, item 2): three memory nodes over `tcp` with `r = 2`
//! (over `shm` an agent's mapping outlives a killed node, which hides the failure) and
//! two agents, redis-py clients writing and reading through both; one node is
//! killed with SIGKILL. Once its lease lapses the manager takes it out of every region
//! record (promoting a backup where it held the primary) and fills a new copy of every
//! region it held on the remaining node, while the clients go on. Afterwards every
//! region has two copies again, identical byte for byte, no client saw an error (a
//! command that hit the dead node waited for the failover and was retried, two-phase
//! MSETs included), no acknowledged write is lost,
//! and when the killed node comes back its stale copies are dropped, never served.

use std::time::{Duration, Instant};

use dmc_e2e::{
    MemoryNode, PyClient, TestCluster, http_get, info_field, metric, port_of, redis_cli,
    region_settled, wait_until,
};

fn holds(region: &serde_json::Value, node: u64) -> bool {
    region["primary"].as_u64() == Some(node)
        || region["backups"]
            .as_array()
            .is_some_and(|b| b.iter().any(|n| n.as_u64() == Some(node)))
}

#[test]
fn a_killed_memory_node_is_replaced_by_new_copies_while_clients_go_on() {
    let _serial = dmc_e2e::one_at_a_time();
    let mut c = TestCluster::routed_tcp("proxy", 3, "1500").unwrap();
    let report = c.scale(2).unwrap();
    let ports: Vec<String> = (0..2).map(|i| port_of(&report["started"][i])).collect();
    for i in 0..300 {
        let (k, v) = (format!("k{i}"), format!("v{i}"));
        assert_eq!(redis_cli(&ports[i % 2], &["SET", &k, &v]), "OK");
    }
    // Each client its own keys: a client loading its keys would overwrite the other's.
    let clients: Vec<PyClient> = ports
        .iter()
        .zip(["one", "two"])
        .map(|(p, prefix)| PyClient::start(p, &["--prefix", prefix]))
        .collect();
    // Two-phase writes too (MSET, then DEL of both keys), through the other agent,
    // counting every reply that is not what it should be.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mset = {
        let (stop, port) = (stop.clone(), ports[1].clone());
        std::thread::spawn(move || {
            let (mut ok, mut failed) = (0u64, Vec::new());
            let mut i = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                i += 1;
                let (a, b) = (
                    format!("m:{{t}}:a{}", i % 50),
                    format!("m:{{t}}:b{}", i % 50),
                );
                // MSET writes its objects first (which already waits out a failed
                // node); DEL of two keys is a two-phase commit of slot words alone.
                let reply = redis_cli(&port, &["MSET", &a, &i.to_string(), &b, &i.to_string()]);
                let deleted = redis_cli(&port, &["DEL", &a, &b]);
                if reply == "OK" && deleted == "2" {
                    ok += 1;
                } else {
                    failed.push(format!("{reply} / {deleted}"));
                }
            }
            (ok, failed)
        })
    };
    std::thread::sleep(Duration::from_millis(500));
    // A node that holds backups only, where it can: reads never touch it, so every
    // command that meets it is a write (the primary's failover is covered by
    // tests/tests/manager_restart.rs and benches/faults.sh).
    let before = c.regions();
    let victim = (1..=3u64)
        .filter(|n| before.iter().any(|r| holds(r, *n)))
        .min_by_key(|n| {
            before
                .iter()
                .filter(|r| r["primary"].as_u64() == Some(*n))
                .count()
        })
        .unwrap();
    assert!(before.iter().any(|r| holds(r, victim)));
    eprintln!("regions before the kill of node {victim}: {before:?}");
    let killed = Instant::now();
    c.nodes[victim as usize - 1].kill();
    wait_until("the failed node to leave every region record", || {
        c.regions().iter().all(|r| !holds(r, victim))
    });
    let out_after = killed.elapsed();
    wait_until("every region to have two copies again", || {
        c.regions().iter().all(region_settled)
    });
    let restored_after = killed.elapsed();
    // The clients go on for a while on the restored copies.
    std::thread::sleep(Duration::from_millis(1000));
    let results: Vec<serde_json::Value> = clients.into_iter().map(|c| c.finish()).collect();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (msets, failed) = mset.join().unwrap();
    eprintln!("MSET + DEL: {msets} pairs acknowledged, failed: {failed:?}");
    assert!(msets > 10 && failed.is_empty(), "{msets} {failed:?}");
    eprintln!(
        "node {victim} out of the regions {out_after:?}, two copies again {restored_after:?} after SIGKILL; clients: {results:?}"
    );
    // The agents count the operations they retried on the new copies.
    let retried: u64 = ports
        .iter()
        .map(|p| info_field(p, "cluster", "dmc_pool_failover_retries"))
        .sum();
    assert!(retried > 0, "no operation met the dead node");
    for r in &results {
        // Commands that hit the dead node waited for its failover and were retried.
        assert_eq!(r["errors"], 0, "{r}");
        assert_eq!(r["wrong"], 0, "{r}");
        assert_eq!(r["missing"], 0, "{r}");
        assert!(r["writes"].as_u64().unwrap() > 100, "{r}");
    }
    for i in 0..300 {
        let (k, v) = (format!("k{i}"), format!("v{i}"));
        assert_eq!(redis_cli(&ports[i % 2], &["GET", &k]), v, "{k}");
    }
    for r in c.regions() {
        assert!(!holds(&r, victim), "{r}");
    }
    let table = c.manager.cli(&["regions", "list"]).unwrap();
    assert!(
        !table.contains("degraded") && table.contains("2/2"),
        "{table}"
    );
    // Quiet, every copy equals its primary (counters included: additions reach every
    // copy), polled because maintenance still adds to the usage counter.
    c.wait_copies_identical();
    let text = http_get(c.manager.url.trim_start_matches("http://"), "/metrics").unwrap();
    assert!(
        metric(&text, "dmc_manager_copies_filled_total").is_some_and(|n| n >= 1.0),
        "{text}"
    );
    // The node comes back with its old region files: stale, so they are dropped,
    // never served.
    let dir = c.node_dirs[victim as usize - 1].path().to_path_buf();
    let files = |dir: &std::path::Path| {
        std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("region-"))
            .count()
    };
    assert!(files(&dir) > 0, "the killed node left its region files");
    c.nodes[victim as usize - 1] =
        MemoryNode::start_with(victim as u32, &dir, "512mb", &["--manager", &c.manager.url])
            .unwrap();
    wait_until("the returning node's stale copies to be dropped", || {
        files(&dir) == 0
    });
    assert!(c.regions().iter().all(|r| !holds(r, victim)));
    assert_eq!(redis_cli(&ports[0], &["GET", "k3"]), "v3");
    assert_eq!(redis_cli(&ports[1], &["MSET", "a", "1", "b", "2"]), "OK");
}

/// A memory node that joins while the agents run is reached by them (their maps name
/// it) without a restart, so when a node of `r = 2` over two nodes dies, the manager
/// re-replicates its regions onto the newcomer while a redis-py client goes on.
/// Before, an agent's nodes were fixed when it opened its pool and the newcomer got
/// no copy until the agents were restarted.
#[test]
fn a_memory_node_added_while_agents_run_takes_the_copies_of_a_failed_one() {
    let _serial = dmc_e2e::one_at_a_time();
    let mut c = TestCluster::routed_tcp("proxy", 2, "1500").unwrap();
    let port = port_of(&c.scale(1).unwrap()["started"][0]);
    for i in 0..200 {
        assert_eq!(redis_cli(&port, &["SET", &format!("k{i}"), "v"]), "OK");
    }
    let client = PyClient::start(&port, &[]);
    let dir = tempfile::tempdir().unwrap();
    let url = c.manager.url.clone();
    c.nodes
        .push(MemoryNode::start_with(3, dir.path(), "512mb", &["--manager", &url]).unwrap());
    c.node_dirs.push(dir);
    wait_until("the agent to reach the new node", || {
        info_field(&port, "cluster", "dmc_pool_nodes") == 3
    });
    let victim = c.regions()[0]["backups"][0].as_u64().unwrap();
    c.nodes[victim as usize - 1].kill();
    wait_until(
        "every region to have two live copies, one on the new node",
        || {
            let regions = c.regions();
            !regions.is_empty()
                && regions
                    .iter()
                    .all(|r| region_settled(r) && !holds(r, victim) && holds(r, 3))
        },
    );
    std::thread::sleep(Duration::from_millis(500));
    let result = client.finish();
    eprintln!("client across a node failure onto a node added at run time: {result}");
    assert_eq!(result["errors"], 0, "{result}");
    assert_eq!(result["wrong"], 0, "{result}");
    assert_eq!(result["missing"], 0, "{result}");
    for i in 0..200 {
        assert_eq!(redis_cli(&port, &["GET", &format!("k{i}")]), "v");
    }
    c.wait_copies_identical();
}

/// A memory node paused past its lease (SIGSTOP, as a node starved of CPU) leaves the
/// region records; woken (SIGCONT), it is the only node without a copy, so the manager
/// fills new copies back onto it. Over `shm` the agent had mapped the node's old region
/// files: it must map the new ones, or every write after the fill lands in the unlinked
/// old file and the copies diverge (seen in CI when a node's lease lapsed under load;
/// fixed by `Transport::forget_region`).
#[test]
fn a_paused_memory_node_gets_its_copies_back_and_they_take_the_writes() {
    let _serial = dmc_e2e::one_at_a_time();
    let c = TestCluster::routed("proxy", 2, &["--shards", "16", "--lease-ms", "1000"]).unwrap();
    let port = port_of(&c.scale(1).unwrap()["started"][0]);
    wait_until("every region on both nodes", || {
        let regions = c.regions();
        !regions.is_empty() && regions.iter().all(region_settled)
    });
    for i in 0..200 {
        assert_eq!(redis_cli(&port, &["SET", &format!("k{i}"), "before"]), "OK");
    }
    let victim = 2u64;
    let pid = c.nodes[victim as usize - 1].child.id() as i32;
    // SAFETY: kill(2) with plain integers.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    wait_until("the paused node to leave every region record", || {
        c.regions().iter().all(|r| !holds(r, victim))
    });
    // Writes go on on the one copy left.
    for i in 0..200 {
        assert_eq!(redis_cli(&port, &["SET", &format!("k{i}"), "during"]), "OK");
    }
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGCONT) };
    wait_until("every region to have two copies again", || {
        let regions = c.regions();
        !regions.is_empty() && regions.iter().all(region_settled)
    });
    assert!(c.regions().iter().any(|r| holds(r, victim)));
    for i in 0..200 {
        assert_eq!(redis_cli(&port, &["SET", &format!("k{i}"), "after"]), "OK");
    }
    c.wait_copies_identical();
    for i in 0..200 {
        assert_eq!(redis_cli(&port, &["GET", &format!("k{i}")]), "after");
    }
}

/// A memory node is alive from its registration on, even under a lease shorter than
/// its first heartbeat interval (1 s): it heartbeats at once and learns the lease from
/// the answer. It used to sleep that second first, so under a lease of a second or
/// less it lapsed right after registering and the manager failed it over (in CI:
/// `faults.rs` then ran its regions on one copy, and re-replicated them).
#[test]
fn a_memory_node_is_alive_from_its_registration_under_a_short_lease() {
    let _serial = dmc_e2e::one_at_a_time();
    let c = TestCluster::routed("proxy", 2, &["--lease-ms", "800"]).unwrap();
    let mut lapsed = Vec::new();
    let watch = Instant::now();
    while watch.elapsed() < Duration::from_millis(1500) {
        let status = c.manager.status().unwrap();
        for n in status["nodes"].as_array().into_iter().flatten() {
            if n["alive"] != true {
                lapsed.push((watch.elapsed(), n["id"].clone()));
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(lapsed.is_empty(), "nodes seen lapsed: {lapsed:?}");
}
