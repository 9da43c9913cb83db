//! The rules of signing in and of accounts, shared by the UI's server functions, the REST API and
//! the CLI: one rule, several front doors.

use super::password::{self, HashGate};
use super::tokens;
use crate::model::{AppError, AuditKind, CreatedToken, Role, TokenView, Username};
use crate::server::db::users::{self, TokenRow, UserRow};
use crate::server::db::{events, logins};
use crate::server::error::OrInternal;
use chrono::{DateTime, Duration, Utc};
use serde_json::json;
use sqlx::PgPool;
use uuid::Uuid;

/// Failed sign-ins per (name, client) within [`THROTTLE_WINDOW_MIN`] that are checked without
/// delay; past them, each further check from that client waits an exponentially growing delay
/// ([`backoff_s`]).
pub const MAX_FAILURES: i64 = 5;
/// Failed sign-ins on one name from all clients together within the window past which a client
/// that has itself failed on that name waits a growing delay too (guessing from many addresses). A
/// client that has not failed on the name is never held back by others' failures.
pub const NAME_MAX_FAILURES: i64 = 20;
/// How long a failure counts, in minutes.
pub const THROTTLE_WINDOW_MIN: i64 = 15;
/// The first backoff delay, in seconds, doubled by each further failure.
pub const BACKOFF_BASE_S: i64 = 30;
/// The longest backoff delay, in seconds: an attacker can hold nobody out for longer than this
/// after their last checked guess (there is no hard lockout).
pub const BACKOFF_MAX_S: i64 = 300;
/// Failed sign-ins (over all names) one client address may make within the window.
pub const CLIENT_MAX_FAILURES: i64 = 50;
/// A token's use is audited at most once per this many minutes (the first use always is).
pub const TOKEN_USE_AUDIT_EVERY_MIN: i64 = 10;
/// The longest token lifetime that may be asked for, in days.
pub const MAX_TOKEN_DAYS: u32 = 3650;

/// The delay, in seconds, a name must wait after its last failure once it has `failures` of them
/// within the window: none for the first [`MAX_FAILURES`], then [`BACKOFF_BASE_S`] doubling up to
/// [`BACKOFF_MAX_S`].
pub fn backoff_s(failures: i64) -> i64 {
    backoff_past(failures, MAX_FAILURES)
}

/// The delay after `failures` of which the first `free` cost nothing.
fn backoff_past(failures: i64, free: i64) -> i64 {
    if failures < free {
        return 0;
    }
    let doublings = (failures - free).min(16) as u32;
    (BACKOFF_BASE_S << doublings).min(BACKOFF_MAX_S)
}

/// Checks a name and password from the client address `client` (empty when unknown).
///
/// The attempt is recorded *before* anything is checked, and then the other recent attempts are
/// counted; so of any number of parallel guesses from one client, only those that find fewer than
/// [`MAX_FAILURES`] others on the name (or whose backoff has passed) reach the password check. A
/// refused attempt is taken back, so refusals never prolong the backoff. One client gets
/// [`CLIENT_MAX_FAILURES`] over all names; past [`NAME_MAX_FAILURES`] on one name from everywhere,
/// clients that failed on it back off too. Password checks go through the global [`HashGate`]
/// (503 when full). Checked attempts are audited. A disabled account's right password is answered
/// exactly as a wrong one (and counts as a failure), so the sign-in page does not tell a stranger
/// that the account exists; only the audit trail says why.
pub async fn login(
    pool: &PgPool,
    gate: &HashGate,
    username: &str,
    password: &str,
    client: &str,
    now: DateTime<Utc>,
) -> Result<UserRow, AppError> {
    let key: String = username.trim().to_lowercase().chars().take(64).collect();
    let client: String = client.chars().take(64).collect();
    let id = logins::record(pool, &key, &client)
        .await
        .or_internal("recording a sign-in attempt")?;
    let result = check_attempt(pool, gate, id, &key, password, &client, now).await;
    let audit = match &result {
        Ok(user) => {
            logins::succeeded(pool, id, &key, &client, now - Duration::days(1))
                .await
                .or_internal("recording a sign-in")?;
            Some((
                AuditKind::SignIn,
                user.username.clone(),
                json!({ "client": client }),
            ))
        }
        Err(AppError::BadCredentials) => Some((
            AuditKind::SignInFailed,
            "anonymous".to_owned(),
            json!({ "client": client, "reason": "bad_credentials" }),
        )),
        Err(AppError::Forbidden(_)) => Some((
            AuditKind::SignInFailed,
            key.clone(),
            json!({ "client": client, "reason": "disabled" }),
        )),
        Err(_) => {
            logins::withdraw(pool, id)
                .await
                .or_internal("withdrawing a refused sign-in attempt")?;
            None
        }
    };
    if let Some((kind, actor, detail)) = audit {
        events::audit(pool, &actor, kind, &key, detail)
            .await
            .or_internal("auditing a sign-in")?;
    }
    // `check_attempt` refuses with `Forbidden` only a disabled account's right password.
    result.map_err(|e| match e {
        AppError::Forbidden(_) => AppError::BadCredentials,
        e => e,
    })
}

