//! Registry credentials: admins store a username and password per registry host; each node's
//! puller hands them to dockerd when it pulls an image from that host. Nobody reads a password
//! back: it is sealed ([`seal`]) under the secrets key ([`key`]), kept outside the database, and
//! the views, the audit trail, the live events and the logs carry the host and the username only.
//!
//! The REST API and the admin page call the same functions here; callers check the role.

pub mod key;
pub mod seal;

use crate::model::{
    check_login, check_registry_host, registry_of_image, AppError, AuditKind, RegistryLogin,
    RegistryView, Secret,
};
use crate::server::auth::CurrentUser;
use crate::server::db::events;
use crate::server::db::registries::{self as repo, CredentialRow};
use crate::server::error::OrInternal;
pub use key::{KeyError, SecretsKey};
use serde_json::json;
use sqlx::PgPool;

/// Credentials opened for a pull: what dockerd hands the registry.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct RegistryAuth {
    /// The registry host.
    pub host: String,
    /// The account.
    pub username: String,
    /// Its password (`Debug` shows `<redacted>`).
    pub password: Secret,
}

/// Why stored credentials could not be opened, in words naming the registry (never the password).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpenError {
    /// The secrets key cannot be had.
    #[error("the stored credentials for registry {host} cannot be used: {error}")]
    Key {
        /// The registry.
        host: String,
        /// Why.
        error: KeyError,
    },
    /// The sealed password does not open under this key for this host.
    #[error(
        "the stored credentials for registry {0} do not open with this node's secrets key (the \
         key changed, or the row was copied from another registry); set them again with \
         `gpuq registry login {0}`"
    )]
    Sealed(String),
    /// The database could not be read.
    #[error("reading the credentials for registry {host}: {error}")]
    Database {
        /// The registry.
        host: String,
        /// The database's error.
        error: String,
    },
}

/// The host from a request's path, in its one form, or a 400 naming `host`.
fn host_of(host: &str) -> Result<String, AppError> {
    check_registry_host(host).map_err(|m| AppError::invalid("host", m))
}

/// The words of the audit entry and the log line for a change.
fn said(host: &str, what: &str, admin: &str) -> String {
    format!("registry credentials for {host} {what} by {admin}")
}

/// Sets (or replaces) the credentials of `host` (admins): checked, sealed under the secrets key
/// (made on first need), stored and audited in one transaction.
pub async fn put(
    pool: &PgPool,
    secrets: &SecretsKey,
    admin: &CurrentUser,
    host: &str,
    login: &RegistryLogin,
) -> Result<RegistryView, AppError> {
    let host = host_of(host)?;
    check_login(login).map_err(|(field, message)| AppError::invalid(field, message))?;
    let (secrets, h, user, pw) = (
        secrets.clone(),
        host.clone(),
        login.username.clone(),
        login.password.clone(),
    );
    let sealed = tokio::task::spawn_blocking(move || {
        let key = secrets.for_sealing()?;
        Ok::<_, KeyError>(seal::seal(&key, &h, &user, pw.expose()))
    })
    .await
    .or_internal("sealing registry credentials")?
    .map_err(|e| {
        tracing::warn!(%host, error = %e, "registry credentials not stored: the secrets key cannot be had");
        AppError::Unavailable(format!("registry credentials cannot be stored: {e}"))
    })?
    .ok_or("the password is too long to seal")
    .or_internal("sealing registry credentials")?;
    let mut tx = pool
        .begin()
        .await
        .or_internal("beginning a credentials edit")?;
    let row = repo::upsert(&mut *tx, &host, &login.username, &sealed, &admin.username)
        .await
        .or_internal("storing registry credentials")?;
    let summary = said(&host, "set", &admin.username);
    let detail = json!({ "username": login.username, "summary": summary });
    events::commit_audited(tx, &admin.username, AuditKind::RegistrySet, &host, detail)
        .await
        .or_internal("recording registry credentials")?;
    tracing::info!("{summary}");
    Ok(view(row))
}

/// Every registry with stored credentials: host, username, when and by whom (admins).
pub async fn list(pool: &PgPool) -> Result<Vec<RegistryView>, AppError> {
    let rows = repo::list(pool)
        .await
        .or_internal("listing registry credentials")?;
    Ok(rows.into_iter().map(view).collect())
}

/// Removes the credentials of `host` (admins), audited; 404 when there are none.
pub async fn remove(pool: &PgPool, admin: &CurrentUser, host: &str) -> Result<(), AppError> {
    let host = host_of(host)?;
    let mut tx = pool
        .begin()
        .await
        .or_internal("beginning a credentials removal")?;
    if !repo::remove(&mut *tx, &host)
        .await
        .or_internal("removing registry credentials")?
    {
        return Err(AppError::NotFound(format!(
            "no credentials are stored for registry {host}"
        )));
    }
    let summary = said(&host, "removed", &admin.username);
    let detail = json!({ "summary": summary });
    events::commit_audited(
        tx,
        &admin.username,
        AuditKind::RegistryRemove,
        &host,
        detail,
    )
    .await
    .or_internal("recording a credentials removal")?;
    tracing::info!("{summary}");
    Ok(())
}

/// The credentials to pull `image` with: those of its registry, opened; `None` when none are
/// stored for it (the pull goes without, as `docker pull` does before a `docker login`).
pub async fn for_image(
    pool: &PgPool,
    secrets: &SecretsKey,
    image: &str,
) -> Result<Option<RegistryAuth>, OpenError> {
    let Some(host) = registry_of_image(image) else {
        return Ok(None);
    };
    let row = repo::of_host(pool, &host)
        .await
        .map_err(|e| OpenError::Database {
            host: host.clone(),
            error: e.to_string(),
        })?;
    let Some(row) = row else { return Ok(None) };
    let secrets = secrets.clone();
    tokio::task::spawn_blocking(move || open_row(&secrets, &row))
        .await
        .unwrap_or_else(|e| {
            Err(OpenError::Key {
                host,
                error: KeyError::Io(format!("reading the secrets key: {e}")),
            })
        })
        .map(Some)
}

/// Opens one stored row under the key.
pub fn open_row(secrets: &SecretsKey, row: &CredentialRow) -> Result<RegistryAuth, OpenError> {
    let key = secrets.for_opening().map_err(|error| OpenError::Key {
        host: row.host.clone(),
        error,
    })?;
    let password = seal::open(&key, &row.host, &row.username, &row.sealed)
        .ok_or_else(|| OpenError::Sealed(row.host.clone()))?;
    Ok(RegistryAuth {
        host: row.host.clone(),
        username: row.username.clone(),
        password: password.into(),
    })
}

fn view(row: CredentialRow) -> RegistryView {
    RegistryView {
        host: row.host,
        username: row.username,
        set_at: row.set_at,
        set_by: row.set_by,
    }
}
