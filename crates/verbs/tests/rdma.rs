//! The `rdma` backend on the software emulation of RC verbs: the conformance suite,
//! values split over chains and rounds, stale keys, broken links, revocation as a
//! fence, and a node without a device. On a machine with an RDMA device the same
//! suite runs on real verbs (`rdma_device_conforms`, feature `rdma`).

use std::sync::Arc;

use dmc_verbs::rdma::device::DeviceCaps;
use dmc_verbs::rdma::{EmulatedFabric, RdmaResponder, RdmaTransport};
use dmc_verbs::wire::Request;
use dmc_verbs::{RpcOptions, Transport, Verb, VerbsError, conformance};

mod common;
use common::{options, start_node, start_node_with};

/// A node serving RDMA on `fabric`, and its directory.
async fn rdma_node(
    fabric: &EmulatedFabric,
) -> (
    dmc_verbs::Endpoint,
    tokio::sync::oneshot::Sender<()>,
    tempfile::TempDir,
) {
    let dir = tempfile::tempdir().unwrap();
    let responder = Arc::new(RdmaResponder::new(fabric.device()));
    let (ep, stop) = start_node_with(dir.path(), b"s", Some(responder)).await;
    (ep, stop, dir)
}

async fn client(
    fabric: &EmulatedFabric,
    ep: &dmc_verbs::Endpoint,
    options: RpcOptions,
) -> RdmaTransport {
    RdmaTransport::connect(ep.clone(), options, fabric.device())
        .await
        .unwrap()
}

/// A node on a new fabric, and an agent that created region 1 there and wrote to it
/// over its first queue pair. Keep the node alive as long as the agent is used.
async fn written_once() -> (
    EmulatedFabric,
    (tokio::sync::oneshot::Sender<()>, tempfile::TempDir),
    RdmaTransport,
) {
    let fabric = EmulatedFabric::default();
    let (ep, stop, dir) = rdma_node(&fabric).await;
    let agent = client(&fabric, &ep, options(b"s")).await;
    let t: &dyn Transport = &agent;
    t.create_region(1, 4096).await.unwrap();
    t.write(1, 0, b"before").await.unwrap();
    assert_eq!(agent.links_opened(), 1);
    (fabric, (stop, dir), agent)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn emulated_rdma_backend_conforms() {
    let fabric = EmulatedFabric::default();
    let (ep, _stop, _dir) = rdma_node(&fabric).await;
    let t: Arc<dyn Transport> = Arc::new(client(&fabric, &ep, options(b"s")).await);
    assert_eq!(t.backend(), "rdma");
    assert_eq!(t.node(), 7);
    conformance::run_all(t, 1).await;
}

/// A device with 4 KiB messages and a send queue of 8: a 3 MiB value and a batch of
/// 100 atomics still go through, in order, in several chains and rounds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_device_limits_split_posts() {
    let fabric = EmulatedFabric::new(DeviceCaps {
        max_message: 4096,
        max_send_wr: 8,
    });
    let (ep, _stop, _dir) = rdma_node(&fabric).await;
    let t = client(&fabric, &ep, options(b"s")).await;
    let t: &dyn Transport = &t;
    t.create_region(1, 8 << 20).await.unwrap();
    let data: Vec<u8> = (0..3 << 20)
        .map(|i: u32| (i * 7 + i / 4096) as u8)
        .collect();
    t.write(1, 5, &data).await.unwrap();
    let mut back = vec![0u8; data.len()];
    t.read(1, 5, &mut back).await.unwrap();
    assert!(
        back == data,
        "a value past the message size reads back whole"
    );

    let mut verbs: Vec<Verb> = (0..100)
        .map(|i| Verb::Faa {
            region: 1,
            offset: (4 << 20) + (i % 3) * 8,
            add: 1,
            old: u64::MAX,
        })
        .collect();
    t.post(&mut verbs).await.unwrap();
    let olds: Vec<u64> = verbs
        .iter()
        .map(|v| match v {
            Verb::Faa { old, .. } => *old,
            _ => unreachable!(),
        })
        .collect();
    let expected: Vec<u64> = (0..100).map(|i| i / 3).collect();
    assert_eq!(olds, expected, "every atomic ran once, in order");
}

