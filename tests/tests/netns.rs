//! Hosts in network namespaces (issue 19, item 4): the manager, two memory nodes and
//! two agents each in a network namespace of its own, joined by veth pairs on a bridge,
//! the pool over `tcp` with `r = 2`, redis-py clients in the test's namespace writing
//! and reading through both agents. One memory node's link is cut (`ip link set down`
//! in its namespace: a partition, the process keeps running), then restored.
//!
//! What fault tolerance delivers must hold across it: the manager takes the cut-off
//! node out of the region records and the clients go on without an error or a lost
//! acknowledged write; when the link is back the node gets fresh copies (its old ones
//! are stale) and every copy equals its primary again.
//!
//! Needs root (network namespaces) and `ip` from iproute2; without them it says that
//! it skipped.

use std::process::Command;
use std::time::{Duration, Instant};

use dmc_e2e::{
    ClusterManager, MemoryNode, PyClient, TestCluster, redis_cli, region_settled,
    start_ready_in_netns, wait_until,
};

/// The subnet of the test's bridge (an unusual one, so it meets no real network).
const NET: &str = "10.213.77";

/// Runs `ip args…`, failing with its stderr.
fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Namespaces `<prefix>-br` (the bridge) and one per host, each with `eth0` on the
/// bridge at `NET.<n>`, and the test's own namespace on it at `NET.100`. Removed on drop.
struct Hosts {
    prefix: String,
    host_link: String,
    names: Vec<String>,
}

impl Hosts {
    fn new(hosts: &[&str]) -> Result<Hosts, String> {
        let prefix = format!("dmc{}", std::process::id() % 100_000);
        let mut made = Hosts {
            host_link: format!("{prefix}h"),
            prefix: prefix.clone(),
            names: Vec::new(),
        };
        let br = format!("{prefix}-br");
        ip(&["netns", "add", &br])?;
        made.names.push(br.clone());
        ip(&["-n", &br, "link", "add", "br0", "type", "bridge"])?;
        ip(&["-n", &br, "link", "set", "br0", "up"])?;
        for (i, host) in hosts.iter().enumerate() {
            let ns = made.ns(host);
            ip(&["netns", "add", &ns])?;
            made.names.push(ns.clone());
            let port = format!("p{i}");
            ip(&[
                "link", "add", "eth0", "netns", &ns, "type", "veth", "peer", "name", &port,
                "netns", &br,
            ])?;
            ip(&["-n", &br, "link", "set", &port, "master", "br0"])?;
            ip(&["-n", &br, "link", "set", &port, "up"])?;
            let addr = format!("{NET}.{}/24", i + 1);
            ip(&["-n", &ns, "addr", "add", &addr, "dev", "eth0"])?;
            ip(&["-n", &ns, "link", "set", "eth0", "up"])?;
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
        }
        ip(&[
            "link",
            "add",
            &made.host_link,
            "type",
            "veth",
            "peer",
            "name",
            "ph",
            "netns",
            &br,
        ])?;
        ip(&["-n", &br, "link", "set", "ph", "master", "br0"])?;
        ip(&["-n", &br, "link", "set", "ph", "up"])?;
        ip(&[
            "addr",
            "add",
            &format!("{NET}.100/24"),
            "dev",
            &made.host_link,
        ])?;
        ip(&["link", "set", &made.host_link, "up"])?;
        Ok(made)
    }

    fn ns(&self, host: &str) -> String {
        format!("{}-{host}", self.prefix)
    }

    /// Cuts (`up = false`) or restores a host's link.
    fn link(&self, host: &str, up: bool) {
        let state = if up { "up" } else { "down" };
        ip(&["-n", &self.ns(host), "link", "set", "eth0", state]).unwrap();
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        let _ = ip(&["link", "del", &self.host_link]);
        for ns in self.names.iter().rev() {
            let _ = ip(&["netns", "del", ns]);
        }
    }
}

