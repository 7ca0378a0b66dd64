//! The operator commands other than `serve`: each asks the manager's admin API over
//! HTTP and prints the reply as a table (or as JSON with `--json`). Called by
//! [`super::run`]; it holds no state and never reads the state file, so what it shows
//! is only what the manager answers.

use std::time::Duration;

use anyhow::{Context, Result, bail};

use super::{AgentsCmd, Cmd, InstancesCmd, NodesCmd, RegionsCmd};
use crate::api::{AddNode, CreateInstance, ResizeInstance, ScaleRequest};
use crate::manager::{Drain, Fill, InstanceStatus, Migration, ShardRow, Status};
use crate::scale::ScaleReport;
use crate::state::RegionRecord;

pub(super) fn client(base: &str, json: bool, cmd: Cmd) -> Result<()> {
    // Error statuses are read, not raised, so the manager's own message is shown.
    // `agents scale` waits for agents to start or drain.
    let agent = dmc_process::membership::http(Duration::from_secs(180));
    let url = |path: &str| format!("{}{path}", base.trim_end_matches('/'));
    let fail = |e: ureq::Error| unreachable_manager(base, e);
    match cmd {
        Cmd::Status
        | Cmd::Nodes {
            cmd: NodesCmd::List,
        }
        | Cmd::Agents {
            cmd: AgentsCmd::List,
        } => {
            let status: Status = ok(agent.get(url("/v1/status")).call().map_err(fail)?)?
                .body_mut()
                .read_json()
                .context("reading the manager's reply")?;
            if json {
                println!("{}", serde_json::to_string_pretty(&status)?);
                return Ok(());
            }
            let show_nodes = !matches!(cmd, Cmd::Agents { .. });
            let show_agents = !matches!(cmd, Cmd::Nodes { .. });
            if matches!(cmd, Cmd::Status) {
                println!(
                    "pool capacity {}  memory nodes {}  agents {}  shards {}",
                    human(status.capacity),
                    status.nodes.len(),
                    status.agents.len(),
                    status.shards
                );
            }
            if show_nodes {
                println!(
                    "{:>6}  {:<24} {:>10} {:>10} {:>10} {:>5} {:>9}  STATE",
                    "NODE", "ENDPOINT", "CAPACITY", "ALLOCATED", "USED", "USE%", "LATENCY"
                );
                for n in &status.nodes {
                    println!(
                        "{:>6}  {:<24} {:>10} {:>10} {:>10} {:>5} {:>9}  {}",
                        n.id,
                        n.endpoint,
                        human(n.capacity),
                        human(n.allocated),
                        human(n.used),
                        percent(n.used, n.allocated),
                        n.latency_us
                            .map_or("-".to_string(), |us| format!("{:.2}ms", us / 1000.0)),
                        match (n.alive, n.draining) {
                            (false, _) => "dead",
                            (true, true) => "draining",
                            (true, false) => "alive",
                        }
                    );
                }
            }
            if matches!(cmd, Cmd::Status) {
                print_instances(&status.instances);
            }
            if show_agents {
                println!(
                    "{:>6}  {:<24} {:<12} {:>7}  STATE",
                    "AGENT", "LISTEN", "INSTANCE", "SHARDS"
                );
                for a in &status.agents {
                    println!(
                        "{:>6}  {:<24} {:<12} {:>7}  {}",
                        a.id,
                        a.listen,
                        a.instance,
                        a.shards,
                        if a.alive { "alive" } else { "dead" }
                    );
                }
            }
        }
        Cmd::Nodes {
            cmd:
                NodesCmd::Add {
                    id,
                    endpoint,
                    capacity,
                },
        } => {
            ok(agent
                .post(url("/v1/nodes"))
                .send_json(AddNode {
                    id,
                    endpoint,
                    capacity,
                })
                .map_err(fail)?)?;
            println!("node {id} added");
        }
        Cmd::Nodes {
            cmd: NodesCmd::Remove { id },
        } => {
            ok(agent
                .delete(url(&format!("/v1/nodes/{id}")))
                .call()
                .map_err(fail)?)?;
            println!("node {id} removed");
        }
        Cmd::Agents {
            cmd: AgentsCmd::Remove { id },
        } => {
            ok(agent
                .delete(url(&format!("/v1/agents/{id}")))
                .call()
                .map_err(fail)?)?;
            println!("agent {id} removed; its shards were reassigned");
        }
        Cmd::Agents {
            cmd: AgentsCmd::Scale { count, instance },
        } => scale_to(&agent, &url, json, &instance, Some(count))?,
        Cmd::Agents {
            cmd: AgentsCmd::Add { instance },
        } => scale_to(&agent, &url, json, &instance, None)?,
        Cmd::Slots { instance } => {
            let rows: Vec<ShardRow> = ok(agent
                .get(url("/v1/slots"))
                .query("instance", &instance)
                .call()
                .map_err(fail)?)?
            .body_mut()
            .read_json()
            .context("reading the manager's reply")?;
            if json {
                println!("{}", serde_json::to_string_pretty(&rows)?);
                return Ok(());
            }
            // Consecutive shards with one owner and the same backups print as one
            // slot range.
            println!("{:<13}  {:>6}  BACKUPS", "SLOTS", "AGENT");
            let mut i = 0;
            while i < rows.len() {
                let mut j = i;
                while j + 1 < rows.len()
                    && (&rows[j + 1].primary, &rows[j + 1].backups)
                        == (&rows[i].primary, &rows[i].backups)
                {
                    j += 1;
                }
                let owner = rows[i].primary.map_or("-".to_string(), |a| a.to_string());
                let backups: Vec<String> = rows[i].backups.iter().map(|b| b.to_string()).collect();
                println!(
                    "{:<13}  {:>6}  {}",
                    format!("{}-{}", rows[i].first_slot, rows[j].last_slot),
                    owner,
                    if backups.is_empty() {
                        "-".to_string()
                    } else {
                        backups.join(",")
                    }
                );
                i = j + 1;
            }
        }
        Cmd::Instances {
            cmd: InstancesCmd::List,
        } => {
            let list: Vec<InstanceStatus> =
                ok(agent.get(url("/v1/instances")).call().map_err(fail)?)?
                    .body_mut()
                    .read_json()
                    .context("reading the manager's reply")?;
            if json {
                println!("{}", serde_json::to_string_pretty(&list)?);
            } else {
                print_instances(&list);
            }
        }
        Cmd::Instances {
            cmd:
                InstancesCmd::Create {
                    name,
                    maxmemory,
                    policy,
                    backups,
                },
        } => {
            ok(agent
                .post(url("/v1/instances"))
                .send_json(CreateInstance {
                    name: name.clone(),
                    maxmemory,
                    policy,
                    backups,
                })
                .map_err(fail)?)?;
            println!(
                "instance {name} created; start its agents with `agents scale N --instance {name}`"
            );
        }
        Cmd::Instances {
            cmd:
                InstancesCmd::Resize {
                    name,
                    maxmemory,
                    policy,
                    backups,
                },
        } => {
            ok(agent
                .put(url(&format!("/v1/instances/{name}")))
                .send_json(ResizeInstance {
                    maxmemory,
                    policy,
                    backups,
                })
                .map_err(fail)?)?;
            println!("instance {name} changed; its agents follow within a round trip");
        }
        Cmd::Regions {
            cmd: RegionsCmd::List,
        } => {
            let list: Vec<RegionRecord> =
                ok(agent.get(url("/v1/regions")).call().map_err(fail)?)?
                    .body_mut()
                    .read_json()
                    .context("reading the manager's reply")?;
            if json {
                println!("{}", serde_json::to_string_pretty(&list)?);
                return Ok(());
            }
            // Copies are counted against the pool's replicas, and a copy on a node
            // whose lease lapsed (not yet failed over) is marked with `!`.
            let status: serde_json::Value =
                ok(agent.get(url("/v1/status")).call().map_err(fail)?)?
                    .body_mut()
                    .read_json()
                    .context("reading the manager's reply")?;
            let replicas = status["replicas"].as_u64().unwrap_or(0) as usize;
            let dead: Vec<u64> = status["nodes"]
                .as_array()
                .map(|n| {
                    n.iter()
                        .filter(|n| n["alive"] == false)
                        .filter_map(|n| n["id"].as_u64())
                        .collect()
                })
                .unwrap_or_default();
            let node = |n: u32| {
                let mark = if dead.contains(&u64::from(n)) {
                    "!"
                } else {
                    ""
                };
                format!("{n}{mark}")
            };
            println!(
                "{:>6}  {:<12} {:>10}  {:>7}  {:<10} {:>6}  STATE",
                "REGION", "INSTANCE", "SIZE", "PRIMARY", "BACKUPS", "COPIES"
            );
            for r in &list {
                let backups: Vec<String> = r.backups.iter().map(|b| node(*b)).collect();
                let copies = 1 + r.backups.len();
                let filling = r
                    .filling
                    .iter()
                    .map(|n| n.to_string())
                    .collect::<Vec<_>>()
                    .join(",");
                let state = if r.draining {
                    "draining".to_string()
                } else if r.frozen {
                    "frozen".to_string()
                } else if !r.filling.is_empty() {
                    format!("filling {filling}")
                } else if copies < replicas {
                    "degraded".to_string()
                } else {
                    "active".to_string()
                };
                println!(
                    "{:>6}  {:<12} {:>10}  {:>7}  {:<10} {:>6}  {state}",
                    r.id,
                    r.instance,
                    human(r.size.0),
                    node(r.primary),
                    backups.join(","),
                    format!("{copies}/{replicas}"),
                );
            }
        }
        Cmd::Regions {
            cmd: RegionsCmd::Migrate { id, to },
        } => {
            let m: Migration = ok(agent
                .post(url(&format!("/v1/regions/{id}/migrate")))
                .send_json(serde_json::json!({ "to": to }))
                .map_err(fail)?)?
            .body_mut()
            .read_json()
            .context("reading the manager's reply")?;
            if json {
                println!("{}", serde_json::to_string_pretty(&m)?);
                return Ok(());
            }
            println!(
                "region {} primary {} -> {}: writes to it waited at most {:.1} ms (drain {:.1} ms)",
                m.region, m.from, m.to, m.write_block_ms, m.drain_ms
            );
        }
        Cmd::Regions {
            cmd: RegionsCmd::Copy { id, to, rate },
        } => {
            let f: Fill = ok(agent
                .post(url(&format!("/v1/regions/{id}/copies")))
                .send_json(serde_json::json!({ "node": to, "rate": rate.map(|r| r.0) }))
                .map_err(fail)?)?
            .body_mut()
            .read_json()
            .context("reading the manager's reply")?;
            if json {
                println!("{}", serde_json::to_string_pretty(&f)?);
                return Ok(());
            }
            println!(
                "region {} has a new copy on node {}: {} copied in {:.0} ms ({} chunks again while frozen); writes waited at most {:.1} ms",
                f.region,
                f.node,
                human(f.bytes),
                f.copy_ms,
                f.recopied_chunks,
                f.write_block_ms
            );
        }
        Cmd::Nodes {
            cmd: NodesCmd::Drain { id, rate },
        } => {
            let d: Drain = ok(agent
                .post(url(&format!("/v1/nodes/{id}/drain")))
                .send_json(serde_json::json!({ "rate": rate.map(|r| r.0) }))
                .map_err(fail)?)?
            .body_mut()
            .read_json()
            .context("reading the manager's reply")?;
            if json {
                println!("{}", serde_json::to_string_pretty(&d)?);
                return Ok(());
            }
            println!(
                "node {} drained in {} ms: {} primaries moved, {} copies filled elsewhere",
                d.node,
                d.millis,
                d.migrated.len(),
                d.filled.len()
            );
        }
        Cmd::Serve { .. } => bail!("serve is not a client command"),
    }
    Ok(())
}

