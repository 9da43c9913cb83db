//! `gpuq bench vram`: how fast the VRAM policing reacts, and what the sampler costs.
//!
//! Everything runs in this process against the given scratch database and the local dockerd, as
//! `gpuq serve` builds it: 8 simulated cards of 24576 MiB on node `bench-vram`, a runner, a
//! scheduler and the VRAM sampler at `--vram-sample-ms`. Each round puts one job on each card
//! (13000 MiB: one fits per card) and then, through the simulation, makes each use 15000 MiB
//! (over its commitment, card not short), and later fills its card with foreign memory until
//! 200 MiB are free (short). Figures:
//! - overuse → `vram_over_commitment` event: from the usage being set to the event's time;
//! - short → stopped: from the foreign memory being set to the job's end (`finished_at`), which
//!   includes the stop grace: `sleep` as a container's PID 1 ignores SIGTERM, so SIGKILL ends it;
//! - the sampler's own CPU per card per reading: rounds of the sampler alone on 8 cards with a job
//!   each, CPU time of this process (getrusage) over the rounds. With `--nvml-lib` (the fake NVML
//!   of `tests/fixtures/fake-nvml/`), the same through NVML with 4 processes per card, each
//!   looked up in `/proc/<pid>/cgroup` as on a real host.

use super::{gap, latency_row, ms};
use crate::server::auth::CurrentUser;
use crate::server::db::{gpus, vram};
use crate::server::gpu::observer::{self, Cards};
use crate::server::gpu::{self, GpuInventory, GpuMode, NvmlInventory};
use crate::server::runtime::ensure_sim_devices;
use crate::server::vram::{Sampler, VramConfig};
use crate::server::{jobs, Ctx};
use anyhow::{anyhow, bail, Context, Result};
use chrono::{DateTime, Utc};
use sqlx::PgPool;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;
use uuid::Uuid;

const NODE: &str = "bench-vram";
const CARDS: usize = 8;
const TOTAL_MIB: i64 = 24576;
const COMMITTED: i64 = 13000;
const OVER: i64 = 15000;

/// Flags of `gpuq bench vram`.
#[derive(Debug, Clone, clap::Args)]
pub struct VramBenchOptions {
    /// Rounds of 8 jobs (one per card) for the latency figures.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// The sampler's period (`gpuq serve --vram-sample-ms`).
    #[arg(long, default_value_t = 1000)]
    pub vram_sample_ms: u64,
    /// Readings above the commitment before the event (`--vram-overuse-samples`).
    #[arg(long, default_value_t = 3)]
    pub vram_overuse_samples: i32,
    /// SIGTERM → SIGKILL grace of the stop (`--stop-grace-s`).
    #[arg(long, default_value_t = 10)]
    pub stop_grace_s: u64,
    /// Sampler rounds timed for the CPU figure.
    #[arg(long, default_value_t = 300)]
    pub cpu_rounds: usize,
    /// A fake (or real) NVML library for the NVML CPU figure; without it only the simulated
    /// sampler is timed.
    #[arg(long)]
    pub nvml_lib: Option<PathBuf>,
    /// A local image with `sleep` (nothing is pulled).
    #[arg(long, default_value = "gpuq-test/busybox:latest")]
    pub image: String,
}

/// Runs the benchmark and prints its figures.
pub async fn run(pool: &PgPool, opts: &VramBenchOptions, out: &mut impl Write) -> Result<()> {
    super::db::ensure_scratch(pool).await?;
    let caller = super::db::bench_member(pool, "bench-vram").await?;
    let spec = format!("{CARDS}x{TOTAL_MIB}:bench");
    let inventory: Arc<dyn GpuInventory> =
        Arc::from(gpu::from_config(GpuMode::Sim, Some(&spec), NODE)?);
    let cards = observer::spawn(source(pool, inventory), Duration::from_secs(5)).await;
    gpu::sync::refresh(pool, NODE, &cards.latest()).await?;
    ensure_sim_devices(CARDS)?;
    let grace = Duration::from_secs(opts.stop_grace_s);
    let (ctx, node) = super::node::start(pool, NODE, 256, grace, "VRAM").await?;
    let vram_cfg = VramConfig {
        node: NODE.into(),
        every: Duration::from_millis(opts.vram_sample_ms),
        overuse_samples: opts.vram_overuse_samples,
        reserve_mib: 512,
    };
    let (stop_tx, stop_rx) = watch::channel(false);
    let sampler = tokio::spawn(crate::server::vram::run(
        pool.clone(),
        cards.clone(),
        vram_cfg.clone(),
        stop_rx,
    ));
    let result = async {
        latencies(&ctx, &caller, opts, out).await?;
        let _ = stop_tx.send(true);
        let _ = sampler.await;
        cpu(&ctx, &caller, opts, &cards, &vram_cfg, out).await
    }
    .await;
    node.stop().await;
    result
}

