//! The estimate against Postgres: a read-only snapshot of the ledger, the queue and the run-time
//! history; the figures written to `job_estimates` under a lock of their own; the background task
//! that refreshes them; and the read the job views make.

use super::{estimate, Durations, Estimate, History, Holding, Snapshot, Typical, Waiter};
use crate::server::admission::pass::{self, Caps, PassConfig};
use crate::server::admission::planner::CardGrant;
use crate::server::db::settings;
use crate::server::periodic;
use anyhow::{Context, Result};
use chrono::{DateTime, Utc};
use sqlx::{PgPool, Postgres, Transaction};
use std::collections::HashMap;
use std::time::Duration;
use tokio::sync::watch;
use uuid::Uuid;

use super::sim::Start;

/// The advisory-lock key of the estimate's writes: "gpuq", then 5 (the pass is 1).
pub const ESTIMATE_LOCK: i64 = 0x6770_7571_0000_0005;

/// The figures the server takes by default: the conditional median for the jobs holding cards,
/// the mean for the queued jobs ahead (a long wait is the sum of their runs), the combination
/// `gpuq bench replay` measured as the most accurate.
pub const TYPICAL: (Typical, Typical) = (Typical::Median, Typical::Mean);

/// Added to every deadline in the bound (and to backfill's): the stop's grace (10 s by default),
/// the release by the next pass and the next job's launch.
pub const SLACK: Duration = Duration::from_secs(30);

/// Settings of the estimate.
#[derive(Debug, Clone)]
pub struct EstimateConfig {
    /// How often the figures are refreshed (by whichever node gets there first).
    pub every: Duration,
    /// Queued jobs estimated, in queue order; those after them have no figures.
    pub max_queued: i64,
    /// Job ends each simulation goes through before it gives up on the jobs left.
    pub max_steps: usize,
    /// Finished runs per workload type the history keeps (the newest).
    pub history_runs: i64,
    /// Which figure of a type's run times the estimate takes, for the jobs holding cards and for
    /// the queued jobs (see `gpuq bench replay --typical`).
    pub typical: (Typical, Typical),
}

impl Default for EstimateConfig {
    fn default() -> Self {
        EstimateConfig {
            every: Duration::from_secs(5),
            max_queued: 2_000,
            max_steps: 10_000,
            history_runs: 200,
            typical: TYPICAL,
        }
    }
}

/// A queued job's figures as stored.
#[derive(Debug, Clone, Default, PartialEq, Eq, sqlx::FromRow)]
pub struct StoredEstimate {
    /// The job.
    pub job_id: Uuid,
    /// When it is expected to start.
    pub estimated_start_at: Option<DateTime<Utc>>,
    /// When it starts at the latest.
    pub latest_start_at: Option<DateTime<Utc>>,
    /// Why it cannot start as things stand.
    pub cannot_start: Option<String>,
}

/// The stored figures of the jobs `ids` that have some.
pub async fn read(pool: &PgPool, ids: &[Uuid]) -> sqlx::Result<HashMap<Uuid, StoredEstimate>> {
    let rows: Vec<StoredEstimate> = sqlx::query_as(
        "SELECT job_id, estimated_start_at, latest_start_at, cannot_start \
         FROM job_estimates WHERE job_id = ANY($1)",
    )
    .bind(ids)
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().map(|r| (r.job_id, r)).collect())
}

/// Computes every queued job's figures from one snapshot and stores them; `false` when another
/// node was writing its own at that moment (this node's are dropped).
pub async fn refresh(
    pool: &PgPool,
    pass_cfg: &PassConfig,
    cfg: &EstimateConfig,
    now: DateTime<Utc>,
) -> Result<bool> {
    let mut tx = pool.begin().await.context("beginning the snapshot")?;
    sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        .execute(&mut *tx)
        .await?;
    let snap = snapshot(&mut tx, pass_cfg, cfg, now).await?;
    tx.rollback().await?;
    let figures = estimate(&snap, cfg.max_steps);
    write(pool, &figures).await
}

#[derive(sqlx::FromRow)]
struct QueuedMeta {
    id: Uuid,
    owner_id: Uuid,
    workload: Option<String>,
    timeout_s: i64,
    array_id: Option<Uuid>,
}

#[derive(sqlx::FromRow)]
struct HoldingRow {
    id: Uuid,
    owner_id: Uuid,
    gpu_count: i32,
    exclusive: bool,
    workload: Option<String>,
    timeout_s: i64,
    started_at: Option<DateTime<Utc>>,
    ended: bool,
    array_id: Option<Uuid>,
}

