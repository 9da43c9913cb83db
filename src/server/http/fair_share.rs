//! `GET /api/v1/fair-share`: each user's and team's weight, decayed GPU-hours, part of the recent
//! total, owed share and budget (a member reads only their own row and their team's).

use super::error::ErrorBody;
use super::ApiError;
use crate::model::FairShareReport;
use crate::server::auth::CurrentUser;
use crate::server::fairness;
use crate::server::AppState;
use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use chrono::Utc;

/// `/api/v1/fair-share`
pub fn router() -> Router<AppState> {
    Router::new().route("/fair-share", get(report))
}

#[utoipa::path(get, path = "/api/v1/fair-share", tag = "usage", security(("bearer" = [])), responses((status = 200, description = "managers and admins: every user and team; members: their own row and their team's", body = FairShareReport), (status = 401, description = "not signed in", body = ErrorBody)))]
pub(super) async fn report(
    State(state): State<AppState>,
    user: CurrentUser,
) -> Result<Json<FairShareReport>, ApiError> {
    Ok(Json(
        fairness::report_for(&state.ctx.pool, &user, Utc::now()).await?,
    ))
}
