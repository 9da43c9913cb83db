//! The server status probe shown on the dashboard.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Result of a live status check.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatusView {
    /// Round trip of a database query, in milliseconds.
    pub database_ms: f64,
    /// Users who may sign in.
    pub active_users: i64,
    /// When the check ran (server clock).
    pub checked_at: DateTime<Utc>,
}
