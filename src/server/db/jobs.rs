//! Repository for jobs and their reservations.

use super::lifecycle;
use crate::model::{AssignedGpu, JobStatus, JobView, QUEUE_ORDER_SQL, SUBMIT_ORDER_SQL};
use serde_json::Value;
use sqlx::{FromRow, PgExecutor, QueryBuilder};
use uuid::Uuid;

/// A `jobs` row: the job as the API shows it (less what the row does not hold) and what only the
/// server reads.
#[derive(Debug, Clone, FromRow)]
pub struct JobRow {
    /// Owner.
    pub owner_id: Uuid,
    /// The parsed spec (its raw form).
    pub spec: Value,
    /// Every other column, under the API's names.
    #[sqlx(flatten)]
    pub job: JobView,
}

const COLUMNS: &str = "j.id, j.seq, j.owner_id, u.username AS owner, j.name, j.spec, j.image, \
    j.command, j.gpu_count, j.workload, j.min_vram_mib, j.exclusive, j.priority, j.timeout_s, \
    j.status, j.status_reason, j.stop_cause, j.log_path, j.node, j.exit_code, j.created_at, \
    j.admitted_at, j.started_at, j.finished_at, j.released_at, j.image_digest, j.array_id, \
    j.array_index";

/// Locks the owner's row for the rest of the transaction (so one user's submits are counted one
/// after another), then counts their queued jobs.
pub async fn lock_owner_and_count_queued(
    tx: &mut sqlx::PgConnection,
    owner: Uuid,
) -> sqlx::Result<i64> {
    sqlx::query("SELECT 1 FROM users WHERE id = $1 FOR UPDATE")
        .bind(owner)
        .execute(&mut *tx)
        .await?;
    sqlx::query_scalar("SELECT count(*) FROM jobs WHERE owner_id = $1 AND status = 'queued'")
        .bind(owner)
        .fetch_one(&mut *tx)
        .await
}

/// How many jobs are queued, and since when the oldest waits.
pub async fn queue_summary(
    db: impl PgExecutor<'_>,
) -> sqlx::Result<(i64, Option<chrono::DateTime<chrono::Utc>>)> {
    sqlx::query_as("SELECT count(*), min(created_at) FROM jobs WHERE status = 'queued'")
        .fetch_one(db)
        .await
}

/// One job.
pub async fn get(db: impl PgExecutor<'_>, id: Uuid) -> sqlx::Result<Option<JobRow>> {
    sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM jobs j JOIN users u ON u.id = j.owner_id WHERE j.id = $1"
    ))
    .bind(id)
    .fetch_optional(db)
    .await
}

/// A row of a job list: only what a list shows, with what the viewer may not read left unloaded
/// (never the whole stored spec: each can be up to the spec payload limit, and a page holds 500).
#[derive(Debug, Clone, FromRow)]
pub struct ListRow {
    /// Owner.
    pub owner_id: Uuid,
    /// The spec's `env`, for viewers who read it; else NULL.
    pub env: Option<Value>,
    /// The spec's `volumes`, for viewers who read the job's details; else NULL.
    pub volumes: Option<Value>,
    /// Every other column, under the API's names (the command line and status details empty for
    /// viewers who may not read them).
    #[sqlx(flatten)]
    pub job: JobView,
}

/// Who a list is for: their own jobs show in full; `all_details` (managers and admins) reads
/// everyone's command line, volumes and status details, `all_env` (admins) everyone's env.
#[derive(Debug, Clone, Copy, Default)]
pub struct ListViewer {
    /// The viewer's user id.
    pub id: Uuid,
    /// Reads every job's details.
    pub all_details: bool,
    /// Reads every job's env.
    pub all_env: bool,
}

/// Filter of the job list.
#[derive(Debug, Clone, Default)]
pub struct JobFilter {
    /// Who the list is for (what of each job is loaded).
    pub viewer: ListViewer,
    /// Any of these statuses (empty: all).
    pub statuses: Vec<String>,
    /// Owner's login name.
    pub owner: Option<String>,
    /// Page size.
    pub limit: i64,
    /// Rows to skip.
    pub offset: i64,
    /// Order of the page.
    pub sort: JobSort,
    /// The owners' fair-share standings the queue order sorts by.
    pub standings: QueueStandings,
}

