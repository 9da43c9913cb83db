//! Sign-in, sign-out, the caller, and a status probe.

use crate::model::{AppError, StatusView, UserView};
use leptos::prelude::*;

/// Signs in with a name and password; on success the session id is rotated and the browser is sent
/// to the dashboard.
#[server(endpoint = "login")]
pub async fn login(username: String, password: String) -> Result<(), AppError> {
    use crate::server::auth::{
        server_fn_caller, server_fn_session, service, SESSION_SINCE_KEY, SESSION_USER_KEY,
    };
    use crate::server::http::OrInternal;

    let (state, _) = server_fn_caller().await?;
    let user = service::login(&state.pool, &username, &password, chrono::Utc::now()).await?;
    let session = server_fn_session()?;
    session
        .cycle_id()
        .await
        .or_internal("rotating the session id")?;
    session
        .insert(SESSION_USER_KEY, user.id)
        .await
        .or_internal("writing the session")?;
    session
        .insert(SESSION_SINCE_KEY, chrono::Utc::now())
        .await
        .or_internal("writing the session")?;
    leptos_axum::redirect("/");
    Ok(())
}

/// Ends the session.
#[server(endpoint = "logout")]
pub async fn logout() -> Result<(), AppError> {
    use crate::server::auth::server_fn_session;
    use crate::server::http::OrInternal;

    server_fn_session()?
        .flush()
        .await
        .or_internal("ending the session")?;
    leptos_axum::redirect("/login");
    Ok(())
}

/// The signed-in user, or `None`.
#[server(endpoint = "whoami")]
pub async fn whoami() -> Result<Option<UserView>, AppError> {
    let (_, user) = crate::server::auth::server_fn_caller().await?;
    Ok(user.map(|u| u.view()))
}

/// A live check of the server and its database (signed-in users).
#[server(endpoint = "server_status")]
pub async fn server_status() -> Result<StatusView, AppError> {
    use crate::model::Role;
    use crate::server::auth::server_fn_require;
    use crate::server::http::OrInternal;

    let (state, _) = server_fn_require(Role::Member).await?;
    let started = std::time::Instant::now();
    let users: i64 = sqlx::query_scalar("SELECT count(*) FROM users WHERE disabled_at IS NULL")
        .fetch_one(&state.pool)
        .await
        .or_internal("probing the database")?;
    Ok(StatusView {
        database_ms: started.elapsed().as_secs_f64() * 1000.0,
        active_users: users,
        checked_at: chrono::Utc::now(),
    })
}

/// Every user (admins only).
#[server(endpoint = "list_users")]
pub async fn list_users() -> Result<Vec<UserView>, AppError> {
    use crate::model::Role;
    use crate::server::auth::server_fn_require;
    use crate::server::db::users;
    use crate::server::http::OrInternal;

    let (state, _) = server_fn_require(Role::Admin).await?;
    let rows = users::list(&state.pool)
        .await
        .or_internal("listing users")?;
    rows.iter()
        .map(|r| r.view())
        .collect::<Result<Vec<_>, _>>()
        .or_internal("reading users")
}
