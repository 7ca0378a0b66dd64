//! `agents scale N [--instance I]`: start or stop an instance's agents through the
//! [`Launcher`] and re-assign the instance's shards.
//! No key moves (every agent reads every key from the pool); only ownership changes.
//!
//! Growing: launch the agents, wait until each has registered (which gives it its share
//! of shards) and every agent has applied the resulting map. Shrinking: take the
//! newest launched agents out of the shard map first, wait until every remaining agent
//! applied that map (so their writes are no longer forwarded to the leaving ones), then
//! stop them: each drains its client connections before it exits, and is killed if it
//! outlives the drain time.

use std::time::{Duration, Instant};

use dmc_proto::shards::AgentId;
use serde::{Deserialize, Serialize};

use crate::launcher::Launcher;
use crate::manager::{Manager, ManagerError};

/// What a rescale did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScaleReport {
    pub before: usize,
    pub after: usize,
    /// Listen addresses of agents started.
    pub started: Vec<String>,
    /// Listen addresses of agents stopped.
    pub stopped: Vec<String>,
    /// From the request to every agent serving under the new map.
    pub millis: u64,
}

#[derive(Debug, Clone, Copy)]
pub struct ScaleTimes {
    /// Longest wait for started agents to register and every agent to apply a map.
    pub ready: Duration,
    /// How long a stopping agent may take to drain before it is killed.
    pub drain: Duration,
}

pub async fn scale(
    m: &Manager,
    launcher: &dyn Launcher,
    instance: &str,
    target: usize,
    times: ScaleTimes,
) -> Result<ScaleReport, ManagerError> {
    let t0 = Instant::now();
    let snapshot = m.snapshot();
    crate::manager::instance_in(&snapshot, instance)?;
    let before = snapshot.agents_of(instance).count();
    let mut report = ScaleReport {
        before,
        after: before,
        started: vec![],
        stopped: vec![],
        millis: 0,
    };
    if target > before {
        let mut records = Vec::new();
        for _ in before..target {
            let rec = launcher
                .start(instance)
                .map_err(|e| ManagerError::Invalid(e.to_string()))?;
            report.started.push(rec.listen.clone());
            m.record_launch(rec.clone())?;
            records.push(rec);
        }
        let deadline = t0 + times.ready;
        // Each registered (which re-balances and raises the version) and serving...
        let serving = |l: &str| m.agent_at(l).is_some_and(|id| m.applied_version(id) > 0);
        while !records.iter().all(|r| serving(&r.listen)) {
            for r in &records {
                if !launcher.running(r) {
                    m.forget_launch(&r.listen)?;
                    return Err(ManagerError::Invalid(format!(
                        "the agent started at {} exited; see {}",
                        r.listen,
                        r.log.display()
                    )));
                }
            }
            if Instant::now() > deadline {
                return Err(ManagerError::Invalid(format!(
                    "started agents {:?} were not serving within {:?}; see their logs",
                    report.started, times.ready
                )));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // ...and serving under the final map.
        wait_applied(m, instance, &[], deadline).await?;
    } else if target < before {
        let snapshot = m.snapshot();
        // The most recently started first (then the highest id).
        let mut launched: Vec<(AgentId, String)> = snapshot
            .launched
            .keys()
            .filter_map(|l| m.agent_at(l).map(|id| (id, l.clone())))
            .filter(|(id, _)| {
                snapshot
                    .agents
                    .get(id)
                    .is_some_and(|a| a.instance == instance)
            })
            .collect();
        launched.sort_by_key(|(id, l)| {
            std::cmp::Reverse((snapshot.launched.get(l).map_or(0, |r| r.started_ms), *id))
        });
        let leaving: Vec<(AgentId, String)> = launched.into_iter().take(before - target).collect();
        if leaving.len() < before - target {
            return Err(ManagerError::Invalid(format!(
                "only {} of the {before} agents of {instance} were started by this manager's launcher; \
                 remove the others with `agents remove`",
                leaving.len()
            )));
        }
        let ids: Vec<AgentId> = leaving.iter().map(|l| l.0).collect();
        m.remove_agents(&ids)?;
        wait_applied(m, instance, &ids, t0 + times.ready).await?;
        let records: Vec<_> = leaving
            .iter()
            .filter_map(|(id, l)| snapshot.launched.get(l).map(|r| (*id, r.clone())))
            .collect();
        for (_, rec) in &records {
            launcher
                .stop(rec)
                .map_err(|e| ManagerError::Invalid(e.to_string()))?;
        }
        let deadline = Instant::now() + times.drain + Duration::from_secs(2);
        for (id, rec) in &records {
            while launcher.running(rec) && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            if launcher.running(rec) {
                tracing::warn!(pid = rec.pid, "agent outlived its drain time; killing it");
                launcher.kill(rec);
            }
            if launcher.exited(rec) {
                m.removed_agents_exited(&[*id]);
            }
            m.forget_launch(&rec.listen)?;
            report.stopped.push(rec.listen.clone());
        }
    }
    report.after = m.snapshot().agents_of(instance).count();
    report.millis = t0.elapsed().as_millis() as u64;
    tracing::info!(
        instance,
        before,
        after = report.after,
        millis = report.millis,
        "rescaled agents"
    );
    Ok(report)
}

async fn wait_applied(
    m: &Manager,
    instance: &str,
    except: &[AgentId],
    deadline: Instant,
) -> Result<(), ManagerError> {
    let version = m.map_version();
    while !m.applied_by_all(instance, version, except) {
        if Instant::now() > deadline {
            return Err(ManagerError::Invalid(format!(
                "not every agent applied cluster map {version} in time"
            )));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Ok(())
}
