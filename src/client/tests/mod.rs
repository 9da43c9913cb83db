//! Unit tests of the client module.

mod api;
mod cli;
mod credentials;
mod render;
mod request;

use chrono::{DateTime, Utc};

/// The fixed "now" the fixtures are rendered at.
fn now() -> DateTime<Utc> {
    "2025-01-01T12:00:00Z".parse().expect("valid time")
}
