//! redis-py's own test suite (its PyPI source distribution, the commands, pipeline,
//! pub/sub, lock, scripting, encoding, connection and hash files) against a standalone
//! agent. `tests/redis-py-suite/run.py` downloads it once into `target/` and fails on
//! any failure not listed, with its reason, in `tests/redis-py-suite/expected-failures.txt`,
//! and on a listed test that passes (the list only shrinks). Needs network access to
//! PyPI the first time, and pytest, pytest-asyncio and pytest-timeout (`.ci/run`
//! installs them).

use std::process::Command;

use dmc_e2e::Agent;

#[test]
fn redis_py_suite_passes_but_for_its_listed_expected_failures() {
    let agent = Agent::start(&[]).unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/redis-py-suite/run.py");
    let out = Command::new("python3")
        .arg(script)
        .args(["--port", &agent.port()])
        .output()
        .expect("python3");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let summary: Vec<&str> = stdout
        .lines()
        .filter(|l| {
            l.starts_with("redis-py ") || l.starts_with("UNEXPECTED") || l.starts_with("NOW PASSES")
        })
        .collect();
    eprintln!("{}", summary.join("\n"));
    assert!(
        out.status.success(),
        "redis-py's suite:\n{}\n--- output ---\n{stdout}\n{stderr}",
        summary.join("\n")
    );
    assert!(
        summary.iter().any(|l| l.contains(" passed, ")),
        "no summary: {stdout}\n{stderr}"
    );
}
