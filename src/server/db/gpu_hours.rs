//! GPU-hours charged to users: what fair share decays and budgets sum (see
//! `migrations/20261207000002_gpu_hours.sql`).
//!
//! A job is charged while it runs the share of each card it holds (its reservation over the card's
//! memory, or 1 for an exclusive card) × time. Ended runs are folded into per-user UTC-day buckets
//! by a trigger when the run ends; a running job's part so far is read here from the live ledger,
//! so a figure is current at every call, not recomputed every few minutes.

use chrono::{DateTime, Utc};
use std::collections::HashMap;
use uuid::Uuid;

/// Running jobs' card share and start: `(owner, share, started_at)`.
const RUNNING: &str = "\
    SELECT j.owner_id, job_card_share(j.id, j.started_at, $1) AS share, j.started_at \
    FROM jobs j \
    WHERE j.started_at IS NOT NULL AND j.finished_at IS NULL \
      AND j.status IN ('starting', 'running')";

/// GPU-hours charged to each user from `from` (a UTC midnight: budgets' periods start at one) to
/// `now`: ended runs from the day buckets, running jobs up to `now`. Users with none are absent.
/// `db`: a pool, or the connection of a transaction (the admission pass reads it in its own).
pub async fn since<'e>(
    db: impl sqlx::PgExecutor<'e>,
    from: DateTime<Utc>,
    now: DateTime<Utc>,
) -> sqlx::Result<HashMap<Uuid, f64>> {
    let rows: Vec<(Uuid, f64)> = sqlx::query_as(&format!(
        "SELECT user_id, sum(h)::float8 FROM ( \
           SELECT user_id, gpu_hours AS h FROM gpu_hours_daily \
           WHERE day >= ($2 AT TIME ZONE 'UTC')::date \
           UNION ALL \
           SELECT r.owner_id, r.share * extract(epoch FROM $1 - greatest(r.started_at, $2)) / 3600.0 \
           FROM ({RUNNING}) r WHERE r.share > 0 AND $1 > greatest(r.started_at, $2) \
         ) u GROUP BY user_id"
    ))
    .bind(now)
    .bind(from)
    .fetch_all(db)
    .await?;
    Ok(rows.into_iter().collect())
}

/// Each user's GPU-hours decayed to `now` with a half-life of `half_life_h` hours: an hour used
/// one half-life ago counts half. Ended runs count from the moment their day's use is centred on;
/// running jobs exactly (the integral of the decay over their run so far). Users with none are
/// absent.
pub async fn decayed(
    db: impl sqlx::PgExecutor<'_>,
    now: DateTime<Utc>,
    half_life_h: f64,
) -> sqlx::Result<HashMap<Uuid, f64>> {
    // Past 40 half-lives a GPU-hour counts less than 1e-12: those days are not read. The exponent
    // is floored so that Postgres' power() never underflows (an error, not a zero).
    let rows: Vec<(Uuid, f64)> = sqlx::query_as(&format!(
        "SELECT user_id, sum(v)::float8 FROM ( \
           SELECT user_id, \
                  gpu_hours * power(2::float8, greatest(-1000::float8, \
                      -(extract(epoch FROM $1) - hour_epoch / gpu_hours) / ($2 * 3600))) AS v \
           FROM gpu_hours_daily \
           WHERE gpu_hours > 0 \
             AND day >= ($1 AT TIME ZONE 'UTC')::date - least(36500, ceil($2 * 40 / 24))::int \
           UNION ALL \
           SELECT r.owner_id, \
                  r.share * $2 / ln(2) * (1 - power(2::float8, greatest(-1000::float8, \
                      -extract(epoch FROM $1 - r.started_at) / ($2 * 3600)))) \
           FROM ({RUNNING}) r WHERE r.share > 0 AND $1 > r.started_at \
         ) u GROUP BY user_id"
    ))
    .bind(now)
    .bind(half_life_h)
    .fetch_all(db)
    .await?;
    Ok(rows.into_iter().collect())
}
