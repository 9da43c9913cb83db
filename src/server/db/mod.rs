//! The database: connection (external URL or embedded cluster), migrations, repositories.

pub mod budgets;
pub mod embedded;
pub mod events;
pub mod gpu_hours;
pub mod gpus;
pub mod idle;
pub mod image_gc;
pub mod images;
pub mod installation;
pub mod job_uids;
pub mod jobs;
pub mod lifecycle;
pub mod logins;
pub mod manifest;
pub mod nodes;
pub mod notifications;
pub mod registries;
pub mod runs;
pub mod sessions;
pub mod settings;
pub mod teams;
pub mod users;
pub mod vram;
pub mod vram_stats;

use anyhow::{Context, Result};
use embedded::EmbeddedPg;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::PgPool;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

/// An open pool and, when gpuq runs its own cluster, the handle that stops it.
pub struct Database {
    /// Pooled connections for every request and task.
    pub pool: PgPool,
    /// The embedded cluster, when no URL was given.
    pub embedded: Option<EmbeddedPg>,
}

/// Where the database is: an external server, or the embedded cluster under a data directory.
#[derive(Debug, Clone)]
pub struct DbOptions {
    /// Postgres URL; without it gpuq runs its own cluster under `<data_dir>/pg`.
    pub database_url: Option<String>,
    /// With an external database: the URL of the less privileged role the server runs as.
    pub app_database_url: Option<String>,
    /// gpuq's state directory (the embedded cluster lives in `pg/`).
    pub data_dir: PathBuf,
    /// Unprivileged system user that runs the embedded Postgres when gpuq runs as root.
    pub pg_user: String,
    /// Largest number of pooled connections.
    pub max_connections: u32,
}

impl Database {
    /// Closes the pool, then stops the embedded cluster if this process started it.
    pub async fn close(mut self) -> Result<()> {
        self.pool.close().await;
        if let Some(mut pg) = self.embedded.take() {
            tokio::task::spawn_blocking(move || pg.stop())
                .await
                .context("embedded Postgres shut-down task")??;
        }
        Ok(())
    }
}

/// The role the server connects as inside the embedded cluster: not the schema's owner, so it
/// cannot alter tables, disable triggers or change the append-only audit trails.
pub const APP_ROLE: &str = "gpuq_app";

/// How long Postgres lets one of gpuq's sessions sit idle inside a transaction before it ends the
/// session. gpuq never waits between the statements of a transaction, so only a process that
/// stalls in one (frozen by SIGSTOP, swapped out, cut off) trips it; without it that process would
/// hold the admission lock or its rows' locks, and every other node's passes and an admin's forget
/// would wait for it forever.
pub const IDLE_IN_TRANSACTION: &str = "10s";

/// Connects to the configured database (starting the embedded cluster if needed), migrates it as
/// the schema's owner, and opens the pool as the application's role where there is one.
pub async fn open(args: &DbOptions) -> Result<Database> {
    let (owner, app, embedded) = match &args.database_url {
        Some(url) => {
            let owner = PgConnectOptions::from_str(url).context("parsing --database-url")?;
            let app = match &args.app_database_url {
                Some(app) => {
                    Some(PgConnectOptions::from_str(app).context("parsing --app-database-url")?)
                }
                None => None,
            };
            (owner, app, None)
        }
        None => {
            let data_dir = args.data_dir.clone();
            let pg_user = args.pg_user.clone();
            let pg = tokio::task::spawn_blocking(move || EmbeddedPg::start(&data_dir, &pg_user))
                .await
                .context("embedded Postgres start-up task")?
                .context("starting the embedded Postgres")?;
            let owner = pg.connect_options("gpuq");
            let app = owner.clone().username(APP_ROLE);
            (owner, Some(app), Some(pg))
        }
    };
    let owner_pool = PgPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(Duration::from_secs(10))
        .connect_with(owner.clone())
        .await
        .context("connecting to Postgres")?;
    let password = embedded.as_ref().map(|pg| pg.password().to_owned());
    let prepared = prepare(&owner_pool, app.as_ref(), password.as_deref()).await;
    owner_pool.close().await;
    prepared?;
    let app = app
        .unwrap_or(owner)
        .options([("idle_in_transaction_session_timeout", IDLE_IN_TRANSACTION)]);
    let pool = PgPoolOptions::new()
        .max_connections(args.max_connections)
        .acquire_timeout(Duration::from_secs(10))
        .connect_with(app)
        .await
        .context("connecting to Postgres as the application's role")?;
    Ok(Database { pool, embedded })
}

