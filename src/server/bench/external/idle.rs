//! Sections 1 and 2: transactions per second while N jobs sit idle, then cancel → SIGTERM.

use super::cpu::{Used, Watched};
use super::{describe, statuses, wait_for, Ctx};
use crate::server::bench::{ms, percentile};
use crate::server::runtime::docker::ContainerEvent;
use anyhow::{Context, Result};
use futures_util::StreamExt;
use serde_json::json;
use std::collections::HashMap;
use std::io::Write;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::mpsc;
use uuid::Uuid;

/// Wait between the last job running and the first counter read: Postgres backends flush their
/// statistics at most once a second while busy and within 10 s once idle, so what the start-up
/// did is all counted before the window opens.
const SETTLE: Duration = Duration::from_secs(11);
/// Longest wait for one cancel's SIGTERM.
const SIGTERM_LIMIT: Duration = Duration::from_secs(30);

/// The figures of one N.
struct Row {
    jobs: usize,
    window: Duration,
    tx_per_s: f64,
    cpu: Used,
    /// Cancel → SIGTERM, ascending.
    cancel: Vec<Duration>,
    /// Cancels whose SIGTERM never came within [`SIGTERM_LIMIT`].
    missing: usize,
}

pub(super) async fn section(ctx: &Ctx, out: &mut impl Write) -> Result<()> {
    writeln!(
        out,
        "== Idle cost: N jobs running `sleep 600`, transactions of the server's database over {} s; \
         then cancel → SIGTERM, one cancel at a time ==",
        ctx.opts.idle_seconds
    )?;
    writeln!(
        out,
        "  {:>6} | {:>9} | {:>9} | {:>9} | {:>9} | {:>12} | {:>12} | {:>12}",
        "N", "tx/s", "gpuq CPU", "dockerd", "postgres", "cancel p50", "p95", "max"
    )?;
    for &n in &ctx.opts.idle_jobs {
        let row = one(ctx, n).await?;
        print_row(out, &row)?;
    }
    writeln!(
        out,
        "  (CPU columns: % of one core over the window; cancel → SIGTERM: from just before the \
         cancel request to dockerd's kill event with signal 15)\n"
    )?;
    Ok(())
}

fn print_row(out: &mut impl Write, r: &Row) -> Result<()> {
    let pct = |s: Option<f64>| match s {
        Some(s) => format!("{:.1} %", 100.0 * s / r.window.as_secs_f64()),
        None => "-".into(),
    };
    let lat = |p: f64| {
        if r.cancel.is_empty() {
            "-".into()
        } else {
            ms(percentile(&r.cancel, p))
        }
    };
    write!(
        out,
        "  {:>6} | {:>9.1} | {:>9} | {:>9} | {:>9} | {:>12} | {:>12} | {:>12}",
        r.jobs,
        r.tx_per_s,
        pct(r.cpu.server),
        pct(r.cpu.dockerd),
        pct(Some(r.cpu.postgres)),
        lat(50.0),
        lat(95.0),
        lat(100.0),
    )?;
    if r.missing > 0 {
        write!(out, "   ({} cancels saw no SIGTERM)", r.missing)?;
    }
    writeln!(out)?;
    out.flush()?;
    Ok(())
}

/// Starts `n` idle jobs, counts, cancels them and waits for them to end.
async fn one(ctx: &Ctx, n: usize) -> Result<Row> {
    let o = &ctx.opts;
    let bodies = (0..n)
        .map(|i| {
            json!({
                "image": o.image, "command": ["sleep", "600"], "min_vram_mb": 256,
                "name": format!("bench-idle-{n}-{i}"), "timeout_s": 3600,
            })
        })
        .collect();
    eprintln!("bench: submitting {n} idle jobs");
    let ids = ctx.api.submit_all(bodies, o.workers).await?;
    let limit = Duration::from_secs(60 + n as u64);
    let took = wait_for(&ctx.pool, &ids, &["running"], ms_(50), limit).await?;
    eprintln!("bench: {n} jobs running after {took:.1?}; settling {SETTLE:?}");
    tokio::time::sleep(SETTLE).await;

    let watched = Watched::find(o.server_pid);
    let before_cpu = watched.sample();
    let (tx0, t0) = (xacts(ctx).await?, Instant::now());
    tokio::time::sleep(Duration::from_secs(o.idle_seconds)).await;
    let (tx1, window) = (xacts(ctx).await?, t0.elapsed());
    let cpu = before_cpu.until(&watched.sample());
    // The first read is itself a transaction, counted by the second.
    let tx_per_s = (tx1 - tx0 - 1).max(0) as f64 / window.as_secs_f64();
    eprintln!("bench: {n} jobs: {tx_per_s:.1} tx/s; cancelling them one at a time");

    let (mut cancel, missing) = cancel_each(ctx, &ids).await?;
    cancel.sort_unstable();
    let limit = Duration::from_secs(120 + n as u64 / 5);
    wait_for(&ctx.pool, &ids, &super::TERMINAL, ms_(100), limit).await?;
    eprintln!(
        "bench: idle jobs ended: {}",
        describe(&statuses(&ctx.pool, &ids).await?)
    );
    Ok(Row {
        jobs: n,
        window,
        tx_per_s,
        cpu,
        cancel,
        missing,
    })
}

fn ms_(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// `xact_commit + xact_rollback` of the database the pool is connected to.
async fn xacts(ctx: &Ctx) -> Result<i64> {
    sqlx::query_scalar(
        "SELECT (xact_commit + xact_rollback)::bigint FROM pg_stat_database \
         WHERE datname = current_database()",
    )
    .fetch_one(&ctx.pool)
    .await
    .context("reading pg_stat_database")
}

/// The wall clock, as dockerd's events and Postgres's timestamps count it.
pub(super) fn now_unix_nanos() -> i64 {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

/// Cancels `ids` one after another, each after the previous one's SIGTERM, and returns the
/// latencies and how many SIGTERMs never came.
async fn cancel_each(ctx: &Ctx, ids: &[Uuid]) -> Result<(Vec<Duration>, usize)> {
    let (tx, mut rx) = mpsc::unbounded_channel();
    // `since` makes dockerd replay what happens before the subscription is in place.
    let mut events = ctx.docker.container_events(now_unix_nanos(), &["kill"]);
    let forward = tokio::spawn(async move {
        while let Some(ev) = events.next().await {
            if tx.send(ev).is_err() {
                return;
            }
        }
    });
    // SIGTERMs that arrived while waiting for another job's.
    let mut early: HashMap<Uuid, i64> = HashMap::new();
    let mut latencies = Vec::with_capacity(ids.len());
    let mut missing = 0;
    for &id in ids {
        let asked = now_unix_nanos();
        ctx.api.cancel(id).await?;
        let deadline = tokio::time::Instant::now() + SIGTERM_LIMIT;
        let mut at = early.remove(&id);
        while at.is_none() {
            let ev: ContainerEvent = match tokio::time::timeout_at(deadline, rx.recv()).await {
                Ok(Some(ev)) => ev.context("dockerd's event stream")?,
                Ok(None) => anyhow::bail!("dockerd's event stream ended"),
                Err(_) => break,
            };
            match ev.job_id {
                Some(job) if ev.signal == Some(15) && job == id => at = Some(ev.at_unix_nanos),
                Some(job) if ev.signal == Some(15) => {
                    early.entry(job).or_insert(ev.at_unix_nanos);
                }
                _ => {}
            }
        }
        match at {
            Some(at) => latencies.push(Duration::from_nanos((at - asked).max(0) as u64)),
            None => missing += 1,
        }
    }
    forward.abort();
    Ok((latencies, missing))
}
