//! Teams and shares (admins set them, managers read them): a team's weight and budget, and a
//! user's team, weight and budget. Callers check the role; these check everything else and audit
//! every change (which also wakes every scheduler: weights and budgets decide admission order).

use crate::model::{AppError, AuditKind, NewTeam, TeamPatch, TeamView, UserShare, UserView};
use crate::server::auth::CurrentUser;
use crate::server::db::{events, teams, users};
use crate::server::error::OrInternal;
use crate::server::Ctx;
use serde_json::json;
use uuid::Uuid;

fn checked(r: Result<(), (String, String)>) -> Result<(), AppError> {
    r.map_err(|(field, message)| AppError::invalid(field, message))
}

/// Every team with its weight, budget and members (managers and admins).
pub async fn list(ctx: &Ctx) -> Result<Vec<TeamView>, AppError> {
    let rows = teams::list(&ctx.pool).await.or_internal("listing teams")?;
    Ok(rows.into_iter().map(teams::TeamRow::view).collect())
}

/// One team, or a 404 naming it.
async fn one(db: impl sqlx::PgExecutor<'_>, name: &str) -> Result<TeamView, AppError> {
    teams::by_name(db, name)
        .await
        .or_internal("reading a team")?
        .map(teams::TeamRow::view)
        .ok_or_else(|| AppError::NotFound(format!("no team `{name}`")))
}

/// Creates a team (admins); a taken name is a conflict.
pub async fn create(ctx: &Ctx, admin: &CurrentUser, team: &NewTeam) -> Result<TeamView, AppError> {
    checked(team.check())?;
    let mut tx = ctx.pool.begin().await.or_internal("beginning a new team")?;
    if !teams::insert(&mut *tx, team)
        .await
        .or_internal("creating a team")?
    {
        return Err(AppError::Conflict(format!(
            "a team named `{}` already exists",
            team.name
        )));
    }
    let detail = json!({ "weight": team.weight, "budget": team.budget });
    events::commit_audited(
        tx,
        &admin.username,
        AuditKind::TeamCreate,
        &team.name,
        detail,
    )
    .await
    .or_internal("recording a new team")?;
    one(&ctx.pool, &team.name).await
}

/// Changes a team's weight and/or budget (admins); `budget: Some(None)` removes the budget.
pub async fn update(
    ctx: &Ctx,
    admin: &CurrentUser,
    name: &str,
    patch: &TeamPatch,
) -> Result<TeamView, AppError> {
    checked(patch.check())?;
    let mut tx = ctx
        .pool
        .begin()
        .await
        .or_internal("beginning a team edit")?;
    if !teams::update(&mut *tx, name, patch)
        .await
        .or_internal("changing a team")?
    {
        return Err(AppError::NotFound(format!("no team `{name}`")));
    }
    let detail = serde_json::to_value(patch).or_internal("encoding a team edit")?;
    events::commit_audited(tx, &admin.username, AuditKind::TeamUpdate, name, detail)
        .await
        .or_internal("recording a team edit")?;
    one(&ctx.pool, name).await
}

/// Moves user `id` to another team and/or changes their weight and budget (admins). The team
/// must exist: otherwise a 400 naming `team`, and nothing changes.
pub async fn place_user(
    ctx: &Ctx,
    admin: &CurrentUser,
    id: Uuid,
    share: &UserShare,
) -> Result<UserView, AppError> {
    checked(share.check())?;
    let (mut tx, user) = super::user_for_edit(ctx, id, "beginning a user edit").await?;
    if share.is_empty() {
        return user.view().or_internal("reading a user");
    }
    if let Some(team) = &share.team {
        if !teams::exists(&mut *tx, team)
            .await
            .or_internal("looking a team up")?
        {
            return Err(AppError::invalid(
                "team",
                format!("there is no team `{team}`; create it first"),
            ));
        }
    }
    teams::place_user(&mut *tx, id, share)
        .await
        .or_internal("placing a user in a team")?;
    let detail = serde_json::to_value(share).or_internal("encoding a user edit")?;
    super::record_user_edit(tx, admin, &user.username, detail).await?;
    users::by_id(&ctx.pool, id)
        .await
        .or_internal("reading a user")?
        .ok_or_else(|| AppError::NotFound(format!("no user {id}")))?
        .view()
        .or_internal("reading a user")
}
