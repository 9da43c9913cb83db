//! REST routes for usage: the report as JSON and the CSV exports (managers and admins).

use super::caller::Manager;
use super::error::ErrorBody;
use super::ApiError;
use crate::model::{AppError, UsageReport};
use crate::server::error::OrInternal;
use crate::server::usage::{self, csv, Range};
use crate::server::AppState;
use axum::body::Body;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use chrono::Utc;
use serde::Deserialize;

/// `/api/v1/usage…`
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/usage", get(report))
        .route("/usage/samples.csv", get(samples_csv))
        .route("/usage/jobs.csv", get(jobs_csv))
}

/// The range of a usage request.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(super) struct RangeQuery {
    /// Start: RFC 3339, `2025-01-31T08:00` (UTC), or relative to now (`-6h`, `-7d`). Default: 24 h
    /// before `to`.
    from: Option<String>,
    /// End: the same forms, or `now` (the default).
    to: Option<String>,
}

impl RangeQuery {
    fn read(query: Result<Query<RangeQuery>, QueryRejection>) -> Result<RangeQuery, AppError> {
        query
            .map(|Query(q)| q)
            .map_err(|e| AppError::invalid("query", e.body_text()))
    }

    async fn range(&self, state: &AppState) -> Result<Range, AppError> {
        let sampling = usage::sampling(&state.ctx.pool)
            .await
            .or_internal("reading the sampling settings")?;
        Range::parse(
            self.from.as_deref().unwrap_or(""),
            self.to.as_deref().unwrap_or(""),
            Utc::now(),
            sampling.retention_chrono(),
        )
    }
}

#[utoipa::path(get, path = "/api/v1/usage", tag = "usage", security(("bearer" = [])), params(RangeQuery), responses((status = 200, body = UsageReport), (status = 400, description = "invalid range; `field` names it", body = ErrorBody), (status = 401, description = "not signed in", body = ErrorBody), (status = 403, description = "managers and admins only", body = ErrorBody)))]
pub(super) async fn report(
    State(state): State<AppState>,
    _user: Manager,
    query: Result<Query<RangeQuery>, QueryRejection>,
) -> Result<Json<UsageReport>, ApiError> {
    let q = RangeQuery::read(query)?;
    Ok(Json(
        usage::report(
            &state.ctx.pool,
            q.from.as_deref().unwrap_or(""),
            q.to.as_deref().unwrap_or(""),
            Utc::now(),
        )
        .await?,
    ))
}

#[utoipa::path(get, path = "/api/v1/usage/samples.csv", tag = "usage", security(("bearer" = [])), params(RangeQuery), responses((status = 200, description = "one row per card sample, with a header row; unknown figures are empty", content_type = "text/csv", body = String), (status = 400, description = "invalid range; `field` names it", body = ErrorBody), (status = 403, description = "managers and admins only", body = ErrorBody)))]
pub(super) async fn samples_csv(
    State(state): State<AppState>,
    _user: Manager,
    query: Result<Query<RangeQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    export(state, query, "gpu-samples", csv::samples).await
}

#[utoipa::path(get, path = "/api/v1/usage/jobs.csv", tag = "usage", security(("bearer" = [])), params(RangeQuery), responses((status = 200, description = "one row per job that ran in the range: waits, run hours, GPU-hours and VRAM GiB-hours within the range", content_type = "text/csv", body = String), (status = 400, description = "invalid range; `field` names it", body = ErrorBody), (status = 403, description = "managers and admins only", body = ErrorBody)))]
pub(super) async fn jobs_csv(
    State(state): State<AppState>,
    _user: Manager,
    query: Result<Query<RangeQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    export(state, query, "gpu-jobs", |pool, range| {
        csv::jobs(pool, range, Utc::now())
    })
    .await
}

/// A CSV export (managers and admins) of the range asked for, streamed as a download.
async fn export<S>(
    state: AppState,
    query: Result<Query<RangeQuery>, QueryRejection>,
    stem: &str,
    rows: impl FnOnce(sqlx::PgPool, Range) -> S,
) -> Result<Response, ApiError>
where
    S: futures_util::Stream<Item = Result<String, std::io::Error>> + Send + 'static,
{
    let range = RangeQuery::read(query)?.range(&state).await?;
    let body = Body::from_stream(rows(state.ctx.pool.clone(), range));
    Ok(attachment(stem, range, body))
}

fn attachment(stem: &str, range: Range, body: Body) -> Response {
    let stamp = |t: chrono::DateTime<Utc>| t.format("%Y%m%dT%H%M%SZ").to_string();
    let name = format!("{stem}-{}-{}.csv", stamp(range.from), stamp(range.to));
    (
        [
            (header::CONTENT_TYPE, "text/csv; charset=utf-8".to_owned()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{name}\""),
            ),
            (header::CACHE_CONTROL, "no-store".to_owned()),
        ],
        body,
    )
        .into_response()
}
