//! Keeps the `gpus` table in step with the card observer's snapshots: at start-up and
//! periodically (`--gpu-refresh-s`).

use super::observer::{Cards, Snapshot};
use super::InventoryKind;
use crate::model::LiveEvent;
use crate::server::db::{events, gpus};
use anyhow::{Context, Result};
use sqlx::PgPool;
use std::time::Duration;
use tokio::sync::watch;

/// Writes what `snapshot` saw of `node`'s cards; wakes the schedulers when something changed.
/// A snapshot of a driver that answered nothing withdraws every card of the node and is an error.
pub async fn refresh(pool: &PgPool, node: &str, snapshot: &Snapshot) -> Result<bool> {
    let cards = match snapshot.cards() {
        Ok(cards) => cards,
        Err(e) => {
            // The driver answers nothing (gone, or every call failing): none of this node's cards
            // can be vouched for, so none is offered until it answers again. Jobs already on them
            // keep running and keep their reservations.
            if snapshot.kind == InventoryKind::Nvml {
                withdraw_all(pool, node).await?;
            }
            return Err(e);
        }
    };
    let skipped: Vec<gpus::SkippedRow> = snapshot
        .skipped
        .iter()
        .map(|s| gpus::SkippedRow {
            node: node.to_owned(),
            id: s.id.clone(),
            idx: i32::try_from(s.index).unwrap_or(i32::MAX),
            model: s.model.clone(),
            reason: s.reason.clone(),
        })
        .collect();
    let mut tx = pool.begin().await?;
    let mut changed = gpus::sync_node(&mut tx, node, cards)
        .await
        .context("writing the GPU inventory")?;
    changed |= gpus::sync_skipped(&mut tx, node, &skipped)
        .await
        .context("writing the skipped devices")?;
    if changed {
        events::wake(&mut *tx, "cards").await?;
        events::announce(&mut *tx, &LiveEvent::Cards).await?;
    }
    tx.commit().await?;
    Ok(changed)
}

/// Shows every card of `node` as missing (not offered to admission), waking the schedulers and
/// the live pages when that changed something.
async fn withdraw_all(pool: &PgPool, node: &str) -> Result<()> {
    let mut tx = pool.begin().await?;
    if gpus::sync_node(&mut tx, node, &[])
        .await
        .context("withdrawing the cards of a driver that answers nothing")?
    {
        tracing::warn!(
            node,
            "the NVIDIA driver answers nothing: this node's cards are withdrawn until it does"
        );
        events::wake(&mut *tx, "cards").await?;
        events::announce(&mut *tx, &LiveEvent::Cards).await?;
    }
    tx.commit().await?;
    Ok(())
}

/// Writes the card observer's newest snapshot of `node` every `every` until `stop` turns true.
pub async fn run(
    pool: PgPool,
    cards: Cards,
    node: String,
    every: Duration,
    stop: watch::Receiver<bool>,
) {
    crate::server::periodic::every(every, stop, || async {
        if let Err(e) = refresh(&pool, &node, &cards.latest()).await {
            tracing::warn!(error = format!("{e:#}"), "GPU inventory refresh failed");
        }
    })
    .await
}