async fn latencies(
    ctx: &Ctx,
    caller: &CurrentUser,
    opts: &VramBenchOptions,
    out: &mut impl Write,
) -> Result<()> {
    writeln!(
        out,
        "== VRAM policing: {} rounds of {CARDS} jobs, a reading every {} ms, event after {} readings, stop grace {} s ==",
        opts.rounds, opts.vram_sample_ms, opts.vram_overuse_samples, opts.stop_grace_s
    )?;
    let (mut to_event, mut to_stop) = (Vec::new(), Vec::new());
    for _ in 0..opts.rounds {
        let placed = start_jobs(ctx, caller, &opts.image).await?;
        let t0 = Utc::now();
        for (job, gpu) in &placed {
            vram::set_sim_usage(&ctx.pool, *gpu, *job, OVER).await?;
        }
        for (job, _) in &placed {
            let at = wait_event(&ctx.pool, *job).await?;
            to_event.push(gap(t0, at));
        }
        let t1 = Utc::now();
        for (_, gpu) in &placed {
            gpus::set_sim_external(&ctx.pool, *gpu, TOTAL_MIB - OVER - 200).await?;
        }
        for (job, _) in &placed {
            let at = wait_failed(&ctx.pool, *job).await?;
            to_stop.push(gap(t1, at));
        }
        for (_, gpu) in &placed {
            gpus::set_sim_external(&ctx.pool, *gpu, 0).await?;
        }
    }
    latency_row(out, "overuse → vram_over_commitment event", to_event)?;
    latency_row(
        out,
        "card short → job stopped (includes the grace)",
        to_stop,
    )?;
    Ok(())
}

async fn cpu(
    ctx: &Ctx,
    caller: &CurrentUser,
    opts: &VramBenchOptions,
    cards: &Cards,
    cfg: &VramConfig,
    out: &mut impl Write,
) -> Result<()> {
    writeln!(
        out,
        "== The sampler's own CPU: {} rounds on {CARDS} cards with a job each ==",
        opts.cpu_rounds
    )?;
    let placed = start_jobs(ctx, caller, &opts.image).await?;
    for (job, gpu) in &placed {
        vram::set_sim_usage(&ctx.pool, *gpu, *job, COMMITTED - 1000).await?;
    }
    let mut sim = Sampler::new(ctx.pool.clone(), cards.clone(), cfg.clone());
    let per = time_rounds(&mut sim, opts.cpu_rounds).await?;
    cpu_row(out, "simulated cards", per)?;
    if let Some(lib) = &opts.nvml_lib {
        let dir = std::env::temp_dir().join(format!("gpuq-bench-nvml-{}", Uuid::new_v4()));
        std::fs::create_dir_all(&dir)?;
        let copy = dir.join("libnvidia-ml.so.1");
        std::fs::copy(lib, &copy).with_context(|| format!("copying {}", lib.display()))?;
        std::fs::write(copy.with_extension("1.state"), nvml_state(&placed)?)?;
        let nvml: Arc<dyn GpuInventory> = Arc::new(NvmlInventory::new(Some(&copy))?);
        let nvml = observer::spawn(source(&ctx.pool, nvml), Duration::from_secs(5)).await;
        let mut sampler = Sampler::new(ctx.pool.clone(), nvml, cfg.clone());
        let per = time_rounds(&mut sampler, opts.cpu_rounds).await?;
        cpu_row(out, "NVML cards, 4 processes each", per)?;
        let _ = std::fs::remove_dir_all(&dir);
    }
    for (job, _) in &placed {
        jobs::cancel(ctx, caller, *job)
            .await
            .map_err(|e| anyhow!("{e}"))?;
    }
    // The runner removes their containers as they end: wait for it before it is stopped.
    for (job, _) in &placed {
        poll(
            &ctx.pool,
            *job,
            "SELECT finished_at FROM jobs WHERE id = $1 AND released_at IS NOT NULL",
        )
        .await?;
    }
    Ok(())
}

