//! Admin and account rules shared by the REST API and the pages' server functions: users and
//! roles, passwords, the launch policy, renaming workload types and the manifest's history.
//! Callers check the role; these check everything else and audit every change. Teams and
//! users' shares in them are in [`teams`].

pub mod teams;

use crate::model::{
    AppError, AuditEntry, AuditKind, JobEventKind, LaunchPolicy, ManifestState, Role, StatusView,
    UserView, WorkloadView,
};
use crate::server::admission::pass;
use crate::server::auth::{password, service, CurrentUser};
use crate::server::db::users::{self, UserRow};
use crate::server::db::{events, job_uids, settings};
use crate::server::error::OrInternal;
use crate::server::jobs::held;
use crate::server::manifest::{self, check_name};
use crate::server::runtime::volumes;
use crate::server::Ctx;
use serde_json::{json, Value};
use uuid::Uuid;

/// Begins an edit of user `id`: a transaction and the user's row read in it, or a 404 naming
/// the id. `what` names the edit in an internal error.
async fn user_for_edit(
    ctx: &Ctx,
    id: Uuid,
    what: &'static str,
) -> Result<(sqlx::Transaction<'static, sqlx::Postgres>, UserRow), AppError> {
    let mut tx = ctx.pool.begin().await.or_internal(what)?;
    let user = users::by_id(&mut *tx, id)
        .await
        .or_internal("reading a user")?
        .ok_or_else(|| AppError::NotFound(format!("no user {id}")))?;
    Ok((tx, user))
}

/// Creates a user (admins).
pub async fn create_user(
    ctx: &Ctx,
    admin: &CurrentUser,
    username: &str,
    role: Role,
    password: &str,
) -> Result<UserView, AppError> {
    let row = service::add_user(&ctx.pool, username, role, password).await?;
    events::audit(
        &ctx.pool,
        &admin.username,
        AuditKind::UserCreate,
        &row.username,
        json!({ "role": role }),
    )
    .await
    .or_internal("auditing a new user")?;
    row.view().or_internal("reading a user")
}

/// Changes a user's role and/or disables or re-enables them (admins). An admin cannot demote or
/// disable themselves, so there is always someone left to undo a mistake. Disabling also holds the
/// user's unstarted jobs and stops their started ones (`jobs::held`); enabling lets the held jobs
/// run again. Open live streams of the user end, or follow the new role (`jobs::live`).
pub async fn update_user(
    ctx: &Ctx,
    admin: &CurrentUser,
    id: Uuid,
    role: Option<Role>,
    disabled: Option<bool>,
) -> Result<UserView, AppError> {
    if id == admin.id {
        if disabled == Some(true) {
            return Err(AppError::invalid("disabled", "you cannot disable yourself"));
        }
        if role.is_some_and(|r| r != Role::Admin) {
            return Err(AppError::invalid(
                "role",
                "you cannot take the admin role from yourself; ask another admin",
            ));
        }
    }
    let (mut tx, before) = user_for_edit(ctx, id, "beginning a user edit").await?;
    if let Some(disabled) = disabled {
        set_disabled(&mut tx, id, disabled, &admin.username).await?;
    }
    if let Some(role) = role {
        users::set_role(&mut *tx, id, role)
            .await
            .or_internal("changing a role")?;
    }
    let detail = json!({ "role": role, "disabled": disabled });
    record_user_edit(tx, admin, &before.username, detail).await?;
    let mut view = before.view().or_internal("reading a user")?;
    view.role = role.unwrap_or(view.role);
    view.disabled = disabled.unwrap_or(view.disabled);
    Ok(view)
}