/// Fair-share standings and soft budgets as the queue order's SQL reads them
/// (`fairness::Standings::columns`).
#[derive(Debug, Clone, Default)]
pub struct QueueStandings {
    /// Owners.
    pub owners: Vec<Uuid>,
    /// Their standings, in the same order (an owner absent stands at 0).
    pub values: Vec<f64>,
    /// Whether each is past a soft budget, in the same order (an owner absent is not).
    pub soft: Vec<bool>,
}

/// How a list of jobs is ordered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum JobSort {
    /// Newest first (submit order, descending).
    #[default]
    Newest,
    /// Oldest first.
    Oldest,
    /// The order the scheduler considers them: priority, then soft budgets, the owner's fair-share standing,
    /// then submit order.
    Queue,
    /// Alphabetical by job name.
    Name,
}

impl JobSort {
    /// Parses `newest`, `oldest`, `queue` or `name`.
    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "" | "newest" => Ok(JobSort::Newest),
            "oldest" => Ok(JobSort::Oldest),
            "queue" => Ok(JobSort::Queue),
            "name" => Ok(JobSort::Name),
            other => Err(format!(
                "unknown sort `{other}`: expected newest, oldest, queue or name"
            )),
        }
    }

    fn order_by(self) -> &'static str {
        match self {
            JobSort::Newest => "j.seq DESC",
            JobSort::Oldest => "j.seq ASC",
            JobSort::Queue => QUEUE_ORDER_SQL,
            JobSort::Name => "j.name ASC, j.seq DESC",
        }
    }
}

fn push_where(q: &mut QueryBuilder<'_, sqlx::Postgres>, f: &JobFilter) {
    q.push(" WHERE true");
    if !f.statuses.is_empty() {
        q.push(" AND j.status = ANY(")
            .push_bind(f.statuses.clone())
            .push(")");
    }
    if let Some(owner) = &f.owner {
        q.push(" AND u.username = ").push_bind(owner.clone());
    }
}

/// Pushes `(j.owner_id = viewer OR everyone)`: whether the viewer reads this row's field.
fn push_sees(q: &mut QueryBuilder<'_, sqlx::Postgres>, viewer: Uuid, everyone: bool) {
    q.push("(j.owner_id = ")
        .push_bind(viewer)
        .push(" OR ")
        .push_bind(everyone)
        .push(")");
}

/// A page of jobs in the asked order, and the number matching.
pub async fn list(db: &mut sqlx::PgConnection, f: &JobFilter) -> sqlx::Result<(Vec<ListRow>, i64)> {
    let v = f.viewer;
    let mut q = QueryBuilder::new(
        "SELECT j.id, j.seq, j.owner_id, u.username AS owner, j.name, j.image, j.gpu_count, \
           j.workload, j.min_vram_mib, j.exclusive, j.priority, j.timeout_s, j.status, j.node, \
           j.exit_code, j.created_at, j.admitted_at, j.started_at, j.finished_at, j.released_at, \
           j.image_digest, j.array_id, j.array_index, CASE WHEN ",
    );
    push_sees(&mut q, v.id, v.all_details);
    q.push(" THEN j.command ELSE '{}'::text[] END AS command, CASE WHEN ");
    push_sees(&mut q, v.id, v.all_details);
    q.push(" THEN j.status_reason END AS status_reason, CASE WHEN ");
    push_sees(&mut q, v.id, v.all_details);
    q.push(" THEN j.stop_cause END AS stop_cause, CASE WHEN ");
    push_sees(&mut q, v.id, v.all_details);
    q.push(" THEN j.log_path END AS log_path, CASE WHEN ");
    push_sees(&mut q, v.id, v.all_details);
    q.push(" THEN j.spec -> 'volumes' END AS volumes, CASE WHEN ");
    push_sees(&mut q, v.id, v.all_env);
    q.push(
        " THEN j.spec -> 'env' END AS env, coalesce(fs.standing, 0) AS standing, \
         coalesce(fs.past_soft_budget, false) AS past_soft_budget \
         FROM jobs j JOIN users u ON u.id = j.owner_id LEFT JOIN unnest(",
    )
    .push_bind(f.standings.owners.clone())
    .push("::uuid[], ")
    .push_bind(f.standings.values.clone())
    .push("::float8[], ")
    .push_bind(f.standings.soft.clone())
    .push("::bool[]) AS fs(owner_id, standing, past_soft_budget) ON fs.owner_id = j.owner_id");
    push_where(&mut q, f);
    q.push(" ORDER BY ")
        .push(f.sort.order_by())
        .push(" LIMIT ")
        .push_bind(f.limit)
        .push(" OFFSET ")
        .push_bind(f.offset);
    let rows = q.build_query_as::<ListRow>().fetch_all(&mut *db).await?;
    let mut c = QueryBuilder::new("SELECT count(*) FROM jobs j JOIN users u ON u.id = j.owner_id");
    push_where(&mut c, f);
    let total: i64 = c.build_query_scalar().fetch_one(&mut *db).await?;
    Ok((rows, total))
}