/// The bench node's cards, for its card observer.
fn source(pool: &PgPool, inventory: Arc<dyn GpuInventory>) -> observer::Source {
    observer::Source {
        pool: pool.clone(),
        inventory,
        node: NODE.into(),
        proc_root: "/proc".into(),
    }
}

/// A fake NVML state: the bench's cards, each with 4 host processes of this machine (their
/// `/proc/<pid>/cgroup` is read as on a real host; they are in no job's container).
fn nvml_state(placed: &[(Uuid, Uuid)]) -> Result<String> {
    let mut pids: Vec<u32> = std::fs::read_dir("/proc")?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    pids.sort_unstable();
    if pids.len() < 4 * placed.len() {
        bail!("too few processes on this machine for the NVML figure");
    }
    let mut state = String::new();
    for (i, (_, gpu)) in placed.iter().enumerate() {
        state += &format!(
            "gpu {} \"bench\" total_mib={TOTAL_MIB} used_mib=4000\n",
            crate::model::gpu_id(gpu)
        );
        for pid in &pids[4 * i..4 * i + 4] {
            state += &format!("proc {i} {pid} 1000 compute\n");
        }
    }
    Ok(state)
}

/// CPU time of this process per sampler round.
async fn time_rounds(sampler: &mut Sampler, rounds: usize) -> Result<Duration> {
    let before = cpu_time()?;
    for _ in 0..rounds {
        sampler.round().await?;
    }
    Ok((cpu_time()? - before) / rounds.max(1) as u32)
}

fn cpu_time() -> Result<Duration> {
    use nix::sys::resource::{getrusage, UsageWho};
    let u = getrusage(UsageWho::RUSAGE_SELF)?;
    let d = |t: nix::sys::time::TimeVal| {
        Duration::from_secs(t.tv_sec() as u64) + Duration::from_micros(t.tv_usec() as u64)
    };
    Ok(d(u.user_time()) + d(u.system_time()))
}

fn cpu_row(out: &mut impl Write, what: &str, per_round: Duration) -> Result<()> {
    let per_card = per_round / CARDS as u32;
    writeln!(
        out,
        "  {what:<40} {} CPU per round, {} per card per reading",
        ms(per_round),
        ms(per_card)
    )?;
    Ok(())
}

/// Submits one job per card and waits until all run; returns (job, card).
async fn start_jobs(ctx: &Ctx, caller: &CurrentUser, image: &str) -> Result<Vec<(Uuid, Uuid)>> {
    let body = serde_json::json!({ "image": image, "command": ["sleep", "600"], "min_vram_mb": COMMITTED });
    let mut ids = Vec::new();
    for _ in 0..CARDS {
        ids.push(
            jobs::submit(ctx, caller, &body.to_string())
                .await
                .map_err(|e| anyhow!("{e}"))?
                .job_id,
        );
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let placed: Vec<(Uuid, Uuid)> = sqlx::query_as(
            "SELECT j.id, r.gpu_uuid FROM jobs j JOIN reservations r ON r.job_id = j.id \
             AND r.released_at IS NULL WHERE j.id = ANY($1) AND j.status = 'running'",
        )
        .bind(&ids)
        .fetch_all(&ctx.pool)
        .await?;
        if placed.len() == ids.len() {
            return Ok(placed);
        }
        if Instant::now() > deadline {
            bail!("only {} of {} bench jobs started", placed.len(), ids.len());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn wait_event(pool: &PgPool, job: Uuid) -> Result<DateTime<Utc>> {
    poll(
        pool,
        job,
        "SELECT at FROM job_events WHERE job_id = $1 AND kind = 'vram_over_commitment' LIMIT 1",
    )
    .await
}

async fn wait_failed(pool: &PgPool, job: Uuid) -> Result<DateTime<Utc>> {
    poll(pool, job, "SELECT finished_at FROM jobs WHERE id = $1 AND status = 'failed' AND finished_at IS NOT NULL").await
}

async fn poll(pool: &PgPool, job: Uuid, sql: &str) -> Result<DateTime<Utc>> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Some(at) = sqlx::query_scalar(sql)
            .bind(job)
            .fetch_optional(pool)
            .await?
        {
            return Ok(at);
        }
        if Instant::now() > deadline {
            bail!("job {job} never got there: {sql}");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
