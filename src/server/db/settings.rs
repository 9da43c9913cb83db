//! The `settings` table: one JSON document per key.

use crate::model::LaunchPolicy;
use sqlx::PgExecutor;

const LAUNCH_POLICY: &str = "launch_policy";

/// The launch policy, or the defaults when none was saved.
pub async fn launch_policy(db: impl PgExecutor<'_>) -> sqlx::Result<LaunchPolicy> {
    let value: Option<serde_json::Value> =
        sqlx::query_scalar("SELECT value FROM settings WHERE key = $1")
            .bind(LAUNCH_POLICY)
            .fetch_optional(db)
            .await?;
    match value {
        Some(v) => serde_json::from_value(v).map_err(|e| sqlx::Error::Decode(Box::new(e))),
        None => Ok(LaunchPolicy::default()),
    }
}

/// Saves the launch policy.
pub async fn save_launch_policy(
    db: impl PgExecutor<'_>,
    policy: &LaunchPolicy,
) -> sqlx::Result<()> {
    let value = serde_json::to_value(policy).map_err(|e| sqlx::Error::Encode(Box::new(e)))?;
    sqlx::query(
        "INSERT INTO settings (key, value) VALUES ($1, $2) \
         ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, updated_at = now()",
    )
    .bind(LAUNCH_POLICY)
    .bind(value)
    .execute(db)
    .await?;
    Ok(())
}
