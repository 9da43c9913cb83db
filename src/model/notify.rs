//! Notifications as the API and the account page see them: what a user hears about and where
//! (`PUT`/`GET /api/v1/me/notifications`), and each delivery's state
//! (`GET /api/v1/me/notifications/deliveries`).

use super::vocab::vocabulary;
use super::AppError;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

vocabulary! {
    /// What a user may hear about.
    pub enum NotifyEvent {
        /// The job exited 0.
        Succeeded = "succeeded",
        /// The job failed (exited non-zero, could not start, was stopped by gpuq).
        Failed = "failed",
        /// The job ran past its deadline.
        TimedOut = "timed_out",
        /// The job was cancelled.
        Cancelled = "cancelled",
        /// gpuq stopped the job for using more VRAM than it committed (a failure: asking for
        /// `failed` hears of it too).
        VramOveruse = "vram_overuse",
        /// The job started after waiting longer than the user's `started_after_wait_minutes`.
        StartedAfterWait = "started_after_wait",
        /// gpuq flagged the job idle: its cards stayed idle for the launch policy's
        /// `idle_after_min` (under `idle_action: stop` it will be stopped unless it gets busy).
        Idle = "idle",
    }
}

vocabulary! {
    /// The body a webhook receives.
    pub enum WebhookFormat {
        /// gpuq's JSON, signed with HMAC-SHA256 when a secret is set.
        Generic = "generic",
        /// `{"text": …}`, as Slack's and Mattermost's incoming webhooks take it.
        Slack = "slack",
    }
}

vocabulary! {
    /// Where a delivery stands.
    pub enum DeliveryState {
        /// Not sent yet: waiting for its first attempt, or for its next one after a failure.
        Pending = "pending",
        /// The receiver acknowledged it (2xx, or the SMTP relay accepted it).
        Sent = "sent",
        /// Given up after the last retry; `last_error` says why.
        Failed = "failed",
    }
}

/// The minutes a job may wait before its start is worth a `started_after_wait` notification,
/// unless the user says otherwise.
pub const DEFAULT_WAIT_MINUTES: u32 = 30;
/// Webhooks one user may have.
pub const MAX_WEBHOOKS: usize = 5;
/// The shortest webhook secret accepted (an HMAC key should not be guessable).
pub const MIN_SECRET_LEN: usize = 16;

/// One webhook as saved (`PUT`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct WebhookPut {
    /// `http://` or `https://` URL; it may not reach gpuq's hosts, loopback, link-local or
    /// private addresses unless the launch policy's `webhook_allowlist` allows it.
    pub url: String,
    /// `generic` (the default) or `slack`.
    #[serde(default = "generic")]
    pub format: WebhookFormat,
    /// The HMAC-SHA256 key of the signature (at least 16 characters). Write-only: left out, the
    /// secret this URL had is kept; `""` removes it.
    #[serde(default)]
    pub secret: Option<String>,
}

fn generic() -> WebhookFormat {
    WebhookFormat::Generic
}

/// What a user hears about and where (`PUT /api/v1/me/notifications`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct NotificationsPut {
    /// The address mails go to; none: no mail.
    #[serde(default)]
    pub email: Option<String>,
    /// Webhooks every notification is posted to (at most 5).
    #[serde(default)]
    pub webhooks: Vec<WebhookPut>,
    /// What to hear about.
    #[serde(default)]
    pub on: Vec<NotifyEvent>,
    /// For `started_after_wait`: a start after waiting longer than this many minutes (1 to 10080;
    /// 30 when left out).
    #[serde(default)]
    pub started_after_wait_minutes: Option<u32>,
}

/// One webhook as shown: never its secret, only whether one is set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct WebhookView {
    /// Its URL.
    pub url: String,
    /// Its body's format.
    pub format: WebhookFormat,
    /// Whether deliveries are signed (the secret itself is never shown).
    pub secret_set: bool,
}

