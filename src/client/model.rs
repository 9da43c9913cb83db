//! Response types of the gpuq REST API.
//!
//! Every struct tolerates unknown extra fields and missing optional ones so
//! that a newer server does not break an older client.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::Deserialize;
use uuid::Uuid;

/// A job as returned by `GET /api/v1/jobs/{id}` and in job lists.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct JobView {
    /// Job identifier.
    pub id: Uuid,
    /// Server-assigned sequence number.
    pub seq: u64,
    /// Human name of the job.
    pub name: Option<String>,
    /// Owning user name.
    pub owner: String,
    /// Lifecycle status (`queued`, `running`, ...).
    pub status: String,
    /// Why the job is in its status, when the server says.
    pub status_reason: Option<String>,
    /// Container image.
    pub image: String,
    /// Command argv.
    pub command: Vec<String>,
    /// Number of GPUs requested.
    pub gpu_count: u32,
    /// Named workload profile, if any.
    pub workload: Option<String>,
    /// Minimum free VRAM per GPU, in MB.
    pub min_vram_mb: Option<u64>,
    /// Whether the job wants its GPUs to itself.
    pub exclusive: bool,
    /// Scheduling priority.
    pub priority: i64,
    /// Run-time limit in seconds.
    pub timeout_s: Option<u64>,
    /// Environment variables.
    pub env: Option<BTreeMap<String, String>>,
    /// Volume mounts, `host:container[:ro]`.
    pub volumes: Vec<String>,
    /// Node the job was placed on.
    pub node: Option<String>,
    /// GPUs assigned to the job.
    pub assigned_gpus: Vec<AssignedGpu>,
    /// Exit code of the finished job.
    pub exit_code: Option<i64>,
    /// Submission time.
    pub created_at: Option<DateTime<Utc>>,
    /// Admission time.
    pub admitted_at: Option<DateTime<Utc>>,
    /// Start time.
    pub started_at: Option<DateTime<Utc>>,
    /// Finish time.
    pub finished_at: Option<DateTime<Utc>>,
    /// Time its GPUs were released.
    pub released_at: Option<DateTime<Utc>>,
    /// Position in the queue (1 = next), for queued jobs.
    pub queue_position: Option<u64>,
    /// Why a queued job is still waiting.
    pub wait_reason: Option<String>,
    /// Someone else's job: command, volumes and status details were left out.
    #[serde(default)]
    pub details_hidden: bool,
    /// Its node is lost: it is not started elsewhere and keeps its cards.
    #[serde(default)]
    pub node_lost: bool,
}

/// A GPU assigned to a job.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct AssignedGpu {
    /// GPU UUID (`GPU-…`).
    pub uuid: String,
    /// Device index on its node.
    pub index: u32,
    /// Model name.
    pub model: String,
    /// VRAM reserved for the job, in MiB.
    pub vram_mib: u64,
}

/// One page of `GET /api/v1/jobs`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct JobList {
    /// Jobs on this page, newest first.
    pub jobs: Vec<JobView>,
    /// Page number (1-based).
    pub page: u64,
    /// Page size.
    pub per_page: u64,
    /// Number of jobs matching the filter, all pages together.
    pub total: u64,
}

/// A GPU as returned by `GET /api/v1/gpus`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct GpuView {
    /// GPU UUID.
    pub uuid: String,
    /// Node name.
    pub node: String,
    /// Device index on its node.
    pub index: u32,
    /// Model name.
    pub model: String,
    /// `online`, `draining` or `offline`.
    pub state: String,
    /// Total memory, MiB.
    pub total_mib: i64,
    /// Memory reserved by gpuq jobs, MiB.
    pub reserved_mib: i64,
    /// Memory used outside gpuq, MiB.
    pub external_mib: i64,
    /// Measured used memory, MiB, when known.
    pub used_mib: Option<i64>,
    /// Memory still free for admission, MiB.
    pub free_mib: i64,
    /// Whether the GPU is simulated.
    pub simulated: bool,
    /// Jobs holding memory on this GPU.
    pub jobs: Vec<GpuJob>,
}

/// A job holding memory on a GPU.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct GpuJob {
    /// Job identifier.
    pub id: Uuid,
    /// Job name.
    pub name: Option<String>,
    /// Owning user.
    pub owner: String,
    /// Memory reserved, MiB.
    pub vram_mib: i64,
}

/// Body of `GET /api/v1/gpus`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct GpuList {
    /// All known GPUs.
    pub gpus: Vec<GpuView>,
}

/// A node as `GET /api/v1/nodes` lists it.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct NodeView {
    /// Name (`--node`).
    pub name: String,
    /// `up`, `drained` or `lost`.
    pub state: String,
    /// Seconds since its last heartbeat.
    pub heartbeat_age_s: i64,
    /// gpuq version it runs.
    pub version: String,
    /// Where it is reached.
    pub advertise_url: String,
    /// Whether it launches jobs.
    pub runs_jobs: bool,
    /// Its cards.
    pub cards: i64,
    /// Its starting or running jobs.
    pub running_jobs: i64,
}

/// Answer to job submission and cancellation.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct JobStatusResponse {
    /// Job identifier.
    pub job_id: Uuid,
    /// Status after the request.
    pub status: String,
}

/// Answer to `POST /api/v1/tokens`.
#[derive(Clone, Default, Deserialize)]
#[serde(default)]
pub struct TokenResponse {
    /// The secret token.
    pub token: String,
    /// Token identifier.
    pub id: Option<Uuid>,
    /// Token name.
    pub name: Option<String>,
}

impl std::fmt::Debug for TokenResponse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenResponse")
            .field("token", &"<redacted>")
            .field("id", &self.id)
            .field("name", &self.name)
            .finish()
    }
}
