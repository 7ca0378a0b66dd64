//! Failover, run by the manager's serve loop four times a lease. Memory nodes whose
//! lease lapsed leave the region records ([`Manager::fail_lapsed_nodes`]), and the
//! stale copies of one that comes back are dropped ([`Manager::drop_stale_copies`],
//! every two leases). Agents whose
//! lease lapsed are removed from their instance (their shards go to the live agents,
//! see [`Manager::remove_lapsed_agents`]), and each one this manager's launcher
//! started is killed (a hung or paused process must never wake up and write) and
//! replaced by a new agent, so the instance keeps its size. A launched agent whose
//! process exited is removed at the next check, without waiting for its lease
//! ([`Manager::agents_exited`]), and replaced. Agents started by hand are the
//! operator's to replace. Every agent failed over is revoked on every live memory
//! node ([`Manager::revoke_departed`]): its verbs still on the way, or sent when it
//! wakes from a pause, are refused.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::api::App;
use crate::manager::Manager;
use crate::state::AgentRecord;

/// Starts the failover task; it runs for the life of the process.
pub fn spawn(app: Arc<App>, lease: Duration) -> tokio::task::JoinHandle<()> {
    let every = (lease / 4).max(Duration::from_millis(10));
    tokio::spawn(async move {
        let mut last = Instant::now();
        let mut tick = 0u64;
        loop {
            tokio::time::sleep(every).await;
            // The manager itself did not run for a while (stopped, paused, a starved
            // machine): the agents' heartbeats could not be heard, so each gets a full
            // lease to check in again, as after a restart.
            if last.elapsed() > every * 2 {
                app.manager.renew_members();
            }
            last = Instant::now();
            match app.manager.fail_lapsed_nodes().await {
                Ok(failed) if !failed.is_empty() => crate::metrics::nodes_failed_over(failed.len()),
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "taking failed memory nodes out failed"),
            }
            // Every two leases: stale copies on nodes that came back after failing.
            tick += 1;
            if tick.is_multiple_of(8)
                && let Err(e) = app.manager.drop_stale_copies().await
            {
                tracing::warn!(error = %e, "dropping stale region copies failed");
            }
            // New agents of instances with backups take primaries once warm.
            match app.manager.end_warming() {
                Ok(warm) if !warm.is_empty() => {
                    tracing::info!(agents = ?warm, "agents warmed up: taking their share of primaries")
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "ending agents' warm-up failed"),
            }
            // Launched agents whose process exited (killed, crashed): out at once,
            // not a lease later.
            let exited = exited_launched(&app);
            if !exited.is_empty() {
                let ids: Vec<_> = exited.iter().map(|a| a.id).collect();
                match app.manager.agents_exited(&ids) {
                    Ok(()) => {
                        crate::metrics::agents_failed_over(exited.len());
                        tracing::warn!(
                            agents = ?ids,
                            "agents' processes exited: removed, their shards given to live agents"
                        );
                        replace_launched(&app, &exited).await;
                    }
                    Err(e) => tracing::warn!(error = %e, "removing exited agents failed"),
                }
            }
            match app.manager.remove_lapsed_agents() {
                Ok(gone) if !gone.is_empty() => {
                    crate::metrics::agents_failed_over(gone.len());
                    tracing::warn!(
                        agents = ?gone.iter().map(|a| a.id).collect::<Vec<_>>(),
                        "agents' leases lapsed: removed, their shards given to live agents"
                    );
                    replace_launched(&app, &gone).await;
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "removing lapsed agents failed"),
            }
            // Fence the agents failed over (now or earlier) on every live node: until
            // then the agents gaining their shards do not write them.
            app.manager.revoke_departed().await;
        }
    })
}

/// Kills the launched ones among `gone` and starts as many new agents per instance.
async fn replace_launched(app: &App, gone: &[AgentRecord]) {
    let mut per_instance: BTreeMap<&str, usize> = BTreeMap::new();
    let launched = app.manager.snapshot().launched;
    for agent in gone {
        let Some(rec) = launched.get(&agent.listen) else {
            continue;
        };
        app.launcher.kill(rec);
        if let Err(e) = app.manager.forget_launch(&rec.listen) {
            tracing::warn!(listen = %rec.listen, error = %e, "forgetting a dead agent's launch failed");
        }
        *per_instance.entry(agent.instance.as_str()).or_default() += 1;
    }
    for (instance, n) in per_instance {
        let _one = app.scaling.lock().await;
        let target = live_agents(&app.manager, instance) + n;
        match crate::scale::scale(
            &app.manager,
            app.launcher.as_ref(),
            instance,
            target,
            app.times,
        )
        .await
        {
            Ok(report) => tracing::info!(
                instance, started = ?report.started, "replaced agents whose lease lapsed"
            ),
            Err(e) => tracing::warn!(instance, error = %e, "replacing lapsed agents failed"),
        }
    }
}

/// Registered agents the launcher started whose process is gone.
fn exited_launched(app: &App) -> Vec<AgentRecord> {
    let s = app.manager.snapshot();
    s.agents
        .values()
        .filter(|a| {
            s.launched
                .get(&a.listen)
                .is_some_and(|rec| !app.launcher.running(rec))
        })
        .cloned()
        .collect()
}

fn live_agents(m: &Manager, instance: &str) -> usize {
    m.snapshot().agents_of(instance).count()
}
