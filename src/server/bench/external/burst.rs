//! Section 3: a burst of trivial containers, straight through dockerd (the floor) and then as gpuq
//! jobs, with the CPU time each process spent per container.

use super::cpu::{Used, Watched, HEADS};
use super::{describe, statuses, wait_for, Ctx, TERMINAL};
use crate::server::runtime::{
    ensure_sim_devices, Docker, GrantedGpu, LaunchMode, LaunchRequest, RunAs,
};
use anyhow::{bail, Context, Result};
use serde_json::json;
use std::collections::{BTreeMap, HashSet};
use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use uuid::Uuid;

/// Node label of the floor's containers, so no gpuq server takes them for its own.
const FLOOR_NODE: &str = "bench-floor";
/// Simulated cards the floor's containers are spread over (`/dev/gpuq-sim0` …).
const FLOOR_CARDS: usize = 8;

/// One leg's figures.
struct Leg {
    containers: usize,
    wall: Duration,
    cpu: Used,
}

pub(super) async fn section(ctx: &Ctx, out: &mut impl Write) -> Result<()> {
    let (n, w) = (ctx.opts.burst_jobs, ctx.opts.workers);
    writeln!(
        out,
        "== Burst: {n} containers running `true` ({}), dockerd's floor first, then gpuq ==",
        ctx.opts.image
    )?;
    let watched = Watched::find(ctx.opts.server_pid);
    eprintln!("bench: floor: {n} containers through dockerd, {w} workers");
    let floor = floor(ctx, &watched).await?;
    writeln!(
        out,
        "  {:<62} {:>10}   {:>8.1} containers/s",
        format!("dockerd floor: {w} workers, create → start → wait → remove"),
        secs(floor.wall),
        per_s(&floor)
    )?;
    out.flush()?;
    eprintln!("bench: gpuq: {n} jobs through the REST API, {w} submitters");
    let (gpuq, submits, ended) = gpuq(ctx, &watched).await?;
    writeln!(
        out,
        "  {:<62} {:>10}   {:>8.1} jobs/s",
        format!("gpuq: {w} submitters, first submit → last job ended"),
        secs(gpuq.wall),
        per_s(&gpuq)
    )?;
    writeln!(
        out,
        "  {:<62} {:>10}",
        "  of which submitting (all POSTs answered)",
        secs(submits)
    )?;
    writeln!(out, "  {:<62} {}", "  jobs ended as", describe(&ended))?;
    writeln!(
        out,
        "  {:<62} {:>10}   {:>8.2}",
        "gpuq / floor (throughput)",
        "",
        per_s(&gpuq) / per_s(&floor)
    )?;

    writeln!(out, "\n  CPU seconds per container (ms)")?;
    write!(out, "  {:<14}", "")?;
    for h in HEADS {
        write!(out, " {h:>13}")?;
    }
    writeln!(out)?;
    for (name, leg) in [("dockerd floor", &floor), ("gpuq", &gpuq)] {
        write!(out, "  {name:<14}")?;
        for c in leg.cpu.columns() {
            let cell = c.map_or("-".into(), |s| {
                format!("{:.2}", 1e3 * s / leg.containers as f64)
            });
            write!(out, " {cell:>13}")?;
        }
        writeln!(out)?;
    }
    writeln!(
        out,
        "  (each leg's CPU window runs until its containers are removed; \"whole machine\" also \
         holds containerd-shim, runc and the kernel)\n"
    )?;
    out.flush()?;
    Ok(())
}

fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

fn per_s(leg: &Leg) -> f64 {
    leg.containers as f64 / leg.wall.as_secs_f64().max(1e-9)
}

