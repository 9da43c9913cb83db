//! The runner's changes: claiming admitted jobs, their start, giving a launch back, and the end.

use super::{permit, Actor, Move};
use crate::model::JobStatus::{self, *};
use crate::model::{JobEventKind, StopCause, SUBMIT_ORDER_SQL};
use crate::server::db::events;
use crate::server::db::runs::{actor, release_cards, RunRow, RUN_COLUMNS};
use serde_json::{json, Value};
use sqlx::PgPool;
use uuid::Uuid;

pub(super) const CLAIM: Move = Move {
    name: "a claim",
    from: &[Admitted],
    to: &[Starting],
};
pub(super) const RUNNING: Move = Move {
    name: "a start",
    from: &[Starting],
    to: &[Running],
};
pub(super) const UNCLAIM: Move = Move {
    name: "an unclaim",
    from: &[Starting],
    to: &[Admitted],
};
pub(super) const FINISH: Move = Move {
    name: "a run's end",
    from: &[Starting, Running],
    to: &[Succeeded, Failed, TimedOut, Cancelled],
};

/// Atomically takes up to `limit` admitted jobs of this node (no two processes take the same one);
/// with `epoch`, only while the node's row still holds that lease and is not forgotten. Taken by
/// priority, then submit order, not fair share: admitted jobs already hold their cards, and the
/// order only says which of them launch first within the node's launch slots.
///
/// The rows are locked `FOR NO KEY UPDATE`, the lock the claim's own update of non-key columns
/// needs, not `FOR UPDATE`: every row inserted that references a job (a dependent's `job_deps`
/// row, an event) holds `FOR KEY SHARE` on it until its transaction ends, which `FOR UPDATE`
/// conflicts with. `SKIP LOCKED` would then pass the job over, and no notification comes when
/// that other transaction ends: the job stayed admitted until the next backstop.
pub async fn claim(
    pool: &PgPool,
    node: &str,
    epoch: Option<i64>,
    limit: i64,
) -> sqlx::Result<Vec<RunRow>> {
    permit(&CLAIM, Actor::Runner)?;
    let mut tx = pool.begin().await?;
    let rows: Vec<RunRow> = sqlx::query_as(&format!(
        "UPDATE jobs SET status = 'starting', attempt = attempt + 1 \
         WHERE id IN (SELECT id FROM jobs WHERE {guard} AND node = $1 \
                      ORDER BY {SUBMIT_ORDER_SQL} FOR NO KEY UPDATE SKIP LOCKED LIMIT $2) \
           AND ($3::bigint IS NULL OR EXISTS (SELECT 1 FROM nodes n \
                WHERE n.name = $1 AND n.epoch = $3 AND n.forgotten_at IS NULL)) \
         RETURNING {RUN_COLUMNS}",
        guard = CLAIM.guard("status"),
    ))
    .bind(node)
    .bind(limit)
    .bind(epoch)
    .fetch_all(&mut *tx)
    .await?;
    for r in &rows {
        events::job_event(
            &mut *tx,
            r.id,
            &actor(node),
            JobEventKind::Starting,
            json!({ "attempt": r.attempt }),
        )
        .await?;
    }
    tx.commit().await?;
    Ok(rows)
}

/// `starting` → `running`. Returns false if the job left `starting`.
///
/// Returns the job's submit → running time in seconds (Postgres's clock), or `None` when it was no
/// longer starting.
pub async fn set_running(pool: &PgPool, job: Uuid, node: &str) -> sqlx::Result<Option<f64>> {
    leave_starting(
        pool,
        (job, node),
        (
            &RUNNING,
            "status = 'running', started_at = clock_timestamp()",
        ),
        (JobEventKind::Started, json!({})),
        Some(JobStatus::Running),
    )
    .await
}

/// Gives a claimed job back to `admitted` (its cards stay reserved) so a later attempt launches it:
/// for launches interrupted by Docker being unreachable or gpuq stopping.
pub async fn unclaim(pool: &PgPool, job: Uuid, node: &str, why: &str) -> sqlx::Result<()> {
    leave_starting(
        pool,
        (job, node),
        (&UNCLAIM, "status = 'admitted', container_id = NULL"),
        (JobEventKind::LaunchDeferred, json!({ "reason": why })),
        None,
    )
    .await
    .map(drop)
}

