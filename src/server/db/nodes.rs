//! Repository for nodes: registration and heartbeats (the epoch lease), the admin's drain, and
//! forgetting a lost node. Whether a node is lost is always computed here, in database time.

use super::{events, lifecycle, runs};
use crate::model::{JobEventKind, JobStatus, NodeState, NodeView, NODE_LOST_REASON};
use serde_json::json;
use sqlx::{PgExecutor, Postgres, Transaction};
use uuid::Uuid;

/// The shown state of the node row aliased `n`: `lost` when forgotten or silent for longer than
/// its lost time (database time), else the admin's `up` or `drained`.
pub const NODE_STATE_SQL: &str = "CASE WHEN n.forgotten_at IS NOT NULL \
    OR now() - n.heartbeat_at > make_interval(secs => n.lost_after_s) THEN 'lost' ELSE n.state END";

/// What a process registers about its node.
#[derive(Debug, Clone)]
pub struct Registration {
    /// `--node`.
    pub name: String,
    /// The gpuq version.
    pub version: String,
    /// `--advertise-url`.
    pub advertise_url: String,
    /// `--runner`.
    pub runs_jobs: bool,
    /// `--node-lost-after-s`.
    pub lost_after_s: i32,
}

/// Registers (or re-registers) a node and takes a fresh lease: a new epoch, a heartbeat now, and
/// no longer forgotten. The admin's `up`/`drained` is kept. Returns the epoch the process now holds.
pub async fn register(db: impl PgExecutor<'_>, reg: &Registration) -> sqlx::Result<i64> {
    sqlx::query_scalar(
        "INSERT INTO nodes (name, version, advertise_url, runs_jobs, lost_after_s) \
         VALUES ($1, $2, $3, $4, $5) \
         ON CONFLICT (name) DO UPDATE SET version = EXCLUDED.version, \
           advertise_url = EXCLUDED.advertise_url, runs_jobs = EXCLUDED.runs_jobs, \
           lost_after_s = EXCLUDED.lost_after_s, heartbeat_at = now(), started_at = now(), \
           epoch = nextval('node_epochs'), forgotten_at = NULL \
         RETURNING epoch",
    )
    .bind(&reg.name)
    .bind(&reg.version)
    .bind(&reg.advertise_url)
    .bind(reg.runs_jobs)
    .bind(reg.lost_after_s)
    .fetch_one(db)
    .await
}

/// Heartbeats `node` under `epoch`. Returns false when the row's epoch is another (someone else
/// registered the name, or an admin forgot the node) or the row is gone: the lease is lost.
pub async fn heartbeat(db: impl PgExecutor<'_>, node: &str, epoch: i64) -> sqlx::Result<bool> {
    let r = sqlx::query("UPDATE nodes SET heartbeat_at = now() WHERE name = $1 AND epoch = $2")
        .bind(node)
        .bind(epoch)
        .execute(db)
        .await?;
    Ok(r.rows_affected() == 1)
}

/// The nodes as they are shown (state derived in database time), with what each holds.
fn select(filter: &str) -> String {
    format!(
        "SELECT n.name, ({NODE_STATE_SQL}) AS state, \
           greatest(0, floor(extract(epoch FROM now() - n.heartbeat_at)))::bigint AS heartbeat_age_s, \
           n.lost_after_s::bigint AS lost_after_s, n.version, n.advertise_url, n.runs_jobs, \
           (SELECT count(*) FROM gpus g WHERE g.node = n.name) AS cards, \
           (SELECT count(*) FROM jobs j WHERE j.node = n.name \
              AND j.status IN ('starting', 'running')) AS running_jobs, \
           n.forgotten_at \
         FROM nodes n {filter} ORDER BY n.name"
    )
}

/// Every node, by name.
pub async fn list(db: impl PgExecutor<'_>) -> sqlx::Result<Vec<NodeView>> {
    sqlx::query_as(&select("")).fetch_all(db).await
}

/// One node.
pub async fn get(db: impl PgExecutor<'_>, name: &str) -> sqlx::Result<Option<NodeView>> {
    sqlx::query_as(&select("WHERE n.name = $1"))
        .bind(name)
        .fetch_optional(db)
        .await
}

/// One node, locked for the rest of the transaction.
pub async fn get_for_update(
    tx: &mut Transaction<'_, Postgres>,
    name: &str,
) -> sqlx::Result<Option<NodeView>> {
    sqlx::query("SELECT 1 FROM nodes WHERE name = $1 FOR UPDATE")
        .bind(name)
        .execute(&mut **tx)
        .await?;
    get(&mut **tx, name).await
}