/// Disables or enables user `id` in `tx`, and holds and stops their jobs, or lets the held ones
/// go, when that changes whether they are disabled.
async fn set_disabled(
    tx: &mut sqlx::Transaction<'static, sqlx::Postgres>,
    id: Uuid,
    disabled: bool,
    actor: &str,
) -> Result<(), AppError> {
    // Under the admission lock: a pass that read the user as enabled has committed (and what it
    // admitted is put back below), and the next one reads them disabled. Taken before any row.
    pass::lock(tx)
        .await
        .or_internal("taking the admission lock")?;
    let was = users::by_id(&mut **tx, id)
        .await
        .or_internal("reading a user")?
        .is_some_and(|u| u.disabled_at.is_some());
    users::set_disabled(&mut **tx, id, disabled)
        .await
        .or_internal("disabling a user")?;
    if disabled && !was {
        let held = held::hold_and_stop(tx, id, actor)
            .await
            .or_internal("holding and stopping a disabled user's jobs")?;
        tracing::info!(user = %id, held = held.held.len(), stopping = held.stopping.len(), "disabled a user: jobs held and stopped");
    } else if !disabled && was {
        held::unhold(tx, id, actor)
            .await
            .or_internal("letting an enabled user's jobs go")?;
    }
    Ok(())
}

/// Sets the uid and/or gid a user's jobs run as (admins), e.g. to match the site's Unix
/// accounts so that files jobs write on shared folders belong to the right person. Uid 0 is
/// refused (images that need root are allowed by the policy's `root_images`), and so is a uid
/// another user has or had (see `db::job_uids::set`, which also says when the gid moves along).
pub async fn set_job_ids(
    ctx: &Ctx,
    admin: &CurrentUser,
    id: Uuid,
    uid: Option<i64>,
    gid: Option<i64>,
) -> Result<(), AppError> {
    let check = |field: &str, v: Option<i64>| -> Result<Option<u32>, AppError> {
        match v {
            None => Ok(None),
            Some(v) if (1..=i64::from(i32::MAX)).contains(&v) => Ok(Some(v as u32)),
            Some(_) => Err(AppError::invalid(
                field,
                format!(
                    "must be between 1 and {}: 0 is root, and jobs never run as root \
                     (an admin may allow root for images through the policy's root_images)",
                    i32::MAX
                ),
            )),
        }
    };
    let (uid, gid) = (check("job_uid", uid)?, check("job_gid", gid)?);
    if uid.is_none() && gid.is_none() {
        return Ok(());
    }
    let (mut tx, user) = user_for_edit(ctx, id, "beginning a job uid edit").await?;
    job_uids::set(&mut tx, id, uid, gid)
        .await
        .map_err(|e| match e {
            job_uids::SetError::Taken { .. } | job_uids::SetError::GivenBefore { .. } => {
                AppError::Conflict(format!("job_uid: {e}"))
            }
            job_uids::SetError::Db(e) => {
                tracing::error!(error = %e, "setting a job uid failed");
                AppError::Internal
            }
        })?;
    let detail = json!({ "job_uid": uid, "job_gid": gid });
    record_user_edit(tx, admin, &user.username, detail).await
}

/// Commits an edit of the user `username` with its audit record.
async fn record_user_edit(
    tx: sqlx::Transaction<'_, sqlx::Postgres>,
    admin: &CurrentUser,
    username: &str,
    detail: serde_json::Value,
) -> Result<(), AppError> {
    events::commit_audited(tx, &admin.username, AuditKind::UserUpdate, username, detail)
        .await
        .or_internal("recording a user edit")
}

/// Changes the caller's own password after checking the current one (counted against the same
/// sign-in throttle, so this cannot be used to guess it). Every browser session of the user signed
/// in before now ends; the returned moment re-stamps the session that made the change, if any.
pub async fn change_password(
    ctx: &Ctx,
    user: &CurrentUser,
    current: &str,
    new: &str,
) -> Result<chrono::DateTime<chrono::Utc>, AppError> {
    let now = chrono::Utc::now();
    match service::login(&ctx.pool, &ctx.hashing, &user.username, current, "", now).await {
        Ok(_) => {}
        Err(AppError::BadCredentials) => {
            return Err(AppError::invalid(
                "current_password",
                "the current password is not correct",
            ))
        }
        Err(e) => return Err(e),
    }
    password::check_policy(new).map_err(|e| e.for_field("new_password"))?;
    if new == current {
        return Err(AppError::invalid(
            "new_password",
            "the new password must differ from the current one",
        ));
    }
    let hash = password::hash(new.to_owned()).await?;
    let mut tx = ctx
        .pool
        .begin()
        .await
        .or_internal("beginning a password change")?;
    let valid_after = users::set_password_hash(&mut *tx, user.id, &hash)
        .await
        .or_internal("storing a password")?;
    events::audit(
        &mut *tx,
        &user.username,
        AuditKind::UserPassword,
        &user.username,
        json!({}),
    )
    .await
    .or_internal("auditing a password change")?;
    tx.commit()
        .await
        .or_internal("committing a password change")?;
    Ok(valid_after)
}

