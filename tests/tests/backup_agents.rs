//! Backup agents with warm caches (issue 15, item 3): with `--backups 1` every shard's
//! primary feeds its cache updates to another agent; when the primary is killed, that
//! agent takes the shard over and serves its keys from its cache at once, after
//! checking every warm key against the pool (a value the feed got wrong, planted here
//! through `DMC.WARM`, is never served). Also: a client that is not an agent of the
//! cluster cannot feed an agent's cache.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::Duration;

use dmc_e2e::{
    Agent, TEST_SECRET, TestCluster, info_field, keys_owned_by, port_of, redis_cli, wait_until,
};

/// Sends `commands` on one connection to the agent at `port` and returns their one-line
/// replies.
fn raw(port: &str, commands: &[&[&str]]) -> Vec<String> {
    let mut s = TcpStream::connect(format!("127.0.0.1:{port}")).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut out = Vec::new();
    for c in commands {
        out.extend_from_slice(format!("*{}\r\n", c.len()).as_bytes());
        for a in *c {
            out.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
        }
    }
    s.write_all(&out).unwrap();
    let mut r = BufReader::new(s);
    commands
        .iter()
        .map(|_| {
            let mut line = String::new();
            r.read_line(&mut line).unwrap();
            line.trim().to_string()
        })
        .collect()
}

/// A cluster of `nodes` memory nodes whose agents have a 16 MiB local cache (on `shm`
/// they have none unless given one) and one backup agent per shard.
fn cluster_with_backups(nodes: u32) -> TestCluster {
    let c = TestCluster::start(
        &[
            "--region-size",
            "64mb",
            "--segment-size",
            "1mb",
            "--shards",
            "16",
            "--lease-ms",
            "1000",
        ],
        "log = \"warn\"\nrouting = \"proxy\"\nlocal-cache-size = \"16mb\"\n",
        nodes,
        "512mb",
    )
    .unwrap();
    c.manager
        .cli(&["instances", "resize", "default", "--backups", "1"])
        .unwrap();
    c
}

/// An agent started by hand (the launcher does not replace it), with a local cache.
fn agent_by_hand(manager: &str) -> Agent {
    Agent::start_with_env(
        &[
            "--manager",
            manager,
            "--routing",
            "proxy",
            "--local-cache-size",
            "16mb",
        ],
        &[],
    )
    .unwrap()
}