/// As the schema's owner: migrates, then makes (embedded, with the cluster's `password`) and
/// grants the application's role.
async fn prepare(
    owner: &PgPool,
    app: Option<&PgConnectOptions>,
    embedded_password: Option<&str>,
) -> Result<()> {
    migrate(owner).await?;
    match app {
        Some(app) => {
            if let Some(password) = embedded_password {
                create_role(owner, APP_ROLE, password).await?;
            }
            grant_app_role(owner, app.get_username()).await
        }
        None => {
            warn_if_owner(owner).await;
            Ok(())
        }
    }
}

/// Creates a login role without privileges of its own, if it does not exist yet, and gives it
/// `password` (the embedded cluster lets no role in without one).
async fn create_role(owner: &PgPool, role: &str, password: &str) -> Result<()> {
    let ident = role_ident(role)?;
    if !password.chars().all(|c| c.is_ascii_alphanumeric()) {
        anyhow::bail!("the password of the database role `{role}` must be letters and digits");
    }
    sqlx::query(&format!(
        "DO $$ BEGIN
           IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{role}') THEN
             CREATE ROLE {ident} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS;
           END IF;
         END $$"
    ))
    .execute(owner)
    .await
    .with_context(|| format!("creating the database role `{role}`"))?;
    sqlx::query(&format!("ALTER ROLE {ident} PASSWORD '{password}'"))
        .execute(owner)
        .await
        .with_context(|| format!("setting the password of the database role `{role}`"))?;
    Ok(())
}

/// Grants `role` what the running server needs: reading and writing its tables, appending to the
/// audit trails (`job_events`, `audit_events`) and nothing more. Not owning the tables, it can
/// neither alter them nor disable their append-only triggers. Run at every start, so tables that
/// later migrations add are covered.
pub async fn grant_app_role(owner: &PgPool, role: &str) -> Result<()> {
    let r = role_ident(role)?;
    let mut tx = owner.begin().await?;
    for stmt in [
        format!("GRANT USAGE ON SCHEMA public, tower_sessions TO {r}"),
        format!("GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {r}"),
        format!(
            "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA tower_sessions TO {r}"
        ),
        format!("GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA public TO {r}"),
        format!("REVOKE UPDATE, DELETE, TRUNCATE ON job_events, audit_events FROM {r}"),
        format!("REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON _sqlx_migrations FROM {r}"),
    ] {
        sqlx::query(&stmt)
            .execute(&mut *tx)
            .await
            .with_context(|| format!("granting the database role `{role}`: {stmt}"))?;
    }
    tx.commit().await?;
    Ok(())
}

/// A role name as a quoted SQL identifier; only plain names are accepted.
fn role_ident(role: &str) -> Result<String> {
    let plain = !role.is_empty()
        && role.len() <= 63
        && role
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        && !role.starts_with(|c: char| c.is_ascii_digit());
    if !plain {
        anyhow::bail!("database role `{role}`: use lower-case letters, digits and `_` only");
    }
    Ok(format!("\"{role}\""))
}

/// With one URL for everything, the server runs as the schema's owner, which could disable the
/// audit trails' triggers: say so once, with the fix.
async fn warn_if_owner(pool: &PgPool) {
    let owns: Option<bool> = sqlx::query_scalar(
        "SELECT rolsuper OR pg_has_role(current_user, (SELECT relowner FROM pg_class
                WHERE oid = 'audit_events'::regclass), 'USAGE')
           FROM pg_roles WHERE rolname = current_user",
    )
    .fetch_optional(pool)
    .await
    .ok()
    .flatten();
    if owns == Some(true) {
        tracing::warn!(
            "the server connects as the owner of the audit tables, which can disable their \
             append-only triggers; give it its own role with --app-database-url (see \
             docs/security.md, \"The database role\")"
        );
    }
}

/// Brings the schema up to date. Any failure is fatal: gpuq never runs on a schema it does not know.
pub async fn migrate(pool: &PgPool) -> Result<()> {
    sqlx::migrate!("./migrations")
        .run(pool)
        .await
        .context("running database migrations")?;
    session_store(pool)
        .migrate()
        .await
        .context("creating the session store table")?;
    Ok(())
}

/// The Postgres-backed session store (its own schema, `tower_sessions`).
pub fn session_store(pool: &PgPool) -> tower_sessions_sqlx_store::PostgresStore {
    tower_sessions_sqlx_store::PostgresStore::new(pool.clone())
}