/// Keeps the session that changed the password signed in (if the caller used one).
pub async fn restamp_session(
    session: &tower_sessions::Session,
    user: &CurrentUser,
    at: chrono::DateTime<chrono::Utc>,
) -> Result<(), AppError> {
    use crate::server::auth::{SESSION_SINCE_KEY, SESSION_USER_KEY};
    let owner: Option<Uuid> = session
        .get(SESSION_USER_KEY)
        .await
        .or_internal("reading the session")?;
    if owner == Some(user.id) {
        session
            .insert(SESSION_SINCE_KEY, at)
            .await
            .or_internal("writing the session")?;
    }
    Ok(())
}

/// The launch policy in force (everyone signed in may read it: it says what they may run).
pub async fn launch_policy(ctx: &Ctx) -> Result<LaunchPolicy, AppError> {
    settings::launch_policy(&ctx.pool)
        .await
        .or_internal("reading the launch policy")
}

/// The caller as `GET /api/v1/me` and the pages show them, read from their row (team, weight
/// and budget included).
pub async fn me(ctx: &Ctx, user: &CurrentUser) -> Result<UserView, AppError> {
    users::by_id(&ctx.pool, user.id)
        .await
        .or_internal("reading the caller")?
        .ok_or(AppError::Unauthorized)?
        .view()
        .or_internal("reading the caller")
}

/// Every user, for the admins' list.
pub async fn list_users(ctx: &Ctx) -> Result<Vec<UserView>, AppError> {
    let rows = users::list(&ctx.pool).await.or_internal("listing users")?;
    rows.iter()
        .map(|r| r.view())
        .collect::<Result<Vec<_>, _>>()
        .or_internal("reading users")
}

/// A live check of the database: how long a small query took, and how many users are active.
pub async fn server_status(ctx: &Ctx) -> Result<StatusView, AppError> {
    let started = std::time::Instant::now();
    let active_users = users::count_active(&ctx.pool)
        .await
        .or_internal("probing the database")?;
    Ok(StatusView {
        database_ms: started.elapsed().as_secs_f64() * 1000.0,
        active_users,
        checked_at: chrono::Utc::now(),
    })
}

/// Checks, stores and audits a new launch policy (admins).
pub async fn save_policy(
    ctx: &Ctx,
    admin: &CurrentUser,
    policy: &LaunchPolicy,
) -> Result<LaunchPolicy, AppError> {
    policy
        .check()
        .map_err(|(field, message)| AppError::invalid(field, message))?;
    let rules = policy.volume_allowlist.clone();
    tokio::task::spawn_blocking(move || volumes::check_rules(&rules))
        .await
        .or_internal("checking the volume allowlist")??;
    let mut tx = ctx
        .pool
        .begin()
        .await
        .or_internal("beginning a policy edit")?;
    settings::save_launch_policy(&mut *tx, policy)
        .await
        .or_internal("saving the launch policy")?;
    events::commit_audited(
        tx,
        &admin.username,
        AuditKind::LaunchPolicy,
        "launch_policy",
        serde_json::to_value(policy).or_internal("encoding a policy")?,
    )
    .await
    .or_internal("recording a policy edit")?;
    Ok(policy.clone())
}

