//! REST routes for cards, the manifest and the launch policy.

use super::caller::Admin;
use super::error::ErrorBody;
use super::{ApiError, ApiJson};
use crate::model::{
    parse_gpu_id, AppError, GpuList, LaunchPolicy, ManifestState, ManifestView, WorkloadView,
};
use crate::server::admin;
use crate::server::auth::CurrentUser;
use crate::server::cards;
use crate::server::manifest::{self, WorkloadPut};
use crate::server::AppState;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, patch, post, put};
use axum::{Json, Router};
use serde::Deserialize;
use std::collections::BTreeMap;
use uuid::Uuid;

/// `/api/v1/gpus…`, `/api/v1/manifest…`, `/api/v1/settings…`
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/gpus", get(list_gpus))
        .route("/gpus/{uuid}", patch(patch_gpu))
        .route("/gpus/{uuid}/sim", put(put_sim))
        .route("/manifest", get(get_manifest))
        .route("/manifest/history", get(manifest_history))
        .route(
            "/manifest/{workload}",
            put(put_workload).delete(delete_workload),
        )
        .route("/manifest/{workload}/rename", post(rename_workload))
        .route("/settings/launch-policy", get(get_policy).put(put_policy))
}

#[utoipa::path(get, path = "/api/v1/gpus", tag = "gpus", security(("bearer" = [])), responses((status = 200, body = GpuList)))]
pub(super) async fn list_gpus(
    State(state): State<AppState>,
    _user: CurrentUser,
) -> Result<Json<GpuList>, ApiError> {
    Ok(Json(GpuList {
        gpus: cards::list(&state.ctx).await?,
        skipped: cards::skipped(&state.ctx).await?,
    }))
}

