//! Section 4: bursts of trivial containers, straight through dockerd (plain, with the fence's
//! options, and as gpuq's own create makes them) and as gpuq jobs, with the CPU time each process
//! spent per container. The burst is cut into `--burst-rounds` rounds and each round runs every
//! leg in turn, so a busy spell of the machine falls on all legs alike.

use super::cpu::{Used, Watched, HEADS};
use super::floor::{self, Checks, Make, Shape};
use super::{describe, statuses, wait_for, wait_removed, Ctx, TERMINAL};
use crate::server::runtime::fence::FencePart;
use anyhow::{bail, Result};
use serde_json::json;
use std::collections::BTreeMap;
use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use uuid::Uuid;

/// One leg's figures, over all rounds.
pub(super) struct Leg {
    containers: usize,
    wall: Duration,
    cpu: Used,
}

impl Leg {
    fn new() -> Leg {
        Leg {
            containers: 0,
            wall: Duration::ZERO,
            cpu: Used::zero(),
        }
    }

    fn add(&mut self, containers: usize, wall: Duration, cpu: &Used) {
        self.containers += containers;
        self.wall += wall;
        self.cpu = self.cpu.plus(cpu);
    }

    /// Containers (or jobs) per second.
    pub fn per_s(&self) -> f64 {
        self.containers as f64 / self.wall.as_secs_f64().max(1e-9)
    }
}

/// The legs the summary names.
pub(super) struct Burst {
    pub plain: Leg,
    pub whole: Leg,
    pub gpuq: Leg,
}

/// The dockerd legs, in the order each round runs them (gpuq's comes last).
const FLOORS: [(&str, Make); 3] = [
    (
        "dockerd plain",
        Make::Parts(&[], crate::model::JobNetwork::Isolated),
    ),
    (
        "dockerd, the whole fence",
        Make::Parts(&FencePart::ALL, crate::model::JobNetwork::Isolated),
    ),
    ("dockerd, gpuq's Docker::create (Fenced)", Make::GpuqCreate),
];

pub(super) async fn section(ctx: &Ctx, shape: &Shape, out: &mut impl Write) -> Result<Burst> {
    let (n, w, rounds) = (
        ctx.opts.burst_jobs,
        ctx.opts.workers,
        ctx.opts.burst_rounds.clamp(1, ctx.opts.burst_jobs.max(1)),
    );
    writeln!(
        out,
        "== Burst: {n} containers running `true` ({}) per leg, {w} at a time, in {rounds} rounds \
         of every leg in turn ==",
        ctx.opts.image
    )?;
    let watched = Watched::find(ctx.opts.server_pid);
    let mut floors: Vec<Leg> = FLOORS.iter().map(|_| Leg::new()).collect();
    let (mut gpuq, mut submits, mut ended) = (Leg::new(), Duration::ZERO, BTreeMap::new());
    for round in 0..rounds {
        let size = n / rounds + usize::from(round < n % rounds);
        for ((name, make), leg) in FLOORS.iter().zip(floors.iter_mut()) {
            eprintln!("bench: burst round {}/{rounds}: {name}, {size}", round + 1);
            let make = match *make {
                Make::Parts(parts, _) => Make::Parts(parts, shape.policy.network),
                other => other,
            };
            floor_leg(ctx, shape, make, size, &watched, leg).await?;
        }
        eprintln!("bench: burst round {}/{rounds}: gpuq, {size}", round + 1);
        let (took, counts) = gpuq_leg(ctx, size, &watched, &mut gpuq).await?;
        submits += took;
        for (status, count) in counts {
            *ended.entry(status).or_insert(0) += count;
        }
    }
    for ((name, _), leg) in FLOORS.iter().zip(&floors) {
        let what = format!("{name}: create → start → wait → remove");
        let rate = leg.per_s();
        writeln!(
            out,
            "  {what:<70} {:>10}   {rate:>6.2} containers/s",
            secs(leg.wall)
        )?;
    }
    let what = format!("gpuq: {w} submitters, first submit → last job ended");
    let rate = gpuq.per_s();
    writeln!(
        out,
        "  {what:<70} {:>10}   {rate:>6.2} jobs/s",
        secs(gpuq.wall)
    )?;
    let what = "  of which submitting (all POSTs answered)";
    writeln!(out, "  {what:<70} {:>10}", secs(submits))?;
    writeln!(out, "  {:<70} {}", "  jobs ended as", describe(&ended))?;
    for ((name, _), leg) in FLOORS.iter().zip(&floors) {
        let what = format!("time per job, gpuq / {name}");
        writeln!(out, "  {what:<70} {:>10}   {:>6.2}", "", leg.per_s() / rate)?;
    }
    print_cpu(out, &floors, &gpuq)?;
    let mut floors = floors.into_iter();
    let (Some(plain), Some(whole)) = (floors.next(), floors.next()) else {
        bail!("the burst's dockerd legs are missing");
    };
    Ok(Burst { plain, whole, gpuq })
}

