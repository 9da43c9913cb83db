//! Repository for users, API tokens and failed sign-ins. SQL lives here and nowhere above it.

use crate::model::{Role, UserView};
use chrono::{DateTime, Utc};
use sqlx::{FromRow, PgExecutor};
use uuid::Uuid;

/// A `users` row as stored.
#[derive(Debug, Clone, FromRow)]
pub struct UserRow {
    /// Key.
    pub id: Uuid,
    /// Login name.
    pub username: String,
    /// PHC string of the argon2id hash.
    pub password_hash: String,
    /// Role as stored (`member`, `manager`, `admin`).
    pub role: String,
    /// Set when an admin disabled the account: sessions and tokens stop working.
    pub disabled_at: Option<DateTime<Utc>>,
    /// Browser sessions signed in before this are refused (set by a password change).
    pub sessions_valid_after: Option<DateTime<Utc>>,
}

impl UserRow {
    /// The role, refusing a value the schema should never have allowed.
    pub fn role(&self) -> Result<Role, sqlx::Error> {
        self.role
            .parse()
            .map_err(|e: String| sqlx::Error::Decode(e.into()))
    }

    /// The wire view of this user.
    pub fn view(&self) -> Result<UserView, sqlx::Error> {
        Ok(UserView {
            id: self.id,
            username: self.username.clone(),
            role: self.role()?,
            disabled: self.disabled_at.is_some(),
        })
    }
}

const USER_COLUMNS: &str = "id, username, password_hash, role, disabled_at, sessions_valid_after";

/// Looks a user up by login name.
pub async fn by_name(db: impl PgExecutor<'_>, username: &str) -> sqlx::Result<Option<UserRow>> {
    sqlx::query_as(&format!(
        "SELECT {USER_COLUMNS} FROM users WHERE username = $1"
    ))
    .bind(username)
    .fetch_optional(db)
    .await
}

/// Looks an enabled user up by id (a disabled user is as good as gone for authentication).
pub async fn active_by_id(db: impl PgExecutor<'_>, id: Uuid) -> sqlx::Result<Option<UserRow>> {
    sqlx::query_as(&format!(
        "SELECT {USER_COLUMNS} FROM users WHERE id = $1 AND disabled_at IS NULL"
    ))
    .bind(id)
    .fetch_optional(db)
    .await
}

/// Creates a user; a duplicate name is a unique-violation error for the caller to map.
pub async fn insert(
    db: impl PgExecutor<'_>,
    username: &str,
    password_hash: &str,
    role: Role,
) -> sqlx::Result<UserRow> {
    sqlx::query_as(&format!(
        "INSERT INTO users (username, password_hash, role) VALUES ($1, $2, $3) \
         RETURNING {USER_COLUMNS}"
    ))
    .bind(username)
    .bind(password_hash)
    .bind(role.as_str())
    .fetch_one(db)
    .await
}

/// Number of users (zero on first start).
pub async fn count(db: impl PgExecutor<'_>) -> sqlx::Result<i64> {
    sqlx::query_scalar("SELECT count(*) FROM users")
        .fetch_one(db)
        .await
}

/// How many users are not disabled.
pub async fn count_active(db: impl PgExecutor<'_>) -> sqlx::Result<i64> {
    sqlx::query_scalar("SELECT count(*) FROM users WHERE disabled_at IS NULL")
        .fetch_one(db)
        .await
}

/// Every user, by name.
pub async fn list(db: impl PgExecutor<'_>) -> sqlx::Result<Vec<UserRow>> {
    sqlx::query_as(&format!(
        "SELECT {USER_COLUMNS} FROM users ORDER BY username"
    ))
    .fetch_all(db)
    .await
}

/// Disables or re-enables a user. Returns whether the user exists.
pub async fn set_disabled(db: impl PgExecutor<'_>, id: Uuid, disabled: bool) -> sqlx::Result<bool> {
    let res = sqlx::query(
        "UPDATE users SET disabled_at = CASE WHEN $2 THEN coalesce(disabled_at, now()) END \
         WHERE id = $1",
    )
    .bind(id)
    .bind(disabled)
    .execute(db)
    .await?;
    Ok(res.rows_affected() == 1)
}

/// Changes a user's role. Returns whether the user exists.
pub async fn set_role(db: impl PgExecutor<'_>, id: Uuid, role: Role) -> sqlx::Result<bool> {
    let res = sqlx::query("UPDATE users SET role = $2 WHERE id = $1")
        .bind(id)
        .bind(role.as_str())
        .execute(db)
        .await?;
    Ok(res.rows_affected() == 1)
}

/// Replaces a user's password hash and ends their browser sessions signed in before now; returns
/// that moment (the database's clock), to re-stamp the session that made the change.
pub async fn set_password_hash(
    db: impl PgExecutor<'_>,
    id: Uuid,
    hash: &str,
) -> sqlx::Result<DateTime<Utc>> {
    sqlx::query_scalar(
        "UPDATE users SET password_hash = $2, sessions_valid_after = clock_timestamp() \
         WHERE id = $1 RETURNING sessions_valid_after",
    )
    .bind(id)
    .bind(hash)
    .fetch_one(db)
    .await
}

