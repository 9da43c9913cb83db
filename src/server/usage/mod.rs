//! Usage: the GPU sampler, the usage report (card memory over time, queue waits, GPU-hours and
//! VRAM-hours), its charts and the CSV exports. The REST API and the usage page call the same
//! functions here; both allow managers and admins only.

pub mod charts;
pub mod csv;
pub mod range;
pub mod report;
pub mod sampler;

pub use range::Range;
pub use report::{load, report, view};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use sqlx::PgExecutor;
use std::time::Duration;

/// How often cards are sampled and how long samples are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sampling {
    /// Time between two samples of a card.
    pub every: Duration,
    /// Samples older than this are deleted, and longer report ranges are refused.
    pub retention: Duration,
}

impl Default for Sampling {
    fn default() -> Self {
        Sampling {
            every: Duration::from_secs(5),
            retention: Duration::from_secs(720 * 3600),
        }
    }
}

impl Sampling {
    /// From the command line's `--sample-every-s` and `--sample-retention-h`.
    pub fn from_flags(every_s: u64, retention_h: u64) -> Self {
        Sampling {
            every: Duration::from_secs(every_s.max(1)),
            retention: Duration::from_secs(retention_h.max(1).saturating_mul(3600)),
        }
    }

    /// The retention as a calendar duration (for timestamps).
    pub fn retention_chrono(&self) -> chrono::Duration {
        chrono::Duration::from_std(self.retention).unwrap_or(chrono::Duration::MAX)
    }
}

/// The settings row: written by the sampler at start, read by every process that answers reports.
#[derive(Serialize, Deserialize)]
struct Stored {
    every_s: u64,
    retention_h: u64,
}

const SETTINGS_KEY: &str = "usage_sampling";

/// Records the sampling settings in the database (the last process started wins; give every
/// process of one database the same flags).
pub async fn save_sampling(db: impl PgExecutor<'_>, sampling: &Sampling) -> Result<()> {
    let stored = Stored {
        every_s: sampling.every.as_secs(),
        retention_h: sampling.retention.as_secs() / 3600,
    };
    sqlx::query(
        "INSERT INTO settings (key, value) VALUES ($1, $2) \
         ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, updated_at = now()",
    )
    .bind(SETTINGS_KEY)
    .bind(serde_json::to_value(&stored).context("encoding the sampling settings")?)
    .execute(db)
    .await
    .context("saving the sampling settings")?;
    Ok(())
}

/// The recorded sampling settings, or the defaults when no sampler has run yet.
pub async fn sampling(db: impl PgExecutor<'_>) -> Result<Sampling> {
    let value: Option<serde_json::Value> =
        sqlx::query_scalar("SELECT value FROM settings WHERE key = $1")
            .bind(SETTINGS_KEY)
            .fetch_optional(db)
            .await
            .context("reading the sampling settings")?;
    Ok(match value.map(serde_json::from_value::<Stored>) {
        Some(Ok(s)) => Sampling::from_flags(s.every_s, s.retention_h),
        _ => Sampling::default(),
    })
}
