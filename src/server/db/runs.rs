//! Repository for the runner: claiming admitted jobs, recording launches and ends, giving cards back.

use super::events;
use crate::model::{JobEventKind, JobStatus, QUEUE_ORDER_SQL};
use chrono::{DateTime, Utc};
use serde_json::{json, Value};
use sqlx::{FromRow, PgExecutor, PgPool};
use uuid::Uuid;

/// A job this node is (or was) running.
#[derive(Debug, Clone, FromRow)]
pub struct RunRow {
    /// Job.
    pub id: Uuid,
    /// Launch attempt (container `gpuq-<id>-<attempt>`).
    pub attempt: i32,
    /// `starting` or `running` (or `admitted` right after a claim is undone).
    pub status: JobStatus,
    /// The parsed spec, raw form.
    pub spec: Value,
    /// Run-time limit.
    pub timeout_s: i64,
    /// Container, once created.
    pub container_id: Option<String>,
    /// Absolute deadline, once created.
    pub deadline_at: Option<DateTime<Utc>>,
    /// The owner or an admin asked to stop it.
    pub cancel_requested_at: Option<DateTime<Utc>>,
}

const RUN_COLUMNS: &str =
    "id, attempt, status, spec, timeout_s, container_id, deadline_at, cancel_requested_at";

/// Atomically takes up to `limit` admitted jobs of this node (no two processes take the same one);
/// with `epoch`, only while the node's row still holds that lease and is not forgotten.
pub async fn claim(
    pool: &PgPool,
    node: &str,
    epoch: Option<i64>,
    limit: i64,
) -> sqlx::Result<Vec<RunRow>> {
    let mut tx = pool.begin().await?;
    let rows: Vec<RunRow> = sqlx::query_as(&format!(
        "UPDATE jobs SET status = 'starting', attempt = attempt + 1 \
         WHERE id IN (SELECT id FROM jobs WHERE status = 'admitted' AND node = $1 \
                      ORDER BY {QUEUE_ORDER_SQL} FOR UPDATE SKIP LOCKED LIMIT $2) \
           AND ($3::bigint IS NULL OR EXISTS (SELECT 1 FROM nodes n \
                WHERE n.name = $1 AND n.epoch = $3 AND n.forgotten_at IS NULL)) \
         RETURNING {RUN_COLUMNS}"
    ))
    .bind(node)
    .bind(limit)
    .bind(epoch)
    .fetch_all(&mut *tx)
    .await?;
    for r in &rows {
        events::job_event(
            &mut *tx,
            r.id,
            &actor(node),
            JobEventKind::Starting,
            json!({ "attempt": r.attempt }),
        )
        .await?;
    }
    tx.commit().await?;
    Ok(rows)
}

/// The runner's name in the audit trail.
pub fn actor(node: &str) -> String {
    format!("runner@{node}")
}

/// A card granted to a job, for building its fence.
#[derive(Debug, Clone, FromRow)]
pub struct LiveGrant {
    /// Card.
    pub gpu_uuid: Uuid,
    /// Device index on the node.
    pub idx: i32,
    /// A simulated card (fenced through its device node).
    pub simulated: bool,
    /// MiB committed to the job on this card.
    pub vram_mib: i64,
    /// The card's total memory, MiB.
    pub total_mib: i64,
    /// The job holds the card exclusively.
    pub exclusive: bool,
}

/// The live cards of a job.
pub async fn live_grants(db: impl PgExecutor<'_>, job: Uuid) -> sqlx::Result<Vec<LiveGrant>> {
    sqlx::query_as(
        "SELECT r.gpu_uuid, g.idx, g.simulated, r.vram_mib, g.total_mib, r.exclusive \
         FROM reservations r JOIN gpus g ON g.uuid = r.gpu_uuid \
         WHERE r.job_id = $1 AND r.released_at IS NULL ORDER BY g.idx",
    )
    .bind(job)
    .fetch_all(db)
    .await
}

/// Records the created container and the deadline. Returns false if the job left `starting`.
pub async fn set_created(
    pool: &PgPool,
    job: Uuid,
    container: &str,
    log_path: &str,
    deadline: DateTime<Utc>,
) -> sqlx::Result<bool> {
    let r = sqlx::query(
        "UPDATE jobs SET container_id = $2, log_path = $3, deadline_at = $4 \
         WHERE id = $1 AND status = 'starting'",
    )
    .bind(job)
    .bind(container)
    .bind(log_path)
    .bind(deadline)
    .execute(pool)
    .await?;
    Ok(r.rows_affected() == 1)
}

/// `starting` → `running`. Returns false if the job left `starting`.
///
/// Returns the job's submit → running time in seconds (Postgres's clock), or `None` when it was no
/// longer starting.
pub async fn set_running(pool: &PgPool, job: Uuid, node: &str) -> sqlx::Result<Option<f64>> {
    leave_starting(
        pool,
        job,
        node,
        "status = 'running', started_at = clock_timestamp()",
        (JobEventKind::Started, json!({})),
        Some(JobStatus::Running),
    )
    .await
}

/// Gives a claimed job back to `admitted` (its cards stay reserved) so a later attempt launches it:
/// for launches interrupted by Docker being unreachable or gpuq stopping.
pub async fn unclaim(pool: &PgPool, job: Uuid, node: &str, why: &str) -> sqlx::Result<()> {
    leave_starting(
        pool,
        job,
        node,
        "status = 'admitted', container_id = NULL",
        (JobEventKind::LaunchDeferred, json!({ "reason": why })),
        None,
    )
    .await
    .map(drop)
}

