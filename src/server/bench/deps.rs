//! `gpuq bench deps`: how long a dependent waits after its parent ended, parent end → child
//! admitted, on an idle queue and with unrelated jobs queued.
//!
//! One process, a scheduler exactly as `gpuq serve` builds it (its notifier, its pass), no
//! runner: the bench moves each parent through the runner's own lifecycle statements
//! (`claim`, `set_running`, `finish`), so a parent's end wakes the pass as a real run's end does
//! (the NOTIFY in `finish`'s transaction). Each round submits a parent, waits until it is
//! admitted, submits a child with `after_ok` on it, ends the parent `succeeded` and waits until
//! the child is admitted. Both ends of the figure are database times: the parent's `finished_at`
//! and the child's `admitted_at` (`clock_timestamp()` in both statements).
//!
//! The unrelated jobs are 2-card jobs on a node of one card: every pass reads and plans them and
//! admits none (they were written with `enter_batch`, past the submit check that would refuse
//! them).

use super::{gap, latency_row};
use crate::server::admission::PassConfig;
use crate::server::auth::CurrentUser;
use crate::server::db::lifecycle::{self, BatchEntry, BatchRow, Ending};
use crate::server::node::{self, NodeSetup};
use crate::server::notifier::Notifier;
use crate::server::{jobs, Ctx};
use anyhow::{anyhow, bail, Result};
use chrono::{DateTime, Utc};
use sqlx::PgPool;
use std::io::Write;
use std::time::{Duration, Instant};
use uuid::Uuid;

const NODE: &str = "bench-deps";

/// Flags of `gpuq bench deps`.
#[derive(clap::Args, Debug, Clone)]
pub struct DepsBenchOptions {
    /// Parent → child rounds per section.
    #[arg(long, default_value_t = 200)]
    pub rounds: usize,
    /// Unrelated jobs queued in the second section.
    #[arg(long, default_value_t = 1000)]
    pub queued: usize,
    /// The backstop timer of the scheduler (a missed wake would show as this much latency).
    #[arg(long, default_value_t = 5000)]
    pub pass_interval_ms: u64,
}

/// Runs the dependency benchmark on a scratch database and prints its figures.
pub async fn run(pool: &PgPool, opts: &DepsBenchOptions, out: &mut impl Write) -> Result<()> {
    super::db::ensure_scratch(pool).await?;
    let caller = super::db::bench_member(pool, "bench-deps").await?;
    super::db::one_sim_card(pool, NODE).await?;
    let pass = PassConfig {
        headroom_mib: 0,
        starvation_after: Duration::from_secs(24 * 3600),
        cpu_node: NODE.into(),
    };
    let notifier = Notifier::new(Duration::from_millis(opts.pass_interval_ms));
    let logs = std::env::temp_dir().join(format!("gpuq-bench-deps-{}", Uuid::new_v4()));
    let mut ctx = Ctx::new(pool.clone(), pass.clone(), logs, notifier.clone());
    // The bench submits hundreds of jobs a minute as one member: no per-user rate here.
    ctx.submit_rate = crate::server::limits::rate::SubmitRate::new(0, 0);
    let tasks = node::start(NodeSetup {
        pool: pool.clone(),
        notifier,
        pass,
        heartbeat: None,
        runner: None,
        cards: None,
        retention: None,
        metrics: None,
        notify: None,
    })
    .await?;
    let result = sections(&ctx, &caller, opts, out).await;
    tasks.stop().await;
    result
}

async fn sections(
    ctx: &Ctx,
    caller: &CurrentUser,
    opts: &DepsBenchOptions,
    out: &mut impl Write,
) -> Result<()> {
    writeln!(
        out,
        "== Parent end → dependent admitted (after_ok), {} rounds ==",
        opts.rounds
    )?;
    let idle = rounds(ctx, caller, opts.rounds).await?;
    // Someone else's jobs: the caller's own queue stays under max_queued_per_user.
    let other = super::db::bench_member(&ctx.pool, "bench-deps-other").await?;
    latency_row(out, "idle queue", idle)?;
    let rows = vec![
        BatchRow {
            gpu_count: 2,
            workload: None,
            min_vram_mib: Some(1000),
            exclusive: false,
            priority: 0,
            waited_ms: 0,
        };
        opts.queued
    ];
    lifecycle::enter_batch(
        &ctx.pool,
        &BatchEntry {
            owner_id: other.id,
            name_prefix: "unrelated",
            image: "gpuq-test/busybox:latest",
            timeout_s: 3600,
            rows: &rows,
        },
    )
    .await?;
    let loaded = rounds(ctx, caller, opts.rounds).await?;
    latency_row(
        out,
        &format!("with {} unrelated jobs queued", opts.queued),
        loaded,
    )?;
    Ok(())
}

async fn rounds(ctx: &Ctx, caller: &CurrentUser, n: usize) -> Result<Vec<Duration>> {
    let mut gaps = Vec::with_capacity(n);
    for _ in 0..n {
        let parent = submit(ctx, caller, None).await?;
        admitted_at(&ctx.pool, parent).await?;
        let child = submit(ctx, caller, Some(parent)).await?;
        run_to_end(&ctx.pool, parent).await?;
        let finished: DateTime<Utc> =
            sqlx::query_scalar("SELECT finished_at FROM jobs WHERE id = $1")
                .bind(parent)
                .fetch_one(&ctx.pool)
                .await?;
        let admitted = admitted_at(&ctx.pool, child).await?;
        gaps.push(gap(finished, admitted));
        run_to_end(&ctx.pool, child).await?;
    }
    Ok(gaps)
}

async fn submit(ctx: &Ctx, caller: &CurrentUser, after: Option<Uuid>) -> Result<Uuid> {
    let mut body = serde_json::json!({
        "image": "gpuq-test/busybox:latest", "command": ["true"], "min_vram_mb": 20000,
    });
    if let Some(p) = after {
        body["after_ok"] = serde_json::json!([p]);
    }
    Ok(jobs::submit(ctx, caller, &body.to_string())
        .await
        .map_err(|e| anyhow!("{e}"))?
        .job_id)
}

/// Waits (polling the row; the figure is the database's own times) until `job` is admitted.
async fn admitted_at(pool: &PgPool, job: Uuid) -> Result<DateTime<Utc>> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let at: Option<DateTime<Utc>> =
            sqlx::query_scalar("SELECT admitted_at FROM jobs WHERE id = $1")
                .bind(job)
                .fetch_one(pool)
                .await?;
        if let Some(at) = at {
            return Ok(at);
        }
        if Instant::now() > deadline {
            bail!("job {job} was not admitted within 30 s");
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Moves an admitted job through the runner's statements to `succeeded` (its end wakes a pass).
async fn run_to_end(pool: &PgPool, job: Uuid) -> Result<()> {
    let claimed = lifecycle::claim(pool, NODE, None, 1).await?;
    if claimed.first().map(|r| r.id) != Some(job) {
        bail!("claimed {:?}, not {job}", claimed.first().map(|r| r.id));
    }
    lifecycle::set_running(pool, job, NODE).await?;
    let end = Ending {
        status: crate::model::JobStatus::Succeeded,
        exit_code: Some(0),
        reason: None,
        cause: None,
    };
    if !lifecycle::finish(pool, job, NODE, &end).await? {
        bail!("job {job} did not end");
    }
    Ok(())
}