/// A card held (or once held) by a job, with what the job was seen to use on it.
#[derive(Debug, Clone, FromRow)]
pub struct GrantRow {
    /// Job.
    pub job_id: Uuid,
    /// The card as the job's view shows it.
    #[sqlx(flatten)]
    pub gpu: AssignedGpu,
}

/// The cards of these jobs (live or released: the history of a finished job keeps them), with
/// what the job was seen to use on each.
pub async fn grants_of(db: impl PgExecutor<'_>, jobs: &[Uuid]) -> sqlx::Result<Vec<GrantRow>> {
    sqlx::query_as(
        // `'GPU-' || uuid` is `model::gpu_id`'s form.
        "SELECT r.job_id, 'GPU-' || r.gpu_uuid AS uuid, g.idx, g.model, r.vram_mib, v.used_mib, \
                v.peak_mib, v.accounting_peak_mib, v.warned_at IS NOT NULL AS over_commitment \
         FROM reservations r JOIN gpus g ON g.uuid = r.gpu_uuid \
         LEFT JOIN job_vram v ON v.job_id = r.job_id AND v.gpu_uuid = r.gpu_uuid \
         WHERE r.job_id = ANY($1) ORDER BY r.job_id, g.idx",
    )
    .bind(jobs)
    .fetch_all(db)
    .await
}

/// Ends a queued job `failed` with `reason` (its image cannot be had, or may no longer be run),
/// with its job event and live notification, in the caller's transaction: `by` is the pass or
/// the node's puller, `actor` the name the trail gives it. A job admitted or cancelled meanwhile
/// is left alone (`false`).
pub async fn fail_queued(
    db: &mut sqlx::PgConnection,
    id: Uuid,
    by: lifecycle::Actor,
    actor: &str,
    reason: &str,
) -> sqlx::Result<bool> {
    if !lifecycle::fail_queued(&mut *db, id, by, reason).await? {
        return Ok(false);
    }
    let detail = serde_json::json!({ "reason": reason });
    super::events::job_event(
        &mut *db,
        id,
        actor,
        crate::model::JobEventKind::Failed,
        detail,
    )
    .await?;
    super::events::job_changed(&mut *db, id, JobStatus::Failed).await?;
    Ok(true)
}

/// Records the exact image a job's container was made from (`repo@sha256:…` or an image id).
pub async fn set_image_digest(db: impl PgExecutor<'_>, id: Uuid, digest: &str) -> sqlx::Result<()> {
    sqlx::query("UPDATE jobs SET image_digest = $2 WHERE id = $1")
        .bind(id)
        .bind(digest)
        .execute(db)
        .await?;
    Ok(())
}

/// Locks `owner`'s admitted, starting and running jobs for the rest of the caller's transaction,
/// so that no runner claims or ends one meanwhile (a runner that holds one is waited for).
pub async fn lock_placed_of(db: impl PgExecutor<'_>, owner: Uuid) -> sqlx::Result<()> {
    sqlx::query(
        "SELECT id FROM jobs WHERE owner_id = $1 AND status IN ('admitted', 'starting', 'running') \
         ORDER BY id FOR UPDATE",
    )
    .bind(owner)
    .execute(db)
    .await?;
    Ok(())
}

/// `owner`'s queued jobs, in queue order (one owner's jobs share a standing: priority, then submit
/// order).
pub async fn queued_of(db: impl PgExecutor<'_>, owner: Uuid) -> sqlx::Result<Vec<Uuid>> {
    sqlx::query_scalar(&format!(
        "SELECT id FROM jobs WHERE owner_id = $1 AND status = 'queued' ORDER BY {SUBMIT_ORDER_SQL}"
    ))
    .bind(owner)
    .fetch_all(db)
    .await
}
