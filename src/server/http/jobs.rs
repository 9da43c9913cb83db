//! REST routes for jobs.

use super::error::ErrorBody;
use super::ApiError;
use crate::model::spec::RawJobSpec;
use crate::model::{AppError, JobAck, JobEventView, JobPage, JobView};
use crate::server::auth::CurrentUser;
use crate::server::jobs::{self, ListQuery};
use crate::server::AppState;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::header;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use uuid::Uuid;

/// `/api/v1/jobs…`
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/jobs", post(submit).get(list))
        .route("/jobs/{id}", get(show))
        .route("/jobs/{id}/cancel", post(cancel))
        .route("/jobs/{id}/resubmit", post(resubmit))
        .route("/jobs/{id}/logs", get(logs))
        .route("/jobs/{id}/events", get(events))
}

/// `GET /api/v1/jobs/{id}/events`: the job's trail, oldest first.
#[utoipa::path(get, path = "/api/v1/jobs/{id}/events", tag = "jobs", security(("bearer" = [])), params(("id" = Uuid, Path)), responses((status = 200, body = [JobEventView]), (status = 403, description = "another member's job: its trail is for its owner, managers and admins", body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(super) async fn events(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<String>,
) -> Result<Json<Vec<JobEventView>>, ApiError> {
    Ok(Json(jobs::events(&state.ctx, &user, job_id(&id)?).await?))
}

/// `POST /api/v1/jobs`: the body is parsed by the spec parser itself, so every refusal names its
/// field (unknown fields, wrong types, sizes).
#[utoipa::path(post, path = "/api/v1/jobs", tag = "jobs", security(("bearer" = [])), request_body = RawJobSpec, responses((status = 201, body = JobAck), (status = 400, description = "invalid input; `field` names it", body = ErrorBody), (status = 401, description = "not signed in", body = ErrorBody)))]
pub(super) async fn submit(
    State(state): State<AppState>,
    user: CurrentUser,
    body: String,
) -> Result<(StatusCode, Json<JobAck>), ApiError> {
    let ack = jobs::submit(&state.ctx, &user, &body).await?;
    Ok((StatusCode::CREATED, Json(ack)))
}

#[utoipa::path(get, path = "/api/v1/jobs", tag = "jobs", security(("bearer" = [])), params(ListQuery), responses((status = 200, body = JobPage), (status = 400, description = "invalid input; `field` names it", body = ErrorBody), (status = 401, description = "not signed in", body = ErrorBody)))]
pub(super) async fn list(
    State(state): State<AppState>,
    user: CurrentUser,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Json<JobPage>, ApiError> {
    let Query(q) = query.map_err(|e| AppError::invalid("query", e.body_text()))?;
    Ok(Json(jobs::list(&state.ctx, &user, &q).await?))
}

#[utoipa::path(get, path = "/api/v1/jobs/{id}", tag = "jobs", security(("bearer" = [])), params(("id" = Uuid, Path)), responses((status = 200, body = JobView), (status = 404, body = ErrorBody)))]
pub(super) async fn show(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<String>,
) -> Result<Json<JobView>, ApiError> {
    Ok(Json(jobs::get(&state.ctx, &user, job_id(&id)?).await?))
}

/// Query of `POST /api/v1/jobs/{id}/resubmit`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(super) struct ResubmitQuery {
    /// `digest`: the new job runs the exact image the old one ran (its `image_digest`), not
    /// whatever its tag names now.
    pub(super) pin: Option<String>,
}

/// Submits a copy of one of the caller's jobs as a new job (through today's rules).
#[utoipa::path(post, path = "/api/v1/jobs/{id}/resubmit", tag = "jobs", security(("bearer" = [])), params(("id" = Uuid, Path), ResubmitQuery), responses((status = 201, body = JobAck), (status = 400, description = "the old spec no longer passes, or `pin=digest` for a job without a registry digest; `field` names why", body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(super) async fn resubmit(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<String>,
    query: Result<Query<ResubmitQuery>, QueryRejection>,
) -> Result<(StatusCode, Json<JobAck>), ApiError> {
    let Query(q) = query.map_err(|e| AppError::invalid("query", e.body_text()))?;
    let pin = match q.pin.as_deref() {
        None => false,
        Some("digest") => true,
        Some(other) => {
            return Err(
                AppError::invalid("pin", format!("`{other}`: the one pin is `digest`")).into(),
            )
        }
    };
    let ack = jobs::resubmit(&state.ctx, &user, job_id(&id)?, pin).await?;
    Ok((StatusCode::CREATED, Json(ack)))
}

#[utoipa::path(post, path = "/api/v1/jobs/{id}/cancel", tag = "jobs", security(("bearer" = [])), params(("id" = Uuid, Path)), responses((status = 200, body = JobAck), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, description = "already ended", body = ErrorBody)))]
pub(super) async fn cancel(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<String>,
) -> Result<Json<JobAck>, ApiError> {
    Ok(Json(jobs::cancel(&state.ctx, &user, job_id(&id)?).await?))
}

pub(super) fn job_id(text: &str) -> Result<Uuid, AppError> {
    Uuid::parse_str(text).map_err(|_| AppError::invalid("id", format!("`{text}` is not a job id")))
}

/// Query of `GET /api/v1/jobs/{id}/logs`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(super) struct LogQuery {
    /// Only the last N lines (at most 10000, and those in the last 4 MiB of the log); without it
    /// the whole log streams.
    pub(super) tail: Option<usize>,
    /// Keep the response open and stream new lines until the job ends.
    pub(super) follow: Option<bool>,
}

/// `GET /api/v1/jobs/{id}/logs`: plain text, one line per output line of the container.
#[utoipa::path(get, path = "/api/v1/jobs/{id}/logs", tag = "jobs", security(("bearer" = [])), params(("id" = Uuid, Path), LogQuery), responses((status = 200, description = "the log as text/plain", content_type = "text/plain", body = String), (status = 400, description = "`tail` is past 10000 lines", body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 429, description = "the caller has 4 log reads in progress already (see Retry-After)", body = ErrorBody), (status = 503, description = "the node serves its most log reads at once (see Retry-After), or the log is on another node that is lost or cannot be reached, or the nodes share no secret", body = ErrorBody)))]
pub(super) async fn logs(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<String>,
    query: Result<Query<LogQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = query.map_err(|e| AppError::invalid("query", e.body_text()))?;
    let id = job_id(&id)?;
    let body = if q.follow.unwrap_or(false) {
        axum::body::Body::from_stream(jobs::logs::follow(&state.ctx, &user, id, q.tail).await?)
    } else {
        axum::body::Body::from_stream(jobs::logs::read(&state.ctx, &user, id, q.tail).await?)
    };
    Ok(([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], body).into_response())
}
