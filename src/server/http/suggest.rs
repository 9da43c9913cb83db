//! REST routes of the learning manifest: the observed peaks and suggested needs, and applying one.

use super::caller::Admin;
use super::error::ErrorBody;
use super::{ApiError, ApiJson};
use crate::model::{ManifestSuggestions, WorkloadView};
use crate::server::auth::CurrentUser;
use crate::server::manifest::suggest;
use crate::server::AppState;
use axum::extract::State;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;

/// `/api/v1/manifest/suggestions…`
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/manifest/suggestions", get(list))
        .route("/manifest/suggestions/apply", post(apply))
}

/// The observed peaks of finished jobs per workload type × GPU model (and per image for jobs
/// declared with a raw `min_vram_mb`), with the suggested need: p95 plus 10 %, rounded up to a
/// multiple of 256 MiB, from at least 3 records. Readable by everyone signed in, like the manifest.
#[utoipa::path(get, path = "/api/v1/manifest/suggestions", tag = "manifest", security(("bearer" = [])), responses((status = 200, body = ManifestSuggestions), (status = 401, description = "not signed in", body = ErrorBody)))]
pub(super) async fn list(
    State(state): State<AppState>,
    _user: CurrentUser,
) -> Result<Json<ManifestSuggestions>, ApiError> {
    Ok(Json(suggest::suggestions(&state.ctx.pool).await?))
}

/// Body of `POST /api/v1/manifest/suggestions/apply`.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct ApplySuggestion {
    /// The workload type to change.
    workload: String,
    /// The GPU model whose need becomes the suggestion.
    gpu_model: String,
}

/// Sets a workload type's need on one model to the suggestion computed now (admins). It is an
/// ordinary manifest edit: audited as `manifest.put`, and it decides the next pass.
#[utoipa::path(post, path = "/api/v1/manifest/suggestions/apply", tag = "manifest", security(("bearer" = [])), request_body = ApplySuggestion, responses((status = 200, description = "the workload type as it is now", body = WorkloadView), (status = 400, description = "no suggestion for that pair; `field` names it", body = ErrorBody), (status = 401, description = "not signed in", body = ErrorBody), (status = 403, description = "not an admin", body = ErrorBody), (status = 404, description = "no such workload type", body = ErrorBody)))]
pub(super) async fn apply(
    State(state): State<AppState>,
    Admin(user): Admin,
    ApiJson(body): ApiJson<ApplySuggestion>,
) -> Result<Json<WorkloadView>, ApiError> {
    Ok(Json(
        suggest::apply(&state.ctx.pool, &user, &body.workload, &body.gpu_model).await?,
    ))
}