type HttpResponse = ureq::http::Response<ureq::Body>;

fn unreachable_manager(base: &str, e: ureq::Error) -> anyhow::Error {
    anyhow::anyhow!("cannot reach the manager at {base}: {e}")
}

/// The response if it succeeded, else the manager's own error message.
fn ok(mut r: HttpResponse) -> Result<HttpResponse> {
    if r.status().is_success() {
        return Ok(r);
    }
    let body: serde_json::Value = r.body_mut().read_json().unwrap_or_default();
    let msg = body["error"].as_str().unwrap_or("no details").to_string();
    bail!("{} ({})", msg, r.status())
}

/// `agents scale COUNT`, or with `None` one agent more than now (`agents add`), of
/// `instance`.
fn scale_to(
    agent: &ureq::Agent,
    url: &dyn Fn(&str) -> String,
    json: bool,
    instance: &str,
    count: Option<usize>,
) -> Result<()> {
    let base = url("");
    let count = match count {
        Some(c) => c,
        None => {
            let status: Status = ok(agent
                .get(url("/v1/status"))
                .call()
                .map_err(|e| unreachable_manager(&base, e))?)?
            .body_mut()
            .read_json()
            .context("reading the manager's reply")?;
            status
                .agents
                .iter()
                .filter(|a| a.instance == instance)
                .count()
                + 1
        }
    };
    let report: ScaleReport = ok(agent
        .post(url("/v1/agents/scale"))
        .send_json(ScaleRequest {
            count,
            instance: instance.to_string(),
        })
        .map_err(|e| unreachable_manager(&base, e))?)?
    .body_mut()
    .read_json()
    .context("reading the manager's reply")?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    println!(
        "agents of {instance} {} -> {} in {} ms",
        report.before, report.after, report.millis
    );
    for l in &report.started {
        println!("  started {l}");
    }
    for l in &report.stopped {
        println!("  stopped {l} (drained)");
    }
    Ok(())
}

fn percent(part: u64, whole: u64) -> String {
    if whole == 0 {
        return "-".into();
    }
    format!("{:.0}%", part as f64 * 100.0 / whole as f64)
}

fn print_instances(list: &[InstanceStatus]) {
    println!(
        "{:<12} {:>10} {:>10} {:>10} {:>5} {:>8} {:>7} {:>7}  POLICY",
        "INSTANCE", "MAXMEMORY", "ALLOCATED", "USED", "USE%", "REGIONS", "AGENTS", "BACKUPS"
    );
    for i in list {
        let max = if i.maxmemory == 0 {
            "pool".to_string()
        } else {
            human(i.maxmemory)
        };
        println!(
            "{:<12} {:>10} {:>10} {:>10} {:>5} {:>8} {:>7} {:>7}  {}",
            i.name,
            max,
            human(i.allocated),
            human(i.used),
            percent(i.used, i.allocated),
            i.regions,
            i.agents,
            i.backups,
            i.policy
        );
    }
}

fn human(bytes: u64) -> String {
    const U: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let (mut v, mut u) = (bytes as f64, 0);
    while v >= 1024.0 && u + 1 < U.len() {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.1} {}", U[u])
}
