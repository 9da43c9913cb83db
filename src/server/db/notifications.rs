//! Notification settings, webhooks and the outbox (`notification_*`). The outbox rows themselves
//! are written by the trigger on `jobs.status` (migration `…_notifications.sql`), in the
//! transaction of the change; this module reads, claims and marks them.

use crate::model::{DeliveryView, NotifyEvent, WebhookFormat};
use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::{PgExecutor, PgPool};
use std::time::Duration;
use uuid::Uuid;

/// A user's settings as stored.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct SettingsRow {
    /// The address mails go to.
    pub email: Option<String>,
    /// What the user hears about.
    pub events: Vec<String>,
    /// `started_after_wait`'s threshold.
    pub wait_minutes: i32,
}

/// One webhook as stored (with its secret: never a wire type).
#[derive(Clone, sqlx::FromRow)]
pub struct WebhookRow {
    /// Its URL.
    pub url: String,
    /// Its format.
    pub format: WebhookFormat,
    /// Its HMAC key.
    pub secret: Option<String>,
}

/// A user's settings and webhooks; `None` when they never saved any.
pub async fn settings_of(
    pool: &PgPool,
    user: Uuid,
) -> sqlx::Result<Option<(SettingsRow, Vec<WebhookRow>)>> {
    let row: Option<SettingsRow> = sqlx::query_as(
        "SELECT email, events, wait_minutes FROM notification_settings WHERE user_id = $1",
    )
    .bind(user)
    .fetch_optional(pool)
    .await?;
    let Some(row) = row else { return Ok(None) };
    let hooks = sqlx::query_as(
        "SELECT url, format, secret FROM notification_webhooks WHERE user_id = $1 ORDER BY position",
    )
    .bind(user)
    .fetch_all(pool)
    .await?;
    Ok(Some((row, hooks)))
}

