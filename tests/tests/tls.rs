//! The TLS client port (issue 13): `redis-cli --tls` and redis-py with `ssl=True` run
//! the string commands over it, with client certificates required (Redis's default
//! `tls-auth-clients yes`); a client without a certificate, or speaking plain RESP to
//! the TLS port, is refused, and the plain port keeps working beside it.

use std::process::Command;

use dmc_e2e::{Agent, test_certificates as certificates};

/// The flags naming the test certificates in `dir`: this process's certificate and
/// key, and the CA it trusts.
fn tls_files(dir: &std::path::Path) -> Vec<String> {
    let p = |f: &str| dir.join(f).display().to_string();
    vec![
        "--tls-cert-file".into(),
        p("server.pem"),
        "--tls-key-file".into(),
        p("server.key"),
        "--tls-ca-cert-file".into(),
        p("ca.pem"),
    ]
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Starts an agent whose flags (`args`, given its TLS port) include a TLS port found
/// free, and returns it with that port. A port is free when it is picked, not
/// reserved: another test running alongside may bind it before the agent does (CI
/// saw "binding tls-port …: Address already in use"), so a start that fails is tried
/// again on a new port.
fn start_on_free_tls_port(args: impl Fn(&str) -> Vec<String>) -> (Agent, String) {
    let mut last = None;
    for _ in 0..5 {
        let port = free_port().to_string();
        let args = args(&port);
        match Agent::start(&args.iter().map(String::as_str).collect::<Vec<_>>()) {
            Ok(agent) => return (agent, port),
            Err(e) => last = Some(e),
        }
    }
    panic!("no agent started on a free TLS port: {last:?}");
}

#[test]
fn redis_cli_and_redis_py_speak_tls() {
    let dir = tempfile::tempdir().unwrap();
    certificates(dir.path());
    let p = |f: &str| dir.path().join(f).display().to_string();
    let (agent, tls_port) = start_on_free_tls_port(|port| {
        let mut args = vec!["--tls-port".to_string(), port.to_string()];
        args.extend(tls_files(dir.path()));
        args
    });
    let tls_cli = |cert: bool, args: &[&str]| {
        let mut c = Command::new("redis-cli");
        c.args(["-p", &tls_port, "--tls", "--cacert", &p("ca.pem")]);
        if cert {
            c.args(["--cert", &p("client.pem"), "--key", &p("client.key")]);
        }
        let out = c.args(args).output().unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
            + &String::from_utf8_lossy(&out.stderr)
    };
    assert_eq!(tls_cli(true, &["SET", "k", "over-tls"]), "OK");
    assert_eq!(tls_cli(true, &["GET", "k"]), "over-tls");
    assert_eq!(tls_cli(true, &["INCRBY", "n", "5"]), "5");
    assert_eq!(tls_cli(true, &["APPEND", "k", "!"]), "9");
    // No client certificate: the handshake fails, nothing runs.
    let refused = tls_cli(false, &["SET", "k", "nope"]);
    assert!(!refused.starts_with("OK"), "{refused}");
    // Plain RESP at the TLS port gets no reply.
    assert_eq!(
        dmc_e2e::redis_cli(&tls_port, &["PING"]),
        "",
        "the TLS port answered plain text"
    );
    // The plain port serves the same data.
    assert_eq!(agent.cli(&["GET", "k"]).unwrap().trim(), "over-tls!");

    let script = r#"
import sys, redis
port, ca, cert, key = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
r = redis.Redis(host="127.0.0.1", port=port, ssl=True, ssl_ca_certs=ca,
                ssl_certfile=cert, ssl_keyfile=key, lib_name=None, lib_version=None)
assert r.set("py", "value") is True
assert r.get("py") == b"value"
assert r.incr("counter") == 1
assert r.mset({"a": "1", "b": "2"}) is True
assert r.mget("a", "b", "missing") == [b"1", b"2", None]
assert r.delete("a", "b") == 2
print("ok")
"#;
    let out = Command::new("python3")
        .args([
            "-c",
            script,
            &tls_port,
            &p("ca.pem"),
            &p("client.pem"),
            &p("client.key"),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).trim() == "ok",
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The manager's admin API over https: memory nodes register, the CLI scales agents
/// and the launched agents join, all through `https://` with the test CA; a client
/// speaking plain HTTP to it gets nothing.
#[test]
fn the_manager_api_over_https() {
    let dir = tempfile::tempdir().unwrap();
    certificates(dir.path());
    let p = |f: &str| dir.path().join(f).display().to_string();
    let mut args = tls_files(dir.path());
    args.extend(
        [
            "--region-size",
            "64mb",
            "--segment-size",
            "1mb",
            "--shards",
            "16",
        ]
        .map(String::from),
    );
    let mut manager = dmc_e2e::ClusterManager::start(
        dir.path(),
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
    )
    .unwrap();
    let addr = manager.url.trim_start_matches("http://").to_string();
    manager.url = format!("https://{addr}");
    let node_dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let _nodes: Vec<_> = node_dirs
        .iter()
        .zip(1..)
        .map(|(d, id)| {
            dmc_e2e::MemoryNode::start_with(
                id,
                d.path(),
                "256mb",
                &[
                    "--manager",
                    &manager.url,
                    "--manager-ca-cert-file",
                    &p("ca.pem"),
                ],
            )
            .unwrap()
        })
        .collect();
    let cli = |args: &[&str]| {
        let out = Command::new(dmc_e2e::bin("cluster-manager").unwrap())
            .env(dmc_e2e::SECRET_ENV, dmc_e2e::TEST_SECRET)
            .args([
                "--manager",
                &manager.url,
                "--manager-ca-cert-file",
                &p("ca.pem"),
            ])
            .args(args)
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr),
        )
    };
    dmc_e2e::wait_until("both memory nodes to register over https", || {
        let (ok, text) = cli(&["status", "--json"]);
        ok && serde_json::from_str::<serde_json::Value>(&text)
            .ok()
            .and_then(|s| s["nodes"].as_array().map(|n| n.len() == 2))
            .unwrap_or(false)
    });
    let (ok, text) = cli(&["agents", "scale", "1", "--json"]);
    assert!(ok, "{text}");
    let report: serde_json::Value = serde_json::from_str(&text).unwrap();
    let port = dmc_e2e::port_of(&report["started"][0]);
    assert_eq!(dmc_e2e::redis_cli(&port, &["SET", "k", "v"]), "OK");
    assert_eq!(dmc_e2e::redis_cli(&port, &["GET", "k"]), "v");
    // Plain HTTP at the https port: no HTTP answer.
    let plain = dmc_e2e::http_get(&addr, "/v1/status");
    assert!(plain.is_err(), "{plain:?}");
    let (ok, text) = cli(&["agents", "scale", "0"]);
    assert!(ok, "{text}");
}

/// Established TCP connections (IPv4) whose remote port is `port`.
fn connections_to(port: u16) -> usize {
    std::fs::read_to_string("/proc/net/tcp")
        .unwrap_or_default()
        .lines()
        .skip(1)
        .filter(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() > 3
                && f[3] == "01"
                && f[2]
                    .rsplit(':')
                    .next()
                    .and_then(|p| u16::from_str_radix(p, 16).ok())
                    == Some(port)
        })
        .count()
}