/// Renames a workload type (admins). Queued jobs that name it follow the new name (each gets a
/// job event saying so), so a rename never strands the queue.
pub async fn rename_workload(
    ctx: &Ctx,
    admin: &CurrentUser,
    from: &str,
    to: &str,
) -> Result<WorkloadView, AppError> {
    check_name(to).map_err(|e| e.for_field("to"))?;
    if from == to {
        return Err(AppError::invalid(
            "to",
            "the new name is the same as the old one",
        ));
    }
    let mut tx = ctx.pool.begin().await.or_internal("beginning a rename")?;
    let renamed =
        sqlx::query("UPDATE workload_types SET name = $2, updated_at = now() WHERE name = $1")
            .bind(from)
            .bind(to)
            .execute(&mut *tx)
            .await;
    match renamed {
        Ok(r) if r.rows_affected() == 1 => {}
        Ok(_) => return Err(AppError::NotFound(format!("no workload type `{from}`"))),
        Err(sqlx::Error::Database(db)) if db.is_unique_violation() => {
            return Err(AppError::Conflict(format!(
                "a workload type named `{to}` already exists"
            )))
        }
        Err(e) => return Err(e).or_internal("renaming a workload type"),
    }
    let moved: Vec<Uuid> = sqlx::query_scalar(
        "UPDATE jobs SET workload = $2, spec = jsonb_set(spec, '{workload}', to_jsonb($2::text)) \
         WHERE workload = $1 AND status = 'queued' RETURNING id",
    )
    .bind(from)
    .bind(to)
    .fetch_all(&mut *tx)
    .await
    .or_internal("moving queued jobs to the new name")?;
    for id in &moved {
        events::job_event(
            &mut *tx,
            *id,
            &admin.username,
            JobEventKind::WorkloadRenamed,
            json!({ "from": from, "to": to }),
        )
        .await
        .or_internal("recording a rename on a job")?;
    }
    events::commit_audited(
        tx,
        &admin.username,
        AuditKind::ManifestRename,
        from,
        json!({ "to": to, "queued_jobs_moved": moved.len() }),
    )
    .await
    .or_internal("recording a rename")?;
    manifest::view(&ctx.pool)
        .await?
        .workloads
        .into_iter()
        .find(|w| w.name == to)
        .ok_or_else(|| AppError::NotFound(format!("no workload type `{to}`")))
}

/// The manifest, its edits (newest first) and when the last pass ran.
pub async fn manifest_state(ctx: &Ctx) -> Result<ManifestState, AppError> {
    let manifest = manifest::view(&ctx.pool).await?;
    let kinds = [
        AuditKind::ManifestPut,
        AuditKind::ManifestRename,
        AuditKind::ManifestDelete,
    ];
    let rows = events::audit_of_kinds(&ctx.pool, &kinds, 100)
        .await
        .or_internal("reading the manifest history")?;
    let last_pass_at = events::last_pass_at(&ctx.pool)
        .await
        .or_internal("reading the scheduler state")?;
    Ok(ManifestState {
        manifest,
        history: rows
            .into_iter()
            .map(|r| AuditEntry {
                summary: summarize(r.kind, &r.detail),
                at: r.at,
                actor: r.actor,
                kind: r.kind,
                subject: r.subject,
            })
            .collect(),
        last_pass_at,
    })
}

fn summarize(kind: AuditKind, detail: &Value) -> String {
    match kind {
        AuditKind::ManifestPut => {
            let needs = detail["vram_mib"]
                .as_object()
                .map(|m| {
                    m.iter()
                        .map(|(model, mib)| format!("{model}: {mib} MiB"))
                        .collect::<Vec<_>>()
                        .join(", ")
                })
                .unwrap_or_default();
            format!("set to {needs}")
        }
        AuditKind::ManifestRename => format!(
            "renamed to {} ({} queued job(s) moved)",
            detail["to"].as_str().unwrap_or("?"),
            detail["queued_jobs_moved"]
        ),
        AuditKind::ManifestDelete => "deleted".to_owned(),
        other => other.as_str().to_owned(),
    }
}
