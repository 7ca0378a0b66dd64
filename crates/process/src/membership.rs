//! Membership in a cluster managed by `cluster-manager`: a process registers itself
//! (a memory node under its id, endpoint and capacity; an agent by its client address,
//! receiving an id) and then renews its lease with a heartbeat. It runs on its own
//! thread so a busy runtime cannot starve the lease; if the manager forgot the process
//! (a 404), it registers again, and while the manager is down it keeps retrying.

use std::time::Duration;

use serde_json::json;

/// Who this process is to the manager.
#[derive(Debug, Clone)]
pub enum Registration {
    Node {
        id: u32,
        endpoint: String,
        capacity: u64,
    },
    Agent {
        listen: String,
    },
}

/// Registers with the manager at `url` and heartbeats every `every`, for the life of
/// the process.
pub fn spawn(url: String, who: Registration, every: Duration) -> std::thread::JoinHandle<()> {
    std::thread::Builder::new()
        .name("dmc-membership".into())
        .spawn(move || membership(url, who, every))
        .expect("spawning the membership thread")
}

fn membership(url: String, who: Registration, every: Duration) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(5)))
        .build()
        .into();
    let base = url.trim_end_matches('/').to_string();
    let mut heartbeat: Option<String> = None;
    loop {
        match &heartbeat {
            None => match register(&agent, &base, &who) {
                Ok(path) => {
                    tracing::info!(manager = %base, "registered with the cluster manager");
                    heartbeat = Some(path);
                }
                Err(e) => {
                    tracing::warn!(manager = %base, error = %e, "registering failed; retrying")
                }
            },
            Some(path) => match agent.post(format!("{base}{path}")).send_empty() {
                Ok(r) if r.status().is_success() => {}
                Ok(r) if r.status().as_u16() == 404 => {
                    tracing::warn!(manager = %base, "the manager no longer knows this process; registering again");
                    heartbeat = None;
                    continue;
                }
                Ok(r) => tracing::warn!(manager = %base, status = %r.status(), "heartbeat refused"),
                Err(e) => tracing::warn!(manager = %base, error = %e, "heartbeat failed"),
            },
        }
        std::thread::sleep(every);
    }
}

/// Registers; returns the heartbeat path.
fn register(agent: &ureq::Agent, base: &str, who: &Registration) -> Result<String, String> {
    let (path, body) = match who {
        Registration::Node {
            id,
            endpoint,
            capacity,
        } => (
            "/v1/nodes",
            json!({ "id": id, "endpoint": endpoint, "capacity": capacity }),
        ),
        Registration::Agent { listen } => ("/v1/agents", json!({ "listen": listen })),
    };
    let mut r = agent
        .post(format!("{base}{path}"))
        .send_json(&body)
        .map_err(|e| e.to_string())?;
    if !r.status().is_success() {
        let text = r.body_mut().read_to_string().unwrap_or_default();
        return Err(format!("{}: {text}", r.status()));
    }
    match who {
        Registration::Node { id, .. } => Ok(format!("/v1/nodes/{id}/heartbeat")),
        Registration::Agent { .. } => {
            let v: serde_json::Value = r.body_mut().read_json().map_err(|e| e.to_string())?;
            let id = v["id"].as_u64().ok_or("the manager returned no agent id")?;
            Ok(format!("/v1/agents/{id}/heartbeat"))
        }
    }
}
