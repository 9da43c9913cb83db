//! Repository for cards: the inventory's upserts, the ledger columns, and what holds each card.

use super::nodes::NODE_STATE_SQL;
use crate::model::{GpuHolder, GpuState, NodeState};
use chrono::{DateTime, Utc};
use sqlx::{FromRow, PgExecutor, Postgres, Transaction};
use uuid::Uuid;

/// One card as observed now; the admission logic works only from these values,
/// so "unknown" is always `None` and never a misleading zero.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct GpuInfo {
    /// Stable identity of the card (NVML's `GPU-…` UUID without the prefix),
    /// used as the database key because indexes can change across reboots.
    pub uuid: uuid::Uuid,
    /// Driver index, kept for `CUDA_VISIBLE_DEVICES`-style device selection.
    pub index: u32,
    /// Marketing name, shown to users and matched by model-specific requests.
    pub model: String,
    /// Installed memory in MiB (rounded down so we never promise too much).
    pub total_mib: i64,
    /// Memory in use by anyone, in MiB (rounded up); `None` when not observed.
    pub used_mib: Option<i64>,
    /// Memory used by processes that are not gpuq containers, in MiB
    /// (rounded up), so admission can subtract foreign load; `None` = unknown.
    pub external_mib: Option<i64>,
    /// GPU busy percentage, informational only; `None` when not observed.
    pub utilization_pct: Option<u32>,
    /// True for cards from `--sim-gpus`, so they are never mistaken for real ones.
    pub simulated: bool,
}

/// A `gpus` row.
#[derive(Debug, Clone, FromRow)]
pub struct GpuRow {
    /// Key (NVML's id without `GPU-`).
    pub uuid: Uuid,
    /// Host.
    pub node: String,
    /// Device index.
    pub idx: i32,
    /// Model name.
    pub model: String,
    /// Physical memory.
    pub total_mib: i64,
    /// Sum of live reservations.
    pub reserved_mib: i64,
    /// Last observed use.
    pub used_mib: Option<i64>,
    /// Used by processes gpuq does not manage.
    pub external_mib: i64,
    /// What an admin decided: online, draining or offline.
    pub state: GpuState,
    /// Whether the node's inventory sees the card.
    pub present: bool,
    /// A simulated card.
    pub simulated: bool,
    /// An exclusive job holds it.
    pub exclusive_held: bool,
    /// Last refresh.
    pub updated_at: DateTime<Utc>,
    /// Its node's state (`up` when the node has no row in `nodes`).
    pub node_state: NodeState,
}

impl GpuRow {
    /// The state as shown: `lost` while its node is lost, `missing` while the inventory does not
    /// see the card, else the admin's.
    pub fn shown_state(&self) -> GpuState {
        if self.node_state == NodeState::Lost {
            GpuState::Lost
        } else if self.present {
            self.state
        } else {
            GpuState::Missing
        }
    }

    /// Whether new work may be placed on it: seen by its node, online, and its node up (neither
    /// lost nor drained).
    pub fn takes_work(&self) -> bool {
        self.present && self.state == GpuState::Online && self.node_state == NodeState::Up
    }
}

/// The columns of a [`GpuRow`] for the card aliased `g`.
fn columns() -> String {
    format!(
        "g.uuid, g.node, g.idx, g.model, g.total_mib, g.reserved_mib, g.used_mib, \
         g.external_mib, g.state, g.present, g.simulated, g.updated_at, \
         EXISTS (SELECT 1 FROM reservations r WHERE r.gpu_uuid = g.uuid AND r.released_at IS NULL \
                 AND r.exclusive) AS exclusive_held, \
         coalesce((SELECT {NODE_STATE_SQL} FROM nodes n WHERE n.name = g.node), 'up') AS node_state"
    )
}

/// Every card, by node and index.
pub async fn list(db: impl PgExecutor<'_>) -> sqlx::Result<Vec<GpuRow>> {
    sqlx::query_as(&format!(
        "SELECT {} FROM gpus g ORDER BY g.node, g.idx",
        columns()
    ))
    .fetch_all(db)
    .await
}

/// One card.
pub async fn get(db: impl PgExecutor<'_>, uuid: Uuid) -> sqlx::Result<Option<GpuRow>> {
    sqlx::query_as(&format!(
        "SELECT {} FROM gpus g WHERE g.uuid = $1",
        columns()
    ))
    .bind(uuid)
    .fetch_optional(db)
    .await
}

