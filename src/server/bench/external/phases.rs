//! Where gpuq's start time goes, seen from outside: when the bench sent the submit, the job's own
//! trail (`job_events.at`, Postgres's `clock_timestamp()`; `start_issued` also records when the
//! runner sent `docker start`) and dockerd's `create` and `start` events, all on this machine's
//! one clock.

use super::fence::ms;
use super::Ctx;
use crate::server::bench::percentile;
use crate::server::runtime::docker::ContainerEvent;
use crate::server::runtime::Docker;
use anyhow::{bail, Context, Result};
use futures_util::StreamExt;
use std::collections::HashMap;
use std::io::Write;
use std::time::Duration;
use tokio::sync::mpsc;
use uuid::Uuid;

/// The steps from submit to running, each ending where the next begins.
const STEPS: [&str; 8] = [
    "submit sent → stored (REST, checks, insert)",
    "stored → admitted (wake, admission pass)",
    "admitted → claimed (notify, runner's claim)",
    "claimed → dockerd created (policy, grants, uid, image, create)",
    "dockerd created → fence verified (inspect, verify, event)",
    "fence verified → start sent (container recorded)",
    "start sent → dockerd started",
    "dockerd started → running (start answered, events, status)",
];

/// One job's start.
pub(super) struct JobTimes {
    /// Submit sent → `started` event.
    pub total: Duration,
    /// Each of [`STEPS`], when both of its ends were seen.
    steps: [Option<Duration>; 8],
}

/// dockerd's `create` and `start` events of gpuq containers, heard from [`Watch::start`] on.
pub(super) struct Watch {
    rx: mpsc::UnboundedReceiver<Result<ContainerEvent>>,
    forward: tokio::task::JoinHandle<()>,
}

/// Per job: when dockerd created and started its container (Unix nanoseconds).
pub(super) type Seen = HashMap<Uuid, (Option<i64>, Option<i64>)>;

impl Watch {
    pub fn start(docker: &Docker) -> Watch {
        let (tx, rx) = mpsc::unbounded_channel();
        let since = super::idle::now_unix_nanos();
        let mut events = docker.container_events(since, &["create", "start"]);
        let forward = tokio::spawn(async move {
            while let Some(ev) = events.next().await {
                if tx.send(ev.context("dockerd's event stream")).is_err() {
                    return;
                }
            }
        });
        Watch { rx, forward }
    }

    /// What was heard of `jobs`, waiting up to 5 s for the start of each.
    pub async fn stop(mut self, jobs: &[Uuid]) -> Result<Seen> {
        let mut seen = Seen::new();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        let all_started = |seen: &Seen| {
            jobs.iter()
                .all(|j| seen.get(j).is_some_and(|s| s.1.is_some()))
        };
        while !all_started(&seen) {
            let ev = match tokio::time::timeout_at(deadline, self.rx.recv()).await {
                Ok(Some(ev)) => ev?,
                Ok(None) | Err(_) => break,
            };
            let Some(job) = ev.job_id else { continue };
            let entry = seen.entry(job).or_default();
            match ev.action.as_str() {
                "create" => entry.0 = Some(ev.at_unix_nanos),
                "start" => entry.1 = Some(ev.at_unix_nanos),
                _ => {}
            }
        }
        self.forward.abort();
        Ok(seen)
    }
}

/// Each job's steps, from its submit time (`jobs`: id and Unix nanoseconds), its trail and `seen`.
pub(super) async fn of(ctx: &Ctx, seen: &Seen, jobs: &[(Uuid, i64)]) -> Result<Vec<JobTimes>> {
    let ids: Vec<Uuid> = jobs.iter().map(|j| j.0).collect();
    let kinds = [
        "submitted",
        "admitted",
        "starting",
        "fence_verified",
        "start_issued",
        "started",
    ];
    let rows: Vec<(Uuid, String, i64, Option<i64>)> = sqlx::query_as(
        "SELECT job_id, kind, (extract(epoch FROM at) * 1e6)::bigint, \
                (extract(epoch FROM (detail->>'at')::timestamptz) * 1e6)::bigint \
         FROM job_events WHERE job_id = ANY($1) AND kind = ANY($2)",
    )
    .bind(&ids)
    .bind(&kinds[..])
    .fetch_all(&ctx.pool)
    .await?;
    let mut trail: HashMap<(Uuid, &str), (i64, Option<i64>)> = HashMap::new();
    for (job, kind, at, detail_at) in &rows {
        trail.insert((*job, kind.as_str()), (*at, *detail_at));
    }
    let mut out = Vec::with_capacity(jobs.len());
    for &(job, sent) in jobs {
        let at = |kind: &str| trail.get(&(job, kind)).map(|t| t.0);
        let (created, started) = seen.get(&job).copied().unwrap_or_default();
        let us = |nanos: Option<i64>| nanos.map(|n| n / 1000);
        let points = [
            Some(sent / 1000),
            at("submitted"),
            at("admitted"),
            at("starting"),
            us(created),
            at("fence_verified"),
            trail.get(&(job, "start_issued")).and_then(|t| t.1),
            us(started),
            at("started"),
        ];
        let Some(end) = points[8] else {
            bail!("job {job} has no `started` event");
        };
        let mut steps = [None; 8];
        for (i, step) in steps.iter_mut().enumerate() {
            if let (Some(a), Some(b)) = (points[i], points[i + 1]) {
                *step = Some(Duration::from_micros((b - a).max(0) as u64));
            }
        }
        out.push(JobTimes {
            total: Duration::from_micros((end - sent / 1000).max(0) as u64),
            steps,
        });
    }
    Ok(out)
}

/// The p50 and p90 of each step.
pub(super) fn print(out: &mut impl Write, jobs: &[JobTimes]) -> Result<()> {
    let title = format!(
        "gpuq's submit → running, step by step ({} jobs)",
        jobs.len()
    );
    writeln!(out, "  {title:<66} {:>10} {:>10}", "p50", "p90")?;
    let mut sum = Duration::ZERO;
    for (i, name) in STEPS.iter().enumerate() {
        let mut v: Vec<Duration> = jobs.iter().filter_map(|j| j.steps[i]).collect();
        v.sort_unstable();
        let (p50, p90) = if v.is_empty() {
            ("-".to_string(), "-".to_string())
        } else {
            sum += percentile(&v, 50.0);
            (ms(percentile(&v, 50.0)), ms(percentile(&v, 90.0)))
        };
        writeln!(out, "    {name:<64} {p50:>10} {p90:>10}")?;
    }
    writeln!(out, "    {:<64} {:>10}\n", "(sum of the p50s)", ms(sum))?;
    Ok(())
}
