//! `gpuq bench pull`: the time from submit to running for a job whose image must first be pulled,
//! against pulling and running the same image by hand, in one run (issue 27, "Measure").
//!
//! A local registry (`docker-registry`) serves an image of busybox and `--size-mib` MiB of random
//! bytes. Each of `--rounds` rounds runs two legs, their order alternating so that drift of the
//! machine falls on both alike, and each leg starts with the image removed from the node:
//!
//! - **by hand**: `docker pull`, then `docker run` of `true` with the card's device (create,
//!   start), both through the Docker API; timed from the pull's request to the start's answer;
//! - **gpuq**: the job submitted through the service function the REST API calls, on one
//!   simulated card of node `bench-pull` whose puller, admission pass and runner run in this
//!   process as `gpuq serve` builds them; timed from `created_at` to `started_at` (after `docker
//!   start` returned), both stamped by Postgres. The node's record of the image (`node_images`)
//!   says when its pull began and ended. While the image is not present the ledger's VRAM for
//!   the job is read every 20 ms: what gpuq held during the pull.

mod registry;

use super::{latency_row, percentile};
use crate::model::LaunchPolicy;
use crate::server::auth::CurrentUser;
use crate::server::runtime::fence::FencePart;
use crate::server::runtime::simdev::sim_device_path;
use crate::server::runtime::{
    ensure_sim_devices, Docker, GrantedGpu, LaunchRequest, PullProgress, RunAs, RuntimeError,
};
use crate::server::{jobs, Ctx};
use anyhow::{anyhow, bail, Context, Result};
use chrono::{DateTime, Utc};
use sqlx::PgPool;
use std::collections::BTreeMap;
use std::io::Write;
use std::time::{Duration, Instant};
use uuid::Uuid;

/// gpuq's node in this bench.
const NODE: &str = "bench-pull";
/// The node label of the containers run by hand, so no runner takes them for its own.
const HAND_NODE: &str = "bench-pull-hand";
/// How often the ledger is read while the image is pulled.
const LEDGER_EVERY: Duration = Duration::from_millis(20);

/// Flags of `gpuq bench pull`.
#[derive(clap::Args, Debug, Clone)]
pub struct PullBenchOptions {
    /// Rounds; each runs the pull by hand and gpuq's once, their order alternating.
    #[arg(long, default_value_t = 12, value_parser = clap::value_parser!(u32).range(1..))]
    pub rounds: u32,
    /// The image's layer of random bytes, MiB.
    #[arg(long, default_value_t = 48, value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub size_mib: u64,
    /// The registry program (Debian's `docker-registry`, distribution 2.8).
    #[arg(long, default_value = "docker-registry")]
    pub registry: String,
}

/// One leg by hand.
struct Hand {
    total: Duration,
    pull: Duration,
}

/// One leg through gpuq.
struct Gpuq {
    total: Duration,
    to_pull: Duration,
    pull: Duration,
    to_admit: Duration,
    to_running: Duration,
    /// MiB·s the ledger held for the job while its image was not present.
    held_mib_s: f64,
    /// The most MiB it held then.
    held_max_mib: i64,
}

/// Runs the bench against `pool` (a scratch database) and prints its figures.
pub async fn run(pool: &PgPool, opts: &PullBenchOptions, out: &mut impl Write) -> Result<()> {
    super::db::ensure_scratch(pool).await?;
    let caller = super::db::bench_member(pool, "bench-pull").await?;
    super::db::one_sim_card(pool, NODE).await?;
    ensure_sim_devices(1)?;
    if cfg!(debug_assertions) {
        writeln!(
            out,
            "note: debug build; gpuq's own steps are slower than in a release build\n"
        )?;
    }
    let registry = registry::Registry::start(&opts.registry).await?;
    let image = format!(
        "{}/gpuq-bench/pull:{}",
        registry.host(),
        Uuid::new_v4().simple()
    );
    writeln!(
        out,
        "Image {image}: busybox and {} MiB of random bytes, in a local docker-registry",
        opts.size_mib
    )?;
    let pushed = {
        let (image, mib) = (image.clone(), opts.size_mib);
        tokio::task::spawn_blocking(move || registry::push_image(&image, mib)).await?
    };
    pushed.context("making and pushing the bench image")?;
    let docker = Docker::connect()
        .await
        .context("the pull bench needs dockerd")?;
    let (ctx, node) = super::node::start(pool, NODE, 0, Duration::from_secs(1), "pull").await?;
    let result = rounds(&ctx, &caller, &docker, &image, opts, out).await;
    node.stop().await;
    let _ = docker.remove_image(&image).await;
    result
}

