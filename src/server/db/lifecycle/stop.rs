//! Stops: cancelling jobs that have not started, asking runners to stop started ones (with the
//! cause the end will carry), and putting a disabled owner's admitted jobs back in the queue.

use super::{permit, Actor, Move};
use crate::model::JobStatus::{self, *};
use crate::model::{JobEventKind, LiveEvent, StopCause};
use crate::server::db::events;
use serde_json::Value;
use sqlx::{PgConnection, PgExecutor};
use uuid::Uuid;

pub(super) const CANCEL_UNSTARTED: Move = Move {
    name: "a cancel before the start",
    from: &[Queued, Admitted],
    to: &[Cancelled],
};
pub(super) const CANCEL_ADMITTED: Move = Move {
    name: "a cancel of admitted jobs",
    from: &[Admitted],
    to: &[Cancelled],
};
pub(super) const REQUEUE_ADMITTED: Move = Move {
    name: "putting a disabled owner's admitted jobs back",
    from: &[Admitted],
    to: &[Queued],
};
/// The statuses in which a stop is asked of the runner rather than made here.
pub(super) const STARTED: Move = Move {
    name: "a stop request",
    from: &[Starting, Running],
    to: &[],
};

/// Cancels a job that has not started, at `by`'s request: queued → cancelled (nothing to
/// release), admitted → cancelled (its cards are reclaimed by the next pass). Returns the new
/// status, or `None` when the job was in neither state.
pub async fn cancel_unstarted(
    db: impl PgExecutor<'_>,
    id: Uuid,
    by: Actor,
    reason: &str,
) -> sqlx::Result<Option<JobStatus>> {
    permit(&CANCEL_UNSTARTED, by)?;
    sqlx::query_scalar(&format!(
        "UPDATE jobs SET status = 'cancelled', status_reason = $2, stop_cause = $3, \
           finished_at = clock_timestamp(), \
           released_at = CASE WHEN status = 'queued' THEN clock_timestamp() END \
         WHERE id = $1 AND {guard} RETURNING status",
        guard = CANCEL_UNSTARTED.guard("status"),
    ))
    .bind(id)
    .bind(reason)
    .bind(by.cancel_cause())
    .fetch_optional(db)
    .await
}

/// Cancels, at an admin's request, every job not yet started (`admitted_only`: only the admitted
/// ones), as [`cancel_unstarted`] does one: a closing sweep for a queue that is thrown away (the
/// admission benchmark's). Returns how many were cancelled.
pub async fn cancel_unstarted_all(
    db: impl PgExecutor<'_>,
    admitted_only: bool,
    by: Actor,
) -> sqlx::Result<u64> {
    let mv = if admitted_only {
        &CANCEL_ADMITTED
    } else {
        &CANCEL_UNSTARTED
    };
    permit(mv, by)?;
    let r = sqlx::query(&format!(
        "UPDATE jobs SET status = 'cancelled', stop_cause = $1, finished_at = clock_timestamp(), \
           released_at = CASE WHEN status = 'queued' THEN clock_timestamp() END \
         WHERE {guard}",
        guard = mv.guard("status"),
    ))
    .bind(by.cancel_cause())
    .execute(db)
    .await?;
    Ok(r.rows_affected())
}

/// Asks the runner to stop a started job at `by`'s request (the job ends `cancelled` with that
/// cause). Returns whether the request was recorded (a second request keeps the first's cause).
pub async fn request_cancel(db: impl PgExecutor<'_>, id: Uuid, by: Actor) -> sqlx::Result<bool> {
    if !matches!(by, Actor::Owner | Actor::Admin) {
        return Err(sqlx::Error::InvalidArgument(format!(
            "the job lifecycle refuses a cancel asked by {by:?}: only a job's owner or an admin cancels"
        )));
    }
    let res = sqlx::query(&format!(
        "UPDATE jobs SET cancel_requested_at = coalesce(cancel_requested_at, now()), \
           stop_cause = coalesce(stop_cause, $2) WHERE id = $1 AND {guard}",
        guard = STARTED.guard("status"),
    ))
    .bind(id)
    .bind(by.cancel_cause())
    .execute(db)
    .await?;
    Ok(res.rows_affected() == 1)
}

/// Asks the runner to stop a started job for one of gpuq's own causes (VRAM overuse, idle cards,
/// an idle session), with the reason it will end `failed` with; where it asked, records the job
/// event `kind` with `detail` and announces the request (the runner and the job's pages wake on
/// it). Returns false, and writes nothing, when the job is no longer started or a stop was already
/// asked for.
pub async fn request_stop(
    db: &mut PgConnection,
    id: Uuid,
    cause: StopCause,
    reason: &str,
    kind: JobEventKind,
    detail: Value,
) -> sqlx::Result<bool> {
    let r = sqlx::query(&format!(
        "UPDATE jobs SET cancel_requested_at = now(), stop_cause = $2, stop_reason = $3 \
         WHERE id = $1 AND {guard} AND cancel_requested_at IS NULL",
        guard = STARTED.guard("status"),
    ))
    .bind(id)
    .bind(cause)
    .bind(reason)
    .execute(&mut *db)
    .await?;
    if r.rows_affected() != 1 {
        return Ok(false);
    }
    events::job_event(&mut *db, id, "gpuq", kind, detail).await?;
    events::announce(&mut *db, &LiveEvent::cancel_requested(id)).await?;
    Ok(true)
}

/// Asks the runners to stop every started job of `owner` for `cause` (a disabled owner), ending
/// `failed` with `reason` (a job already asked to stop is left to that request). Returns the jobs
/// asked.
pub async fn request_stop_of(
    db: impl PgExecutor<'_>,
    owner: Uuid,
    cause: StopCause,
    reason: &str,
) -> sqlx::Result<Vec<Uuid>> {
    sqlx::query_scalar(&format!(
        "UPDATE jobs SET cancel_requested_at = now(), stop_cause = $2, stop_reason = $3 \
         WHERE owner_id = $1 AND {guard} AND cancel_requested_at IS NULL RETURNING id",
        guard = STARTED.guard("status"),
    ))
    .bind(owner)
    .bind(cause)
    .bind(reason)
    .fetch_all(db)
    .await
}

/// Puts `owner`'s admitted jobs (cards reserved, not claimed by a runner) back in the queue, their
/// cards released through the runner's release path, at an admin's hand (disabling the owner).
/// Returns the jobs moved.
pub async fn requeue_admitted_of(
    db: &mut sqlx::PgConnection,
    owner: Uuid,
) -> sqlx::Result<Vec<Uuid>> {
    permit(&REQUEUE_ADMITTED, Actor::Admin)?;
    let moved: Vec<Uuid> = sqlx::query_scalar(&format!(
        "UPDATE jobs SET status = 'queued', node = NULL, admitted_at = NULL \
         WHERE owner_id = $1 AND {guard} RETURNING id",
        guard = REQUEUE_ADMITTED.guard("status"),
    ))
    .bind(owner)
    .fetch_all(&mut *db)
    .await?;
    for &job in &moved {
        crate::server::db::runs::release_cards(&mut *db, job).await?;
    }
    Ok(moved)
}
