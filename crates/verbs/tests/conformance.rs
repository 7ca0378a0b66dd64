//! Every backend runs the same conformance suite: `local` in-process, `shm` and `tcp`
//! against a memory-node server running in this process on a loopback port.

use std::sync::Arc;

use bytes::Bytes;
use dmc_verbs::backend::{self, BackendKind};
use dmc_verbs::wire::{self, Request};
use dmc_verbs::{
    Endpoint, LocalTransport, NodeConfig, NodeCore, RpcOptions, Storage, Transport, VerbsError,
    conformance,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

mod common;
use common::{options, start_node};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_backend_conforms() {
    let core = NodeCore::open(NodeConfig {
        id: 1,
        capacity: 64 << 20,
        storage: Storage::Heap,
        secret: None,
    })
    .unwrap();
    let t: Arc<dyn Transport> = Arc::new(LocalTransport::new(core));
    conformance::run_all(t, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shm_backend_conforms() {
    let dir = tempfile::tempdir().unwrap();
    let (ep, _stop) = start_node(dir.path(), b"secret").await;
    let t = backend::connect(BackendKind::Shm, ep, options(b"secret"))
        .await
        .unwrap();
    assert_eq!(t.node(), 7);
    conformance::run_all(t, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_backend_conforms() {
    let dir = tempfile::tempdir().unwrap();
    let (ep, _stop) = start_node(dir.path(), b"secret").await;
    let t = backend::connect(BackendKind::Tcp, ep, options(b"secret"))
        .await
        .unwrap();
    conformance::run_all(t, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_secret_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (ep, _stop) = start_node(dir.path(), b"secret").await;
    let err = backend::connect(BackendKind::Shm, ep, options(b"guess"))
        .await
        .err();
    assert_eq!(
        err.map(|e| e.to_string()),
        Some(VerbsError::Unauthenticated.to_string())
    );
}

/// Raw bytes on the socket: garbage, a malformed payload and an oversized frame each get
/// an error, and the node keeps serving a well-behaved client throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_and_oversized_rpcs_get_errors() {
    let dir = tempfile::tempdir().unwrap();
    let (ep, _stop) = start_node(dir.path(), b"").await;
    let Endpoint::Tcp(addr) = &ep else {
        unreachable!()
    };
    let good = backend::connect(BackendKind::Tcp, ep.clone(), options(b""))
        .await
        .unwrap();
    good.create_region(1, 4096).await.unwrap();

    async fn read_frame(
        (s, buf): &mut (tokio::net::TcpStream, bytes::BytesMut),
    ) -> Option<Option<wire::Frame>> {
        let fut = async move {
            loop {
                if let Some(f) = wire::split_frame(buf, 1 << 20).unwrap() {
                    return Some(f);
                }
                if s.read_buf(buf).await.ok()? == 0 {
                    return None;
                }
            }
        };
        tokio::time::timeout(std::time::Duration::from_secs(5), fut)
            .await
            .ok()
    }

    // A well-framed request with an unknown tag and a truncated payload: error replies,
    // and the same connection still answers a ping.
    let mut s = (
        tokio::net::TcpStream::connect(addr).await.unwrap(),
        bytes::BytesMut::new(),
    );
    let mut out = bytes::BytesMut::new();
    Request::Hello {
        version: wire::WIRE_VERSION,
        secret: Bytes::new(),
        client: 0,
    }
    .encode(1, &mut out);
    out.extend_from_slice(&[9, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 200]); // tag 200
    out.extend_from_slice(&[11, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 4, 1, 0]); // CreateRegion cut short
    Request::Ping.encode(4, &mut out);
    s.0.write_all(&out).await.unwrap();
    let mut tags = Vec::new();
    for _ in 0..4 {
        let f = read_frame(&mut s).await.unwrap().unwrap();
        tags.push((f.id, f.tag));
    }
    assert_eq!(
        tags,
        vec![(1, 2), (2, 0), (3, 0), (4, 2)],
        "errors for the bad frames, pongs for the good"
    );

    // An oversized frame: an error with id 0, then the connection closes.
    let mut s = (
        tokio::net::TcpStream::connect(addr).await.unwrap(),
        bytes::BytesMut::new(),
    );
    s.0.write_all(&[0xff, 0xff, 0xff, 0x7f, 1, 2, 3])
        .await
        .unwrap();
    let f = read_frame(&mut s).await.unwrap().unwrap();
    assert_eq!((f.id, f.tag), (0, 0));
    assert!(
        read_frame(&mut s).await.unwrap().is_none(),
        "connection closed after an oversized frame"
    );

    // Binary garbage.
    let mut s = (
        tokio::net::TcpStream::connect(addr).await.unwrap(),
        bytes::BytesMut::new(),
    );
    s.0.write_all(&[5, 0, 0, 0, 1, 2, 3, 4, 5]).await.unwrap();
    let _ = read_frame(&mut s).await;

    // The node kept serving.
    good.write(1, 0, b"still here").await.unwrap();
    let mut buf = [0u8; 10];
    good.read(1, 0, &mut buf).await.unwrap();
    assert_eq!(&buf, b"still here");
    assert!(
        matches!(good.call(Request::Stats).await.unwrap(), wire::Response::Stats(s) if s.rpc_errors >= 3)
    );
}

/// A node copies a region to a peer (re-replication): the peer ends up with the same
/// bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn region_copy_to_peer() {
    let (da, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (a, _stop_a) = start_node(da.path(), b"s").await;
    let (b, _stop_b) = start_node(db.path(), b"s").await;
    let ta = backend::connect(BackendKind::Shm, a, options(b"s"))
        .await
        .unwrap();
    let tb = backend::connect(BackendKind::Shm, b.clone(), options(b"s"))
        .await
        .unwrap();
    let size = 3 << 20;
    ta.create_region(5, size).await.unwrap();
    let data: Vec<u8> = (0..size as u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    ta.write(5, 0, &data).await.unwrap();
    ta.call(Request::CopyRegion {
        region: 5,
        peer: b.to_string(),
    })
    .await
    .unwrap();
    let mut back = vec![0u8; size as usize];
    tb.read(5, 0, &mut back).await.unwrap();
    assert!(back == data, "the peer holds an identical copy");
}

/// The manager's fence for one-sided verbs over `tcp`: once `Revoke` is answered, the
/// revoked client's verbs are refused on its open connection and on any new one (a
/// refusal, not a failure: the agent must not wait for a failover), and other clients
/// go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_client_runs_nothing_more() {
    let dir = tempfile::tempdir().unwrap();
    let (ep, _stop) = start_node(dir.path(), b"s").await;
    let named = |client| RpcOptions {
        client,
        ..options(b"s")
    };
    let agent = backend::connect(BackendKind::Tcp, ep.clone(), named(0xa9))
        .await
        .unwrap();
    let other = backend::connect(BackendKind::Tcp, ep.clone(), named(0xb1))
        .await
        .unwrap();
    let manager = backend::connect(BackendKind::Tcp, ep.clone(), options(b"s"))
        .await
        .unwrap();
    manager.create_region(1, 4096).await.unwrap();
    agent.write(1, 0, &[1; 8]).await.unwrap();
    manager
        .call(Request::Revoke { client: 0xa9 })
        .await
        .unwrap();
    let err = agent.cas(1, 0, 0x0101_0101_0101_0101, 2).await.unwrap_err();
    assert_eq!(err, VerbsError::Revoked(0xa9));
    assert!(!err.is_node_failure());
    let mut word = [0u8; 8];
    manager.read(1, 0, &mut word).await.unwrap();
    assert_eq!(word, [1; 8], "the refused CAS did not run");
    let again = backend::connect(BackendKind::Tcp, ep.clone(), named(0xa9)).await;
    assert_eq!(again.err(), Some(VerbsError::Revoked(0xa9)));
    other.write(1, 8, &[3; 8]).await.unwrap();
}

/// A value larger than a frame may carry is written and read over tcp in pieces, in
/// order (the node here takes frames of at most 1 MiB; the value is 5 MiB), next to
/// small verbs in the same post.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_splits_values_larger_than_a_frame() {
    use dmc_verbs::Verb;
    let dir = tempfile::tempdir().unwrap();
    let (ep, _stop) = start_node(dir.path(), b"s").await;
    let small_frames = RpcOptions {
        max_frame: 1 << 20,
        ..options(b"s")
    };
    let t = backend::connect(BackendKind::Tcp, ep, small_frames)
        .await
        .unwrap();
    let region = 9;
    t.create_region(region, 32 << 20).await.unwrap();
    let value: Vec<u8> = (0..5u32 << 20).map(|i| (i % 251) as u8).collect();
    let mut verbs = [
        Verb::Faa {
            region,
            offset: 0,
            add: 5,
            old: 0,
        },
        Verb::Write {
            region,
            offset: 4096,
            data: &value,
        },
        Verb::Faa {
            region,
            offset: 0,
            add: 1,
            old: 0,
        },
    ];
    t.post(&mut verbs).await.unwrap();
    let Verb::Faa { old, .. } = verbs[2] else {
        unreachable!()
    };
    assert_eq!(old, 5, "the verbs ran in order");
    let mut back = vec![0u8; value.len()];
    let mut read = [Verb::Read {
        region,
        offset: 4096,
        buf: &mut back,
    }];
    t.post(&mut read).await.unwrap();
    assert!(
        back == value,
        "the value read back in pieces is the value written"
    );
}

/// A node that answers `Hello` and then nothing (a node cut off mid-conversation):
/// `abort` fails the request in flight at once, and the next call dials anew.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_fails_requests_in_flight_at_once() {
    use dmc_verbs::rpc::RpcClient;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let accepted = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else {
                return;
            };
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            tokio::spawn(async move {
                let mut buf = bytes::BytesMut::new();
                let mut answered = false;
                loop {
                    if s.read_buf(&mut buf).await.unwrap_or(0) == 0 {
                        return;
                    }
                    while let Ok(Some(frame)) = wire::split_frame(&mut buf, 1 << 20) {
                        if !answered {
                            let mut out = bytes::BytesMut::new();
                            wire::Response::Pong {
                                node: 9,
                                uptime_ms: 0,
                            }
                            .encode(frame.id, &mut out);
                            let _ = s.write_all(&out).await;
                            answered = true;
                        }
                    }
                }
            });
        }
    });
    let options = RpcOptions {
        timeout: std::time::Duration::from_secs(30),
        ..RpcOptions::default()
    };
    let (client, _) = RpcClient::connect(Endpoint::Tcp(addr), options)
        .await
        .unwrap();
    let client = std::sync::Arc::new(client);
    let pending = {
        let c = client.clone();
        tokio::spawn(async move { c.call(&Request::Ping).await })
    };
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    client.abort();
    // `Closed`, not the `Timeout` its 30 s limit would give: the abort failed it.
    let result = pending.await.unwrap();
    assert_eq!(result, Err(VerbsError::Closed));
    let again = {
        let c = client.clone();
        tokio::spawn(async move { c.call(&Request::Ping).await })
    };
    wait_for(|| accepted.load(std::sync::atomic::Ordering::SeqCst) == 2).await;
    again.abort();
}

async fn wait_for(mut cond: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !cond() {
        assert!(std::time::Instant::now() < deadline, "timed out");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}
