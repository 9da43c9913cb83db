//! `gpuq bench failover`: how long after a `kill -9` a node's cards stop being offered, and whether
//! any job ever runs twice, over repeated kills.
//!
//! Each round starts a real `gpuq serve` (this same binary) as node `bench-failover` with two
//! simulated cards and its runner on, with the default heartbeat (3 s) and lost time (15 s) unless
//! told otherwise. Two jobs that outlive the round are submitted (through the same service
//! function the REST API calls) and run; then the process is killed with SIGKILL and the database
//! is polled every 50 ms until the node shows `lost`: that wait is the figure. The node is then
//! started again, re-adopts its jobs, and they run to their end. At the end every job must have
//! succeeded with exactly one `started` event and one attempt: a duplicate run fails the bench.

use super::ms;
use super::ServeChild;
use crate::server::admission::PassConfig;
use crate::server::auth::CurrentUser;
use crate::server::db::nodes;
use crate::server::notifier::Notifier;
use crate::server::runtime::ensure_sim_devices;
use crate::server::{jobs, Ctx};
use anyhow::{anyhow, bail, Context, Result};
use sqlx::PgPool;
use std::io::Write;
use std::time::{Duration, Instant};
use uuid::Uuid;

const NODE: &str = "bench-failover";

/// Flags of `gpuq bench failover`.
#[derive(clap::Args, Debug, Clone)]
pub struct FailoverBenchOptions {
    /// Kills (rounds).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub kills: u32,
    /// The victim's `--heartbeat-s`.
    #[arg(long, default_value_t = 3)]
    pub heartbeat_s: u64,
    /// The victim's `--node-lost-after-s`.
    #[arg(long, default_value_t = 15)]
    pub lost_after_s: u64,
    /// How long each job runs (seconds); it must outlive the kill and the restart.
    #[arg(long, default_value_t = 25)]
    pub job_s: u64,
    /// A local image with `sleep` (nothing is pulled).
    #[arg(long, default_value = "gpuq-test/busybox:latest")]
    pub image: String,
}