/// Sets the admin's wish (`up` or `drained`). Returns whether the node exists.
pub async fn set_state(
    db: impl PgExecutor<'_>,
    name: &str,
    state: NodeState,
) -> sqlx::Result<bool> {
    let r = sqlx::query("UPDATE nodes SET state = $2 WHERE name = $1")
        .bind(name)
        .bind(state)
        .execute(db)
        .await?;
    Ok(r.rows_affected() == 1)
}

/// Forgets `node` in the caller's transaction (the caller has checked it is lost): marks it
/// forgotten and takes its lease away (a new epoch, so a process that still thinks it holds the
/// node is refused at its next heartbeat), then ends every job it had admitted, was starting or
/// running `failed` with reason `node_lost` and gives their cards back through the runner's release
/// path. Returns the jobs ended.
pub async fn forget(
    tx: &mut Transaction<'_, Postgres>,
    node: &str,
    actor: &str,
) -> sqlx::Result<Vec<Uuid>> {
    sqlx::query(
        "UPDATE nodes SET forgotten_at = now(), epoch = nextval('node_epochs') WHERE name = $1",
    )
    .bind(node)
    .execute(&mut **tx)
    .await?;
    let ended = lifecycle::fail_on_forgotten_node(tx, node, NODE_LOST_REASON).await?;
    for &job in &ended {
        runs::release_cards(&mut **tx, job).await?;
        let detail = json!({ "exit_code": null, "reason": NODE_LOST_REASON, "node": node, "cause": "node_lost" });
        events::job_event(&mut **tx, job, actor, JobEventKind::Failed, detail).await?;
        events::job_event(&mut **tx, job, actor, JobEventKind::Released, json!({})).await?;
        events::job_changed(&mut **tx, job, JobStatus::Failed).await?;
    }
    Ok(ended)
}

/// The names of the nodes that are lost now (nodes without a row are up).
pub async fn lost_names(db: impl PgExecutor<'_>) -> sqlx::Result<Vec<String>> {
    sqlx::query_scalar(&format!(
        "SELECT n.name FROM nodes n WHERE ({NODE_STATE_SQL}) = 'lost'"
    ))
    .fetch_all(db)
    .await
}

/// Puts back in the queue, in the caller's (admission) transaction, every admitted, starting or
/// running job that asked for `requeue_on_node_loss` and whose node is lost: its cards are released,
/// it leaves its node, and it gets a `requeued` event. The lost nodes' leases are taken away (a new
/// epoch), so a process of theirs that wakes claims nothing and stops the old runs' containers.
/// Returns the jobs requeued.
pub async fn requeue_lost(tx: &mut Transaction<'_, Postgres>) -> sqlx::Result<Vec<Uuid>> {
    let rows: Vec<(Uuid, String, i32)> = sqlx::query_as(&format!(
        "SELECT j.id, j.node, j.attempt FROM jobs j JOIN nodes n ON n.name = j.node \
         WHERE j.status IN ('admitted', 'starting', 'running') \
           AND (j.spec ->> 'requeue_on_node_loss')::boolean IS TRUE AND ({NODE_STATE_SQL}) = 'lost' \
         ORDER BY j.id FOR UPDATE OF j"
    ))
    .fetch_all(&mut **tx)
    .await?;
    let ids: Vec<Uuid> = rows.iter().map(|r| r.0).collect();
    for &job in &ids {
        runs::release_cards(&mut **tx, job).await?;
    }
    let moved = lifecycle::requeue_lost_jobs(tx, &ids).await?;
    let mut fenced: Vec<String> = Vec::new();
    for (job, node, attempt) in rows.iter().filter(|r| moved.contains(&r.0)) {
        let detail = json!({ "reason": NODE_LOST_REASON, "node": node, "attempt": attempt });
        events::job_event(&mut **tx, *job, "scheduler", JobEventKind::Requeued, detail).await?;
        events::job_changed(&mut **tx, *job, JobStatus::Queued).await?;
        if !fenced.contains(node) {
            fenced.push(node.clone());
        }
    }
    sqlx::query("UPDATE nodes SET epoch = nextval('node_epochs') WHERE name = ANY($1)")
        .bind(&fenced)
        .execute(&mut **tx)
        .await?;
    Ok(moved)
}
