//! The usage report: four read-only aggregations over one range, each done in Postgres so a month
//! of samples costs one index range scan and at most a few hundred points per card travel.

use super::{charts, sampling, Range, Sampling};
use crate::model::{
    gpu_id, AppError, CardPoint, CardSeries, ReclaimedTotal, UsageReport, UsageTotal, UsageView,
    WaitBucket, WaitStats, CUSTOM_VRAM,
};
use crate::server::error::OrInternal;
use chrono::{DateTime, Utc};
use sqlx::{FromRow, PgPool};
use std::collections::HashMap;
use uuid::Uuid;

/// Most points per card series; wider ranges average over longer buckets.
pub const MAX_POINTS: i64 = 500;

/// Upper bounds (seconds, exclusive) and labels of the wait histogram; a last bucket takes the rest.
pub const WAIT_BUCKETS: [(i64, &str); 5] = [
    (1, "< 1 s"),
    (10, "< 10 s"),
    (60, "< 1 min"),
    (600, "< 10 min"),
    (3600, "< 1 h"),
];

/// The report for the range the caller wrote (see [`Range::parse`]), checked against the recorded
/// retention.
pub async fn report(
    pool: &PgPool,
    from: &str,
    to: &str,
    now: DateTime<Utc>,
) -> Result<UsageReport, AppError> {
    let sampling = sampling(pool)
        .await
        .or_internal("reading the sampling settings")?;
    let range = Range::parse(from, to, now, sampling.retention_chrono())?;
    load(pool, range, now, &sampling).await
}

/// The report and its charts, for the usage page.
pub async fn view(
    pool: &PgPool,
    from: &str,
    to: &str,
    now: DateTime<Utc>,
) -> Result<UsageView, AppError> {
    let report = report(pool, from, to, now).await?;
    let charts = charts::build(&report);
    Ok(UsageView { report, charts })
}

/// The report for a checked range; `now` ends the run of jobs still running.
pub async fn load(
    pool: &PgPool,
    range: Range,
    now: DateTime<Utc>,
    sampling: &Sampling,
) -> Result<UsageReport, AppError> {
    let every_s = sampling.every.as_secs().max(1) as i64;
    let bucket_s = ((range.seconds() + MAX_POINTS - 1) / MAX_POINTS).max(every_s);
    let cards = cards(pool, range, bucket_s)
        .await
        .or_internal("reading card samples")?;
    let wait = waits(pool, range)
        .await
        .or_internal("reading queue waits")?;
    let (by_user, by_workload) = totals(pool, range, now)
        .await
        .or_internal("adding up run time")?;
    let reclaimed_by_user = crate::server::db::idle::reclaimed(pool, range.from, range.to)
        .await
        .or_internal("adding up GPU-hours reclaimed from idle jobs")?
        .into_iter()
        .map(|(key, jobs, gpu_hours)| ReclaimedTotal {
            key,
            jobs,
            gpu_hours,
        })
        .collect();
    Ok(UsageReport {
        from: range.from,
        to: range.to,
        bucket_s,
        retention_h: (sampling.retention.as_secs() / 3600) as i64,
        cards,
        wait,
        by_user,
        by_workload,
        reclaimed_by_user,
    })
}

#[derive(FromRow)]
struct Summary {
    gpu_uuid: Uuid,
    node: String,
    idx: i32,
    model: String,
    total_mib: i64,
    samples: i64,
    avg_reserved: i64,
    peak_reserved: i64,
    avg_used: Option<i64>,
    peak_used: Option<i64>,
    avg_external: Option<i64>,
    avg_busy: Option<i64>,
}

#[derive(FromRow)]
struct Point {
    gpu_uuid: Uuid,
    at: DateTime<Utc>,
    reserved: i64,
    used: Option<i64>,
    external: Option<i64>,
    busy: Option<i64>,
}

async fn cards(pool: &PgPool, range: Range, bucket_s: i64) -> sqlx::Result<Vec<CardSeries>> {
    let summaries: Vec<Summary> = sqlx::query_as(
        "SELECT s.gpu_uuid, g.node, g.idx, g.model, g.total_mib, count(*) AS samples, \
           round(avg(s.reserved_mib))::bigint AS avg_reserved, max(s.reserved_mib) AS peak_reserved, \
           round(avg(s.used_mib))::bigint AS avg_used, max(s.used_mib) AS peak_used, \
           round(avg(s.external_mib))::bigint AS avg_external, \
           round(avg(s.utilization_pct))::bigint AS avg_busy \
         FROM gpu_samples s JOIN gpus g ON g.uuid = s.gpu_uuid \
         WHERE s.at >= $1 AND s.at < $2 \
         GROUP BY s.gpu_uuid, g.node, g.idx, g.model, g.total_mib \
         ORDER BY g.node, g.idx, s.gpu_uuid",
    )
    .bind(range.from)
    .bind(range.to)
    .fetch_all(pool)
    .await?;
    // Buckets are aligned to the epoch, not to `from`, so points stay put as the range slides.
    let points: Vec<Point> = sqlx::query_as(
        "SELECT gpu_uuid, to_timestamp(floor(extract(epoch FROM at) / $3) * $3) AS at, \
           round(avg(reserved_mib))::bigint AS reserved, round(avg(used_mib))::bigint AS used, \
           round(avg(external_mib))::bigint AS external, \
           round(avg(utilization_pct))::bigint AS busy \
         FROM gpu_samples WHERE at >= $1 AND at < $2 \
         GROUP BY 1, 2 ORDER BY 1, 2",
    )
    .bind(range.from)
    .bind(range.to)
    .bind(bucket_s)
    .fetch_all(pool)
    .await?;
    let mut by_card: HashMap<Uuid, Vec<CardPoint>> = HashMap::new();
    for p in points {
        by_card.entry(p.gpu_uuid).or_default().push(CardPoint {
            at: p.at,
            reserved_mib: p.reserved,
            used_mib: p.used,
            external_mib: p.external,
            utilization_pct: p.busy,
        });
    }
    Ok(summaries
        .into_iter()
        .map(|s| CardSeries {
            uuid: gpu_id(&s.gpu_uuid),
            points: by_card.remove(&s.gpu_uuid).unwrap_or_default(),
            node: s.node,
            index: s.idx.max(0) as u32,
            model: s.model,
            total_mib: s.total_mib,
            samples: s.samples,
            avg_reserved_mib: s.avg_reserved,
            peak_reserved_mib: s.peak_reserved,
            avg_used_mib: s.avg_used,
            peak_used_mib: s.peak_used,
            avg_external_mib: s.avg_external,
            avg_utilization_pct: s.avg_busy,
        })
        .collect())
}

