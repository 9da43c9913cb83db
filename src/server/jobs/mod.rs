//! The job rules shared by the REST API and the UI: submit, list, show, cancel.

pub mod access;
pub mod arrays;
pub mod batch;
mod detail;
pub mod held;
pub mod live;
pub mod log_read;
pub mod logs;
pub mod retention;
pub mod views;

use crate::model::spec::{JobSpec, SpecError, SpecLimits, VramNeed};
use crate::model::{
    AppError, GpuState, JobAck, JobEventKind, JobStatus, LaunchPolicy, LiveEvent, Preview, Role,
};
use crate::server::admission::pass;
use crate::server::admission::planner::{self, never_fits, Card, Need, QueuedJob, WaitReason};
use crate::server::auth::CurrentUser;
use crate::server::db::lifecycle::{self, Actor};
use crate::server::db::{events, gpus, jobs, manifest, settings};
use crate::server::error::OrInternal;
use crate::server::runtime::volumes;
use crate::server::Ctx;
use serde_json::json;
use std::collections::BTreeMap;
use uuid::Uuid;

/// The row a job of `spec` enters the queue with, named `name` and stored as `stored` (an
/// array's elements differ from their spec only in these two).
fn queued_job<'a>(
    user: &CurrentUser,
    name: &'a str,
    stored: serde_json::Value,
    spec: &'a JobSpec,
) -> lifecycle::NewJob<'a> {
    let (workload, min_vram_mib) = match spec.vram() {
        VramNeed::Workload(w) => (Some(w.as_str()), None),
        VramNeed::PerCard(m) => (None, Some(i64::from(*m))),
        VramNeed::None => (None, None),
    };
    lifecycle::NewJob {
        owner_id: user.id,
        name,
        spec: stored,
        image: spec.image(),
        command: spec.command(),
        gpu_count: spec.gpu_count() as i32,
        workload,
        min_vram_mib,
        exclusive: spec.exclusive(),
        priority: spec.priority(),
        timeout_s: spec.timeout_s() as i64,
        status: JobStatus::Queued,
        status_reason: None,
    }
}

pub use detail::{detail, events};
pub use views::{get, list, queue_summary, ListQuery};

fn spec_error(e: SpecError) -> AppError {
    AppError::invalid(e.field, e.message)
}

/// The cards jobs could ever use (seen by their node and not taken offline), as the planner sees
/// them.
pub async fn usable_cards(ctx: &Ctx) -> Result<Vec<Card>, AppError> {
    let rows = gpus::list(&ctx.pool).await.or_internal("reading cards")?;
    Ok(rows
        .iter()
        .filter(|g| g.present && g.state != GpuState::Offline)
        .map(crate::server::admission::pass::to_planner_card)
        .collect())
}

/// The card count of the largest node.
fn largest_node(cards: &[Card]) -> u32 {
    let mut per_node: BTreeMap<&str, u32> = BTreeMap::new();
    for c in cards {
        *per_node.entry(c.node.as_str()).or_default() += 1;
    }
    per_node.values().copied().max().unwrap_or(0)
}

/// A spec that passed every check, with its resolved need and whether it could ever run here.
struct Checked {
    spec: JobSpec,
    need: Option<Need>,
    /// The field a "can never run" refusal names.
    field: &'static str,
    never: Option<String>,
    /// The launch policy the spec was checked against.
    policy: LaunchPolicy,
    /// The parser's bounds it was checked with.
    limits: SpecLimits,
}

