//! Repository for users and API tokens (sign-in attempts are in `logins`). SQL lives here and nowhere above it.

use crate::model::{Budget, BudgetKind, BudgetPeriod, Role, UserView};
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
    /// The team the user belongs to.
    pub team: String,
    /// The user's share weight within their team.
    pub weight: f64,
    /// The user's budget: GPU-hours per period (all three budget columns or none).
    pub budget_gpu_hours: Option<f64>,
    /// The budget's period.
    pub budget_period: Option<BudgetPeriod>,
    /// The budget's kind.
    pub budget_kind: Option<BudgetKind>,
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
            team: self.team.clone(),
            weight: self.weight,
            budget: budget_of(self.budget_gpu_hours, self.budget_period, self.budget_kind),
        })
    }
}

/// A budget from its three columns (the schema keeps them all set or all null).
pub fn budget_of(
    gpu_hours: Option<f64>,
    period: Option<BudgetPeriod>,
    kind: Option<BudgetKind>,
) -> Option<Budget> {
    Some(Budget {
        gpu_hours: gpu_hours?,
        period: period?,
        kind: kind?,
    })
}

const USER_COLUMNS: &str = "id, username, password_hash, role, disabled_at, sessions_valid_after, \
                            team, weight, budget_gpu_hours, budget_period, budget_kind";

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
    /// When it stops working, if it expires.
    pub expires_at: Option<DateTime<Utc>>,
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
            expires_at: self.expires_at,
            expired: self.expires_at.is_some_and(|t| t <= Utc::now()),
        }
    }
}

const TOKEN_COLUMNS: &str = "id, user_id, name, created_at, last_used_at, revoked_at, expires_at";

/// Stores a new token's digest; it expires after `expires_in_days` when given.
pub async fn insert_token(
    db: impl PgExecutor<'_>,
    user_id: Uuid,
    name: &str,
    digest: &[u8],
    expires_in_days: Option<u32>,
) -> sqlx::Result<TokenRow> {
    sqlx::query_as(&format!(
        "INSERT INTO api_tokens (user_id, name, token_sha256, expires_at) \
         VALUES ($1, $2, $3, now() + make_interval(days => $4)) RETURNING {TOKEN_COLUMNS}"
    ))
    .bind(user_id)
    .bind(name)
    .bind(digest)
    .bind(expires_in_days.map(|d| d as i32))
    .fetch_one(db)
    .await
}

/// The owner of a live token, and which token it was.
#[derive(Debug, Clone, FromRow)]
pub struct TokenOwner {
    /// The enabled user owning the token.
    #[sqlx(flatten)]
    pub user: UserRow,
    /// The token's key.
    pub token_id: Uuid,
    /// The token's label.
    pub token_name: String,
    /// When the token was used before this request.
    pub previous_use: Option<DateTime<Utc>>,
}

/// The enabled user owning a live (not revoked, not expired) token with this digest, marking the
/// token used.
pub async fn user_by_token(
    db: impl PgExecutor<'_>,
    digest: &[u8],
) -> sqlx::Result<Option<TokenOwner>> {
    sqlx::query_as(
        "WITH old AS (SELECT id, last_used_at FROM api_tokens \
                      WHERE token_sha256 = $1 AND revoked_at IS NULL \
                        AND (expires_at IS NULL OR expires_at > now()) FOR UPDATE), \
              t AS (UPDATE api_tokens a SET last_used_at = now() FROM old WHERE a.id = old.id \
                    RETURNING a.id, a.user_id, a.name, old.last_used_at) \
         SELECT u.id, u.username, u.password_hash, u.role, u.disabled_at, u.sessions_valid_after, \
                u.team, u.weight, u.budget_gpu_hours, u.budget_period, u.budget_kind, \
                t.id AS token_id, t.name AS token_name, t.last_used_at AS previous_use \
         FROM users u JOIN t ON t.user_id = u.id WHERE u.disabled_at IS NULL",
    )
    .bind(digest)
    .fetch_optional(db)
    .await
}

/// A user's tokens, newest first.
pub async fn tokens_of(db: impl PgExecutor<'_>, user_id: Uuid) -> sqlx::Result<Vec<TokenRow>> {
    sqlx::query_as(&format!(
        "SELECT {TOKEN_COLUMNS} FROM api_tokens WHERE user_id = $1 ORDER BY created_at DESC"
    ))
    .bind(user_id)
    .fetch_all(db)
    .await
}

/// Revokes a token of this user. Returns the name of the live token revoked, if there was one.
pub async fn revoke_token(
    db: impl PgExecutor<'_>,
    user_id: Uuid,
    id: Uuid,
) -> sqlx::Result<Option<String>> {
    sqlx::query_scalar(
        "UPDATE api_tokens SET revoked_at = now() \
         WHERE id = $1 AND user_id = $2 AND revoked_at IS NULL RETURNING name",
    )
    .bind(id)
    .bind(user_id)
    .fetch_optional(db)
    .await
}
