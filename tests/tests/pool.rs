//! The memory pool across real processes: `memory-node` binaries on loopback, clients
//! over `shm`.

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use dmc_dht::{Dht, DhtConfig, Ownership, SetOptions, SystemClock};
use dmc_e2e::MemoryNode;
use dmc_umo::{Pool, PoolConfig};
use dmc_verbs::backend::{self, BackendKind};
use dmc_verbs::wire::{self, Request, Response};
use dmc_verbs::{RpcOptions, Transport};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn pool_config() -> PoolConfig {
    PoolConfig {
        replicas: 2,
        region_size: 16 << 20,
        segment_size: 1 << 20,
        ..PoolConfig::default()
    }
}

async fn connect(node: &MemoryNode) -> Arc<dyn Transport> {
    backend::connect(
        BackendKind::Shm,
        node.endpoint.parse().unwrap(),
        RpcOptions {
            secret: bytes::Bytes::from_static(dmc_e2e::TEST_SECRET.as_bytes()),
            ..RpcOptions::default()
        },
    )
    .await
    .unwrap()
}

/// Two memory nodes, `r = 2`: after a batch of writes the primary node is SIGKILLed and
/// a new client, given only the backup node, reads every key back identically.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_key_reads_back_from_the_backups_alone() {
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let mut n1 = MemoryNode::start(1, dirs[0].path(), "256mb").unwrap();
    let n2 = MemoryNode::start(2, dirs[1].path(), "256mb").unwrap();
    let keys = 5000u32;
    {
        let pool = Pool::open(pool_config(), vec![connect(&n1).await, connect(&n2).await])
            .await
            .unwrap();
        let dht = Dht::open(
            pool,
            DhtConfig::default(),
            Arc::new(SystemClock),
            Ownership::all(0, 1),
        )
        .await
        .unwrap();
        for i in 0..keys {
            let value = format!("value-{i}-").repeat(1 + (i % 40) as usize);
            dht.set(
                0,
                format!("key:{i}").as_bytes(),
                value.as_bytes(),
                SetOptions::default(),
            )
            .await
            .unwrap();
        }
        // Every region's primary is node 1 or node 2; make sure node 1 was a primary of
        // something, so killing it matters.
        let regions = n1_regions(&*connect(&n1).await).await;
        assert!(!regions.is_empty());
    }
    n1.kill();
    let pool = Pool::open(pool_config(), vec![connect(&n2).await])
        .await
        .unwrap();
    let dht = Dht::open(
        pool,
        DhtConfig::default(),
        Arc::new(SystemClock),
        Ownership::none(),
    )
    .await
    .unwrap();
    for i in 0..keys {
        let want = format!("value-{i}-").repeat(1 + (i % 40) as usize);
        let got = dht.get(0, format!("key:{i}").as_bytes()).await.unwrap();
        assert_eq!(
            got.map(|e| e.value),
            Some(want.into()),
            "key {i} from the backup copy"
        );
    }
}

async fn n1_regions(t: &dyn Transport) -> Vec<(u16, u64)> {
    t.list_regions().await.unwrap()
}

/// The helper that runs in two child processes for the CAS/FAA race: it is this test
/// binary itself, re-executed with the node's endpoint in the environment.
#[test]
#[ignore = "runs only as a child of two_processes_race_cas_and_faa"]
fn race_child() {
    let Ok(endpoint) = std::env::var("DMC_RACE_ENDPOINT") else {
        return;
    };
    let rounds: u64 = std::env::var("DMC_RACE_ROUNDS").unwrap().parse().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let t = backend::connect(
            BackendKind::Shm,
            endpoint.parse().unwrap(),
            RpcOptions {
                secret: bytes::Bytes::from_static(dmc_e2e::TEST_SECRET.as_bytes()),
                ..RpcOptions::default()
            },
        )
        .await
        .unwrap();
        for _ in 0..rounds {
            t.faa(1, 0, 1).await.unwrap();
            let mut seen = 0;
            loop {
                let old = t.cas(1, 8, seen, seen + 1).await.unwrap();
                if old == seen {
                    break;
                }
                seen = old;
            }
        }
    });
}

/// Two processes race FAA and CAS on the same words of one region: no update is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_race_cas_and_faa() {
    let dir = tempfile::tempdir().unwrap();
    let node = MemoryNode::start(1, dir.path(), "64mb").unwrap();
    let t = connect(&node).await;
    t.create_region(1, 4096).await.unwrap();
    let rounds = 20_000u64;
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..2)
        .map(|_| {
            Command::new(&exe)
                .args(["--ignored", "--exact", "race_child", "--nocapture"])
                .env("DMC_RACE_ENDPOINT", &node.endpoint)
                .env("DMC_RACE_ROUNDS", rounds.to_string())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut c in children {
        let status = tokio::task::spawn_blocking(move || c.wait())
            .await
            .unwrap()
            .unwrap();
        assert!(status.success(), "race child failed");
    }
    let mut words = [0u8; 16];
    t.read(1, 0, &mut words).await.unwrap();
    assert_eq!(
        u64::from_le_bytes(words[..8].try_into().unwrap()),
        2 * rounds,
        "exact FAA total"
    );
    assert_eq!(
        u64::from_le_bytes(words[8..].try_into().unwrap()),
        2 * rounds,
        "exact CAS-loop total"
    );
}

/// The real binary answers malformed and oversized RPCs with errors and keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_node_survives_malformed_and_oversized_rpcs() {
    let dir = tempfile::tempdir().unwrap();
    let node = MemoryNode::start(1, dir.path(), "64mb").unwrap();
    let good = connect(&node).await;
    good.create_region(1, 4096).await.unwrap();
    for attack in [
        vec![0xffu8, 0xff, 0xff, 0xff, 1, 2, 3],      // 4 GiB frame
        vec![9, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 99], // unknown tag
        b"*3\r\n$3\r\nSET\r\n$1\r\na\r\n$1\r\nb\r\n".to_vec(), // RESP at a node
        (0..4096u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 24) as u8)
            .collect(), // noise
    ] {
        let mut s = tokio::net::TcpStream::connect(&node.endpoint)
            .await
            .unwrap();
        s.write_all(&attack).await.unwrap();
        let mut buf = BytesMut::new();
        // An error frame or a close, within a bounded time: never a hang.
        let _ = tokio::time::timeout(Duration::from_secs(5), s.read_buf(&mut buf))
            .await
            .expect("the node answered or closed");
    }
    // Half a frame, then silence: the connection just waits; others are unaffected.
    let mut half = tokio::net::TcpStream::connect(&node.endpoint)
        .await
        .unwrap();
    let mut out = BytesMut::new();
    Request::Ping.encode(1, &mut out);
    half.write_all(&out[..5]).await.unwrap();

    good.write(1, 0, b"alive").await.unwrap();
    match good.call(Request::Stats).await.unwrap() {
        Response::Stats(s) => assert!(s.rpc_errors >= 2, "errors were counted: {s:?}"),
        other => panic!("{other:?}"),
    }
    let _ = wire::WIRE_VERSION;
}

