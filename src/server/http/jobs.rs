//! REST routes for jobs.

use super::error::ErrorBody;
use super::ApiError;
use crate::model::spec::RawJobSpec;
use crate::model::{AppError, JobAck, JobPage, JobView};
use crate::server::auth::CurrentUser;
use crate::server::jobs::{self, ListQuery};
use crate::server::AppState;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use uuid::Uuid;

/// `/api/v1/jobs…`
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/jobs", post(submit).get(list))
        .route("/jobs/{id}", get(show))
        .route("/jobs/{id}/cancel", post(cancel))
}

/// `POST /api/v1/jobs`: the body is parsed by the spec parser itself, so every refusal names its
/// field (unknown fields, wrong types, sizes).
#[utoipa::path(post, path = "/api/v1/jobs", tag = "jobs", security(("bearer" = [])), request_body = RawJobSpec, responses((status = 201, body = JobAck), (status = 400, description = "invalid input; `field` names it", body = ErrorBody), (status = 401, description = "not signed in", body = ErrorBody)))]
pub(super) async fn submit(
    State(state): State<AppState>,
    user: CurrentUser,
    body: String,
) -> Result<(StatusCode, Json<JobAck>), ApiError> {
    let ack = jobs::submit(&state, &user, &body).await?;
    Ok((StatusCode::CREATED, Json(ack)))
}

#[utoipa::path(get, path = "/api/v1/jobs", tag = "jobs", security(("bearer" = [])), params(ListQuery), responses((status = 200, body = JobPage), (status = 400, description = "invalid input; `field` names it", body = ErrorBody), (status = 401, description = "not signed in", body = ErrorBody)))]
pub(super) async fn list(
    State(state): State<AppState>,
    user: CurrentUser,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Json<JobPage>, ApiError> {
    let Query(q) = query.map_err(|e| AppError::invalid("query", e.body_text()))?;
    Ok(Json(jobs::list(&state, &user, &q).await?))
}

#[utoipa::path(get, path = "/api/v1/jobs/{id}", tag = "jobs", security(("bearer" = [])), params(("id" = Uuid, Path)), responses((status = 200, body = JobView), (status = 404, body = ErrorBody)))]
pub(super) async fn show(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<String>,
) -> Result<Json<JobView>, ApiError> {
    Ok(Json(jobs::get(&state, &user, job_id(&id)?).await?))
}

#[utoipa::path(post, path = "/api/v1/jobs/{id}/cancel", tag = "jobs", security(("bearer" = [])), params(("id" = Uuid, Path)), responses((status = 200, body = JobAck), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, description = "already ended", body = ErrorBody)))]
pub(super) async fn cancel(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<String>,
) -> Result<Json<JobAck>, ApiError> {
    Ok(Json(jobs::cancel(&state, &user, job_id(&id)?).await?))
}

fn job_id(text: &str) -> Result<Uuid, AppError> {
    Uuid::parse_str(text).map_err(|_| AppError::invalid("id", format!("`{text}` is not a job id")))
}
