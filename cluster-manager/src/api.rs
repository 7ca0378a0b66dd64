//! The HTTP admin API (JSON), the same verbs as the CLI:
//!
//! | method and path | does |
//! |---|---|
//! | `GET /v1/status` | nodes, agents (alive, shards), instances, capacity |
//! | `GET /v1/slots?instance=I` | every shard of instance `I` (`default`): slot range, primary, epoch |
//! | `POST /v1/nodes` `{id, endpoint, capacity}` | add a memory node |
//! | `DELETE /v1/nodes/{id}` | remove it |
//! | `POST /v1/nodes/{id}/heartbeat` | renew a node's lease |
//! | `POST /v1/nodes/{id}/drain` `{rate?}` | move every region copy off the node (primaries to backups, copies filled elsewhere) |
//! | `POST /v1/agents` `{listen, instance?}` | register an agent of an instance (`default`): `{id}`; its shards are rebalanced |
//! | `DELETE /v1/agents/{id}` | remove it; its shards go to the others |
//! | `GET /v1/agents/{id}/released?version=V` | `{released}`: whether the agent may write the shards it gained in map `V` (every other agent of its instance, and every one removed from it, applied `V` or has been silent 1.5 leases) |
//! | `POST /v1/agents/{id}/heartbeat` `{applied, dirty}`? | renew an agent's lease; `applied`: the map version it follows; `dirty`: chunks of regions being filled it wrote |
//! | `POST /v1/agents/scale` `{count, instance?}` | start or stop an instance's agents until `count` run |
//! | `GET /v1/instances` | instances: maxmemory, policy, allocated and used bytes |
//! | `POST /v1/instances` `{name, maxmemory, policy}` | create one (it reserves its superblock region) |
//! | `PUT /v1/instances/{name}` `{maxmemory?, policy?}` | resize it / change its policy |
//! | `POST /v1/instances/{name}/regions` `{region?}` | grant it a region (agents call this as the pool fills) |
//! | `GET /v1/instances/{name}/acl` | its ACL users (ACL file lines) and their version |
//! | `PUT /v1/instances/{name}/acl` `{base, users}` | replace them if still at version `base` (agents' ACL SETUSER/DELUSER) |
//! | `GET /v1/instances/{name}/functions` | its function libraries (each one's code) and their version |
//! | `PUT /v1/instances/{name}/functions` `{base, items}` | replace them if still at version `base` (agents' FUNCTION LOAD/DELETE/FLUSH/RESTORE) |
//! | `GET /v1/instances/{name}/scripts` | its SCRIPT LOAD scripts (each one's body) and their version |
//! | `PUT /v1/instances/{name}/scripts` `{base, items}` | replace them if still at version `base` (agents' SCRIPT LOAD/FLUSH) |
//! | `GET /v1/regions` | every granted region and where its copies are |
//! | `POST /v1/regions/{id}/migrate` `{to}` | move the region's primary role to node `to`, which holds a backup (copy-free; writes to it wait while the roles swap) |
//! | `POST /v1/regions/{id}/copies` `{node, rate?}` | fill a new copy of the region on `node` while it serves, at `rate` bytes/s |
//! | `POST /v1/regions/{id}/vacated` `{agent, version}` | an agent moved its data out of a draining region |
//! | `GET /v1/map?instance=I&after=V&wait_ms=T` | instance `I`'s cluster map, once its version passes `V` (long poll, at most `T` ms) |

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post, put};
use axum::{Json, Router};
use dmc_proto::ByteSize;
use serde::{Deserialize, Serialize};

use crate::launcher::Launcher;
use crate::manager::{Kept, Manager, ManagerError, Member};
use crate::metrics;
use crate::scale::{ScaleTimes, scale};

#[derive(Deserialize)]
struct ReleasedQuery {
    version: u64,
}

