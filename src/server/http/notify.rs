//! `/api/v1/me/notifications`: the caller's own notification settings and deliveries. Every route
//! reads and writes the caller's rows only: there is no way to name another user.

use super::error::ErrorBody;
use super::{ApiError, ApiJson};
use crate::model::{DeliveryView, NotificationSettings, NotificationsPut};
use crate::server::auth::CurrentUser;
use crate::server::notify;
use crate::server::AppState;
use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};

/// The routes.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/me/notifications", get(get_settings).put(put_settings))
        .route("/me/notifications/deliveries", get(deliveries))
}

/// `GET /api/v1/me/notifications`: what the caller hears about and where (secrets never shown).
#[utoipa::path(get, path = "/api/v1/me/notifications", tag = "notifications", security(("bearer" = [])), responses((status = 200, body = NotificationSettings), (status = 401, body = ErrorBody)))]
pub(super) async fn get_settings(
    State(state): State<AppState>,
    user: CurrentUser,
) -> Result<Json<NotificationSettings>, ApiError> {
    Ok(Json(notify::settings_of(&state.ctx.pool, user.id).await?))
}

/// `PUT /api/v1/me/notifications`: replaces them. Each webhook URL is checked against where
/// webhooks may go (400 naming it); a webhook without `secret` keeps the one its URL had.
#[utoipa::path(put, path = "/api/v1/me/notifications", tag = "notifications", security(("bearer" = [])), request_body = NotificationsPut, responses((status = 200, body = NotificationSettings), (status = 400, description = "invalid input; `field` names it", body = ErrorBody), (status = 401, body = ErrorBody)))]
pub(super) async fn put_settings(
    State(state): State<AppState>,
    user: CurrentUser,
    ApiJson(put): ApiJson<NotificationsPut>,
) -> Result<Json<NotificationSettings>, ApiError> {
    Ok(Json(notify::save(&state.ctx.pool, &user, put).await?))
}

/// `GET /api/v1/me/notifications/deliveries`: the caller's 50 most recent deliveries, newest
/// first, each with its state (`pending`, `sent`, `failed`), attempts, next attempt and last error.
#[utoipa::path(get, path = "/api/v1/me/notifications/deliveries", tag = "notifications", security(("bearer" = [])), responses((status = 200, body = [DeliveryView]), (status = 401, body = ErrorBody)))]
pub(super) async fn deliveries(
    State(state): State<AppState>,
    user: CurrentUser,
) -> Result<Json<Vec<DeliveryView>>, ApiError> {
    Ok(Json(notify::deliveries_of(&state.ctx.pool, user.id).await?))
}
