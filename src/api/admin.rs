//! The manifest editor, card states, users and teams, the launch policy and the caller's account: the same
//! service functions as the REST API.

use crate::model::{
    AppError, CreatedToken, LaunchPolicy, ManifestState, NewTeam, NodeView, Role, TeamPatch,
    TeamView, TokenView, UserShare, UserView, WorkloadView,
};
use leptos::prelude::*;
use leptos::server_fn::codec::Json;
use std::collections::BTreeMap;
use uuid::Uuid;

/// The manifest, its history and when the last pass ran (everyone signed in may read it).
#[server(endpoint = "manifest_state")]
pub async fn get_manifest_state() -> Result<ManifestState, AppError> {
    use crate::api::context::server_fn_require;

    let (state, _) = server_fn_require(Role::Member).await?;
    crate::server::admin::manifest_state(&state).await
}

/// Creates or replaces a workload type (admins).
#[server(endpoint = "save_workload", input = Json)]
pub async fn save_workload(
    name: String,
    description: String,
    vram_mib: BTreeMap<String, i64>,
) -> Result<WorkloadView, AppError> {
    use crate::api::context::server_fn_require;
    use crate::server::manifest::{self, WorkloadPut};

    let (state, user) = server_fn_require(Role::Admin).await?;
    let body = WorkloadPut {
        description,
        vram_mib,
    };
    manifest::put(&state.pool, &user, name.trim(), &body).await
}

/// Renames a workload type; queued jobs follow (admins).
#[server(endpoint = "rename_workload")]
pub async fn rename_workload(from: String, to: String) -> Result<WorkloadView, AppError> {
    use crate::api::context::server_fn_require;

    let (state, user) = server_fn_require(Role::Admin).await?;
    crate::server::admin::rename_workload(&state, &user, &from, to.trim()).await
}

/// Deletes a workload type (admins).
#[server(endpoint = "delete_workload")]
pub async fn delete_workload(name: String) -> Result<(), AppError> {
    use crate::api::context::server_fn_require;

    let (state, user) = server_fn_require(Role::Admin).await?;
    crate::server::manifest::delete(&state.pool, &user, &name).await
}

/// Puts a card online, draining (runs its jobs out, admits nothing) or offline (admins).
#[server(endpoint = "set_gpu_state")]
pub async fn set_gpu_state(uuid: String, state: String) -> Result<(), AppError> {
    use crate::api::context::server_fn_require;
    use crate::model::parse_gpu_id;

    let (app, user) = server_fn_require(Role::Admin).await?;
    let id = parse_gpu_id(&uuid)
        .ok_or_else(|| AppError::invalid("uuid", format!("`{uuid}` is not a card id (GPU-…)")))?;
    crate::server::cards::set_state(&app, &user, id, &state).await
}

/// Every node with its state and heartbeat age (admins: the admin page's Nodes section).
#[server(endpoint = "list_nodes")]
pub async fn list_nodes() -> Result<Vec<NodeView>, AppError> {
    use crate::api::context::server_fn_require;

    let (state, _) = server_fn_require(Role::Admin).await?;
    crate::server::nodes::list(&state.pool).await
}

/// Drains a node (`drained`: runs its jobs out, takes no new ones) or undrains it (`up`) (admins).
#[server(endpoint = "set_node_state")]
pub async fn set_node_state(name: String, state: String) -> Result<(), AppError> {
    use crate::api::context::server_fn_require;

    let (app, user) = server_fn_require(Role::Admin).await?;
    crate::server::nodes::set_state(&app.pool, &user, &name, &state).await
}

/// Forgets a lost node: its jobs end `failed` (`node_lost`) and their cards are released
/// (admins). Returns how many jobs ended.
#[server(endpoint = "forget_node")]
pub async fn forget_node(name: String) -> Result<usize, AppError> {
    use crate::api::context::server_fn_require;

    let (app, user) = server_fn_require(Role::Admin).await?;
    crate::server::nodes::forget(&app.pool, &user, &name).await
}

/// Creates a user (admins).
#[server(endpoint = "create_user")]
pub async fn create_user(
    username: String,
    role: Role,
    password: String,
) -> Result<UserView, AppError> {
    use crate::api::context::server_fn_require;

    let (state, admin) = server_fn_require(Role::Admin).await?;
    crate::server::admin::create_user(&state, &admin, &username, role, &password).await
}

/// Changes a user's role and/or disables or re-enables them (admins).
#[server(endpoint = "update_user")]
pub async fn update_user(
    id: Uuid,
    #[server(default)] role: Option<Role>,
    #[server(default)] disabled: Option<bool>,
) -> Result<UserView, AppError> {
    use crate::api::context::server_fn_require;

    let (state, admin) = server_fn_require(Role::Admin).await?;
    crate::server::admin::update_user(&state, &admin, id, role, disabled).await
}

