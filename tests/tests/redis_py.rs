//! redis-py (the official Python client, RESP2 and RESP3) against the real agent.
//! `.ci/run` installs it; the script is `tests/py/roundtrip.py`.

use std::process::Command;

use dmc_e2e::Agent;

#[test]
fn redis_py_round_trips_every_command() {
    let agent = Agent::start(&[]).unwrap();
    let secured = Agent::start(&["--requirepass", "s3cret"]).unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/py/roundtrip.py");
    let out = Command::new("python3")
        .arg(script)
        .arg(agent.port())
        .arg(secured.port())
        .output()
        .expect("python3");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "redis-py failed:\n{stdout}\n{stderr}");
    assert!(
        stdout.contains("RESP2: ok")
            && stdout.contains("RESP3: ok")
            && stdout.contains("AUTH RESP3: ok"),
        "{stdout}"
    );
}

/// Runs the redis-py check `tests/py/SCRIPT` against `ports` and returns its output,
/// failing the test with the script's output unless it passed over RESP2 and RESP3.
fn py_check(script: &str, ports: &[String]) -> String {
    let stdout = py_run(script, ports);
    assert!(
        stdout.contains("RESP2: ok") && stdout.contains("RESP3: ok"),
        "{stdout}"
    );
    stdout
}

fn collections_check(ports: &[String]) -> String {
    py_check("collections_check.py", ports)
}

/// A two-agent proxy-mode cluster and its agents' client ports.
fn two_agent_proxy_cluster() -> (dmc_e2e::TestCluster, Vec<String>) {
    let c = dmc_e2e::TestCluster::routed("proxy", 2, &["--shards", "64"]).unwrap();
    let report = c.scale(2).unwrap();
    let ports: Vec<String> = report["started"]
        .as_array()
        .expect("the started agents")
        .iter()
        .map(dmc_e2e::port_of)
        .collect();
    assert_eq!(ports.len(), 2, "{report}");
    (c, ports)
}

#[test]
fn redis_py_exercises_every_collection_command_on_a_standalone_agent() {
    let agent = Agent::start(&[]).unwrap();
    collections_check(&[agent.port()]);
}

#[test]
fn redis_py_exercises_collections_across_a_two_agent_proxy_cluster() {
    let (_c, ports) = two_agent_proxy_cluster();
    // Both agents serve the one keyspace: writes through one are read through the
    // other, and a BLPOP blocked on the second is woken by a push through the first.
    let out = collections_check(&ports);
    assert!(out.contains("CROSS: ok"), "{out}");
}

#[test]
fn redis_py_transactions_on_a_standalone_agent() {
    let agent = Agent::start(&[]).unwrap();
    py_check("transactions_check.py", &[agent.port()]);
}

/// One runtime thread (`--threads 1`, replies written after every ready client was
/// read): a script past its budget still hands the thread over, so SCRIPT KILL from
/// another client is served while it loops.
#[test]
fn redis_py_transactions_on_a_one_thread_agent() {
    let agent = Agent::start(&["--threads", "1"]).unwrap();
    py_check("transactions_check.py", &[agent.port()]);
}

#[test]
fn redis_py_transactions_across_a_two_agent_proxy_cluster() {
    let (_c, ports) = two_agent_proxy_cluster();
    // The client's agent forwards each transaction whole to the owner of its keys;
    // a write through the other agent aborts a WATCH.
    py_check("transactions_check.py", &ports);
}

#[test]
fn redis_py_pubsub_on_a_standalone_agent() {
    let agent = Agent::start(&[]).unwrap();
    let out = py_check("pubsub_check.py", &[agent.port()]);
    assert!(out.contains("SLOW: ok"), "{out}");
}

#[test]
fn redis_py_pubsub_across_a_two_agent_proxy_cluster() {
    let (_c, ports) = two_agent_proxy_cluster();
    // Publisher on the first agent; channel subscribers on both, pattern and shard
    // subscribers on the second: every message reaches each once, in order.
    let out = py_check("pubsub_check.py", &ports);
    assert!(out.contains("SLOW: ok"), "{out}");
}