fn print_cpu(out: &mut impl Write, floors: &[Leg], gpuq: &Leg) -> Result<()> {
    writeln!(out, "\n  CPU seconds per container (ms)")?;
    write!(out, "  {:<40}", "")?;
    for h in HEADS {
        write!(out, " {h:>13}")?;
    }
    writeln!(out)?;
    let names = FLOORS.iter().map(|(name, _)| *name).chain(["gpuq"]);
    for (name, leg) in names.zip(floors.iter().chain([gpuq])) {
        write!(out, "  {name:<40}")?;
        for c in leg.cpu.columns() {
            let cell = c.map_or("-".into(), |s| {
                format!("{:.2}", 1e3 * s / leg.containers.max(1) as f64)
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

/// `--workers` tasks share `n` containers, each doing create → start → wait → remove with the
/// config a one-card job on a simulated card gets (or part of it, as `make` says).
async fn floor_leg(
    ctx: &Ctx,
    shape: &Shape,
    make: Make,
    n: usize,
    watched: &Watched,
    leg: &mut Leg,
) -> Result<()> {
    let next = Arc::new(AtomicUsize::new(0));
    let before = watched.sample();
    let t = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..ctx.opts.workers {
        let (docker, next, shape) = (ctx.docker.clone(), Arc::clone(&next), shape.clone());
        tasks.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    return Ok::<_, anyhow::Error>(());
                }
                let req = shape.request(i, &["true"], false)?;
                floor::one(&docker, &req, make, Checks::default(), None).await?;
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    leg.add(n, t.elapsed(), &before.until(&watched.sample()));
    Ok(())
}

/// Submits `n` jobs through the REST API and waits for every job to end and every container to be
/// removed. The wall time runs from the first submit to the last job's `finished_at` (Postgres's
/// clock on this machine): the wait polls seldom, so that it costs the measured server nothing.
/// Returns the submitting time and the jobs' end statuses.
async fn gpuq_leg(
    ctx: &Ctx,
    n: usize,
    watched: &Watched,
    leg: &mut Leg,
) -> Result<(Duration, BTreeMap<String, i64>)> {
    let bodies = (0..n)
        .map(|i| {
            json!({
                "image": ctx.opts.image, "command": ["true"], "min_vram_mb": 256,
                "name": format!("bench-burst-{i}"),
            })
        })
        .collect();
    let before = watched.sample();
    let t0 = super::idle::now_unix_nanos();
    let t = Instant::now();
    let ids = ctx.api.submit_all(bodies, ctx.opts.workers).await?;
    let submits = t.elapsed();
    let limit = Duration::from_secs(120 + n as u64 / 2);
    wait_for(
        &ctx.pool,
        &ids,
        &TERMINAL,
        Duration::from_millis(500),
        limit,
    )
    .await?;
    let ended = statuses(&ctx.pool, &ids).await?;
    wait_removed(&ctx.docker, &ids).await?;
    let cpu = before.until(&watched.sample());
    let wall = last_finish(ctx, &ids).await?.saturating_sub(from_nanos(t0));
    leg.add(n, wall, &cpu);
    Ok((submits, ended))
}

/// When the last of `ids` ended, as a time since the Unix epoch.
async fn last_finish(ctx: &Ctx, ids: &[Uuid]) -> Result<Duration> {
    let micros: Option<i64> = sqlx::query_scalar(
        "SELECT (extract(epoch FROM max(finished_at)) * 1e6)::bigint FROM jobs WHERE id = ANY($1)",
    )
    .bind(ids)
    .fetch_one(&ctx.pool)
    .await?;
    match micros {
        Some(us) if us > 0 => Ok(Duration::from_micros(us as u64)),
        _ => bail!("the burst's jobs have no finish time"),
    }
}

fn from_nanos(nanos: i64) -> Duration {
    Duration::from_nanos(nanos.max(0) as u64)
}
