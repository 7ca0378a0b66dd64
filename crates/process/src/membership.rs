//! Membership in a cluster managed by `cluster-manager`, over its HTTP admin API.
//!
//! * A memory node registers under its id, endpoint and capacity; an agent registers
//!   by its client address and receives an id ([`register_agent`]).
//! * [`spawn`] renews the lease with a heartbeat from a thread of its own, so a busy
//!   runtime cannot starve it. An agent's heartbeat carries the cluster map version it
//!   applied. A node the manager forgot (a 404) registers again; an agent the manager
//!   removed stops heartbeating (it was scaled away and is draining).
//! * [`fetch_map`] long-polls for a cluster map newer than the one applied.
//!
//! While the manager is down every call here keeps retrying, so a restarted manager
//! changes nothing for the processes of the cluster.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use dmc_proto::cluster::{ClusterMap, DirtyChunks, RegionGrant};
use dmc_proto::shards::AgentId;
use serde_json::json;

/// Who this process is to the manager.
#[derive(Debug, Clone)]
pub enum Registration {
    Node {
        id: u32,
        endpoint: String,
        capacity: u64,
    },
    /// An agent that registered with [`register_agent`]; `applied` is the map version
    /// it follows, `used` its instance's live pool bytes.
    Agent {
        id: AgentId,
        applied: Arc<AtomicU64>,
        used: Arc<AtomicU64>,
        /// Bytes of its blocks per region, `(region, bytes)`.
        regions: Arc<std::sync::Mutex<Vec<(u16, u64)>>>,
        /// Asked for each heartbeat: the memory nodes its pool can reach (it adds
        /// those its maps name); the manager places new copies on these only.
        nodes: NodesHook,
        /// Told when each accepted heartbeat was sent: the agent's lease runs from it.
        renewed: RenewHook,
        /// Asked for each heartbeat's `load`: the nodes' and regions' latency the agent
        /// saw since the last one (the manager's load balancer reads it).
        load: LoadHook,
    },
}

/// The memory nodes an agent's pool reaches, asked for each heartbeat.
#[derive(Clone)]
pub struct NodesHook(pub Arc<dyn Fn() -> Vec<u32> + Send + Sync>);

impl std::fmt::Debug for NodesHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NodesHook")
    }
}

/// Produces a heartbeat's `load` report (JSON), starting a new period.
#[derive(Clone)]
pub struct LoadHook(pub Arc<dyn Fn() -> serde_json::Value + Send + Sync>);

impl std::fmt::Debug for LoadHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LoadHook")
    }
}

/// Called with the time an accepted heartbeat was sent (before the manager saw it, so
/// a lease counted from it ends no later than the manager's).
#[derive(Clone)]
pub struct RenewHook(pub Arc<dyn Fn(std::time::Instant) + Send + Sync>);

impl std::fmt::Debug for RenewHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RenewHook")
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ManagerCallError {
    #[error("cannot reach the cluster manager at {url}: {message}")]
    Unreachable { url: String, message: String },
    #[error("the cluster manager refused {what}: {status} {message}")]
    Refused {
        what: &'static str,
        status: u16,
        message: String,
    },
    #[error("the cluster manager's reply to {what} is not valid: {message}")]
    BadReply { what: &'static str, message: String },
}

/// An HTTP client for the manager's API: error statuses are read, not raised (so the
/// manager's own message is shown), and every request carries this process's cluster
/// secret ([`crate::secret::install`]) as a bearer token.
pub fn http(timeout: Duration) -> ureq::Agent {
    let mut config = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(timeout));
    if let Some(ca) = crate::secret::manager_ca() {
        let certs: Vec<ureq::tls::Certificate<'static>> = ca
            .iter()
            .map(|der| ureq::tls::Certificate::from_der(der).to_owned())
            .collect();
        config = config.tls_config(
            ureq::tls::TlsConfig::builder()
                .root_certs(ureq::tls::RootCerts::Specific(std::sync::Arc::new(certs)))
                .build(),
        );
    }
    if let Some(secret) = crate::secret::installed() {
        let value = ureq::http::HeaderValue::from_str(&crate::secret::bearer(secret)).ok();
        config = config.middleware(
            move |mut req: ureq::http::Request<ureq::SendBody>,
                  next: ureq::middleware::MiddlewareNext| {
                if let Some(v) = &value {
                    req.headers_mut()
                        .insert(ureq::http::header::AUTHORIZATION, v.clone());
                }
                next.handle(req)
            },
        );
    }
    config.build().into()
}

