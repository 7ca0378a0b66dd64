//! Memory nodes and agents started with `--manager` register with the cluster manager
//! and keep their leases alive; a killed agent's lease lapses and `status` reports it
//! dead.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use dmc_e2e::{Agent, MemoryNode, bin};

fn status(url: &str) -> serde_json::Value {
    let out = Command::new(bin("cluster-manager").unwrap())
        .args(["--manager", url, "status", "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Polls `status` until `check` holds, for at most 15 s.
fn wait_for(
    url: &str,
    what: &str,
    check: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let s = status(url);
        if check(&s) {
            return s;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}: {s}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Kills the process when the test ends, pass or fail.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn nodes_and_agents_register_heartbeat_and_lapse() {
    let dir = tempfile::tempdir().unwrap();
    let mut manager = KillOnDrop(
        Command::new(bin("cluster-manager").unwrap())
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--lease-ms",
                "2500",
                "--log",
                "warn",
            ])
            .arg("--state")
            .arg(dir.path().join("cluster.json"))
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut out = manager.0.stdout.take().unwrap();
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    while out.read(&mut byte).unwrap() == 1 && byte[0] != b'\n' {
        line.push(byte[0]);
    }
    let line = String::from_utf8(line).unwrap();
    let url = format!(
        "http://{}",
        line.split("listen=").nth(1).expect("ready line")
    );

    let node_dir = tempfile::tempdir().unwrap();
    let _node = MemoryNode::start_with(7, node_dir.path(), "64mb", &["--manager", &url]).unwrap();
    let mut agent = Agent::start(&["--manager", &url]).unwrap();
    let s = wait_for(&url, "the node and the agent to register", |s| {
        s["nodes"]
            .as_array()
            .is_some_and(|n| n.len() == 1 && n[0]["alive"] == true)
            && s["agents"]
                .as_array()
                .is_some_and(|a| a.len() == 1 && a[0]["alive"] == true)
    });
    assert_eq!(s["nodes"][0]["id"], 7);
    assert_eq!(s["capacity"].as_u64(), Some(64 << 20));
    assert_eq!(s["agents"][0]["listen"], agent.addr.as_str());
    assert_eq!(
        s["agents"][0]["shards"], s["shards"],
        "the only agent owns every shard"
    );
    // Heartbeats keep the leases alive well past one lease...
    std::thread::sleep(Duration::from_millis(3000));
    let s = status(&url);
    assert!(
        s["agents"][0]["alive"] == true && s["nodes"][0]["alive"] == true,
        "{s}"
    );
    // ...and a killed agent's lease lapses.
    agent.kill();
    wait_for(&url, "the agent's lease to lapse", |s| {
        s["agents"][0]["alive"] == false
    });
}