/// What a user hears about and where (`GET /api/v1/me/notifications`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct NotificationSettings {
    /// The address mails go to.
    pub email: Option<String>,
    /// The webhooks.
    pub webhooks: Vec<WebhookView>,
    /// What the user hears about.
    pub on: Vec<NotifyEvent>,
    /// The wait past which a start is told (`started_after_wait`), minutes.
    pub started_after_wait_minutes: u32,
}

impl Default for NotificationSettings {
    fn default() -> Self {
        NotificationSettings {
            email: None,
            webhooks: Vec::new(),
            on: Vec::new(),
            started_after_wait_minutes: DEFAULT_WAIT_MINUTES,
        }
    }
}

/// One delivery of one notification to one place.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema, sqlx::FromRow))]
pub struct DeliveryView {
    /// The delivery.
    pub id: i64,
    /// Sent with every attempt (`Idempotency-Key`, the mail's `Message-ID`).
    pub idempotency_key: Uuid,
    /// The job it is about.
    pub job_id: Uuid,
    /// The job's name.
    pub job_name: String,
    /// What happened.
    pub event: NotifyEvent,
    /// `email` or `webhook`.
    pub channel: String,
    /// The address or URL.
    pub target: String,
    /// Where it stands.
    pub state: DeliveryState,
    /// Attempts made so far.
    pub attempts: i32,
    /// While pending: when it is tried next.
    pub next_attempt_at: Option<DateTime<Utc>>,
    /// Why the last attempt failed (kept after a later success for the record).
    pub last_error: Option<String>,
    /// When the job's change wrote it.
    pub created_at: DateTime<Utc>,
    /// When the receiver acknowledged it.
    pub sent_at: Option<DateTime<Utc>>,
}

impl DeliveryView {
    /// `sent`, `pending`, `retrying` (pending after a failed attempt) or `failed`.
    pub fn state_word(&self) -> &'static str {
        match self.state {
            DeliveryState::Pending if self.attempts > 0 && self.last_error.is_some() => "retrying",
            s => s.as_str(),
        }
    }
}

fn invalid(field: impl Into<String>, message: impl Into<String>) -> AppError {
    AppError::Invalid {
        field: field.into(),
        message: message.into(),
    }
}

impl NotificationsPut {
    /// Checks what can be checked without the network (the server then parses the address and
    /// checks each URL's destination), naming the field at fault.
    pub fn check(&self) -> Result<(), AppError> {
        if let Some(email) = &self.email {
            let ok = email.len() <= 254
                && email.split('@').count() == 2
                && email.split('@').all(|p| !p.is_empty())
                && !email.chars().any(|c| c.is_whitespace() || c.is_control());
            if !ok {
                return Err(invalid("email", "not an e-mail address (name@host)"));
            }
        }
        if self.webhooks.len() > MAX_WEBHOOKS {
            return Err(invalid(
                "webhooks",
                format!("at most {MAX_WEBHOOKS} webhooks"),
            ));
        }
        for (i, w) in self.webhooks.iter().enumerate() {
            let lower = w.url.to_ascii_lowercase();
            if w.url.len() > 2048
                || !(lower.starts_with("http://") || lower.starts_with("https://"))
            {
                return Err(invalid(
                    format!("webhooks[{i}].url"),
                    format!(
                        "`{}`: only http:// and https:// URLs (at most 2048 characters)",
                        w.url
                    ),
                ));
            }
            if let Some(s) = w.secret.as_deref().filter(|s| !s.is_empty()) {
                if s.len() < MIN_SECRET_LEN || s.len() > 256 {
                    return Err(invalid(
                        format!("webhooks[{i}].secret"),
                        format!("{MIN_SECRET_LEN} to 256 characters, or \"\" for none"),
                    ));
                }
            }
        }
        if let Some(m) = self.started_after_wait_minutes {
            if !(1..=10080).contains(&m) {
                return Err(invalid(
                    "started_after_wait_minutes",
                    "between 1 and 10080 (a week)",
                ));
            }
        }
        Ok(())
    }
}
