//! Cards as views, and the admin's changes to them.

use crate::model::{gpu_id, AppError, AuditKind, GpuHolder, GpuState, GpuView, SkippedGpuView};
use crate::server::auth::CurrentUser;
use crate::server::context::Ctx;
use crate::server::db::{events, gpus, vram};
use crate::server::error::OrInternal;
use serde_json::json;
use std::collections::{BTreeMap, HashMap};
use uuid::Uuid;

/// Devices the nodes see but do not schedule.
pub async fn skipped(ctx: &Ctx) -> Result<Vec<SkippedGpuView>, AppError> {
    Ok(gpus::skipped(&ctx.pool)
        .await
        .or_internal("reading skipped devices")?
        .into_iter()
        .map(|s| SkippedGpuView {
            node: s.node,
            index: s.idx as u32,
            id: s.id,
            model: s.model,
            reason: s.reason,
        })
        .collect())
}

/// Every card with what holds it.
pub async fn list(ctx: &Ctx) -> Result<Vec<GpuView>, AppError> {
    let rows = gpus::list(&ctx.pool).await.or_internal("reading cards")?;
    let holders = gpus::holders(&ctx.pool)
        .await
        .or_internal("reading holders")?;
    let mut by_card: HashMap<Uuid, Vec<GpuHolder>> = HashMap::new();
    for h in holders {
        by_card.entry(h.gpu_uuid).or_default().push(h.holder);
    }
    let headroom = ctx.pass.headroom_mib;
    Ok(rows
        .into_iter()
        .map(|g| GpuView {
            uuid: gpu_id(&g.uuid),
            state: g.shown_state(),
            free_mib: if g.takes_work() && !g.exclusive_held {
                (g.total_mib - headroom - g.reserved_mib - g.external_mib).max(0)
            } else {
                0
            },
            node: g.node,
            index: g.idx as u32,
            model: g.model,
            total_mib: g.total_mib,
            reserved_mib: g.reserved_mib,
            external_mib: g.external_mib,
            used_mib: g.used_mib,
            simulated: g.simulated,
            jobs: by_card.remove(&g.uuid).unwrap_or_default(),
        })
        .collect())
}

/// Sets the memory "foreign processes" use on a simulated card (admins; tests of hybrid accounting).
pub async fn set_sim_external(
    ctx: &Ctx,
    user: &CurrentUser,
    uuid: Uuid,
    external_mib: i64,
) -> Result<(), AppError> {
    let card = sim_card(ctx, uuid, "its foreign memory is measured").await?;
    if !(0..=card.total_mib).contains(&external_mib) {
        return Err(AppError::invalid(
            "external_mib",
            format!(
                "external_mib must be between 0 and the card's {} MiB",
                card.total_mib
            ),
        ));
    }
    let mut tx = ctx
        .pool
        .begin()
        .await
        .or_internal("beginning a card edit")?;
    gpus::set_sim_external(&mut *tx, uuid, external_mib)
        .await
        .or_internal("setting foreign memory")?;
    record_card_edit(
        tx,
        user,
        AuditKind::GpuSimExternal,
        uuid,
        json!({ "external_mib": external_mib }),
    )
    .await
}

/// Commits a card edit with its audit record (subject: the card's id).
async fn record_card_edit(
    tx: sqlx::Transaction<'_, sqlx::Postgres>,
    user: &CurrentUser,
    kind: AuditKind,
    uuid: Uuid,
    detail: serde_json::Value,
) -> Result<(), AppError> {
    events::commit_audited(tx, &user.username, kind, &gpu_id(&uuid), detail)
        .await
        .or_internal("recording a card edit")
}

/// A simulated card, or why not: 404 for no card, 409 for a real one (`measured` says what is
/// measured on it instead).
async fn sim_card(ctx: &Ctx, uuid: Uuid, measured: &str) -> Result<gpus::GpuRow, AppError> {
    let card = gpus::get(&ctx.pool, uuid)
        .await
        .or_internal("reading a card")?
        .ok_or_else(|| AppError::NotFound(format!("no card {}", gpu_id(&uuid))))?;
    if !card.simulated {
        return Err(AppError::Conflict(format!(
            "card {} is real: {measured}, not set",
            gpu_id(&uuid)
        )));
    }
    Ok(card)
}

/// Sets what jobs use on a simulated card (admins), so the sampler and the policing see usage
/// without a driver. Every job named must hold the card now; nothing is set unless all do.
pub async fn set_sim_job_usage(
    ctx: &Ctx,
    user: &CurrentUser,
    uuid: Uuid,
    jobs: &BTreeMap<Uuid, i64>,
) -> Result<(), AppError> {
    let card = sim_card(ctx, uuid, "what its jobs use is measured").await?;
    let mut tx = ctx
        .pool
        .begin()
        .await
        .or_internal("beginning a card edit")?;
    for (&job, &used) in jobs {
        let field = format!("job_used_mib.{job}");
        if !(0..=card.total_mib).contains(&used) {
            return Err(AppError::invalid(
                &field,
                format!("must be between 0 and the card's {} MiB", card.total_mib),
            ));
        }
        if !vram::set_sim_usage(&mut *tx, uuid, job, used)
            .await
            .or_internal("setting a job's usage")?
        {
            return Err(AppError::invalid(
                &field,
                format!("job {job} does not hold card {} now", gpu_id(&uuid)),
            ));
        }
    }
    record_card_edit(
        tx,
        user,
        AuditKind::GpuSimJobUsage,
        uuid,
        json!({ "job_used_mib": jobs }),
    )
    .await
}

/// Drains, undrains or takes a card offline (admins).
pub async fn set_state(
    ctx: &Ctx,
    user: &CurrentUser,
    uuid: Uuid,
    new: &str,
) -> Result<(), AppError> {
    let new = new
        .parse::<GpuState>()
        .ok()
        .filter(|s| GpuState::SETTABLE.contains(s))
        .ok_or_else(|| AppError::invalid("state", "state must be online, draining or offline"))?;
    let mut tx = ctx
        .pool
        .begin()
        .await
        .or_internal("beginning a card edit")?;
    if !gpus::set_state(&mut *tx, uuid, new)
        .await
        .or_internal("setting a card's state")?
    {
        return Err(AppError::NotFound(format!("no card {}", gpu_id(&uuid))));
    }
    record_card_edit(tx, user, AuditKind::GpuState, uuid, json!({ "state": new })).await
}
