//! Jobs as the UI, the REST API and the CLI see them.

use super::vocab::vocabulary;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use uuid::Uuid;

vocabulary! {
    /// Where a job is in its life. Stored as text CHECKed by the database; this enum mirrors it.
    pub enum JobStatus {
        /// Waiting for cards.
        Queued = "queued",
        /// Cards reserved; the runner has not started the container yet.
        Admitted = "admitted",
        /// The runner is creating and starting the container.
        Starting = "starting",
        /// The container runs.
        Running = "running",
        /// Exited 0.
        Succeeded = "succeeded",
        /// Exited non-zero, or could not be launched.
        Failed = "failed",
        /// Cancelled by its owner or an admin.
        Cancelled = "cancelled",
        /// Ran past its deadline and was stopped.
        TimedOut = "timed_out",
        /// Refused at submission: it could never run here.
        Rejected = "rejected",
    }
}

vocabulary! {
    /// Why a job was stopped, or ended before it ran, by someone or something other than its own
    /// exit: stored with the job (`jobs.stop_cause`) when the stop is asked for, so the end it
    /// leads to says who stopped it without looking anything up again.
    pub enum StopCause {
        /// Its owner cancelled it.
        Owner = "owner",
        /// An admin (not its owner) cancelled it.
        Admin = "admin",
        /// It ran past its deadline.
        Timeout = "timeout",
        /// gpuq stopped it: above its VRAM commitment on a card that ran short.
        VramOveruse = "vram_overuse",
        /// Its node was lost and an admin forgot it.
        NodeLost = "node_lost",
        /// Its owner was disabled.
        UserDisabled = "user_disabled",
        /// A restart of the container runtime (dockerd) killed it.
        RuntimeRestart = "runtime_restart",
        /// It waited for another job that ended in a way its dependency can no longer accept
        /// (an `after_ok` parent that failed, an `after_failed` parent that succeeded).
        Dependency = "dependency",
        /// gpuq stopped it: its cards stayed idle past the launch policy's `idle_after_min` and
        /// `idle_grace_min` under `idle_action: stop`.
        Idle = "idle",
        /// An interactive session (a job with a `port`) saw no HTTP or WebSocket traffic and no
        /// GPU activity for the launch policy's `session_idle_min`.
        SessionIdle = "session_idle",
    }
}

impl StopCause {
    /// Who or what stopped the job, as the job page says it ("Stopped by …").
    pub fn describe(self) -> &'static str {
        match self {
            StopCause::Owner => "its owner",
            StopCause::Admin => "an admin",
            StopCause::Timeout => "its deadline",
            StopCause::VramOveruse => {
                "gpuq, for VRAM above its commitment on a card that ran short"
            }
            StopCause::NodeLost => "the loss of its node",
            StopCause::UserDisabled => "gpuq, as its owner's account was disabled",
            StopCause::RuntimeRestart => "a restart of the container runtime",
            StopCause::Dependency => "gpuq, as a job it depended on ended the wrong way",
            StopCause::Idle => "gpuq, as its cards stayed idle",
            StopCause::SessionIdle => "gpuq, as the session was idle",
        }
    }

    /// Whether a job stopped for this cause ends `failed` (gpuq stopped it for a rule it broke or
    /// a loss it suffered) rather than `cancelled` (a person asked) or `timed_out`.
    pub fn ends_failed(self) -> bool {
        matches!(
            self,
            StopCause::VramOveruse
                | StopCause::NodeLost
                | StopCause::UserDisabled
                | StopCause::RuntimeRestart
                | StopCause::Idle
        )
    }
}

/// The queue order, defined once: higher priority first, then the jobs of owners past a soft
/// budget after the others, then the owner's fair-share standing (their decayed GPU-hours over
/// their owed share, lower first; the same for everyone with the launch policy's `fair_share`
/// off), then submit order. SQL orders by this over the `jobs` columns and the
/// `past_soft_budget` and `standing` columns the query supplies (`server::db::jobs::list`); Rust
/// code orders by [`queue_key`]; a test checks that both agree.
pub const QUEUE_ORDER_SQL: &str = "priority DESC, past_soft_budget ASC, standing ASC, seq ASC";

