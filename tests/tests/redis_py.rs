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
