//! What the browser pages show: the dashboard, a job's page, the submit preview.

use super::{GpuView, JobEventKind, JobView, SkippedGpuView};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Everything the dashboard shows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DashboardView {
    /// Every card with what holds it.
    pub gpus: Vec<GpuView>,
    /// Devices seen but not scheduled (MIG).
    #[serde(default)]
    pub skipped: Vec<SkippedGpuView>,
    /// Jobs waiting for cards.
    pub waiting: i64,
    /// When the longest-waiting job was submitted.
    pub oldest_wait_since: Option<DateTime<Utc>>,
    /// The caller's unfinished jobs, newest first.
    pub mine: Vec<JobView>,
}

/// One step of a job's life, from its audit trail.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct JobEventView {
    /// When.
    pub at: DateTime<Utc>,
    /// Who.
    pub actor: String,
    /// What happened.
    pub kind: JobEventKind,
    /// Details, in plain words.
    pub detail: String,
}

/// A job's page.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobDetail {
    /// The job.
    pub job: JobView,
    /// Its audit trail, oldest first.
    pub events: Vec<JobEventView>,
    /// Whether the caller may cancel it now.
    pub can_cancel: bool,
    /// Whether the caller may submit a copy of it (its owner).
    pub can_resubmit: bool,
}

/// What would happen to a job spec if it were submitted now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Preview {
    /// It would be admitted at the next pass.
    FitsNow(String),
    /// It would wait, and why.
    WouldWait(String),
    /// It could never run here, and why.
    Never(String),
}
