//! Placement and its loss: a pass admitting queued jobs, an admin forgetting a lost node, and a
//! pass putting back in the queue the jobs of lost nodes that asked for it.

use super::{permit, Actor, Move};
use crate::model::JobStatus::*;
use crate::model::StopCause;
use sqlx::PgConnection;
use std::collections::HashSet;
use uuid::Uuid;

pub(super) const ADMIT: Move = Move {
    name: "an admission",
    from: &[Queued],
    to: &[Admitted],
};
pub(super) const UNRUNNABLE: Move = Move {
    name: "failing a queued job that cannot run",
    from: &[Queued],
    to: &[Failed],
};
pub(super) const NODE_FORGOTTEN: Move = Move {
    name: "forgetting a lost node",
    from: &[Admitted, Starting, Running],
    to: &[Failed],
};
pub(super) const NODE_LOST_REQUEUE: Move = Move {
    name: "a requeue after a node's loss",
    from: &[Admitted, Starting, Running],
    to: &[Queued],
};

/// Marks `ids` admitted on `nodes` (pairwise) in one statement, each only if it is still queued
/// (a job cancelled since the pass read the queue is simply not admitted). Returns the jobs that
/// were.
pub async fn admit(
    db: &mut PgConnection,
    ids: &[Uuid],
    nodes: &[String],
) -> sqlx::Result<HashSet<Uuid>> {
    permit(&ADMIT, Actor::Scheduler)?;
    let admitted: Vec<Uuid> = sqlx::query_scalar(&format!(
        "UPDATE jobs j SET status = 'admitted', admitted_at = clock_timestamp(), node = t.node, \
           status_reason = NULL \
         FROM unnest($1::uuid[], $2::text[]) AS t(id, node) \
         WHERE j.id = t.id AND {guard} RETURNING j.id",
        guard = ADMIT.guard("j.status"),
    ))
    .bind(ids)
    .bind(nodes)
    .fetch_all(db)
    .await?;
    Ok(admitted.into_iter().collect())
}

/// Ends a queued job `failed` with `reason`: its image cannot be had (found so by a node's puller,
/// a runner, or by the pass on every node). Only if it is still queued; a
/// queued job holds no cards, so it is released at once. Returns whether it was ended.
pub async fn fail_queued(
    db: &mut PgConnection,
    id: Uuid,
    by: Actor,
    reason: &str,
) -> sqlx::Result<bool> {
    permit(&UNRUNNABLE, by)?;
    let failed: Option<Uuid> = sqlx::query_scalar(&format!(
        "UPDATE jobs SET status = 'failed', status_reason = $2, finished_at = clock_timestamp(), \
           released_at = clock_timestamp() \
         WHERE id = $1 AND {guard} RETURNING id",
        guard = UNRUNNABLE.guard("status"),
    ))
    .bind(id)
    .bind(reason)
    .fetch_optional(db)
    .await?;
    Ok(failed.is_some())
}

/// Ends every job that `node` (being forgotten by an admin, in the caller's transaction) had
/// admitted, was starting or running: `failed` with `reason`, cause `node_lost`. The caller gives
/// their cards back. Returns the jobs ended.
pub async fn fail_on_forgotten_node(
    db: &mut PgConnection,
    node: &str,
    reason: &str,
) -> sqlx::Result<Vec<Uuid>> {
    permit(&NODE_FORGOTTEN, Actor::Admin)?;
    sqlx::query_scalar(&format!(
        "UPDATE jobs SET status = 'failed', status_reason = $2, stop_cause = $3, \
           finished_at = clock_timestamp(), released_at = clock_timestamp() \
         WHERE node = $1 AND {guard} RETURNING id",
        guard = NODE_FORGOTTEN.guard("status"),
    ))
    .bind(node)
    .bind(reason)
    .bind(StopCause::NodeLost)
    .fetch_all(db)
    .await
}

/// Puts `jobs` (placed on lost nodes, locked by the caller's admission transaction, their cards
/// already released) back in the queue as if never placed. Returns the jobs moved.
pub async fn requeue_lost_jobs(db: &mut PgConnection, jobs: &[Uuid]) -> sqlx::Result<Vec<Uuid>> {
    permit(&NODE_LOST_REQUEUE, Actor::Scheduler)?;
    sqlx::query_scalar(&format!(
        "UPDATE jobs SET status = 'queued', node = NULL, admitted_at = NULL, started_at = NULL, \
           container_id = NULL, deadline_at = NULL, log_path = NULL \
         WHERE id = ANY($1) AND {guard} RETURNING id",
        guard = NODE_LOST_REQUEUE.guard("status"),
    ))
    .bind(jobs)
    .fetch_all(db)
    .await
}
