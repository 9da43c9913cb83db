//! Repository for idle reclaim (docs/admission.md#idle-cards): what judging the jobs holding cards
//! (`vram::held_on`) records: the flag and its clearing as job events, the owner's
//! notification, and gpuq's stop with the cause `idle`.

use super::{events, lifecycle};
use crate::model::{JobEventKind, JobStatus, StopCause};
use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::{PgPool, Postgres, Transaction};
use uuid::Uuid;

/// Records the flag: an `idle_flagged` event with `detail`, the owner's `idle` notifications (those
/// who asked for them), and a change of the job for its page. Written once per spell.
pub async fn flag(
    tx: &mut Transaction<'_, Postgres>,
    job: Uuid,
    detail: Value,
) -> sqlx::Result<()> {
    events::job_event(&mut **tx, job, "gpuq", JobEventKind::IdleFlagged, detail).await?;
    // The outbox rows of an `idle` notification, as the status trigger writes those of an end.
    sqlx::query(
        "INSERT INTO notification_outbox (job_id, user_id, event, channel, target) \
         SELECT j.id, s.user_id, 'idle', 'email', s.email \
         FROM jobs j JOIN notification_settings s ON s.user_id = j.owner_id \
         WHERE j.id = $1 AND 'idle' = ANY (s.events) AND s.email IS NOT NULL",
    )
    .bind(job)
    .execute(&mut **tx)
    .await?;
    sqlx::query(
        "INSERT INTO notification_outbox (job_id, user_id, event, channel, target, format, secret) \
         SELECT j.id, s.user_id, 'idle', 'webhook', w.url, w.format, w.secret \
         FROM jobs j JOIN notification_settings s ON s.user_id = j.owner_id \
              JOIN notification_webhooks w ON w.user_id = j.owner_id \
         WHERE j.id = $1 AND 'idle' = ANY (s.events) ORDER BY w.position",
    )
    .bind(job)
    .execute(&mut **tx)
    .await?;
    // Wakes the job's page and the delivery workers when this commits; the job still runs.
    events::job_changed(&mut **tx, job, JobStatus::Running).await
}

/// Records that a flagged job got busy again: an `idle_cleared` event.
pub async fn clear(
    tx: &mut Transaction<'_, Postgres>,
    job: Uuid,
    detail: Value,
) -> sqlx::Result<()> {
    events::job_event(&mut **tx, job, "gpuq", JobEventKind::IdleCleared, detail).await?;
    events::job_changed(&mut **tx, job, JobStatus::Running).await
}

/// Asks the runner to stop a job whose cards stayed idle, ending `failed` with `reason` and the
/// cause `idle`. Returns false when the job is no longer started or a stop was already asked for.
pub async fn request_stop(
    tx: &mut Transaction<'_, Postgres>,
    job: Uuid,
    reason: &str,
    detail: Value,
) -> sqlx::Result<bool> {
    lifecycle::request_stop(tx, job, StopCause::Idle, reason, JobEventKind::Idle, detail).await
}

/// GPU-hours reclaimed from idle jobs per owner, for the jobs stopped idle in `[from, to)`:
/// `(owner name, jobs, GPU-hours)`, most first. A stopped job reclaims the share of the cards it
/// held × the time between its end and its deadline (start + timeout): what it could still have
/// held had it been left to run idle.
pub async fn reclaimed(
    pool: &PgPool,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> sqlx::Result<Vec<(String, i64, f64)>> {
    sqlx::query_as(
        "SELECT u.username, count(*)::bigint, coalesce(sum( \
                job_card_share(j.id, j.started_at, j.finished_at) \
                * greatest(0, extract(epoch FROM j.started_at + make_interval(secs => j.timeout_s) \
                                                 - j.finished_at)) / 3600.0), 0)::float8 \
         FROM jobs j JOIN users u ON u.id = j.owner_id \
         WHERE j.stop_cause = 'idle' AND j.finished_at >= $1 AND j.finished_at < $2 \
           AND j.started_at IS NOT NULL \
         GROUP BY u.username ORDER BY 3 DESC, 1",
    )
    .bind(from)
    .bind(to)
    .fetch_all(pool)
    .await
}

/// Idle flags raised and idle stops made, over the whole database (for `/metrics`).
pub async fn counts(pool: &PgPool) -> sqlx::Result<(i64, i64)> {
    sqlx::query_as(
        "SELECT (SELECT count(*) FROM job_events WHERE kind = 'idle_flagged'), \
                (SELECT count(*) FROM jobs WHERE stop_cause = 'idle' AND status = 'failed')",
    )
    .fetch_one(pool)
    .await
}
