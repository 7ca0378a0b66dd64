//! Automatic load balancing (issue 15, item 4): agents report the latency they see on
//! each memory node with their heartbeats, and the manager moves primary roles off a
//! node that stays much slower than one holding a backup. Here memory node 1 answers
//! every request 5 ms late (fail point `node-verbs-delay`) while a redis-py
//! client reads and writes through an agent over `tcp`: every region whose primary is
//! on node 1 moves to node 2, with no client error.

use dmc_e2e::{PyClient, TestCluster, port_of, wait_until};

#[test]
fn primaries_move_off_a_memory_node_agents_see_as_slow() {
    let c = TestCluster::start_with_node_env(
        &[
            "--region-size",
            "64mb",
            "--segment-size",
            "1mb",
            "--shards",
            "16",
            "--lease-ms",
            "2000",
            "--pool-transport",
            "tcp",
            "--replicas",
            "2",
            "--balance",
            "true",
            "--balance-interval-ms",
            "1000",
        ],
        // No local cache: reads go to the pool, where their latency is seen.
        "log = \"warn\"\nrouting = \"proxy\"\nlocal-cache-size = \"0\"\n",
        2,
        "512mb",
        &|id| {
            if id == 1 {
                vec![("FAILPOINTS", "node-verbs-delay=return(5)")]
            } else {
                Vec::new()
            }
        },
    )
    .unwrap();
    let port = port_of(&c.scale(1).unwrap()["started"][0]);
    // Every region's primary on the slow node first (before any load lets the balancer
    // act), so the balancer has work to do.
    wait_until("the agent to have regions", || !c.regions().is_empty());
    for r in c.regions() {
        if r["primary"] != 1 {
            let id = r["id"].as_u64().unwrap().to_string();
            c.manager
                .cli(&["regions", "migrate", &id, "--to", "1"])
                .unwrap();
        }
    }
    let placed = std::time::Instant::now();
    // Few keys: every write waits for the slow node's copy too.
    let client = PyClient::start_with_keys(&port, 100, &[]);
    wait_until("every primary to leave the slow node", || {
        let regions = c.regions();
        !regions.is_empty() && regions.iter().all(|r| r["primary"] == 2)
    });
    let nodes = c.manager.status().unwrap()["nodes"].clone();
    eprintln!(
        "every primary left the slow node {} ms after it got them; latency seen: {}",
        placed.elapsed().as_millis(),
        nodes
            .as_array()
            .unwrap()
            .iter()
            .map(|n| format!(
                "node {} {:.0} µs",
                n["id"],
                n["latency_us"].as_f64().unwrap_or(0.0)
            ))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let metrics =
        dmc_e2e::http_get(c.manager.url.trim_start_matches("http://"), "/metrics").unwrap();
    let balanced = metrics
        .lines()
        .find_map(|l| l.strip_prefix("dmc_manager_balance_migrations_total "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .unwrap_or(0.0);
    assert!(balanced >= 1.0, "balance migrations: {balanced}");
    let result = client.finish();
    eprintln!("client: {result}");
    assert_eq!(result["errors"], 0, "{result}");
    assert_eq!(result["wrong"], 0, "{result}");
    assert_eq!(result["missing"], 0, "{result}");
}
