//! Nodes (the gpuq processes sharing one database) as the admin page, the REST API and the CLI see
//! them.

use super::vocab::vocabulary;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

vocabulary! {
    /// Whether a node takes work. `up` and `drained` are an admin's wish and hold until an admin
    /// changes them; `lost` is derived: the node has not heartbeated for its lost time (in
    /// database time), or an admin forgot it.
    pub enum NodeState {
        /// Heartbeating and taking new jobs.
        Up = "up",
        /// Heartbeating; runs its jobs out and takes no new ones.
        Drained = "drained",
        /// No heartbeat for its lost time, or forgotten: its cards take nothing.
        Lost = "lost",
    }
}

/// The `status_reason` of a job that ended because an admin forgot its lost node.
pub const NODE_LOST_REASON: &str = "node_lost";

/// A node as listed for operators.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema, sqlx::FromRow))]
pub struct NodeView {
    /// The node's name (`--node`).
    pub name: String,
    /// `up`, `drained` (an admin's wish) or `lost` (no heartbeat, or forgotten).
    pub state: NodeState,
    /// Seconds since its last heartbeat, in database time.
    pub heartbeat_age_s: i64,
    /// Seconds without a heartbeat after which it is lost.
    pub lost_after_s: i64,
    /// The gpuq version it runs.
    pub version: String,
    /// Where its HTTP edge is reached.
    pub advertise_url: String,
    /// Whether it launches jobs.
    pub runs_jobs: bool,
    /// Cards it has registered.
    pub cards: i64,
    /// Its jobs that are starting or running.
    pub running_jobs: i64,
    /// When an admin forgot it, if it has not registered since.
    pub forgotten_at: Option<DateTime<Utc>>,
}
