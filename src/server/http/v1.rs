//! REST API v1 for scripts and the CLI: tokens, the caller, users.

use super::{ApiError, ApiJson};
use crate::model::{AppError, Role, UserView};
use crate::server::auth::{service, CurrentUser};
use crate::server::db::users;
use crate::server::http::OrInternal;
use crate::server::AppState;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{delete, get, patch, post};
use axum::{Json, Router};
use chrono::Utc;
use serde::Deserialize;
use uuid::Uuid;

/// The `/api/v1` routes.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/me", get(me))
        .route("/tokens", post(create_token).get(list_tokens))
        .route("/tokens/{id}", delete(revoke_token))
        .route("/users", get(list_users).post(create_user))
        .route("/users/{id}", patch(update_user))
        .fallback(not_found)
}

async fn not_found() -> ApiError {
    ApiError(AppError::NotFound("no such API route".into()))
}

async fn me(user: CurrentUser) -> Json<UserView> {
    Json(user.view())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenRequest {
    username: String,
    password: String,
    name: String,
}

/// `POST /api/v1/tokens`: exchanges a name and password for a token (shown once).
async fn create_token(
    State(state): State<AppState>,
    ApiJson(req): ApiJson<TokenRequest>,
) -> Result<(StatusCode, Json<service::NewToken>), ApiError> {
    let user = service::login(&state.pool, &req.username, &req.password, Utc::now()).await?;
    let token = service::create_token(&state.pool, user.id, &req.name).await?;
    Ok((StatusCode::CREATED, Json(token)))
}

async fn list_tokens(
    State(state): State<AppState>,
    user: CurrentUser,
) -> Result<Json<Vec<users::TokenRow>>, ApiError> {
    let rows = users::tokens_of(&state.pool, user.id)
        .await
        .or_internal("listing tokens")?;
    Ok(Json(rows))
}

async fn revoke_token(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<Uuid>,
) -> Result<StatusCode, ApiError> {
    service::revoke_token(&state.pool, user.id, id).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn list_users(
    State(state): State<AppState>,
    user: CurrentUser,
) -> Result<Json<Vec<UserView>>, ApiError> {
    user.require(Role::Admin)?;
    let rows = users::list(&state.pool)
        .await
        .or_internal("listing users")?;
    let views = rows
        .iter()
        .map(|r| r.view())
        .collect::<Result<Vec<_>, _>>()
        .or_internal("reading users")?;
    Ok(Json(views))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NewUser {
    username: String,
    role: Role,
    password: String,
}

async fn create_user(
    State(state): State<AppState>,
    user: CurrentUser,
    ApiJson(req): ApiJson<NewUser>,
) -> Result<(StatusCode, Json<UserView>), ApiError> {
    user.require(Role::Admin)?;
    let row = service::add_user(&state.pool, &req.username, req.role, &req.password).await?;
    Ok((
        StatusCode::CREATED,
        Json(row.view().or_internal("reading a user")?),
    ))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UserPatch {
    disabled: Option<bool>,
}

async fn update_user(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<Uuid>,
    ApiJson(req): ApiJson<UserPatch>,
) -> Result<StatusCode, ApiError> {
    user.require(Role::Admin)?;
    if let Some(disabled) = req.disabled {
        if disabled && id == user.id {
            return Err(AppError::invalid("disabled", "you cannot disable yourself").into());
        }
        if !users::set_disabled(&state.pool, id, disabled)
            .await
            .or_internal("disabling a user")?
        {
            return Err(AppError::NotFound(format!("no user {id}")).into());
        }
    }
    Ok(StatusCode::NO_CONTENT)
}
