//! Repository for sign-in attempts (`login_attempts`). An attempt is recorded *before* its password
//! is checked, so parallel guesses see each other; a refused attempt is taken back, a proved one is
//! marked `ok`. Attempts are counted per (name, client), per name and per client.

use chrono::{DateTime, Utc};
use sqlx::{FromRow, PgExecutor};

/// What the other recent attempts say about one new attempt.
#[derive(Debug, Clone, Copy, FromRow)]
pub struct Standing {
    /// Failed (or still unproved) attempts on this name from this client since the window start,
    /// this one excluded.
    pub pair_failures: i64,
    /// The newest of them.
    pub pair_last: Option<DateTime<Utc>>,
    /// Failed (or still unproved) attempts on this name from any client since the window start,
    /// this one excluded.
    pub name_failures: i64,
    /// The newest of them.
    pub name_last: Option<DateTime<Utc>>,
    /// Failed (or still unproved) attempts from this client address since the window start, this
    /// one excluded.
    pub client_failures: i64,
    /// The oldest of them (the bucket refills when it leaves the window).
    pub client_oldest: Option<DateTime<Utc>>,
}

/// Records an attempt on `username` from `client` (committed at once, so every concurrent attempt
/// that counts after this sees it); returns its id.
pub async fn record(db: impl PgExecutor<'_>, username: &str, client: &str) -> sqlx::Result<i64> {
    sqlx::query_scalar("INSERT INTO login_attempts (username, client) VALUES ($1, $2) RETURNING id")
        .bind(username)
        .bind(client)
        .fetch_one(db)
        .await
}

/// The other attempts on this name and from this client since `since` that are not proved right.
/// With an unknown client (empty) the pair is the name.
pub async fn standing(
    db: impl PgExecutor<'_>,
    id: i64,
    username: &str,
    client: &str,
    since: DateTime<Utc>,
) -> sqlx::Result<Standing> {
    sqlx::query_as(
        "SELECT count(*) FILTER (WHERE username = $2 AND client = $3) AS pair_failures, \
                max(at) FILTER (WHERE username = $2 AND client = $3) AS pair_last, \
                count(*) FILTER (WHERE username = $2) AS name_failures, \
                max(at) FILTER (WHERE username = $2) AS name_last, \
                count(*) FILTER (WHERE client = $3) AS client_failures, \
                min(at) FILTER (WHERE client = $3) AS client_oldest \
         FROM login_attempts \
         WHERE id <> $1 AND NOT ok AND at > $4 AND (username = $2 OR client = $3)",
    )
    .bind(id)
    .bind(username)
    .bind(client)
    .bind(since)
    .fetch_one(db)
    .await
}

/// Takes back an attempt that was refused before its password was checked: refusals neither count
/// as guesses nor prolong anyone's backoff.
pub async fn withdraw(db: impl PgExecutor<'_>, id: i64) -> sqlx::Result<()> {
    sqlx::query("DELETE FROM login_attempts WHERE id = $1")
        .bind(id)
        .execute(db)
        .await?;
    Ok(())
}

/// Marks an attempt as proved right and forgets this client's earlier failures on the name (its
/// backoff starts over; other clients' failures stand, so the owner signing in does not reset an
/// attacker's backoff); also prunes rows older than `older_than`.
pub async fn succeeded(
    db: impl PgExecutor<'_>,
    id: i64,
    username: &str,
    client: &str,
    older_than: DateTime<Utc>,
) -> sqlx::Result<()> {
    sqlx::query(
        "WITH mark AS (UPDATE login_attempts SET ok = true WHERE id = $1) \
         DELETE FROM login_attempts \
         WHERE id <> $1 AND ((username = $2 AND client = $4 AND NOT ok) OR at < $3)",
    )
    .bind(id)
    .bind(username)
    .bind(older_than)
    .bind(client)
    .execute(db)
    .await?;
    Ok(())
}
