//! `gpuq bench …`: the benchmarks' entry points, from their flags (see `crate::server::bench`).

use super::with_database;
use anyhow::{anyhow, Result};

/// `gpuq bench admission`: prints planner, pass and burst figures.
pub async fn admission(args: crate::server::cli::BenchAdmissionArgs) -> Result<()> {
    with_database(&args.db, |pool| async move {
        crate::server::bench::admission(&pool, &args.opts, &mut std::io::stdout()).await
    })
    .await
}

/// `gpuq bench runner`: prints launch overhead figures.
pub async fn runner(args: crate::server::cli::BenchRunnerArgs) -> Result<()> {
    with_database(&args.db, |pool| async move {
        crate::server::bench::launch::runner(&pool, &args.opts, &mut std::io::stdout()).await
    })
    .await
}

/// `gpuq bench vram`: the VRAM policing's latencies and the sampler's cost.
pub async fn vram(args: crate::server::cli::BenchVramArgs) -> Result<()> {
    with_database(&args.db, |pool| async move {
        crate::server::bench::vram::run(&pool, &args.opts, &mut std::io::stdout()).await
    })
    .await
}

/// `gpuq bench failover`: kills and restarts a `gpuq serve` on the given external database.
pub async fn failover(args: crate::server::cli::BenchFailoverArgs) -> Result<()> {
    let url = args.db.database_url.clone().ok_or_else(|| {
        anyhow!("gpuq bench failover needs --database-url: the nodes it starts and kills share it")
    })?;
    with_database(&args.db, |pool| async move {
        crate::server::bench::failover::run(&pool, &url, &args.opts, &mut std::io::stdout()).await
    })
    .await
}

/// `gpuq bench logs`: a `gpuq serve`'s resident memory under many log reads at once.
pub async fn logs(args: crate::server::cli::BenchLogsArgs) -> Result<()> {
    let url = args.db.database_url.clone().ok_or_else(|| {
        anyhow!("gpuq bench logs needs --database-url: the server it measures shares it")
    })?;
    with_database(&args.db, |pool| async move {
        crate::server::bench::logs::run(&pool, &url, &args.opts, &mut std::io::stdout()).await
    })
    .await
}

/// `gpuq bench pull`: submit → running of a job whose image must be pulled, against a pull and a
/// run by hand.
pub async fn pull(args: crate::server::cli::BenchPullArgs) -> Result<()> {
    with_database(&args.db, |pool| async move {
        crate::server::bench::pull::run(&pool, &args.opts, &mut std::io::stdout()).await
    })
    .await
}

/// `gpuq bench external`: measures the running server at `url` from outside. It only reads the
/// server's database (no migration: the server may be an older build).
pub async fn external(
    args: crate::server::cli::BenchExternalArgs,
    url: String,
    token: Option<crate::model::Secret>,
) -> Result<()> {
    crate::server::bench::external::run(&url, token, &args.opts, &mut std::io::stdout()).await
}

/// `gpuq bench replay`: the start estimate's error on a replayed day (no database).
pub fn replay(args: crate::server::cli::BenchReplayArgs) -> Result<()> {
    crate::server::bench::replay::run(&args.opts, &mut std::io::stdout())?;
    Ok(())
}

/// `gpuq bench fairness`: waits and shares of GPU-hours on a replayed day, fair share off and on.
pub fn fairness(args: crate::server::cli::BenchFairnessArgs) -> Result<()> {
    crate::server::bench::fairness::run(&args.opts, &mut std::io::stdout())?;
    Ok(())
}

/// `gpuq bench backfill`: packing and waits with backfill on and off, on a replayed day (no
/// database).
pub fn backfill(args: crate::server::cli::BenchBackfillArgs) -> Result<()> {
    crate::server::bench::backfill::run(&args.opts, &mut std::io::stdout())?;
    Ok(())
}

/// `gpuq bench deps`: parent end → dependent admitted, idle and with unrelated jobs queued.
pub async fn deps(args: crate::server::cli::BenchDepsArgs) -> Result<()> {
    with_database(&args.db, |pool| async move {
        crate::server::bench::deps::run(&pool, &args.opts, &mut std::io::stdout()).await
    })
    .await
}