/// Two agents with TLS client ports forward writes to each other over TLS (each
/// checks the other's certificate against the cluster CA and presents its own), and
/// the writes read back through either agent.
#[test]
fn agents_forward_to_each_other_over_tls() {
    let dir = tempfile::tempdir().unwrap();
    certificates(dir.path());
    let c = dmc_e2e::TestCluster::start(
        &[
            "--region-size",
            "64mb",
            "--segment-size",
            "1mb",
            "--shards",
            "16",
        ],
        "log = \"warn\"\n",
        2,
        "256mb",
    )
    .unwrap();
    let (agents, tls_ports): (Vec<Agent>, Vec<String>) = (0..2)
        .map(|_| {
            start_on_free_tls_port(|port| {
                let mut args = vec![
                    "--manager".to_string(),
                    c.manager.url.clone(),
                    "--tls-port".to_string(),
                    port.to_string(),
                ];
                args.extend(tls_files(dir.path()));
                args
            })
        })
        .unzip();
    c.manager
        .wait_for("both agents to own slots", |s| {
            s["agents"].as_array().is_some_and(|a| {
                a.len() == 2 && a.iter().all(|x| x["shards"].as_u64().unwrap_or(0) > 0)
            })
        })
        .unwrap();
    let a = agents[0].port();
    for i in 0..64 {
        let k = format!("tls-fwd:{i}");
        let mut ok = false;
        for _ in 0..50 {
            if dmc_e2e::redis_cli(&a, &["SET", &k, "v"]) == "OK" {
                ok = true;
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        assert!(ok, "SET {k} through agent a");
    }
    assert!(dmc_e2e::info_field(&a, "cluster", "dmc_forwarded_commands") > 0);
    let b_tls: u16 = tls_ports[1].parse().unwrap();
    assert!(
        connections_to(b_tls) > 0,
        "agent a's forwarding connection is not on b's TLS port"
    );
    for i in 0..64 {
        let k = format!("tls-fwd:{i}");
        assert_eq!(dmc_e2e::redis_cli(&agents[1].port(), &["GET", &k]), "v");
    }
}
