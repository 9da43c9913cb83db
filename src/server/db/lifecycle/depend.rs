//! Dependencies' ends: a pass cancelling queued jobs whose dependency can no longer hold.

use super::{permit, Actor, Move};
use crate::model::JobStatus::*;
use crate::model::StopCause;
use sqlx::PgConnection;
use uuid::Uuid;

pub(super) const DEPENDENCY_BROKEN: Move = Move {
    name: "cancelling a dependent whose dependency can no longer hold",
    from: &[Queued],
    to: &[Cancelled],
};

/// Ends `ids` (pairwise with `reasons`) `cancelled`, cause `dependency`, each only if it is still
/// queued; a queued job holds no cards, so it is released at once. Called by the admission pass
/// under its lock. Returns the jobs ended.
pub async fn cancel_dependents(
    db: &mut PgConnection,
    ids: &[Uuid],
    reasons: &[String],
) -> sqlx::Result<Vec<Uuid>> {
    permit(&DEPENDENCY_BROKEN, Actor::Scheduler)?;
    sqlx::query_scalar(&format!(
        "UPDATE jobs j SET status = 'cancelled', status_reason = t.reason, stop_cause = $3, \
           finished_at = clock_timestamp(), released_at = clock_timestamp() \
         FROM unnest($1::uuid[], $2::text[]) AS t(id, reason) \
         WHERE j.id = t.id AND {guard} RETURNING j.id",
        guard = DEPENDENCY_BROKEN.guard("j.status"),
    ))
    .bind(ids)
    .bind(reasons)
    .bind(StopCause::Dependency)
    .fetch_all(db)
    .await
}