/// Everything a submission is checked against, without storing anything: the parser, the launch
/// policy, the manifest and the cards present.
async fn check(ctx: &Ctx, user: &CurrentUser, body: &str) -> Result<Checked, AppError> {
    let pool = &ctx.pool;
    let policy = settings::launch_policy(pool)
        .await
        .or_internal("reading the launch policy")?;
    let cards = usable_cards(ctx).await?;
    let limits = SpecLimits {
        max_gpu_count: largest_node(&cards),
        max_timeout_s: policy.max_timeout_s,
        default_timeout_s: policy.default_timeout_s,
        ..SpecLimits::default()
    };
    let spec = JobSpec::from_json(body, &limits).map_err(spec_error)?;
    check_priority(&spec, user)?;
    if let VramNeed::PerCard(mib) = spec.vram() {
        if u64::from(*mib) < policy.min_vram_mib {
            return Err(AppError::invalid(
                "min_vram_mb",
                format!(
                    "{mib} MiB is below the launch policy's floor of {} MiB per card \
                     (min_vram_mib), which keeps cards from being packed with tiny jobs",
                    policy.min_vram_mib
                ),
            ));
        }
    }
    if !policy.image_allowed(spec.image()) {
        return Err(AppError::invalid(
            "image",
            format!(
                "image {} is not allowed by the launch policy (allowed: {})",
                spec.image(),
                policy.image_allowlist.join(", ")
            ),
        ));
    }
    if spec.port().is_some() && policy.network == crate::model::JobNetwork::None {
        return Err(AppError::invalid(
            "port",
            "the launch policy runs jobs without a network (network: none), so no session \
             can be reached: submit it without a port, or ask an admin",
        ));
    }
    let vols = spec.volumes().to_vec();
    let allow = policy.volume_allowlist.clone();
    tokio::task::spawn_blocking(move || volumes::check(&vols, &allow))
        .await
        .or_internal("checking volumes")??;
    let mut conn = pool.acquire().await.or_internal("acquiring a connection")?;
    let (need, field) = match spec.vram() {
        VramNeed::Workload(w) => match manifest::needs_of(&mut conn, w)
            .await
            .or_internal("reading the manifest")?
        {
            Some(map) => (Some(Need::PerModel(map)), "workload"),
            None => {
                let known = manifest::load(&mut conn)
                    .await
                    .or_internal("reading the manifest")?;
                let names: Vec<&str> = known.needs.keys().map(String::as_str).collect();
                return Err(AppError::invalid(
                    "workload",
                    format!(
                        "unknown workload type `{w}`; known types: {}",
                        if names.is_empty() {
                            "none yet".to_owned()
                        } else {
                            names.join(", ")
                        }
                    ),
                ));
            }
        },
        VramNeed::PerCard(mib) => (Some(Need::Fixed(i64::from(*mib))), "min_vram_mb"),
        VramNeed::None => (None, "gpu_count"),
    };
    let never = need.as_ref().and_then(|n| {
        never_fits(
            n,
            spec.gpu_count(),
            spec.exclusive(),
            &cards,
            ctx.pass.headroom_mib,
        )
    });
    Ok(Checked {
        spec,
        need,
        field,
        never,
        policy,
        limits,
    })
}

/// A stored spec checked as a new submission is (today's parser, policy, manifest and cards),
/// refused if it could never run here; with the parser's bounds, for specs that differ from it
/// only in their env and name (an array's other elements).
pub(crate) async fn check_submission(
    ctx: &Ctx,
    user: &CurrentUser,
    body: &str,
) -> Result<(JobSpec, SpecLimits, LaunchPolicy), AppError> {
    let c = check(ctx, user, body).await?;
    if let Some(reason) = c.never {
        return Err(AppError::invalid(
            c.field,
            format!("this job can never run here: {reason}"),
        ));
    }
    Ok((c.spec, c.limits, c.policy))
}

/// [`check_queued_cap`] for `adding` more jobs, in the caller's transaction.
pub(crate) async fn check_queued_room(
    tx: &mut sqlx::PgConnection,
    user: &CurrentUser,
    policy: &LaunchPolicy,
    adding: usize,
) -> Result<(), AppError> {
    check_queued_cap(tx, user, policy, adding).await
}

