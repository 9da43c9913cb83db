//! REST routes for nodes: the list for signed-in users, drain/undrain and forget for admins.

use super::caller::Admin;
use super::error::ErrorBody;
use super::{ApiError, ApiJson};
use crate::model::NodeView;
use crate::server::auth::CurrentUser;
use crate::server::nodes;
use crate::server::AppState;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};
use serde::{Deserialize, Serialize};

/// `/api/v1/nodes…`
pub fn router() -> Router<AppState> {
    Router::new().route("/nodes", get(list_nodes)).route(
        "/nodes/{name}",
        axum::routing::patch(patch_node).delete(forget_node),
    )
}

/// `GET /api/v1/nodes`: every node with its state (`up`, `drained`, `lost`), heartbeat age,
/// version, cards and running jobs.
#[utoipa::path(get, path = "/api/v1/nodes", tag = "nodes", security(("bearer" = [])), responses((status = 200, body = [NodeView]), (status = 401, description = "not signed in", body = ErrorBody)))]
pub(super) async fn list_nodes(
    State(state): State<AppState>,
    _user: CurrentUser,
) -> Result<Json<Vec<NodeView>>, ApiError> {
    Ok(Json(nodes::list(&state.ctx.pool).await?))
}

/// A node's new admin state.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct NodePatch {
    /// `drained` (runs its jobs out, takes no new ones) or `up`.
    state: String,
}

/// `PATCH /api/v1/nodes/{name}`: drains or undrains a node (admins), audited.
#[utoipa::path(patch, path = "/api/v1/nodes/{name}", tag = "nodes", security(("bearer" = [])), params(("name" = String, Path)), request_body = NodePatch, responses((status = 204), (status = 400, description = "invalid input; `field` names it", body = ErrorBody), (status = 401, description = "not signed in", body = ErrorBody), (status = 403, description = "not an admin", body = ErrorBody), (status = 404, description = "no such node", body = ErrorBody)))]
pub(super) async fn patch_node(
    State(state): State<AppState>,
    Admin(user): Admin,
    Path(name): Path<String>,
    ApiJson(body): ApiJson<NodePatch>,
) -> Result<StatusCode, ApiError> {
    nodes::set_state(&state.ctx.pool, &user, &name, &body.state).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// What forgetting a node did.
#[derive(Serialize, utoipa::ToSchema)]
pub(super) struct Forgotten {
    /// The node.
    node: String,
    /// Its jobs that ended `failed` (`node_lost`) and gave their cards back.
    jobs_failed: usize,
}

/// `DELETE /api/v1/nodes/{name}`: forgets a lost node (admins), audited. Its jobs end `failed`
/// with reason `node_lost` and their cards are released; refused while the node heartbeats.
#[utoipa::path(delete, path = "/api/v1/nodes/{name}", tag = "nodes", security(("bearer" = [])), params(("name" = String, Path)), responses((status = 200, body = Forgotten), (status = 401, description = "not signed in", body = ErrorBody), (status = 403, description = "not an admin", body = ErrorBody), (status = 404, description = "no such node", body = ErrorBody), (status = 409, description = "the node is not lost", body = ErrorBody)))]
pub(super) async fn forget_node(
    State(state): State<AppState>,
    Admin(user): Admin,
    Path(name): Path<String>,
) -> Result<Json<Forgotten>, ApiError> {
    let jobs_failed = nodes::forget(&state.ctx.pool, &user, &name).await?;
    Ok(Json(Forgotten {
        node: name,
        jobs_failed,
    }))
}
