//! Eviction through the real agent (issue 20): a small `maxmemory` keeps about the keys
//! its bytes hold, and `maxmemory-policy adaptive` is configured, reported and exported
//! as an operator would see it (CONFIG, INFO, /metrics).

use std::process::Command;

use dmc_e2e::{Agent, http_get, info_field, metric};

/// 60 000 SETs of 200-byte values, pipelined by 100, then DBSIZE.
const FILL: &str = r#"
import sys, redis
r = redis.Redis(port=int(sys.argv[1]), lib_name=None, lib_version=None)
p = r.pipeline(transaction=False)
for i in range(60000):
    p.set(f"key:{i}", b"x" * 200)
    if i % 100 == 99:
        assert all(x is True for x in p.execute())
p.execute()
print(r.dbsize())
"#;

fn fill(agent: &Agent) -> u64 {
    let out = Command::new("python3")
        .args(["-c", FILL, &agent.port()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

/// An 8 MB agent under `adaptive` takes 60 000 SETs (about twice what fits) without an
/// error and keeps most of what fits (about 30 000 keys of 200 bytes; it kept about
/// 700 when every hash slot had its own subtables).
#[test]
fn a_small_adaptive_instance_keeps_its_keys_and_reports_its_weights() {
    let agent = Agent::start(&[
        "--maxmemory",
        "8mb",
        "--maxmemory-policy",
        "adaptive",
        "--metrics-listen",
        "127.0.0.1:0",
    ])
    .unwrap();
    let metrics = agent
        .metrics
        .clone()
        .expect("the ready line names the metrics address");
    // An 8 MB table groups 64 hash slots a partition.
    assert_eq!(info_field(&agent.port(), "memory", "table_slot_group"), 64);
    let keys = fill(&agent);
    assert!(keys >= 20_000, "an 8 MB instance kept only {keys} keys");
    assert!(info_field(&agent.port(), "stats", "evicted_keys") > 0);
    // Misses on evicted keys: the history entries charge regret.
    for i in 0..2000 {
        agent.cli(&["GET", &format!("key:{i}")]).unwrap();
    }
    let info = agent.cli(&["INFO", "memory"]).unwrap();
    assert!(info.contains("maxmemory_policy:adaptive"), "{info}");
    let weights = info
        .lines()
        .find_map(|l| l.strip_prefix("adaptive_weights:"))
        .expect("INFO shows the weights")
        .trim()
        .to_string();
    let sum: f64 = weights
        .split(',')
        .map(|w| w.split('=').nth(1).unwrap().parse::<f64>().unwrap())
        .sum();
    assert!(
        weights.starts_with("lru=") && weights.contains(",lfu="),
        "{weights}"
    );
    assert!((sum - 1.0).abs() < 1e-3, "{weights}");
    assert!(info_field(&agent.port(), "memory", "adaptive_history") > 0);
    assert!(info_field(&agent.port(), "memory", "adaptive_regrets") > 0);
    // Experts change at run time; a bad list is refused and changes nothing.
    assert_eq!(
        agent
            .cli(&["CONFIG", "SET", "adaptive-experts", "lru,lfu,size"])
            .unwrap()
            .trim(),
        "OK"
    );
    let refused = agent
        .cli(&["CONFIG", "SET", "adaptive-experts", "lru,arc"])
        .unwrap();
    assert!(refused.contains("ERR"), "{refused}");
    let got = agent.cli(&["CONFIG", "GET", "adaptive-experts"]).unwrap();
    assert!(got.contains("lru,lfu,size"), "{got}");
    let body = http_get(&metrics, "/metrics").unwrap();
    let lru = metric(&body, "dmc_agent_adaptive_weight{expert=\"lru\"}");
    assert!(lru.is_some_and(|w| w > 0.0 && w < 1.0), "{body}");
    assert!(metric(&body, "dmc_agent_adaptive_weight{expert=\"size\"}").is_some());
    assert!(metric(&body, "dmc_agent_adaptive_regrets_total").is_some_and(|r| r > 0.0));
}

/// Keys read often, then a flood of new keys, under each of two of Ditto's
/// algorithms: GDSF (frequency over size, aged by inflation) keeps nearly all of them,
/// FIFO (insert order alone) loses them all. Both rank by the table's access-metadata
/// area, which their subtables carry.
#[test]
fn gdsf_keeps_what_is_read_often_and_fifo_does_not() {
    let survivors = |policy: &str| -> (u64, usize) {
        let agent = Agent::start(&["--maxmemory", "8mb", "--maxmemory-policy", policy]).unwrap();
        let got = agent.cli(&["CONFIG", "GET", "maxmemory-policy"]).unwrap();
        assert!(got.contains(policy), "{got}");
        for i in 0..100 {
            agent.cli(&["SET", &format!("hot:{i}"), "h"]).unwrap();
        }
        for _ in 0..10 {
            for i in 0..100 {
                agent.cli(&["GET", &format!("hot:{i}")]).unwrap();
            }
        }
        let keys = fill(&agent);
        let kept = (0..100)
            .filter(|i| {
                let v = agent.cli(&["GET", &format!("hot:{i}")]).unwrap();
                v.trim() == "h"
            })
            .count();
        (keys, kept)
    };
    let (keys, kept) = survivors("allkeys-gdsf");
    assert!(
        keys >= 15_000,
        "an 8 MB allkeys-gdsf instance kept only {keys} keys"
    );
    assert!(kept >= 90, "GDSF kept {kept} of 100 keys read ten times");
    let (_, kept) = survivors("allkeys-fifo");
    assert!(kept <= 10, "FIFO kept {kept} of the 100 first keys");
}

/// Every policy name is accepted by CONFIG SET and reported by CONFIG GET and INFO; an
/// unknown one is refused and changes nothing.
#[test]
fn ditto_policy_names_are_configurable_at_run_time() {
    let agent = Agent::start(&["--maxmemory", "64mb"]).unwrap();
    for policy in [
        "volatile-lru-k",
        "allkeys-hyperbolic",
        "allkeys-lrfu",
        "volatile-lirs",
    ] {
        let ok = agent
            .cli(&["CONFIG", "SET", "maxmemory-policy", policy])
            .unwrap();
        assert_eq!(ok.trim(), "OK", "{policy}");
        let info = agent.cli(&["INFO", "memory"]).unwrap();
        assert!(
            info.contains(&format!("maxmemory_policy:{policy}")),
            "{info}"
        );
    }
    let refused = agent
        .cli(&["CONFIG", "SET", "maxmemory-policy", "allkeys-arc"])
        .unwrap();
    assert!(refused.contains("ERR"), "{refused}");
    let got = agent.cli(&["CONFIG", "GET", "maxmemory-policy"]).unwrap();
    assert!(got.contains("volatile-lirs"), "{got}");
}
