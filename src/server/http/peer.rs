//! `/internal/v1/…`: what one node asks of another, on the UI host and on agents alike. Each
//! request carries a grant signed with the cluster secret instead of a user's credential (see
//! [`crate::server::peers`]).

use super::jobs::{job_id, LogQuery};
use super::ApiError;
use crate::model::AppError;
use crate::server::jobs;
use crate::server::peers::GRANT_HEADER;
use crate::server::AppState;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

/// The routes other nodes call.
pub fn router() -> Router<AppState> {
    Router::new().route("/internal/v1/jobs/{id}/logs", get(log))
}

/// `GET /internal/v1/jobs/{id}/logs`: a log this node holds, for the node a user asked.
async fn log(
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    query: Result<Query<LogQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = query.map_err(|e| AppError::invalid("query", e.body_text()))?;
    let id = job_id(&id)?;
    let grant = headers.get(GRANT_HEADER).and_then(|v| v.to_str().ok());
    let body =
        jobs::logs::for_peer(&state.ctx, id, grant, q.tail, q.follow.unwrap_or(false)).await?;
    Ok((
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        axum::body::Body::from_stream(body),
    )
        .into_response())
}