/// The launch policy (everyone signed in may read it: it says what they may run).
#[server(endpoint = "launch_policy")]
pub async fn get_launch_policy() -> Result<LaunchPolicy, AppError> {
    use crate::api::context::server_fn_require;

    let (state, _) = server_fn_require(Role::Member).await?;
    crate::server::admin::launch_policy(&state).await
}

/// Replaces the launch policy (admins).
#[server(endpoint = "save_launch_policy", input = Json)]
pub async fn save_launch_policy(policy: LaunchPolicy) -> Result<LaunchPolicy, AppError> {
    use crate::api::context::server_fn_require;

    let (state, admin) = server_fn_require(Role::Admin).await?;
    crate::server::admin::save_policy(&state, &admin, &policy).await
}

/// Changes the caller's password; their other browser sessions end.
#[server(endpoint = "change_password")]
pub async fn change_password(
    current_password: String,
    new_password: String,
) -> Result<(), AppError> {
    use crate::api::context::server_fn_require;

    let (state, user) = server_fn_require(Role::Member).await?;
    let at = crate::server::admin::change_password(&state, &user, &current_password, &new_password)
        .await?;
    let session = crate::api::context::server_fn_session()?;
    crate::server::admin::restamp_session(&session, &user, at).await
}

/// The caller's API tokens, newest first.
#[server(endpoint = "my_tokens")]
pub async fn my_tokens() -> Result<Vec<TokenView>, AppError> {
    use crate::api::context::server_fn_require;

    let (state, user) = server_fn_require(Role::Member).await?;
    crate::server::auth::service::list_tokens(&state.pool, user.id).await
}

/// Creates an API token for the caller, expiring after `expires_in_days` when given; the secret is
/// returned this once. Only a browser session may: a token cannot create tokens.
#[server(endpoint = "create_token")]
pub async fn create_token(
    name: String,
    #[server(default)] expires_in_days: Option<String>,
) -> Result<CreatedToken, AppError> {
    use crate::api::context::server_fn_require;
    use crate::server::auth::service;

    let (state, user) = server_fn_require(Role::Member).await?;
    user.require_session()?;
    // The form sends an empty string for "never".
    let days = match expires_in_days.as_deref().map(str::trim) {
        None | Some("") => None,
        Some(text) => Some(text.parse::<u32>().map_err(|_| {
            AppError::invalid(
                "expires_in_days",
                "a whole number of days, or empty for never",
            )
        })?),
    };
    service::create_token(&state.pool, user.id, &user.username, &name, days).await
}

/// Revokes one of the caller's tokens.
#[server(endpoint = "revoke_token")]
pub async fn revoke_token(id: Uuid) -> Result<(), AppError> {
    use crate::api::context::server_fn_require;
    use crate::server::auth::service;

    let (state, user) = server_fn_require(Role::Member).await?;
    service::revoke_token(&state.pool, user.id, &user.username, id).await
}

/// Every team with its weight, budget and members (managers and admins).
#[server(endpoint = "list_teams")]
pub async fn list_teams() -> Result<Vec<TeamView>, AppError> {
    use crate::api::context::server_fn_require;

    let (state, _) = server_fn_require(Role::Manager).await?;
    crate::server::admin::teams::list(&state).await
}

/// Creates a team (admins).
#[server(endpoint = "create_team", input = Json)]
pub async fn create_team(team: NewTeam) -> Result<TeamView, AppError> {
    use crate::api::context::server_fn_require;

    let (state, admin) = server_fn_require(Role::Admin).await?;
    crate::server::admin::teams::create(&state, &admin, &team).await
}

/// Changes a team's weight and/or budget (admins).
#[server(endpoint = "update_team", input = Json)]
pub async fn update_team(name: String, patch: TeamPatch) -> Result<TeamView, AppError> {
    use crate::api::context::server_fn_require;

    let (state, admin) = server_fn_require(Role::Admin).await?;
    crate::server::admin::teams::update(&state, &admin, &name, &patch).await
}

/// Moves a user to a team and/or sets their weight and budget (admins).
#[server(endpoint = "place_user", input = Json)]
pub async fn place_user(id: Uuid, share: UserShare) -> Result<UserView, AppError> {
    use crate::api::context::server_fn_require;

    let (state, admin) = server_fn_require(Role::Admin).await?;
    crate::server::admin::teams::place_user(&state, &admin, id, &share).await
}
