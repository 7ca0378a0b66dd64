//! The `compute-agent` command line: help, effective config, refusing bad config.
//! (Also makes `cargo test` build the binary the workspace's end-to-end tests start.)

use std::process::Command;

fn agent() -> Command {
    Command::new(env!("CARGO_BIN_EXE_compute-agent"))
}

#[test]
fn help_lists_the_flags() {
    let out = agent().arg("--help").output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--port",
        "--maxmemory",
        "--maxmemory-policy",
        "--pool-backend",
        "--pool-node",
        "--check-config",
    ] {
        assert!(text.contains(flag), "--help mentions {flag}");
    }
}

#[test]
fn print_config_shows_effective_values() {
    let out = agent()
        .args(["--port", "7777", "--maxmemory", "1gb", "--print-config"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("port = 7777") && text.contains("maxmemory = \"1gb\""),
        "{text}"
    );
}

#[test]
fn bad_config_fails_with_a_message() {
    let out = agent()
        .args(["--maxmemory-policy", "sometimes", "--check-config"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("maxmemory-policy"));
    let out = agent()
        .args(["--threads", "0", "--check-config"])
        .output()
        .unwrap();
    assert!(!out.status.success(), "no runtime thread to serve on");
    assert!(String::from_utf8_lossy(&out.stderr).contains("threads"));
    let out = agent()
        .arg("--config")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/compute-agent.example.toml"
        ))
        .arg("--check-config")
        .output()
        .unwrap();
    assert!(out.status.success(), "the shipped example config is valid");
}
