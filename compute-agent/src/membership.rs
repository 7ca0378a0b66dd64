//! The agent's side of cluster membership: calls to the manager retried while it
//! starts, the first map whose pool can be opened, and the watcher that follows every
//! newer map for the life of the agent. Called by [`crate::run`]; it never serves a
//! client, and it applies maps only through the [`Router`].

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::{Context, Result};
use dmc_proto::cluster::{ClusterMap, DirtyChunks};

use crate::config::PoolSection;
use crate::pool::pool_from_map;
use crate::routing::Router;

/// Retries a call to the manager for up to a minute (it may be starting too).
pub(crate) async fn with_manager<T: Send + 'static>(
    what: &'static str,
    call: impl Fn() -> Result<T, dmc_process::membership::ManagerCallError> + Send + Clone + 'static,
) -> Result<T> {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let c = call.clone();
        match tokio::task::spawn_blocking(c).await? {
            Ok(v) => return Ok(v),
            Err(e) if std::time::Instant::now() < deadline => {
                tracing::warn!(error = %e, "{what} failed; retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => return Err(e).context(what),
        }
    }
}

/// The first cluster map of `instance` whose pool can be opened: the manager may know
/// fewer memory nodes than the pool's replicas while the nodes are still registering.
pub(crate) async fn pool_map(url: &str, instance: &str, own: &PoolSection) -> Result<ClusterMap> {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let (u, i) = (url.to_string(), instance.to_string());
        let map = with_manager("fetching the cluster map", move || {
            dmc_process::membership::fetch_map(&u, &i, 0, Duration::ZERO)
        })
        .await?;
        let pool = pool_from_map(own, &map);
        if pool.nodes.len() >= pool.replicas.max(1) {
            return Ok(map);
        }
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "the cluster has {} memory nodes, the pool needs {}",
            pool.nodes.len(),
            pool.replicas
        );
        tracing::info!(
            nodes = pool.nodes.len(),
            replicas = pool.replicas,
            "waiting for memory nodes to join"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Follows the manager's map for the life of the agent: long-polls for a newer one,
/// applies it, and acknowledges it at once. A map without this agent (it was removed)
/// or of another cluster (the manager's URL now serves a different state) makes the
/// agent shut down through `leave`, draining its clients.
pub(crate) fn watch_map(
    url: String,
    instance: String,
    me: u64,
    router: Arc<Router>,
    applied: Arc<std::sync::atomic::AtomicU64>,
    leave: Arc<tokio::sync::Notify>,
) {
    let cluster = router
        .map()
        .map(|m| m.cluster_id.clone())
        .unwrap_or_default();
    use dmc_process::membership;
    tokio::spawn(async move {
        let mut leaving = false;
        loop {
            let after = applied.load(Ordering::Acquire);
            let (u, i) = (url.clone(), instance.clone());
            let got = tokio::task::spawn_blocking(move || {
                membership::fetch_map(&u, &i, after, Duration::from_secs(30))
            })
            .await;
            match got {
                Ok(Ok(map)) if map.cluster_id != cluster => {
                    tracing::error!(joined = %cluster, now = %map.cluster_id,
                        "the manager now runs another cluster; leaving");
                    leave.notify_one();
                    return;
                }
                Ok(Ok(map)) if map.version > after => {
                    let removed = map.agent(me).is_none();
                    let v = router.apply(me, map).await;
                    if removed && !leaving {
                        // Keep following maps while draining: writes go to the owners.
                        tracing::info!(version = v, "removed from the cluster; draining");
                        leave.notify_one();
                        leaving = true;
                    }
                    router.drain(me);
                    // A report the manager never gets (the tests' stand-in for an agent
                    // that exits with it in flight).
                    #[cfg(feature = "failpoints")]
                    if removed && fail::eval("agent-removal-unreported", |_| ()).is_some() {
                        std::future::pending::<()>().await;
                    }
                    // The chunks written in regions being filled go with the report;
                    // `applied` (which heartbeats also report) rises only once the
                    // manager has them, so it never sees the version without them.
                    // A failed report is retried: the same map comes back at once.
                    let dht = &router.engine().dht;
                    let dirty: Vec<DirtyChunks> = dht
                        .take_dirty()
                        .into_iter()
                        .map(|d| DirtyChunks {
                            region: d.region,
                            chunks: d.chunks,
                        })
                        .collect();
                    let u = url.clone();
                    let sent = dirty.clone();
                    let reported = tokio::task::spawn_blocking(move || {
                        membership::report_applied(&u, me, v, &sent)
                    })
                    .await;
                    match reported {
                        Ok(Ok(())) => applied.store(v, Ordering::Release),
                        failed => {
                            let error = match failed {
                                Ok(Err(e)) => e.to_string(),
                                Err(e) => e.to_string(),
                                Ok(Ok(())) => String::new(),
                            };
                            tracing::warn!(version = v, %error, "reporting the applied map failed; retrying");
                            dht.restore_dirty(
                                dirty
                                    .into_iter()
                                    .map(|d| dmc_umo::DirtyChunks {
                                        region: d.region,
                                        chunks: d.chunks,
                                    })
                                    .collect(),
                            );
                            tokio::time::sleep(Duration::from_millis(200)).await;
                        }
                    }
                }
                Ok(Ok(_)) => {}
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "fetching the cluster map failed; retrying");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                Err(e) => {
                    tracing::error!(error = %e, "the map watcher failed");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        }
    });
}