/// The order of one owner's jobs, or of jobs already holding their cards: priority, then submit
/// order. Among one owner's jobs it is [`QUEUE_ORDER_SQL`] (their budget and standing are the
/// same).
pub const SUBMIT_ORDER_SQL: &str = "priority DESC, seq ASC";

/// The sort key of the queue order (see [`QUEUE_ORDER_SQL`]).
pub type QueueKey = (std::cmp::Reverse<i32>, bool, Standing, i64);

/// The sort key of a job in the queue order: its priority, whether its owner is past a soft
/// budget, its owner's standing, its submit order.
/// Every place that orders the queue (the planner, the pass's caps, the start estimate's
/// simulation, queue positions) calls this one function.
pub fn queue_key(priority: i32, past_soft_budget: bool, standing: Standing, seq: i64) -> QueueKey {
    (std::cmp::Reverse(priority), past_soft_budget, standing, seq)
}

/// An owner's place in fair share: their decayed GPU-hours over their owed share of the cards
/// (lower goes first). Never negative nor NaN, so it orders totally (and exactly as Postgres
/// orders the same `float8`).
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Standing(f64);

impl Standing {
    /// Everyone's standing with fair share off: equal, so submit order decides.
    pub const EVEN: Standing = Standing(0.0);

    /// `usage` GPU-hours against an owed `share` (a fraction of the cards; a share of 0 or less
    /// is owed nothing, and goes after everyone who is).
    pub fn of(usage: f64, share: f64) -> Standing {
        let usage = if usage.is_finite() {
            usage.max(0.0)
        } else {
            0.0
        };
        if share > 0.0 && share.is_finite() {
            Standing::new(usage / share)
        } else {
            Standing(f64::MAX)
        }
    }

    /// A standing of `value` (negative, NaN or infinite values are clamped into range).
    pub fn new(value: f64) -> Standing {
        // `<=` also catches -0.0, which `total_cmp` would put before 0.0.
        if value.is_nan() || value <= 0.0 {
            Standing(0.0)
        } else {
            Standing(value.min(f64::MAX))
        }
    }

    /// The figure: decayed GPU-hours per unit of owed share.
    pub fn value(self) -> f64 {
        self.0
    }
}

impl PartialEq for Standing {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == std::cmp::Ordering::Equal
    }
}

impl Eq for Standing {}

impl PartialOrd for Standing {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Standing {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

impl JobStatus {
    /// Whether the job has ended (its capacity is to be given back).
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            JobStatus::Succeeded
                | JobStatus::Failed
                | JobStatus::Cancelled
                | JobStatus::TimedOut
                | JobStatus::Rejected
        )
    }

    /// Whether the job has been placed on a node and not yet ended there (admitted, starting or
    /// running): if that node is lost, the job is stuck with it.
    pub fn holds_cards_on_its_node(self) -> bool {
        matches!(
            self,
            JobStatus::Admitted | JobStatus::Starting | JobStatus::Running
        )
    }
}

/// A card granted to a job. On the server a grant row is read straight into it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema, sqlx::FromRow))]
pub struct AssignedGpu {
    /// NVML-style id (`GPU-…`).
    pub uuid: String,
    /// Device index on its node.
    #[cfg_attr(feature = "ssr", sqlx(rename = "idx", try_from = "i32"))]
    pub index: u32,
    /// Model name.
    pub model: String,
    /// VRAM reserved for the job on this card (its commitment).
    pub vram_mib: i64,
    /// VRAM the job's processes hold on this card, as last observed (MiB); `None` before any
    /// reading (or on a card nothing observes).
    #[serde(default)]
    pub used_mib: Option<i64>,
    /// The most its processes held on this card over the run (MiB); `None` before any reading.
    #[serde(default)]
    pub peak_mib: Option<i64>,
    /// NVML accounting's peak for its processes on this card, where the driver keeps accounting
    /// (it also sees peaks between two readings); `None` when unknown.
    #[serde(default)]
    pub accounting_peak_mib: Option<i64>,
    /// It stayed above its commitment on this card for `--vram-overuse-samples` readings in a row
    /// at some point of its run.
    #[serde(default)]
    pub over_commitment: bool,
}

