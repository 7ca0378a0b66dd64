//! The cluster manager as operators meet it: `serve` on a free port with a state file,
//! the CLI against it, agents registering and heartbeating over the HTTP API, leases
//! lapsing, and a restarted manager resuming with the same members and shard map.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const SECRET: &str = "manager-test-secret";

struct Manager {
    child: Child,
    url: String,
}

impl Drop for Manager {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(state: &std::path::Path) -> Manager {
    let mut child = Command::new(env!("CARGO_BIN_EXE_cluster-manager"))
        .env("DMC_CLUSTER_SECRET", SECRET)
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--shards",
            "16",
            "--lease-ms",
            "700",
        ])
        .arg("--state")
        .arg(state)
        .args(["--log", "warn"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    while out.read(&mut byte).unwrap() == 1 && byte[0] != b'\n' {
        line.push(byte[0]);
    }
    let line = String::from_utf8(line).unwrap();
    let addr = line
        .split("listen=")
        .nth(1)
        .unwrap_or_else(|| panic!("no ready line: {line:?}"))
        .to_string();
    Manager {
        child,
        url: format!("http://{addr}"),
    }
}

fn cli(m: &Manager, args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_cluster-manager"))
        .env("DMC_CLUSTER_SECRET", SECRET)
        .args(["--manager", &m.url])
        .args(args)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

/// A minimal HTTP/1.1 request with a JSON body and, if given, a bearer token; returns
/// the whole response.
fn request(m: &Manager, method: &str, path: &str, body: &str, token: Option<&str>) -> String {
    let addr = m.url.trim_start_matches("http://");
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

/// A POST with the cluster secret; returns the response body.
fn post(m: &Manager, path: &str, body: &str) -> String {
    let out = request(m, "POST", path, body, Some(SECRET));
    assert!(out.starts_with("HTTP/1.1 2"), "{out}");
    out.split("\r\n\r\n").nth(1).unwrap_or("").to_string()
}

/// Every route of the admin API, `/metrics` included, refuses a request without the
/// cluster secret (401) and changes nothing; the CLI with the wrong secret fails and
/// says why; the state file is readable by its owner only.
#[test]
fn every_route_needs_the_cluster_secret() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("cluster.json");
    let m = start(&state);
    for (method, path, body) in [
        ("GET", "/v1/status", ""),
        ("GET", "/metrics", ""),
        ("GET", "/v1/map", ""),
        ("POST", "/v1/agents", r#"{"listen":"127.0.0.1:6379"}"#),
        (
            "POST",
            "/v1/nodes",
            r#"{"id":1,"endpoint":"127.0.0.1:7000","capacity":1}"#,
        ),
        ("DELETE", "/v1/agents/1", ""),
    ] {
        for token in [None, Some("wrong-secret")] {
            let out = request(&m, method, path, body, token);
            assert!(out.starts_with("HTTP/1.1 401"), "{method} {path}: {out}");
            assert!(out.contains("cluster secret"), "{out}");
        }
    }
    let s = status(&m);
    assert!(s["agents"].as_array().unwrap().is_empty(), "{s}");
    assert!(s["nodes"].as_array().unwrap().is_empty(), "{s}");
    let out = Command::new(env!("CARGO_BIN_EXE_cluster-manager"))
        .env("DMC_CLUSTER_SECRET", "wrong-secret")
        .args(["--manager", &m.url, "status"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("cluster secret"), "{text}");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&state).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "state file mode {mode:o}");
}

/// `serve` without a cluster secret refuses to start, and says how to give one.
#[test]
fn the_manager_needs_a_secret_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_cluster-manager"))
        .env_remove("DMC_CLUSTER_SECRET")
        .args(["serve", "--listen", "127.0.0.1:0", "--log", "warn"])
        .arg("--state")
        .arg(dir.path().join("c.json"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("DMC_CLUSTER_SECRET"), "{text}");
}

fn status(m: &Manager) -> serde_json::Value {
    let (ok, text) = cli(m, &["status", "--json"]);
    assert!(ok, "{text}");
    serde_json::from_str(&text).unwrap()
}

#[test]
fn manager_tracks_members_and_resumes_after_restart() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("cluster.json");
    let m = start(&state);
    let (ok, text) = cli(
        &m,
        &[
            "nodes",
            "add",
            "--id",
            "1",
            "--endpoint",
            "127.0.0.1:7000",
            "--capacity",
            "2gb",
        ],
    );
    assert!(ok, "{text}");
    let (ok, text) = cli(
        &m,
        &["nodes", "add", "--id", "2", "--endpoint", "127.0.0.1:7000"],
    );
    assert!(!ok && text.contains("already a node"), "{text}");
    let (ok, text) = cli(&m, &["nodes", "remove", "9"]);
    assert!(!ok && text.contains("node 9 not found"), "{text}");
    let a: serde_json::Value =
        serde_json::from_str(&post(&m, "/v1/agents", r#"{"listen":"127.0.0.1:6379"}"#)).unwrap();
    let b: serde_json::Value =
        serde_json::from_str(&post(&m, "/v1/agents", r#"{"listen":"127.0.0.1:6380"}"#)).unwrap();
    let (a, b) = (a["id"].as_u64().unwrap(), b["id"].as_u64().unwrap());
    let s = status(&m);
    assert_eq!(s["capacity"].as_u64(), Some(2 << 30));
    let shards: Vec<u64> = s["agents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["shards"].as_u64().unwrap())
        .collect();
    assert_eq!(shards, vec![8, 8], "{s}");
    // Only agent a keeps heartbeating: b's lease lapses, and the manager removes it
    // and gives its shards to a (agent failover).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let s = loop {
        std::thread::sleep(Duration::from_millis(200));
        post(&m, &format!("/v1/agents/{a}/heartbeat"), "");
        let s = status(&m);
        if s["agents"].as_array().is_some_and(|x| x.len() == 1) {
            break s;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "b was never removed: {s}"
        );
    };
    assert_eq!(s["agents"][0]["id"].as_u64(), Some(a), "{s}");
    assert_eq!(s["agents"][0]["shards"].as_u64(), Some(16), "{s}");
    let (_, slots) = cli(&m, &["slots"]);
    drop(m);

    // A restarted manager: same members and the same slot map.
    let m = start(&state);
    assert_eq!(cli(&m, &["slots"]).1, slots);
    let (ok, text) = cli(&m, &["agents", "remove", &b.to_string()]);
    assert!(!ok && text.contains("not found"), "{text}");
    let (ok, table) = cli(&m, &["status"]);
    assert!(
        ok && table.contains("127.0.0.1:7000") && table.contains("alive"),
        "{table}"
    );
}

/// Hostile HTTP at the admin API: garbage, malformed JSON, an oversized body and
/// hundreds of half-sent requests get errors or wait, and the manager keeps serving.
#[test]
fn hostile_http_leaves_the_manager_serving() {
    let dir = tempfile::tempdir().unwrap();
    let m = start(&dir.path().join("cluster.json"));
    let addr = m.url.trim_start_matches("http://").to_string();
    let raw = |bytes: &[u8]| {
        let mut s = TcpStream::connect(&addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let _ = s.write_all(bytes);
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out
    };
    let garbage = raw(b"\x00\xff\x13GARBAGE\r\n\r\n");
    assert!(
        garbage.is_empty() || garbage.starts_with("HTTP/1.1 4"),
        "{garbage}"
    );
    let malformed = request(&m, "POST", "/v1/agents", "{not json", Some(SECRET));
    assert!(malformed.starts_with("HTTP/1.1 4"), "{malformed}");
    let big = format!(
        "POST /v1/agents HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {SECRET}\r\nContent-Type: application/json\r\nContent-Length: 10000000\r\n\r\n{}",
        "x".repeat(3 << 20)
    );
    let oversized = raw(big.as_bytes());
    assert!(
        oversized.is_empty() || oversized.starts_with("HTTP/1.1 413"),
        "{}",
        &oversized[..oversized.len().min(200)]
    );
    let half: Vec<TcpStream> = (0..300)
        .map(|_| {
            let mut s = TcpStream::connect(&addr).unwrap();
            s.write_all(b"GET /v1/status HTTP/1.1\r\nHost: x\r\n")
                .unwrap();
            s
        })
        .collect();
    let s = status(&m);
    assert!(s["nodes"].as_array().unwrap().is_empty(), "{s}");
    drop(half);
}
