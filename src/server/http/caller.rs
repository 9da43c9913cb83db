//! The caller of a REST request as an extractor: a missing or bad credential answers 401 here, at
//! the edge; the rules of who the caller is live in `auth`.

use super::ApiError;
use crate::model::AppError;
use crate::server::auth::CurrentUser;
use crate::server::AppState;
use axum::extract::{FromRequestParts, OptionalFromRequestParts};
use axum::http::request::Parts;

impl FromRequestParts<AppState> for CurrentUser {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        Self::resolve(parts, state)
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
        Ok(Self::resolve(parts, state).await?)
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
