//! Keeps the `gpus` table in step with the inventory: at start-up and periodically.

use super::{GpuInventory, OurProcesses};
use crate::server::db::{events, gpus};
use anyhow::{Context, Result};
use sqlx::PgPool;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Reads the inventory once and writes it; wakes the schedulers when something changed.
pub async fn refresh(pool: &PgPool, inventory: &Arc<dyn GpuInventory>, node: &str) -> Result<bool> {
    let inv = Arc::clone(inventory);
    let cards = tokio::task::spawn_blocking(move || inv.snapshot(&OurProcesses::default()))
        .await
        .context("inventory task")?
        .context("reading the GPU inventory")?;
    let observed: Vec<gpus::Observed> = cards
        .into_iter()
        .map(|c| gpus::Observed {
            uuid: c.uuid,
            index: c.index,
            model: c.model,
            total_mib: c.total_mib,
            used_mib: c.used_mib,
            external_mib: c.external_mib,
            simulated: c.simulated,
        })
        .collect();
    let mut tx = pool.begin().await?;
    let changed = gpus::sync_node(&mut tx, node, &observed)
        .await
        .context("writing the GPU inventory")?;
    if changed {
        events::wake(&mut *tx, "cards").await?;
        events::notify(&mut *tx, events::EVENTS_CHANNEL, r#"{"kind":"cards"}"#).await?;
    }
    tx.commit().await?;
    Ok(changed)
}

/// Refreshes every `every` until `stop` turns true.
pub async fn run(
    pool: PgPool,
    inventory: Arc<dyn GpuInventory>,
    node: String,
    every: Duration,
    mut stop: watch::Receiver<bool>,
) {
    let mut timer = tokio::time::interval(every);
    timer.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.changed() => break,
            _ = timer.tick() => {
                if let Err(e) = refresh(&pool, &inventory, &node).await {
                    tracing::warn!(error = format!("{e:#}"), "GPU inventory refresh failed");
                }
            }
        }
    }
}