fn card_id(text: &str) -> Result<Uuid, AppError> {
    parse_gpu_id(text)
        .ok_or_else(|| AppError::invalid("uuid", format!("`{text}` is not a card id (GPU-…)")))
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct SimPut {
    /// Memory foreign processes hold on the card, MiB.
    external_mib: Option<i64>,
    /// What jobs holding the card use on it, MiB per job id (each must hold the card now).
    job_used_mib: Option<BTreeMap<Uuid, i64>>,
}

#[utoipa::path(put, path = "/api/v1/gpus/{uuid}/sim", tag = "gpus", security(("bearer" = [])), params(("uuid" = String, Path, description = "GPU-…")), request_body = SimPut, responses((status = 204), (status = 400, description = "invalid input; `field` names it", body = ErrorBody), (status = 401, description = "not signed in", body = ErrorBody), (status = 409, description = "not a simulated card", body = ErrorBody)))]
pub(super) async fn put_sim(
    State(state): State<AppState>,
    Admin(user): Admin,
    Path(uuid): Path<String>,
    ApiJson(body): ApiJson<SimPut>,
) -> Result<StatusCode, ApiError> {
    let card = card_id(&uuid)?;
    if body.external_mib.is_none() && body.job_used_mib.is_none() {
        return Err(
            AppError::invalid("external_mib", "give external_mib, job_used_mib or both").into(),
        );
    }
    if let Some(jobs) = &body.job_used_mib {
        cards::set_sim_job_usage(&state.ctx, &user, card, jobs).await?;
    }
    if let Some(external) = body.external_mib {
        cards::set_sim_external(&state.ctx, &user, card, external).await?;
    }
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct GpuPatch {
    state: String,
}

#[utoipa::path(patch, path = "/api/v1/gpus/{uuid}", tag = "gpus", security(("bearer" = [])), params(("uuid" = String, Path, description = "GPU-…")), request_body = GpuPatch, responses((status = 204), (status = 400, description = "invalid input; `field` names it", body = ErrorBody), (status = 401, description = "not signed in", body = ErrorBody)))]
pub(super) async fn patch_gpu(
    State(state): State<AppState>,
    Admin(user): Admin,
    Path(uuid): Path<String>,
    ApiJson(body): ApiJson<GpuPatch>,
) -> Result<StatusCode, ApiError> {
    cards::set_state(&state.ctx, &user, card_id(&uuid)?, &body.state).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(get, path = "/api/v1/manifest", tag = "manifest", security(("bearer" = [])), responses((status = 200, body = ManifestView)))]
pub(super) async fn get_manifest(
    State(state): State<AppState>,
    _user: CurrentUser,
) -> Result<Json<ManifestView>, ApiError> {
    Ok(Json(manifest::view(&state.ctx.pool).await?))
}

#[utoipa::path(put, path = "/api/v1/manifest/{workload}", tag = "manifest", security(("bearer" = [])), params(("workload" = String, Path)), request_body = WorkloadPut, responses((status = 200, body = WorkloadView), (status = 400, description = "invalid input; `field` names it", body = ErrorBody), (status = 401, description = "not signed in", body = ErrorBody), (status = 403, body = ErrorBody)))]
pub(super) async fn put_workload(
    State(state): State<AppState>,
    Admin(user): Admin,
    Path(name): Path<String>,
    ApiJson(body): ApiJson<WorkloadPut>,
) -> Result<Json<WorkloadView>, ApiError> {
    Ok(Json(
        manifest::put(&state.ctx.pool, &user, &name, &body).await?,
    ))
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct WorkloadRename {
    /// The new name.
    to: String,
}

#[utoipa::path(post, path = "/api/v1/manifest/{workload}/rename", tag = "manifest", security(("bearer" = [])), params(("workload" = String, Path)), request_body = WorkloadRename, responses((status = 200, body = WorkloadView), (status = 400, description = "invalid input; `field` names it", body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, description = "the new name is taken", body = ErrorBody)))]
pub(super) async fn rename_workload(
    State(state): State<AppState>,
    Admin(user): Admin,
    Path(name): Path<String>,
    ApiJson(body): ApiJson<WorkloadRename>,
) -> Result<Json<WorkloadView>, ApiError> {
    Ok(Json(
        admin::rename_workload(&state.ctx, &user, &name, &body.to).await?,
    ))
}

/// The manifest with its edit history (newest first) and when the last admission pass ran: an
/// edit whose time is before `last_pass_at` has been applied.
#[utoipa::path(get, path = "/api/v1/manifest/history", tag = "manifest", security(("bearer" = [])), responses((status = 200, body = ManifestState), (status = 401, body = ErrorBody)))]
pub(super) async fn manifest_history(
    State(state): State<AppState>,
    _user: CurrentUser,
) -> Result<Json<ManifestState>, ApiError> {
    Ok(Json(admin::manifest_state(&state.ctx).await?))
}

#[utoipa::path(delete, path = "/api/v1/manifest/{workload}", tag = "manifest", security(("bearer" = [])), params(("workload" = String, Path)), responses((status = 204), (status = 404, body = ErrorBody)))]
pub(super) async fn delete_workload(
    State(state): State<AppState>,
    Admin(user): Admin,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    manifest::delete(&state.ctx.pool, &user, &name).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(get, path = "/api/v1/settings/launch-policy", tag = "settings", security(("bearer" = [])), responses((status = 200, body = LaunchPolicy)))]
pub(super) async fn get_policy(
    State(state): State<AppState>,
    _user: CurrentUser,
) -> Result<Json<LaunchPolicy>, ApiError> {
    Ok(Json(admin::launch_policy(&state.ctx).await?))
}

#[utoipa::path(put, path = "/api/v1/settings/launch-policy", tag = "settings", security(("bearer" = [])), request_body = LaunchPolicy, responses((status = 200, body = LaunchPolicy), (status = 400, description = "invalid input; `field` names it", body = ErrorBody), (status = 401, description = "not signed in", body = ErrorBody), (status = 403, body = ErrorBody)))]
pub(super) async fn put_policy(
    State(state): State<AppState>,
    Admin(user): Admin,
    ApiJson(policy): ApiJson<LaunchPolicy>,
) -> Result<Json<LaunchPolicy>, ApiError> {
    Ok(Json(admin::save_policy(&state.ctx, &user, &policy).await?))
}
