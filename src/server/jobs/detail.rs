//! One job as its page shows it: the view, what the viewer may do, and the timeline from its
//! trail in plain words.

use crate::model::{AppError, IdleFlag, JobDetail, JobEventKind, JobEventView, Role};
use crate::server::auth::CurrentUser;
use crate::server::db::events::{self, JobEventRow};
use crate::server::error::OrInternal;
use crate::server::Ctx;
use chrono::{DateTime, Utc};
use uuid::Uuid;

/// A job with its timeline, and whether the viewer may cancel or resubmit it.
pub async fn detail(ctx: &Ctx, user: &CurrentUser, id: Uuid) -> Result<JobDetail, AppError> {
    let job = super::get(ctx, user, id).await?;
    // The trail holds reasons and details: only for those who see the job's details. The idle
    // flag is a detail too (it says what the job's processes do), read from the same trail.
    let (events, idle) = if job.details_hidden {
        (Vec::new(), None)
    } else {
        let rows = trail_rows(ctx, id).await?;
        let idle = if job.status.is_terminal() {
            None
        } else {
            idle_flag(&rows)
        };
        (in_words(rows), idle)
    };
    let owner = job.owner == user.username;
    // Where the owner stands against their budgets, beside why their job waits.
    let budgets = if owner && job.status == crate::model::JobStatus::Queued {
        crate::server::budgets::mine(&ctx.pool, user.id).await?
    } else {
        Vec::new()
    };
    Ok(JobDetail {
        can_cancel: (owner || user.role.at_least(Role::Admin)) && !job.status.is_terminal(),
        can_resubmit: owner,
        job,
        events,
        idle,
        budgets,
    })
}

/// The job's idle flag, when the last idle event of its trail (`idle_flagged`, `idle_cleared` or
/// `idle`) flagged it: not cleared since, not stopped.
fn idle_flag(trail: &[JobEventRow]) -> Option<IdleFlag> {
    let last = trail.iter().rev().find(|e| {
        matches!(
            e.kind,
            JobEventKind::IdleFlagged | JobEventKind::IdleCleared | JobEventKind::Idle
        )
    });
    match last {
        Some(JobEventRow {
            at,
            kind: JobEventKind::IdleFlagged,
            detail: d,
            ..
        }) => Some(IdleFlag {
            flagged_at: *at,
            quiet_since: serde_json::from_value::<DateTime<Utc>>(d["quiet_since"].clone()).ok(),
            no_process: d["no_process"].as_bool().unwrap_or(false),
            sm_percent: d["sm_percent"].as_u64().and_then(|p| u32::try_from(p).ok()),
            stop_at: serde_json::from_value::<Option<DateTime<Utc>>>(d["stop_at"].clone())
                .ok()
                .flatten(),
        }),
        _ => None,
    }
}

/// A job's trail, oldest first (`GET /api/v1/jobs/{id}/events`), for those who may read its
/// details (its owner, managers and admins): the trail holds reasons and details. The job must
/// exist (404), and another member's job is refused (403), as its page hides its trail.
pub async fn events(
    ctx: &Ctx,
    user: &CurrentUser,
    id: Uuid,
) -> Result<Vec<JobEventView>, AppError> {
    let job = super::get(ctx, user, id).await?;
    if job.details_hidden {
        return Err(AppError::Forbidden(format!(
            "job {id} is {}'s: its trail is for its owner, managers and admins",
            job.owner
        )));
    }
    Ok(in_words(trail_rows(ctx, id).await?))
}

/// Job `id`'s trail, oldest first (whoever may read it decided by the caller).
async fn trail_rows(ctx: &Ctx, id: Uuid) -> Result<Vec<JobEventRow>, AppError> {
    events::job_events_of(&ctx.pool, id)
        .await
        .or_internal("reading a job's events")
}

/// A trail in plain words.
fn in_words(rows: Vec<JobEventRow>) -> Vec<JobEventView> {
    rows.into_iter()
        .map(|e| JobEventView {
            at: e.at,
            actor: e.actor,
            detail: describe(e.kind, &e.detail),
            kind: e.kind,
        })
        .collect()
}

fn describe(kind: JobEventKind, detail: &serde_json::Value) -> String {
    let gpus = || {
        detail["gpus"]
            .as_array()
            .map(|g| {
                g.iter()
                    .map(|c| match c {
                        serde_json::Value::String(s) => s.clone(),
                        other => format!(
                            "GPU {} ({})",
                            other["index"],
                            other["uuid"].as_str().unwrap_or("?")
                        ),
                    })
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .unwrap_or_default()
    };
    match kind {
        JobEventKind::Admitted => format!(
            "on node {}: {}",
            detail["node"].as_str().unwrap_or("?"),
            gpus()
        ),
        JobEventKind::FenceVerified => format!("container sees exactly {}", gpus()),
        JobEventKind::Succeeded
        | JobEventKind::Failed
        | JobEventKind::TimedOut
        | JobEventKind::Cancelled => match (&detail["exit_code"], detail["reason"].as_str()) {
            (serde_json::Value::Number(c), Some(r)) => format!("exit code {c}: {r}"),
            (serde_json::Value::Number(c), None) => format!("exit code {c}"),
            (_, Some(r)) => r.to_owned(),
            _ => String::new(),
        },
        JobEventKind::Rejected
        | JobEventKind::LaunchDeferred
        | JobEventKind::Requeued
        | JobEventKind::Held
        | JobEventKind::CancelRequested
        | JobEventKind::SessionIdleWarning
        | JobEventKind::SessionIdleStop => detail["reason"].as_str().unwrap_or_default().to_owned(),
        JobEventKind::IdleFlagged => {
            let what = if detail["no_process"].as_bool() == Some(true) {
                "no process on its cards".to_owned()
            } else {
                format!("no process above {} % SM", detail["sm_percent"])
            };
            let since = detail["quiet_since"].as_str().unwrap_or("?");
            match detail["stop_at"].as_str() {
                Some(at) => format!("{what} since {since}; to be stopped at {at}"),
                None => format!("{what} since {since}"),
            }
        }
        JobEventKind::IdleCleared => format!(
            "busy again at {}",
            detail["busy_at"].as_str().unwrap_or("?")
        ),
        JobEventKind::Idle => format!(
            "stopped: idle since {}",
            detail["quiet_since"].as_str().unwrap_or("?")
        ),
        _ => String::new(),
    }
}
