//! What the domain's services share: the database, this process's notifier, the settings they
//! read and the bounds they keep. The web's state (`http::AppState`: how pages render, where the
//! browser bundle comes from) holds one and hands it to the domain; nothing here knows of the web.
//! A domain function that needs only the database takes the pool, not this.

use crate::server::admission::PassConfig;
use crate::server::auth::password::HashGate;
use crate::server::limits::{LogReads, StreamSlots, SubmitRate};
use crate::server::notifier::Notifier;
use crate::server::peers::Peers;
use crate::server::registries::SecretsKey;
use crate::server::runner::DockerHealth;
use crate::server::sessions::Sessions;
use sqlx::PgPool;
use std::path::PathBuf;
use std::sync::Arc;

/// The domain's context (cheap to clone: everything inside is a handle or a small setting).
#[derive(Clone, Debug)]
pub struct Ctx {
    /// The database.
    pub pool: PgPool,
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
    /// This process's node and how it reaches the others (`gpuq serve`); `None` reads every log
    /// from `logs_dir`, as one process alone does.
    pub peers: Option<Peers>,
    /// The key registry passwords are sealed under (`GPUQ_SECRETS_KEY` or
    /// `<data-dir>/secrets.key`); none by default, so nothing is stored.
    pub secrets: SecretsKey,
    /// Interactive sessions, where this process serves them (`--sessions-listen`,
    /// `--sessions-domain`); `None`: jobs with a port run, but no session opens here.
    pub sessions: Option<Sessions>,
}

impl Ctx {
    /// The context of one process with the default bounds: job logs under `logs_dir`, and the
    /// process's notifier (which the caller runs, see [`Notifier::run`]).
    pub fn new(pool: PgPool, pass: PassConfig, logs_dir: PathBuf, notifier: Notifier) -> Self {
        Ctx {
            pool,
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
            peers: None,
            secrets: SecretsKey::None,
            sessions: None,
        }
    }
}