const WAITS: &str = "SELECT extract(epoch FROM admitted_at - created_at)::float8 AS s FROM jobs \
                     WHERE admitted_at >= $1 AND admitted_at < $2";

async fn waits(pool: &PgPool, range: Range) -> sqlx::Result<WaitStats> {
    let (jobs, p50_s, p95_s, max_s): (i64, Option<f64>, Option<f64>, Option<f64>) =
        sqlx::query_as(&format!(
            "SELECT count(*), percentile_cont(0.5) WITHIN GROUP (ORDER BY s), \
               percentile_cont(0.95) WITHIN GROUP (ORDER BY s), max(s) FROM ({WAITS}) w"
        ))
        .bind(range.from)
        .bind(range.to)
        .fetch_one(pool)
        .await?;
    let bounds: Vec<f64> = WAIT_BUCKETS.iter().map(|(b, _)| *b as f64).collect();
    // width_bucket: 0 below the first bound, i for [bound i-1, bound i), len for the rest.
    let counts: Vec<(i32, i64)> = sqlx::query_as(&format!(
        "SELECT width_bucket(s, $3::float8[]), count(*) FROM ({WAITS}) w GROUP BY 1"
    ))
    .bind(range.from)
    .bind(range.to)
    .bind(&bounds)
    .fetch_all(pool)
    .await?;
    let count = |i: usize| {
        counts
            .iter()
            .find(|(b, _)| *b as usize == i)
            .map_or(0, |(_, n)| *n)
    };
    let mut buckets: Vec<WaitBucket> = WAIT_BUCKETS
        .iter()
        .enumerate()
        .map(|(i, (below, label))| WaitBucket {
            label: (*label).to_owned(),
            below_s: Some(*below),
            jobs: count(i),
        })
        .collect();
    buckets.push(WaitBucket {
        label: "≥ 1 h".into(),
        below_s: None,
        jobs: count(WAIT_BUCKETS.len()),
    });
    Ok(WaitStats {
        jobs,
        p50_s,
        p95_s,
        max_s,
        buckets,
    })
}

/// Every job's run (start to finish, or to `now` while it runs) clipped to the range, with its
/// owner, workload, card count and total reserved GiB. Shared with the per-job CSV, so the file
/// adds up to the report.
pub(super) const RUNS: &str = "SELECT j.id, j.name, u.username AS owner, \
       coalesce(j.workload, $4) AS workload, j.gpu_count, j.status, \
       j.created_at, j.admitted_at, j.started_at, j.finished_at, \
       (SELECT coalesce(sum(r.vram_mib), 0) FROM reservations r WHERE r.job_id = j.id)::bigint \
         AS reserved_mib, \
       extract(epoch FROM least(coalesce(j.finished_at, $3), $2) - greatest(j.started_at, $1))::float8 \
         / 3600 AS hours \
     FROM jobs j JOIN users u ON u.id = j.owner_id \
     WHERE j.started_at IS NOT NULL AND j.started_at < $2 AND coalesce(j.finished_at, $3) > $1";

#[derive(FromRow)]
struct Total {
    by_user: bool,
    key: String,
    jobs: i64,
    gpu_hours: f64,
    vram_gib_hours: f64,
}

async fn totals(
    pool: &PgPool,
    range: Range,
    now: DateTime<Utc>,
) -> sqlx::Result<(Vec<UsageTotal>, Vec<UsageTotal>)> {
    let rows: Vec<Total> = sqlx::query_as(&format!(
        "SELECT GROUPING(owner) = 0 AS by_user, coalesce(owner, workload) AS key, count(*) AS jobs, \
           coalesce(sum(hours * gpu_count), 0) AS gpu_hours, \
           coalesce(sum(hours * reserved_mib / 1024.0), 0)::float8 AS vram_gib_hours \
         FROM ({RUNS}) runs GROUP BY GROUPING SETS ((owner), (workload)) \
         ORDER BY 4 DESC, 5 DESC, 2"
    ))
    .bind(range.from)
    .bind(range.to)
    .bind(now)
    .bind(CUSTOM_VRAM)
    .fetch_all(pool)
    .await?;
    let (users, workloads): (Vec<Total>, Vec<Total>) = rows.into_iter().partition(|t| t.by_user);
    let view = |t: Total| UsageTotal {
        key: t.key,
        jobs: t.jobs,
        gpu_hours: t.gpu_hours,
        vram_gib_hours: t.vram_gib_hours,
    };
    Ok((
        users.into_iter().map(view).collect(),
        workloads.into_iter().map(view).collect(),
    ))
}