async fn rounds(
    ctx: &Ctx,
    caller: &CurrentUser,
    docker: &Docker,
    image: &str,
    opts: &PullBenchOptions,
    out: &mut impl Write,
) -> Result<()> {
    let (mut hand, mut gpuq) = (Vec::new(), Vec::new());
    for round in 0..opts.rounds {
        if round % 2 == 0 {
            hand.push(by_hand(docker, image).await?);
            gpuq.push(through_gpuq(ctx, caller, docker, image).await?);
        } else {
            gpuq.push(through_gpuq(ctx, caller, docker, image).await?);
            hand.push(by_hand(docker, image).await?);
        }
        let (h, g) = (hand.last(), gpuq.last());
        if let (Some(h), Some(g)) = (h, g) {
            writeln!(
                out,
                "  round {:>2}: by hand {:>8.1} ms (pull {:>8.1} ms)   gpuq {:>8.1} ms (pull {:>8.1} ms)",
                round + 1,
                h.total.as_secs_f64() * 1e3,
                h.pull.as_secs_f64() * 1e3,
                g.total.as_secs_f64() * 1e3,
                g.pull.as_secs_f64() * 1e3
            )?;
        }
    }
    report(&hand, &gpuq, opts, out)
}

fn report(
    hand: &[Hand],
    gpuq: &[Gpuq],
    opts: &PullBenchOptions,
    out: &mut impl Write,
) -> Result<()> {
    writeln!(
        out,
        "\n== Pull: submit → running for an image that must be pulled ({} MiB, {} rounds) ==",
        opts.size_mib,
        hand.len()
    )?;
    let col = |f: &dyn Fn(&Hand) -> Duration| hand.iter().map(f).collect::<Vec<_>>();
    let gcol = |f: &dyn Fn(&Gpuq) -> Duration| gpuq.iter().map(f).collect::<Vec<_>>();
    latency_row(
        out,
        "by hand: docker pull + docker run (create, start)",
        col(&|h| h.total),
    )?;
    latency_row(out, "  of which docker pull", col(&|h| h.pull))?;
    latency_row(
        out,
        "  of which docker run",
        col(&|h| h.total.saturating_sub(h.pull)),
    )?;
    latency_row(out, "gpuq: submit → running", gcol(&|g| g.total))?;
    latency_row(
        out,
        "  submit → pull begins (the node's puller)",
        gcol(&|g| g.to_pull),
    )?;
    latency_row(
        out,
        "  the pull (node_images: begun → present)",
        gcol(&|g| g.pull),
    )?;
    latency_row(
        out,
        "  image present → admitted (a pass)",
        gcol(&|g| g.to_admit),
    )?;
    latency_row(
        out,
        "  admitted → running (claim, create, verify, start)",
        gcol(&|g| g.to_running),
    )?;
    let p = |mut v: Vec<Duration>, q: f64| {
        v.sort_unstable();
        percentile(&v, q).as_secs_f64()
    };
    let (h50, h95) = (p(col(&|h| h.total), 50.0), p(col(&|h| h.total), 95.0));
    let (g50, g95) = (p(gcol(&|g| g.total), 50.0), p(gcol(&|g| g.total), 95.0));
    writeln!(
        out,
        "  gpuq / by hand: p50 x{:.3} ({:+.1} %), p95 x{:.3} ({:+.1} %)",
        g50 / h50,
        (g50 / h50 - 1.0) * 100.0,
        g95 / h95,
        (g95 / h95 - 1.0) * 100.0
    )?;
    // Rounds are pairs run back to back: the median of their differences is less at the mercy of
    // the pull's own noise than the difference of two medians.
    let mut diffs: Vec<f64> = hand
        .iter()
        .zip(gpuq)
        .map(|(h, g)| g.total.as_secs_f64() - h.total.as_secs_f64())
        .collect();
    diffs.sort_by(f64::total_cmp);
    let median = if diffs.len() % 2 == 1 {
        diffs[diffs.len() / 2]
    } else {
        (diffs[diffs.len() / 2 - 1] + diffs[diffs.len() / 2]) / 2.0
    };
    writeln!(
        out,
        "  gpuq − by hand, round by round: median {:+.1} ms ({:+.1} % of by hand's p50)",
        median * 1e3,
        median / h50 * 100.0
    )?;
    let mut shares: Vec<f64> = gpuq
        .iter()
        .map(|g| g.pull.as_secs_f64() / g.total.as_secs_f64().max(1e-9))
        .collect();
    shares.sort_by(f64::total_cmp);
    writeln!(
        out,
        "  gpuq's pull share of submit → running: p50 {:.1} %",
        shares[shares.len() / 2] * 100.0
    )?;
    let held: f64 = gpuq.iter().map(|g| g.held_mib_s).sum();
    let most = gpuq.iter().map(|g| g.held_max_mib).max().unwrap_or(0);
    writeln!(
        out,
        "  VRAM the ledger held for the job while its image was not present: {held:.0} MiB·s in \
         all rounds, at most {most} MiB (read every {} ms)",
        LEDGER_EVERY.as_millis()
    )?;
    Ok(())
}

