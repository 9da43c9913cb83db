//! REST routes for arrays as a whole: `/api/v1/arrays/{id}`, its cancel and its resubmission.

use super::error::ErrorBody;
use super::ApiError;
use crate::model::batch::{ArrayAck, ArrayView};
use crate::model::{AppError, JobAck};
use crate::server::auth::CurrentUser;
use crate::server::jobs::arrays;
use crate::server::AppState;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use uuid::Uuid;

/// `/api/v1/arrays…`
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/arrays/{id}", get(show))
        .route("/arrays/{id}/cancel", post(cancel))
        .route("/arrays/{id}/resubmit", post(resubmit))
}

fn array_id(text: &str) -> Result<Uuid, AppError> {
    Uuid::parse_str(text)
        .map_err(|_| AppError::invalid("id", format!("`{text}` is not an array id")))
}

/// An array's size, running limit, counts per status and elements.
#[utoipa::path(get, path = "/api/v1/arrays/{id}", tag = "jobs", security(("bearer" = [])), params(("id" = Uuid, Path)), responses((status = 200, body = ArrayView), (status = 404, body = ErrorBody)))]
pub(super) async fn show(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<String>,
) -> Result<Json<ArrayView>, ApiError> {
    Ok(Json(arrays::view(&state.ctx, &user, array_id(&id)?).await?))
}

/// Cancels every element that has not ended (the owner or an admin), in one transaction.
#[utoipa::path(post, path = "/api/v1/arrays/{id}/cancel", tag = "jobs", security(("bearer" = [])), params(("id" = Uuid, Path)), responses((status = 200, body = ArrayAck), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(super) async fn cancel(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<String>,
) -> Result<Json<ArrayAck>, ApiError> {
    Ok(Json(
        arrays::cancel(&state.ctx, &user, array_id(&id)?).await?,
    ))
}

/// Submits the failed and timed-out elements again as a new array (the owner only).
#[utoipa::path(post, path = "/api/v1/arrays/{id}/resubmit", tag = "jobs", security(("bearer" = [])), params(("id" = Uuid, Path)), responses((status = 201, body = JobAck), (status = 400, description = "an element's spec no longer passes; `field` names why", body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, description = "no element failed", body = ErrorBody)))]
pub(super) async fn resubmit(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<String>,
) -> Result<(StatusCode, Json<JobAck>), ApiError> {
    let ack = arrays::resubmit_failed(&state.ctx, &user, array_id(&id)?).await?;
    Ok((StatusCode::CREATED, Json(ack)))
}
