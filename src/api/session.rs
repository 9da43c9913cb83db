//! Sign-in, sign-out, the caller, and a status probe.

use crate::model::{AppError, StatusView, UserView};
use leptos::prelude::*;

/// Signs in with a name and password; on success the session id is rotated and the browser is sent
/// to `next` when that is a path on this site (the page that sent it to sign in), else to the
/// dashboard.
#[server(endpoint = "login")]
pub async fn login(
    username: String,
    password: String,
    #[server(default)] next: Option<String>,
) -> Result<(), AppError> {
    use crate::api::context::{server_fn_caller, server_fn_client, server_fn_session};
    use crate::server::auth::service;

    let (state, _) = server_fn_caller().await?;
    let client = server_fn_client()?;
    let user = service::login(
        &state.pool,
        &state.hashing,
        &username,
        &password,
        &client,
        chrono::Utc::now(),
    )
    .await?;
    service::start_session(&server_fn_session()?, user.id).await?;
    leptos_axum::redirect(service::local_return_path(next.as_deref()));
    Ok(())
}

/// Ends the session.
#[server(endpoint = "logout")]
pub async fn logout() -> Result<(), AppError> {
    use crate::api::context::server_fn_session;

    crate::server::auth::service::end_session(&server_fn_session()?).await?;
    leptos_axum::redirect("/login");
    Ok(())
}

/// The signed-in user, or `None`.
#[server(endpoint = "whoami")]
pub async fn whoami() -> Result<Option<UserView>, AppError> {
    let (state, user) = crate::api::context::server_fn_caller().await?;
    match user {
        Some(user) => Ok(Some(crate::server::admin::me(&state, &user).await?)),
        None => Ok(None),
    }
}

/// A live check of the server and its database (signed-in users).
#[server(endpoint = "server_status")]
pub async fn server_status() -> Result<StatusView, AppError> {
    use crate::api::context::server_fn_require;
    use crate::model::Role;

    let (state, _) = server_fn_require(Role::Member).await?;
    crate::server::admin::server_status(&state).await
}

/// Every user (admins only).
#[server(endpoint = "list_users")]
pub async fn list_users() -> Result<Vec<UserView>, AppError> {
    use crate::api::context::server_fn_require;
    use crate::model::Role;

    let (state, _) = server_fn_require(Role::Admin).await?;
    crate::server::admin::list_users(&state).await
}
