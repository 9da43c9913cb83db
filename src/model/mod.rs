//! Types shared by the browser and the server: what crosses the wire.

mod admin;
pub mod batch;
mod budget;
mod budget_use;
mod dashboard;
mod error;
mod events;
mod fairness;
mod gpu;
pub mod image_ref;
mod job;
mod node;
mod notify;
mod policy;
mod registry;
mod secret;
pub mod spec;
mod status;
mod suggest;
mod team;
mod usage;
mod user;
pub(crate) mod vocab;

pub use admin::{AuditEntry, CreatedToken, ManifestState, TokenView};
pub use budget::{
    check_team_name, check_weight, parse_weight, Budget, BudgetKind, BudgetPeriod, DEFAULT_TEAM,
    MAX_BUDGET_GPU_HOURS, MAX_WEIGHT,
};
pub use budget_use::{used_up as budget_used_up, BudgetScope, BudgetUse};
pub use dashboard::{DashboardView, IdleFlag, JobDetail, JobEventView, Preview};
pub use error::{AppError, LINK_TEXT};
pub use events::{AuditKind, JobChange, JobEventKind, LiveEvent};
pub use fairness::{FairShareReport, FairShareRow};
pub use gpu::{
    gpu_id, human_duration, parse_gpu_id, GpuHolder, GpuList, GpuState, GpuView, ManifestView,
    SkippedGpuView, WorkloadView,
};
pub use job::{
    queue_key, session_path, AssignedGpu, JobAck, JobPage, JobStatus, JobView, QueueKey, StopCause,
    QUEUE_ORDER_SQL,
};
pub use job::{Standing, SUBMIT_ORDER_SQL};
pub use node::{NodeState, NodeView, NODE_LOST_REASON};
pub use notify::{
    DeliveryState, DeliveryView, NotificationSettings, NotificationsPut, NotifyEvent,
    WebhookFormat, WebhookPut, WebhookView, DEFAULT_WAIT_MINUTES, MAX_WEBHOOKS, MIN_SECRET_LEN,
};
pub use policy::{
    glob_match, IdleAction, JobNetwork, LaunchPolicy, PullPolicy, VolumeRule, VramEnforcement,
    MAX_HALF_LIFE_H, MAX_IDLE_MIN,
};
pub use registry::{
    check_login, check_registry_host, registry_of_image, RegistryLogin, RegistryView,
    MAX_CREDENTIAL_LEN,
};
pub use secret::Secret;
pub use status::StatusView;
pub use suggest::{
    suggest, ImageSuggestion, ManifestSuggestions, Observed, PeakStats, WorkloadSuggestion,
    SUGGESTION_MARGIN_PERCENT, SUGGESTION_MIN_SAMPLES, SUGGESTION_ROUND_MIB,
};
pub use team::{present_field, NewTeam, TeamPatch, TeamView, UserShare};
pub use usage::{
    CardPoint, CardSeries, ReclaimedTotal, UsageCharts, UsageReport, UsageTotal, UsageView,
    WaitBucket, WaitStats, CUSTOM_VRAM,
};
pub use user::{is_plain_name, Role, UserView, Username};
