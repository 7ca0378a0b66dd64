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

/// Issue 42's ACL matrix: a user limited to `~lim:*`, connected to agent A, on keys
/// agent B owns. A forwarded command ran at B as a peer session that skipped the ACL,
/// so a script's `redis.call` and SORT's BY/GET reached any key. Now the client's user
/// travels with the forwarded command (`DMC.USER`) and B checks it as that user: every
/// path is refused as Redis refuses it, and the same commands on keys A owns agree.
#[test]
fn a_restricted_user_reaches_no_other_key_through_the_owning_agent() {
    use dmc_e2e::{Frame, RespConn, error_text};
    let c = TestCluster::routed("proxy", 2, &["--shards", "64"]).unwrap();
    c.scale(2).unwrap();
    let (agents, rows) = c.owners();
    assert_eq!(agents.len(), 2, "{agents:?}");
    let port_a = port_of(&serde_json::json!(agents[0].1));
    let port_b = port_of(&serde_json::json!(agents[1].1));
    let tags: Vec<String> = (0..400).map(|i| format!("lim:{{t{i}}}")).collect();
    let at_b = dmc_e2e::key_owned_by(&rows, agents[1].0, &tags);
    let at_a = dmc_e2e::key_owned_by(&rows, agents[0].0, &tags);
    let secrets: Vec<String> = (0..400).map(|i| format!("secret{i}")).collect();
    let secret_b = dmc_e2e::key_owned_by(&rows, agents[1].0, &secrets);
    assert_eq!(
        redis_cli(
            &port_a,
            &[
                "ACL", "SETUSER", "lim", "on", ">pw", "~lim:*", "&lim:*", "+@all"
            ]
        ),
        "OK"
    );
    for key in [&at_a, &at_b] {
        assert_eq!(redis_cli(&port_a, &["RPUSH", key, &secret_b]), "1");
    }
    assert_eq!(redis_cli(&port_a, &["SET", &secret_b, "hidden"]), "OK");
    for port in [&port_a, &port_b] {
        wait_until("the agent to have the user", || {
            as_lim(port)
                .cmd(&["PING"])
                .is_ok_and(|r| r == Frame::SimpleString(b"PONG".to_vec()))
        });
    }
    let mut lim = as_lim(&port_a);
    for key in [&at_b, &at_a] {
        // A script that reads a key outside the pattern.
        let reply = lim
            .cmd(&[
                "EVAL",
                "return redis.call('GET', ARGV[1])",
                "1",
                key,
                &secret_b,
            ])
            .unwrap();
        assert!(
            error_text(&reply).contains("can't access at least one of the keys"),
            "EVAL on {key}: {reply:?}"
        );
        // SORT's GET and BY patterns reach other keys.
        let reply = lim.cmd(&["SORT", key, "BY", "nosort", "GET", "*"]).unwrap();
        assert!(
            error_text(&reply).contains("GET option of SORT denied"),
            "SORT GET on {key}: {reply:?}"
        );
        let reply = lim.cmd(&["SORT", key, "BY", "*"]).unwrap();
        assert!(
            error_text(&reply).contains("BY option of SORT denied"),
            "SORT BY on {key}: {reply:?}"
        );
        // A script that publishes to a channel outside the user's channels.
        let reply = lim
            .cmd(&[
                "EVAL",
                "return redis.call('PUBLISH', 'news', 'x')",
                "1",
                key,
            ])
            .unwrap();
        assert!(
            error_text(&reply).contains("can't publish to the channel"),
            "EVAL PUBLISH on {key}: {reply:?}"
        );
        // What the user may do still works through either agent.
        assert_eq!(
            lim.cmd(&["EVAL", "return redis.call('LLEN', KEYS[1])", "1", key])
                .unwrap(),
            Frame::Integer(1)
        );
    }
    // A user deleted while connected fails closed at the owner too.
    assert_eq!(redis_cli(&port_a, &["ACL", "DELUSER", "lim"]), "1");
    wait_until("agent B to drop the user", || {
        redis_cli(&port_b, &["ACL", "USERS"])
            .lines()
            .all(|u| u != "lim")
    });
    let mut admin = RespConn::connect(&port_a).unwrap();
    let reply = admin
        .cmd(&["EVAL", "return redis.call('LLEN', KEYS[1])", "1", &at_b])
        .unwrap();
    assert_eq!(reply, Frame::Integer(1), "the admin still works");
}

/// A connection authenticated as `lim` (password `pw`).
fn as_lim(port: &str) -> dmc_e2e::RespConn {
    let mut c = dmc_e2e::RespConn::connect(port).unwrap();
    c.cmd(&["AUTH", "lim", "pw"]).unwrap();
    c
}
