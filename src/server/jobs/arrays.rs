//! Arrays as one: their summary, cancelling every element, and resubmitting the failed ones.
//! Each is one transaction; the rights are a job's (cancel: the owner and admins; resubmit: the
//! owner only, as the env is private).

use super::access;
use super::batch::{self, ElementRow};
use crate::model::batch::{ArrayAck, ArraySummary, ArrayView};
use crate::model::spec::JobSpec;
use crate::model::{AppError, JobAck, JobEventKind, JobStatus, LiveEvent};
use crate::server::auth::CurrentUser;
use crate::server::db::events;
use crate::server::db::lifecycle::{self, Actor};
use crate::server::error::OrInternal;
use crate::server::Ctx;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use uuid::Uuid;

#[derive(sqlx::FromRow)]
struct ArrayRow {
    owner_id: Uuid,
    owner: String,
    name: String,
    size: i32,
    running_limit: Option<i32>,
}

async fn find(db: &mut sqlx::PgConnection, id: Uuid) -> Result<ArrayRow, AppError> {
    sqlx::query_as(
        "SELECT a.owner_id, u.username AS owner, a.name, a.size, a.running_limit \
         FROM job_arrays a JOIN users u ON u.id = a.owner_id WHERE a.id = $1",
    )
    .bind(id)
    .fetch_optional(&mut *db)
    .await
    .or_internal("reading an array")?
    .ok_or_else(|| AppError::NotFound(format!("no array {id}")))
}

/// An array's size, limit and counts per status (the shared queue: anyone signed in).
pub async fn view(ctx: &Ctx, _user: &CurrentUser, id: Uuid) -> Result<ArrayView, AppError> {
    let mut conn = ctx
        .pool
        .acquire()
        .await
        .or_internal("acquiring a connection")?;
    let a = find(&mut conn, id).await?;
    let rows: Vec<(Uuid, JobStatus)> =
        sqlx::query_as("SELECT id, status FROM jobs WHERE array_id = $1 ORDER BY array_index")
            .bind(id)
            .fetch_all(&mut *conn)
            .await
            .or_internal("reading an array's elements")?;
    let mut counts: BTreeMap<String, i64> = BTreeMap::new();
    for (_, status) in &rows {
        *counts.entry(status.to_string()).or_default() += 1;
    }
    Ok(ArrayView {
        array_id: id,
        name: a.name,
        owner: a.owner,
        size: a.size,
        running_limit: a.running_limit,
        counts,
        job_ids: rows.into_iter().map(|(id, _)| id).collect(),
    })
}

/// The whole counts of arrays `ids` (the shared queue's: anyone who sees their elements in a list
/// may see them), in one query.
pub async fn summaries(pool: &sqlx::PgPool, ids: &[Uuid]) -> Result<Vec<ArraySummary>, AppError> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let rows: Vec<(Uuid, i32, Option<i32>, JobStatus, i64)> = sqlx::query_as(
        "SELECT a.id, a.size, a.running_limit, j.status, count(*) \
         FROM job_arrays a JOIN jobs j ON j.array_id = a.id \
         WHERE a.id = ANY($1) GROUP BY a.id, a.size, a.running_limit, j.status",
    )
    .bind(ids)
    .fetch_all(pool)
    .await
    .or_internal("counting arrays' elements")?;
    let mut out: Vec<ArraySummary> = Vec::with_capacity(ids.len());
    for (id, size, running_limit, status, n) in rows {
        let at = match out.iter().position(|s| s.array_id == id) {
            Some(at) => at,
            None => {
                out.push(ArraySummary {
                    array_id: id,
                    size,
                    running_limit,
                    counts: BTreeMap::new(),
                });
                out.len() - 1
            }
        };
        out[at].counts.insert(status.to_string(), n);
    }
    Ok(out)
}

