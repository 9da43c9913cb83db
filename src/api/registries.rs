//! Registry credentials on the admin page: the same domain functions as the REST API
//! (`server::registries`), admins only. No function here ever returns a password.

use crate::model::{AppError, RegistryView, Secret};
use leptos::prelude::*;

/// The registries with stored credentials: host, username, when and by whom (admins).
#[server(endpoint = "registries")]
pub async fn list_registries() -> Result<Vec<RegistryView>, AppError> {
    use crate::api::context::server_fn_require;
    use crate::model::Role;

    let (state, _) = server_fn_require(Role::Admin).await?;
    crate::server::registries::list(&state.pool).await
}

/// Sets or replaces the credentials the nodes pull from `host` with (admins).
#[server(endpoint = "set_registry")]
pub async fn set_registry(
    host: String,
    username: String,
    password: Secret,
) -> Result<RegistryView, AppError> {
    use crate::api::context::server_fn_require;
    use crate::model::{RegistryLogin, Role};

    let (state, admin) = server_fn_require(Role::Admin).await?;
    let login = RegistryLogin { username, password };
    crate::server::registries::put(&state.pool, &state.secrets, &admin, &host, &login).await
}

/// Removes the credentials of `host` (admins).
#[server(endpoint = "remove_registry")]
pub async fn remove_registry(host: String) -> Result<(), AppError> {
    use crate::api::context::server_fn_require;
    use crate::model::Role;

    let (state, admin) = server_fn_require(Role::Admin).await?;
    crate::server::registries::remove(&state.pool, &admin, &host).await
}
