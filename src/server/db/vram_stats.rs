//! The observed peaks of finished jobs (`job_vram`), grouped for the learning manifest.

use crate::model::PeakStats;
use sqlx::FromRow;

/// Finished jobs' (job, card) records with their peak (the larger of the sampler's peak and
/// NVML accounting's), the job's workload or raw need, its image and the card's model.
const OBSERVED: &str = "\
    SELECT j.workload, j.image, j.min_vram_mib, g.model AS gpu_model, \
           greatest(v.peak_mib, coalesce(v.accounting_peak_mib, 0)) AS peak_mib \
    FROM job_vram v \
    JOIN jobs j ON j.id = v.job_id \
    JOIN gpus g ON g.uuid = v.gpu_uuid \
    WHERE j.status IN ('succeeded', 'failed', 'timed_out', 'cancelled') \
      AND j.finished_at IS NOT NULL";

/// The columns of [`PeakStats`] over a group of `o` (the observed records). Percentiles are
/// `percentile_disc`, so each is a peak that was really observed.
const PEAKS: &str = "\
    count(*) AS n, \
    percentile_disc(0.5) WITHIN GROUP (ORDER BY o.peak_mib) AS p50_mib, \
    percentile_disc(0.95) WITHIN GROUP (ORDER BY o.peak_mib) AS p95_mib, \
    max(o.peak_mib) AS max_mib";

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
        "WITH o AS ({OBSERVED}) \
         SELECT o.workload, o.gpu_model, m.vram_mib AS declared_mib, {PEAKS} \
         FROM o LEFT JOIN manifest_entries m \
           ON m.workload_type = o.workload AND m.gpu_model = o.gpu_model \
         WHERE o.workload IS NOT NULL \
           AND ($1::text IS NULL OR (o.workload = $1 AND o.gpu_model = $2)) \
         GROUP BY o.workload, o.gpu_model, m.vram_mib \
         ORDER BY o.workload, o.gpu_model"
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
        "WITH o AS ({OBSERVED}) \
         SELECT o.image, o.gpu_model, coalesce(max(o.min_vram_mib), 0) AS declared_max_mib, \
                {PEAKS} \
         FROM o WHERE o.workload IS NULL \
         GROUP BY o.image, o.gpu_model \
         ORDER BY o.image, o.gpu_model"
    );
    sqlx::query_as(&sql).fetch_all(db).await
}
