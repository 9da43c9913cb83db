//! The job lifecycle: every change of `jobs.status`, and the one table that says which are allowed.
//!
//! A job's status is written here and nowhere else (a unit test scans `src/` for any other
//! statement that sets it). Each statement declares the change it makes as a [`Move`]: the
//! statuses it may take a job from and the ones it may leave it in. Before it runs, the move is
//! checked against [`TRANSITIONS`] for the [`Actor`] that asks ([`permit`]), and its SQL is
//! guarded by the move's own `from` list ([`Move::guard`]), so a job in any other status is left
//! as it is and the statement says it changed nothing. A stale actor (a runner finishing a job an
//! admin already failed, a pass admitting a job cancelled since it read the queue) therefore
//! changes nothing, as before.
//!
//! Stops carry their cause ([`StopCause`]): a cancel is asked for with the person's or the rule's
//! cause, stored in `jobs.stop_cause` with the request, and the runner's end of a stopped job
//! reads it in the same statement that ends it (`run::finish_stopped`), so nothing is looked up
//! twice and the record (the job's row and its events) says who stopped it.
//!
//! The table is drawn in `docs/architecture.md`, "The job lifecycle".

mod depend;
mod enter;
mod place;
mod run;
mod stop;
#[cfg(test)]
mod tests;

pub use depend::cancel_dependents;
pub use enter::{enter, enter_batch, BatchEntry, BatchRow, NewJob};
pub use place::{admit, fail_on_forgotten_node, fail_queued, requeue_lost_jobs};
pub use run::{claim, finish, finish_stopped, set_running, unclaim, Ending};
pub use stop::{
    cancel_unstarted, cancel_unstarted_all, request_cancel, request_stop, request_stop_of,
    requeue_admitted_of,
};

use crate::model::{JobStatus, StopCause};
use JobStatus::*;

/// Who may cause a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Actor {
    /// The job's owner.
    Owner,
    /// An admin, on any job.
    Admin,
    /// An admission pass, under the advisory lock.
    Scheduler,
    /// The runner of the job's node.
    Runner,
}

impl Actor {
    /// The cause a cancel by this person records.
    pub fn cancel_cause(self) -> StopCause {
        match self {
            Actor::Admin => StopCause::Admin,
            _ => StopCause::Owner,
        }
    }
}

/// One allowed change: from a status (`None`: the job's creation) to another, who may make it,
/// and when it happens.
#[derive(Debug, Clone, Copy)]
pub struct Transition {
    /// The status before (`None`: the job does not exist yet).
    pub from: Option<JobStatus>,
    /// The status after.
    pub to: JobStatus,
    /// Who may make it.
    pub by: &'static [Actor],
    /// When it happens, in a few words (the docs' table says the same).
    pub when: &'static str,
}

const fn t(
    from: Option<JobStatus>,
    to: JobStatus,
    by: &'static [Actor],
    when: &'static str,
) -> Transition {
    Transition { from, to, by, when }
}

const OWNER: &[Actor] = &[Actor::Owner];
const PEOPLE: &[Actor] = &[Actor::Owner, Actor::Admin];
const ADMIN: &[Actor] = &[Actor::Admin];
const SCHEDULER: &[Actor] = &[Actor::Scheduler];
const RUNNER: &[Actor] = &[Actor::Runner];
const MACHINES: &[Actor] = &[Actor::Scheduler, Actor::Runner];

