//! Repository for registry credentials (`registry_credentials`): the password only ever as the
//! sealed bytes `server::registries` made; this module neither seals nor opens.

use chrono::{DateTime, Utc};
use sqlx::{FromRow, PgExecutor};

/// One row.
#[derive(Clone, FromRow)]
pub struct CredentialRow {
    /// The registry host.
    pub host: String,
    /// The account.
    pub username: String,
    /// Nonce, ciphertext and tag of the password.
    pub sealed: Vec<u8>,
    /// When set.
    pub set_at: DateTime<Utc>,
    /// By whom.
    pub set_by: String,
}

/// Never the sealed bytes: a row in a log line or a panic says whose it is, nothing more.
impl std::fmt::Debug for CredentialRow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CredentialRow")
            .field("host", &self.host)
            .field("username", &self.username)
            .field("set_at", &self.set_at)
            .field("set_by", &self.set_by)
            .finish_non_exhaustive()
    }
}

/// Sets (or replaces) the credentials of `host`.
pub async fn upsert(
    db: impl PgExecutor<'_>,
    host: &str,
    username: &str,
    sealed: &[u8],
    set_by: &str,
) -> sqlx::Result<CredentialRow> {
    sqlx::query_as(
        "INSERT INTO registry_credentials (host, username, sealed, set_by) VALUES ($1, $2, $3, $4) \
         ON CONFLICT (host) DO UPDATE SET username = EXCLUDED.username, sealed = EXCLUDED.sealed, \
         set_by = EXCLUDED.set_by, set_at = clock_timestamp() \
         RETURNING host, username, sealed, set_at, set_by",
    )
    .bind(host)
    .bind(username)
    .bind(sealed)
    .bind(set_by)
    .fetch_one(db)
    .await
}

/// Every row, by host.
pub async fn list(db: impl PgExecutor<'_>) -> sqlx::Result<Vec<CredentialRow>> {
    sqlx::query_as(
        "SELECT host, username, sealed, set_at, set_by FROM registry_credentials ORDER BY host",
    )
    .fetch_all(db)
    .await
}

/// The row of `host`, if any.
pub async fn of_host(db: impl PgExecutor<'_>, host: &str) -> sqlx::Result<Option<CredentialRow>> {
    sqlx::query_as(
        "SELECT host, username, sealed, set_at, set_by FROM registry_credentials WHERE host = $1",
    )
    .bind(host)
    .fetch_optional(db)
    .await
}

/// Removes the row of `host`; whether there was one.
pub async fn remove(db: impl PgExecutor<'_>, host: &str) -> sqlx::Result<bool> {
    let done = sqlx::query("DELETE FROM registry_credentials WHERE host = $1")
        .bind(host)
        .execute(db)
        .await?;
    Ok(done.rows_affected() == 1)
}
