//! The load balancer's loop, run by the manager's serve loop every balancing window:
//! closes the window of the agents' latency reports ([`Manager::next_rebalance`]) and,
//! when a memory node has stayed much slower than a node holding a backup of one of its
//! primaries, moves that primary role with a copy-free migration
//! ([`Manager::migrate_region`]); one region a window.
//!
//! [`Manager::next_rebalance`]: crate::manager::Manager::next_rebalance
//! [`Manager::migrate_region`]: crate::manager::Manager::migrate_region

use std::sync::Arc;
use std::time::Duration;

use crate::api::App;

/// Starts the balancer; it runs for the life of the process.
pub fn spawn(app: Arc<App>, every: Duration, factor: f64) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(every).await;
            let Some(r) = app.manager.next_rebalance(factor) else {
                continue;
            };
            tracing::info!(
                region = r.region,
                from = r.from,
                to = r.to,
                from_us = r.from_us as u64,
                to_us = r.to_us as u64,
                "moving a primary off a slow memory node"
            );
            match app.manager.migrate_region(r.region, r.to).await {
                Ok(m) => {
                    crate::metrics::balance_migration();
                    tracing::info!(
                        region = r.region,
                        to = r.to,
                        write_block_ms = m.write_block_ms,
                        "primary moved"
                    );
                }
                Err(e) => {
                    tracing::warn!(region = r.region, to = r.to, error = %e, "moving a primary failed")
                }
            }
        }
    })
}
