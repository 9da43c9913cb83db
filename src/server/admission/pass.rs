//! The admission pass: one transaction under a transaction-scoped advisory lock that reclaims the
//! capacity of finished jobs, reads cards and queue, plans with the pure planner, and writes the
//! reservations, the ledger, job statuses and audit events before a NOTIFY and the commit.
//!
//! The steps are public so tests can interleave them deliberately (and show what the lock
//! prevents); [`run_pass`] is the only correct composition.

use super::estimate::Holding;
use super::gates::{DepState, Gates};
use super::images::{Gate, ImageGate};
use super::planner::{
    self, Backfill, Card, Need, Plan, PlanInput, QueuedJob, Release, WaitReason, Waiting,
};
use crate::model::{queue_key, LaunchPolicy, LiveEvent};
use crate::server::db::gpus::GpuRow;
use crate::server::db::{events, gpus, jobs, lifecycle, manifest, nodes, settings};
use crate::server::fairness::{self, Standings};
use crate::server::{budgets, metrics};
use anyhow::{Context, Result};
use chrono::{DateTime, Utc};
use serde_json::json;
use sqlx::{PgPool, Postgres, Transaction};
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};
use uuid::Uuid;

/// The advisory-lock key of the admission pass: "gpuq" in ASCII, then pass number 1.
pub const ADMISSION_LOCK: i64 = 0x6770_7571_0000_0001;

/// Settings of a pass.
#[derive(Debug, Clone)]
pub struct PassConfig {
    /// VRAM kept free on every card (driver, fragmentation).
    pub headroom_mib: i64,
    /// A queued job waiting longer than this holds the cards it waits for.
    pub starvation_after: Duration,
    /// Node given to jobs that need no GPU.
    pub cpu_node: String,
}

/// What a pass did.
#[derive(Debug, Clone, Default)]
pub struct PassOutcome {
    /// Finished jobs whose capacity was given back.
    pub reclaimed: u64,
    /// Jobs admitted.
    pub admitted: usize,
    /// Jobs still waiting.
    pub waiting: usize,
    /// Time spent in the pure planner.
    pub plan_time: Duration,
    /// Whole pass, lock to commit.
    pub total_time: Duration,
}

/// What the planner needs, read inside the pass's transaction.
#[derive(Debug, Clone)]
pub struct PassState {
    /// The planner's input.
    pub input: PlanInput,
    /// Card details by id, for events.
    pub cards: HashMap<Uuid, (String, u32)>,
    /// Queued jobs a launch-policy cap or a missing image holds back (in queue order): the
    /// planner never sees them.
    pub capped: Vec<(QueuedJob, WaitReason)>,
    /// Queued jobs whose image cannot be had on any node they could run on, and why: the pass
    /// fails them (a dry run only shows them waiting).
    pub doomed: Vec<(Uuid, String)>,
    /// Queued jobs whose dependency can no longer hold, and why: the pass cancels them (a dry
    /// run only shows them waiting).
    pub broken: Vec<(Uuid, String)>,
    /// The queue's dependencies and array limits as this pass read them.
    pub gates: Gates,
    /// The owners' fair-share standings this pass ordered the queue by.
    pub standings: Standings,
    /// The owners past a budget as this pass read them: a soft one puts their jobs after the
    /// others of a priority, a hard one holds them.
    pub budgets: budgets::Over,
    /// The jobs holding cards, where backfill read them (the policy's `backfill`, and a queue
    /// to plan): the start estimate takes them rather than reading them again.
    pub holding: Option<Vec<Holding>>,
}

impl PassState {
    /// The pass's plan: the planner's over the jobs it may consider, and the capped jobs waiting.
    pub fn plan(&self) -> Plan {
        let mut plan = planner::plan(&self.input);
        plan.waiting
            .extend(self.capped.iter().map(|(job, reason)| Waiting {
                job_id: job.id,
                reason: reason.clone(),
            }));
        plan
    }

    /// Every queued job, considered or capped.
    pub fn queued(&self) -> impl Iterator<Item = &QueuedJob> {
        self.input
            .queue
            .iter()
            .chain(self.capped.iter().map(|(j, _)| j))
    }
}