/// Refuses a session (a job with a `port`) past the owner's `max_sessions_per_user` sessions that
/// wait or run (0: no cap). Locks the owner's row first, so parallel submits count one after
/// another.
async fn check_sessions_cap(
    tx: &mut sqlx::PgConnection,
    user: &CurrentUser,
    policy: &LaunchPolicy,
) -> Result<(), AppError> {
    let cap = policy.max_sessions_per_user;
    if cap == 0 {
        return Ok(());
    }
    sqlx::query("SELECT 1 FROM users WHERE id = $1 FOR UPDATE")
        .bind(user.id)
        .execute(&mut *tx)
        .await
        .or_internal("locking the owner")?;
    let live = crate::server::db::sessions::count_live(&mut *tx, user.id)
        .await
        .or_internal("counting sessions")?;
    if live >= i64::from(cap) {
        return Err(AppError::invalid(
            "port",
            format!(
                "you already have {live} sessions waiting or running, the most the launch \
                 policy allows (max_sessions_per_user = {cap}); end one first"
            ),
        ));
    }
    Ok(())
}

/// Members may only lower their priority (below 0); managers and admins may raise it.
fn check_priority(spec: &JobSpec, user: &CurrentUser) -> Result<(), AppError> {
    if spec.priority() > 0 && !user.role.at_least(Role::Manager) {
        return Err(AppError::invalid(
            "priority",
            format!(
                "members may only lower a job's priority (0 or below); {} needs a manager or \
                 an admin",
                spec.priority()
            ),
        ));
    }
    Ok(())
}

/// Refuses a submission past the owner's `max_queued_per_user` (admins are not capped). Locks the
/// owner's row first, so parallel submits of one user count one after another.
async fn check_queued_cap(
    tx: &mut sqlx::PgConnection,
    user: &CurrentUser,
    policy: &LaunchPolicy,
    adding: usize,
) -> Result<(), AppError> {
    let cap = policy.max_queued_per_user;
    if cap == 0 || user.role.at_least(Role::Admin) {
        return Ok(());
    }
    let queued = jobs::lock_owner_and_count_queued(tx, user.id)
        .await
        .or_internal("counting queued jobs")?;
    if adding > 1 && queued + adding as i64 > i64::from(cap) {
        return Err(AppError::OverCap {
            message: format!(
                "you have {queued} jobs waiting, and {adding} more would pass the most the \
                 launch policy allows (max_queued_per_user = {cap})"
            ),
            retry_after_s: 60,
        });
    }
    if queued >= i64::from(cap) {
        return Err(AppError::OverCap {
            message: format!(
                "you already have {queued} jobs waiting, the most the launch policy allows \
                 (max_queued_per_user = {cap})"
            ),
            retry_after_s: 60,
        });
    }
    Ok(())
}

/// What would happen to a spec submitted now: fits at the next pass (and where), waits (and why,
/// behind the jobs already queued), or can never run here.
pub async fn preview(ctx: &Ctx, user: &CurrentUser, body: &str) -> Result<Preview, AppError> {
    ctx.submit_rate
        .take(user, crate::server::limits::rate::Action::Preview)?;
    let (extras, body) = batch::split(body)?;
    let Checked {
        spec, need, never, ..
    } = check(ctx, user, &body)
        .await
        .map_err(|e| extras.rename_field(e))?;
    if let Some(reason) = never {
        return Ok(Preview::Never(reason));
    }
    let Some(need) = need else {
        return Ok(Preview::FitsNow("runs without GPUs".into()));
    };
    let (st, _) = pass::dry_run(&ctx.pool, &ctx.pass, chrono::Utc::now())
        .await
        .or_internal("planning a preview")?;
    // A used-up hard budget holds the job whatever the cards have free.
    if let Some(used) = st.budgets.holds(user.id, spec.gpu_count() as i32) {
        return Ok(Preview::WouldWait(
            WaitReason::budget_exhausted(used).message(),
        ));
    }
    let mut input = st.input;
    let id = Uuid::new_v4();
    input.queue.push(QueuedJob {
        id,
        seq: i64::MAX,
        priority: spec.priority(),
        past_soft_budget: st.budgets.soft.contains(&user.id),
        standing: st.standings.of(user.id),
        gpu_count: spec.gpu_count(),
        need,
        exclusive: spec.exclusive(),
        queued_at_ms: input.now_ms,
        nodes: None,
    });
    let plan = planner::plan(&input);
    if let Some(p) = plan.admitted.iter().find(|p| p.job_id == id) {
        let cards: Vec<String> = p
            .cards
            .iter()
            .filter_map(|g| input.cards.iter().find(|c| c.uuid == g.uuid))
            .map(|c| format!("GPU {} ({})", c.index, c.model))
            .collect();
        return Ok(Preview::FitsNow(format!(
            "fits now on {}",
            cards.join(", ")
        )));
    }
    let reason = plan
        .waiting
        .iter()
        .find(|w| w.job_id == id)
        .map(|w| w.reason.message())
        .unwrap_or_else(|| "behind the jobs already queued".into());
    Ok(Preview::WouldWait(format!("would wait: {reason}")))
}

