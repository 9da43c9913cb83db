//! What a server function knows about its request: the domain's context, the caller and the session,
//! taken from the Leptos context the axum integration provides.

use crate::model::{AppError, Role};
use crate::server::auth::CurrentUser;
use crate::server::error::OrInternal;
use crate::server::{AppState, Ctx};
use axum::http::request::Parts;
use tower_sessions::Session;

/// For server functions: the domain's context and the caller of the request being served.
pub async fn server_fn_caller() -> Result<(Ctx, Option<CurrentUser>), AppError> {
    let state = leptos::prelude::use_context::<AppState>()
        .ok_or("application state missing from the server-function context")
        .or_internal("serving a server function")?;
    let parts = leptos::prelude::use_context::<Parts>()
        .ok_or("request parts missing from the server-function context")
        .or_internal("serving a server function")?;
    let user = CurrentUser::resolve(&parts, &state.ctx.pool, state.ctx.session_lifetime).await?;
    Ok((state.ctx, user))
}

/// For server functions that need a signed-in caller with at least `min` role.
pub async fn server_fn_require(min: Role) -> Result<(Ctx, CurrentUser), AppError> {
    let (state, user) = server_fn_caller().await?;
    let user = user.ok_or(AppError::Unauthorized)?;
    user.require(min)?;
    Ok((state, user))
}

/// For server functions: the session of the request being served.
pub fn server_fn_session() -> Result<Session, AppError> {
    leptos::prelude::use_context::<Parts>()
        .and_then(|p| p.extensions.get::<Session>().cloned())
        .ok_or("session layer missing")
        .or_internal("serving a server function")
}

/// For server functions: the client address of the request being served (empty when unknown).
pub fn server_fn_client() -> Result<String, AppError> {
    leptos::prelude::use_context::<Parts>()
        .map(|p| crate::server::auth::client_address(&p))
        .ok_or("request parts missing from the server-function context")
        .or_internal("serving a server function")
}
