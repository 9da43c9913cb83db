//! Repository for observed VRAM: what each running job holds on each of its cards, the record it
//! leaves, simulated per-job usage, and gpuq's own stops of jobs that overran.

use super::sessions::IS_SESSION;
use super::{events, lifecycle};
use crate::model::{JobEventKind, JobStatus, StopCause};
use serde_json::json;
use sqlx::{FromRow, PgExecutor, PgPool, Postgres, Transaction};
use uuid::Uuid;

/// One card held by a job that is starting or running on this node.
#[derive(Debug, Clone, FromRow)]
pub struct HeldCard {
    /// Job.
    pub job_id: Uuid,
    /// Its container, once created (Docker's full id).
    pub container_id: Option<String>,
    /// Card.
    pub gpu_uuid: Uuid,
    /// Its commitment on the card (the live reservation), MiB.
    pub committed_mib: i64,
    /// A stop was already asked for (by a person or by gpuq).
    pub stopping: bool,
    /// Its workload type (idle judging never judges an exempt type).
    pub workload: Option<String>,
    /// An interactive session (a job with a `port`): its idleness is the session watcher's
    /// (traffic and GPU activity, `session_idle_min`); idle judging only reports its GPU activity.
    pub session: bool,
}

/// The cards held by this node's starting and running jobs.
pub async fn held_on(pool: &PgPool, node: &str) -> sqlx::Result<Vec<HeldCard>> {
    sqlx::query_as(&format!(
        "SELECT j.id AS job_id, j.container_id, r.gpu_uuid, r.vram_mib AS committed_mib, \
                j.cancel_requested_at IS NOT NULL AS stopping, j.workload, {IS_SESSION} AS session \
         FROM jobs j JOIN reservations r ON r.job_id = j.id AND r.released_at IS NULL \
         WHERE j.node = $1 AND j.status IN ('starting', 'running') ORDER BY j.seq, r.gpu_uuid",
    ))
    .bind(node)
    .fetch_all(pool)
    .await
}

/// A reading written for one (job, card), and what the record says after it.
#[derive(Debug, Clone, FromRow)]
pub struct Recorded {
    /// Job.
    pub job_id: Uuid,
    /// Card.
    pub gpu_uuid: Uuid,
    /// Consecutive readings above the commitment, this one included.
    pub over_samples: i32,
}

/// Writes one reading per (job, card): `used_mib` now, the peak, the count of consecutive readings
/// above the commitment (reset by one within it).
pub async fn record(
    tx: &mut Transaction<'_, Postgres>,
    readings: &[(Uuid, Uuid, i64, i64)],
) -> sqlx::Result<Vec<Recorded>> {
    if readings.is_empty() {
        return Ok(Vec::new());
    }
    let jobs: Vec<Uuid> = readings.iter().map(|r| r.0).collect();
    let gpus: Vec<Uuid> = readings.iter().map(|r| r.1).collect();
    let committed: Vec<i64> = readings.iter().map(|r| r.2).collect();
    let used: Vec<i64> = readings.iter().map(|r| r.3).collect();
    sqlx::query_as(
        "INSERT INTO job_vram AS v (job_id, gpu_uuid, committed_mib, used_mib, peak_mib, \
                                    over_samples, sampled_at) \
         SELECT job, gpu, committed, used, used, (used > committed)::int, clock_timestamp() \
         FROM unnest($1::uuid[], $2::uuid[], $3::bigint[], $4::bigint[]) AS t(job, gpu, committed, used) \
         ON CONFLICT (job_id, gpu_uuid) DO UPDATE SET \
           committed_mib = EXCLUDED.committed_mib, used_mib = EXCLUDED.used_mib, \
           peak_mib = greatest(v.peak_mib, EXCLUDED.used_mib), \
           over_samples = CASE WHEN EXCLUDED.used_mib > EXCLUDED.committed_mib \
                               THEN v.over_samples + 1 ELSE 0 END, \
           sampled_at = EXCLUDED.sampled_at \
         RETURNING job_id, gpu_uuid, over_samples",
    )
    .bind(&jobs)
    .bind(&gpus)
    .bind(&committed)
    .bind(&used)
    .fetch_all(&mut **tx)
    .await
}