/// A peer without the cluster secret (none, or a wrong one) is refused before any
/// request touches the node's state; the region directory and files are readable by
/// their owner only; a node started without a secret refuses to start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_node_refuses_peers_without_the_cluster_secret() {
    let dir = tempfile::tempdir().unwrap();
    let node_dir = dir.path().join("node");
    let node = MemoryNode::start(1, &node_dir, "64mb").unwrap();
    for secret in [&b""[..], b"wrong-secret"] {
        let t = backend::connect(
            BackendKind::Tcp,
            node.endpoint.parse().unwrap(),
            RpcOptions {
                secret: bytes::Bytes::copy_from_slice(secret),
                ..RpcOptions::default()
            },
        )
        .await;
        let refused = match t {
            Err(e) => e.to_string(),
            Ok(t) => match t.create_region(7, 4096).await {
                Err(e) => e.to_string(),
                Ok(()) => panic!("a peer without the secret created a region"),
            },
        };
        assert!(
            refused.contains("authenticat") || refused.contains("secret"),
            "{refused}"
        );
    }
    let good = connect(&node).await;
    assert!(
        n1_regions(good.as_ref()).await.iter().all(|(r, _)| *r != 7),
        "nothing was created"
    );
    good.create_region(1, 4096).await.unwrap();
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&node_dir), 0o700);
    for entry in std::fs::read_dir(&node_dir).unwrap() {
        assert_eq!(mode(&entry.unwrap().path()), 0o600);
    }
    let out = Command::new(dmc_e2e::bin("memory-node").unwrap())
        .env_remove(dmc_e2e::SECRET_ENV)
        .args(["--id", "2", "--listen", "127.0.0.1:0", "--capacity", "8mb"])
        .arg("--dir")
        .arg(dir.path().join("other"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("DMC_CLUSTER_SECRET"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A memory node serving its RPC port over TLS: a client that trusts its CA works, a
/// plain-TCP client gets nowhere, and an agent whose pool names the CA serves strings
/// over it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_node_rpc_over_tls() {
    let dir = tempfile::tempdir().unwrap();
    dmc_e2e::test_certificates(dir.path());
    let p = |f: &str| dir.path().join(f).display().to_string();
    let node = MemoryNode::start_with(
        1,
        &dir.path().join("node"),
        "64mb",
        &[
            "--tls-cert-file",
            &p("server.pem"),
            "--tls-key-file",
            &p("server.key"),
        ],
    )
    .unwrap();
    let secret = bytes::Bytes::from_static(dmc_e2e::TEST_SECRET.as_bytes());
    let tls = dmc_verbs::tls::ClientTls::from_ca_file(&dir.path().join("ca.pem")).unwrap();
    let t = backend::connect(
        BackendKind::Tcp,
        node.endpoint.parse().unwrap(),
        RpcOptions {
            secret: secret.clone(),
            tls: Some(tls),
            ..RpcOptions::default()
        },
    )
    .await
    .unwrap();
    t.create_region(3, 4096).await.unwrap();
    t.write(3, 0, b"over tls").await.unwrap();
    let mut back = [0u8; 8];
    t.read(3, 0, &mut back).await.unwrap();
    assert_eq!(&back, b"over tls");
    let plain = backend::connect(
        BackendKind::Tcp,
        node.endpoint.parse().unwrap(),
        RpcOptions {
            secret,
            ..RpcOptions::default()
        },
    )
    .await;
    let refused = match plain {
        Err(_) => true,
        Ok(c) => c.list_regions().await.is_err(),
    };
    assert!(refused, "a plain-TCP client reached a TLS node");

    let config = dir.path().join("agent.toml");
    std::fs::write(
        &config,
        format!(
            "[pool]\nbackend = \"tcp\"\nnodes = [\"{}\"]\nreplicas = 1\nregion-size = \"8mb\"\nsegment-size = \"1mb\"\ntls-ca-cert-file = \"{}\"\n",
            node.endpoint,
            p("ca.pem")
        ),
    )
    .unwrap();
    let agent = dmc_e2e::Agent::start(&["--config", &config.display().to_string()]).unwrap();
    assert_eq!(agent.cli(&["SET", "k", "via-tls"]).unwrap().trim(), "OK");
    assert_eq!(agent.cli(&["GET", "k"]).unwrap().trim(), "via-tls");
}
