//! Scaling agents with `cluster-manager agents scale` while a client keeps running:
//! a manager, two memory nodes over `shm` (and, once, over `tcp`) with `r = 2`, and
//! agents started by the manager's launcher.

use std::process::Command;
use std::time::Duration;

use dmc_e2e::{PyClient, TestCluster, http_get, info_field, metric, port_of};

/// Two memory nodes (`r = 2`) and launched agents in `routing` mode.
fn cluster(routing: &str) -> TestCluster {
    cluster_with(routing, &[])
}

/// [`cluster`] with more manager flags.
fn cluster_with(routing: &str, extra: &[&str]) -> TestCluster {
    let mut args = vec!["--shards", "64"];
    args.extend_from_slice(extra);
    TestCluster::routed(routing, 2, &args).unwrap()
}

/// 600 SETs in one pipeline, then 600 GETs in another, through one agent: every reply
/// in order and every value the one written.
const PIPELINE: &str = r#"
import sys, redis
r = redis.Redis(port=int(sys.argv[1]), lib_name=None, lib_version=None)
p = r.pipeline(transaction=False)
for i in range(600):
    p.set(f"pipe:{i}", f"value-{i}")
assert p.execute() == [True] * 600
p = r.pipeline(transaction=False)
for i in range(600):
    p.get(f"pipe:{i}")
got = p.execute()
assert got == [f"value-{i}".encode() for i in range(600)], got[:5]
"#;

/// Proxy mode: a plain redis-py client on agent 1 writes and reads without pause while
/// the cluster grows to three agents and shrinks back to one. No request fails, every
/// acknowledged write reads back, and the pool's allocation is what it was: shards
/// moved, keys did not.
#[test]
fn proxy_mode_rescale_loses_nothing_and_copies_nothing() {
    // Clusters side by side on 2 cores starve each other's heartbeats past the
    // lease (CI: "lease lapsed" errors while another test rescaled).
    let _one = dmc_e2e::one_at_a_time();
    rescale_loses_nothing_and_copies_nothing(cluster("proxy"));
}

/// The same with the pool reached over `tcp`: the memory nodes run every verb, as on
/// hosts without shared memory.
#[test]
fn proxy_mode_rescale_over_tcp_loses_nothing_and_copies_nothing() {
    // Clusters side by side on 2 cores starve each other's heartbeats past the
    // lease (CI: "lease lapsed" errors while another test rescaled).
    let _one = dmc_e2e::one_at_a_time();
    rescale_loses_nothing_and_copies_nothing(cluster_with("proxy", &["--pool-transport", "tcp"]));
}

fn rescale_loses_nothing_and_copies_nothing(c: TestCluster) {
    let first = c.scale(1).unwrap();
    let port = port_of(&first["started"][0]);
    let client = PyClient::start(&port, &[]);
    let before = c.region_files();
    std::thread::sleep(Duration::from_millis(500));
    c.scale(3).unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    // Writes of slots the new agents own went through them.
    let forwarded = info_field(&port, "cluster", "dmc_forwarded_commands");
    assert!(forwarded > 0, "no write was forwarded");
    // Pipelined writes of keys all three agents own are forwarded per owner in batches
    // and answer in order.
    let pipelined = Command::new("python3")
        .args(["-c", PIPELINE, &port])
        .output()
        .unwrap();
    assert!(
        pipelined.status.success(),
        "{}{}",
        String::from_utf8_lossy(&pipelined.stdout),
        String::from_utf8_lossy(&pipelined.stderr)
    );
    c.scale(1).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let result = client.finish();
    eprintln!("client: {result}");
    assert_eq!(result["errors"], 0, "{result}");
    assert_eq!(result["wrong"], 0, "{result}");
    assert_eq!(result["missing"], 0, "{result}");
    assert!(result["writes"].as_u64().unwrap() > 100, "{result}");
    assert_eq!(c.region_files(), before, "rescaling allocated pool memory");
    let status = c.manager.status().unwrap();
    assert_eq!(status["agents"].as_array().unwrap().len(), 1, "{status}");
    // The manager's own metrics saw the membership and the three scale operations.
    let manager_addr = c.manager.url.trim_start_matches("http://");
    let text = http_get(manager_addr, "/metrics").unwrap();
    let names = dmc_process::metrics::names_in(&text);
    let declared: std::collections::BTreeSet<String> = dmc_process::metrics::manager::ALL
        .iter()
        .map(|d| d.name.to_string())
        .collect();
    assert!(names.is_subset(&declared), "{text}");
    assert_eq!(
        metric(&text, "dmc_manager_scale_operations_total{result=\"ok\"}"),
        Some(3.0),
        "{text}"
    );
    assert_eq!(
        metric(&text, "dmc_manager_memory_nodes{state=\"alive\"}"),
        Some(2.0),
        "{text}"
    );
    assert!(metric(&text, "dmc_manager_heartbeats_total").unwrap_or(0.0) > 0.0);
    assert!(metric(&text, "dmc_manager_scale_duration_seconds_count").unwrap_or(0.0) >= 3.0);
}

