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
    /// Its idle flag, while a running job is flagged (docs/admission.md#idle-cards); only for
    /// those who see its details.
    #[serde(default)]
    pub idle: Option<IdleFlag>,
    /// While it is queued, its owner's budgets with their use this period (only to the owner:
    /// "your usage this week: 41 GPU-h of a 50 GPU-h budget").
    #[serde(default)]
    pub budgets: Vec<crate::model::BudgetUse>,
}

/// A running job flagged idle: its cards stayed idle past the launch policy's `idle_after_min`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IdleFlag {
    /// When it was flagged.
    pub flagged_at: DateTime<Utc>,
    /// Its last activity (the window counts from there).
    pub quiet_since: Option<DateTime<Utc>>,
    /// It had no process on its cards (else: processes, all below `sm_percent`).
    pub no_process: bool,
    /// The policy's `idle_sm_percent` when it was flagged.
    pub sm_percent: Option<u32>,
    /// When it will be stopped unless it gets busy (`idle_action: stop`); none under `warn`.
    pub stop_at: Option<DateTime<Utc>>,
}

impl IdleFlag {
    /// The warning in plain words, times in UTC.
    pub fn describe(&self) -> String {
        let since = self.quiet_since.unwrap_or(self.flagged_at);
        let what = if self.no_process {
            "no process on its cards".to_owned()
        } else {
            format!(
                "no process above {} % SM",
                self.sm_percent.map_or("?".to_owned(), |p| p.to_string())
            )
        };
        let then = match self.stop_at {
            Some(at) => format!(
                "; it will be stopped at {} UTC unless it gets busy",
                at.format("%H:%M:%S")
            ),
            None => String::new(),
        };
        format!("idle since {} UTC: {what}{then}", since.format("%H:%M:%S"))
    }
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
