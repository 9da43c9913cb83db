//! Interactive sessions: a job with a `port` (a notebook, a VS Code server, a demo) is reached
//! through gpuq's proxy at an origin of its own, never gpuq's (docs/sessions.md).
//!
//! The way in: the owner, signed in to gpuq, asks `GET /api/v1/jobs/{id}/session` ([`open`]) and
//! is sent to the session origin with a one-time code (a minute, single use); the session origin
//! trades it ([`exchange`]) for a cookie of its own, scoped to that job and expiring with it. Every
//! proxied request is then checked ([`admit`]): the cookie is this job's, the job runs, its holder
//! is enabled and still may open it. Only SHA-256 digests of codes and cookies are stored.
//!
//! What is tracked here for the idle watcher ([`idle`]): which sessions carried traffic since the
//! last flush (in memory, written to the job's row coarsely).

pub mod idle;
mod origin;

pub use origin::SessionOrigin;

use crate::model::{AppError, Role};
use crate::server::auth::tokens::{digest, random_hex};
use crate::server::auth::CurrentUser;
use crate::server::db::{sessions as store, settings};
use crate::server::error::OrInternal;
use chrono::{DateTime, TimeDelta, Utc};
use sqlx::PgPool;
use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use uuid::Uuid;

/// The query parameter that carries a one-time code to the session origin.
pub const CODE_PARAM: &str = "gpuq_code";
/// The session origin's own cookie (never gpuq's `gpuq_session`).
pub const COOKIE: &str = "gpuq_proxy";
/// How long a one-time code is good for.
pub const CODE_TTL_S: i64 = 60;
/// A cookie whose job has no deadline recorded yet expires after this long.
const COOKIE_FALLBACK_H: i64 = 12;
/// How long an admitted cookie is trusted without asking the database again: a disabled user or
/// an ended job is refused at most this much later.
const ADMIT_CACHE: Duration = Duration::from_secs(2);

/// The sessions of this process: where their origin is, and what the proxy saw.
#[derive(Clone, Debug)]
pub struct Sessions {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    origin: SessionOrigin,
    ui_url: Option<String>,
    traffic: Mutex<HashSet<Uuid>>,
    admitted: Mutex<HashMap<AdmitKey, (Instant, SocketAddr)>>,
}

/// A session cookie's digest and the job it was presented for.
type AdmitKey = ([u8; 32], Uuid);

