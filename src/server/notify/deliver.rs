//! The delivery worker, one per node: takes due outbox rows (`FOR UPDATE SKIP LOCKED`, so two
//! nodes never send one row at once), sends each, and marks it `sent` only after the receiver
//! acknowledged it; a failure is retried after a doubling wait up to a cap, then ends `failed`
//! with the reason. A worker killed between the send and the mark leaves the row pending: it is
//! sent again, with the same idempotency key, once its lease has passed (at least once, never
//! lost). Woken by the job-change notifications the outbox's trigger sends, and by a timer for
//! the next retry that falls due.

use super::message::{self, wants_tail, TAIL_LINES};
use super::send::{self, SmtpConfig};
use super::ssrf::Guard;
use crate::model::{JobChange, LiveEvent, Role};
use crate::server::auth::CurrentUser;
use crate::server::db::notifications::{self as db, Claimed};
use crate::server::db::settings;
use crate::server::notifier::{Note, Subscription};
use crate::server::Ctx;
use std::net::IpAddr;
use std::time::Duration;
use tokio::sync::watch;

/// How a node delivers.
#[derive(Debug, Clone)]
pub struct DeliveryConfig {
    /// The SMTP relay; `None`: this node leaves mails to nodes that have one.
    pub smtp: Option<SmtpConfig>,
    /// The wait before the first retry; it doubles with each retry.
    pub retry_first: Duration,
    /// The longest wait between two attempts.
    pub retry_max: Duration,
    /// Attempts before a delivery ends `failed`.
    pub attempts: u32,
    /// How long a taken row is held while it is sent.
    pub lease: Duration,
    /// Where people open gpuq (the job link), without a trailing `/`.
    pub public_url: String,
    /// This node's own addresses (its listen address), which webhooks may not reach.
    pub own: Vec<IpAddr>,
    /// How long one webhook request may take.
    pub webhook_timeout: Duration,
}

impl DeliveryConfig {
    /// The wait after the `attempt`th failed attempt.
    pub fn backoff(&self, attempt: u32) -> Duration {
        let factor = 2u32.saturating_pow(attempt.saturating_sub(1).min(30));
        self.retry_first.saturating_mul(factor).min(self.retry_max)
    }
}

/// What the worker runs on.
pub struct NotifySetup {
    /// The domain's context (the pool; reading a log's tail, through its node if need be).
    pub ctx: Ctx,
    /// How it delivers.
    pub cfg: DeliveryConfig,
}

/// Rows taken at once.
const BATCH: i64 = 32;
/// The longest sleep without a note (the notifier's backstop usually comes sooner): a retry
/// that falls due is seen by then at worst.
const IDLE: Duration = Duration::from_secs(30);

/// Delivers until `stop` turns true.
pub async fn run(setup: NotifySetup, mut notes: Subscription, mut stop: watch::Receiver<bool>) {
    let NotifySetup { ctx, cfg } = setup;
    loop {
        let worked = round(&ctx, &cfg).await;
        let wait = match worked {
            // A full batch: there may be more due now.
            Ok(n) if n as i64 >= BATCH => Duration::ZERO,
            Ok(_) => until_next_due(&ctx).await,
            Err(e) => {
                tracing::warn!(error = %e, "notifications: a delivery round failed; retrying");
                Duration::from_secs(1)
            }
        };
        if wait.is_zero() {
            continue;
        }
        let sleep = tokio::time::sleep(wait);
        tokio::pin!(sleep);
        loop {
            tokio::select! {
                _ = stop.changed() => return,
                _ = &mut sleep => break,
                note = notes.recv() => match note {
                    // A status change may have written outbox rows; a pull's progress does not.
                    Note::Event(LiveEvent::Job { status: JobChange::Status(_), .. })
                    | Note::Missed
                    | Note::Backstop => break,
                    _ => continue,
                },
            }
        }
    }
}

async fn until_next_due(ctx: &Ctx) -> Duration {
    match db::next_due(&ctx.pool).await {
        Ok(Some(at)) => (at - chrono::Utc::now())
            .to_std()
            .unwrap_or(Duration::ZERO)
            .max(Duration::from_millis(20))
            .min(IDLE),
        _ => IDLE,
    }
}

/// One round: takes the due rows and delivers each; returns how many it took.
pub async fn round(ctx: &Ctx, cfg: &DeliveryConfig) -> anyhow::Result<usize> {
    let rows = db::claim(&ctx.pool, BATCH, cfg.lease, cfg.smtp.is_some()).await?;
    if rows.is_empty() {
        return Ok(0);
    }
    let guard = guard(ctx, cfg).await?;
    let n = rows.len();
    let sends = rows.into_iter().map(|row| deliver(ctx, cfg, &guard, row));
    futures_util::future::join_all(sends).await;
    Ok(n)
}

