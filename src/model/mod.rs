//! Types shared by the browser and the server: what crosses the wire.

mod admin;
mod dashboard;
mod error;
mod gpu;
mod job;
mod policy;
pub mod spec;
mod status;
mod usage;
mod user;

pub use admin::{AuditEntry, CreatedToken, ManifestState, TokenView};
pub use dashboard::{DashboardView, JobDetail, JobEventView, Preview};
pub use error::AppError;
pub use gpu::{
    gpu_id, human_duration, parse_gpu_id, GpuHolder, GpuView, ManifestView, WorkloadView,
};
pub use job::{AssignedGpu, JobAck, JobPage, JobStatus, JobView};
pub use policy::{glob_match, LaunchPolicy, VolumeRule};
pub use status::StatusView;
pub use usage::{
    CardPoint, CardSeries, UsageCharts, UsageReport, UsageTotal, UsageView, WaitBucket, WaitStats,
    CUSTOM_VRAM,
};
pub use user::{Role, UserView, Username};