/// Removes the image from dockerd and checks that it is gone. The last job's container may
/// still be on its way out (the runner removes it after recording the end): dockerd refuses
/// until then.
async fn remove(docker: &Docker, image: &str) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match docker.remove_image(image).await {
            Ok(()) => break,
            Err(RuntimeError::Conflict(_)) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => return Err(e).context(format!("removing {image}")),
        }
    }
    if docker.image_facts(image).await?.is_some() {
        bail!("{image} is still on the node after its removal (another reference to it?)");
    }
    Ok(())
}

/// Removes the image from the node: dockerd's copy and gpuq's record of it.
async fn forget(ctx: &Ctx, docker: &Docker, image: &str) -> Result<()> {
    remove(docker, image).await?;
    sqlx::query("DELETE FROM node_images WHERE node = $1 AND image_ref = $2")
        .bind(NODE)
        .bind(image)
        .execute(&ctx.pool)
        .await?;
    Ok(())
}

async fn by_hand(docker: &Docker, image: &str) -> Result<Hand> {
    remove(docker, image).await?;
    let (progress, _) = tokio::sync::watch::channel(PullProgress::default());
    let t = Instant::now();
    docker
        .pull(image, &progress, None)
        .await
        .map_err(|e| anyhow!("docker pull {image}: {e}"))?;
    let pull = t.elapsed();
    let req = hand_request(image);
    let id = docker.create_parts(&req, &[FencePart::Devices]).await?;
    docker.start(&id).await?;
    let total = t.elapsed();
    docker.wait(&id).await?;
    docker.remove(&id).await?;
    Ok(Hand { total, pull })
}

/// `docker run --device /dev/gpuq-sim0 IMAGE true`, everything else left to Docker's defaults.
fn hand_request(image: &str) -> LaunchRequest {
    let p = LaunchPolicy::default();
    LaunchRequest {
        job_id: Uuid::new_v4(),
        attempt: 1,
        node: HAND_NODE.into(),
        installation: None,
        image: image.into(),
        argv: vec!["true".into()],
        array_index: None,
        session_port: None,
        env: BTreeMap::new(),
        framework_env: BTreeMap::new(),
        mounts: Vec::new(),
        gpus: vec![GrantedGpu {
            uuid: "GPU-bench-pull-hand".into(),
            sim_device: Some(sim_device_path(0)),
        }],
        memory_limit_mib: p.memory_limit_mib,
        pids_limit: p.pids_limit,
        log_max_bytes: 1 << 20,
        run_as: RunAs::ImageUser,
        nano_cpus: None,
        shm_mib: p.shm_mib,
        tmp_mib: None,
        network: p.network,
        image_volumes: Vec::new(),
    }
}

