//! Agent failover (issue 15, item 3): an agent the launcher started, killed with
//! SIGKILL, is removed by the manager as soon as the launcher sees its process exit
//! (not a lease later), its shards go to the live agent at a new epoch, and that agent
//! takes them over after a short exit grace (resolving any commit it left half-way);
//! the launcher starts a replacement.
//! A redis-py client on the live agent (proxy mode) sees no error and loses no
//! acknowledged write: writes to the dead agent's slots wait in the proxy's retries
//! until the new owner writes them.

use std::time::{Duration, Instant};

use dmc_e2e::{PyClient, TestCluster, http_get, metric, port_of};

#[test]
fn a_killed_agents_shards_are_taken_over_without_client_errors() {
    let c = TestCluster::routed("proxy", 2, &["--shards", "64", "--lease-ms", "1000"]).unwrap();
    let report = c.scale(2).unwrap();
    let started: Vec<String> = report["started"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap().to_string())
        .collect();
    assert_eq!(started.len(), 2, "{report}");
    let (survivor, victim) = (&started[0], &started[1]);
    let client = PyClient::start(&port_of(&serde_json::json!(survivor)), &[]);
    std::thread::sleep(Duration::from_millis(500));
    let pid = c
        .manager
        .launched()
        .into_iter()
        .find(|(listen, _)| listen == victim)
        .map(|(_, pid)| pid)
        .expect("the victim's pid in the manager's state");
    let killed = Instant::now();
    // SAFETY: kill(2) on an agent this test's manager launched.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    // Removed (its shards went to the survivor; a replacement may already be in).
    let listens = |s: &serde_json::Value| -> Vec<String> {
        s["agents"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|a| a["listen"].as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    c.manager
        .wait_for("the dead agent to be removed", |s| {
            !listens(s).contains(victim)
        })
        .unwrap();
    let removed_after = killed.elapsed();
    // The launcher replaces the dead agent: the instance is back to two agents.
    let s = c
        .manager
        .wait_for("a replacement agent", |s| {
            s["agents"].as_array().is_some_and(|a| a.len() == 2)
        })
        .unwrap();
    let replaced_after = killed.elapsed();
    let now = listens(&s);
    assert!(now.contains(survivor) && !now.contains(victim), "{s}");
    // Writes go on through the survivor for a while after the takeover.
    std::thread::sleep(Duration::from_millis(1500));
    let result = client.finish();
    eprintln!(
        "agent removed {removed_after:?} and replaced {replaced_after:?} after SIGKILL; client: {result}"
    );
    assert_eq!(result["errors"], 0, "{result}");
    assert_eq!(result["wrong"], 0, "{result}");
    assert_eq!(result["missing"], 0, "{result}");
    assert!(result["writes"].as_u64().unwrap() > 100, "{result}");
    let text = http_get(c.manager.url.trim_start_matches("http://"), "/metrics").unwrap();
    assert_eq!(
        metric(&text, "dmc_manager_agent_failovers_total"),
        Some(1.0),
        "{text}"
    );
}
