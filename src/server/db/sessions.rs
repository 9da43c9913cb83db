//! Storage of interactive sessions (`server::sessions`): where the proxy reaches a running
//! session, the one-time codes and session-origin cookies (only their SHA-256), the traffic and
//! idle marks the idle watcher reads.

use chrono::{DateTime, Utc};
use sqlx::{PgExecutor, PgPool};
use uuid::Uuid;

/// The statuses in which a session job counts against `max_sessions_per_user`.
const LIVE: &str = "('queued', 'admitted', 'starting', 'running')";

/// True for a row of `jobs` that is a session: its spec has a `port` (false, not NULL, without).
pub(crate) const IS_SESSION: &str = "coalesce(spec -> 'port' <> 'null'::jsonb, false)";

/// `owner`'s sessions (jobs with a `port`) that wait or run, in the caller's transaction.
pub async fn count_live(db: impl PgExecutor<'_>, owner: Uuid) -> sqlx::Result<i64> {
    sqlx::query_scalar(&format!(
        "SELECT count(*) FROM jobs WHERE owner_id = $1 AND status IN {LIVE} AND {IS_SESSION}"
    ))
    .bind(owner)
    .fetch_one(db)
    .await
}

/// Records where the proxy reaches a started session (`ip:port`).
pub async fn set_addr(pool: &PgPool, job: Uuid, addr: &str) -> sqlx::Result<()> {
    sqlx::query(
        "UPDATE jobs SET session_addr = $2, session_active_at = coalesce(session_active_at, now()) \
         WHERE id = $1",
    )
    .bind(job)
    .bind(addr)
    .execute(pool)
    .await?;
    Ok(())
}

/// Those of `jobs` that run as sessions the proxy can reach (their address recorded).
pub async fn reachable(pool: &PgPool, jobs: &[Uuid]) -> sqlx::Result<Vec<Uuid>> {
    sqlx::query_scalar(
        "SELECT id FROM jobs WHERE id = ANY($1) AND status = 'running' \
           AND session_addr IS NOT NULL",
    )
    .bind(jobs)
    .fetch_all(pool)
    .await
}

/// What the session origin needs of a job to let one request through.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Target {
    /// Its owner.
    pub owner_id: Uuid,
    /// Where the container serves (`None` until the runner recorded it).
    pub session_addr: Option<String>,
    /// Whether it runs now.
    pub running: bool,
    /// Its deadline (a session cookie expires with it).
    pub deadline_at: Option<DateTime<Utc>>,
}

/// Job `id` as a session target; `None` when it does not exist or is no session.
pub async fn target(pool: &PgPool, id: Uuid) -> sqlx::Result<Option<Target>> {
    sqlx::query_as(&format!(
        "SELECT owner_id, session_addr, status = 'running' AS running, deadline_at \
         FROM jobs WHERE id = $1 AND {IS_SESSION}"
    ))
    .bind(id)
    .fetch_optional(pool)
    .await
}

/// Stores a one-time code (`kind` `code`) or a session cookie (`cookie`) for `user` on `job`.
pub async fn grant(
    pool: &PgPool,
    digest: &[u8; 32],
    kind: &str,
    job: Uuid,
    user: Uuid,
    expires_at: DateTime<Utc>,
) -> sqlx::Result<()> {
    sqlx::query(
        "INSERT INTO session_grants (digest, kind, job_id, user_id, expires_at) \
         VALUES ($1, $2, $3, $4, $5)",
    )
    .bind(&digest[..])
    .bind(kind)
    .bind(job)
    .bind(user)
    .bind(expires_at)
    .execute(pool)
    .await?;
    Ok(())
}

/// Uses up a one-time code for `job`: it is deleted whatever happens next, so a second use finds
/// nothing. Returns the user it was issued to, if it was valid.
pub async fn take_code(pool: &PgPool, digest: &[u8; 32], job: Uuid) -> sqlx::Result<Option<Uuid>> {
    let taken: Option<(Uuid, Uuid, bool)> = sqlx::query_as(
        "DELETE FROM session_grants WHERE digest = $1 AND kind = 'code' \
         RETURNING job_id, user_id, expires_at > now()",
    )
    .bind(&digest[..])
    .fetch_optional(pool)
    .await?;
    Ok(taken.and_then(|(j, u, fresh)| (j == job && fresh).then_some(u)))
}

