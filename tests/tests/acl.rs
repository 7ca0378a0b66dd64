//! ACL users of a cluster instance (issue 17, item 4): kept by the cluster manager and
//! installed by every agent from the map. A user limited to `~app:*` and `+@read`,
//! created through one agent, is refused a write and a key outside its pattern on every
//! agent — a write it sends to an agent that does not own the key is refused there,
//! before it is forwarded — and each agent's ACL LOG shows it; a change or deletion
//! through either agent reaches the other.

use std::process::Command;

use dmc_e2e::{TestCluster, port_of, redis_cli, wait_until};

const NO_SET: &str = "NOPERM this user has no permissions to run the 'set' command";
const NO_KEY: &str =
    "NOPERM this user has no permissions to access one of the keys used as arguments";

/// `redis-cli` as user `app` (password `pw`), trimmed stdout.
fn as_app(port: &str, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args([
            "-p",
            port,
            "--user",
            "app",
            "--pass",
            "pw",
            "--no-auth-warning",
        ])
        .args(args)
        .output()
        .expect("running redis-cli");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn a_read_only_user_of_app_keys_is_refused_on_every_agent_and_the_acl_log_shows_it() {
    let c = TestCluster::routed("proxy", 2, &["--shards", "64"]).unwrap();
    let report = c.scale(2).unwrap();
    let ports: Vec<String> = report["started"]
        .as_array()
        .expect("the started agents")
        .iter()
        .map(port_of)
        .collect();
    assert_eq!(ports.len(), 2, "{report}");
    assert_eq!(
        redis_cli(
            &ports[0],
            &["ACL", "SETUSER", "app", "on", ">pw", "~app:*", "+@read"]
        ),
        "OK"
    );
    assert_eq!(redis_cli(&ports[1], &["SET", "app:1", "v"]), "OK");
    for port in &ports {
        wait_until("the agent to have the user", || {
            as_app(port, &["GET", "app:1"]) == "v"
        });
        assert_eq!(as_app(port, &["SET", "app:1", "x"]), NO_SET, "agent {port}");
        assert_eq!(as_app(port, &["GET", "other:1"]), NO_KEY, "agent {port}");
        let log = redis_cli(port, &["ACL", "LOG"]);
        assert!(
            log.contains("other:1") && log.contains("\nset\n") && log.contains("app"),
            "agent {port}: {log}"
        );
    }
    assert_eq!(
        redis_cli(&ports[0], &["GET", "app:1"]),
        "v",
        "nothing was written"
    );
    // A change through the second agent reaches the first.
    assert_eq!(
        redis_cli(&ports[1], &["ACL", "SETUSER", "app", "+set"]),
        "OK"
    );
    wait_until("the first agent to take the change", || {
        as_app(&ports[0], &["SET", "app:1", "x"]) == "OK"
    });
    assert_eq!(redis_cli(&ports[1], &["GET", "app:1"]), "x");
    // Deleted through the first agent: gone from the second.
    assert_eq!(redis_cli(&ports[0], &["ACL", "DELUSER", "app"]), "1");
    wait_until("the second agent to forget the user", || {
        !redis_cli(&ports[1], &["ACL", "USERS"]).contains("app")
    });
    assert_eq!(
        redis_cli(&ports[1], &["AUTH", "app", "pw"]),
        "WRONGPASS invalid username-password pair or user is disabled.",
        "a deleted user cannot log in"
    );
}