#[derive(sqlx::FromRow)]
struct Stamps {
    created_at: DateTime<Utc>,
    admitted_at: DateTime<Utc>,
    started_at: DateTime<Utc>,
    pull_from: DateTime<Utc>,
    pull_until: DateTime<Utc>,
}

async fn through_gpuq(
    ctx: &Ctx,
    caller: &CurrentUser,
    docker: &Docker,
    image: &str,
) -> Result<Gpuq> {
    forget(ctx, docker, image).await?;
    let body = serde_json::json!({ "image": image, "command": ["true"], "min_vram_mb": 1000 });
    let id = jobs::submit(ctx, caller, &body.to_string())
        .await
        .map_err(|e| anyhow!("{e}"))?
        .job_id;
    let (held_mib_s, held_max_mib) = watch_ledger(&ctx.pool, id, image).await?;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let released: Option<DateTime<Utc>> =
            sqlx::query_scalar("SELECT released_at FROM jobs WHERE id = $1")
                .bind(id)
                .fetch_one(&ctx.pool)
                .await?;
        if released.is_some() {
            break;
        }
        if Instant::now() > deadline {
            bail!("bench job {id} did not end in time");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let s: Stamps = sqlx::query_as(
        "SELECT j.created_at, j.admitted_at, j.started_at, n.resolved_at AS pull_from, \
                n.updated_at AS pull_until \
         FROM jobs j, node_images n \
         WHERE j.id = $1 AND j.status = 'succeeded' AND n.node = $2 AND n.image_ref = $3 \
           AND n.pulled_by_gpuq",
    )
    .bind(id)
    .bind(NODE)
    .bind(image)
    .fetch_optional(&ctx.pool)
    .await?
    .ok_or_else(|| anyhow!("bench job {id} did not succeed after a pull by gpuq"))?;
    let gap = super::gap;
    Ok(Gpuq {
        total: gap(s.created_at, s.started_at),
        to_pull: gap(s.created_at, s.pull_from),
        pull: gap(s.pull_from, s.pull_until),
        to_admit: gap(s.pull_until, s.admitted_at),
        to_running: gap(s.admitted_at, s.started_at),
        held_mib_s,
        held_max_mib,
    })
}

/// Reads, every [`LEDGER_EVERY`] until the job has started, the VRAM the ledger holds for it and
/// whether its image is present on the node; returns the MiB·s and the most MiB held while it
/// was not.
async fn watch_ledger(pool: &PgPool, id: Uuid, image: &str) -> Result<(f64, i64)> {
    let (mut held, mut most) = (0.0, 0i64);
    let mut last = Instant::now();
    let deadline = last + Duration::from_secs(120);
    loop {
        let (state, mib, status): (Option<String>, i64, String) = sqlx::query_as(
            "SELECT (SELECT state FROM node_images WHERE node = $1 AND image_ref = $2), \
                    (SELECT coalesce(sum(vram_mib), 0)::bigint FROM reservations \
                      WHERE job_id = $3 AND released_at IS NULL), \
                    (SELECT status FROM jobs WHERE id = $3)",
        )
        .bind(NODE)
        .bind(image)
        .bind(id)
        .fetch_one(pool)
        .await
        .context("reading the ledger")?;
        let now = Instant::now();
        if state.as_deref() != Some("present") {
            held += mib as f64 * (now - last).as_secs_f64();
            most = most.max(mib);
        }
        last = now;
        match status.as_str() {
            "running" | "succeeded" => return Ok((held, most)),
            "queued" | "admitted" | "starting" => {}
            other => bail!("bench job {id} ended {other}"),
        }
        if now > deadline {
            bail!("bench job {id} did not start in time");
        }
        tokio::time::sleep(LEDGER_EVERY).await;
    }
}
