//! The subcommands that run on the server side besides `gpuq serve` (`src/server/serve.rs`): the
//! host tools (`gpuq doctor`, `gpuq firewall`), `gpuq user add` and the benchmarks. The top of the
//! import layers, beside `serve` and `cli`: each turns flags into a call of a tool or the domain.

pub mod bench;
pub mod host;

use crate::model::Role;
use crate::server::auth::service;
use crate::server::config::{DbArgs, UserAddArgs};
use crate::server::db::{self, DbOptions};
use anyhow::{anyhow, Context, Result};
use std::io::BufRead;

/// What the database flags say, for [`db::open`].
pub(crate) fn db_options(args: &DbArgs) -> DbOptions {
    DbOptions {
        database_url: args.database_url.clone(),
        app_database_url: args.app_database_url.clone(),
        data_dir: args.data_dir.clone(),
        pg_user: args.pg_user.clone(),
        max_connections: args.db_max_connections,
    }
}

/// Opens the database, runs `work` on it, and closes it again whatever `work` answered.
pub(crate) async fn with_database<T, F>(
    args: &DbArgs,
    work: impl FnOnce(sqlx::PgPool) -> F,
) -> Result<T>
where
    F: std::future::Future<Output = Result<T>>,
{
    let database = db::open(&db_options(args)).await?;
    let result = work(database.pool.clone()).await;
    database.close().await?;
    result
}

/// `gpuq user add NAME --role ROLE`, password on standard input.
pub async fn user_add(args: UserAddArgs) -> Result<()> {
    let role: Role = args.role.parse().map_err(|e: String| anyhow!(e))?;
    let mut password = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut password)
        .context("reading the password from standard input")?;
    let password = password.trim_end_matches(['\r', '\n']);
    let row = with_database(&args.db, |pool| async move {
        service::add_user(&pool, &args.name, role, password)
            .await
            .map_err(|e| anyhow!("{e}"))
    })
    .await?;
    println!("created user `{}` with role {}", row.username, role);
    Ok(())
}
