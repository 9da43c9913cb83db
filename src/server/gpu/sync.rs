//! Keeps the `gpus` table in step with the inventory: at start-up and periodically.

use super::{GpuInventory, InventoryKind, OurProcesses};
use crate::model::LiveEvent;
use crate::server::db::{events, gpus};
use crate::server::runtime::docker::Docker;
use anyhow::{Context, Result};
use sqlx::PgPool;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Where the host PIDs of gpuq's own container processes come from. On NVML cards they separate
/// our jobs' memory (already counted by their reservations) from foreign processes' memory.
/// Clones share one Docker connection (the GPU sync and the usage sampler both ask).
#[derive(Debug, Clone, Default)]
pub enum OwnPids {
    /// No runner on this node (or simulated cards): nothing of ours runs here.
    #[default]
    None,
    /// This node's dockerd.
    Docker {
        /// Unix socket path; `None` for the local default.
        socket: Option<String>,
        /// The connection, made on first use and again after a failure.
        conn: Arc<tokio::sync::Mutex<Option<Docker>>>,
    },
}

impl OwnPids {
    /// This node's dockerd, at `socket` or the local default.
    pub fn docker(socket: Option<String>) -> Self {
        OwnPids::Docker {
            socket,
            conn: Arc::default(),
        }
    }

    /// gpuq's own processes on `inventory`'s cards: asked of Docker on NVML cards only (simulated
    /// cards have no processes).
    pub async fn read_for(&self, inventory: &dyn GpuInventory, node: &str) -> OurProcesses {
        if inventory.kind() == InventoryKind::Nvml {
            self.read(node).await
        } else {
            OurProcesses::default()
        }
    }

    /// The PIDs now. When Docker cannot be asked, the answer is empty, which counts our jobs'
    /// memory as foreign too: admission errs towards admitting less, never more.
    pub async fn read(&self, node: &str) -> OurProcesses {
        let OwnPids::Docker { socket, conn } = self else {
            return OurProcesses::default();
        };
        let mut cached = conn.lock().await;
        let docker = match cached.as_ref() {
            Some(d) => d.clone(),
            None => {
                let connected = Docker::connect_to(socket.as_deref()).await;
                match connected {
                    Ok(d) => cached.insert(d).clone(),
                    Err(e) => {
                        tracing::warn!(error = %e, "Docker unreachable; gpuq's own GPU memory counts as foreign until it answers");
                        return OurProcesses::default();
                    }
                }
            }
        };
        drop(cached);
        match docker.managed_pids(node).await {
            Ok(pids) => pids.into_iter().collect(),
            Err(e) => {
                tracing::warn!(error = %e, "listing gpuq's container processes failed; their GPU memory counts as foreign until it works");
                *conn.lock().await = None;
                OurProcesses::default()
            }
        }
    }
}

/// Reads the inventory once and writes it; wakes the schedulers when something changed.
pub async fn refresh(pool: &PgPool, inventory: &Arc<dyn GpuInventory>, node: &str) -> Result<bool> {
    refresh_with(pool, inventory, node, OurProcesses::default()).await
}

/// [`refresh`], telling the inventory which processes are gpuq's own.
pub async fn refresh_with(
    pool: &PgPool,
    inventory: &Arc<dyn GpuInventory>,
    node: &str,
    ours: OurProcesses,
) -> Result<bool> {
    let inv = Arc::clone(inventory);
    let read = tokio::task::spawn_blocking(move || inv.snapshot(&ours))
        .await
        .context("inventory task")?;
    let cards = match read {
        Ok(cards) => cards,
        Err(e) => {
            // The driver answers nothing (gone, or every call failing): none of this node's cards
            // can be vouched for, so none is offered until it answers again. Jobs already on them
            // keep running and keep their reservations.
            if inventory.kind() == InventoryKind::Nvml {
                withdraw_all(pool, node).await?;
            }
            return Err(anyhow::Error::new(e).context("reading the GPU inventory"));
        }
    };
    let skipped: Vec<gpus::SkippedRow> = inventory
        .skipped()
        .into_iter()
        .map(|s| gpus::SkippedRow {
            node: node.to_owned(),
            id: s.id,
            idx: i32::try_from(s.index).unwrap_or(i32::MAX),
            model: s.model,
            reason: s.reason,
        })
        .collect();
    let mut tx = pool.begin().await?;
    let mut changed = gpus::sync_node(&mut tx, node, &cards)
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

/// What the node-side loops (the inventory refresh, the usage sampler) read cards through: the
/// database, this node's inventory and name, and where gpuq's own processes come from.
#[derive(Clone)]
pub struct NodeCards {
    /// The database.
    pub pool: PgPool,
    /// This node's cards.
    pub inventory: Arc<dyn GpuInventory>,
    /// This node's name.
    pub node: String,
    /// gpuq's own container processes (on NVML cards).
    pub own: OwnPids,
}

impl NodeCards {
    /// gpuq's own processes on these cards now (none on simulated cards).
    pub async fn ours(&self) -> OurProcesses {
        self.own.read_for(self.inventory.as_ref(), &self.node).await
    }
}

/// Refreshes `cards` every `every` until `stop` turns true, naming gpuq's own container
/// processes before each reading.
pub async fn run(cards: NodeCards, every: Duration, stop: watch::Receiver<bool>) {
    crate::server::periodic::every(every, stop, || async {
        let ours = cards.ours().await;
        if let Err(e) = refresh_with(&cards.pool, &cards.inventory, &cards.node, ours).await {
            tracing::warn!(error = format!("{e:#}"), "GPU inventory refresh failed");
        }
    })
    .await
}