/// Parses, checks against policy and capacity, and queues a job. A refused submission (bad input,
/// over a cap, or a job that could never run here) stores nothing and announces nothing: only a
/// queued job costs a row, and those are bounded by `max_queued_per_user`. Every submission first
/// takes a token of the caller's [`rate::SubmitRate`] bucket.
pub async fn submit(ctx: &Ctx, user: &CurrentUser, body: &str) -> Result<JobAck, AppError> {
    ctx.submit_rate
        .take(user, crate::server::limits::rate::Action::Submit)?;
    let (extras, body) = batch::split(body)?;
    let Checked {
        spec,
        field,
        never,
        policy,
        ..
    } = check(ctx, user, &body)
        .await
        .map_err(|e| extras.rename_field(e))?;
    if let Some(reason) = never {
        return Err(AppError::invalid(
            field,
            format!("this job can never run here: {reason}"),
        ));
    }
    let mut tx = ctx
        .pool
        .begin()
        .await
        .or_internal("beginning a submission")?;
    let adding = extras.batch.as_ref().map_or(1, |b| b.elements.len());
    check_queued_cap(&mut tx, user, &policy, adding).await?;
    if spec.port().is_some() {
        if extras.batch.is_some() {
            return Err(AppError::invalid(
                "port",
                "an array or sweep cannot be a session: submit sessions one at a time",
            ));
        }
        check_sessions_cap(&mut tx, user, &policy).await?;
    }
    batch::check_parents(&mut tx, user, &extras.deps).await?;
    if let Some(b) = &extras.batch {
        let rows = batch::elements_of(&spec, b)?;
        let limit = b.running_limit;
        let ack = batch::enter_array(
            &mut tx,
            user,
            (spec.name(), &spec),
            limit,
            rows,
            &extras.deps,
        )
        .await?;
        tx.commit().await.or_internal("committing a submission")?;
        return Ok(ack);
    }
    let status = JobStatus::Queued;
    let stored = serde_json::to_value(&spec).or_internal("encoding a spec")?;
    let id = lifecycle::enter(&mut *tx, &queued_job(user, spec.name(), stored, &spec))
        .await
        .or_internal("storing a job")?;
    events::job_event(
        &mut *tx,
        id,
        &user.username,
        JobEventKind::Submitted,
        json!({}),
    )
    .await
    .or_internal("recording a submission")?;
    batch::record_deps(&mut tx, &[id], &extras.deps).await?;
    events::wake(&mut *tx, "submit")
        .await
        .or_internal("waking the scheduler")?;
    events::job_changed(&mut *tx, id, status)
        .await
        .or_internal("announcing a submission")?;
    tx.commit().await.or_internal("committing a submission")?;
    Ok(JobAck::one(id, status))
}

