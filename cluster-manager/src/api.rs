//! The HTTP admin API (JSON), the same verbs as the CLI:
//!
//! | method and path | does |
//! |---|---|
//! | `GET /v1/status` | nodes, agents (alive, shards), capacity |
//! | `GET /v1/slots` | every shard: slot range, primary, epoch |
//! | `POST /v1/nodes` `{id, endpoint, capacity}` | add a memory node |
//! | `DELETE /v1/nodes/{id}` | remove it |
//! | `POST /v1/nodes/{id}/heartbeat` | renew a node's lease |
//! | `POST /v1/agents` `{listen}` | register an agent: `{id}`; shards are rebalanced |
//! | `DELETE /v1/agents/{id}` | remove it; its shards go to the others |
//! | `POST /v1/agents/{id}/heartbeat` | renew an agent's lease |

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use dmc_proto::ByteSize;
use serde::{Deserialize, Serialize};

use crate::manager::{Manager, ManagerError, Member};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AddNode {
    pub id: u32,
    pub endpoint: String,
    pub capacity: ByteSize,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RegisterAgent {
    pub listen: String,
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

type Shared = State<Arc<Manager>>;

pub fn router(manager: Arc<Manager>) -> Router {
    Router::new()
        .route(
            "/v1/status",
            get(|State(m): Shared| async move { Json(m.status()) }),
        )
        .route(
            "/v1/slots",
            get(|State(m): Shared| async move { Json(m.slots()) }),
        )
        .route(
            "/v1/nodes",
            post(|State(m): Shared, Json(n): Json<AddNode>| async move {
                m.add_node(n.id, n.endpoint, n.capacity)?;
                Ok::<_, ApiError>(StatusCode::NO_CONTENT)
            }),
        )
        .route(
            "/v1/nodes/{id}",
            delete(|State(m): Shared, Path(id): Path<u32>| async move {
                m.remove_node(id)?;
                Ok::<_, ApiError>(StatusCode::NO_CONTENT)
            }),
        )
        .route(
            "/v1/nodes/{id}/heartbeat",
            post(|State(m): Shared, Path(id): Path<u32>| async move {
                m.heartbeat(Member::Node(id))?;
                Ok::<_, ApiError>(StatusCode::NO_CONTENT)
            }),
        )
        .route(
            "/v1/agents",
            post(
                |State(m): Shared, Json(a): Json<RegisterAgent>| async move {
                    let id = m.register_agent(a.listen)?;
                    Ok::<_, ApiError>(Json(Registered { id }))
                },
            ),
        )
        .route(
            "/v1/agents/{id}",
            delete(|State(m): Shared, Path(id): Path<u64>| async move {
                m.remove_agent(id)?;
                Ok::<_, ApiError>(StatusCode::NO_CONTENT)
            }),
        )
        .route(
            "/v1/agents/{id}/heartbeat",
            post(|State(m): Shared, Path(id): Path<u64>| async move {
                m.heartbeat(Member::Agent(id))?;
                Ok::<_, ApiError>(StatusCode::NO_CONTENT)
            }),
        )
        .with_state(manager)
}
