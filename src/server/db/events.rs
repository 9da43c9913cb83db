//! The append-only audit trails and the NOTIFY channels.

use serde_json::Value;
use sqlx::PgExecutor;
use uuid::Uuid;

/// Channel that wakes scheduling passes (submit, finish, cancel, manifest or card change).
pub const WAKE_CHANNEL: &str = "gpuq_wake";
/// Channel telling listeners (runners, the live UI) that jobs or cards changed.
pub const EVENTS_CHANNEL: &str = "gpuq_events";

/// Appends one event to a job's trail.
pub async fn job_event(
    db: impl PgExecutor<'_>,
    job_id: Uuid,
    actor: &str,
    kind: &str,
    detail: Value,
) -> sqlx::Result<()> {
    sqlx::query("INSERT INTO job_events (job_id, actor, kind, detail) VALUES ($1, $2, $3, $4)")
        .bind(job_id)
        .bind(actor)
        .bind(kind)
        .bind(detail)
        .execute(db)
        .await?;
    Ok(())
}

/// Appends one event to the general audit trail (manifest, cards, settings).
pub async fn audit(
    db: impl PgExecutor<'_>,
    actor: &str,
    kind: &str,
    subject: &str,
    detail: Value,
) -> sqlx::Result<()> {
    sqlx::query("INSERT INTO audit_events (actor, kind, subject, detail) VALUES ($1, $2, $3, $4)")
        .bind(actor)
        .bind(kind)
        .bind(subject)
        .bind(detail)
        .execute(db)
        .await?;
    Ok(())
}

/// Pokes the schedulers of every gpuq process (delivered at commit).
pub async fn wake(db: impl PgExecutor<'_>, why: &str) -> sqlx::Result<()> {
    notify(db, WAKE_CHANNEL, why).await
}

/// Sends a notification on a channel (delivered at commit).
pub async fn notify(db: impl PgExecutor<'_>, channel: &str, payload: &str) -> sqlx::Result<()> {
    sqlx::query("SELECT pg_notify($1, $2)")
        .bind(channel)
        .bind(payload)
        .execute(db)
        .await?;
    Ok(())
}

/// One event of a job's trail.
#[derive(Debug, Clone, sqlx::FromRow, serde::Serialize)]
pub struct JobEventRow {
    /// When.
    pub at: chrono::DateTime<chrono::Utc>,
    /// Who (a user name, `scheduler`, `runner@node`).
    pub actor: String,
    /// What (`submitted`, `admitted`, `cancelled`, …).
    pub kind: String,
    /// Details.
    pub detail: Value,
}

/// A job's trail, oldest first.
pub async fn job_events_of(
    db: impl PgExecutor<'_>,
    job_id: Uuid,
) -> sqlx::Result<Vec<JobEventRow>> {
    sqlx::query_as("SELECT at, actor, kind, detail FROM job_events WHERE job_id = $1 ORDER BY id")
        .bind(job_id)
        .fetch_all(db)
        .await
}

/// Tells listeners (runners, live pages) that a job changed status (delivered at commit).
pub async fn job_changed(db: impl PgExecutor<'_>, job_id: Uuid, status: &str) -> sqlx::Result<()> {
    let payload = serde_json::json!({ "kind": "job", "job_id": job_id, "status": status });
    notify(db, EVENTS_CHANNEL, &payload.to_string()).await
}

/// Ends an admin's change that decides admission: audits it, wakes every scheduler, commits.
pub async fn commit_audited(
    mut tx: sqlx::Transaction<'_, sqlx::Postgres>,
    actor: &str,
    kind: &str,
    subject: &str,
    detail: Value,
) -> sqlx::Result<()> {
    audit(&mut *tx, actor, kind, subject, detail).await?;
    wake(&mut *tx, kind).await?;
    let payload = serde_json::json!({ "kind": "changed", "what": kind, "subject": subject });
    notify(&mut *tx, EVENTS_CHANNEL, &payload.to_string()).await?;
    tx.commit().await
}

/// A LISTEN connection on its own one-connection pool: a listener holds its connection for as long
/// as it lives, and must not take one from the pool requests and passes share.
pub async fn listener(
    pool: &sqlx::PgPool,
    channel: &str,
) -> sqlx::Result<sqlx::postgres::PgListener> {
    let own = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect_with((*pool.connect_options()).clone())
        .await?;
    let mut l = sqlx::postgres::PgListener::connect_with(&own).await?;
    l.listen(channel).await?;
    Ok(l)
}
