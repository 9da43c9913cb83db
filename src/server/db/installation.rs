//! This installation's identity (the `installation_id` settings row, made by its migration), and
//! which job ids this database knows: together they decide which containers on a shared dockerd
//! are this installation's to settle.

use sqlx::PgExecutor;
use std::collections::HashSet;
use uuid::Uuid;

const INSTALLATION_ID: &str = "installation_id";

/// The installation's id, as its containers are labelled with it.
pub async fn id(db: impl PgExecutor<'_>) -> sqlx::Result<String> {
    let value: serde_json::Value = sqlx::query_scalar("SELECT value FROM settings WHERE key = $1")
        .bind(INSTALLATION_ID)
        .fetch_one(db)
        .await?;
    match value.as_str() {
        Some(id) if !id.is_empty() => Ok(id.to_owned()),
        _ => Err(sqlx::Error::Decode(
            format!("settings row {INSTALLATION_ID} is not a non-empty string: {value}").into(),
        )),
    }
}

/// Which of `jobs` this database has a record of (in any status).
pub async fn known_jobs(db: impl PgExecutor<'_>, jobs: &[Uuid]) -> sqlx::Result<HashSet<Uuid>> {
    if jobs.is_empty() {
        return Ok(HashSet::new());
    }
    let known: Vec<Uuid> = sqlx::query_scalar("SELECT id FROM jobs WHERE id = ANY($1)")
        .bind(jobs)
        .fetch_all(db)
        .await?;
    Ok(known.into_iter().collect())
}