/// Runs one pass. Safe to call from any number of processes at once: they take turns.
pub async fn run_pass(pool: &PgPool, cfg: &PassConfig, now: DateTime<Utc>) -> Result<PassOutcome> {
    let started = Instant::now();
    let mut tx = pool.begin().await.context("beginning the pass")?;
    lock(&mut tx).await?;
    let reclaimed = reclaim(&mut tx).await?;
    let requeued = nodes::requeue_lost(&mut tx)
        .await
        .context("requeueing the jobs of lost nodes")?;
    if !requeued.is_empty() {
        tracing::warn!(jobs = ?requeued, "requeued jobs whose node is lost (requeue_on_node_loss)");
    }
    let state = read_state(&mut tx, cfg, now).await?;
    let mut failed = 0;
    for (job, reason) in &state.doomed {
        if jobs::fail_queued(
            &mut tx,
            *job,
            lifecycle::Actor::Scheduler,
            "scheduler",
            reason,
        )
        .await
        .context("failing a job whose image cannot be had")?
        {
            failed += 1;
        }
    }
    failed += cancel_broken(&mut tx, &state).await?;
    let planned = Instant::now();
    let plan = state.plan();
    let plan_time = planned.elapsed();
    let admitted_ids = apply_plan(&mut tx, cfg, &state, &plan).await?;
    let admitted = admitted_ids.len();
    record_pass(&mut tx).await?;
    if reclaimed > 0 || admitted > 0 || failed > 0 || !requeued.is_empty() {
        let event = LiveEvent::Pass {
            admitted: admitted as u64,
            reclaimed,
        };
        events::announce(&mut *tx, &event).await?;
    }
    tx.commit().await.context("committing the pass")?;
    let total_time = started.elapsed();
    metrics::observe_pass(total_time);
    metrics::observe_admission_waits(&waits(&state, &admitted_ids, Utc::now()));
    Ok(PassOutcome {
        reclaimed,
        admitted,
        waiting: plan.waiting.len(),
        plan_time,
        total_time,
    })
}

/// Cancels the queued jobs whose dependency can no longer hold (whole chains at once), records
/// why and announces each. Returns how many were cancelled.
async fn cancel_broken(tx: &mut Transaction<'_, Postgres>, state: &PassState) -> Result<usize> {
    if state.broken.is_empty() {
        return Ok(0);
    }
    let (ids, reasons): (Vec<Uuid>, Vec<String>) = state.broken.iter().cloned().unzip();
    let ended = lifecycle::cancel_dependents(tx, &ids, &reasons)
        .await
        .context("cancelling jobs whose dependency can no longer hold")?;
    let ended_set: HashSet<Uuid> = ended.iter().copied().collect();
    let (mut e_job, mut e_detail) = (Vec::new(), Vec::new());
    for (id, reason) in &state.broken {
        if ended_set.contains(id) {
            e_job.push(*id);
            e_detail.push(json!({ "reason": reason, "cause": "dependency" }));
        }
    }
    sqlx::query(
        "INSERT INTO job_events (job_id, actor, kind, detail) \
         SELECT id, 'scheduler', 'cancelled', d FROM unnest($1::uuid[], $2::jsonb[]) AS t(id, d)",
    )
    .bind(&e_job)
    .bind(&e_detail)
    .execute(&mut **tx)
    .await
    .context("recording dependents' cancellations")?;
    for id in &ended {
        events::job_changed(&mut **tx, *id, crate::model::JobStatus::Cancelled)
            .await
            .context("announcing a dependent's cancellation")?;
    }
    Ok(ended.len())
}

/// How long each admitted job waited, submit to `now`, in seconds.
fn waits(state: &PassState, admitted: &[Uuid], now: DateTime<Utc>) -> Vec<f64> {
    let admitted: HashSet<&Uuid> = admitted.iter().collect();
    state
        .queued()
        .filter(|q| admitted.contains(&q.id))
        .map(|q| (now.timestamp_millis() - q.queued_at_ms) as f64 / 1000.0)
        .collect()
}

/// Takes the admission lock for the rest of the transaction (released by commit, rollback or a
/// lost connection: never a session lock on a pooled connection).
pub async fn lock(tx: &mut Transaction<'_, Postgres>) -> Result<()> {
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(ADMISSION_LOCK)
        .execute(&mut **tx)
        .await
        .context("taking the admission lock")?;
    Ok(())
}