impl Sessions {
    /// Sessions served at `origin`; `ui_url` is gpuq's own public URL, where a visitor without
    /// the session's cookie is sent to get one (`None`: they are told to open it from gpuq).
    pub fn new(origin: SessionOrigin, ui_url: Option<String>) -> Self {
        Sessions {
            inner: Arc::new(Inner {
                origin,
                ui_url: ui_url.map(|u| u.trim_end_matches('/').to_owned()),
                traffic: Mutex::new(HashSet::new()),
                admitted: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// Where the sessions are served.
    pub fn origin(&self) -> &SessionOrigin {
        &self.inner.origin
    }

    /// Where a visitor of job `id`'s session without its cookie is sent: gpuq's own
    /// `GET /api/v1/jobs/{id}/session`, when gpuq's public URL is known.
    pub fn sign_in_url(&self, job: Uuid) -> Option<String> {
        let ui = self.inner.ui_url.as_ref()?;
        Some(format!("{ui}/api/v1/jobs/{job}/session"))
    }

    /// Notes HTTP or WebSocket traffic on job `id`'s session.
    pub fn saw(&self, job: Uuid) {
        if let Ok(mut t) = self.inner.traffic.lock() {
            t.insert(job);
        }
    }

    /// The sessions that carried traffic since the last call.
    pub fn take_traffic(&self) -> Vec<Uuid> {
        match self.inner.traffic.lock() {
            Ok(mut t) => t.drain().collect(),
            Err(_) => Vec::new(),
        }
    }

    fn cached(&self, key: &AdmitKey) -> Option<SocketAddr> {
        let mut map = self.inner.admitted.lock().ok()?;
        match map.get(key) {
            Some((at, addr)) if at.elapsed() < ADMIT_CACHE => Some(*addr),
            Some(_) => {
                map.remove(key);
                None
            }
            None => None,
        }
    }

    fn remember(&self, key: AdmitKey, addr: SocketAddr) {
        if let Ok(mut map) = self.inner.admitted.lock() {
            if map.len() > 10_000 {
                map.retain(|_, (at, _)| at.elapsed() < ADMIT_CACHE);
            }
            map.insert(key, (Instant::now(), addr));
        }
    }
}

/// Who may open a session: its owner; an admin only where the launch policy says so
/// (`admins_open_sessions`). Managers never: a session runs as its owner.
pub fn may_open(user: Uuid, role: Role, owner: Uuid, admins_open_sessions: bool) -> bool {
    user == owner || (admins_open_sessions && role.at_least(Role::Admin))
}

/// `GET /api/v1/jobs/{id}/session`: the URL on the session origin, with a one-time code, that
/// opens job `id`'s session for `user`. Refused (403) to anyone who may not open it, whatever
/// the job's state; 409 while it does not run.
pub async fn open(
    pool: &PgPool,
    sessions: Option<&Sessions>,
    user: &CurrentUser,
    id: Uuid,
) -> Result<String, AppError> {
    let Some(sessions) = sessions else {
        return Err(AppError::NotFound(
            "this gpuq serves no sessions: start it with --sessions-listen or --sessions-domain"
                .into(),
        ));
    };
    let target = store::target(pool, id)
        .await
        .or_internal("reading a session")?
        .ok_or_else(|| AppError::NotFound(format!("no session job {id} (a job with a port)")))?;
    let policy = settings::launch_policy(pool)
        .await
        .or_internal("reading the launch policy")?;
    if !may_open(
        user.id,
        user.role,
        target.owner_id,
        policy.admins_open_sessions,
    ) {
        return Err(AppError::Forbidden(
            "only the job's owner may open its session (admins too where the launch policy's \
             admins_open_sessions allows)"
                .into(),
        ));
    }
    if !target.running || target.session_addr.is_none() {
        return Err(AppError::Conflict(format!(
            "job {id} does not run: its session opens while it runs"
        )));
    }
    let code = random_hex();
    let expires = Utc::now() + TimeDelta::seconds(CODE_TTL_S);
    store::grant(pool, &digest(&code), "code", id, user.id, expires)
        .await
        .or_internal("storing a session code")?;
    Ok(format!("{}?{CODE_PARAM}={code}", sessions.origin().url(id)))
}

/// A session cookie for the session origin.
#[derive(Debug, Clone)]
pub struct Cookie {
    /// Its value (shown once, in the `Set-Cookie` of the exchange).
    pub value: String,
    /// When it expires: the job's deadline.
    pub expires: DateTime<Utc>,
}

/// Trades a one-time `code` for job `id`'s session cookie. The code is used up whatever the
/// outcome; an unknown, used, expired or other job's code is refused (403).
pub async fn exchange(pool: &PgPool, id: Uuid, code: &str) -> Result<Cookie, AppError> {
    let refused = || {
        AppError::Forbidden(
            "this link to the session is used up or expired: open the session again from gpuq"
                .into(),
        )
    };
    let user = store::take_code(pool, &digest(code), id)
        .await
        .or_internal("using a session code")?
        .ok_or_else(refused)?;
    let target = store::target(pool, id)
        .await
        .or_internal("reading a session")?
        .filter(|t| t.running)
        .ok_or_else(refused)?;
    let expires = target
        .deadline_at
        .unwrap_or_else(|| Utc::now() + TimeDelta::hours(COOKIE_FALLBACK_H));
    let value = random_hex();
    store::grant(pool, &digest(&value), "cookie", id, user, expires)
        .await
        .or_internal("storing a session cookie")?;
    Ok(Cookie { value, expires })
}

/// Why a request to a session is not let through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// No job of that id is a session.
    NotFound,
    /// The session ended (or has not started).
    Gone,
    /// No cookie of this job's, or an expired one: the visitor must open the session from gpuq.
    NoCookie,
    /// The cookie's holder may no longer open it (an admin after the policy changed).
    Forbidden,
}

/// Checks a request to job `id`'s session carrying these session-cookie values; returns where the
/// container serves.
pub async fn admit(
    pool: &PgPool,
    sessions: &Sessions,
    id: Uuid,
    cookies: &[&str],
) -> Result<SocketAddr, Refusal> {
    for value in cookies {
        let key = (digest(value), id);
        if let Some(addr) = sessions.cached(&key) {
            return Ok(addr);
        }
        let holder = match store::cookie_holder(pool, &key.0, id).await {
            Ok(h) => h,
            Err(e) => {
                tracing::error!(error = %e, job = %id, "reading a session cookie");
                return Err(Refusal::Gone);
            }
        };
        let Some(holder) = holder else { continue };
        if holder.user_id != holder.owner_id {
            let role = holder.role.parse::<Role>().unwrap_or(Role::Member);
            let allowed = settings::launch_policy(pool)
                .await
                .map(|p| p.admins_open_sessions)
                .unwrap_or(false);
            if !may_open(holder.user_id, role, holder.owner_id, allowed) {
                return Err(Refusal::Forbidden);
            }
        }
        let Some(addr) = holder.session_addr.and_then(|a| a.parse().ok()) else {
            return Err(Refusal::Gone);
        };
        sessions.remember(key, addr);
        return Ok(addr);
    }
    match store::target(pool, id).await {
        Ok(None) => Err(Refusal::NotFound),
        Ok(Some(t)) if !t.running => Err(Refusal::Gone),
        Ok(Some(_)) => Err(Refusal::NoCookie),
        Err(e) => {
            tracing::error!(error = %e, job = %id, "reading a session");
            Err(Refusal::Gone)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_owner_opens_a_session_and_admins_only_by_policy() {
        let owner = Uuid::new_v4();
        let other = Uuid::new_v4();
        assert!(may_open(owner, Role::Member, owner, false));
        assert!(!may_open(other, Role::Member, owner, true));
        assert!(!may_open(other, Role::Manager, owner, true));
        assert!(!may_open(other, Role::Admin, owner, false));
        assert!(may_open(other, Role::Admin, owner, true));
    }

    #[test]
    fn secrets_are_fresh_and_digests_stable() {
        let (a, b) = (random_hex(), random_hex());
        assert_ne!(a, b);
        assert_eq!(a.len(), 64);
        assert_eq!(digest(&a), digest(&a));
        assert_ne!(digest(&a), digest(&b));
    }

    #[test]
    fn traffic_is_taken_once() {
        let s = Sessions::new(
            SessionOrigin::Path {
                base: "http://127.0.0.1:4000".into(),
            },
            None,
        );
        let job = Uuid::new_v4();
        s.saw(job);
        s.saw(job);
        assert_eq!(s.take_traffic(), vec![job]);
        assert!(s.take_traffic().is_empty());
    }
}
