//! Repository for the runner: what it reads of its jobs, their cards, and giving cards back. Its
//! status changes (claim, running, unclaim, the end) are in [`super::lifecycle`].

use crate::model::JobStatus;
use chrono::{DateTime, Utc};
use serde_json::Value;
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
    /// Its index in its array, if it is an array's element.
    pub array_index: Option<i32>,
}

pub(super) const RUN_COLUMNS: &str =
    "id, attempt, status, spec, timeout_s, container_id, deadline_at, cancel_requested_at, \
     array_index";

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