/// Notes that a pass committed (read by the UI: "applied by the pass at …").
pub async fn record_pass(tx: &mut Transaction<'_, Postgres>) -> Result<()> {
    sqlx::query(
        "UPDATE scheduler_state SET last_pass_at = clock_timestamp(), passes = passes + 1 WHERE id = 1",
    )
    .execute(&mut **tx)
    .await
    .context("recording the pass")?;
    Ok(())
}

/// Gives back the reservations of jobs that ended and have not been released yet.
/// Data-modifying CTEs run to completion whether or not the final SELECT reads them.
pub async fn reclaim(tx: &mut Transaction<'_, Postgres>) -> Result<u64> {
    let released: i64 = sqlx::query_scalar(
        "WITH done AS ( \
           UPDATE jobs SET released_at = clock_timestamp() \
           WHERE released_at IS NULL \
             AND status IN ('succeeded', 'failed', 'cancelled', 'timed_out', 'rejected') \
           RETURNING id), \
         rel AS ( \
           UPDATE reservations r SET released_at = now() FROM done \
           WHERE r.job_id = done.id AND r.released_at IS NULL RETURNING r.gpu_uuid, r.vram_mib), \
         ledger AS ( \
           UPDATE gpus g SET reserved_mib = g.reserved_mib - s.total \
           FROM (SELECT gpu_uuid, sum(vram_mib) AS total FROM rel GROUP BY gpu_uuid) s \
           WHERE g.uuid = s.gpu_uuid RETURNING 1), \
         ev AS ( \
           INSERT INTO job_events (job_id, actor, kind) SELECT id, 'scheduler', 'released' FROM done \
           RETURNING 1) \
         SELECT count(*) FROM done",
    )
    .fetch_one(&mut **tx)
    .await
    .context("reclaiming finished jobs")?;
    Ok(released as u64)
}

/// A card row as the planner sees it (draining, offline and missing cards admit nothing).
pub fn to_planner_card(g: &GpuRow) -> Card {
    Card {
        uuid: g.uuid,
        node: g.node.clone(),
        index: g.idx as u32,
        model: g.model.clone(),
        total_mib: g.total_mib,
        reserved_mib: g.reserved_mib,
        external_mib: g.external_mib,
        online: g.takes_work(),
        exclusive_held: g.exclusive_held,
    }
}

#[derive(sqlx::FromRow)]
struct QueueRow {
    id: Uuid,
    seq: i64,
    priority: i32,
    gpu_count: i32,
    workload: Option<String>,
    min_vram_mib: Option<i64>,
    exclusive: bool,
    created_at: DateTime<Utc>,
    owner_id: Uuid,
    image: String,
    array_id: Option<Uuid>,
    timeout_s: i64,
}

/// The launch policy's caps as they apply to this pass: jobs beyond a cap are held back, in queue
/// order, before planning. A held-back job waits; a considered job may still not fit, and holds its
/// owner's place under the cap until it starts or leaves the queue. The start estimate
/// (`admission::estimate`) applies the same caps at every step of its simulation.
#[derive(Debug, Clone, Default)]
pub struct Caps {
    /// The launch policy's `max_running_per_user` (0: none).
    pub max_running_per_user: u32,
    /// The launch policy's `max_cpu_jobs_per_node` (0: none).
    pub max_cpu_jobs: u32,
    /// Jobs admitted, starting or running, per owner.
    pub running: HashMap<Uuid, u32>,
    /// Jobs without GPUs admitted, starting or running on the node that runs them.
    pub cpu_running: u32,
    /// Admins, whose jobs are not capped (read once a pass: a join per queued job cost the pass
    /// about as much as reading the queue itself).
    pub admins: HashSet<Uuid>,
    /// Disabled users, whose queued jobs are held (see `jobs::held`).
    pub disabled: HashSet<Uuid>,
}