#[test]
fn redis_py_keyspace_notifications_on_a_standalone_agent() {
    let agent = Agent::start(&[]).unwrap();
    // Redis 7.0's events for writes of every type, in its order; `evicted` too.
    let out = py_check("notify_check.py", &[agent.port()]);
    assert!(out.contains("EVICTED: ok"), "{out}");
}

#[test]
fn redis_py_keyspace_notifications_across_a_two_agent_proxy_cluster() {
    let (_c, ports) = two_agent_proxy_cluster();
    // Writes through the first agent, the subscriber on the second: every key's events
    // arrive, in Redis's order per key, whichever agent owns it; so does a PUBLISH
    // inside EXEC or a script.
    let out = py_check("notify_check.py", &ports);
    assert!(out.contains("INSIDE: ok"), "{out}");
}

#[test]
fn redis_py_client_tracking_on_a_standalone_agent() {
    let agent = Agent::start(&[]).unwrap();
    py_check("tracking_check.py", &[agent.port()]);
}

#[test]
fn redis_py_client_tracking_across_a_two_agent_proxy_cluster() {
    let (_c, ports) = two_agent_proxy_cluster();
    // Trackers on the second agent, writes through the first: a key owned by either
    // agent invalidates the second agent's trackers.
    py_check("tracking_check.py", &[ports[1].clone(), ports[0].clone()]);
}

#[test]
fn function_dump_and_restore_move_libraries_between_redis_and_an_agent() {
    let agent = Agent::start(&[]).unwrap();
    let out = py_run("function_dump_check.py", &[agent.port()]);
    assert!(out.contains("DUMP: ok"), "{out}");
}

#[test]
fn a_function_restore_through_one_agent_is_callable_through_the_other() {
    let (_c, ports) = two_agent_proxy_cluster();
    let out = py_run("function_dump_check.py", &ports);
    assert!(out.contains("DUMP: ok"), "{out}");
}

/// Bitmaps, HyperLogLog, geo and SORT: every reply as redis-server 7 gives it
/// (`tests/py/differential_check.py` starts one and sends both the same commands).
#[test]
fn a_standalone_agent_answers_the_data_model_commands_as_redis_does() {
    let agent = Agent::start(&[]).unwrap();
    let out = py_run("differential_check.py", &[agent.port()]);
    assert!(
        out.contains("bitmaps: ok") && out.contains("sort: ok"),
        "{out}"
    );
}

/// The same through one agent of a proxy cluster, every read asked of both agents.
#[test]
fn two_agents_answer_the_data_model_commands_as_redis_does() {
    let (_c, ports) = two_agent_proxy_cluster();
    let out = py_run("differential_check.py", &ports);
    assert!(
        out.contains("bitmaps: ok")
            && out.contains("large-strings: ok")
            && out.contains("sort: ok"),
        "{out}"
    );
}

/// Runs `tests/py/SCRIPT` with `args` and returns its output, failing the test with
/// the script's output unless it exits successfully.
fn py_run(script: &str, args: &[String]) -> String {
    let script = format!("{}/py/{script}", env!("CARGO_MANIFEST_DIR"));
    let out = Command::new("python3")
        .arg(script)
        .args(args)
        .output()
        .expect("python3");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    stdout
}

#[test]
fn a_reader_agent_never_sees_a_torn_collection_while_the_owner_rewrites_it() {
    let c = dmc_e2e::TestCluster::routed("proxy", 2, &["--shards", "64"]).unwrap();
    c.scale(2).unwrap();
    let (agents, rows) = c.owners();
    assert_eq!(agents.len(), 2, "{agents:?}");
    let (owner, other) = (&agents[0], &agents[1]);
    // A hash tag whose slot the first agent owns: it writes, the second only reads.
    let tags: Vec<String> = (0..200).map(|i| format!("t{i}")).collect();
    let tag = dmc_e2e::key_owned_by(&rows, owner.0, &tags);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/py/torn_reads.py");
    let out = Command::new("python3")
        .arg(script)
        .arg(dmc_e2e::port_of(&serde_json::json!(owner.1)))
        .arg(dmc_e2e::port_of(&serde_json::json!(other.1)))
        .arg(&tag)
        .arg("4")
        .output()
        .expect("python3");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    eprintln!("{stdout}");
}