/// Upserts this node's cards as the inventory observed them and marks the node's cards that were
/// not observed missing (never deleted: a card may hold reservations). The admin's state (online,
/// draining, offline) is never touched here: it holds until an admin changes it. Returns whether anything the scheduler cares
/// about changed (a new card, a card gone or back, a change in size or foreign use).
pub async fn sync_node(
    tx: &mut Transaction<'_, Postgres>,
    node: &str,
    observed: &[GpuInfo],
) -> sqlx::Result<bool> {
    let mut changed = false;
    for o in observed {
        let row: (bool,) = sqlx::query_as(
            "WITH old AS (SELECT total_mib, external_mib, present, node, model FROM gpus WHERE uuid = $1) \
             , up AS ( \
               INSERT INTO gpus (uuid, node, idx, model, total_mib, used_mib, external_mib, simulated) \
               VALUES ($1, $2, $3, $4, $5, $6, coalesce($7, 0), $8) \
               ON CONFLICT (uuid) DO UPDATE SET node = EXCLUDED.node, idx = EXCLUDED.idx, \
                 model = EXCLUDED.model, total_mib = EXCLUDED.total_mib, \
                 used_mib = CASE WHEN EXCLUDED.simulated THEN gpus.used_mib ELSE EXCLUDED.used_mib END, \
                 external_mib = coalesce($7, gpus.external_mib), simulated = EXCLUDED.simulated, \
                 present = true, updated_at = now() \
               RETURNING total_mib, external_mib, present, node, model) \
             SELECT NOT EXISTS (SELECT 1 FROM old) OR EXISTS ( \
               SELECT 1 FROM old, up WHERE (old.total_mib, old.external_mib, old.present, old.node, old.model) \
                 IS DISTINCT FROM (up.total_mib, up.external_mib, up.present, up.node, up.model))",
        )
        .bind(o.uuid)
        .bind(node)
        .bind(o.index as i32)
        .bind(&o.model)
        .bind(o.total_mib)
        .bind(o.used_mib)
        .bind(o.external_mib)
        .bind(o.simulated)
        .fetch_one(&mut **tx)
        .await?;
        changed |= row.0;
    }
    let seen: Vec<Uuid> = observed.iter().map(|o| o.uuid).collect();
    let gone = sqlx::query(
        "UPDATE gpus SET present = false, updated_at = now() \
         WHERE node = $1 AND present AND NOT (uuid = ANY($2))",
    )
    .bind(node)
    .bind(&seen)
    .execute(&mut **tx)
    .await?;
    Ok(changed || gone.rows_affected() > 0)
}

/// Sets the foreign memory of a simulated card. Returns the card when it exists and is simulated.
pub async fn set_sim_external(
    db: impl PgExecutor<'_>,
    uuid: Uuid,
    external_mib: i64,
) -> sqlx::Result<Option<i64>> {
    sqlx::query_scalar(
        "UPDATE gpus SET external_mib = $2, updated_at = now() \
         WHERE uuid = $1 AND simulated RETURNING external_mib",
    )
    .bind(uuid)
    .bind(external_mib)
    .fetch_optional(db)
    .await
}

/// Sets a card's admin state (online / draining / offline). Returns whether the card exists.
pub async fn set_state(db: impl PgExecutor<'_>, uuid: Uuid, state: GpuState) -> sqlx::Result<bool> {
    let res = sqlx::query("UPDATE gpus SET state = $2, updated_at = now() WHERE uuid = $1")
        .bind(uuid)
        .bind(state)
        .execute(db)
        .await?;
    Ok(res.rows_affected() == 1)
}

/// A live reservation with its job, for showing what holds each card.
#[derive(Debug, Clone, FromRow)]
pub struct HolderRow {
    /// Card.
    pub gpu_uuid: Uuid,
    /// The job and what it holds there, as the API shows it.
    #[sqlx(flatten)]
    pub holder: GpuHolder,
}

/// Every live reservation with its job.
pub async fn holders(db: impl PgExecutor<'_>) -> sqlx::Result<Vec<HolderRow>> {
    sqlx::query_as(
        "SELECT r.gpu_uuid, r.job_id AS id, j.name, u.username AS owner, r.vram_mib, j.status, \
                CASE WHEN j.started_at IS NOT NULL AND j.finished_at IS NULL \
                     THEN floor(extract(epoch FROM now() - j.started_at))::bigint END AS running_s, \
                v.used_mib, v.warned_at IS NOT NULL AS over_commitment \
         FROM reservations r JOIN jobs j ON j.id = r.job_id JOIN users u ON u.id = j.owner_id \
         LEFT JOIN job_vram v ON v.job_id = r.job_id AND v.gpu_uuid = r.gpu_uuid \
         WHERE r.released_at IS NULL ORDER BY j.seq",
    )
    .fetch_all(db)
    .await
}

/// A device a node sees but does not schedule.
#[derive(Debug, Clone, PartialEq, Eq, FromRow)]
pub struct SkippedRow {
    /// Node.
    pub node: String,
    /// Driver's identifier.
    pub id: String,
    /// Driver index.
    pub idx: i32,
    /// Model name.
    pub model: Option<String>,
    /// Why not scheduled.
    pub reason: String,
}

/// Every skipped device, by node and index.
pub async fn skipped(db: impl PgExecutor<'_>) -> sqlx::Result<Vec<SkippedRow>> {
    sqlx::query_as("SELECT node, id, idx, model, reason FROM gpu_skipped ORDER BY node, idx, id")
        .fetch_all(db)
        .await
}

/// Replaces `node`'s skipped devices with `now`. Returns whether anything changed.
pub async fn sync_skipped(
    tx: &mut Transaction<'_, Postgres>,
    node: &str,
    now: &[SkippedRow],
) -> sqlx::Result<bool> {
    let before: Vec<SkippedRow> = sqlx::query_as(
        "SELECT node, id, idx, model, reason FROM gpu_skipped WHERE node = $1 ORDER BY idx, id",
    )
    .bind(node)
    .fetch_all(&mut **tx)
    .await?;
    let mut sorted = now.to_vec();
    sorted.sort_by(|a, b| (a.idx, &a.id).cmp(&(b.idx, &b.id)));
    if before == sorted {
        return Ok(false);
    }
    sqlx::query("DELETE FROM gpu_skipped WHERE node = $1")
        .bind(node)
        .execute(&mut **tx)
        .await?;
    for s in &sorted {
        sqlx::query(
            "INSERT INTO gpu_skipped (node, id, idx, model, reason) VALUES ($1, $2, $3, $4, $5) \
             ON CONFLICT (node, id) DO NOTHING",
        )
        .bind(node)
        .bind(&s.id)
        .bind(s.idx)
        .bind(&s.model)
        .bind(&s.reason)
        .execute(&mut **tx)
        .await?;
    }
    Ok(true)
}
