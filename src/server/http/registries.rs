//! REST routes for registry credentials (admins only): set, list (never a password), remove.
//! The role is checked by the `Admin` extractor before the body is read.

use super::caller::Admin;
use super::error::ErrorBody;
use super::{ApiError, ApiJson};
use crate::model::{RegistryLogin, RegistryView};
use crate::server::registries;
use crate::server::AppState;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, put};
use axum::{Json, Router};

/// `/api/v1/registries…`
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/registries", get(list_registries))
        .route(
            "/registries/{host}",
            put(put_registry).delete(delete_registry),
        )
}

/// `GET /api/v1/registries`: the registries with stored credentials: host, username, when and by
/// whom they were set; never a password (admins).
#[utoipa::path(get, path = "/api/v1/registries", tag = "registries", security(("bearer" = [])), responses((status = 200, body = [RegistryView]), (status = 401, description = "not signed in", body = ErrorBody), (status = 403, description = "not an admin", body = ErrorBody)))]
pub(super) async fn list_registries(
    State(state): State<AppState>,
    _admin: Admin,
) -> Result<Json<Vec<RegistryView>>, ApiError> {
    Ok(Json(registries::list(&state.ctx.pool).await?))
}

/// `PUT /api/v1/registries/{host}`: sets or replaces the credentials the nodes pull from `host`
/// with (`host[:port]`, `docker.io` for Docker Hub). The password is sealed under the secrets key
/// and never shown again; the change is audited without it (admins).
#[utoipa::path(put, path = "/api/v1/registries/{host}", tag = "registries", security(("bearer" = [])), params(("host" = String, Path, description = "registry host[:port]; docker.io for Docker Hub")), request_body = RegistryLogin, responses((status = 200, body = RegistryView), (status = 400, description = "invalid input; `field` names it (host, username, password)", body = ErrorBody), (status = 401, description = "not signed in", body = ErrorBody), (status = 403, description = "not an admin", body = ErrorBody), (status = 503, description = "the secrets key cannot be had (the message says why)", body = ErrorBody)))]
pub(super) async fn put_registry(
    State(state): State<AppState>,
    Admin(admin): Admin,
    Path(host): Path<String>,
    ApiJson(login): ApiJson<RegistryLogin>,
) -> Result<Json<RegistryView>, ApiError> {
    let ctx = &state.ctx;
    let view = registries::put(&ctx.pool, &ctx.secrets, &admin, &host, &login).await?;
    Ok(Json(view))
}

/// `DELETE /api/v1/registries/{host}`: removes the credentials of `host`, audited (admins).
#[utoipa::path(delete, path = "/api/v1/registries/{host}", tag = "registries", security(("bearer" = [])), params(("host" = String, Path)), responses((status = 204), (status = 400, description = "not a registry host", body = ErrorBody), (status = 401, description = "not signed in", body = ErrorBody), (status = 403, description = "not an admin", body = ErrorBody), (status = 404, description = "no credentials for that host", body = ErrorBody)))]
pub(super) async fn delete_registry(
    State(state): State<AppState>,
    Admin(admin): Admin,
    Path(host): Path<String>,
) -> Result<StatusCode, ApiError> {
    registries::remove(&state.ctx.pool, &admin, &host).await?;
    Ok(StatusCode::NO_CONTENT)
}
