//! The `memory-node` command line: help, config checking, and refusing bad config.
//! (Also makes `cargo test` build the binary the workspace's end-to-end tests start.)

use std::process::Command;

fn node() -> Command {
    Command::new(env!("CARGO_BIN_EXE_memory-node"))
}

#[test]
fn help_lists_the_flags() {
    let out = node().arg("--help").output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--listen",
        "--dir",
        "--capacity",
        "--config",
        "--check-config",
        "--print-config",
    ] {
        assert!(text.contains(flag), "--help mentions {flag}");
    }
}

#[test]
fn print_config_shows_effective_values() {
    let out = node()
        .args(["--capacity", "2gb", "--id", "4", "--print-config"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("capacity = \"2gb\""), "{text}");
    assert!(text.contains("id = 4"), "{text}");
}

#[test]
fn bad_config_fails_with_a_message() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.toml");
    std::fs::write(&path, "capacity = \"lots\"\n").unwrap();
    let out = node()
        .arg("--config")
        .arg(&path)
        .arg("--check-config")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("invalid size"), "{err}");
    let out = node()
        .arg("--config")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/memory-node.example.toml"
        ))
        .arg("--check-config")
        .output()
        .unwrap();
    assert!(out.status.success(), "the shipped example config is valid");
}
