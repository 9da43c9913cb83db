//! `gpuq bench runner`: gpuq's own overhead between a submission and `docker start`, and the gap
//! between one job's exit and the next job's start on the card it freed.
//!
//! Everything runs in this process against the given scratch database and the local dockerd: one
//! simulated card on node `bench-run`, a runner and a scheduler exactly as `gpuq serve` builds them,
//! jobs submitted through the same service function the REST API calls. Times come from the
//! database: `created_at`, the `start_issued` event (taken just before `docker start`),
//! `started_at` (after `docker start` returned) and `finished_at`.

use super::{gap, latency_row};
use crate::server::auth::CurrentUser;
use crate::server::runtime::ensure_sim_devices;
use crate::server::{jobs, Ctx};
use anyhow::{anyhow, bail, Result};
use chrono::{DateTime, Utc};
use sqlx::PgPool;
use std::io::Write;
use std::time::{Duration, Instant};
use uuid::Uuid;

const NODE: &str = "bench-run";

/// Flags of `gpuq bench runner`.
#[derive(clap::Args, Debug, Clone)]
pub struct RunnerBenchOptions {
    /// Jobs run one after another on an idle system (overhead figures).
    #[arg(long, default_value_t = 100)]
    pub jobs: usize,
    /// Jobs queued at once on one card (exit → next start figures).
    #[arg(long, default_value_t = 30)]
    pub chain: usize,
    /// A local image with `true` (nothing is pulled).
    #[arg(long, default_value = "gpuq-test/busybox:latest")]
    pub image: String,
}

/// Runs the runner benchmark and prints its figures.
pub async fn runner(pool: &PgPool, opts: &RunnerBenchOptions, out: &mut impl Write) -> Result<()> {
    super::db::ensure_scratch(pool).await?;
    let caller = super::db::bench_member(pool, "bench-runner").await?;
    super::db::one_sim_card(pool, NODE).await?;
    ensure_sim_devices(1)?;
    let (ctx, node) = super::node::start(pool, NODE, 0, Duration::from_secs(1), "runner").await?;
    let result = sections(&ctx, &caller, opts, out).await;
    node.stop().await;
    result
}

async fn sections(
    ctx: &Ctx,
    caller: &CurrentUser,
    opts: &RunnerBenchOptions,
    out: &mut impl Write,
) -> Result<()> {
    writeln!(
        out,
        "== Submit → container, {} jobs one at a time on an idle node ==",
        opts.jobs
    )?;
    let mut ids = Vec::new();
    for _ in 0..opts.jobs {
        let id = submit(ctx, caller, &opts.image).await?;
        wait_done(&ctx.pool, &[id]).await?;
        ids.push(id);
    }
    let rows = timings(&ctx.pool, &ids).await?;
    let split = |f: &dyn Fn(&Timing) -> Duration| rows.iter().map(f).collect::<Vec<_>>();
    let docker_create = |r: &Timing| gap(r.claimed, r.verified);
    latency_row(
        out,
        "submit → docker start issued",
        split(&|r| gap(r.created_at, r.start_issued)),
    )?;
    latency_row(
        out,
        "  submit → admitted (NOTIFY, pass)",
        split(&|r| gap(r.created_at, r.admitted_at)),
    )?;
    latency_row(
        out,
        "  admitted → claimed by the runner",
        split(&|r| gap(r.admitted_at, r.claimed)),
    )?;
    latency_row(
        out,
        "  docker create + inspect (dockerd's own time)",
        split(&docker_create),
    )?;
    latency_row(
        out,
        "gpuq's own overhead (the first line less dockerd's create)",
        split(&|r| gap(r.created_at, r.start_issued).saturating_sub(docker_create(r))),
    )?;
    latency_row(
        out,
        "submit → container running (docker start returned)",
        split(&|r| gap(r.created_at, r.started_at)),
    )?;

    writeln!(
        out,
        "\n== Exit → next start on the freed card, {} jobs queued on one card ==",
        opts.chain
    )?;
    let mut chain = Vec::new();
    for _ in 0..opts.chain {
        chain.push(submit_big(ctx, caller, &opts.image).await?);
    }
    wait_done(&ctx.pool, &chain).await?;
    let mut rows = timings(&ctx.pool, &chain).await?;
    rows.sort_by_key(|r| r.start_issued);
    let gaps: Vec<Duration> = rows
        .windows(2)
        .map(|w| gap(w[0].finished_at, w[1].start_issued))
        .collect();
    latency_row(
        out,
        "previous job's exit recorded → next docker start issued",
        gaps,
    )?;
    Ok(())
}

async fn submit(ctx: &Ctx, caller: &CurrentUser, image: &str) -> Result<Uuid> {
    let body = serde_json::json!({ "image": image, "command": ["true"], "min_vram_mb": 1000 });
    Ok(jobs::submit(ctx, caller, &body.to_string())
        .await
        .map_err(|e| anyhow!("{e}"))?
        .job_id)
}

async fn submit_big(ctx: &Ctx, caller: &CurrentUser, image: &str) -> Result<Uuid> {
    let body = serde_json::json!({ "image": image, "command": ["true"], "min_vram_mb": 20000 });
    Ok(jobs::submit(ctx, caller, &body.to_string())
        .await
        .map_err(|e| anyhow!("{e}"))?
        .job_id)
}

async fn wait_done(pool: &PgPool, ids: &[Uuid]) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60 + 5 * ids.len() as u64);
    loop {
        let open: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM jobs WHERE id = ANY($1) AND released_at IS NULL",
        )
        .bind(ids)
        .fetch_one(pool)
        .await?;
        if open == 0 {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("{open} bench jobs did not finish in time");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[derive(sqlx::FromRow)]
struct Timing {
    created_at: DateTime<Utc>,
    admitted_at: DateTime<Utc>,
    claimed: DateTime<Utc>,
    verified: DateTime<Utc>,
    start_issued: DateTime<Utc>,
    started_at: DateTime<Utc>,
    finished_at: DateTime<Utc>,
}

async fn timings(pool: &PgPool, ids: &[Uuid]) -> Result<Vec<Timing>> {
    let rows: Vec<Timing> = sqlx::query_as(
        "SELECT j.created_at, j.admitted_at, c.at AS claimed, v.at AS verified, \
                (e.detail->>'at')::timestamptz AS start_issued, j.started_at, j.finished_at \
         FROM jobs j JOIN job_events e ON e.job_id = j.id AND e.kind = 'start_issued' \
         JOIN job_events c ON c.job_id = j.id AND c.kind = 'starting' \
         JOIN job_events v ON v.job_id = j.id AND v.kind = 'fence_verified' \
         WHERE j.id = ANY($1) AND j.status = 'succeeded'",
    )
    .bind(ids)
    .fetch_all(pool)
    .await?;
    if rows.len() != ids.len() {
        bail!("only {} of {} bench jobs succeeded", rows.len(), ids.len());
    }
    Ok(rows)
}