/// Records that a job stayed above its commitment on a card: `warned_at` (kept from the first
/// time) and a `vram_over_commitment` event with the figures.
pub async fn warn(
    tx: &mut Transaction<'_, Postgres>,
    job: Uuid,
    gpu: Uuid,
    committed_mib: i64,
    used_mib: i64,
    samples: i32,
) -> sqlx::Result<()> {
    sqlx::query(
        "UPDATE job_vram SET warned_at = coalesce(warned_at, clock_timestamp()) \
         WHERE job_id = $1 AND gpu_uuid = $2",
    )
    .bind(job)
    .bind(gpu)
    .execute(&mut **tx)
    .await?;
    events::job_event(
        &mut **tx,
        job,
        "gpuq",
        JobEventKind::VramOverCommitment,
        json!({
            "gpu": crate::model::gpu_id(&gpu),
            "committed_mib": committed_mib,
            "used_mib": used_mib,
            "samples": samples,
        }),
    )
    .await?;
    // The job's page and lists show the badge: tell them it changed (it still runs).
    events::job_changed(&mut **tx, job, JobStatus::Running).await
}

/// Asks the runner to stop a running job because it overran its VRAM, with the reason it will
/// end with. Returns false when the job is no longer running or a stop was already asked for.
pub async fn request_stop(
    tx: &mut Transaction<'_, Postgres>,
    job: Uuid,
    reason: &str,
    detail: serde_json::Value,
) -> sqlx::Result<bool> {
    let (cause, kind) = (StopCause::VramOveruse, JobEventKind::VramOveruse);
    lifecycle::request_stop(tx, job, cause, reason, kind, detail).await
}

/// Stores NVML accounting's peak of a finished job's processes on a card.
pub async fn set_accounting_peak(
    db: impl PgExecutor<'_>,
    job: Uuid,
    gpu: Uuid,
    peak_mib: i64,
) -> sqlx::Result<()> {
    sqlx::query(
        "UPDATE job_vram SET accounting_peak_mib = greatest(accounting_peak_mib, $3) \
         WHERE job_id = $1 AND gpu_uuid = $2",
    )
    .bind(job)
    .bind(gpu)
    .bind(peak_mib)
    .execute(db)
    .await?;
    Ok(())
}

/// A simulated card as the sampler sees it.
#[derive(Debug, Clone, FromRow)]
pub struct SimCard {
    /// Card.
    pub uuid: Uuid,
    /// Installed MiB.
    pub total_mib: i64,
    /// Foreign memory set through the API.
    pub external_mib: i64,
}

/// This node's simulated cards.
pub async fn sim_cards(pool: &PgPool, node: &str) -> sqlx::Result<Vec<SimCard>> {
    sqlx::query_as(
        "SELECT uuid, total_mib, external_mib FROM gpus WHERE node = $1 AND simulated AND present",
    )
    .bind(node)
    .fetch_all(pool)
    .await
}

/// The usage given to jobs that still hold a simulated card of this node: (card, job, MiB).
pub async fn sim_usage(pool: &PgPool, node: &str) -> sqlx::Result<Vec<(Uuid, Uuid, i64)>> {
    sqlx::query_as(
        "SELECT s.gpu_uuid, s.job_id, s.used_mib FROM sim_job_vram s \
         JOIN gpus g ON g.uuid = s.gpu_uuid AND g.node = $1 \
         JOIN reservations r ON r.job_id = s.job_id AND r.gpu_uuid = s.gpu_uuid \
                             AND r.released_at IS NULL",
    )
    .bind(node)
    .fetch_all(pool)
    .await
}

/// Sets what a job uses on a simulated card. Returns false when the job holds no live
/// reservation on that card.
pub async fn set_sim_usage(
    db: impl PgExecutor<'_>,
    gpu: Uuid,
    job: Uuid,
    used_mib: i64,
) -> sqlx::Result<bool> {
    let set = sqlx::query(
        "INSERT INTO sim_job_vram (gpu_uuid, job_id, used_mib) \
         SELECT $1, $2, $3 WHERE EXISTS (SELECT 1 FROM reservations \
           WHERE job_id = $2 AND gpu_uuid = $1 AND released_at IS NULL) \
         ON CONFLICT (gpu_uuid, job_id) DO UPDATE SET used_mib = EXCLUDED.used_mib",
    )
    .bind(gpu)
    .bind(job)
    .bind(used_mib)
    .execute(db)
    .await?;
    Ok(set.rows_affected() == 1)
}

/// Writes a simulated card's memory in use (foreign plus its jobs' simulated usage; `None` when
/// nothing on it is simulated, which keeps it unknown).
pub async fn set_sim_used(
    db: impl PgExecutor<'_>,
    gpu: Uuid,
    used: Option<i64>,
) -> sqlx::Result<()> {
    sqlx::query("UPDATE gpus SET used_mib = $2 WHERE uuid = $1 AND simulated AND used_mib IS DISTINCT FROM $2")
        .bind(gpu)
        .bind(used)
        .execute(db)
        .await?;
    Ok(())
}
