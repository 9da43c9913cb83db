//! The caller of a REST request as an extractor: a missing or bad credential answers 401 here, at
//! the edge; the rules of who the caller is live in `auth`.

use super::ApiError;
use crate::model::{AppError, Role};
use crate::server::auth::CurrentUser;
use crate::server::AppState;
use axum::extract::{FromRequestParts, OptionalFromRequestParts};
use axum::http::request::Parts;

impl FromRequestParts<AppState> for CurrentUser {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        Self::resolve(parts, &state.ctx.pool, state.ctx.session_lifetime)
            .await?
            .ok_or(ApiError(AppError::Unauthorized))
    }
}

impl OptionalFromRequestParts<AppState> for CurrentUser {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Option<Self>, ApiError> {
        Ok(Self::resolve(parts, &state.ctx.pool, state.ctx.session_lifetime).await?)
    }
}

/// A caller with the admin role. The extractor refuses anyone else (403) before the request's path
/// or body is read, so an admin route tells a member nothing, not even what its body should hold;
/// and a handler that takes it cannot forget the check.
pub struct Admin(pub CurrentUser);

/// A caller with the manager role or above, refused like [`Admin`] (manager routes do not need to
/// know which one).
pub struct Manager;

async fn at_least(parts: &mut Parts, state: &AppState, min: Role) -> Result<CurrentUser, ApiError> {
    let user =
        <CurrentUser as FromRequestParts<AppState>>::from_request_parts(parts, state).await?;
    user.require(min)?;
    Ok(user)
}

impl FromRequestParts<AppState> for Admin {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        Ok(Admin(at_least(parts, state, Role::Admin).await?))
    }
}

impl FromRequestParts<AppState> for Manager {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        at_least(parts, state, Role::Manager).await?;
        Ok(Manager)
    }
}

/// The client address of a request (empty when unknown), for the sign-in throttle.
pub struct ConnectInfoOpt(pub String);

impl<S: Send + Sync> FromRequestParts<S> for ConnectInfoOpt {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(ConnectInfoOpt(crate::server::auth::client_address(parts)))
    }
}
