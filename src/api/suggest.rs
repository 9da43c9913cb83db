//! The learning manifest in the editor: the observed peaks and suggested needs, and applying one
//! (the same service functions as `GET /api/v1/manifest/suggestions` and its `apply`).

use crate::model::{AppError, ManifestSuggestions, WorkloadView};
use leptos::prelude::*;

/// The observed peaks and suggestions (everyone signed in may read them, like the manifest).
#[server(endpoint = "manifest_suggestions")]
pub async fn get_manifest_suggestions() -> Result<ManifestSuggestions, AppError> {
    use crate::api::context::server_fn_require;
    use crate::model::Role;

    let (state, _) = server_fn_require(Role::Member).await?;
    crate::server::manifest::suggest::suggestions(&state.pool).await
}

/// Sets a workload type's need on one model to the suggestion (admins): an ordinary, audited
/// manifest edit.
#[server(endpoint = "apply_manifest_suggestion")]
pub async fn apply_manifest_suggestion(
    workload: String,
    gpu_model: String,
) -> Result<WorkloadView, AppError> {
    use crate::api::context::server_fn_require;
    use crate::model::Role;

    let (state, user) = server_fn_require(Role::Admin).await?;
    crate::server::manifest::suggest::apply(&state.pool, &user, &workload, &gpu_model).await
}