/// The refusals and the password check of one recorded attempt.
async fn check_attempt(
    pool: &PgPool,
    gate: &HashGate,
    id: i64,
    key: &str,
    password: &str,
    client: &str,
    now: DateTime<Utc>,
) -> Result<UserRow, AppError> {
    let window = Duration::minutes(THROTTLE_WINDOW_MIN);
    let standing = logins::standing(pool, id, key, client, now - window)
        .await
        .or_internal("reading sign-in attempts")?;
    if !client.is_empty() && standing.client_failures >= CLIENT_MAX_FAILURES {
        let until = standing.client_oldest.unwrap_or(now) + window;
        return Err(throttled(until, now));
    }
    // This client's own failures on this name.
    let delay = backoff_s(standing.pair_failures);
    if delay > 0 {
        let until = standing.pair_last.unwrap_or(now) + Duration::seconds(delay);
        if until > now {
            return Err(throttled(until, now));
        }
    }
    // Guessing from many clients: only those that have failed on the name wait for the others.
    let delay = backoff_past(standing.name_failures, NAME_MAX_FAILURES);
    if standing.pair_failures > 0 && delay > 0 {
        let until = standing.name_last.unwrap_or(now) + Duration::seconds(delay);
        if until > now {
            return Err(throttled(until, now));
        }
    }
    let user = match Username::parse(key) {
        Ok(name) => users::by_name(pool, name.as_str())
            .await
            .or_internal("looking up a user")?,
        Err(_) => None,
    };
    let ok = gate
        .verify(
            password.to_owned(),
            user.as_ref().map(|u| u.password_hash.clone()),
        )
        .await?;
    match user {
        Some(user) if ok => {
            if user.disabled_at.is_some() {
                // Answered as a wrong password by `login`, once audited as `disabled`.
                return Err(AppError::Forbidden("this account is disabled".into()));
            }
            Ok(user)
        }
        _ => Err(AppError::BadCredentials),
    }
}

fn throttled(until: DateTime<Utc>, now: DateTime<Utc>) -> AppError {
    AppError::Throttled {
        retry_after_s: (until - now).num_seconds().max(1) as u64,
    }
}