/// Runs the failover benchmark against the scratch database at `url` and prints its figures.
pub async fn run(
    pool: &PgPool,
    url: &str,
    opts: &FailoverBenchOptions,
    out: &mut impl Write,
) -> Result<()> {
    super::db::ensure_scratch(pool).await?;
    ensure_sim_devices(2)?;
    let caller = super::db::bench_member(pool, "bench-failover").await?;
    let data = std::env::temp_dir().join(format!("gpuq-bench-failover-{}", Uuid::new_v4()));
    std::fs::create_dir_all(&data).context("a data folder for the victim")?;
    let ctx = Ctx::new(
        pool.clone(),
        PassConfig {
            headroom_mib: 0,
            starvation_after: Duration::from_secs(3600),
            cpu_node: NODE.into(),
        },
        data.join("logs"),
        Notifier::new(Duration::from_secs(2)),
    );
    writeln!(
        out,
        "== kill -9 of a node: {} rounds, heartbeat {} s, lost after {} s, 2 running jobs each ==",
        opts.kills, opts.heartbeat_s, opts.lost_after_s
    )?;
    let mut withdrawn = Vec::new();
    let mut all = Vec::new();
    for round in 1..=opts.kills {
        let victim = start(url, &data, opts, &format!("round{round}.log")).await?;
        let ids = [
            submit(&ctx, &caller, opts).await?,
            submit(&ctx, &caller, opts).await?,
        ];
        all.extend(ids);
        wait_for(pool, &ids, "running", Duration::from_secs(60)).await?;
        // Let a heartbeat or two pass, so the kill lands anywhere in the heartbeat period.
        tokio::time::sleep(Duration::from_millis(1_000 + 700 * round as u64 % 3_000)).await;
        kill9(victim);
        let killed = Instant::now();
        loop {
            if nodes::lost_names(pool).await?.iter().any(|n| n == NODE) {
                break;
            }
            if killed.elapsed() > Duration::from_secs(opts.lost_after_s + opts.heartbeat_s + 30) {
                bail!("round {round}: the node was never declared lost");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let took = killed.elapsed();
        withdrawn.push(took);
        let again = start(url, &data, opts, &format!("round{round}-again.log")).await?;
        wait_for(
            pool,
            &ids,
            "succeeded",
            Duration::from_secs(opts.job_s + 90),
        )
        .await?;
        drop(again);
        writeln!(
            out,
            "  round {round}: cards withdrawn {} after the kill",
            ms(took)
        )?;
    }
    let (runs, duplicates) = duplicates(pool, &all).await?;
    withdrawn.sort();
    let s = super::summarize(withdrawn.clone());
    writeln!(
        out,
        "withdrawn after kill -9: median {}, max {} (bound: lost time {} s)",
        ms(s.median),
        ms(*withdrawn.last().unwrap_or(&Duration::ZERO)),
        opts.lost_after_s
    )?;
    writeln!(
        out,
        "jobs: {}, all succeeded; container starts: {runs}; duplicate runs: {duplicates}",
        all.len()
    )?;
    let _ = std::fs::remove_dir_all(&data);
    if duplicates > 0 {
        bail!("{duplicates} jobs ran more than once");
    }
    Ok(())
}

async fn start(
    url: &str,
    data: &std::path::Path,
    opts: &FailoverBenchOptions,
    log: &str,
) -> Result<ServeChild> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let exe = std::env::current_exe().context("finding this binary")?;
    let child = std::process::Command::new(exe)
        .args([
            "serve",
            "--database-url",
            url,
            "--node",
            NODE,
            "--runner",
            "true",
        ])
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args([
            "--gpu-source",
            "sim",
            "--sim-gpus",
            "2x24576:NVIDIA GeForce RTX 3090",
        ])
        .args(["--heartbeat-s", &opts.heartbeat_s.to_string()])
        .args(["--node-lost-after-s", &opts.lost_after_s.to_string()])
        .args(["--stop-grace-s", "1", "--pass-interval-ms", "500"])
        .arg("--data-dir")
        .arg(data)
        .env("GPUQ_BOOTSTRAP_ADMIN_PASSWORD", "bench-failover-admin")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(data.join(log))?)
        .spawn()
        .context("starting gpuq serve")?;
    let victim = ServeChild(child);
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let ready = client
            .get(format!("http://127.0.0.1:{port}/readyz"))
            .send()
            .await;
        if ready.is_ok_and(|r| r.status().is_success()) {
            return Ok(victim);
        }
        if Instant::now() > deadline {
            bail!(
                "the node did not get ready; see {}",
                data.join(log).display()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn kill9(victim: ServeChild) {
    let pid = nix::unistd::Pid::from_raw(victim.0.id() as i32);
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
    drop(victim);
}

async fn submit(ctx: &Ctx, caller: &CurrentUser, opts: &FailoverBenchOptions) -> Result<Uuid> {
    let body = serde_json::json!({ "image": opts.image, "min_vram_mb": 20000,
                                   "command": ["sleep", opts.job_s.to_string()] });
    Ok(jobs::submit(ctx, caller, &body.to_string())
        .await
        .map_err(|e| anyhow!("{e}"))?
        .job_id)
}

async fn wait_for(pool: &PgPool, ids: &[Uuid], status: &str, within: Duration) -> Result<()> {
    let deadline = Instant::now() + within;
    loop {
        let statuses: Vec<String> =
            sqlx::query_scalar("SELECT status::text FROM jobs WHERE id = ANY($1)")
                .bind(ids)
                .fetch_all(pool)
                .await?;
        if statuses.iter().all(|s| s == status) {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("jobs {ids:?} did not all reach `{status}`: {statuses:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Container starts over all the jobs, and how many jobs started more than once (or had a second
/// attempt).
async fn duplicates(pool: &PgPool, ids: &[Uuid]) -> Result<(i64, i64)> {
    let rows: Vec<(i32, i64)> = sqlx::query_as(
        "SELECT j.attempt, (SELECT count(*) FROM job_events e WHERE e.job_id = j.id \
           AND e.kind = 'started') FROM jobs j WHERE j.id = ANY($1)",
    )
    .bind(ids)
    .fetch_all(pool)
    .await?;
    let runs = rows.iter().map(|r| r.1).sum();
    let twice = rows.iter().filter(|r| r.0 > 1 || r.1 > 1).count() as i64;
    Ok((runs, twice))
}