#[test]
fn a_promoted_backup_serves_hits_at_once_and_never_a_stale_value() {
    let c = cluster_with_backups(3);
    // The survivor is launched by the manager; the victim is started by hand, so the
    // launcher does not replace it and the survivor keeps every shard afterwards.
    let port = port_of(&c.scale(1).unwrap()["started"][0]);
    let url = c.manager.url.clone();
    let mut victim = agent_by_hand(&url);
    let listen = victim.addr.clone();
    wait_until(
        "both agents to own shards, each shard with a backup",
        || {
            let (agents, rows) = c.owners();
            agents.len() == 2
                && agents
                    .iter()
                    .all(|(id, _)| rows.iter().any(|r| r.primary == *id))
                && rows
                    .iter()
                    .all(|r| r.backups.len() == 1 && r.backups[0] != r.primary)
        },
    );
    let (agents, rows) = c.owners();
    let victim_id = agents.iter().find(|(_, l)| *l == listen).unwrap().0;
    let keys: Vec<String> = (0..400).map(|i| format!("user:{i}")).collect();
    for k in &keys {
        assert_eq!(redis_cli(&port, &["SET", k, &format!("v:{k}")]), "OK");
    }
    let victims = keys_owned_by(&rows, victim_id, &keys);
    assert!(victims.len() > 50, "{} keys on the victim", victims.len());
    wait_until(
        "the victim's writes to reach the survivor's warm cache",
        || {
            let warm = info_field(&port, "memory", "local_cache_warm_keys");
            if warm < victims.len() as u64 {
                eprintln!(
                    "warm {warm}, fed {}, dropped by the victim {}",
                    info_field(&port, "cluster", "dmc_warm_fed"),
                    info_field(victim.port().as_str(), "cluster", "dmc_warm_feed_dropped")
                );
            }
            warm >= victims.len() as u64
        },
    );
    // A client that is not an agent cannot feed a cache.
    let refused = raw(&port, &[&["DMC.WARM", "0", &victims[0], "0", "5", "bogus"]]);
    assert!(refused[0].starts_with("-NOPERM"), "{refused:?}");
    // An update the feed got wrong (as a lost one would leave it): must not be served.
    let planted = raw(
        &port,
        &[
            &["DMC.PEER", TEST_SECRET],
            &["DMC.WARM", "0", &victims[0], "0", "5", "bogus"],
        ],
    );
    assert_eq!(planted, ["+OK", "+OK"]);

    let hits_before = info_field(&port, "memory", "local_cache_hits");
    victim.kill();
    let killed = std::time::Instant::now();
    let survivor = agents.iter().find(|(id, _)| *id != victim_id).unwrap().0;
    wait_until("the survivor to own every shard", || {
        let (_, rows) = c.owners();
        !rows.is_empty() && rows.iter().all(|r| r.primary == survivor)
    });
    wait_until("the survivor to write every slot", || {
        info_field(&port, "cluster", "dmc_owned_slots") == 16384
    });
    // The warm keys are checked against the pool in the background of the takeover.
    wait_until("the survivor to revalidate its warm keys", || {
        info_field(&port, "memory", "local_cache_warm_keys") == 0
    });
    eprintln!(
        "the survivor owns the victim's shards {} ms after the kill",
        killed.elapsed().as_millis()
    );
    for k in &keys {
        assert_eq!(redis_cli(&port, &["GET", k]), format!("v:{k}"), "{k}");
    }
    let hits = info_field(&port, "memory", "local_cache_hits") - hits_before;
    let confirmed = info_field(&port, "cluster", "dmc_warm_confirmed");
    let stale = info_field(&port, "cluster", "dmc_warm_stale");
    eprintln!(
        "{} victim keys: {confirmed} confirmed warm, {stale} stale, {hits} hits of {} GETs",
        victims.len(),
        keys.len()
    );
    assert!(stale >= 1, "the planted value was revalidated");
    assert!(confirmed >= victims.len() as u64 - 1);
    // Every key is a hit on the first read: the survivor's own keys were cached by its
    // writes, the victim's came warm and were revalidated at the takeover.
    assert!(
        hits >= keys.len() as u64,
        "{hits} hits of {} GETs",
        keys.len()
    );
}

/// A backup that joins after the keys were written (a rescale, a replacement agent)
/// gets its primary's cached hot set of the shards it backs up, without any new write.
#[test]
fn a_backup_that_joins_late_gets_the_primarys_hot_set() {
    let c = cluster_with_backups(2);
    let port = port_of(&c.scale(1).unwrap()["started"][0]);
    let keys: Vec<String> = (0..300).map(|i| format!("hot:{i}")).collect();
    for k in &keys {
        assert_eq!(redis_cli(&port, &["SET", k, "v"]), "OK");
    }
    let url = c.manager.url.clone();
    let late = agent_by_hand(&url);
    let listen = late.addr.clone();
    wait_until("the late agent to back up the first one's shards", || {
        let (agents, rows) = c.owners();
        agents.len() == 2 && rows.iter().all(|r| r.backups.len() == 1)
    });
    let (agents, rows) = c.owners();
    let first = agents.iter().find(|(_, l)| *l != listen).unwrap().0;
    let backed = keys_owned_by(&rows, first, &keys).len() as u64;
    assert!(backed > 50, "{backed} keys stay with the first agent");
    wait_until("the first agent's hot set to reach the late backup", || {
        info_field(&late.port(), "memory", "local_cache_warm_keys") >= backed
    });
}
