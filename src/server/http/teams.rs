//! REST routes for teams: managers and admins read them, admins create and change them. The role
//! is checked by the extractor before the body is read. A user's team, weight and budget are set
//! through `PATCH /api/v1/users/{id}` (`v1`).

use super::caller::{Admin, Manager};
use super::error::ErrorBody;
use super::{ApiError, ApiJson};
use crate::model::{NewTeam, TeamPatch, TeamView};
use crate::server::admin::teams;
use crate::server::AppState;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, patch};
use axum::{Json, Router};

/// `/api/v1/teams…`
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/teams", get(list_teams).post(create_team))
        .route("/teams/{name}", patch(update_team))
}

/// `GET /api/v1/teams`: every team with its weight, budget and members (managers and admins).
#[utoipa::path(get, path = "/api/v1/teams", tag = "teams", security(("bearer" = [])), responses((status = 200, body = [TeamView]), (status = 401, description = "not signed in", body = ErrorBody), (status = 403, description = "not a manager or admin", body = ErrorBody)))]
pub(super) async fn list_teams(
    State(state): State<AppState>,
    _manager: Manager,
) -> Result<Json<Vec<TeamView>>, ApiError> {
    Ok(Json(teams::list(&state.ctx).await?))
}

/// `POST /api/v1/teams`: creates a team, weight 1 unless given, with an optional budget (admins).
#[utoipa::path(post, path = "/api/v1/teams", tag = "teams", security(("bearer" = [])), request_body = NewTeam, responses((status = 201, body = TeamView), (status = 400, description = "invalid input; `field` names it (name, weight, budget.gpu_hours, budget.period, budget.kind)", body = ErrorBody), (status = 401, description = "not signed in", body = ErrorBody), (status = 403, description = "not an admin", body = ErrorBody), (status = 409, description = "a team of that name exists", body = ErrorBody)))]
pub(super) async fn create_team(
    State(state): State<AppState>,
    Admin(admin): Admin,
    ApiJson(team): ApiJson<NewTeam>,
) -> Result<(StatusCode, Json<TeamView>), ApiError> {
    let view = teams::create(&state.ctx, &admin, &team).await?;
    Ok((StatusCode::CREATED, Json(view)))
}

/// `PATCH /api/v1/teams/{name}`: changes a team's weight and/or budget; `"budget": null` removes
/// the budget (admins).
#[utoipa::path(patch, path = "/api/v1/teams/{name}", tag = "teams", security(("bearer" = [])), params(("name" = String, Path)), request_body = TeamPatch, responses((status = 200, body = TeamView), (status = 400, description = "invalid input; `field` names it (weight, budget.gpu_hours, budget.period, budget.kind)", body = ErrorBody), (status = 401, description = "not signed in", body = ErrorBody), (status = 403, description = "not an admin", body = ErrorBody), (status = 404, description = "no such team", body = ErrorBody)))]
pub(super) async fn update_team(
    State(state): State<AppState>,
    Admin(admin): Admin,
    Path(name): Path<String>,
    ApiJson(patch): ApiJson<TeamPatch>,
) -> Result<Json<TeamView>, ApiError> {
    Ok(Json(
        teams::update(&state.ctx, &admin, &name, &patch).await?,
    ))
}