/// `--workers` tasks share the containers, each doing create → start → wait → remove with the
/// same fenced config gpuq gives a one-card job on a simulated card (the create checks the image,
/// creates and inspects the container, as gpuq's runner does).
async fn floor(ctx: &Ctx, watched: &Watched) -> Result<Leg> {
    let n = ctx.opts.burst_jobs;
    let cards = ensure_sim_devices(FLOOR_CARDS)
        .context("the floor's containers get a simulated card, like gpuq's (needs root)")?;
    let next = Arc::new(AtomicUsize::new(0));
    let before = watched.sample();
    let t = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..ctx.opts.workers {
        let (docker, next, cards) = (ctx.docker.clone(), Arc::clone(&next), cards.clone());
        let image = ctx.opts.image.clone();
        tasks.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    return Ok::<_, anyhow::Error>(());
                }
                let card = cards[i % cards.len()].clone();
                one_container(&docker, &image, i, card).await?;
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    let wall = t.elapsed();
    Ok(Leg {
        containers: n,
        wall,
        cpu: before.until(&watched.sample()),
    })
}

async fn one_container(
    docker: &Docker,
    image: &str,
    i: usize,
    card: std::path::PathBuf,
) -> Result<()> {
    let req = LaunchRequest {
        job_id: Uuid::new_v4(),
        attempt: 1,
        node: FLOOR_NODE.into(),
        installation: None,
        image: image.into(),
        argv: vec!["true".into()],
        env: BTreeMap::new(),
        framework_env: BTreeMap::new(),
        mounts: Vec::new(),
        gpus: vec![GrantedGpu {
            uuid: format!("GPU-bench-floor-{}", i % FLOOR_CARDS),
            sim_device: Some(card),
        }],
        memory_limit_mib: 16 * 1024,
        pids_limit: 4096,
        log_max_bytes: 64 * 1024 * 1024,
        run_as: RunAs::User {
            uid: 65534,
            gid: 65534,
        },
        nano_cpus: None,
        shm_mib: 2048,
        tmp_mib: crate::model::LaunchPolicy::default().tmpfs_mib(),
        network: crate::model::JobNetwork::Isolated,
        image_volumes: Vec::new(),
    };
    let id = docker.create(&req, LaunchMode::Fenced).await?;
    let run = async {
        docker.start(&id).await?;
        docker.wait(&id).await
    };
    let code = run.await;
    docker.remove(&id).await?;
    match code? {
        0 => Ok(()),
        c => bail!("floor container {id} exited {c}"),
    }
}

/// Submits the burst through the REST API and waits for every job to end and every container to
/// be removed. Returns the leg (wall time to the last terminal status), the submitting time and
/// the jobs' end statuses.
async fn gpuq(ctx: &Ctx, watched: &Watched) -> Result<(Leg, Duration, BTreeMap<String, i64>)> {
    let n = ctx.opts.burst_jobs;
    let bodies = (0..n)
        .map(|i| {
            json!({
                "image": ctx.opts.image, "command": ["true"], "min_vram_mb": 256,
                "name": format!("bench-burst-{i}"),
            })
        })
        .collect();
    let before = watched.sample();
    let t = Instant::now();
    let ids = ctx.api.submit_all(bodies, ctx.opts.workers).await?;
    let submits = t.elapsed();
    let limit = Duration::from_secs(120 + n as u64 / 2);
    wait_for(&ctx.pool, &ids, &TERMINAL, Duration::from_millis(20), limit).await?;
    let wall = t.elapsed();
    let ended = statuses(&ctx.pool, &ids).await?;
    wait_removed(&ctx.docker, &ids).await?;
    let leg = Leg {
        containers: n,
        wall,
        cpu: before.until(&watched.sample()),
    };
    Ok((leg, submits, ended))
}

/// Waits until dockerd holds no container of `ids` (gpuq removes each after recording its end).
async fn wait_removed(docker: &Docker, ids: &[Uuid]) -> Result<()> {
    let ours: HashSet<Uuid> = ids.iter().copied().collect();
    let t = Instant::now();
    loop {
        let left = docker
            .list_managed(None)
            .await?
            .iter()
            .filter(|c| ours.contains(&c.job_id))
            .count();
        if left == 0 {
            return Ok(());
        }
        if t.elapsed() > Duration::from_secs(120) {
            bail!("{left} burst containers still there after 120 s");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
