//! Re-replication, run by the manager's serve loop every half lease: a region with
//! fewer complete copies than the pool's `replicas` (a memory node failed and left its
//! record) gets a new copy filled on the live node with the most room that holds none
//! ([`Manager::next_refill`], [`Manager::fill_copy`]), one region at a time, at the
//! configured `fill-rate`.

use std::sync::Arc;
use std::time::Duration;

use crate::api::App;

/// Starts the re-replication task; it runs for the life of the process.
pub fn spawn(app: Arc<App>, lease: Duration) -> tokio::task::JoinHandle<()> {
    let every = (lease / 2).max(Duration::from_millis(50));
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(every).await;
            let Some((region, node)) = app.manager.next_refill() else {
                continue;
            };
            tracing::info!(
                region,
                node,
                "filling a new copy of an under-replicated region"
            );
            match app.manager.fill_copy(region, node, app.fill_rate).await {
                Ok(f) => tracing::info!(
                    region,
                    node,
                    bytes = f.bytes,
                    copy_ms = f.copy_ms,
                    write_block_ms = f.write_block_ms,
                    "region copy restored"
                ),
                Err(e) => {
                    tracing::warn!(region, node, error = %e, "filling a region copy failed; retrying")
                }
            }
        }
    })
}