/// Job `id`'s row, or a 404 that names it.
pub(crate) async fn find(pool: &sqlx::PgPool, id: Uuid) -> Result<jobs::JobRow, AppError> {
    jobs::get(pool, id)
        .await
        .or_internal("reading a job")?
        .ok_or_else(|| AppError::NotFound(format!("no job {id}")))
}

/// Submits a new job with the spec of an earlier one (its owner only: the env is private). The
/// spec goes through today's parser, manifest and launch policy, like any submission. With
/// `pin_digest` the new job names the exact image the old one ran (`repo@sha256:…`), so a tag
/// moved since changes nothing.
pub async fn resubmit(
    ctx: &Ctx,
    user: &CurrentUser,
    id: Uuid,
    pin_digest: bool,
) -> Result<JobAck, AppError> {
    let job = find(&ctx.pool, id).await?;
    if !access::may_resubmit(user, job.owner_id) {
        return Err(AppError::Forbidden(
            "only the job's owner may resubmit it (its environment is private)".into(),
        ));
    }
    let mut spec = job.spec.clone();
    if pin_digest {
        let digest = job.job.image_digest.as_deref().filter(|d| d.contains('@'));
        let Some(digest) = digest else {
            return Err(AppError::invalid(
                "pin",
                format!(
                    "job {id} has no registry digest to pin: it has not run yet, or ran a local \
                     image that no registry names"
                ),
            ));
        };
        spec["image"] = serde_json::Value::String(digest.to_owned());
    }
    let ack = submit(ctx, user, &spec.to_string()).await?;
    events::job_event(
        &ctx.pool,
        ack.job_id,
        &user.username,
        JobEventKind::ResubmittedFrom,
        json!({ "job": id }),
    )
    .await
    .or_internal("recording a resubmission")?;
    Ok(ack)
}

/// Cancels a job (its owner or an admin). Queued and admitted jobs end at once; a started job is
/// stopped by the runner of its node, which hears the request as a notification.
pub async fn cancel(ctx: &Ctx, user: &CurrentUser, id: Uuid) -> Result<JobAck, AppError> {
    let pool = &ctx.pool;
    let job = find(pool, id).await?;
    if !access::may_cancel(user, job.owner_id) {
        return Err(AppError::Forbidden(
            "only the job's owner or an admin may cancel it".into(),
        ));
    }
    let mut tx = pool.begin().await.or_internal("beginning a cancellation")?;
    let reason = format!("cancelled by {}", user.username);
    // An admin cancelling someone else's job is recorded as the admin's stop, not the owner's.
    let by = if user.id == job.owner_id {
        Actor::Owner
    } else {
        Actor::Admin
    };
    let detail = json!({ "cause": by.cancel_cause() });
    if let Some(status) = lifecycle::cancel_unstarted(&mut *tx, id, by, &reason)
        .await
        .or_internal("cancelling a job")?
    {
        events::job_event(
            &mut *tx,
            id,
            &user.username,
            JobEventKind::Cancelled,
            detail,
        )
        .await
        .or_internal("recording a cancellation")?;
        events::wake(&mut *tx, "cancel")
            .await
            .or_internal("waking the scheduler")?;
        events::job_changed(&mut *tx, id, JobStatus::Cancelled)
            .await
            .or_internal("announcing a cancellation")?;
        tx.commit().await.or_internal("committing a cancellation")?;
        return Ok(JobAck::one(id, status));
    }
    if lifecycle::request_cancel(&mut *tx, id, by)
        .await
        .or_internal("requesting a cancellation")?
    {
        events::job_event(
            &mut *tx,
            id,
            &user.username,
            JobEventKind::CancelRequested,
            detail,
        )
        .await
        .or_internal("recording a cancellation")?;
        events::announce(&mut *tx, &LiveEvent::cancel_requested(id))
            .await
            .or_internal("notifying the runner")?;
        tx.commit().await.or_internal("committing a cancellation")?;
        return Ok(JobAck::one(id, job.job.status));
    }
    Err(AppError::Conflict(format!(
        "job {id} has already ended ({})",
        job.job.status
    )))
}
