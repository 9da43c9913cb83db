//! `/api/v1/me/budget`: the caller's own standing against the budgets that apply to them. The
//! route takes no user: there is no way to read another member's standing here, and nothing to
//! write (admins set budgets).

use super::error::ErrorBody;
use super::ApiError;
use crate::model::BudgetUse;
use crate::server::auth::CurrentUser;
use crate::server::budgets;
use crate::server::AppState;
use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};

/// The routes.
pub fn router() -> Router<AppState> {
    Router::new().route("/me/budget", get(mine))
}

/// `GET /api/v1/me/budget`: each budget that applies to the caller (their team's, then their
/// own), with the GPU-hours used this period, what is left and when it resets. Empty when none.
#[utoipa::path(get, path = "/api/v1/me/budget", tag = "budgets", security(("bearer" = [])), responses((status = 200, body = [BudgetUse]), (status = 401, body = ErrorBody)))]
pub(super) async fn mine(
    State(state): State<AppState>,
    user: CurrentUser,
) -> Result<Json<Vec<BudgetUse>>, ApiError> {
    Ok(Json(budgets::mine(&state.ctx.pool, user.id).await?))
}
