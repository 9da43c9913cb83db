//! Jobs and cards for the browser pages: the same service functions the REST API calls.

use crate::model::{AppError, DashboardView, JobAck, JobDetail, Preview};
use leptos::prelude::*;
use uuid::Uuid;

/// The dashboard: cards, the queue summary and the caller's unfinished jobs.
#[server(endpoint = "dashboard")]
pub async fn dashboard() -> Result<DashboardView, AppError> {
    use crate::model::Role;
    use crate::server::auth::server_fn_require;
    use crate::server::gpu::views as gpu_views;
    use crate::server::http::OrInternal;
    use crate::server::jobs::{self, ListQuery};

    let (state, user) = server_fn_require(Role::Member).await?;
    let gpus = gpu_views::list(&state).await?;
    let (waiting, oldest): (i64, Option<chrono::DateTime<chrono::Utc>>) =
        sqlx::query_as("SELECT count(*), min(created_at) FROM jobs WHERE status = 'queued'")
            .fetch_one(&state.pool)
            .await
            .or_internal("summarising the queue")?;
    let query = ListQuery {
        status: Some("queued,admitted,starting,running".into()),
        mine: Some(true),
        per_page: Some(50),
        ..ListQuery::default()
    };
    let mine = jobs::list(&state, &user, &query).await?.jobs;
    Ok(DashboardView {
        gpus,
        waiting,
        oldest_wait_since: oldest,
        mine,
    })
}

/// What would happen to this spec (JSON, as for `POST /api/v1/jobs`) if submitted now.
#[server(endpoint = "preview_job")]
pub async fn preview_job(spec: String) -> Result<Preview, AppError> {
    use crate::model::Role;
    use crate::server::auth::server_fn_require;

    let (state, _) = server_fn_require(Role::Member).await?;
    crate::server::jobs::preview(&state, &spec).await
}

/// Submits a spec (JSON, as for `POST /api/v1/jobs`).
#[server(endpoint = "submit_job")]
pub async fn submit_job(spec: String) -> Result<JobAck, AppError> {
    use crate::model::Role;
    use crate::server::auth::server_fn_require;

    let (state, user) = server_fn_require(Role::Member).await?;
    crate::server::jobs::submit(&state, &user, &spec).await
}

/// A job with its audit trail.
#[server(endpoint = "job_detail")]
pub async fn get_job_detail(id: Uuid) -> Result<JobDetail, AppError> {
    use crate::model::{JobEventView, Role};
    use crate::server::auth::server_fn_require;
    use crate::server::db::events;
    use crate::server::http::OrInternal;

    let (state, user) = server_fn_require(Role::Member).await?;
    let job = crate::server::jobs::get(&state, &user, id).await?;
    let rows = events::job_events_of(&state.pool, id)
        .await
        .or_internal("reading a job's events")?;
    let owner = job.owner == user.username;
    Ok(JobDetail {
        can_cancel: (owner || user.role.at_least(Role::Admin)) && !job.status.is_terminal(),
        can_resubmit: owner,
        job,
        events: rows
            .into_iter()
            .map(|e| JobEventView {
                at: e.at,
                actor: e.actor,
                detail: describe(&e.kind, &e.detail),
                kind: e.kind,
            })
            .collect(),
    })
}

#[cfg(feature = "ssr")]
fn describe(kind: &str, detail: &serde_json::Value) -> String {
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
        "admitted" => format!(
            "on node {}: {}",
            detail["node"].as_str().unwrap_or("?"),
            gpus()
        ),
        "fence_verified" => format!("container sees exactly {}", gpus()),
        "succeeded" | "failed" | "timed_out" | "cancelled" => {
            match (&detail["exit_code"], detail["reason"].as_str()) {
                (serde_json::Value::Number(c), Some(r)) => format!("exit code {c}: {r}"),
                (serde_json::Value::Number(c), None) => format!("exit code {c}"),
                (_, Some(r)) => r.to_owned(),
                _ => String::new(),
            }
        }
        "rejected" | "launch_deferred" => detail["reason"].as_str().unwrap_or_default().to_owned(),
        _ => String::new(),
    }
}

/// The last `tail` lines of a job's log.
#[server(endpoint = "job_log")]
pub async fn job_log(id: Uuid, tail: usize) -> Result<String, AppError> {
    use crate::model::Role;
    use crate::server::auth::server_fn_require;
    use crate::server::http::OrInternal;
    use http_body_util::BodyExt;

    let (state, user) = server_fn_require(Role::Member).await?;
    let body = crate::server::jobs::logs::read(&state, &user, id, Some(tail), false).await?;
    let bytes = body
        .collect()
        .await
        .or_internal("reading a log")?
        .to_bytes();
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// Cancels a job (owner or admin).
#[server(endpoint = "cancel_job")]
pub async fn cancel_job(id: Uuid) -> Result<JobAck, AppError> {
    use crate::model::Role;
    use crate::server::auth::server_fn_require;

    let (state, user) = server_fn_require(Role::Member).await?;
    crate::server::jobs::cancel(&state, &user, id).await
}

/// Submits a copy of one of the caller's jobs as a new job.
#[server(endpoint = "resubmit_job")]
pub async fn resubmit_job(id: Uuid) -> Result<JobAck, AppError> {
    use crate::model::Role;
    use crate::server::auth::server_fn_require;

    let (state, user) = server_fn_require(Role::Member).await?;
    crate::server::jobs::resubmit(&state, &user, id).await
}

/// The manifest, for the submit form's workload choice.
#[server(endpoint = "get_manifest")]
pub async fn get_manifest() -> Result<crate::model::ManifestView, AppError> {
    use crate::model::Role;
    use crate::server::auth::server_fn_require;

    let (state, _) = server_fn_require(Role::Member).await?;
    crate::server::manifest::view(&state).await
}

/// A page of jobs, newest first (the queue and history page).
#[server(endpoint = "list_jobs")]
pub async fn list_jobs(
    status: String,
    owner: String,
    mine: bool,
    page: i64,
    #[server(default)] sort: String,
) -> Result<crate::model::JobPage, AppError> {
    use crate::model::Role;
    use crate::server::auth::server_fn_require;
    use crate::server::jobs::ListQuery;

    let (state, user) = server_fn_require(Role::Member).await?;
    let query = ListQuery {
        status: (!status.is_empty()).then_some(status),
        owner: (!owner.trim().is_empty()).then(|| owner.trim().to_owned()),
        mine: Some(mine),
        page: Some(page),
        per_page: Some(20),
        sort: (!sort.is_empty()).then_some(sort),
    };
    crate::server::jobs::list(&state, &user, &query).await
}