/// Replaces a user's settings and webhooks in one transaction.
pub async fn save(
    pool: &PgPool,
    user: Uuid,
    settings: &SettingsRow,
    hooks: &[WebhookRow],
) -> sqlx::Result<()> {
    let mut tx = pool.begin().await?;
    sqlx::query(
        "INSERT INTO notification_settings (user_id, email, events, wait_minutes) \
         VALUES ($1, $2, $3, $4) ON CONFLICT (user_id) DO UPDATE SET email = EXCLUDED.email, \
           events = EXCLUDED.events, wait_minutes = EXCLUDED.wait_minutes, updated_at = now()",
    )
    .bind(user)
    .bind(&settings.email)
    .bind(&settings.events)
    .bind(settings.wait_minutes)
    .execute(&mut *tx)
    .await?;
    sqlx::query("DELETE FROM notification_webhooks WHERE user_id = $1")
        .bind(user)
        .execute(&mut *tx)
        .await?;
    for (i, h) in hooks.iter().enumerate() {
        sqlx::query(
            "INSERT INTO notification_webhooks (user_id, position, url, format, secret) \
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(user)
        .bind(i as i32)
        .bind(&h.url)
        .bind(h.format)
        .bind(&h.secret)
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await
}

/// A user's most recent deliveries, newest first.
pub async fn deliveries_of(
    pool: &PgPool,
    user: Uuid,
    limit: i64,
) -> sqlx::Result<Vec<DeliveryView>> {
    sqlx::query_as(
        "SELECT o.id, o.idempotency_key, o.job_id, j.name AS job_name, o.event, o.channel, \
           o.target, o.state, o.attempts, \
           CASE WHEN o.state = 'pending' THEN o.next_attempt_at END AS next_attempt_at, \
           o.last_error, o.created_at, o.sent_at \
         FROM notification_outbox o JOIN jobs j ON j.id = o.job_id \
         WHERE o.user_id = $1 ORDER BY o.id DESC LIMIT $2",
    )
    .bind(user)
    .bind(limit)
    .fetch_all(pool)
    .await
}

/// A delivery taken by a worker.
#[derive(Clone, sqlx::FromRow)]
pub struct Claimed {
    /// The row.
    pub id: i64,
    /// Sent with every attempt.
    pub idempotency_key: Uuid,
    /// The job.
    pub job_id: Uuid,
    /// Its owner, who asked for it.
    pub user_id: Uuid,
    /// What happened.
    pub event: NotifyEvent,
    /// `email` or `webhook`.
    pub channel: String,
    /// The address or URL.
    pub target: String,
    /// A webhook's format.
    pub format: Option<WebhookFormat>,
    /// A webhook's key.
    pub secret: Option<String>,
    /// Attempts made, this one included.
    pub attempts: i32,
    /// The message, once composed.
    pub body: Option<Value>,
}

/// Takes up to `limit` due deliveries (no two workers take the same one: `SKIP LOCKED`), counts
/// the attempt and holds each for `lease`: a worker that dies mid-send leaves it to be taken again
/// once the lease has passed. Without `mail`, e-mails are left to a node that has a relay.
pub async fn claim(
    pool: &PgPool,
    limit: i64,
    lease: Duration,
    mail: bool,
) -> sqlx::Result<Vec<Claimed>> {
    sqlx::query_as(
        "UPDATE notification_outbox o SET attempts = attempts + 1, \
           next_attempt_at = clock_timestamp() + make_interval(secs => $2) \
         WHERE id IN (SELECT id FROM notification_outbox \
                      WHERE state = 'pending' AND next_attempt_at <= clock_timestamp() \
                        AND ($3 OR channel = 'webhook') \
                      ORDER BY next_attempt_at FOR UPDATE SKIP LOCKED LIMIT $1) \
         RETURNING o.id, o.idempotency_key, o.job_id, o.user_id, o.event, o.channel, o.target, \
           o.format, o.secret, o.attempts, o.body",
    )
    .bind(limit)
    .bind(lease.as_secs_f64())
    .bind(mail)
    .fetch_all(pool)
    .await
}

/// Keeps the message composed for a delivery, unless an earlier attempt kept one already; returns
/// the one kept, so every attempt sends the same.
pub async fn keep_body(pool: &PgPool, id: i64, body: &Value) -> sqlx::Result<Value> {
    sqlx::query_scalar(
        "UPDATE notification_outbox SET body = coalesce(body, $2) WHERE id = $1 RETURNING body",
    )
    .bind(id)
    .bind(body)
    .fetch_one(pool)
    .await
}

/// The receiver acknowledged it.
pub async fn mark_sent(pool: &PgPool, id: i64) -> sqlx::Result<()> {
    sqlx::query(
        "UPDATE notification_outbox SET state = 'sent', sent_at = clock_timestamp() \
         WHERE id = $1 AND state = 'pending'",
    )
    .bind(id)
    .execute(pool)
    .await
    .map(drop)
}

/// The attempt failed: try again after `retry_in`, or (`None`) give up.
pub async fn mark_failed(
    pool: &PgPool,
    id: i64,
    why: &str,
    retry_in: Option<Duration>,
) -> sqlx::Result<()> {
    sqlx::query(
        "UPDATE notification_outbox SET last_error = $2, \
           state = CASE WHEN $3::float8 IS NULL THEN 'failed' ELSE 'pending' END, \
           next_attempt_at = clock_timestamp() + make_interval(secs => coalesce($3, 0)) \
         WHERE id = $1 AND state = 'pending'",
    )
    .bind(id)
    .bind(why)
    .bind(retry_in.map(|d| d.as_secs_f64()))
    .execute(pool)
    .await
    .map(drop)
}

/// When the next pending delivery falls due, if any.
pub async fn next_due(pool: &PgPool) -> sqlx::Result<Option<DateTime<Utc>>> {
    sqlx::query_scalar(
        "SELECT min(next_attempt_at) FROM notification_outbox WHERE state = 'pending'",
    )
    .fetch_one(pool)
    .await
}

/// What a message says about its job.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct JobFacts {
    /// Its name.
    pub name: String,
    /// Its status now.
    pub status: String,
    /// Its exit code.
    pub exit_code: Option<i32>,
    /// Why it ended as it did.
    pub status_reason: Option<String>,
    /// Who or what stopped it.
    pub stop_cause: Option<String>,
    /// Where it ran.
    pub node: Option<String>,
    /// Its owner's name.
    pub owner: String,
    /// Its owner's role.
    pub owner_role: String,
    /// When it was submitted.
    pub created_at: DateTime<Utc>,
    /// When it started.
    pub started_at: Option<DateTime<Utc>>,
    /// When it ended.
    pub finished_at: Option<DateTime<Utc>>,
}

/// A job's facts for its message.
pub async fn job_facts(db: impl PgExecutor<'_>, job: Uuid) -> sqlx::Result<Option<JobFacts>> {
    sqlx::query_as(
        "SELECT j.name, j.status, j.exit_code, j.status_reason, j.stop_cause, j.node, \
           u.username AS owner, u.role AS owner_role, j.created_at, j.started_at, j.finished_at \
         FROM jobs j JOIN users u ON u.id = j.owner_id WHERE j.id = $1",
    )
    .bind(job)
    .fetch_optional(db)
    .await
}

/// The advertise URLs of the cluster's nodes (a webhook may not reach them).
pub async fn node_urls(pool: &PgPool) -> sqlx::Result<Vec<String>> {
    sqlx::query_scalar("SELECT advertise_url FROM nodes")
        .fetch_all(pool)
        .await
}