/// A user by id, enabled or not.
pub async fn by_id(db: impl PgExecutor<'_>, id: Uuid) -> sqlx::Result<Option<UserRow>> {
    sqlx::query_as(&format!("SELECT {USER_COLUMNS} FROM users WHERE id = $1"))
        .bind(id)
        .fetch_optional(db)
        .await
}

/// Records one failed sign-in for a name.
pub async fn record_failure(db: impl PgExecutor<'_>, username: &str) -> sqlx::Result<()> {
    sqlx::query("INSERT INTO login_attempts (username) VALUES ($1)")
        .bind(username)
        .execute(db)
        .await?;
    Ok(())
}

/// Failed sign-ins for a name since `since`, and the oldest of them.
pub async fn failures_since(
    db: impl PgExecutor<'_>,
    username: &str,
    since: DateTime<Utc>,
) -> sqlx::Result<(i64, Option<DateTime<Utc>>)> {
    sqlx::query_as("SELECT count(*), min(at) FROM login_attempts WHERE username = $1 AND at > $2")
        .bind(username)
        .bind(since)
        .fetch_one(db)
        .await
}

/// Forgets a name's failures after a successful sign-in, and prunes old rows.
pub async fn clear_failures(
    db: impl PgExecutor<'_>,
    username: &str,
    older_than: DateTime<Utc>,
) -> sqlx::Result<()> {
    sqlx::query("DELETE FROM login_attempts WHERE username = $1 OR at < $2")
        .bind(username)
        .bind(older_than)
        .execute(db)
        .await?;
    Ok(())
}

/// An `api_tokens` row without its digest.
#[derive(Debug, Clone, FromRow)]
pub struct TokenRow {
    /// Key, used to revoke.
    pub id: Uuid,
    /// Owner.
    pub user_id: Uuid,
    /// Label the owner chose.
    pub name: String,
    /// When it was made.
    pub created_at: DateTime<Utc>,
    /// Last request it authenticated.
    pub last_used_at: Option<DateTime<Utc>>,
    /// When it was revoked.
    pub revoked_at: Option<DateTime<Utc>>,
}

impl TokenRow {
    /// The owner's view of the token.
    pub fn view(self) -> crate::model::TokenView {
        crate::model::TokenView {
            id: self.id,
            name: self.name,
            created_at: self.created_at,
            last_used_at: self.last_used_at,
            revoked_at: self.revoked_at,
        }
    }
}

/// Stores a new token's digest.
pub async fn insert_token(
    db: impl PgExecutor<'_>,
    user_id: Uuid,
    name: &str,
    digest: &[u8],
) -> sqlx::Result<TokenRow> {
    sqlx::query_as(
        "INSERT INTO api_tokens (user_id, name, token_sha256) VALUES ($1, $2, $3) \
         RETURNING id, user_id, name, created_at, last_used_at, revoked_at",
    )
    .bind(user_id)
    .bind(name)
    .bind(digest)
    .fetch_one(db)
    .await
}

/// The enabled user owning a live token with this digest, marking the token used.
pub async fn user_by_token(
    db: impl PgExecutor<'_>,
    digest: &[u8],
) -> sqlx::Result<Option<UserRow>> {
    sqlx::query_as(
        "WITH t AS (UPDATE api_tokens SET last_used_at = now() \
                    WHERE token_sha256 = $1 AND revoked_at IS NULL RETURNING user_id) \
         SELECT u.id, u.username, u.password_hash, u.role, u.disabled_at, u.sessions_valid_after \
         FROM users u JOIN t ON t.user_id = u.id WHERE u.disabled_at IS NULL",
    )
    .bind(digest)
    .fetch_optional(db)
    .await
}

/// A user's tokens, newest first.
pub async fn tokens_of(db: impl PgExecutor<'_>, user_id: Uuid) -> sqlx::Result<Vec<TokenRow>> {
    sqlx::query_as(
        "SELECT id, user_id, name, created_at, last_used_at, revoked_at FROM api_tokens \
         WHERE user_id = $1 ORDER BY created_at DESC",
    )
    .bind(user_id)
    .fetch_all(db)
    .await
}

/// Revokes a token of this user. Returns whether a live token was revoked.
pub async fn revoke_token(db: impl PgExecutor<'_>, user_id: Uuid, id: Uuid) -> sqlx::Result<bool> {
    let res = sqlx::query(
        "UPDATE api_tokens SET revoked_at = now() \
         WHERE id = $1 AND user_id = $2 AND revoked_at IS NULL",
    )
    .bind(id)
    .bind(user_id)
    .execute(db)
    .await?;
    Ok(res.rows_affected() == 1)
}
