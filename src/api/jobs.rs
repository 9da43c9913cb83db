//! Jobs and cards for the browser pages: the same service functions the REST API calls.

use crate::model::{AppError, DashboardView, JobAck, JobDetail, Preview};
use leptos::prelude::*;
use uuid::Uuid;

/// The dashboard: cards, the queue summary and the caller's unfinished jobs.
#[server(endpoint = "dashboard")]
pub async fn dashboard() -> Result<DashboardView, AppError> {
    use crate::api::context::server_fn_require;
    use crate::model::Role;
    use crate::server::cards;
    use crate::server::jobs::{self, ListQuery};

    let (state, user) = server_fn_require(Role::Member).await?;
    let gpus = cards::list(&state).await?;
    let skipped = cards::skipped(&state).await?;
    let (waiting, oldest) = jobs::queue_summary(&state).await?;
    let query = ListQuery {
        status: Some("queued,admitted,starting,running".into()),
        mine: Some(true),
        per_page: Some(50),
        ..ListQuery::default()
    };
    let mine = jobs::list(&state, &user, &query).await?.jobs;
    Ok(DashboardView {
        gpus,
        skipped,
        waiting,
        oldest_wait_since: oldest,
        mine,
    })
}

/// What would happen to this spec (JSON, as for `POST /api/v1/jobs`) if submitted now.
#[server(endpoint = "preview_job")]
pub async fn preview_job(spec: String) -> Result<Preview, AppError> {
    use crate::api::context::server_fn_require;
    use crate::model::Role;

    let (state, user) = server_fn_require(Role::Member).await?;
    crate::server::jobs::preview(&state, &user, &spec).await
}

/// Submits a spec (JSON, as for `POST /api/v1/jobs`).
#[server(endpoint = "submit_job")]
pub async fn submit_job(spec: String) -> Result<JobAck, AppError> {
    use crate::api::context::server_fn_require;
    use crate::model::Role;

    let (state, user) = server_fn_require(Role::Member).await?;
    crate::server::jobs::submit(&state, &user, &spec).await
}

/// A job with its audit trail.
#[server(endpoint = "job_detail")]
pub async fn get_job_detail(id: Uuid) -> Result<JobDetail, AppError> {
    use crate::api::context::server_fn_require;
    use crate::model::Role;

    let (state, user) = server_fn_require(Role::Member).await?;
    crate::server::jobs::detail(&state, &user, id).await
}

/// The last `tail` lines of a job's log.
#[server(endpoint = "job_log")]
pub async fn job_log(id: Uuid, tail: usize) -> Result<String, AppError> {
    use crate::api::context::server_fn_require;
    use crate::model::Role;

    let (state, user) = server_fn_require(Role::Member).await?;
    crate::server::jobs::logs::tail(&state, &user, id, tail).await
}

/// Cancels a job (owner or admin).
#[server(endpoint = "cancel_job")]
pub async fn cancel_job(id: Uuid) -> Result<JobAck, AppError> {
    use crate::api::context::server_fn_require;
    use crate::model::Role;

    let (state, user) = server_fn_require(Role::Member).await?;
    crate::server::jobs::cancel(&state, &user, id).await
}

/// Cancels every element of an array that has not ended (its owner or an admin).
#[server(endpoint = "cancel_array")]
pub async fn cancel_array(id: Uuid) -> Result<crate::model::batch::ArrayAck, AppError> {
    use crate::api::context::server_fn_require;
    use crate::model::Role;

    let (state, user) = server_fn_require(Role::Member).await?;
    crate::server::jobs::arrays::cancel(&state, &user, id).await
}

/// Submits an array's failed and timed-out elements again, as a new array (its owner).
#[server(endpoint = "resubmit_array")]
pub async fn resubmit_array(id: Uuid) -> Result<JobAck, AppError> {
    use crate::api::context::server_fn_require;
    use crate::model::Role;

    let (state, user) = server_fn_require(Role::Member).await?;
    crate::server::jobs::arrays::resubmit_failed(&state, &user, id).await
}

/// Submits a copy of one of the caller's jobs as a new job.
#[server(endpoint = "resubmit_job")]
pub async fn resubmit_job(id: Uuid) -> Result<JobAck, AppError> {
    use crate::api::context::server_fn_require;
    use crate::model::Role;

    let (state, user) = server_fn_require(Role::Member).await?;
    crate::server::jobs::resubmit(&state, &user, id, false).await
}

/// The manifest, for the submit form's workload choice.
#[server(endpoint = "get_manifest")]
pub async fn get_manifest() -> Result<crate::model::ManifestView, AppError> {
    use crate::api::context::server_fn_require;
    use crate::model::Role;

    let (state, _) = server_fn_require(Role::Member).await?;
    crate::server::manifest::view(&state.pool).await
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
    use crate::api::context::server_fn_require;
    use crate::model::Role;
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