/// A region dropped and created anew under a client's cached key: the first verb gets a
/// remote access error (never the old memory), the next fetches the new key and works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_key_fails_once_then_refreshes() {
    let fabric = EmulatedFabric::default();
    let (ep, _stop, _dir) = rdma_node(&fabric).await;
    let agent = client(&fabric, &ep, options(b"s")).await;
    let manager = client(&fabric, &ep, options(b"s")).await;
    let (agent, manager): (&dyn Transport, &dyn Transport) = (&agent, &manager);
    manager.create_region(3, 4096).await.unwrap();
    agent.write(3, 0, b"old copy").await.unwrap();
    manager.drop_region(3).await.unwrap();
    manager.create_region(3, 4096).await.unwrap();
    let err = agent.write(3, 0, b"late").await.unwrap_err();
    assert!(
        matches!(&err, VerbsError::Remote(m) if m.contains("remote access")),
        "{err}"
    );
    agent.write(3, 0, b"new").await.unwrap();
    let mut buf = [0u8; 8];
    manager.read(3, 0, &mut buf).await.unwrap();
    assert_eq!(
        &buf, b"new\0\0\0\0\0",
        "the write landed in the new copy only"
    );
}

/// Every queue pair of the fabric breaks (a link flap): the transport sets its queue
/// pair up again, and posts work on the new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_queue_pair_is_set_up_again() {
    let (fabric, _node, agent) = written_once().await;
    let t: &dyn Transport = &agent;
    fabric.break_links();
    // The link learns of the failure from its flushed receive buffers or from the next
    // post; either way the queue pair is set up again, and the node is not taken for
    // dead.
    if let Err(err) = t.write(1, 0, b"during").await {
        assert!(!err.is_node_failure(), "the node is alive: {err}");
    }
    t.write(1, 0, b"after!").await.unwrap();
    assert_eq!(
        agent.links_opened(),
        2,
        "the queue pair was set up again once"
    );
    let mut buf = [0u8; 6];
    t.read(1, 0, &mut buf).await.unwrap();
    assert_eq!(&buf, b"after!");
}

/// Revocation fences one-sided verbs: once the manager's `Revoke` is answered, the
/// revoked agent's queue pair is in the error state, so its CAS does not run, it
/// learns `Revoked` when it tries to connect again, and other clients go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revocation_fences_one_sided_verbs() {
    let fabric = EmulatedFabric::default();
    let (ep, _stop, _dir) = rdma_node(&fabric).await;
    let named = |client| RpcOptions {
        client,
        ..options(b"s")
    };
    let agent = client(&fabric, &ep, named(0xa9)).await;
    let other = client(&fabric, &ep, named(0xb1)).await;
    let manager = client(&fabric, &ep, options(b"s")).await;
    let (agent, other, manager): (&dyn Transport, &dyn Transport, &dyn Transport) =
        (&agent, &other, &manager);
    manager.create_region(1, 4096).await.unwrap();
    agent.write(1, 0, &[1; 8]).await.unwrap();
    manager
        .call(Request::Revoke { client: 0xa9 })
        .await
        .unwrap();
    let err = agent.cas(1, 0, 0x0101_0101_0101_0101, 2).await.unwrap_err();
    assert_eq!(err, VerbsError::Revoked(0xa9));
    let mut word = [0u8; 8];
    manager.read(1, 0, &mut word).await.unwrap();
    assert_eq!(word, [1; 8], "the fenced CAS did not run");
    let again = RdmaTransport::connect(ep.clone(), named(0xa9), fabric.device()).await;
    assert_eq!(again.err(), Some(VerbsError::Revoked(0xa9)));
    other.write(1, 8, &[3; 8]).await.unwrap();
}

/// A node that serves no RDMA device refuses the connection with a clear error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_without_rdma_says_so() {
    let fabric = EmulatedFabric::default();
    let dir = tempfile::tempdir().unwrap();
    let (ep, _stop) = start_node(dir.path(), b"s").await;
    let err = RdmaTransport::connect(ep, options(b"s"), fabric.device())
        .await
        .err()
        .expect("no RDMA on this node");
    assert!(err.to_string().contains("serves no RDMA device"), "{err}");
}

