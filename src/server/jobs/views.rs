//! The read side: jobs as views, with queue positions and plain-words wait reasons computed by a
//! dry run of the planner over the current state.

use crate::model::{AppError, JobPage, JobStatus, JobView, Role};
use crate::server::admission::{estimate, fair, pass};
use crate::server::auth::CurrentUser;
use crate::server::db::jobs::{self, GrantRow, JobFilter, JobSort, ListRow, ListViewer};
use crate::server::error::OrInternal;
use crate::server::Ctx;
use serde::Deserialize;
use std::collections::HashMap;
use uuid::Uuid;

/// Query of `GET /api/v1/jobs`.
#[derive(Debug, Clone, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// Comma-separated statuses.
    pub status: Option<String>,
    /// Owner's login name.
    pub owner: Option<String>,
    /// Only the caller's jobs.
    pub mine: Option<bool>,
    /// 1-based page.
    pub page: Option<i64>,
    /// Page size (1–500).
    pub per_page: Option<i64>,
    /// `newest` (default), `oldest`, `queue` (priority, then the owner's fair-share standing,
    /// then submit order) or `name`.
    pub sort: Option<String>,
}

/// How many jobs wait, and since when the oldest does.
pub async fn queue_summary(
    ctx: &Ctx,
) -> Result<(i64, Option<chrono::DateTime<chrono::Utc>>), AppError> {
    jobs::queue_summary(&ctx.pool)
        .await
        .or_internal("summarising the queue")
}

/// A page of jobs, newest first unless asked otherwise.
pub async fn list(ctx: &Ctx, viewer: &CurrentUser, q: &ListQuery) -> Result<JobPage, AppError> {
    let statuses = match &q.status {
        Some(s) if !s.trim().is_empty() => s
            .split(',')
            .map(|p| {
                p.trim()
                    .parse::<JobStatus>()
                    .map(|st| st.as_str().to_owned())
                    .map_err(|e| AppError::invalid("status", e))
            })
            .collect::<Result<Vec<_>, _>>()?,
        _ => Vec::new(),
    };
    let page = q.page.unwrap_or(1);
    if page < 1 {
        return Err(AppError::invalid("page", "page must be 1 or more"));
    }
    let per_page = q.per_page.unwrap_or(50);
    if !(1..=500).contains(&per_page) {
        return Err(AppError::invalid(
            "per_page",
            "per_page must be between 1 and 500",
        ));
    }
    let owner = if q.mine.unwrap_or(false) {
        Some(viewer.username.clone())
    } else {
        q.owner.clone()
    };
    let sort = JobSort::parse(q.sort.as_deref().unwrap_or_default())
        .map_err(|e| AppError::invalid("sort", e))?;
    let standings = if sort == JobSort::Queue {
        crate::server::fairness::queue_columns(&ctx.pool, chrono::Utc::now())
            .await
            .or_internal("reading fair-share standings and budgets")?
    } else {
        Default::default()
    };
    let filter = JobFilter {
        standings,
        viewer: ListViewer {
            id: viewer.id,
            all_details: viewer.role.at_least(Role::Manager),
            all_env: viewer.role.at_least(Role::Admin),
        },
        sort,
        statuses,
        owner,
        limit: per_page,
        offset: (page - 1).saturating_mul(per_page),
    };
    let mut conn = ctx
        .pool
        .acquire()
        .await
        .or_internal("acquiring a connection")?;
    let (rows, total) = jobs::list(&mut conn, &filter)
        .await
        .or_internal("listing jobs")?;
    drop(conn);
    let jobs = views(ctx, viewer, rows).await?;
    let mut ids: Vec<Uuid> = jobs.iter().filter_map(|j| j.array_id).collect();
    ids.sort_unstable();
    ids.dedup();
    let arrays = super::arrays::summaries(&ctx.pool, &ids).await?;
    Ok(JobPage {
        jobs,
        page,
        per_page,
        total,
        arrays,
    })
}

/// One job.
pub async fn get(ctx: &Ctx, viewer: &CurrentUser, id: Uuid) -> Result<JobView, AppError> {
    let row = super::find(&ctx.pool, id).await?;
    let row = ListRow {
        owner_id: row.owner_id,
        env: row.spec.get("env").cloned(),
        volumes: row.spec.get("volumes").cloned(),
        job: row.job,
    };
    let mut v = views(ctx, viewer, vec![row]).await?;
    v.pop().ok_or(AppError::Internal)
}

