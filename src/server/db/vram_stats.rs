//! The observed peaks of succeeded jobs (`job_vram`), one figure per user, grouped for the
//! learning manifest.

use crate::model::PeakStats;
use sqlx::FromRow;

/// Succeeded jobs' (job, card) records with their peak (the larger of the sampler's peak and
/// NVML accounting's), the job's owner, its workload or raw need, its image and the card's model.
/// Only succeeded jobs: one cancelled early, failed or timed out says little of what the work
/// needs, and a member could file many such to drag a figure down.
const OBSERVED: &str = "\
    SELECT j.owner_id, j.workload, j.image, j.min_vram_mib, g.model AS gpu_model, \
           greatest(v.peak_mib, coalesce(v.accounting_peak_mib, 0)) AS peak_mib \
    FROM job_vram v \
    JOIN jobs j ON j.id = v.job_id \
    JOIN gpus g ON g.uuid = v.gpu_uuid \
    WHERE j.status = 'succeeded' AND j.finished_at IS NOT NULL";

/// The columns of [`PeakStats`] over a group of `u`: one figure per user (their highest peak in
/// the group, and how many jobs it stands for), so that one member running many small jobs counts
/// once, not many times. `n` counts the jobs. Percentiles are `percentile_disc`, so each is a peak
/// that was really observed.
const PEAKS: &str = "\
    sum(u.jobs)::bigint AS n, \
    percentile_disc(0.5) WITHIN GROUP (ORDER BY u.peak_mib) AS p50_mib, \
    percentile_disc(0.95) WITHIN GROUP (ORDER BY u.peak_mib) AS p95_mib, \
    max(u.peak_mib) AS max_mib";

/// Peaks of one workload type on one GPU model, with the manifest's figure.
#[derive(Debug, Clone, FromRow)]
pub struct WorkloadPeaks {
    /// Workload type.
    pub workload: String,
    /// GPU model.
    pub gpu_model: String,
    /// The manifest's figure, MiB, if it has one.
    pub declared_mib: Option<i64>,
    /// The observed peaks.
    #[sqlx(flatten)]
    pub stats: PeakStats,
}

/// Peaks of raw-declared jobs (no workload type) of one image on one GPU model.
#[derive(Debug, Clone, FromRow)]
pub struct ImagePeaks {
    /// Image reference.
    pub image: String,
    /// GPU model.
    pub gpu_model: String,
    /// The largest `min_vram_mib` declared, MiB.
    pub declared_max_mib: i64,
    /// The observed peaks.
    #[sqlx(flatten)]
    pub stats: PeakStats,
}

/// Per workload type × GPU model, ordered by workload then model.
pub async fn by_workload(
    db: impl sqlx::PgExecutor<'_>,
    only: Option<(&str, &str)>,
) -> sqlx::Result<Vec<WorkloadPeaks>> {
    let sql = format!(
        "WITH o AS ({OBSERVED}), \
         u AS (SELECT o.owner_id, o.workload, o.gpu_model, max(o.peak_mib) AS peak_mib, \
                      count(*) AS jobs \
               FROM o WHERE o.workload IS NOT NULL \
               GROUP BY o.owner_id, o.workload, o.gpu_model) \
         SELECT u.workload, u.gpu_model, m.vram_mib AS declared_mib, {PEAKS} \
         FROM u LEFT JOIN manifest_entries m \
           ON m.workload_type = u.workload AND m.gpu_model = u.gpu_model \
         WHERE ($1::text IS NULL OR (u.workload = $1 AND u.gpu_model = $2)) \
         GROUP BY u.workload, u.gpu_model, m.vram_mib \
         ORDER BY u.workload, u.gpu_model"
    );
    sqlx::query_as(&sql)
        .bind(only.map(|(w, _)| w))
        .bind(only.map(|(_, m)| m))
        .fetch_all(db)
        .await
}

/// Raw-declared jobs per image × GPU model, ordered by image then model.
pub async fn by_image(db: impl sqlx::PgExecutor<'_>) -> sqlx::Result<Vec<ImagePeaks>> {
    let sql = format!(
        "WITH o AS ({OBSERVED}), \
         u AS (SELECT o.owner_id, o.image, o.gpu_model, max(o.peak_mib) AS peak_mib, \
                      max(o.min_vram_mib) AS declared_mib, count(*) AS jobs \
               FROM o WHERE o.workload IS NULL \
               GROUP BY o.owner_id, o.image, o.gpu_model) \
         SELECT u.image, u.gpu_model, coalesce(max(u.declared_mib), 0) AS declared_max_mib, \
                {PEAKS} \
         FROM u \
         GROUP BY u.image, u.gpu_model \
         ORDER BY u.image, u.gpu_model"
    );
    sqlx::query_as(&sql).fetch_all(db).await
}
