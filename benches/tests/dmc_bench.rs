//! `dmc-bench` against a real standalone agent for a few seconds: the summary's counts
//! add up (every request is a hit, a miss or a write; no errors) and the per-second
//! timeline sums to the same totals.

use std::process::Command;

use dmc_e2e::Agent;

fn bench(agent: &Agent, args: &[&str], dir: &std::path::Path) -> serde_json::Value {
    let json = dir.join("summary.json");
    let timeline = dir.join("timeline.csv");
    let out = Command::new(env!("CARGO_BIN_EXE_dmc-bench"))
        .args([
            "run",
            "-p",
            &agent.port(),
            "-q",
            "--warmup",
            "0.5",
            "--duration",
            "2",
        ])
        .args(args)
        .arg("--json")
        .arg(&json)
        .arg("--timeline")
        .arg(&timeline)
        .output()
        .expect("dmc-bench runs");
    assert!(
        out.status.success(),
        "dmc-bench failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let c = &s["counts"];
    let n = |k: &str| c[k].as_u64().unwrap();
    assert!(n("ops") > 0, "{s}");
    assert_eq!(n("errors"), 0, "{s}");
    assert_eq!(n("ops"), n("hits") + n("misses") + n("writes"), "{s}");
    assert_eq!(n("gets"), n("hits") + n("misses"));
    // The timeline's rows add up to the totals.
    let csv = std::fs::read_to_string(&timeline).unwrap();
    let ops: u64 = csv
        .lines()
        .skip(1)
        .map(|l| l.split(',').nth(1).unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(ops, n("ops"));
    s
}

#[test]
fn summary_counts_add_up_against_an_agent() {
    let agent = Agent::start(&[]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    // YCSB A over loaded keys: reads hit, updates write.
    let a = bench(&agent, &["-w", "a", "-n", "2000", "-c", "8"], dir.path());
    assert_eq!(a["counts"]["misses"].as_u64(), Some(0), "{a}");
    assert!(a["counts"]["writes"].as_u64().unwrap() > 0);
    assert!(a["latency_us"]["p99"].as_u64().unwrap() >= a["latency_us"]["p50"].as_u64().unwrap());
    // YCSB D over RESP3 with pipelining, and a fixed-rate read-modify-write mix (each
    // operation a GET and a SET of one key).
    bench(
        &agent,
        &[
            "-w",
            "d",
            "-n",
            "2000",
            "-c",
            "4",
            "-P",
            "8",
            "--resp",
            "3",
            "--no-load",
        ],
        dir.path(),
    );
    let f = bench(
        &agent,
        &[
            "-w",
            "custom",
            "--rmw",
            "1",
            "-n",
            "500",
            "--key-dist",
            "uniform",
            "--rate",
            "2000",
            "--no-load",
            "--key-size",
            "24",
        ],
        dir.path(),
    );
    assert_eq!(f["counts"]["gets"], f["counts"]["writes"], "{f}");
}
