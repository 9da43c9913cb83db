//! What every handler, server function and task shares.

use crate::server::admission::PassConfig;
use axum::extract::FromRef;
use leptos::config::LeptosOptions;
use sqlx::PgPool;

/// Shared application state (cheap to clone: everything inside is a handle).
#[derive(Clone, Debug)]
pub struct AppState {
    /// The database.
    pub pool: PgPool,
    /// Where the browser bundle is and how pages are rendered.
    pub leptos_options: LeptosOptions,
    /// Admission settings (also used by the read side's dry runs and submit-time checks).
    pub pass: PassConfig,
    /// Where job logs are kept.
    pub logs_dir: std::path::PathBuf,
    /// Live notification payloads for SSE streams (see `server::live`).
    pub live: tokio::sync::broadcast::Sender<String>,
    /// Docker's state on this node, when this process runs jobs.
    pub docker: Option<std::sync::Arc<crate::server::runner::DockerHealth>>,
}

impl FromRef<AppState> for LeptosOptions {
    fn from_ref(state: &AppState) -> Self {
        state.leptos_options.clone()
    }
}
