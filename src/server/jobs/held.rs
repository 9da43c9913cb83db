//! A disabled user's jobs: those not started are held in the queue, those started are stopped.
//!
//! Disabling ends a user's sessions and tokens at once; it must end their use of the cards too.
//! Started jobs are asked to stop the way a VRAM overrun stops one (`cancel_requested_at` and a
//! `stop_reason`): the runner of their node hears it, stops the container (SIGTERM, the grace,
//! SIGKILL), removes it and ends the job `failed` with reason [`USER_DISABLED`]. Admitted jobs go
//! back to the queue with their cards released. Queued jobs stay queued, in their place, and no
//! admission pass admits them while their owner is disabled (the pass holds them back with a wait
//! reason that says so), so enabling the owner again lets them run as if nothing had happened.

use crate::model::{JobEventKind, JobStatus, LiveEvent, StopCause};
use crate::server::db::{events, jobs, lifecycle};
use serde_json::json;
use sqlx::PgConnection;
use uuid::Uuid;

/// The reason a disabled user's started jobs end with, and their queued jobs are held for.
pub const USER_DISABLED: &str = "user_disabled";

/// What disabling did to a user's jobs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Held {
    /// Jobs held in the queue (admitted ones were put back first).
    pub held: Vec<Uuid>,
    /// Started jobs asked to stop.
    pub stopping: Vec<Uuid>,
}

/// Holds `owner`'s unstarted jobs and asks the runners to stop their started ones, in the caller's
/// transaction (the one that disables the owner). The caller holds the admission lock, so no pass
/// admits one of these jobs between the owner's disabling and this. `actor` is the admin.
pub async fn hold_and_stop(tx: &mut PgConnection, owner: Uuid, actor: &str) -> sqlx::Result<Held> {
    let detail = json!({ "reason": USER_DISABLED });
    // Their rows first, before any card's: no runner claims or ends one of them from here on, and
    // a runner's end of another job (its row, then its cards) cannot wait on this in a circle.
    jobs::lock_placed_of(&mut *tx, owner).await?;
    for job in lifecycle::requeue_admitted_of(&mut *tx, owner).await? {
        events::job_event(&mut *tx, job, actor, JobEventKind::Requeued, detail.clone()).await?;
    }
    let held = jobs::queued_of(&mut *tx, owner).await?;
    for &job in &held {
        events::job_event(&mut *tx, job, actor, JobEventKind::Held, detail.clone()).await?;
        events::job_changed(&mut *tx, job, JobStatus::Queued).await?;
    }
    let stopping =
        lifecycle::request_stop_of(&mut *tx, owner, StopCause::UserDisabled, USER_DISABLED).await?;
    for &job in &stopping {
        let kind = JobEventKind::CancelRequested;
        events::job_event(&mut *tx, job, actor, kind, detail.clone()).await?;
        events::announce(&mut *tx, &LiveEvent::cancel_requested(job)).await?;
    }
    Ok(Held { held, stopping })
}

/// Lets `owner`'s held jobs compete for cards again (the owner was enabled), in the caller's
/// transaction, which wakes the schedulers. Returns the jobs.
pub async fn unhold(tx: &mut PgConnection, owner: Uuid, actor: &str) -> sqlx::Result<Vec<Uuid>> {
    let queued = jobs::queued_of(&mut *tx, owner).await?;
    for &job in &queued {
        events::job_event(&mut *tx, job, actor, JobEventKind::Unheld, json!({})).await?;
        events::job_changed(&mut *tx, job, JobStatus::Queued).await?;
    }
    Ok(queued)
}
