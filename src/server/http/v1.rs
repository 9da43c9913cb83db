//! REST API v1 for scripts and the CLI: tokens, the caller, users (teams are in `teams`).

use super::caller::{Admin, ConnectInfoOpt};
use super::error::ErrorBody;
use super::{ApiError, ApiJson};
use crate::model::{AppError, Budget, CreatedToken, Role, TokenView, UserShare, UserView};
use crate::server::admin;
use crate::server::auth::{service, CurrentUser, TOKEN_CANNOT_MINT};
use crate::server::AppState;
use axum::extract::{Path, State};
use axum::http::header::AUTHORIZATION;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{delete, get, patch, post};
use axum::{Json, Router};
use chrono::Utc;
use serde::Deserialize;
use uuid::Uuid;

/// The `/api/v1` routes.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/me", get(me))
        .route("/me/password", post(change_password))
        .route("/tokens", post(create_token).get(list_tokens))
        .route("/tokens/{id}", delete(revoke_token))
        .route("/users", get(list_users).post(create_user))
        .route("/users/{id}", patch(update_user))
        .fallback(not_found)
}

async fn not_found() -> ApiError {
    ApiError(AppError::NotFound("no such API route".into()))
}

#[utoipa::path(get, path = "/api/v1/me", tag = "auth", security(("bearer" = [])), responses((status = 200, body = UserView), (status = 401, body = ErrorBody)))]
pub(super) async fn me(
    State(state): State<AppState>,
    user: CurrentUser,
) -> Result<Json<UserView>, ApiError> {
    Ok(Json(admin::me(&state.ctx, &user).await?))
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct TokenRequest {
    username: String,
    password: String,
    name: String,
    /// Days until the token stops working (1 to 3650); no expiry when left out.
    #[serde(default)]
    expires_in_days: Option<u32>,
}

/// `POST /api/v1/tokens`: exchanges a name and password for a token (shown once). A request that
/// carries a bearer token is refused: a token cannot create tokens.
#[utoipa::path(post, path = "/api/v1/tokens", tag = "auth", request_body = TokenRequest, responses((status = 201, description = "the token, shown once", body = CreatedToken), (status = 400, description = "invalid input; `field` names it", body = ErrorBody), (status = 401, description = "not signed in", body = ErrorBody), (status = 403, description = "sent with a bearer token", body = ErrorBody), (status = 429, description = "too many failed sign-ins", body = ErrorBody), (status = 503, description = "too many password checks at once", body = ErrorBody)))]
pub(super) async fn create_token(
    State(state): State<AppState>,
    headers: HeaderMap,
    ConnectInfoOpt(client): ConnectInfoOpt,
    ApiJson(req): ApiJson<TokenRequest>,
) -> Result<(StatusCode, Json<CreatedToken>), ApiError> {
    if headers.contains_key(AUTHORIZATION) {
        return Err(AppError::Forbidden(TOKEN_CANNOT_MINT.into()).into());
    }
    let user = service::login(
        &state.ctx.pool,
        &state.ctx.hashing,
        &req.username,
        &req.password,
        &client,
        Utc::now(),
    )
    .await?;
    let token = service::create_token(
        &state.ctx.pool,
        user.id,
        &user.username,
        &req.name,
        req.expires_in_days,
    )
    .await?;
    Ok((StatusCode::CREATED, Json(token)))
}

#[utoipa::path(get, path = "/api/v1/tokens", tag = "auth", security(("bearer" = [])), responses((status = 200, body = [TokenView]), (status = 401, body = ErrorBody)))]
pub(super) async fn list_tokens(
    State(state): State<AppState>,
    user: CurrentUser,
) -> Result<Json<Vec<TokenView>>, ApiError> {
    Ok(Json(service::list_tokens(&state.ctx.pool, user.id).await?))
}

#[utoipa::path(delete, path = "/api/v1/tokens/{id}", tag = "auth", security(("bearer" = [])), params(("id" = Uuid, Path)), responses((status = 204), (status = 404, body = ErrorBody)))]
pub(super) async fn revoke_token(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(id): Path<Uuid>,
) -> Result<StatusCode, ApiError> {
    service::revoke_token(&state.ctx.pool, user.id, &user.username, id).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(get, path = "/api/v1/users", tag = "users", security(("bearer" = [])), responses((status = 200, body = [UserView]), (status = 403, body = ErrorBody)))]
pub(super) async fn list_users(
    State(state): State<AppState>,
    _user: Admin,
) -> Result<Json<Vec<UserView>>, ApiError> {
    Ok(Json(admin::list_users(&state.ctx).await?))
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct NewUser {
    username: String,
    role: Role,
    password: String,
}

#[utoipa::path(post, path = "/api/v1/users", tag = "users", security(("bearer" = [])), request_body = NewUser, responses((status = 201, body = UserView), (status = 400, description = "invalid input; `field` names it", body = ErrorBody), (status = 401, description = "not signed in", body = ErrorBody), (status = 403, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub(super) async fn create_user(
    State(state): State<AppState>,
    Admin(user): Admin,
    ApiJson(req): ApiJson<NewUser>,
) -> Result<(StatusCode, Json<UserView>), ApiError> {
    let view =
        admin::create_user(&state.ctx, &user, &req.username, req.role, &req.password).await?;
    Ok((StatusCode::CREATED, Json(view)))
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct UserPatch {
    /// Disable (true) or re-enable (false): a disabled user's sessions and tokens stop at once.
    disabled: Option<bool>,
    /// A new role.
    role: Option<Role>,
    /// The numeric uid the user's jobs run as (never 0; unique). Unset users get one from
    /// `--job-uid-range` when their first job launches.
    job_uid: Option<i64>,
    /// The numeric gid the user's jobs run as (defaults to the uid).
    job_gid: Option<i64>,
    /// The team to move the user to (it must exist).
    team: Option<String>,
    /// The user's share weight within their team (more than 0, at most 1,000,000).
    weight: Option<f64>,
    /// The user's own GPU-hour budget; `null` removes it.
    #[serde(default, deserialize_with = "crate::model::present_field")]
    #[schema(value_type = Option<Budget>, nullable)]
    budget: Option<Option<Budget>>,
}

#[utoipa::path(patch, path = "/api/v1/users/{id}", tag = "users", security(("bearer" = [])), params(("id" = Uuid, Path)), request_body = UserPatch, responses((status = 204), (status = 400, description = "invalid input; `field` names it", body = ErrorBody), (status = 401, description = "not signed in", body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, description = "`job_uid` belongs to another user", body = ErrorBody)))]
pub(super) async fn update_user(
    State(state): State<AppState>,
    Admin(user): Admin,
    Path(id): Path<Uuid>,
    ApiJson(req): ApiJson<UserPatch>,
) -> Result<StatusCode, ApiError> {
    let share = UserShare {
        team: req.team,
        weight: req.weight,
        budget: req.budget,
    };
    // First: a bad or unknown team, weight or budget refuses the patch before anything changes.
    admin::teams::place_user(&state.ctx, &user, id, &share).await?;
    admin::set_job_ids(&state.ctx, &user, id, req.job_uid, req.job_gid).await?;
    admin::update_user(&state.ctx, &user, id, req.role, req.disabled).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct PasswordChange {
    current_password: String,
    new_password: String,
}

/// Changes the caller's password (the current one is checked, and counted by the sign-in
/// throttle). The user's browser sessions signed in before now end; API tokens stay.
#[utoipa::path(post, path = "/api/v1/me/password", tag = "auth", security(("bearer" = [])), request_body = PasswordChange, responses((status = 204), (status = 400, description = "invalid input; `field` names it", body = ErrorBody), (status = 401, description = "not signed in", body = ErrorBody), (status = 429, description = "too many failed tries", body = ErrorBody)))]
pub(super) async fn change_password(
    State(state): State<AppState>,
    session: tower_sessions::Session,
    user: CurrentUser,
    ApiJson(req): ApiJson<PasswordChange>,
) -> Result<StatusCode, ApiError> {
    let at =
        admin::change_password(&state.ctx, &user, &req.current_password, &req.new_password).await?;
    admin::restamp_session(&session, &user, at).await?;
    Ok(StatusCode::NO_CONTENT)
}