/// What the handlers share.
pub struct App {
    pub manager: Arc<Manager>,
    pub launcher: Arc<dyn Launcher>,
    pub times: ScaleTimes,
    /// One rescale at a time.
    pub scaling: tokio::sync::Mutex<()>,
    /// Renders the process's metrics for `GET /metrics`.
    pub metrics: dmc_process::metrics::PrometheusHandle,
    /// Bytes a second a new region copy is filled at (0: unbounded).
    pub fill_rate: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ScaleRequest {
    pub count: usize,
    #[serde(default = "crate::state::default_instance")]
    pub instance: String,
}

/// `?instance=NAME`, the default instance when absent.
#[derive(Debug, Clone, Deserialize)]
pub struct InstanceQuery {
    #[serde(default = "crate::state::default_instance")]
    pub instance: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Heartbeat {
    /// The cluster map version the agent follows.
    pub applied: Option<u64>,
    /// Live bytes of its instance's pool, as the agent sees them.
    pub used: Option<u64>,
    /// Bytes of the agent's blocks per region, `(region, bytes)`.
    #[serde(default)]
    pub regions: Vec<(u16, u64)>,
    /// Chunks of regions being filled the agent wrote since its last report.
    #[serde(default)]
    pub dirty: Vec<dmc_proto::cluster::DirtyChunks>,
    /// The memory nodes the agent's pool can reach.
    #[serde(default)]
    pub nodes: Option<Vec<u32>>,
    /// The latency the agent saw per memory node and per region since its last
    /// heartbeat (the load balancer's input).
    #[serde(default)]
    pub load: Option<crate::manager::AgentLoad>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct MigrateRequest {
    pub to: u32,
}

#[derive(Debug, Clone, Deserialize)]
pub struct FillRequest {
    pub node: u32,
    /// Copy rate in bytes a second (absent: the manager's `fill-rate`).
    #[serde(default)]
    pub rate: Option<u64>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct GrantRequest {
    /// A specific region id (the superblock's); the next free one if absent.
    pub region: Option<u16>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Vacated {
    pub agent: u64,
    /// The map version the agent followed while vacating.
    pub version: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CreateInstance {
    pub name: String,
    pub maxmemory: ByteSize,
    #[serde(default = "noeviction")]
    pub policy: String,
    /// Backup agents per shard.
    #[serde(default)]
    pub backups: u32,
}

fn noeviction() -> String {
    "noeviction".into()
}

/// `PUT /v1/instances/{name}/acl`: the instance's users (ACL file lines), based on
/// users of version `base`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PutAcl {
    pub base: u64,
    pub users: String,
}

/// `PUT /v1/instances/{name}/functions` or `.../scripts`: the instance's libraries or
/// loaded scripts, based on version `base`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PutList {
    pub base: u64,
    pub items: Vec<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ResizeInstance {
    pub maxmemory: Option<ByteSize>,
    pub policy: Option<String>,
    #[serde(default)]
    pub backups: Option<u32>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct MapQuery {
    #[serde(default = "crate::state::default_instance")]
    pub instance: String,
    #[serde(default)]
    pub after: u64,
    #[serde(default)]
    pub wait_ms: u64,
}

/// The longest a map long poll is held open.
const MAX_WAIT: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AddNode {
    pub id: u32,
    pub endpoint: String,
    pub capacity: ByteSize,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RegisterAgent {
    pub listen: String,
    /// Its TLS client port, if any.
    #[serde(default)]
    pub tls_listen: Option<String>,
    #[serde(default = "crate::state::default_instance")]
    pub instance: String,
    /// The client id its pool presents to memory nodes (revoked on failover).
    #[serde(default)]
    pub client: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Registered {
    pub id: u64,
}

/// An error as the API reports it: `{"error": "..."}` with a fitting status.
struct ApiError(ManagerError);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = match self.0 {
            ManagerError::NotFound(_) => StatusCode::NOT_FOUND,
            ManagerError::Invalid(_) => StatusCode::BAD_REQUEST,
            ManagerError::Exists(_) => StatusCode::CONFLICT,
            ManagerError::Full(_) => StatusCode::INSUFFICIENT_STORAGE,
            ManagerError::Node { .. } => StatusCode::BAD_GATEWAY,
            ManagerError::State(_) => StatusCode::INTERNAL_SERVER_ERROR,
        };
        (
            code,
            Json(serde_json::json!({ "error": self.0.to_string() })),
        )
            .into_response()
    }
}

impl From<ManagerError> for ApiError {
    fn from(e: ManagerError) -> Self {
        ApiError(e)
    }
}

type Shared = State<Arc<App>>;

/// Refuses every request that does not carry the cluster secret as a bearer token
/// (401, nothing changed). With no secret installed (tests of the library alone)
/// every request passes.
async fn require_secret(
    headers: axum::http::HeaderMap,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let Some(secret) = dmc_process::secret::installed() else {
        return next.run(request).await;
    };
    let presented = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "));
    if presented.is_some_and(|p| secret.matches(p)) {
        return next.run(request).await;
    }
    (
        StatusCode::UNAUTHORIZED,
        Json(serde_json::json!({
            "error": "this cluster manager requires the cluster secret (secret-file or DMC_CLUSTER_SECRET)"
        })),
    )
        .into_response()
}

pub fn router(app: Arc<App>) -> Router {
    Router::new()
        .route(
            "/metrics",
            get(|State(app): Shared| async move {
                metrics::collect(&app.manager);
                (
                    [(axum::http::header::CONTENT_TYPE, "text/plain; version=0.0.4")],
                    app.metrics.render(),
                )
            }),
        )
        .route(
            "/v1/status",
            get(|State(app): Shared| async move { Json(app.manager.status()) }),
        )
        .route(
            "/v1/slots",
            get(
                |State(app): Shared, Query(q): Query<InstanceQuery>| async move {
                    Ok::<_, ApiError>(Json(app.manager.slots(&q.instance)?))
                },
            ),
        )
        .route(
            "/v1/nodes",
            post(|State(app): Shared, Json(n): Json<AddNode>| async move {
                app.manager.add_node(n.id, n.endpoint, n.capacity)?;
                Ok::<_, ApiError>(StatusCode::NO_CONTENT)
            }),
        )
        .route(
            "/v1/nodes/{id}",
            delete(|State(app): Shared, Path(id): Path<u32>| async move {
                app.manager.remove_node(id)?;
                Ok::<_, ApiError>(StatusCode::NO_CONTENT)
            }),
        )
        .route(
            "/v1/nodes/{id}/drain",
            post(
                |State(app): Shared, Path(id): Path<u32>, body: Bytes| async move {
                    let rate = serde_json::from_slice::<serde_json::Value>(&body)
                        .ok()
                        .and_then(|v| v["rate"].as_u64())
                        .unwrap_or(app.fill_rate);
                    Ok::<_, ApiError>(Json(app.manager.drain_node(id, rate).await?))
                },
            ),
        )
        .route(
            "/v1/nodes/{id}/heartbeat",
            post(|State(app): Shared, Path(id): Path<u32>| async move {
                metrics::heartbeat();
                app.manager.heartbeat(Member::Node(id))?;
                // The lease, so the node heartbeats often enough for it.
                Ok::<_, ApiError>(Json(serde_json::json!({
                    "lease_ms": app.manager.lease().as_millis() as u64
                })))
            }),
        )
        .route(
            "/v1/agents",
            post(
                |State(app): Shared, Json(a): Json<RegisterAgent>| async move {
                    let id = app.manager.register_agent_with_tls(a.listen, a.tls_listen, &a.instance, a.client)?;
                    Ok::<_, ApiError>(Json(Registered { id }))
                },
            ),
        )
        .route(
            "/v1/agents/{id}",
            delete(|State(app): Shared, Path(id): Path<u64>| async move {
                app.manager.remove_agent(id)?;
                Ok::<_, ApiError>(StatusCode::NO_CONTENT)
            }),
        )
        .route(
            "/v1/agents/{id}/released",
            get(
                |State(app): Shared, Path(id): Path<u64>, Query(q): Query<ReleasedQuery>| async move {
                    Json(serde_json::json!({ "released": app.manager.released(id, q.version) }))
                },
            ),
        )
        .route(
            "/v1/agents/{id}/heartbeat",
            post(
                |State(app): Shared, Path(id): Path<u64>, body: Bytes| async move {
                    metrics::heartbeat();
                    let beat: Heartbeat = if body.is_empty() {
                        Heartbeat::default()
                    } else {
                        serde_json::from_slice(&body)
                            .map_err(|e| ApiError(ManagerError::Invalid(e.to_string())))?
                    };
                    // The chunks first: a fill that sees this version applied must
                    // have them.
                    app.manager.report_dirty(beat.dirty);
                    match beat.applied {
                        Some(v) => app.manager.applied(id, v)?,
                        None => app.manager.heartbeat(Member::Agent(id))?,
                    }
                    if let (Some(used), Some(instance)) = (beat.used, app.manager.instance_of(id)) {
                        app.manager.report_used(&instance, used);
                    }
                    if beat.applied.is_some() {
                        app.manager.report_regions(id, beat.regions);
                    }
                    if let Some(nodes) = beat.nodes {
                        app.manager.report_nodes(id, nodes);
                    }
                    if let Some(load) = beat.load {
                        app.manager.report_load(load);
                    }
                    Ok::<_, ApiError>(StatusCode::NO_CONTENT)
                },
            ),
        )
        .route(
            "/v1/agents/scale",
            post(
                |State(app): Shared, Json(r): Json<ScaleRequest>| async move {
                    let _one = app.scaling.lock().await;
                    let started = std::time::Instant::now();
                    let report = scale(
                        &app.manager,
                        app.launcher.as_ref(),
                        &r.instance,
                        r.count,
                        app.times,
                    )
                    .await;
                    metrics::scaled(report.is_ok(), started.elapsed());
                    Ok::<_, ApiError>(Json(report?))
                },
            ),
        )
        .route(
            "/v1/instances",
            get(|State(app): Shared| async move { Json(app.manager.instances()) }).post(
                |State(app): Shared, Json(c): Json<CreateInstance>| async move {
                    if dmc_proto::policy::RedisPolicy::parse(&c.policy).is_none() {
                        return Err(ApiError(ManagerError::Invalid(format!(
                            "{:?} is not a maxmemory-policy",
                            c.policy
                        ))));
                    }
                    let inst = app
                        .manager
                        .create_instance(&c.name, c.maxmemory, &c.policy, c.backups)
                        .await?;
                    Ok::<_, ApiError>((StatusCode::CREATED, Json(inst)))
                },
            ),
        )
        .route(
            "/v1/instances/{name}",
            put(
                |State(app): Shared, Path(name): Path<String>, Json(r): Json<ResizeInstance>| async move {
                    if let Some(p) = &r.policy
                        && dmc_proto::policy::RedisPolicy::parse(p).is_none()
                    {
                        return Err(ApiError(ManagerError::Invalid(format!(
                            "{p:?} is not a maxmemory-policy"
                        ))));
                    }
                    let inst = app.manager.resize_instance(&name, r)?;
                    Ok::<_, ApiError>(Json(inst))
                },
            ),
        )
        .route(
            "/v1/instances/{name}/acl",
            get(|State(app): Shared, Path(name): Path<String>| async move {
                Ok::<_, ApiError>(Json(app.manager.acl(&name)?))
            })
            .put(
                |State(app): Shared, Path(name): Path<String>, Json(a): Json<PutAcl>| async move {
                    Ok::<_, ApiError>(Json(app.manager.set_acl(&name, a.base, a.users)?))
                },
            ),
        )
        .route(
            "/v1/instances/{name}/functions",
            get(|State(app): Shared, Path(name): Path<String>| async move {
                Ok::<_, ApiError>(Json(app.manager.list(&name, Kept::Functions)?))
            })
            .put(
                |State(app): Shared, Path(name): Path<String>, Json(f): Json<PutList>| async move {
                    let listed = app.manager.set_list(&name, Kept::Functions, f.base, f.items)?;
                    Ok::<_, ApiError>(Json(listed))
                },
            ),
        )
        .route(
            "/v1/instances/{name}/scripts",
            get(|State(app): Shared, Path(name): Path<String>| async move {
                Ok::<_, ApiError>(Json(app.manager.list(&name, Kept::Scripts)?))
            })
            .put(
                |State(app): Shared, Path(name): Path<String>, Json(f): Json<PutList>| async move {
                    let listed = app.manager.set_list(&name, Kept::Scripts, f.base, f.items)?;
                    Ok::<_, ApiError>(Json(listed))
                },
            ),
        )
        .route(
            "/v1/instances/{name}/regions",
            post(
                |State(app): Shared, Path(name): Path<String>, Json(g): Json<GrantRequest>| async move {
                    let grant = app.manager.grant_region(&name, g.region).await;
                    metrics::region_request(grant.is_ok());
                    Ok::<_, ApiError>(Json(grant?))
                },
            ),
        )
        .route(
            "/v1/regions",
            get(|State(app): Shared| async move { Json(app.manager.regions()) }),
        )
        .route(
            "/v1/regions/{id}/migrate",
            post(
                |State(app): Shared, Path(id): Path<u16>, Json(r): Json<MigrateRequest>| async move {
                    Ok::<_, ApiError>(Json(app.manager.migrate_region(id, r.to).await?))
                },
            ),
        )
        .route(
            "/v1/regions/{id}/copies",
            post(
                |State(app): Shared, Path(id): Path<u16>, Json(r): Json<FillRequest>| async move {
                    let rate = r.rate.unwrap_or(app.fill_rate);
                    Ok::<_, ApiError>(Json(app.manager.fill_copy(id, r.node, rate).await?))
                },
            ),
        )
        .route(
            "/v1/regions/{id}/vacated",
            post(
                |State(app): Shared, Path(id): Path<u16>, Json(v): Json<Vacated>| async move {
                    app.manager.vacated(id, v.agent, v.version)?;
                    Ok::<_, ApiError>(StatusCode::NO_CONTENT)
                },
            ),
        )
        .route(
            "/v1/map",
            get(|State(app): Shared, Query(q): Query<MapQuery>| async move {
                let wait = Duration::from_millis(q.wait_ms).min(MAX_WAIT);
                Ok::<_, ApiError>(Json(app.manager.wait_map(&q.instance, q.after, wait).await?))
            }),
        )
        .layer(axum::middleware::from_fn(require_secret))
        .with_state(app)
}