/// Cancels every element of an array that has not ended (its owner or an admin), in one
/// transaction: those not started end at once, started ones are asked to stop.
pub async fn cancel(ctx: &Ctx, user: &CurrentUser, id: Uuid) -> Result<ArrayAck, AppError> {
    let mut tx = ctx
        .pool
        .begin()
        .await
        .or_internal("beginning a cancellation")?;
    let a = find(&mut tx, id).await?;
    if !access::may_cancel(user, a.owner_id) {
        return Err(AppError::Forbidden(
            "only the array's owner or an admin may cancel it".into(),
        ));
    }
    let by = if user.id == a.owner_id {
        Actor::Owner
    } else {
        Actor::Admin
    };
    let reason = format!("cancelled by {} (the whole array)", user.username);
    let detail = json!({ "cause": by.cancel_cause(), "array_id": id });
    let live: Vec<Uuid> = sqlx::query_scalar(
        "SELECT id FROM jobs WHERE array_id = $1 \
         AND status IN ('queued', 'admitted', 'starting', 'running') ORDER BY array_index \
         FOR UPDATE",
    )
    .bind(id)
    .fetch_all(&mut *tx)
    .await
    .or_internal("reading an array's elements")?;
    let (mut cancelled, mut stopping) = (0, 0);
    for job in live {
        if lifecycle::cancel_unstarted(&mut *tx, job, by, &reason)
            .await
            .or_internal("cancelling an element")?
            .is_some()
        {
            cancelled += 1;
            events::job_event(
                &mut *tx,
                job,
                &user.username,
                JobEventKind::Cancelled,
                detail.clone(),
            )
            .await
            .or_internal("recording a cancellation")?;
        } else if lifecycle::request_cancel(&mut *tx, job, by)
            .await
            .or_internal("asking an element to stop")?
        {
            stopping += 1;
            events::job_event(
                &mut *tx,
                job,
                &user.username,
                JobEventKind::CancelRequested,
                detail.clone(),
            )
            .await
            .or_internal("recording a cancellation")?;
            events::announce(&mut *tx, &LiveEvent::cancel_requested(job))
                .await
                .or_internal("notifying the runner")?;
        }
    }
    events::wake(&mut *tx, "cancel")
        .await
        .or_internal("waking the scheduler")?;
    tx.commit().await.or_internal("committing a cancellation")?;
    Ok(ArrayAck {
        array_id: id,
        cancelled,
        stopping,
    })
}

/// Submits again, as a new array with the same running limit, the elements of an array that
/// failed or timed out (its owner only), in one transaction; each keeps its index and its own
/// spec, checked through today's rules. 409 when none failed.
pub async fn resubmit_failed(ctx: &Ctx, user: &CurrentUser, id: Uuid) -> Result<JobAck, AppError> {
    ctx.submit_rate
        .take(user, crate::server::limits::rate::Action::Submit)?;
    let mut conn = ctx
        .pool
        .acquire()
        .await
        .or_internal("acquiring a connection")?;
    let a = find(&mut conn, id).await?;
    if !access::may_resubmit(user, a.owner_id) {
        return Err(AppError::Forbidden(
            "only the array's owner may resubmit it (its environment is private)".into(),
        ));
    }
    let failed: Vec<(Uuid, i32, Value, String)> = sqlx::query_as(
        "SELECT id, array_index, spec, name FROM jobs WHERE array_id = $1 \
         AND status IN ('failed', 'timed_out') ORDER BY array_index",
    )
    .bind(id)
    .fetch_all(&mut *conn)
    .await
    .or_internal("reading an array's failed elements")?;
    drop(conn);
    let Some((_, _, first, _)) = failed.first() else {
        return Err(AppError::Conflict(format!(
            "array {id} has no failed or timed-out element to resubmit"
        )));
    };
    // The elements differ only in their env and name: the first is checked against the policy,
    // the manifest and the cards, every one against the parser.
    let (spec, limits, policy) = super::check_submission(ctx, user, &first.to_string()).await?;
    if spec.port().is_some() {
        return Err(AppError::invalid(
            "port",
            "an array or sweep cannot be a session: submit sessions one at a time",
        ));
    }
    let mut rows = Vec::with_capacity(failed.len());
    for (_, index, stored, name) in &failed {
        let parsed = JobSpec::from_json(&stored.to_string(), &limits)
            .map_err(|e| AppError::invalid(e.field, e.message))?;
        rows.push(ElementRow {
            index: u32::try_from(*index).unwrap_or_default(),
            spec: serde_json::to_value(&parsed).or_internal("encoding a spec")?,
            name: name.clone(),
        });
    }
    let mut tx = ctx
        .pool
        .begin()
        .await
        .or_internal("beginning a submission")?;
    super::check_queued_room(&mut tx, user, &policy, rows.len()).await?;
    let limit = a.running_limit.and_then(|n| u32::try_from(n).ok());
    let ack = batch::enter_array(&mut tx, user, (&a.name, &spec), limit, rows, &[]).await?;
    let olds: Vec<Uuid> = failed.iter().map(|(old, ..)| *old).collect();
    let news = ack.job_ids.clone().unwrap_or_default();
    sqlx::query(
        "INSERT INTO job_events (job_id, actor, kind, detail) \
         SELECT n, $3, $4, jsonb_build_object('job', o, 'array_id', $5::uuid) \
         FROM unnest($1::uuid[], $2::uuid[]) AS t(n, o)",
    )
    .bind(&news)
    .bind(&olds)
    .bind(&user.username)
    .bind(JobEventKind::ResubmittedFrom)
    .bind(id)
    .execute(&mut *tx)
    .await
    .or_internal("recording a resubmission")?;
    tx.commit().await.or_internal("committing a submission")?;
    Ok(ack)
}
