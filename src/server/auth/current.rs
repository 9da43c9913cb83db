//! Who is calling: a bearer token or a session cookie, checked against the database on every request
//! so that disabling a user or revoking a token takes effect at once.

use super::service;
use crate::model::{AppError, Role};
use crate::server::db::users::{self, UserRow};
use crate::server::error::OrInternal;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use sqlx::PgPool;
use tower_sessions::Session;
use uuid::Uuid;

/// Session key holding the signed-in user's id.
pub const SESSION_USER_KEY: &str = "user_id";
/// Session key of the moment the session signed in (compared with `users.sessions_valid_after`).
pub const SESSION_SINCE_KEY: &str = "signed_in_at";

/// Why a token may not create tokens, as the refusal says it.
pub const TOKEN_CANNOT_MINT: &str =
    "an API token cannot create tokens; create them while signed in \
     in the browser (Account page) or with your password (`gpuq login`)";

/// How long a browser session lasts after its sign-in by default, in hours (7 days), whatever
/// its activity (`--session-lifetime-h`).
pub const DEFAULT_SESSION_LIFETIME_H: i64 = 7 * 24;

/// The client a request comes from, as the HTTP edge worked it out: the peer's address, or the
/// address a trusted proxy forwarded (`--trusted-proxy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientAddr(pub std::net::IpAddr);

/// The client address of a request ([`ClientAddr`], else the peer's IP), or empty when unknown.
pub fn client_address(parts: &Parts) -> String {
    if let Some(ClientAddr(ip)) = parts.extensions.get::<ClientAddr>() {
        return ip.to_string();
    }
    parts
        .extensions
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        .map(|c| c.0.ip().to_string())
        .unwrap_or_default()
}

/// The authenticated caller.
#[derive(Debug, Clone)]
pub struct CurrentUser {
    /// User id.
    pub id: Uuid,
    /// Login name.
    pub username: String,
    /// Role at the time of this request.
    pub role: Role,
    /// Authenticated by an API token rather than a session cookie.
    pub via_token: bool,
}

impl CurrentUser {
    fn from_row(row: &UserRow, via_token: bool) -> Result<Self, AppError> {
        Ok(CurrentUser {
            id: row.id,
            username: row.username.clone(),
            role: row.role().or_internal("reading a user's role")?,
            via_token,
        })
    }

    /// Refuses callers whose role is below `min`.
    pub fn require(&self, min: Role) -> Result<(), AppError> {
        if self.role.at_least(min) {
            Ok(())
        } else {
            Err(AppError::Forbidden(format!(
                "this needs the {min} role; you are {}",
                self.role
            )))
        }
    }

    /// Refuses callers authenticated by an API token: tokens are made from a signed-in browser
    /// session (or with a password), so that a leaked or revoked token cannot outlive itself by
    /// minting more.
    pub fn require_session(&self) -> Result<(), AppError> {
        if self.via_token {
            Err(AppError::Forbidden(TOKEN_CANNOT_MINT.into()))
        } else {
            Ok(())
        }
    }

    /// Resolves the caller of a request, if any. A malformed or unknown credential is no caller;
    /// so is a session older than `session_lifetime` (`--session-lifetime-h`).
    pub async fn resolve(
        parts: &Parts,
        pool: &PgPool,
        session_lifetime: chrono::TimeDelta,
    ) -> Result<Option<Self>, AppError> {
        if let Some(value) = parts.headers.get(AUTHORIZATION) {
            let Some(token) = value.to_str().ok().and_then(|v| v.strip_prefix("Bearer ")) else {
                return Ok(None);
            };
            let row = service::user_for_token(pool, token.trim()).await?;
            return row.map(|r| Self::from_row(&r, true)).transpose();
        }
        let Some(session) = parts.extensions.get::<Session>() else {
            return Ok(None);
        };
        let id: Option<Uuid> = session
            .get(SESSION_USER_KEY)
            .await
            .or_internal("reading the session")?;
        let Some(id) = id else {
            return Ok(None);
        };
        let since: Option<chrono::DateTime<chrono::Utc>> = session
            .get(SESSION_SINCE_KEY)
            .await
            .or_internal("reading the session")?;
        // A session lasts `session_lifetime` from its sign-in, however busy it is kept: a stolen
        // cookie (or a shared machine left signed in) does not live on by being used.
        let fresh = since.is_some_and(|t| chrono::Utc::now() < t + session_lifetime);
        if !fresh {
            return Ok(None);
        }
        let row = users::active_by_id(pool, id)
            .await
            .or_internal("looking up the session's user")?;
        // A session from before the user's last password change is over.
        let row = row.filter(|r| match r.sessions_valid_after {
            None => true,
            Some(valid_after) => since.is_some_and(|t| t >= valid_after),
        });
        row.map(|r| Self::from_row(&r, false)).transpose()
    }
}
