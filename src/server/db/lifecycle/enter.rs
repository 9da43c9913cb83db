//! A job's creation: the one place a job gets its first status.

use super::{permit, Actor, Move};
use crate::model::JobStatus::{self, *};
use serde_json::Value;
use sqlx::PgExecutor;
use uuid::Uuid;

pub(super) const ENTER: Move = Move {
    name: "a submission",
    from: &[],
    to: &[Queued, Rejected],
};

/// What to insert for a new job.
#[derive(Debug, Clone)]
pub struct NewJob<'a> {
    /// Owner.
    pub owner_id: Uuid,
    /// Display name.
    pub name: &'a str,
    /// Raw spec as JSON.
    pub spec: Value,
    /// Image.
    pub image: &'a str,
    /// argv.
    pub command: &'a [String],
    /// Cards.
    pub gpu_count: i32,
    /// Workload type.
    pub workload: Option<&'a str>,
    /// Explicit MiB per card.
    pub min_vram_mib: Option<i64>,
    /// Whole cards.
    pub exclusive: bool,
    /// Priority.
    pub priority: i32,
    /// Run-time limit.
    pub timeout_s: i64,
    /// `queued` or `rejected`.
    pub status: JobStatus,
    /// Why it was rejected.
    pub status_reason: Option<&'a str>,
}

/// Inserts a job submitted by its owner, queued or rejected; returns its id.
pub async fn enter(db: impl PgExecutor<'_>, j: &NewJob<'_>) -> sqlx::Result<Uuid> {
    permit(&ENTER, Actor::Owner)?;
    if !ENTER.to.contains(&j.status) {
        return Err(sqlx::Error::InvalidArgument(format!(
            "the job lifecycle refuses a new job in `{}`: a job enters queued or rejected",
            j.status
        )));
    }
    sqlx::query_scalar(
        "INSERT INTO jobs (owner_id, name, spec, image, command, gpu_count, workload, min_vram_mib, \
           exclusive, priority, timeout_s, status, status_reason, finished_at, released_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, \
           CASE WHEN $12 = 'rejected' THEN now() END, CASE WHEN $12 = 'rejected' THEN now() END) \
         RETURNING id",
    )
    .bind(j.owner_id)
    .bind(j.name)
    .bind(&j.spec)
    .bind(j.image)
    .bind(j.command)
    .bind(j.gpu_count)
    .bind(j.workload)
    .bind(j.min_vram_mib)
    .bind(j.exclusive)
    .bind(j.priority)
    .bind(j.timeout_s)
    .bind(j.status)
    .bind(j.status_reason)
    .fetch_one(db)
    .await
}

/// Many queued jobs of one owner, in one statement: each row's own shape, the rest shared.
#[derive(Debug, Clone)]
pub struct BatchEntry<'a> {
    /// Owner.
    pub owner_id: Uuid,
    /// Names are `<prefix>-<n>`, n counting from 1 in row order.
    pub name_prefix: &'a str,
    /// Image of every job.
    pub image: &'a str,
    /// Run-time limit of every job.
    pub timeout_s: i64,
    /// The jobs, in submit order.
    pub rows: &'a [BatchRow],
}

/// One job of a [`BatchEntry`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchRow {
    /// Cards.
    pub gpu_count: i32,
    /// Workload type, or None with `min_vram_mib`.
    pub workload: Option<&'static str>,
    /// Explicit MiB per card.
    pub min_vram_mib: Option<i64>,
    /// Whole cards.
    pub exclusive: bool,
    /// Priority.
    pub priority: i32,
    /// How long ago it was submitted, in milliseconds (0: now); a replayed queue keeps its ages.
    pub waited_ms: i64,
}

/// Inserts a batch of queued jobs in one statement, in row order (the queue order among equal
/// priorities); with an empty command and spec, for queues that are planned but never launched
/// (the admission benchmark's). Returns how many were inserted.
pub async fn enter_batch(db: impl PgExecutor<'_>, b: &BatchEntry<'_>) -> sqlx::Result<u64> {
    permit(&ENTER, Actor::Owner)?;
    let col = |f: fn(&BatchRow) -> i64| b.rows.iter().map(f).collect::<Vec<i64>>();
    let gpu: Vec<i32> = b.rows.iter().map(|r| r.gpu_count).collect();
    let workload: Vec<Option<&str>> = b.rows.iter().map(|r| r.workload).collect();
    let min_vram: Vec<Option<i64>> = b.rows.iter().map(|r| r.min_vram_mib).collect();
    let exclusive: Vec<bool> = b.rows.iter().map(|r| r.exclusive).collect();
    let priority: Vec<i32> = b.rows.iter().map(|r| r.priority).collect();
    let r = sqlx::query(
        "INSERT INTO jobs (owner_id, name, spec, image, command, gpu_count, workload, \
           min_vram_mib, exclusive, priority, timeout_s, status, created_at) \
         SELECT $1, $2 || '-' || t.n::text, '{}'::jsonb, $3, ARRAY[]::text[], t.g, t.w, t.m, \
           t.x, t.p, $4, 'queued', now() - t.age * interval '1 millisecond' \
         FROM unnest($5::int[], $6::text[], $7::bigint[], $8::bool[], $9::int[], $10::bigint[]) \
           WITH ORDINALITY AS t(g, w, m, x, p, age, n) ORDER BY t.n",
    )
    .bind(b.owner_id)
    .bind(b.name_prefix)
    .bind(b.image)
    .bind(b.timeout_s)
    .bind(&gpu)
    .bind(&workload)
    .bind(&min_vram)
    .bind(&exclusive)
    .bind(&priority)
    .bind(col(|r| r.waited_ms))
    .execute(db)
    .await?;
    Ok(r.rows_affected())
}