impl Caps {
    /// The caps as they stand in the pass's transaction.
    pub async fn read(
        tx: &mut Transaction<'_, Postgres>,
        policy: &LaunchPolicy,
        cpu_node: &str,
    ) -> Result<Caps> {
        let running: Vec<(Uuid, i64)> = sqlx::query_as(
            "SELECT owner_id, count(*) FROM jobs \
             WHERE status IN ('admitted', 'starting', 'running') GROUP BY owner_id",
        )
        .fetch_all(&mut **tx)
        .await
        .context("counting running jobs")?;
        let cpu_running: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM jobs WHERE gpu_count = 0 AND node = $1 \
             AND status IN ('admitted', 'starting', 'running')",
        )
        .bind(cpu_node)
        .fetch_one(&mut **tx)
        .await
        .context("counting running jobs without GPUs")?;
        let admins: Vec<Uuid> = sqlx::query_scalar("SELECT id FROM users WHERE role = 'admin'")
            .fetch_all(&mut **tx)
            .await
            .context("reading who is an admin")?;
        let disabled: Vec<Uuid> =
            sqlx::query_scalar("SELECT id FROM users WHERE disabled_at IS NOT NULL")
                .fetch_all(&mut **tx)
                .await
                .context("reading who is disabled")?;
        Ok(Caps {
            max_running_per_user: policy.max_running_per_user,
            max_cpu_jobs: policy.max_cpu_jobs_per_node,
            running: running.into_iter().map(|(o, n)| (o, n as u32)).collect(),
            cpu_running: cpu_running as u32,
            admins: admins.into_iter().collect(),
            disabled: disabled.into_iter().collect(),
        })
    }

    /// Takes a place for `q` under every cap, or names the cap that holds it back.
    fn admit(&mut self, q: &QueueRow) -> Option<WaitReason> {
        self.take(q.owner_id, q.gpu_count)
    }

    /// Takes a place for a job of `owner` asking for `gpu_count` cards under every cap, or names
    /// the cap that holds it back.
    pub fn take(&mut self, owner: Uuid, gpu_count: i32) -> Option<WaitReason> {
        if self.disabled.contains(&owner) {
            return Some(WaitReason::OwnerDisabled);
        }
        if gpu_count == 0 && self.max_cpu_jobs > 0 && self.cpu_running >= self.max_cpu_jobs {
            return Some(WaitReason::OverCap {
                cap: "max_cpu_jobs_per_node".into(),
                limit: self.max_cpu_jobs,
            });
        }
        if self.max_running_per_user > 0 && !self.admins.contains(&owner) {
            let mine = self.running.entry(owner).or_default();
            if *mine >= self.max_running_per_user {
                return Some(WaitReason::OverCap {
                    cap: "max_running_per_user".into(),
                    limit: self.max_running_per_user,
                });
            }
            *mine += 1;
        }
        if gpu_count == 0 {
            self.cpu_running += 1;
        }
        None
    }
}