async fn views(
    ctx: &Ctx,
    viewer: &CurrentUser,
    rows: Vec<ListRow>,
) -> Result<Vec<JobView>, AppError> {
    let ids: Vec<Uuid> = rows.iter().map(|r| r.job.id).collect();
    let grants = jobs::grants_of(&ctx.pool, &ids)
        .await
        .or_internal("reading grants")?;
    let mut by_job: HashMap<Uuid, Vec<GrantRow>> = HashMap::new();
    for g in grants {
        by_job.entry(g.job_id).or_default().push(g);
    }
    let lost: std::collections::HashSet<String> = if rows.iter().any(|r| r.job.node.is_some()) {
        crate::server::db::nodes::lost_names(&ctx.pool)
            .await
            .or_internal("reading lost nodes")?
            .into_iter()
            .collect()
    } else {
        Default::default()
    };
    let waiting = if rows.iter().any(|r| r.job.status == JobStatus::Queued) {
        wait_info(ctx).await?
    } else {
        HashMap::new()
    };
    let estimates = estimates_of(ctx, &rows).await?;
    let sessions = sessions_of(ctx, viewer, &rows).await?;
    rows.into_iter()
        .map(|r| {
            let grants = by_job.remove(&r.job.id).unwrap_or_default();
            let wait = waiting.get(&r.job.id);
            let node_lost = r.job.status.holds_cards_on_its_node()
                && r.job.node.as_ref().is_some_and(|n| lost.contains(n));
            let owner = r.owner_id;
            to_view(r, grants, wait, viewer).map(|v| {
                let mut v = JobView { node_lost, ..v };
                if sessions.contains(&v.id) {
                    v.session_url = ctx.sessions.as_ref().map(|s| s.origin().url(v.id));
                }
                if let Some(e) = estimates.get(&v.id) {
                    if super::access::sees_details(viewer, owner) {
                        v.estimated_start_at = e.estimated_start_at;
                        v.latest_start_at = e.latest_start_at;
                        v.cannot_start = e.cannot_start.clone();
                    }
                }
                v
            })
        })
        .collect()
}

/// The running sessions among `rows` that `viewer` may be shown the way into (their own; every
/// one for admins, whom the launch policy may let in), where this process serves sessions.
async fn sessions_of(
    ctx: &Ctx,
    viewer: &CurrentUser,
    rows: &[ListRow],
) -> Result<std::collections::HashSet<Uuid>, AppError> {
    let running: Vec<Uuid> = rows
        .iter()
        .filter(|r| r.job.status == JobStatus::Running)
        .filter(|r| r.owner_id == viewer.id || viewer.role.at_least(Role::Admin))
        .map(|r| r.job.id)
        .collect();
    if running.is_empty() || ctx.sessions.is_none() {
        return Ok(Default::default());
    }
    let ids = crate::server::db::sessions::reachable(&ctx.pool, &running)
        .await
        .or_internal("reading sessions")?;
    Ok(ids.into_iter().collect())
}

/// The stored start estimates of the queued jobs among `rows` (see `admission::estimate`).
async fn estimates_of(
    ctx: &Ctx,
    rows: &[ListRow],
) -> Result<HashMap<Uuid, estimate::StoredEstimate>, AppError> {
    let queued: Vec<Uuid> = rows
        .iter()
        .filter(|r| r.job.status == JobStatus::Queued)
        .map(|r| r.job.id)
        .collect();
    if queued.is_empty() {
        return Ok(HashMap::new());
    }
    estimate::read(&ctx.pool, &queued)
        .await
        .or_internal("reading start estimates")
}

/// Queue position (1-based, in admission order) and wait reason of every queued job.
async fn wait_info(ctx: &Ctx) -> Result<HashMap<Uuid, (i64, String)>, AppError> {
    let (st, plan) = pass::dry_run(&ctx.pool, &ctx.pass, chrono::Utc::now())
        .await
        .or_internal("planning a dry run")?;
    let reasons: HashMap<Uuid, String> = plan
        .waiting
        .iter()
        .map(|w| (w.job_id, w.reason.message()))
        .collect();
    let admitted: std::collections::HashSet<Uuid> =
        plan.admitted.iter().map(|p| p.job_id).collect();
    let mut queue: Vec<_> = st.queued().cloned().collect();
    queue.sort_by_key(|q| q.queue_key());
    let passed = fair::passed_by(&queue);
    Ok(queue
        .iter()
        .enumerate()
        .map(|(i, q)| {
            let mut reason = reasons.get(&q.id).cloned().unwrap_or_else(|| {
                if admitted.contains(&q.id) {
                    "fits now; the next admission pass starts it".to_owned()
                } else {
                    "waiting for the next admission pass".to_owned()
                }
            });
            if q.past_soft_budget {
                reason.push_str(
                    "; it goes after the other jobs of its priority: its owner is past a soft \
                     budget (see GET /api/v1/me/budget)",
                );
            }
            if let (Some(&n), false) = (passed.get(&q.id), admitted.contains(&q.id)) {
                reason = format!("{}; {reason}", fair::passed_by_words(n));
            }
            (q.id, (i as i64 + 1, reason))
        })
        .collect())
}

fn to_view(
    r: ListRow,
    grants: Vec<GrantRow>,
    wait: Option<&(i64, String)>,
    viewer: &CurrentUser,
) -> Result<JobView, AppError> {
    let env: Option<std::collections::BTreeMap<String, String>> = match r.env {
        Some(v) => serde_json::from_value(v).or_internal("reading a stored spec's env")?,
        None => None,
    };
    let volumes: Option<Vec<String>> = match r.volumes {
        Some(v) => serde_json::from_value(v).or_internal("reading a stored spec's volumes")?,
        None => None,
    };
    let owner_id = r.owner_id;
    let mut view = JobView {
        job_id: r.job.id,
        assigned_gpu_indices: grants.iter().map(|g| g.gpu.index).collect(),
        terminal: r.job.status.is_terminal(),
        env: Some(env.unwrap_or_default()),
        volumes: volumes.unwrap_or_default(),
        assigned_gpus: grants.into_iter().map(|g| g.gpu).collect(),
        queue_position: wait.map(|w| w.0),
        wait_reason: wait.map(|w| w.1.clone()),
        ..r.job
    };
    super::access::redact(&mut view, viewer, owner_id);
    Ok(view)
}