/// Cluster mode: redis-py's RedisCluster and `redis-cli -c` follow `-MOVED` to the
/// owning agent, before and after a rescale changes the owners.
#[test]
fn cluster_mode_clients_follow_moved_across_a_rescale() {
    // Clusters side by side on 2 cores starve each other's heartbeats past the
    // lease (CI: "lease lapsed" errors while another test rescaled).
    let _one = dmc_e2e::one_at_a_time();
    let c = cluster("cluster");
    let first = c.scale(2).unwrap();
    let port = port_of(&first["started"][0]);
    let cli = |args: &[&str]| {
        let out = Command::new("redis-cli")
            .args(["-c", "-p", &port])
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    assert!(cli(&["cluster", "info"]).contains("cluster_state:ok"));
    assert!(cli(&["info", "cluster"]).contains("cluster_enabled:1"));
    // Without -c, a write to a slot the other agent owns is redirected.
    let moved = (0..50).any(|i| {
        let out = Command::new("redis-cli")
            .args(["-p", &port, "set", &format!("key:{i}"), "v"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).starts_with("MOVED")
    });
    assert!(moved, "no key of 50 was owned by the other agent");
    for i in 0..50 {
        assert_eq!(cli(&["set", &format!("key:{i}"), &format!("v{i}")]), "OK");
    }
    let client = PyClient::start(&port, &["--cluster"]);
    c.scale(3).unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    c.scale(2).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let result = client.finish();
    eprintln!("RedisCluster client: {result}");
    assert_eq!(result["errors"], 0, "{result}");
    assert_eq!(result["wrong"], 0, "{result}");
    assert_eq!(result["missing"], 0, "{result}");
    // redis-cli -c, after the owners changed.
    for i in 0..50 {
        assert_eq!(cli(&["get", &format!("key:{i}")]), format!("v{i}"));
        assert_eq!(cli(&["set", &format!("key:{i}"), "again"]), "OK");
    }
}

/// A manager crash is invisible to clients: agents keep serving on the map they have,
/// and the restarted manager resumes the same map, leases and agents from its state
/// file, and can rescale them again.
#[test]
fn killing_and_restarting_the_manager_changes_nothing_for_clients() {
    // Clusters side by side on 2 cores starve each other's heartbeats past the
    // lease (CI: "lease lapsed" errors while another test rescaled).
    let _one = dmc_e2e::one_at_a_time();
    // Agents stop writing when the manager has been unreachable for a whole lease; the
    // claim here is about a manager back within its lease, so the lease is made longer
    // than the outage below can take on a loaded machine (kill, 2.5 s, restart, beat).
    let mut c = cluster_with("proxy", &["--lease-ms", "20000"]);
    let first = c.scale(2).unwrap();
    let port = port_of(&first["started"][0]);
    let slots_before = c.manager.cli(&["slots", "--json"]).unwrap();
    let client = PyClient::start(&port, &[]);
    c.manager.kill();
    std::thread::sleep(Duration::from_millis(2500));
    let agent_config = c.dir.path().join("agent.toml");
    c.manager
        .restart(&[
            "--lease-ms",
            "20000",
            "--region-size",
            "64mb",
            "--segment-size",
            "1mb",
            "--agent-config",
            agent_config.to_str().unwrap(),
            "--log-dir",
            c.dir.path().join("agents").to_str().unwrap(),
        ])
        .unwrap();
    assert_eq!(c.manager.cli(&["slots", "--json"]).unwrap(), slots_before);
    let status = c
        .manager
        .wait_for("both agents alive on the current map", |s| {
            s["agents"].as_array().is_some_and(|a| {
                a.len() == 2
                    && a.iter()
                        .all(|x| x["alive"] == true && x["map_version"] == s["map_version"])
            })
        })
        .unwrap();
    eprintln!("after the restart: {status}");
    // The restarted manager still drives the agents its predecessor launched.
    c.scale(1).unwrap();
    let result = client.finish();
    eprintln!("client: {result}");
    assert_eq!(result["errors"], 0, "{result}");
    assert_eq!(result["wrong"], 0, "{result}");
    assert_eq!(result["missing"], 0, "{result}");
}

/// SETs one at a time (as a plain client sends them) of keys in every slot, then
/// GETs: each SET acknowledged within the router's patience (10 s; a reply later than
/// that is a stall, not a slow machine) and each value the one written.
const ONE_AT_A_TIME: &str = r#"
import sys, time, redis
r = redis.Redis(port=int(sys.argv[1]), lib_name=None, lib_version=None)
slowest = 0.0
for i in range(400):
    t = time.monotonic()
    assert r.set(f"single:{i}", f"value-{i}") is True
    slowest = max(slowest, time.monotonic() - t)
assert slowest < 10, f"a SET waited {slowest:.1f} s"
for i in range(400):
    assert r.get(f"single:{i}") == f"value-{i}".encode()
"#;

/// An agent that `agents scale` removes and stops, and that exits before the manager
/// has its report of the map that removed it (here the report is lost), does not hold
/// up the agent taking its shards for one and a half leases (30 s with this lease),
/// longer than the router's patience (10 s, then TRYAGAIN): the manager saw its process
/// exit. Plain SETs of keys in every slot through the remaining agent are acknowledged.
#[test]
fn a_scaled_in_agent_whose_removal_report_is_lost_stalls_no_write() {
    // Clusters side by side on 2 cores starve each other's heartbeats past the
    // lease (CI: "lease lapsed" errors while another test rescaled).
    let _one = dmc_e2e::one_at_a_time();
    let c = TestCluster::routed_with_env(
        "proxy",
        2,
        &["--shards", "64", "--lease-ms", "20000"],
        &[("FAILPOINTS", "agent-removal-unreported=return")],
    )
    .unwrap();
    let first = c.scale(2).unwrap();
    let port = port_of(&first["started"][0]);
    c.scale(1).unwrap();
    let started = std::time::Instant::now();
    let out = Command::new("python3")
        .args(["-c", ONE_AT_A_TIME, &port])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!(
        "400 SETs and GETs after the scale-in: {:?}",
        started.elapsed()
    );
}