/// Moves a `starting` job on with `set` (a fixed SET list) and records the event, in one
/// transaction; with `tell`, the live pages (and runners) hear of the new status. An unclaimed job
/// is not announced: that would wake the runner straight into the failure it just backed off from.
/// Returns false if the job had left `starting`.
async fn leave_starting(
    pool: &PgPool,
    job: Uuid,
    node: &str,
    set: &'static str,
    (kind, detail): (JobEventKind, Value),
    tell: Option<JobStatus>,
) -> sqlx::Result<Option<f64>> {
    let mut tx = pool.begin().await?;
    // What the job has waited since its submission, read in the same statement (a launch must
    // not cost another query for its metric).
    let waited: Option<f64> = sqlx::query_scalar(&format!(
        "UPDATE jobs SET {set} WHERE id = $1 AND status = 'starting' \
         RETURNING extract(epoch FROM coalesce(started_at, clock_timestamp()) - created_at)::float8"
    ))
    .bind(job)
    .fetch_optional(&mut *tx)
    .await?;
    if waited.is_some() {
        events::job_event(&mut *tx, job, &actor(node), kind, detail).await?;
        if let Some(to) = tell {
            events::job_changed(&mut *tx, job, to).await?;
        }
    }
    tx.commit().await?;
    Ok(waited)
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ending {
    /// An ending: `succeeded`, `failed`, `timed_out` or `cancelled`.
    pub status: JobStatus,
    /// Container exit code, when it ran.
    pub exit_code: Option<i32>,
    /// Why, in plain words (None for a plain success).
    pub reason: Option<String>,
}

/// Records the end of a run and gives its cards back, in one transaction; wakes the schedulers so
/// the next pass admits at once. Returns false if the job was no longer starting or running.
pub async fn finish(pool: &PgPool, job: Uuid, node: &str, end: &Ending) -> sqlx::Result<bool> {
    let mut tx = pool.begin().await?;
    let r = sqlx::query(
        "UPDATE jobs SET status = $2, exit_code = $3, status_reason = $4, \
           finished_at = clock_timestamp(), released_at = clock_timestamp() \
         WHERE id = $1 AND status IN ('starting', 'running')",
    )
    .bind(job)
    .bind(end.status)
    .bind(end.exit_code)
    .bind(&end.reason)
    .execute(&mut *tx)
    .await?;
    if r.rows_affected() == 0 {
        return Ok(false);
    }
    release_cards(&mut *tx, job).await?;
    let detail = json!({ "exit_code": end.exit_code, "reason": end.reason });
    let kind = JobEventKind::ending(end.status).unwrap_or(JobEventKind::Failed);
    events::job_event(&mut *tx, job, &actor(node), kind, detail).await?;
    events::job_event(
        &mut *tx,
        job,
        &actor(node),
        JobEventKind::Released,
        json!({}),
    )
    .await?;
    events::wake(&mut *tx, "finish").await?;
    events::job_changed(&mut *tx, job, end.status).await?;
    tx.commit().await?;
    Ok(true)
}

/// Releases a job's live reservations and takes their VRAM off its cards' `reserved_mib`, in the
/// caller's transaction: the one path that gives cards back when a run ends (here, and when an admin
/// forgets a lost node), so the ledger stays consistent.
pub async fn release_cards(db: impl PgExecutor<'_>, job: Uuid) -> sqlx::Result<()> {
    sqlx::query(
        "WITH rel AS (UPDATE reservations SET released_at = now() \
                      WHERE job_id = $1 AND released_at IS NULL RETURNING gpu_uuid, vram_mib) \
         UPDATE gpus g SET reserved_mib = g.reserved_mib - s.total \
         FROM (SELECT gpu_uuid, sum(vram_mib) AS total FROM rel GROUP BY gpu_uuid) s \
         WHERE g.uuid = s.gpu_uuid",
    )
    .bind(job)
    .execute(db)
    .await?;
    Ok(())
}

/// Jobs this node has claimed and not finished.
pub async fn active_on(pool: &PgPool, node: &str) -> sqlx::Result<Vec<RunRow>> {
    sqlx::query_as(&format!(
        "SELECT {RUN_COLUMNS} FROM jobs WHERE node = $1 AND status IN ('starting', 'running')"
    ))
    .bind(node)
    .fetch_all(pool)
    .await
}

/// Whether someone asked to stop this job.
pub async fn cancel_requested(pool: &PgPool, job: Uuid) -> sqlx::Result<bool> {
    sqlx::query_scalar("SELECT cancel_requested_at IS NOT NULL FROM jobs WHERE id = $1")
        .bind(job)
        .fetch_one(pool)
        .await
}

/// Which of these jobs, supervised by `node`, must be stopped: a stop was asked for, or the job
/// is no longer starting or running on `node` (an admin forgot the node while this process was
/// frozen or cut off, and the job ended `node_lost` meanwhile).
pub async fn to_stop_among(pool: &PgPool, jobs: &[Uuid], node: &str) -> sqlx::Result<Vec<Uuid>> {
    sqlx::query_scalar(
        "SELECT id FROM jobs WHERE id = ANY($1) AND (cancel_requested_at IS NOT NULL \
           OR status NOT IN ('starting', 'running') OR node IS DISTINCT FROM $2)",
    )
    .bind(jobs)
    .bind(node)
    .fetch_all(pool)
    .await
}