fn base(url: &str) -> String {
    url.trim_end_matches('/').to_string()
}

type Reply = ureq::http::Response<ureq::Body>;

fn checked(
    what: &'static str,
    url: &str,
    r: Result<Reply, ureq::Error>,
) -> Result<Reply, ManagerCallError> {
    let mut r = r.map_err(|e| ManagerCallError::Unreachable {
        url: url.to_string(),
        message: e.to_string(),
    })?;
    if r.status().is_success() {
        return Ok(r);
    }
    Err(ManagerCallError::Refused {
        what,
        status: r.status().as_u16(),
        message: r.body_mut().read_to_string().unwrap_or_default(),
    })
}

/// A successful reply's JSON body.
fn json_reply<T: serde::de::DeserializeOwned>(
    what: &'static str,
    url: &str,
    r: Result<Reply, ureq::Error>,
) -> Result<T, ManagerCallError> {
    checked(what, url, r)?
        .body_mut()
        .read_json()
        .map_err(|e| ManagerCallError::BadReply {
            what,
            message: e.to_string(),
        })
}

/// Registers an agent of `instance` serving clients at `listen`; returns its id.
/// `client` is the id the agent's pool presents to memory nodes (which the manager
/// revokes if it fails the agent over).
pub fn register_agent(
    url: &str,
    listen: &str,
    tls_listen: Option<&str>,
    instance: &str,
    client: u64,
) -> Result<AgentId, ManagerCallError> {
    let b = base(url);
    let r = http(Duration::from_secs(5))
        .post(format!("{b}/v1/agents"))
        .send_json(json!({
            "listen": listen,
            "tls_listen": tls_listen,
            "instance": instance,
            "client": client,
        }));
    let v: serde_json::Value = json_reply("the registration", &b, r)?;
    v["id"].as_u64().ok_or(ManagerCallError::BadReply {
        what: "the registration",
        message: "no agent id".into(),
    })
}

/// Takes agent `id` out of the cluster (its shards go to the others).
pub fn leave(url: &str, id: AgentId) -> Result<(), ManagerCallError> {
    let b = base(url);
    let r = http(Duration::from_secs(5))
        .delete(format!("{b}/v1/agents/{id}"))
        .call();
    match checked("leaving", &b, r) {
        Err(ManagerCallError::Refused { status: 404, .. }) | Ok(_) => Ok(()),
        Err(e) => Err(e),
    }
}

/// `instance`'s cluster map once its version passes `after`, waiting at most `wait`
/// for one.
pub fn fetch_map(
    url: &str,
    instance: &str,
    after: u64,
    wait: Duration,
) -> Result<ClusterMap, ManagerCallError> {
    let b = base(url);
    let r = http(wait + Duration::from_secs(10))
        .get(format!("{b}/v1/map"))
        .query("instance", instance)
        .query("after", after.to_string())
        .query("wait_ms", wait.as_millis().to_string())
        .call();
    json_reply("the map request", &b, r)
}

/// Asks for a region for `instance` (`want`: a specific id). A refusal for want of
/// room is [`ManagerCallError::Refused`] with status 507; an existing id, 409.
pub fn grant_region(
    url: &str,
    instance: &str,
    want: Option<u16>,
) -> Result<RegionGrant, ManagerCallError> {
    let b = base(url);
    let r = http(Duration::from_secs(30))
        .post(format!("{b}/v1/instances/{instance}/regions"))
        .send_json(json!({ "region": want }));
    json_reply("the region request", &b, r)
}

