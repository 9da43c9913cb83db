//! The sampler: every few seconds one `gpu_samples` row per card of this node, and pruning of rows
//! older than the retention.
//!
//! Reserved memory comes from the ledger (`gpus.reserved_mib`, exact by construction). Used, foreign
//! and busy figures come from the card observer's newest snapshot (at most one tick old), because
//! the `gpus` row cannot say "unknown": its `external_mib` is 0 when nothing was observed, and it
//! has no utilisation. The one
//! exception is the foreign memory of a simulated card, which is set through the API and lives only
//! in the `gpus` row; it is what admission subtracts, so it is what the chart shows.

use super::Sampling;
use crate::server::gpu::observer::{Cards, Snapshot};
use crate::server::gpu::GpuInfo;
use anyhow::{Context, Result};
use chrono::{DateTime, Utc};
use sqlx::PgPool;
use tokio::sync::watch;

/// Writes one sample per card of `node` that `snapshot` saw; returns how many.
pub async fn sample(
    pool: &PgPool,
    node: &str,
    at: DateTime<Utc>,
    snapshot: &Snapshot,
) -> Result<u64> {
    record(pool, node, at, snapshot.cards()?).await
}

/// Writes one sample per observed card that the `gpus` table knows on `node` (a card the inventory
/// sync has not registered yet waits for the next round).
pub async fn record(
    pool: &PgPool,
    node: &str,
    at: DateTime<Utc>,
    cards: &[GpuInfo],
) -> Result<u64> {
    let uuids: Vec<uuid::Uuid> = cards.iter().map(|c| c.uuid).collect();
    let used: Vec<Option<i64>> = cards.iter().map(|c| c.used_mib).collect();
    let external: Vec<Option<i64>> = cards.iter().map(|c| c.external_mib).collect();
    let busy: Vec<Option<i32>> = cards
        .iter()
        .map(|c| c.utilization_pct.map(|u| u.min(100) as i32))
        .collect();
    let done = sqlx::query(
        "INSERT INTO gpu_samples \
           (gpu_uuid, node, at, total_mib, reserved_mib, used_mib, external_mib, utilization_pct) \
         SELECT g.uuid, g.node, $2, g.total_mib, g.reserved_mib, o.used, \
                CASE WHEN g.simulated THEN g.external_mib ELSE o.external END, o.busy \
         FROM unnest($3::uuid[], $4::bigint[], $5::bigint[], $6::integer[]) \
              AS o(uuid, used, external, busy) \
         JOIN gpus g ON g.uuid = o.uuid AND g.node = $1",
    )
    .bind(node)
    .bind(at)
    .bind(&uuids)
    .bind(&used)
    .bind(&external)
    .bind(&busy)
    .execute(pool)
    .await
    .context("writing GPU samples")?;
    Ok(done.rows_affected())
}

/// Deletes samples taken before `before`; returns how many.
pub async fn prune(pool: &PgPool, before: DateTime<Utc>) -> Result<u64> {
    let done = sqlx::query("DELETE FROM gpu_samples WHERE at < $1")
        .bind(before)
        .execute(pool)
        .await
        .context("pruning GPU samples")?;
    Ok(done.rows_affected())
}

/// Samples the card observer's newest snapshot of `node` every `sampling.every` and prunes past
/// `sampling.retention` until `stop` turns true. The settings are recorded first, so every
/// process's usage pages check ranges against them.
pub async fn run(
    pool: PgPool,
    cards: Cards,
    node: String,
    sampling: Sampling,
    stop: watch::Receiver<bool>,
) {
    if let Err(e) = super::save_sampling(&pool, &sampling).await {
        tracing::warn!(
            error = format!("{e:#}"),
            "recording the sampling settings failed"
        );
    }
    crate::server::periodic::every(sampling.every, stop, || async {
        let now = Utc::now();
        let done = async {
            sample(&pool, &node, now, &cards.latest()).await?;
            prune(&pool, now - sampling.retention_chrono()).await
        };
        if let Err(e) = done.await {
            tracing::warn!(error = format!("{e:#}"), "GPU sampling failed");
        }
    })
    .await
}