/// Every change a job's status may make, and who may make it. Anything not listed is refused.
pub const TRANSITIONS: &[Transition] = &[
    t(None, Queued, OWNER, "submitted"),
    t(None, Rejected, OWNER, "submitted, and it could never run here"),
    t(Some(Queued), Admitted, SCHEDULER, "a pass reserved its cards"),
    t(Some(Queued), Cancelled, PEOPLE, "cancelled while waiting"),
    t(Some(Queued), Cancelled, SCHEDULER, "a job it depends on ended so that its dependency can no longer hold"),
    t(Some(Queued), Failed, MACHINES, "its image cannot be had (its node's puller found so, or the pass, on every node)"),
    t(Some(Admitted), Starting, RUNNER, "its node's runner claimed it"),
    t(Some(Admitted), Cancelled, PEOPLE, "cancelled before its runner claimed it (the next pass takes its cards back)"),
    t(Some(Admitted), Queued, ADMIN, "its owner was disabled: back in the queue, held"),
    t(Some(Admitted), Queued, SCHEDULER, "its node was lost and it asked for requeue_on_node_loss"),
    t(Some(Admitted), Failed, ADMIN, "an admin forgot its lost node"),
    t(Some(Starting), Running, RUNNER, "its container started"),
    t(Some(Starting), Admitted, RUNNER, "the launch could not go on yet (Docker away, gpuq stopping, a runtime restart before its start): launched again later"),
    t(Some(Starting), Succeeded, RUNNER, "exited 0"),
    t(Some(Starting), Failed, RUNNER, "could not be launched, its fence did not hold, or gpuq stopped it (cause recorded)"),
    t(Some(Starting), TimedOut, RUNNER, "ran past its deadline"),
    t(Some(Starting), Cancelled, RUNNER, "stopped at a person's request (cause recorded)"),
    t(Some(Starting), Queued, SCHEDULER, "its node was lost and it asked for requeue_on_node_loss"),
    t(Some(Starting), Failed, ADMIN, "an admin forgot its lost node"),
    t(Some(Running), Succeeded, RUNNER, "exited 0"),
    t(Some(Running), Failed, RUNNER, "exited non-zero, vanished, or gpuq stopped it (cause recorded)"),
    t(Some(Running), TimedOut, RUNNER, "ran past its deadline"),
    t(Some(Running), Cancelled, RUNNER, "stopped at a person's request (cause recorded)"),
    t(Some(Running), Queued, SCHEDULER, "its node was lost and it asked for requeue_on_node_loss"),
    t(Some(Running), Failed, ADMIN, "an admin forgot its lost node"),
];

/// Whether `by` may move a job from `from` to `to`.
pub fn allowed(from: Option<JobStatus>, to: JobStatus, by: Actor) -> bool {
    TRANSITIONS
        .iter()
        .any(|t| t.from == from && t.to == to && t.by.contains(&by))
}

/// The change one statement makes: it takes a job from one of `from` (empty: it creates the job)
/// to one of `to`.
#[derive(Debug, Clone, Copy)]
pub struct Move {
    /// What the statement is, for errors.
    pub name: &'static str,
    /// The statuses it takes jobs from; empty for a statement that creates jobs.
    pub from: &'static [JobStatus],
    /// The statuses it may leave them in.
    pub to: &'static [JobStatus],
}

impl Move {
    /// `status IN ('a', 'b')`: the SQL guard that keeps the statement to its `from` list.
    pub fn guard(&self, column: &str) -> String {
        let names: Vec<String> = self.from.iter().map(|s| format!("'{s}'")).collect();
        format!("{column} IN ({})", names.join(", "))
    }

    /// Every (from, to) pair the statement may make.
    pub fn pairs(&self) -> Vec<(Option<JobStatus>, JobStatus)> {
        let from: Vec<Option<JobStatus>> = if self.from.is_empty() {
            vec![None]
        } else {
            self.from.iter().copied().map(Some).collect()
        };
        from.iter()
            .flat_map(|&f| self.to.iter().map(move |&t| (f, t)))
            .collect()
    }
}

/// Checks that `by` may make every change of `mv`. A refusal is an
/// [`sqlx::Error::InvalidArgument`] naming the actor and the change: nothing was written.
pub fn permit(mv: &Move, by: Actor) -> sqlx::Result<()> {
    match mv.pairs().into_iter().find(|&(f, t)| !allowed(f, t, by)) {
        None => Ok(()),
        Some((from, to)) => Err(sqlx::Error::InvalidArgument(format!(
            "the job lifecycle refuses {}: {by:?} may not move a job from {} to {to}",
            mv.name,
            from.map_or("nowhere (a new job)".to_owned(), |f| f.to_string()),
        ))),
    }
}