/// Everything a viewer may know about a job. On the server a `jobs` row is read straight into it;
/// the fields the row does not hold (marked `skip`) are filled in by the job views.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema, sqlx::FromRow))]
pub struct JobView {
    /// Job id.
    pub id: Uuid,
    /// Submit order.
    pub seq: i64,
    /// Display name.
    pub name: String,
    /// Owner's login name.
    pub owner: String,
    /// Current status.
    pub status: JobStatus,
    /// Why it is in that status, when there is something to say.
    pub status_reason: Option<String>,
    /// Container image.
    pub image: String,
    /// argv.
    pub command: Vec<String>,
    /// Cards asked for.
    #[cfg_attr(feature = "ssr", sqlx(try_from = "i32"))]
    pub gpu_count: u32,
    /// Workload type, when the need comes from the manifest.
    pub workload: Option<String>,
    /// Explicit MiB per card, otherwise.
    #[cfg_attr(feature = "ssr", sqlx(rename = "min_vram_mib"))]
    pub min_vram_mb: Option<i64>,
    /// Whole cards.
    pub exclusive: bool,
    /// Higher runs first.
    pub priority: i32,
    /// Run-time limit.
    pub timeout_s: i64,
    /// Environment: only for the owner and admins.
    #[cfg_attr(feature = "ssr", sqlx(skip))]
    pub env: Option<BTreeMap<String, String>>,
    /// `host:container[:ro]` mounts.
    #[cfg_attr(feature = "ssr", sqlx(skip))]
    pub volumes: Vec<String>,
    /// Node it was placed on.
    pub node: Option<String>,
    /// Cards it holds or held.
    #[cfg_attr(feature = "ssr", sqlx(skip))]
    pub assigned_gpus: Vec<AssignedGpu>,
    /// Container exit code.
    pub exit_code: Option<i32>,
    /// Where its log lives on its node (a path on that host), once its container was created.
    /// Hidden from viewers who may not read the job's details.
    #[serde(default)]
    pub log_path: Option<String>,
    /// The job's id again, under the original API's name for it.
    #[serde(default)]
    #[cfg_attr(feature = "ssr", sqlx(skip))]
    pub job_id: Uuid,
    /// The indices of its cards on its node, in order (the original API's name): the same cards
    /// as `assigned_gpus`.
    #[serde(default)]
    #[cfg_attr(feature = "ssr", sqlx(skip))]
    pub assigned_gpu_indices: Vec<u32>,
    /// It has ended and will not change again: `succeeded`, `failed`, `timed_out`, `cancelled`
    /// or `rejected`. A client that waits for an end waits for this.
    #[serde(default)]
    #[cfg_attr(feature = "ssr", sqlx(skip))]
    pub terminal: bool,
    /// Who or what stopped it, when something other than its own exit ended it (or is ending it:
    /// set when the stop is asked for). Hidden, like `status_reason`, from viewers who may not read
    /// the job's details.
    #[serde(default)]
    pub stop_cause: Option<StopCause>,
    /// Submitted.
    pub created_at: DateTime<Utc>,
    /// Cards reserved.
    pub admitted_at: Option<DateTime<Utc>>,
    /// Container started.
    pub started_at: Option<DateTime<Utc>>,
    /// Ended.
    pub finished_at: Option<DateTime<Utc>>,
    /// Capacity given back.
    pub released_at: Option<DateTime<Utc>>,
    /// The exact image the job ran (`repo@sha256:…`, or the image id of a local image without
    /// one), beside the `image` it was given; `None` until its container was made.
    #[serde(default)]
    pub image_digest: Option<String>,
    /// 1-based place in the queue, for queued jobs.
    #[cfg_attr(feature = "ssr", sqlx(skip))]
    pub queue_position: Option<i64>,
    /// Plain words on why a queued job waits.
    #[cfg_attr(feature = "ssr", sqlx(skip))]
    pub wait_reason: Option<String>,
    /// Command, volumes and status details are someone else's and were left out (they are the
    /// owner's, their managers' and admins' to read).
    #[serde(default)]
    #[cfg_attr(feature = "ssr", sqlx(skip))]
    pub details_hidden: bool,
    /// The job holds cards on a node that is lost: it is not started anywhere else, keeps its
    /// cards, and ends when the node comes back (or `node_lost` when an admin forgets the node).
    #[serde(default)]
    #[cfg_attr(feature = "ssr", sqlx(skip))]
    pub node_lost: bool,
    /// A queued job: when it is expected to start (a simulation of the admission passes to come
    /// over the current ledger, with the observed run times of the jobs ahead); `None` when there
    /// is no figure yet or it cannot start. Hidden, like `status_reason`, from viewers who may not
    /// read the job's details.
    #[serde(default)]
    #[cfg_attr(feature = "ssr", sqlx(skip))]
    pub estimated_start_at: Option<DateTime<Utc>>,
    /// A queued job: when it starts at the latest, with every job ahead running to its deadline.
    /// A later job of higher priority (an admin's) or a node that goes away can break it.
    #[serde(default)]
    #[cfg_attr(feature = "ssr", sqlx(skip))]
    pub latest_start_at: Option<DateTime<Utc>>,
    /// A queued job that cannot start as things stand (no card big enough, its image cannot be
    /// had, its owner is disabled): why, instead of a date.
    #[serde(default)]
    #[cfg_attr(feature = "ssr", sqlx(skip))]
    pub cannot_start: Option<String>,
    /// The array (or sweep) it is an element of, if any.
    #[serde(default)]
    pub array_id: Option<Uuid>,
    /// Its index in that array (`GPUQ_ARRAY_INDEX` in its container).
    #[serde(default)]
    pub array_index: Option<i32>,
    /// An interactive session (a job with a `port`) that runs: where it is opened, on the session
    /// origin (`https://<job-id>.<sessions-domain>/` or `<sessions-url>/s/<job-id>/`). The
    /// session origin sends a visitor without its cookie to gpuq's
    /// `GET /api/v1/jobs/{id}/session`, which lets only the owner in.
    #[serde(default)]
    #[cfg_attr(feature = "ssr", sqlx(skip))]
    pub session_url: Option<String>,
}