/// Moves a `starting` job on with `set` (a fixed SET list, the change `mv` declares) and records
/// the event, in one transaction; with `tell`, the live pages (and runners) hear of the new
/// status. An unclaimed job is not announced: that would wake the runner straight into the failure
/// it just backed off from. Returns `None` if the job had left `starting`.
async fn leave_starting(
    pool: &PgPool,
    (job, node): (Uuid, &str),
    (mv, set): (&Move, &'static str),
    (kind, detail): (JobEventKind, Value),
    tell: Option<JobStatus>,
) -> sqlx::Result<Option<f64>> {
    permit(mv, Actor::Runner)?;
    let mut tx = pool.begin().await?;
    // What the job has waited since its submission, read in the same statement (a launch must
    // not cost another query for its metric).
    let waited: Option<f64> = sqlx::query_scalar(&format!(
        "UPDATE jobs SET {set} WHERE id = $1 AND {guard} \
         RETURNING extract(epoch FROM coalesce(started_at, clock_timestamp()) - created_at)::float8",
        guard = mv.guard("status"),
    ))
    .bind(job)
    .fetch_optional(&mut *tx)
    .await?;
    if waited.is_some() {
        events::job_event(&mut *tx, job, &actor(node), kind, detail).await?;
        if let Some(to) = tell {
            events::job_changed(&mut *tx, job, to).await?;
        }
    }
    tx.commit().await?;
    Ok(waited)
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ending {
    /// An ending: `succeeded`, `failed`, `timed_out` or `cancelled`.
    pub status: JobStatus,
    /// Container exit code, when it ran.
    pub exit_code: Option<i32>,
    /// Why, in plain words (None for a plain success).
    pub reason: Option<String>,
    /// What stopped it, when not its own exit (a deadline, a runtime restart); `None` for a job
    /// that ended by itself, which also clears a stop asked for too late to matter.
    pub cause: Option<StopCause>,
}

/// Records the end of a run and gives its cards back, in one transaction; wakes the schedulers so
/// the next pass admits at once. Returns false if the job was no longer starting or running.
pub async fn finish(pool: &PgPool, job: Uuid, node: &str, end: &Ending) -> sqlx::Result<bool> {
    if !FINISH.to.contains(&end.status) {
        return Err(sqlx::Error::InvalidArgument(format!(
            "the job lifecycle refuses a run's end as `{}`: not an end",
            end.status
        )));
    }
    permit(&FINISH, Actor::Runner)?;
    let mut tx = pool.begin().await?;
    let ended: Option<JobStatus> = sqlx::query_scalar(&format!(
        "UPDATE jobs SET status = $2, exit_code = $3, status_reason = $4, \
           stop_cause = $5, \
           finished_at = clock_timestamp(), released_at = clock_timestamp() \
         WHERE id = $1 AND {guard} RETURNING status",
        guard = FINISH.guard("status"),
    ))
    .bind(job)
    .bind(end.status)
    .bind(end.exit_code)
    .bind(&end.reason)
    .bind(end.cause)
    .fetch_optional(&mut *tx)
    .await?;
    let Some(status) = ended else {
        return Ok(false);
    };
    let detail = json!({ "exit_code": end.exit_code, "reason": end.reason, "cause": end.cause });
    record_end(&mut tx, (job, node), status, detail).await?;
    tx.commit().await?;
    Ok(true)
}

/// Records the end of a run that was stopped because a stop was asked for, and gives its cards
/// back, in one transaction. The cause and reason recorded with the request decide the end in the
/// same statement: a person's cancel ends `cancelled`, gpuq's own stop (VRAM overuse, a disabled
/// owner) ends `failed` with its reason. Returns the status it ended in, or `None` if the job was
/// no longer starting or running.
pub async fn finish_stopped(
    pool: &PgPool,
    job: Uuid,
    node: &str,
    exit_code: Option<i32>,
) -> sqlx::Result<Option<(JobStatus, Option<String>)>> {
    permit(&FINISH, Actor::Runner)?;
    let failing: Vec<&str> = StopCause::ALL
        .iter()
        .filter(|c| c.ends_failed())
        .map(|c| c.as_str())
        .collect();
    let mut tx = pool.begin().await?;
    let ended: Option<(JobStatus, Option<String>, Option<StopCause>)> = sqlx::query_as(&format!(
        "UPDATE jobs SET \
               status = CASE WHEN stop_cause = ANY($3) THEN 'failed' ELSE 'cancelled' END, \
               status_reason = coalesce(stop_reason, CASE stop_cause \
                 WHEN 'admin' THEN 'cancelled by an admin while running' \
                 ELSE 'cancelled while running' END), \
               stop_cause = coalesce(stop_cause, 'owner'), exit_code = $2, \
               finished_at = clock_timestamp(), released_at = clock_timestamp() \
             WHERE id = $1 AND {guard} RETURNING status, status_reason, stop_cause",
        guard = FINISH.guard("status"),
    ))
    .bind(job)
    .bind(exit_code)
    .bind(&failing)
    .fetch_optional(&mut *tx)
    .await?;
    let Some((status, reason, cause)) = ended else {
        return Ok(None);
    };
    let detail = json!({ "exit_code": exit_code, "reason": reason, "cause": cause });
    record_end(&mut tx, (job, node), status, detail).await?;
    tx.commit().await?;
    Ok(Some((status, reason)))
}

/// The rest of an end, in its transaction: the cards back, the end and release events, the wake.
async fn record_end(
    tx: &mut sqlx::PgConnection,
    (job, node): (Uuid, &str),
    status: JobStatus,
    detail: Value,
) -> sqlx::Result<()> {
    release_cards(&mut *tx, job).await?;
    let kind = JobEventKind::ending(status).unwrap_or(JobEventKind::Failed);
    events::job_event(&mut *tx, job, &actor(node), kind, detail).await?;
    let released = JobEventKind::Released;
    events::job_event(&mut *tx, job, &actor(node), released, json!({})).await?;
    events::wake(&mut *tx, "finish").await?;
    events::job_changed(&mut *tx, job, status).await
}
