//! The rules of signing in and of accounts, shared by the UI's server functions, the REST API and
//! the CLI: one rule, several front doors.

use super::{password, tokens};
use crate::model::{AppError, CreatedToken, Role, TokenView, Username};
use crate::server::db::users::{self, TokenRow, UserRow};
use crate::server::error::OrInternal;
use chrono::{DateTime, Duration, Utc};
use sqlx::PgPool;
use uuid::Uuid;

/// Failed sign-ins allowed per name within [`THROTTLE_WINDOW_MIN`] before further tries are refused.
pub const MAX_FAILURES: i64 = 5;
/// Length of the throttling window, in minutes.
pub const THROTTLE_WINDOW_MIN: i64 = 15;

/// Checks a name and password. Failures are counted per name tried (whether or not such a user
/// exists) and, past [`MAX_FAILURES`], refused without checking the password at all.
pub async fn login(
    pool: &PgPool,
    username: &str,
    password: &str,
    now: DateTime<Utc>,
) -> Result<UserRow, AppError> {
    let key: String = username.trim().to_lowercase().chars().take(64).collect();
    let window = Duration::minutes(THROTTLE_WINDOW_MIN);
    let (failures, oldest) = users::failures_since(pool, &key, now - window)
        .await
        .or_internal("reading sign-in failures")?;
    if failures >= MAX_FAILURES {
        let until = oldest.unwrap_or(now) + window;
        let retry_after_s = (until - now).num_seconds().max(1) as u64;
        return Err(AppError::Throttled { retry_after_s });
    }
    let user = match Username::parse(&key) {
        Ok(name) => users::by_name(pool, name.as_str())
            .await
            .or_internal("looking up a user")?,
        Err(_) => None,
    };
    let ok = password::verify(
        password.to_owned(),
        user.as_ref().map(|u| u.password_hash.clone()),
    )
    .await?;
    match user {
        Some(user) if ok => {
            if user.disabled_at.is_some() {
                return Err(AppError::Forbidden("this account is disabled".into()));
            }
            users::clear_failures(pool, &key, now - window)
                .await
                .or_internal("clearing sign-in failures")?;
            Ok(user)
        }
        _ => {
            users::record_failure(pool, &key)
                .await
                .or_internal("recording a sign-in failure")?;
            Err(AppError::BadCredentials)
        }
    }
}

/// Creates a user after checking name, role and password policy.
pub async fn add_user(
    pool: &PgPool,
    username: &str,
    role: Role,
    password: &str,
) -> Result<UserRow, AppError> {
    let name = Username::parse(username).map_err(|m| AppError::invalid("username", m))?;
    password::check_policy(password)?;
    let hash = password::hash(password.to_owned()).await?;
    match users::insert(pool, name.as_str(), &hash, role).await {
        Ok(row) => Ok(row),
        Err(sqlx::Error::Database(db)) if db.is_unique_violation() => Err(AppError::Conflict(
            format!("a user named `{name}` already exists"),
        )),
        Err(e) => Err(e).or_internal("creating a user"),
    }
}

/// On first start (no users at all) creates `admin`. Returns the generated password when none was
/// configured, so the caller can print it once.
pub async fn bootstrap_admin(
    pool: &PgPool,
    configured: Option<&str>,
) -> Result<Option<String>, AppError> {
    if users::count(pool).await.or_internal("counting users")? > 0 {
        return Ok(None);
    }
    let generated = configured.is_none().then(|| {
        let t = tokens::generate();
        t[tokens::PREFIX.len()..tokens::PREFIX.len() + 20].to_owned()
    });
    let password = configured.or(generated.as_deref()).unwrap_or_default();
    match add_user(pool, "admin", Role::Admin, password).await {
        Ok(_) => Ok(generated),
        // Another gpuq process bootstrapped at the same moment: its admin stands.
        Err(AppError::Conflict(_)) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Creates an API token for a user; the secret is in the answer this once.
pub async fn create_token(
    pool: &PgPool,
    user_id: Uuid,
    name: &str,
) -> Result<CreatedToken, AppError> {
    let name = name.trim();
    if name.is_empty() || name.chars().count() > 128 {
        return Err(AppError::invalid(
            "name",
            "token name must be 1 to 128 characters",
        ));
    }
    let token = tokens::generate();
    let record = users::insert_token(pool, user_id, name, &tokens::digest(&token))
        .await
        .or_internal("storing a token")?;
    Ok(CreatedToken {
        token,
        record: record.view(),
    })
}

/// A user's tokens, newest first (never the secrets).
pub async fn list_tokens(pool: &PgPool, user_id: Uuid) -> Result<Vec<TokenView>, AppError> {
    let rows = users::tokens_of(pool, user_id)
        .await
        .or_internal("listing tokens")?;
    Ok(rows.into_iter().map(TokenRow::view).collect())
}

/// The enabled user a bearer token belongs to, if it is live.
pub async fn user_for_token(pool: &PgPool, token: &str) -> Result<Option<UserRow>, AppError> {
    if !token.starts_with(tokens::PREFIX) {
        return Ok(None);
    }
    users::user_by_token(pool, &tokens::digest(token))
        .await
        .or_internal("looking up a token")
}

/// Revokes one of the caller's tokens.
pub async fn revoke_token(pool: &PgPool, user_id: Uuid, token_id: Uuid) -> Result<(), AppError> {
    if users::revoke_token(pool, user_id, token_id)
        .await
        .or_internal("revoking a token")?
    {
        Ok(())
    } else {
        Err(AppError::NotFound(format!(
            "no live token {token_id} of yours"
        )))
    }
}

/// Makes a browser session the user's: a fresh session id (no fixation), the user and the moment
/// of sign-in (sessions from before a password change end).
pub async fn start_session(
    session: &tower_sessions::Session,
    user_id: Uuid,
) -> Result<(), AppError> {
    session
        .cycle_id()
        .await
        .or_internal("rotating the session id")?;
    session
        .insert(super::SESSION_USER_KEY, user_id)
        .await
        .or_internal("writing the session")?;
    session
        .insert(super::SESSION_SINCE_KEY, chrono::Utc::now())
        .await
        .or_internal("writing the session")
}

/// Ends a browser session.
pub async fn end_session(session: &tower_sessions::Session) -> Result<(), AppError> {
    session.flush().await.or_internal("ending the session")
}