/// Everything the estimate needs, read in one transaction (the pass's own read, the caps, the
/// jobs holding cards with their grants, and the history).
async fn snapshot(
    tx: &mut Transaction<'_, Postgres>,
    pass_cfg: &PassConfig,
    cfg: &EstimateConfig,
    now: DateTime<Utc>,
) -> Result<Snapshot> {
    let mut state = pass::read_state(tx, pass_cfg, now).await?;
    let policy = settings::launch_policy(&mut **tx)
        .await
        .context("reading the launch policy")?;
    let caps = Caps::read(tx, &policy, &pass_cfg.cpu_node).await?;
    // The first `max_queued` jobs in the queue order the pass read (fair share included).
    let mut first: Vec<&crate::server::admission::planner::QueuedJob> = state.queued().collect();
    first.sort_unstable_by_key(|j| j.queue_key());
    let first: Vec<Uuid> = first
        .iter()
        .take(usize::try_from(cfg.max_queued).unwrap_or(0))
        .map(|j| j.id)
        .collect();
    let meta: Vec<QueuedMeta> = sqlx::query_as(
        "SELECT id, owner_id, workload, timeout_s, array_id FROM jobs \
         WHERE status = 'queued' AND id = ANY($1)",
    )
    .bind(&first)
    .fetch_all(&mut **tx)
    .await
    .context("reading the queued jobs' owners")?;
    let meta: HashMap<Uuid, QueuedMeta> = meta.into_iter().map(|m| (m.id, m)).collect();
    let considered = state.input.queue.iter().map(|j| (j.clone(), None));
    let capped = state.capped.iter().map(|(j, reason)| {
        use crate::server::admission::planner::WaitReason as W;
        let held = match reason {
            // A used-up budget: nothing starts it before the reset its words name (or an admin
            // raises it), so no earlier start is promised.
            W::OwnerDisabled | W::ImageUnavailable { .. } | W::BudgetExhausted { .. } => {
                Some(reason.message())
            }
            // The next pass cancels it (its dependency can no longer hold).
            W::DependencyBroken { reason } => Some(format!("it will be cancelled: {reason}")),
            // Caps are applied again at every step; an image being pulled is assumed there soon.
            _ => None,
        };
        (j.clone(), held)
    });
    let queued = considered
        .chain(capped)
        .filter_map(|(job, held)| {
            let m = meta.get(&job.id)?;
            Some(Waiter {
                owner: m.owner_id,
                workload: m.workload.clone(),
                timeout_ms: m.timeout_s.saturating_mul(1000),
                // Parents that have not ended: it starts no earlier than they end (each is taken
                // to end as the child asks; one that does not cancels the child instead).
                after: state
                    .gates
                    .parents_of(job.id)
                    .iter()
                    .filter(|p| !p.status.is_terminal())
                    .map(|p| p.id)
                    .collect(),
                array: m.array_id,
                held,
                job,
            })
        })
        .collect();
    let array_limits = meta
        .values()
        .filter_map(|m| m.array_id)
        .filter_map(|a| Some((a, state.gates.array_limit_of(a)?.limit)))
        .collect();
    Ok(Snapshot {
        cards: state.input.cards.clone(),
        holding: match state.holding.take() {
            Some(read) => read,
            None => holding(tx).await?,
        },
        queued,
        caps,
        array_limits,
        headroom_mib: pass_cfg.headroom_mib,
        starvation_after_ms: state.input.starvation_after_ms,
        slack_ms: SLACK.as_millis() as i64,
        history: history(tx, cfg.history_runs).await?,
        typical: cfg.typical,
        now_ms: now.timestamp_millis(),
        backfill: policy.backfill,
    })
}

/// Jobs that hold cards: placed and not ended, or ended and not yet given back (the pass reads
/// their deadlines for backfill).
pub(crate) async fn holding(tx: &mut Transaction<'_, Postgres>) -> Result<Vec<Holding>> {
    let rows: Vec<HoldingRow> = sqlx::query_as(
        "SELECT id, owner_id, gpu_count, exclusive, workload, timeout_s, started_at, \
                status NOT IN ('admitted', 'starting', 'running') AS ended, array_id \
         FROM jobs WHERE status IN ('admitted', 'starting', 'running') \
            OR (released_at IS NULL \
                AND status IN ('succeeded', 'failed', 'cancelled', 'timed_out', 'rejected'))",
    )
    .fetch_all(&mut **tx)
    .await
    .context("reading the jobs that hold cards")?;
    let grants: Vec<(Uuid, Uuid, i64)> = sqlx::query_as(
        "SELECT job_id, gpu_uuid, vram_mib FROM reservations WHERE released_at IS NULL",
    )
    .fetch_all(&mut **tx)
    .await
    .context("reading the reservations")?;
    let mut by_job: HashMap<Uuid, Vec<CardGrant>> = HashMap::new();
    for (job, uuid, vram_mib) in grants {
        by_job
            .entry(job)
            .or_default()
            .push(CardGrant { uuid, vram_mib });
    }
    Ok(rows
        .into_iter()
        .map(|r| Holding {
            grants: by_job.remove(&r.id).unwrap_or_default(),
            id: r.id,
            owner: r.owner_id,
            gpu_count: r.gpu_count.max(0) as u32,
            exclusive: r.exclusive,
            array: r.array_id,
            workload: r.workload,
            timeout_ms: r.timeout_s.saturating_mul(1000),
            started_ms: r.started_at.map(|t| t.timestamp_millis()),
            ended: r.ended,
        })
        .collect())
}

