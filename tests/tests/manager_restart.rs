//! Manager restarts in the middle of a region move (issue 15, item 5): a manager killed
//! with SIGKILL while it fills a new copy, or right after a memory node died, is
//! restarted on its state file and finishes what was started: the fill is called off
//! (the region thaws, the partial copy is dropped, never served), and the failover and
//! re-replication complete. Clients see no error and lose no acknowledged write.

use std::process::{Command, Stdio};
use std::time::Duration;

use dmc_e2e::{
    PyClient, SECRET_ENV, TEST_SECRET, TestCluster, bin, port_of, redis_cli, region_settled,
    wait_until,
};

const ARGS: [&str; 6] = [
    "--shards",
    "16",
    "--lease-ms",
    "1500",
    "--pool-transport",
    "tcp",
];

fn restart_args() -> Vec<&'static str> {
    let mut a = vec!["--region-size", "64mb", "--segment-size", "1mb"];
    a.extend_from_slice(&ARGS);
    a
}

fn region(c: &TestCluster, id: u64) -> serde_json::Value {
    c.regions()
        .into_iter()
        .find(|r| r["id"].as_u64() == Some(id))
        .unwrap_or_default()
}

#[test]
fn a_fill_cut_off_by_a_manager_crash_is_called_off_and_its_copy_dropped() {
    let mut c = TestCluster::routed("proxy", 3, &ARGS).unwrap();
    let port = port_of(&c.scale(1).unwrap()["started"][0]);
    for i in 0..300 {
        assert_eq!(redis_cli(&port, &["SET", &format!("k{i}"), "v"]), "OK");
    }
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
    wait_until("the fill to be called off", || {
        region_settled(&region(&c, id))
    });
    wait_until("the partial copy to be dropped", || !file.exists());
    for i in 0..300 {
        assert_eq!(redis_cli(&port, &["GET", &format!("k{i}")]), "v");
    }
    assert_eq!(redis_cli(&port, &["SET", "after", "restart"]), "OK");
    assert_eq!(redis_cli(&port, &["MSET", "a", "1", "b", "2"]), "OK");
    c.wait_copies_identical();
}

#[test]
fn a_manager_crash_right_after_a_node_failure_still_ends_with_two_copies() {
    let mut c = TestCluster::routed("proxy", 3, &ARGS).unwrap();
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