/// Reads cards, manifest and queue.
pub async fn read_state(
    tx: &mut Transaction<'_, Postgres>,
    cfg: &PassConfig,
    now: DateTime<Utc>,
) -> Result<PassState> {
    let rows = gpus::list(&mut **tx).await.context("reading cards")?;
    let manifest = manifest::load(tx).await.context("reading the manifest")?;
    let mut rows_q: Vec<QueueRow> = sqlx::query_as(
        "SELECT id, seq, priority, gpu_count, workload, min_vram_mib, exclusive, created_at, \
                owner_id, image, array_id, timeout_s \
         FROM jobs WHERE status = 'queued'",
    )
    .fetch_all(&mut **tx)
    .await
    .context("reading the queue")?;
    let policy = settings::launch_policy(&mut **tx)
        .await
        .context("reading the launch policy")?;
    let mut caps = Caps::read(tx, &policy, &cfg.cpu_node).await?;
    // Fair share: the owners with jobs queued or holding cards, from what the pass read already.
    let active: HashSet<Uuid> = rows_q
        .iter()
        .map(|q| q.owner_id)
        .chain(caps.running.keys().copied())
        .collect();
    let standings = fairness::read_standings(tx, &policy, &active, now)
        .await
        .context("reading fair-share standings")?;
    let standing_of = |q: &QueueRow| standings.of(q.owner_id);
    let over = budgets::over(tx, now).await.context("reading budgets")?;
    let soft_of = |q: &QueueRow| over.soft.contains(&q.owner_id);
    // The queue order (caps, gates and the planner all take jobs in it), sorted here once.
    rows_q.sort_unstable_by_key(|q| queue_key(q.priority, soft_of(q), standing_of(q), q.seq));
    let images = ImageGate::read(tx, &rows, policy.pull, &cfg.cpu_node).await?;
    let mut gates = Gates::read(tx).await?;
    let cards = rows.iter().map(to_planner_card).collect();
    let to_job = |q: &QueueRow| QueuedJob {
        id: q.id,
        seq: q.seq,
        priority: q.priority,
        past_soft_budget: soft_of(q),
        standing: standing_of(q),
        gpu_count: q.gpu_count as u32,
        need: match (&q.workload, q.min_vram_mib) {
            (Some(w), _) => Need::PerModel(manifest.needs.get(w).cloned().unwrap_or_default()),
            (None, Some(mib)) => Need::Fixed(mib),
            (None, None) => Need::Fixed(0),
        },
        exclusive: q.exclusive,
        queued_at_ms: q.created_at.timestamp_millis(),
        nodes: None,
    };
    let (mut queue, mut capped) = (Vec::with_capacity(rows_q.len()), Vec::new());
    let mut doomed = Vec::new();
    let mut broken = Vec::new();
    for q in &rows_q {
        // Dependencies before anything: a job waiting for another takes no place anywhere.
        match gates.dependency(q.id) {
            DepState::Ready => {}
            DepState::Wait(reason) => {
                capped.push((to_job(q), reason));
                continue;
            }
            DepState::Broken(why) => {
                broken.push((q.id, why.clone()));
                capped.push((to_job(q), WaitReason::DependencyBroken { reason: why }));
                continue;
            }
        }
        // A used-up hard budget next: whatever its priority, array or dependencies, the job
        // waits, takes no place and pulls nothing until the budget resets or is raised.
        if let Some(used) = over.holds(q.owner_id, q.gpu_count) {
            capped.push((to_job(q), WaitReason::budget_exhausted(used)));
            continue;
        }
        // The image first: a job waiting for its image takes no place under its owner's caps.
        let nodes = match images.gate(&q.image, q.gpu_count, q.created_at) {
            Gate::Any => None,
            Gate::Only(nodes) => Some(nodes),
            Gate::Wait(reason) => {
                capped.push((to_job(q), reason));
                continue;
            }
            Gate::Fail(why) => {
                doomed.push((q.id, why.clone()));
                capped.push((to_job(q), WaitReason::ImageUnavailable { reason: why }));
                continue;
            }
        };
        // The array's running limit before the owner's caps: a place under the limit taken by a
        // job the caps then hold back only makes this pass admit fewer, never more.
        if let Some(reason) = gates.take_array_place(q.array_id) {
            capped.push((to_job(q), reason));
            continue;
        }
        match caps.admit(q) {
            None => queue.push(QueuedJob { nodes, ..to_job(q) }),
            Some(reason) => capped.push((to_job(q), reason)),
        }
    }
    // With nothing to plan the planner keeps no card, so the holders are not read for it.
    let holding = if policy.backfill && !queue.is_empty() {
        Some(super::estimate::holding(tx).await?)
    } else {
        None
    };
    let backfill = holding.as_deref().map(|h| backfill(h, &rows_q, now));
    Ok(PassState {
        input: PlanInput {
            cards,
            queue,
            headroom_mib: cfg.headroom_mib,
            starvation_after_ms: cfg.starvation_after.as_millis() as i64,
            now_ms: now.timestamp_millis(),
            backfill,
        },
        cards: rows
            .iter()
            .map(|g| (g.uuid, (g.node.clone(), g.idx as u32)))
            .collect(),
        capped,
        doomed,
        broken,
        gates,
        standings,
        budgets: over,
        holding,
    })
}

/// Backfill's bounds: when each job `holding` cards ends at the latest (the start estimate's own
/// reading of them) and each queued job's timeout, with the estimate's slack.
fn backfill(holding: &[Holding], queued: &[QueueRow], now: DateTime<Utc>) -> Backfill {
    let now_ms = now.timestamp_millis();
    Backfill {
        releases: holding
            .iter()
            .map(|h| Release {
                job_id: h.id,
                deadline_ms: h.deadline_ms(now_ms),
                grants: h.grants.clone(),
                exclusive: h.exclusive,
            })
            .collect(),
        bounds: queued
            .iter()
            .map(|q| (q.id, q.timeout_s.saturating_mul(1000)))
            .collect(),
        slack_ms: super::estimate::SLACK.as_millis() as i64,
    }
}