/// Reports that agent `id` vacated draining region `region` under map `version`.
pub fn report_vacated(
    url: &str,
    region: u16,
    id: AgentId,
    version: u64,
) -> Result<(), ManagerCallError> {
    let b = base(url);
    let r = http(Duration::from_secs(5))
        .post(format!("{b}/v1/regions/{region}/vacated"))
        .send_json(json!({ "agent": id, "version": version }));
    checked("the vacate report", &b, r).map(|_| ())
}

/// Sets `instance`'s maxmemory and/or policy (what `CONFIG SET` on an agent of a
/// cluster does).
pub fn resize_instance(
    url: &str,
    instance: &str,
    maxmemory: Option<u64>,
    policy: Option<&str>,
) -> Result<(), ManagerCallError> {
    let b = base(url);
    let r = http(Duration::from_secs(10))
        .put(format!("{b}/v1/instances/{instance}"))
        .send_json(json!({ "maxmemory": maxmemory, "policy": policy }));
    checked("the instance change", &b, r).map(|_| ())
}

/// The manager's answer to a change of an instance's ACL users: whether it stored
/// them, and the users it holds now with their version.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct AclUsers {
    pub applied: bool,
    pub version: u64,
    pub users: String,
}

/// Replaces `instance`'s ACL users (ACL file lines) if they are still at version
/// `base` (what `ACL SETUSER`/`DELUSER` on an agent of a cluster does).
pub fn put_acl(
    url: &str,
    instance: &str,
    version: u64,
    users: &str,
) -> Result<AclUsers, ManagerCallError> {
    let b = base(url);
    let r = http(Duration::from_secs(10))
        .put(format!("{b}/v1/instances/{instance}/acl"))
        .send_json(json!({ "base": version, "users": users }));
    json_reply("the ACL change", &b, r)
}

/// The manager's answer to a change of an instance's function libraries or loaded
/// scripts: whether it stored them, and the list it holds now with its version.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct Listed {
    pub applied: bool,
    pub version: u64,
    pub items: Vec<String>,
}

/// Replaces `instance`'s `what` (`functions`: each library's code; `scripts`: each
/// SCRIPT LOAD body) if still at version `base` (what FUNCTION LOAD/DELETE/FLUSH/
/// RESTORE and SCRIPT LOAD/FLUSH on an agent of a cluster do).
pub fn put_list(
    url: &str,
    instance: &str,
    what: &str,
    version: u64,
    items: &[String],
) -> Result<Listed, ManagerCallError> {
    let b = base(url);
    let r = http(Duration::from_secs(10))
        .put(format!("{b}/v1/instances/{instance}/{what}"))
        .send_json(json!({ "base": version, "items": items }));
    json_reply("the change of the instance's scripts", &b, r)
}

/// Whether agent `id` may write the shards it gained in map `version`: every other
/// agent of its instance applied that map (releasing what it held of them) or lost its
/// lease.
pub fn released(url: &str, id: AgentId, version: u64) -> Result<bool, ManagerCallError> {
    #[derive(serde::Deserialize)]
    struct Released {
        released: bool,
    }
    let b = base(url);
    let r = http(Duration::from_secs(5))
        .get(format!("{b}/v1/agents/{id}/released"))
        .query("version", version.to_string())
        .call();
    json_reply::<Released>("the release query", &b, r).map(|r| r.released)
}

/// Reports that agent `id` applied map `version` (a heartbeat that also acknowledges
/// a map at once, without waiting for the next beat).
/// `dirty`: the chunks of regions being filled the agent wrote since its last report.
pub fn report_applied(
    url: &str,
    id: AgentId,
    version: u64,
    dirty: &[DirtyChunks],
) -> Result<(), ManagerCallError> {
    // One kept-alive connection for every report: a map acknowledgement is on the
    // path of a region's write block (the manager waits for it), so it should cost a
    // request, not a new client and a new connection.
    static AGENT: std::sync::OnceLock<ureq::Agent> = std::sync::OnceLock::new();
    let b = base(url);
    let r = AGENT
        .get_or_init(|| http(Duration::from_secs(5)))
        .post(format!("{b}/v1/agents/{id}/heartbeat"))
        .send_json(json!({ "applied": version, "dirty": dirty }));
    checked("the heartbeat", &b, r).map(|_| ())
}