/// The newest `runs` finished run times of each workload type (succeeded, failed or timed out:
/// a cancelled run says nothing of how long the work takes).
async fn history(tx: &mut Transaction<'_, Postgres>, runs: i64) -> Result<History> {
    let rows: Vec<(String, i64)> = sqlx::query_as(
        "SELECT w.name, d.ms FROM workload_types w, LATERAL ( \
           SELECT (extract(epoch FROM j.finished_at - j.started_at) * 1000)::bigint AS ms \
           FROM jobs j \
           WHERE j.workload = w.name AND j.started_at IS NOT NULL AND j.finished_at IS NOT NULL \
             AND j.status IN ('succeeded', 'failed', 'timed_out') \
           ORDER BY j.finished_at DESC LIMIT $1) d",
    )
    .bind(runs)
    .fetch_all(&mut **tx)
    .await
    .context("reading the workload types' run times")?;
    let mut by_type: HashMap<String, Vec<i64>> = HashMap::new();
    for (w, ms) in rows {
        by_type.entry(w).or_default().push(ms);
    }
    Ok(by_type
        .into_iter()
        .map(|(w, ms)| (w, Durations::new(ms)))
        .collect())
}

fn at(s: &Start) -> Option<DateTime<Utc>> {
    match s {
        Start::At(ms) => DateTime::from_timestamp_millis(*ms),
        _ => None,
    }
}

/// Replaces the stored figures with `figures`, for the jobs still queued, under the estimate's
/// lock; `false` if another node holds it.
async fn write(pool: &PgPool, figures: &HashMap<Uuid, Estimate>) -> Result<bool> {
    let mut tx = pool
        .begin()
        .await
        .context("beginning the estimate's write")?;
    let got: bool = sqlx::query_scalar("SELECT pg_try_advisory_xact_lock($1)")
        .bind(ESTIMATE_LOCK)
        .fetch_one(&mut *tx)
        .await
        .context("taking the estimate's lock")?;
    if !got {
        return Ok(false);
    }
    let (mut ids, mut expected, mut latest, mut never) = (vec![], vec![], vec![], vec![]);
    for (id, e) in figures {
        ids.push(*id);
        expected.push(at(&e.expected));
        latest.push(at(&e.latest));
        never.push(match &e.expected {
            Start::Never(why) => Some(why.clone()),
            _ => None,
        });
    }
    sqlx::query("DELETE FROM job_estimates")
        .execute(&mut *tx)
        .await
        .context("clearing the old estimates")?;
    sqlx::query(
        "INSERT INTO job_estimates (job_id, estimated_start_at, latest_start_at, cannot_start) \
         SELECT t.id, t.e, t.l, t.n \
         FROM unnest($1::uuid[], $2::timestamptz[], $3::timestamptz[], $4::text[]) AS t(id, e, l, n) \
         JOIN jobs j ON j.id = t.id AND j.status = 'queued'",
    )
    .bind(&ids)
    .bind(&expected)
    .bind(&latest)
    .bind(&never)
    .execute(&mut *tx)
    .await
    .context("writing the estimates")?;
    tx.commit().await.context("committing the estimates")?;
    Ok(true)
}

/// Whether the stored figures are younger than `age` (another node refreshed them).
async fn fresh(pool: &PgPool, age: Duration) -> sqlx::Result<bool> {
    sqlx::query_scalar(
        "SELECT coalesce(max(computed_at) > now() - make_interval(secs => $1), false) \
         FROM job_estimates",
    )
    .bind(age.as_secs_f64())
    .fetch_one(pool)
    .await
}

/// Refreshes the figures every `cfg.every` until `stop` turns true, unless another node did
/// within the last half period. Errors are logged and retried at the next tick.
pub async fn run(
    pool: PgPool,
    pass_cfg: PassConfig,
    cfg: EstimateConfig,
    stop: watch::Receiver<bool>,
) {
    periodic::every(cfg.every, stop, || {
        let (pool, pass_cfg, cfg) = (pool.clone(), pass_cfg.clone(), cfg.clone());
        async move {
            if fresh(&pool, cfg.every / 2).await.unwrap_or(false) {
                return;
            }
            if let Err(e) = refresh(&pool, &pass_cfg, &cfg, Utc::now()).await {
                tracing::warn!(
                    error = format!("{e:#}"),
                    "refreshing the start estimates failed"
                );
            }
        }
    })
    .await
}