/// The SSRF guard as the policy and the nodes are now.
pub async fn guard(ctx: &Ctx, cfg: &DeliveryConfig) -> anyhow::Result<Guard> {
    let policy = settings::launch_policy(&ctx.pool).await?;
    let mut own = cfg.own.clone();
    own.extend(super::node_addresses(&ctx.pool).await?);
    Ok(Guard::new(&policy.webhook_allowlist, own))
}

async fn deliver(ctx: &Ctx, cfg: &DeliveryConfig, guard: &Guard, row: Claimed) {
    let outcome = attempt(ctx, cfg, guard, &row).await;
    let marked = match outcome {
        Ok(()) => db::mark_sent(&ctx.pool, row.id).await,
        Err(Failure { why, retry }) => {
            let left = (row.attempts as u32) < cfg.attempts;
            let retry_in = (retry && left).then(|| cfg.backoff(row.attempts as u32));
            if retry_in.is_none() {
                tracing::warn!(delivery = row.id, job = %row.job_id, reason = %why, "notification failed");
            }
            db::mark_failed(&ctx.pool, row.id, &why, retry_in).await
        }
    };
    if let Err(e) = marked {
        // The row stays pending and is taken again after its lease: sent twice, never lost.
        tracing::warn!(delivery = row.id, error = %e, "notifications: could not record a delivery's outcome");
    }
}

struct Failure {
    why: String,
    /// Worth trying again (a refused destination is not).
    retry: bool,
}

fn again(why: String) -> Failure {
    Failure { why, retry: true }
}

async fn attempt(
    ctx: &Ctx,
    cfg: &DeliveryConfig,
    guard: &Guard,
    row: &Claimed,
) -> Result<(), Failure> {
    let body = match &row.body {
        Some(b) => b.clone(),
        None => {
            let composed = compose(ctx, cfg, row).await?;
            db::keep_body(&ctx.pool, row.id, &composed)
                .await
                .map_err(|e| again(format!("could not keep the message: {e}")))?
        }
    };
    match row.channel.as_str() {
        "webhook" => {
            let to = guard
                .check(&row.target)
                .await
                .map_err(|why| Failure { why, retry: false })?;
            let format = row.format.unwrap_or(crate::model::WebhookFormat::Generic);
            send::webhook(
                &to,
                format,
                row.secret.as_deref().filter(|s| !s.is_empty()),
                row.idempotency_key,
                row.event.as_str(),
                &body,
                cfg.webhook_timeout,
            )
            .await
            .map_err(again)
        }
        _ => {
            let smtp = cfg
                .smtp
                .as_ref()
                .ok_or_else(|| again("this node has no SMTP relay".into()))?;
            send::mail(smtp, &row.target, row.idempotency_key, &body)
                .await
                .map_err(again)
        }
    }
}

async fn compose(
    ctx: &Ctx,
    cfg: &DeliveryConfig,
    row: &Claimed,
) -> Result<serde_json::Value, Failure> {
    let facts = db::job_facts(&ctx.pool, row.job_id)
        .await
        .map_err(|e| again(format!("could not read the job: {e}")))?
        .ok_or_else(|| Failure {
            why: "the job no longer exists".into(),
            retry: false,
        })?;
    let tail = match wants_tail(row.event) {
        true => Some(tail_of(ctx, row, &facts).await),
        false => None,
    };
    let link = format!("{}/jobs/{}", cfg.public_url, row.job_id);
    Ok(message::compose(
        row.idempotency_key,
        row.job_id,
        row.event,
        &facts,
        tail.as_deref(),
        &link,
    ))
}

/// The last lines of the job's log, read as its owner would (through its node when it ran
/// elsewhere); what went wrong instead, when it cannot be read.
async fn tail_of(ctx: &Ctx, row: &Claimed, facts: &db::JobFacts) -> String {
    let owner = CurrentUser {
        id: row.user_id,
        username: facts.owner.clone(),
        role: facts.owner_role.parse().unwrap_or(Role::Member),
        via_token: true,
    };
    match crate::server::jobs::logs::tail(ctx, &owner, row.job_id, TAIL_LINES).await {
        Ok(text) => text,
        Err(e) => format!("(the log could not be read: {e})"),
    }
}