/// Heartbeats (registering a node first) every `every`, for the life of the process.
pub fn spawn(url: String, who: Registration, every: Duration) -> std::thread::JoinHandle<()> {
    std::thread::Builder::new()
        .name("dmc-membership".into())
        .spawn(move || membership(url, who, every))
        .expect("spawning the membership thread")
}

fn membership(url: String, who: Registration, mut every: Duration) {
    let agent = http(Duration::from_secs(5));
    let base = base(&url);
    let mut registered = matches!(who, Registration::Agent { .. });
    loop {
        if !registered {
            match register_node(&agent, &base, &who) {
                Ok(()) => {
                    tracing::info!(manager = %base, "registered with the cluster manager");
                    registered = true;
                    // Heartbeat at once: its answer names the lease, which may be
                    // shorter than the first interval (a node that slept `every`
                    // first lapsed under a lease of a second or less).
                    continue;
                }
                Err(e) => {
                    tracing::warn!(manager = %base, error = %e, "registering failed; retrying")
                }
            }
        } else {
            let sent = std::time::Instant::now();
            let beat = match &who {
                Registration::Node { id, .. } => agent
                    .post(format!("{base}/v1/nodes/{id}/heartbeat"))
                    .send_empty(),
                Registration::Agent {
                    id,
                    applied,
                    used,
                    regions,
                    nodes,
                    load,
                    ..
                } => {
                    let regions = regions.lock().map(|r| r.clone()).unwrap_or_default();
                    agent
                        .post(format!("{base}/v1/agents/{id}/heartbeat"))
                        .send_json(json!({
                            "applied": applied.load(Ordering::Acquire),
                            "used": used.load(Ordering::Relaxed),
                            "regions": regions,
                            "nodes": (nodes.0)(),
                            "load": (load.0)(),
                        }))
                }
            };
            match beat {
                Ok(mut r) if r.status().is_success() => {
                    match &who {
                        Registration::Agent { renewed, .. } => (renewed.0)(sent),
                        // The manager tells a node its lease: four heartbeats a lease
                        // (at most one a second), so a short lease does not lapse.
                        Registration::Node { .. } => {
                            let lease = r
                                .body_mut()
                                .read_json::<serde_json::Value>()
                                .ok()
                                .and_then(|v| v["lease_ms"].as_u64());
                            if let Some(ms) = lease.filter(|ms| *ms > 0) {
                                every = every.min(Duration::from_millis((ms / 4).max(50)));
                            }
                        }
                    }
                }
                Ok(r) if r.status().as_u16() == 404 => match who {
                    Registration::Node { .. } => {
                        tracing::warn!(manager = %base, "the manager no longer knows this node; registering again");
                        registered = false;
                        continue;
                    }
                    Registration::Agent { id, .. } => {
                        tracing::info!(manager = %base, id, "removed from the cluster; no more heartbeats");
                        return;
                    }
                },
                Ok(r) => tracing::warn!(manager = %base, status = %r.status(), "heartbeat refused"),
                Err(e) => tracing::warn!(manager = %base, error = %e, "heartbeat failed"),
            }
        }
        std::thread::sleep(every);
    }
}

fn register_node(agent: &ureq::Agent, base: &str, who: &Registration) -> Result<(), String> {
    let Registration::Node {
        id,
        endpoint,
        capacity,
    } = who
    else {
        return Ok(());
    };
    let mut r = agent
        .post(format!("{base}/v1/nodes"))
        .send_json(json!({ "id": id, "endpoint": endpoint, "capacity": capacity }))
        .map_err(|e| e.to_string())?;
    if !r.status().is_success() {
        let text = r.body_mut().read_to_string().unwrap_or_default();
        return Err(format!("{}: {text}", r.status()));
    }
    Ok(())
}