fn holds(region: &serde_json::Value, node: u64) -> bool {
    region["primary"].as_u64() == Some(node)
        || region["backups"]
            .as_array()
            .is_some_and(|b| b.iter().any(|n| n.as_u64() == Some(node)))
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

#[test]
fn a_partitioned_memory_node_costs_the_clients_nothing() {
    // SAFETY: geteuid(2) has no arguments and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: network namespaces need root");
        return;
    }
    let _serial = dmc_e2e::one_at_a_time();
    let hosts = match Hosts::new(&["mgr", "node1", "node2", "agent1", "agent2"]) {
        Ok(h) => h,
        Err(e) => {
            eprintln!("skipped: cannot build network namespaces here ({e})");
            return;
        }
    };
    let addr = |i: u8| format!("{NET}.{i}");
    let dir = tempfile::tempdir().unwrap();
    let agent_config = dir.path().join("agent.toml");
    std::fs::write(
        &agent_config,
        "log = \"warn\"\nrouting = \"proxy\"\ndrain-timeout = 5\n",
    )
    .unwrap();
    let state = dir.path().join("cluster.json");
    let mut args = strings(&["serve", "--listen", &format!("{}:0", addr(1))]);
    args.extend(strings(&[
        "--log",
        "warn",
        "--state",
        &state.display().to_string(),
        "--log-dir",
        &dir.path().join("agents").display().to_string(),
        "--region-size",
        "64mb",
        "--segment-size",
        "1mb",
        "--shards",
        "16",
        "--lease-ms",
        "1500",
        "--pool-transport",
        "tcp",
        "--balance",
        "false",
    ]));
    let (child, listen) = start_ready_in_netns(&hosts.ns("mgr"), "cluster-manager", &args)
        .expect("the manager starts in its namespace");
    let manager = ClusterManager {
        child,
        url: format!("http://{listen}"),
        state,
    };
    let url = manager.url.clone();
    let node_dirs: Vec<tempfile::TempDir> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let nodes: Vec<MemoryNode> = (1..=2u32)
        .map(|id| {
            let dir = node_dirs[id as usize - 1].path().to_path_buf();
            let args = strings(&[
                "--id",
                &id.to_string(),
                "--listen",
                &format!("{}:0", addr(1 + id as u8)),
                "--capacity",
                "512mb",
                "--log",
                "warn",
                "--dir",
                &dir.display().to_string(),
                "--manager",
                &url,
            ]);
            let (child, endpoint) =
                start_ready_in_netns(&hosts.ns(&format!("node{id}")), "memory-node", &args)
                    .expect("a memory node starts in its namespace");
            MemoryNode {
                child,
                endpoint,
                id,
                dir,
            }
        })
        .collect();
    let c = TestCluster {
        manager,
        nodes,
        node_dirs,
        dir,
    };
    c.manager
        .wait_for("the memory nodes to register", |s| {
            s["nodes"].as_array().is_some_and(|n| n.len() == 2)
        })
        .unwrap();
    // The agents join from their own namespaces.
    let agents: Vec<(std::process::Child, String)> = (1..=2u8)
        .map(|i| {
            let args = strings(&[
                "--config",
                &agent_config.display().to_string(),
                "--bind",
                &addr(3 + i),
                "--port",
                "6379",
                "--manager",
                &url,
            ]);
            start_ready_in_netns(&hosts.ns(&format!("agent{i}")), "compute-agent", &args)
                .expect("an agent starts in its namespace")
        })
        .collect();
    let _agents = KillOnDrop(agents.into_iter().map(|(c, _)| c).collect());
    c.manager
        .wait_for("both agents to own shards", |s| {
            s["agents"].as_array().is_some_and(|a| {
                a.len() == 2 && a.iter().all(|a| a["shards"].as_u64().unwrap_or(0) > 0)
            })
        })
        .unwrap();
    wait_until("every region on both nodes", || {
        let regions = c.regions();
        !regions.is_empty() && regions.iter().all(region_settled)
    });
    let agent_hosts = [addr(4), addr(5)];
    let cli = |i: usize, args: &[&str]| {
        let mut all = vec!["-h", agent_hosts[i].as_str()];
        all.extend_from_slice(args);
        redis_cli("6379", &all)
    };
    for i in 0..300 {
        assert_eq!(
            cli(i % 2, &["SET", &format!("k{i}"), &format!("v{i}")]),
            "OK"
        );
    }
    let clients: Vec<PyClient> = agent_hosts
        .iter()
        .zip(["one", "two"])
        .map(|(h, prefix)| PyClient::start("6379", &["--prefix", prefix, "--host", h]))
        .collect();
    std::thread::sleep(Duration::from_millis(500));

    // The partition: node 2's link goes down; the process keeps running.
    let victim = 2u64;
    let cut = Instant::now();
    hosts.link("node2", false);
    wait_until("the cut-off node to leave every region record", || {
        c.regions().iter().all(|r| !holds(r, victim))
    });
    let out_after = cut.elapsed();
    // The clients go on against the one copy left.
    std::thread::sleep(Duration::from_millis(1500));
    hosts.link("node2", true);
    let healed = Instant::now();
    wait_until(
        "the healed node to hold fresh copies of every region",
        || {
            let regions = c.regions();
            !regions.is_empty()
                && regions
                    .iter()
                    .all(|r| region_settled(r) && holds(r, victim))
        },
    );
    let refilled_after = healed.elapsed();
    std::thread::sleep(Duration::from_millis(500));
    let results: Vec<serde_json::Value> = clients.into_iter().map(|c| c.finish()).collect();
    eprintln!(
        "node {victim} out of the regions {out_after:?} after its link was cut; copies back \
         {refilled_after:?} after it was restored; clients: {results:?}"
    );
    for r in &results {
        assert_eq!(r["errors"], 0, "{r}");
        assert_eq!(r["wrong"], 0, "{r}");
        assert_eq!(r["missing"], 0, "{r}");
        assert!(r["writes"].as_u64().unwrap() > 100, "{r}");
    }
    let retried: u64 = agent_hosts
        .iter()
        .map(|h| info_field_at(h, "dmc_pool_failover_retries"))
        .sum();
    eprintln!("operations retried after the failover: {retried}");
    for i in 0..300 {
        assert_eq!(cli(i % 2, &["GET", &format!("k{i}")]), format!("v{i}"));
    }
    c.wait_copies_identical();
}

/// A numeric `INFO cluster` field of the agent at `host:6379`.
fn info_field_at(host: &str, field: &str) -> u64 {
    redis_cli("6379", &["-h", host, "INFO", "cluster"])
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// Processes killed when the test ends, however it ends.
struct KillOnDrop(Vec<std::process::Child>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