/// Who a session cookie lets in, checked on every request: the cookie is for this job and has not
/// expired, the job runs, and its user is enabled. Returns the user and their role.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct CookieHolder {
    /// The user the cookie was issued to.
    pub user_id: Uuid,
    /// Their role now.
    pub role: String,
    /// The job's owner.
    pub owner_id: Uuid,
    /// Where the container serves.
    pub session_addr: Option<String>,
}

/// The holder of a cookie for `job`, if it still opens it (see [`CookieHolder`]).
pub async fn cookie_holder(
    pool: &PgPool,
    digest: &[u8; 32],
    job: Uuid,
) -> sqlx::Result<Option<CookieHolder>> {
    sqlx::query_as(
        "SELECT g.user_id, u.role, j.owner_id, j.session_addr FROM session_grants g \
           JOIN jobs j ON j.id = g.job_id JOIN users u ON u.id = g.user_id \
         WHERE g.digest = $1 AND g.kind = 'cookie' AND g.job_id = $2 AND g.expires_at > now() \
           AND j.status = 'running' AND u.disabled_at IS NULL",
    )
    .bind(&digest[..])
    .bind(job)
    .fetch_optional(pool)
    .await
}

/// Deletes codes and cookies that expired, and those of jobs that ended.
pub async fn sweep(pool: &PgPool) -> sqlx::Result<u64> {
    let r = sqlx::query(&format!(
        "DELETE FROM session_grants g WHERE g.expires_at <= now() \
           OR EXISTS (SELECT 1 FROM jobs j WHERE j.id = g.job_id AND j.status NOT IN {LIVE})"
    ))
    .execute(pool)
    .await?;
    Ok(r.rows_affected())
}

/// Marks traffic on these sessions now (the proxy's coarse flush).
pub async fn touch(db: impl PgExecutor<'_>, jobs: &[Uuid], at: DateTime<Utc>) -> sqlx::Result<()> {
    sqlx::query(
        "UPDATE jobs SET session_active_at = greatest(session_active_at, $2), \
           session_warned_at = CASE WHEN session_active_at IS NULL OR $2 > session_active_at \
                                    THEN NULL ELSE session_warned_at END \
         WHERE id = ANY($1)",
    )
    .bind(jobs)
    .bind(at)
    .execute(db)
    .await?;
    Ok(())
}

/// A running session as the idle watcher sees it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Running {
    /// The job.
    pub id: Uuid,
    /// Its last HTTP or WebSocket traffic (its start, before any).
    pub active_at: DateTime<Utc>,
    /// When its page was warned, since that traffic.
    pub warned_at: Option<DateTime<Utc>>,
    /// Whether one of the cards it holds alone was busy (at or above `busy_pct` utilisation)
    /// since `active_at`.
    pub gpu_busy: bool,
}

/// The running sessions with no stop asked for yet, and whether their cards were busy since their
/// last traffic.
///
/// GPU activity is read from the usage sampler's card-level utilisation (`gpu_samples`) on the
/// session's cards: on a shared card a neighbour's work counts too, which can only keep a session
/// alive, never stop it early.
pub async fn running(pool: &PgPool, busy_pct: i32) -> sqlx::Result<Vec<Running>> {
    sqlx::query_as(&format!(
        "SELECT j.id, coalesce(j.session_active_at, j.started_at, now()) AS active_at, \
                j.session_warned_at AS warned_at, \
                EXISTS (SELECT 1 FROM reservations r JOIN gpu_samples s ON s.gpu_uuid = r.gpu_uuid \
                        WHERE r.job_id = j.id AND r.released_at IS NULL \
                          AND s.at > coalesce(j.session_active_at, j.started_at, now()) \
                          AND s.utilization_pct >= $1 \
                          AND NOT EXISTS (SELECT 1 FROM reservations o \
                                          WHERE o.gpu_uuid = r.gpu_uuid \
                                            AND o.released_at IS NULL AND o.job_id <> j.id)) \
                  AS gpu_busy \
         FROM jobs j WHERE j.status = 'running' AND j.cancel_requested_at IS NULL \
           AND {IS_SESSION}"
    ))
    .bind(busy_pct)
    .fetch_all(pool)
    .await
}

/// Notes that a session's page was warned (once per idle stretch).
pub async fn set_warned(db: impl PgExecutor<'_>, job: Uuid) -> sqlx::Result<bool> {
    let r = sqlx::query(
        "UPDATE jobs SET session_warned_at = now() WHERE id = $1 AND session_warned_at IS NULL",
    )
    .bind(job)
    .execute(db)
    .await?;
    Ok(r.rows_affected() == 1)
}