/// The path under which job `id`'s session lives on its origin: `/s/<id>/` on either kind of
/// origin (a path per job, or a host per job), so the runner need not know which serves it. Its
/// container is told it as `GPUQ_SESSION_BASE`, the base URL its app serves under.
pub fn session_path(id: Uuid) -> String {
    format!("/s/{id}/")
}

/// One page of jobs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct JobPage {
    /// Newest first.
    pub jobs: Vec<JobView>,
    /// 1-based page number.
    pub page: i64,
    /// Page size.
    pub per_page: i64,
    /// Jobs matching the filter.
    pub total: i64,
    /// The arrays some of this page's jobs are elements of, counted whole (an array's elements
    /// may be spread over several pages).
    #[serde(default)]
    pub arrays: Vec<super::batch::ArraySummary>,
}

/// Answer to a submission or cancellation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct JobAck {
    /// The job (of an array: its first element).
    pub job_id: Uuid,
    /// Its status after the request.
    pub status: JobStatus,
    /// The array the submission made, when it asked for an `array` or a `sweep`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array_id: Option<Uuid>,
    /// Every job the submission made, in index order, when it made an array.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_ids: Option<Vec<Uuid>>,
}

impl JobAck {
    /// The answer about one job.
    pub fn one(job_id: Uuid, status: JobStatus) -> JobAck {
        JobAck {
            job_id,
            status,
            array_id: None,
            job_ids: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_round_trip() {
        for &s in JobStatus::ALL {
            assert_eq!(s.as_str().parse::<JobStatus>(), Ok(s));
            assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
        }
        assert!("done".parse::<JobStatus>().is_err());
        assert!(JobStatus::TimedOut.is_terminal());
        assert!(!JobStatus::Running.is_terminal());
    }
}
