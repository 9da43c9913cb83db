//! The database: connection (external URL or embedded cluster), migrations, repositories.

pub mod embedded;
pub mod events;
pub mod gpus;
pub mod jobs;
pub mod logins;
pub mod manifest;
pub mod runs;
pub mod settings;
pub mod users;

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

/// Connects to the configured database (starting the embedded cluster if needed) and migrates it.
pub async fn open(args: &DbOptions) -> Result<Database> {
    let (options, embedded) = match &args.database_url {
        Some(url) => (
            PgConnectOptions::from_str(url).context("parsing --database-url")?,
            None,
        ),
        None => {
            let data_dir = args.data_dir.clone();
            let pg_user = args.pg_user.clone();
            let pg = tokio::task::spawn_blocking(move || EmbeddedPg::start(&data_dir, &pg_user))
                .await
                .context("embedded Postgres start-up task")?
                .context("starting the embedded Postgres")?;
            (pg.connect_options("gpuq"), Some(pg))
        }
    };
    let pool = PgPoolOptions::new()
        .max_connections(args.max_connections)
        .acquire_timeout(Duration::from_secs(10))
        .connect_with(options)
        .await
        .context("connecting to Postgres")?;
    migrate(&pool).await?;
    Ok(Database { pool, embedded })
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
