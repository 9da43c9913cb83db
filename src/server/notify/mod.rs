//! Notifications: what each user hears about (a job's end, a start after a long wait) and where
//! (e-mail through the admin's SMTP relay, webhooks), and their delivery.
//!
//! The outbox row of a status change is written by a trigger on `jobs.status` in the transaction
//! of the change (migration `…_notifications.sql`): whichever statement of the lifecycle makes the
//! change, the row commits with it or not at all, and the lifecycle module stays the one place
//! that writes a status. Each node's worker ([`deliver::run`]) sends the rows afterwards; see
//! docs/operate.md, "Notifications".

pub mod deliver;
mod message;
pub mod send;
pub mod ssrf;

pub use deliver::{DeliveryConfig, NotifySetup};

use crate::model::{
    AppError, DeliveryView, NotificationSettings, NotificationsPut, NotifyEvent, WebhookView,
    DEFAULT_WAIT_MINUTES,
};
use crate::server::auth::CurrentUser;
use crate::server::db::notifications::{self as db, SettingsRow, WebhookRow};
use crate::server::db::settings;
use crate::server::error::OrInternal;
use sqlx::PgPool;
use std::net::IpAddr;
use uuid::Uuid;

/// Deliveries a user sees at most.
pub const DELIVERIES_SHOWN: i64 = 50;

/// A user's settings (the defaults when they never saved any); secrets are never shown.
pub async fn settings_of(pool: &PgPool, user: Uuid) -> Result<NotificationSettings, AppError> {
    let Some((row, hooks)) = db::settings_of(pool, user)
        .await
        .or_internal("reading notification settings")?
    else {
        return Ok(NotificationSettings::default());
    };
    Ok(view(row, &hooks))
}

fn view(row: SettingsRow, hooks: &[WebhookRow]) -> NotificationSettings {
    NotificationSettings {
        email: row.email,
        webhooks: hooks
            .iter()
            .map(|h| WebhookView {
                url: h.url.clone(),
                format: h.format,
                secret_set: h.secret.as_deref().is_some_and(|s| !s.is_empty()),
            })
            .collect(),
        on: row.events.iter().filter_map(|e| e.parse().ok()).collect(),
        started_after_wait_minutes: u32::try_from(row.wait_minutes).unwrap_or(DEFAULT_WAIT_MINUTES),
    }
}

/// Replaces the caller's settings, after checking each field: the address, and each webhook's
/// URL against where webhooks may go (400 naming the webhook and why). A webhook saved without a
/// `secret` keeps the one its URL had.
pub async fn save(
    pool: &PgPool,
    user: &CurrentUser,
    put: NotificationsPut,
) -> Result<NotificationSettings, AppError> {
    put.check()?;
    if let Some(email) = &put.email {
        email
            .parse::<lettre::Address>()
            .map_err(|e| AppError::Invalid {
                field: "email".into(),
                message: format!("`{email}` is not an e-mail address: {e}"),
            })?;
    }
    let guard = save_guard(pool).await?;
    for (i, w) in put.webhooks.iter().enumerate() {
        if let Err(why) = guard.check(&w.url).await {
            return Err(AppError::Invalid {
                field: format!("webhooks[{i}].url"),
                message: why,
            });
        }
    }
    let old = db::settings_of(pool, user.id)
        .await
        .or_internal("reading notification settings")?
        .map(|(_, hooks)| hooks)
        .unwrap_or_default();
    let hooks: Vec<WebhookRow> = put
        .webhooks
        .iter()
        .map(|w| WebhookRow {
            url: w.url.clone(),
            format: w.format,
            secret: match &w.secret {
                Some(s) if s.is_empty() => None,
                Some(s) => Some(s.clone()),
                None => old
                    .iter()
                    .find(|o| o.url == w.url)
                    .and_then(|o| o.secret.clone()),
            },
        })
        .collect();
    let mut on: Vec<NotifyEvent> = put.on.clone();
    on.sort();
    on.dedup();
    let row = SettingsRow {
        email: put.email.clone(),
        events: on.iter().map(|e| e.as_str().to_owned()).collect(),
        wait_minutes: put
            .started_after_wait_minutes
            .unwrap_or(DEFAULT_WAIT_MINUTES) as i32,
    };
    db::save(pool, user.id, &row, &hooks)
        .await
        .or_internal("saving notification settings")?;
    Ok(view(row, &hooks))
}

async fn save_guard(pool: &PgPool) -> Result<ssrf::Guard, AppError> {
    let policy = settings::launch_policy(pool)
        .await
        .or_internal("reading the launch policy")?;
    let own = node_addresses(pool)
        .await
        .or_internal("reading the nodes")?;
    Ok(ssrf::Guard::new(&policy.webhook_allowlist, own))
}

/// The caller's most recent deliveries, newest first.
pub async fn deliveries_of(pool: &PgPool, user: Uuid) -> Result<Vec<DeliveryView>, AppError> {
    db::deliveries_of(pool, user, DELIVERIES_SHOWN)
        .await
        .or_internal("reading notification deliveries")
}

/// The addresses of every node's advertise URL, resolved (a name that does not resolve counts
/// for nothing).
pub(crate) async fn node_addresses(pool: &PgPool) -> sqlx::Result<Vec<IpAddr>> {
    let mut out = Vec::new();
    for url in db::node_urls(pool).await? {
        let Ok(parsed) = reqwest::Url::parse(&url) else {
            continue;
        };
        let Some(host) = parsed.host_str().map(str::to_owned) else {
            continue;
        };
        let literal = host.trim_start_matches('[').trim_end_matches(']');
        if let Ok(ip) = literal.parse::<IpAddr>() {
            out.push(ip);
            continue;
        }
        let port = parsed.port_or_known_default().unwrap_or(80);
        let lookup = tokio::net::lookup_host(format!("{host}:{port}"));
        let found = tokio::time::timeout(std::time::Duration::from_secs(2), lookup).await;
        if let Ok(Ok(found)) = found {
            out.extend(found.map(|a| a.ip()));
        }
    }
    Ok(out)
}
