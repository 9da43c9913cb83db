//! The append-only audit trails and the NOTIFY channels.

use crate::model::{AuditKind, JobEventKind, JobStatus, LiveEvent};
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
    kind: JobEventKind,
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
    kind: AuditKind,
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

/// Pokes the schedulers of every gpuq process (delivered at commit). `why` is for whoever reads
/// the notifications; nothing depends on it.
pub async fn wake(db: impl PgExecutor<'_>, why: &str) -> sqlx::Result<()> {
    notify(db, WAKE_CHANNEL, why).await
}

/// Tells every gpuq process (its runner, its live pages) what changed (delivered at commit).
pub async fn announce(db: impl PgExecutor<'_>, event: &LiveEvent) -> sqlx::Result<()> {
    let payload = serde_json::to_string(event).map_err(|e| sqlx::Error::Encode(Box::new(e)))?;
    notify(db, EVENTS_CHANNEL, &payload).await
}

async fn notify(db: impl PgExecutor<'_>, channel: &str, payload: &str) -> sqlx::Result<()> {
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
    /// What happened.
    pub kind: JobEventKind,
    /// Details.
    pub detail: Value,
}

/// One row of the general audit trail.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct AuditRow {
    /// When.
    pub at: chrono::DateTime<chrono::Utc>,
    /// Who.
    pub actor: String,
    /// What kind of change.
    pub kind: AuditKind,
    /// Which thing.
    pub subject: String,
    /// Details.
    pub detail: Value,
}

/// The newest `limit` audit rows of these kinds, newest first.
pub async fn audit_of_kinds(
    db: impl PgExecutor<'_>,
    kinds: &[AuditKind],
    limit: i64,
) -> sqlx::Result<Vec<AuditRow>> {
    let kinds: Vec<&str> = kinds.iter().map(|k| k.as_str()).collect();
    sqlx::query_as(
        "SELECT at, actor, kind, subject, detail FROM audit_events \
         WHERE kind = ANY($1) ORDER BY id DESC LIMIT $2",
    )
    .bind(kinds)
    .bind(limit)
    .fetch_all(db)
    .await
}

/// When the last admission pass (of any process) finished, if one ever did.
pub async fn last_pass_at(
    db: impl PgExecutor<'_>,
) -> sqlx::Result<Option<chrono::DateTime<chrono::Utc>>> {
    sqlx::query_scalar(
        "SELECT last_pass_at FROM scheduler_state WHERE id = 1 AND last_pass_at > '-infinity'",
    )
    .fetch_optional(db)
    .await
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
pub async fn job_changed(
    db: impl PgExecutor<'_>,
    job_id: Uuid,
    status: JobStatus,
) -> sqlx::Result<()> {
    announce(db, &LiveEvent::job(job_id, status)).await
}

/// Ends an admin's change that decides admission: audits it, wakes every scheduler, commits.
pub async fn commit_audited(
    mut tx: sqlx::Transaction<'_, sqlx::Postgres>,
    actor: &str,
    kind: AuditKind,
    subject: &str,
    detail: Value,
) -> sqlx::Result<()> {
    audit(&mut *tx, actor, kind, subject, detail).await?;
    wake(&mut *tx, kind.as_str()).await?;
    let event = LiveEvent::Changed {
        what: kind,
        subject: subject.to_owned(),
    };
    announce(&mut *tx, &event).await?;
    tx.commit().await
}