/// The conformance suite on real verbs: the node and the client share this machine's
/// first device (a loopback connection through the NIC). Without a device it says it
/// skipped. Run: `cargo test -p dmc-verbs --features rdma --test rdma rdma_device`.
#[cfg(feature = "rdma")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rdma_device_conforms() {
    use dmc_verbs::rdma::RcDevice;
    use dmc_verbs::rdma::ibverbs;
    let open = || ibverbs::open(None, 1, 0).expect("RDMA device discovery");
    let (Some(node_device), Some(client_device)) = (open(), open()) else {
        eprintln!("skipped: no RDMA device on this machine (ibv_get_device_list found none)");
        return;
    };
    eprintln!("running on RDMA device {}", node_device.name());
    let dir = tempfile::tempdir().unwrap();
    let responder = Arc::new(RdmaResponder::new(Arc::new(node_device)));
    let (ep, _stop) = start_node_with(dir.path(), b"s", Some(responder)).await;
    let t = RdmaTransport::connect(ep, options(b"s"), Arc::new(client_device))
        .await
        .unwrap();
    conformance::run_all(Arc::new(t), 1).await;
}

/// The commit path's RPCs are SEND/RECV messages on the queue pair: a prepared and
/// committed transaction goes without the RPC channel, one too long for a message takes
/// the channel, and a revoked client's prepare is refused on either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commit_rpcs_are_messages_on_the_queue_pair() {
    use dmc_verbs::wire::{Response, TxPrepare, TxVote, WordWrite};
    let fabric = EmulatedFabric::default();
    let (ep, _stop, _dir) = rdma_node(&fabric).await;
    let named = RpcOptions {
        client: 0xc0,
        ..options(b"s")
    };
    let agent = client(&fabric, &ep, named).await;
    let manager = client(&fabric, &ep, options(b"s")).await;
    manager
        .call(Request::CreateRegion {
            region: 2,
            size: 1 << 20,
        })
        .await
        .unwrap();
    let prepare = |txid, words: u64| {
        Request::Prepare(vec![TxPrepare {
            txid,
            shard: 3,
            epoch: 1,
            writes: (0..words)
                .map(|i| WordWrite {
                    region: 2,
                    offset: i * 8,
                    expect: Some(0),
                    new: txid,
                    in_word_lock: false,
                })
                .collect(),
        }])
    };
    let sent = agent.messages_sent();
    let votes = agent.call(prepare(1, 4)).await.unwrap();
    assert_eq!(votes, Response::Votes(vec![TxVote::Yes]));
    let votes = agent.call(Request::Commit(vec![1])).await.unwrap();
    assert_eq!(votes, Response::Votes(vec![TxVote::Yes]));
    assert_eq!(
        agent.messages_sent(),
        sent + 2,
        "prepare and commit were messages"
    );
    let t: &dyn Transport = &agent;
    let mut word = [0u8; 8];
    t.read(2, 24, &mut word).await.unwrap();
    assert_eq!(u64::from_le_bytes(word), 1, "the commit applied the write");

    // 2 000 words do not fit one message: the channel carries them.
    let votes = agent.call(prepare(2, 2000)).await.unwrap();
    assert!(matches!(votes, Response::Votes(_)), "{votes:?}");
    assert_eq!(agent.messages_sent(), sent + 2);
    agent.call(Request::Abort(vec![2])).await.unwrap();

    manager
        .call(Request::Revoke { client: 0xc0 })
        .await
        .unwrap();
    let err = agent.call(prepare(3, 1)).await.unwrap_err();
    assert_eq!(err, VerbsError::Revoked(0xc0));
}

/// `abort` (the node left every copy) drops the queue pair and the channel at once;
/// work begun after it connects anew.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_drops_the_queue_pair_and_later_work_reconnects() {
    let (_fabric, _node, agent) = written_once().await;
    let t: &dyn Transport = &agent;
    t.abort().await;
    t.write(1, 0, b"after!").await.unwrap();
    assert_eq!(agent.links_opened(), 2, "a new queue pair after the abort");
    let mut buf = [0u8; 6];
    t.read(1, 0, &mut buf).await.unwrap();
    assert_eq!(&buf, b"after!");
}
