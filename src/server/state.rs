//! What every handler, server function and task shares, built by one constructor for `gpuq serve`,
//! the benchmarks and the tests alike.

use crate::server::admission::PassConfig;
use crate::server::auth::password::HashGate;
use crate::server::jobs::live::StreamSlots;
use crate::server::jobs::log_read::LogReads;
use crate::server::jobs::rate::SubmitRate;
use crate::server::notifier::Notifier;
use crate::server::peers::Peers;
use crate::server::runner::DockerHealth;
use axum::extract::FromRef;
use leptos::config::LeptosOptions;
use sqlx::PgPool;
use std::path::PathBuf;
use std::sync::Arc;

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
    pub logs_dir: PathBuf,
    /// This process's notifier: live pages and log followers subscribe to it.
    pub notifier: Notifier,
    /// Docker's state on this node, when this process runs jobs.
    pub docker: Option<Arc<DockerHealth>>,
    /// Live streams open per user (bounded).
    pub streams: StreamSlots,
    /// Log reads in progress (bounded per node and per user).
    pub log_reads: LogReads,
    /// The bound on concurrent password checks of sign-ins.
    pub hashing: HashGate,
    /// How often each user may submit and preview jobs (`--submit-rate-per-min`,
    /// `--preview-rate-per-min`).
    pub submit_rate: SubmitRate,
    /// A browser session ends this long after its sign-in, however active it is
    /// (`--session-lifetime-h`).
    pub session_lifetime: chrono::TimeDelta,
    /// Where the browser bundle is served from.
    pub site: SiteSource,
    /// This process's node and how it reaches the others (`gpuq serve`); `None` reads every log
    /// from `logs_dir`, as one process alone does.
    pub peers: Option<Peers>,
}

/// Where the browser bundle (JS, WASM, CSS, static files) comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SiteSource {
    /// The folder `leptos_options.site_root` on disk (`--site-root`, the tests).
    Dir,
    /// The bundle built into the binary (`gpuq serve` without `--site-root`).
    Embedded,
}

impl AppState {
    /// The state of one process: the bundle under `site_root` (see [`SiteSource`]), job logs under `logs_dir`, and the
    /// process's notifier (which the caller runs, see [`Notifier::run`]).
    pub fn new(
        pool: PgPool,
        site_root: &str,
        pass: PassConfig,
        logs_dir: PathBuf,
        notifier: Notifier,
    ) -> Self {
        let leptos_options = LeptosOptions::builder()
            .output_name("gpuq")
            .site_root(site_root)
            .site_pkg_dir("pkg")
            .build();
        AppState {
            pool,
            leptos_options,
            pass,
            logs_dir,
            notifier,
            docker: None,
            streams: StreamSlots::default(),
            log_reads: LogReads::default(),
            hashing: HashGate::per_core(),
            submit_rate: SubmitRate::default(),
            session_lifetime: chrono::TimeDelta::hours(
                crate::server::auth::DEFAULT_SESSION_LIFETIME_H,
            ),
            site: SiteSource::Dir,
            peers: None,
        }
    }
}

impl FromRef<AppState> for LeptosOptions {
    fn from_ref(state: &AppState) -> Self {
        state.leptos_options.clone()
    }
}