/// Writes a plan: job statuses first, guarded by `status = 'queued'` (a job cancelled since the
/// read is simply not admitted), then reservations, the ledger and events for the jobs that were.
/// Returns how many jobs were admitted.
pub async fn apply(
    tx: &mut Transaction<'_, Postgres>,
    cfg: &PassConfig,
    state: &PassState,
    plan: &Plan,
) -> Result<usize> {
    Ok(apply_plan(tx, cfg, state, plan).await?.len())
}

/// [`apply`], answering which jobs were admitted.
async fn apply_plan(
    tx: &mut Transaction<'_, Postgres>,
    cfg: &PassConfig,
    state: &PassState,
    plan: &Plan,
) -> Result<Vec<Uuid>> {
    if plan.admitted.is_empty() {
        return Ok(Vec::new());
    }
    let node_of = |p: &planner::Placement| {
        p.cards
            .first()
            .and_then(|c| state.cards.get(&c.uuid))
            .map(|(n, _)| n.clone())
            .unwrap_or_else(|| cfg.cpu_node.clone())
    };
    let ids: Vec<Uuid> = plan.admitted.iter().map(|p| p.job_id).collect();
    let nodes: Vec<String> = plan.admitted.iter().map(node_of).collect();
    let still_queued: HashSet<Uuid> = lifecycle::admit(tx, &ids, &nodes)
        .await
        .context("marking jobs admitted")?;
    let exclusive: HashMap<Uuid, bool> = state
        .input
        .queue
        .iter()
        .map(|q| (q.id, q.exclusive))
        .collect();
    let (mut r_job, mut r_gpu, mut r_mib, mut r_excl) = (vec![], vec![], vec![], vec![]);
    let (mut e_job, mut e_detail) = (vec![], vec![]);
    for (p, node) in plan.admitted.iter().zip(&nodes) {
        if !still_queued.contains(&p.job_id) {
            continue;
        }
        let excl = exclusive.get(&p.job_id).copied().unwrap_or(false);
        let mut granted = Vec::new();
        for c in &p.cards {
            r_job.push(p.job_id);
            r_gpu.push(c.uuid);
            r_mib.push(c.vram_mib);
            r_excl.push(excl);
            let index = state.cards.get(&c.uuid).map(|(_, i)| *i);
            granted.push(json!({ "uuid": crate::model::gpu_id(&c.uuid), "index": index, "vram_mib": c.vram_mib }));
        }
        e_job.push(p.job_id);
        e_detail.push(json!({ "node": node, "gpus": granted }));
    }
    sqlx::query(
        "INSERT INTO reservations (job_id, gpu_uuid, vram_mib, exclusive) \
         SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::bigint[], $4::bool[])",
    )
    .bind(&r_job)
    .bind(&r_gpu)
    .bind(&r_mib)
    .bind(&r_excl)
    .execute(&mut **tx)
    .await
    .context("writing reservations")?;
    sqlx::query(
        "UPDATE gpus g SET reserved_mib = g.reserved_mib + s.total \
         FROM (SELECT u, sum(v) AS total FROM unnest($1::uuid[], $2::bigint[]) AS t(u, v) GROUP BY u) s \
         WHERE g.uuid = s.u",
    )
    .bind(&r_gpu)
    .bind(&r_mib)
    .execute(&mut **tx)
    .await
    .context("updating the ledger")?;
    sqlx::query(
        "INSERT INTO job_events (job_id, actor, kind, detail) \
         SELECT id, 'scheduler', 'admitted', d FROM unnest($1::uuid[], $2::jsonb[]) AS t(id, d)",
    )
    .bind(&e_job)
    .bind(&e_detail)
    .execute(&mut **tx)
    .await
    .context("recording admissions")?;
    Ok(e_job)
}

/// Plans without writing (a read-only snapshot): queue positions and wait reasons for the read side.
pub async fn dry_run(
    pool: &PgPool,
    cfg: &PassConfig,
    now: DateTime<Utc>,
) -> Result<(PassState, Plan)> {
    let mut tx = pool.begin().await?;
    sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        .execute(&mut *tx)
        .await?;
    let state = read_state(&mut tx, cfg, now).await?;
    let plan = state.plan();
    tx.rollback().await?;
    Ok((state, plan))
}
