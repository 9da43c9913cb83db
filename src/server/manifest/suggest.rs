//! The learning manifest: per workload type × GPU model, the peaks finished jobs were observed to
//! use, and a suggested need (p95 plus 10 %, rounded up to 256 MiB; see
//! [`crate::model::suggest`]). Applying a suggestion is an ordinary, audited manifest edit.

use super::{put, WorkloadPut};
use crate::model::{
    AppError, ImageSuggestion, ManifestSuggestions, Observed, WorkloadSuggestion, WorkloadView,
    SUGGESTION_MARGIN_PERCENT, SUGGESTION_MIN_SAMPLES, SUGGESTION_ROUND_MIB,
};
use crate::server::auth::CurrentUser;
use crate::server::db::vram_stats;
use crate::server::error::OrInternal;
use sqlx::PgPool;

/// The learning manifest: every workload type × model and every raw-declared image × model that
/// a finished job with an observed peak ran on (anyone signed in may read it, like the manifest).
pub async fn suggestions(pool: &PgPool) -> Result<ManifestSuggestions, AppError> {
    let workloads = vram_stats::by_workload(pool, None)
        .await
        .or_internal("reading observed peaks per workload type")?;
    let images = vram_stats::by_image(pool)
        .await
        .or_internal("reading observed peaks per image")?;
    Ok(ManifestSuggestions {
        margin_percent: SUGGESTION_MARGIN_PERCENT,
        round_mib: SUGGESTION_ROUND_MIB,
        min_samples: SUGGESTION_MIN_SAMPLES,
        workloads: workloads
            .into_iter()
            .map(|p| WorkloadSuggestion {
                workload: p.workload,
                gpu_model: p.gpu_model,
                declared_mib: p.declared_mib,
                observed: p.stats.into(),
            })
            .collect(),
        images: images
            .into_iter()
            .map(|p| ImageSuggestion {
                image: p.image,
                gpu_model: p.gpu_model,
                declared_max_mib: p.declared_max_mib,
                observed: p.stats.into(),
            })
            .collect(),
    })
}

/// Sets the workload type's need on this model to the suggestion computed now (admins; the
/// caller checks the role). The workload's other models and its description are kept, and the
/// edit goes through [`put`], so it is validated, audited (`manifest.put`) and wakes the
/// schedulers like any edit.
pub async fn apply(
    pool: &PgPool,
    user: &CurrentUser,
    workload: &str,
    gpu_model: &str,
) -> Result<WorkloadView, AppError> {
    let (mut conn, m) = super::load(pool).await?;
    let Some(needs) = m.needs.get(workload) else {
        return Err(AppError::NotFound(format!("no workload type `{workload}`")));
    };
    let peaks = vram_stats::by_workload(&mut *conn, Some((workload, gpu_model)))
        .await
        .or_internal("reading observed peaks")?;
    drop(conn);
    let Some(observed) = peaks.into_iter().next().map(|p| Observed::from(p.stats)) else {
        return Err(AppError::invalid(
            "gpu_model",
            format!(
                "no finished job of workload type `{workload}` was observed on `{gpu_model}`, \
                 so there is nothing to suggest"
            ),
        ));
    };
    let Some(mib) = observed.suggested_mib else {
        return Err(AppError::invalid(
            "gpu_model",
            format!(
                "no suggestion for `{workload}` on `{gpu_model}`: {}",
                observed.note.unwrap_or_default()
            ),
        ));
    };
    let mut vram_mib = needs.clone();
    vram_mib.insert(gpu_model.to_owned(), mib);
    let body = WorkloadPut {
        description: m.descriptions.get(workload).cloned().unwrap_or_default(),
        vram_mib,
    };
    put(pool, user, workload, &body).await
}
