//! The manifest rules: workload types and their VRAM need per GPU model. Every change is audited
//! and wakes the schedulers, so it decides the next pass.

use crate::model::{AppError, AuditKind, ManifestView, WorkloadView};
use crate::server::auth::CurrentUser;
use crate::server::db::{events, gpus, manifest};
use crate::server::error::OrInternal;
use serde::Deserialize;
use serde_json::json;
use sqlx::pool::PoolConnection;
use sqlx::PgPool;
use sqlx::Postgres;
use std::collections::{BTreeMap, BTreeSet};

pub mod suggest;

/// Largest per-model need accepted (4 TiB, far above any card).
const MAX_MIB: i64 = 4 * 1024 * 1024;

/// Body of `PUT /api/v1/manifest/{workload}`.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WorkloadPut {
    /// What it is.
    #[serde(default)]
    pub description: String,
    /// MiB per card by model name.
    pub vram_mib: BTreeMap<String, i64>,
}

/// A connection from the pool, and the manifest as read on it.
async fn load(pool: &PgPool) -> Result<(PoolConnection<Postgres>, manifest::Manifest), AppError> {
    let mut conn = pool.acquire().await.or_internal("acquiring a connection")?;
    let m = manifest::load(&mut conn)
        .await
        .or_internal("reading the manifest")?;
    Ok((conn, m))
}

/// The whole manifest and the models of the cards gpuq knows.
pub async fn view(pool: &PgPool) -> Result<ManifestView, AppError> {
    let (mut conn, m) = load(pool).await?;
    let cards = gpus::list(&mut *conn).await.or_internal("reading cards")?;
    let models: BTreeSet<String> = cards.into_iter().map(|g| g.model).collect();
    Ok(ManifestView {
        workloads: m
            .needs
            .into_iter()
            .map(|(name, vram_mib)| WorkloadView {
                description: m.descriptions.get(&name).cloned().unwrap_or_default(),
                name,
                vram_mib,
            })
            .collect(),
        models_present: models.into_iter().collect(),
    })
}

/// Creates or replaces a workload type (admins; the caller checks the role).
pub async fn put(
    pool: &PgPool,
    user: &CurrentUser,
    name: &str,
    body: &WorkloadPut,
) -> Result<WorkloadView, AppError> {
    check_name(name)?;
    if body.description.chars().count() > 500 {
        return Err(AppError::invalid(
            "description",
            "description must be at most 500 characters",
        ));
    }
    if body.vram_mib.is_empty() {
        return Err(AppError::invalid(
            "vram_mib",
            "give the VRAM need for at least one GPU model, e.g. {\"NVIDIA A100 80GB\": 20480}",
        ));
    }
    for (model, mib) in &body.vram_mib {
        let field = format!("vram_mib.{model}");
        if model.trim().is_empty() || model.chars().count() > 96 || model.trim() != model {
            return Err(AppError::invalid(
                field,
                "model names must be 1 to 96 characters, without surrounding spaces",
            ));
        }
        if !(1..=MAX_MIB).contains(mib) {
            return Err(AppError::invalid(
                field,
                format!("need must be between 1 and {MAX_MIB} MiB"),
            ));
        }
    }
    let mut tx = pool
        .begin()
        .await
        .or_internal("beginning a manifest edit")?;
    manifest::put(&mut tx, name, &body.description, &body.vram_mib)
        .await
        .or_internal("writing the manifest")?;
    events::commit_audited(
        tx,
        &user.username,
        AuditKind::ManifestPut,
        name,
        json!({ "description": body.description, "vram_mib": body.vram_mib }),
    )
    .await
    .or_internal("recording a manifest edit")?;
    Ok(WorkloadView {
        name: name.to_owned(),
        description: body.description.clone(),
        vram_mib: body.vram_mib.clone(),
    })
}

/// Deletes a workload type. Queued jobs of that type then wait with the reason shown.
pub async fn delete(pool: &PgPool, user: &CurrentUser, name: &str) -> Result<(), AppError> {
    let mut tx = pool
        .begin()
        .await
        .or_internal("beginning a manifest edit")?;
    if !manifest::delete(&mut *tx, name)
        .await
        .or_internal("deleting a workload type")?
    {
        return Err(AppError::NotFound(format!("no workload type `{name}`")));
    }
    events::commit_audited(
        tx,
        &user.username,
        AuditKind::ManifestDelete,
        name,
        json!({}),
    )
    .await
    .or_internal("recording a manifest edit")?;
    Ok(())
}

/// Checks a workload type name.
pub fn check_name(name: &str) -> Result<(), AppError> {
    if crate::model::is_plain_name(name) {
        Ok(())
    } else {
        Err(AppError::invalid(
            "workload",
            "workload type names are 1 to 64 characters: lowercase letters, digits, `_`, `.`, `-`, starting with a letter or digit",
        ))
    }
}