/// The path to return to after signing in: `next` when it is a path on this site, else `/`.
/// Refuses everything a browser could take off-site: `//host`, `/\\host`, schemes, control
/// characters.
pub fn local_return_path(next: Option<&str>) -> &str {
    match next {
        Some(p)
            if p.starts_with('/')
                && !p.starts_with("//")
                && !p.contains('\\')
                && !p.chars().any(char::is_control)
                && p.len() <= 2048 =>
        {
            p
        }
        _ => "/",
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

/// Creates an API token for a user (`username` is for the audit trail); the secret is in the
/// answer this once. It expires after `expires_in_days` when given. Callers make sure the request
/// came from a session or a password, never from a token (see [`CurrentUser::require_session`]).
///
/// [`CurrentUser::require_session`]: super::CurrentUser::require_session
pub async fn create_token(
    pool: &PgPool,
    user_id: Uuid,
    username: &str,
    name: &str,
    expires_in_days: Option<u32>,
) -> Result<CreatedToken, AppError> {
    let name = name.trim();
    if name.is_empty() || name.chars().count() > 128 {
        return Err(AppError::invalid(
            "name",
            "token name must be 1 to 128 characters",
        ));
    }
    if expires_in_days.is_some_and(|d| d == 0 || d > MAX_TOKEN_DAYS) {
        return Err(AppError::invalid(
            "expires_in_days",
            format!("a token lives 1 to {MAX_TOKEN_DAYS} days (leave it out for no expiry)"),
        ));
    }
    let token = tokens::generate();
    let mut tx = pool.begin().await.or_internal("storing a token")?;
    let record = users::insert_token(
        &mut *tx,
        user_id,
        name,
        &tokens::digest(&token),
        expires_in_days,
    )
    .await
    .or_internal("storing a token")?;
    let detail = json!({ "id": record.id, "expires_at": record.expires_at });
    events::audit(&mut *tx, username, AuditKind::TokenCreate, name, detail)
        .await
        .or_internal("auditing a new token")?;
    tx.commit().await.or_internal("storing a token")?;
    Ok(CreatedToken {
        token: token.into(),
        record: record.view(),
    })
}

/// A user's tokens, newest first (never the secrets); expired and revoked ones included.
pub async fn list_tokens(pool: &PgPool, user_id: Uuid) -> Result<Vec<TokenView>, AppError> {
    let rows = users::tokens_of(pool, user_id)
        .await
        .or_internal("listing tokens")?;
    Ok(rows.into_iter().map(TokenRow::view).collect())
}

/// The enabled user a bearer token belongs to, if it is live (not revoked, not expired). Its use
/// is audited at most once per [`TOKEN_USE_AUDIT_EVERY_MIN`] minutes.
pub async fn user_for_token(pool: &PgPool, token: &str) -> Result<Option<UserRow>, AppError> {
    if !token.starts_with(tokens::PREFIX) {
        return Ok(None);
    }
    let Some(owner) = users::user_by_token(pool, &tokens::digest(token))
        .await
        .or_internal("looking up a token")?
    else {
        return Ok(None);
    };
    let quiet_since = Utc::now() - Duration::minutes(TOKEN_USE_AUDIT_EVERY_MIN);
    if owner.previous_use.is_none_or(|t| t < quiet_since) {
        let detail = json!({ "id": owner.token_id });
        events::audit(
            pool,
            &owner.user.username,
            AuditKind::TokenUse,
            &owner.token_name,
            detail,
        )
        .await
        .or_internal("auditing a token's use")?;
    }
    Ok(Some(owner.user))
}

/// Revokes one of the caller's tokens (`username` is for the audit trail).
pub async fn revoke_token(
    pool: &PgPool,
    user_id: Uuid,
    username: &str,
    token_id: Uuid,
) -> Result<(), AppError> {
    let mut tx = pool.begin().await.or_internal("revoking a token")?;
    let Some(name) = users::revoke_token(&mut *tx, user_id, token_id)
        .await
        .or_internal("revoking a token")?
    else {
        return Err(AppError::NotFound(format!(
            "no live token {token_id} of yours"
        )));
    };
    events::audit(
        &mut *tx,
        username,
        AuditKind::TokenRevoke,
        &name,
        json!({ "id": token_id }),
    )
    .await
    .or_internal("auditing a revocation")?;
    tx.commit().await.or_internal("revoking a token")
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_local_paths_are_returned_to() {
        assert_eq!(local_return_path(Some("/jobs/1?x=2")), "/jobs/1?x=2");
        assert_eq!(local_return_path(Some("/")), "/");
        for evil in [
            "//evil.example",
            "https://evil.example",
            "/\\evil.example",
            "\\\\evil.example",
            "javascript:alert(1)",
            "/jobs\r\nSet-Cookie: x=1",
            "",
        ] {
            assert_eq!(local_return_path(Some(evil)), "/", "{evil:?}");
        }
        assert_eq!(local_return_path(None), "/");
    }

    #[test]
    fn backoff_grows_and_is_bounded() {
        assert_eq!(backoff_s(0), 0);
        assert_eq!(backoff_s(MAX_FAILURES - 1), 0);
        assert_eq!(backoff_s(MAX_FAILURES), BACKOFF_BASE_S);
        assert_eq!(backoff_s(MAX_FAILURES + 1), 2 * BACKOFF_BASE_S);
        assert_eq!(backoff_s(1_000_000), BACKOFF_MAX_S);
        assert_eq!(backoff_past(NAME_MAX_FAILURES - 1, NAME_MAX_FAILURES), 0);
        assert_eq!(
            backoff_past(NAME_MAX_FAILURES, NAME_MAX_FAILURES),
            BACKOFF_BASE_S
        );
    }
}
