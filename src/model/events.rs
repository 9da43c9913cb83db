//! What happened, in names: the kinds of job and audit events, and the live events every gpuq
//! process tells the others (and the browsers) about.

use super::vocab::vocabulary;
use super::JobStatus;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

vocabulary! {
    /// A step in one job's trail (`job_events.kind`).
    pub enum JobEventKind {
        /// Accepted into the queue.
        Submitted = "submitted",
        /// Refused at submission: it could never run here.
        Rejected = "rejected",
        /// Created as a copy of another job (`detail.job`).
        ResubmittedFrom = "resubmitted_from",
        /// Its workload type was renamed while it waited.
        WorkloadRenamed = "workload_renamed",
        /// A pass reserved its cards.
        Admitted = "admitted",
        /// Its node's runner claimed it.
        Starting = "starting",
        /// The created container was checked against the grant.
        FenceVerified = "fence_verified",
        /// `docker start` was sent.
        StartIssued = "start_issued",
        /// The container runs.
        Started = "started",
        /// The runner could not launch it yet and gave it back.
        LaunchDeferred = "launch_deferred",
        /// A restarted runner took its running container back.
        Readopted = "readopted",
        /// Back in the queue, its cards released (`detail.reason`): its node was lost and it had
        /// asked for `requeue_on_node_loss` (`node_lost`, with node and attempt), or its owner was
        /// disabled before it started (`user_disabled`).
        Requeued = "requeued",
        /// Its owner was disabled: it stays in the queue, and no pass admits it until an admin
        /// enables the owner again (`detail.reason`: `user_disabled`).
        Held = "held",
        /// Its owner was enabled again: it waits for cards like any queued job.
        Unheld = "unheld",
        /// Its owner or an admin asked a running job to stop.
        CancelRequested = "cancel_requested",
        /// Exited 0.
        Succeeded = "succeeded",
        /// Exited non-zero or could not run.
        Failed = "failed",
        /// Stopped at its deadline.
        TimedOut = "timed_out",
        /// Cancelled.
        Cancelled = "cancelled",
        /// Its cards were given back.
        Released = "released",
        /// Its processes stayed above its VRAM commitment on a card for `--vram-overuse-samples`
        /// readings (`detail`: gpu, committed_mib, used_mib, samples).
        VramOverCommitment = "vram_over_commitment",
        /// gpuq stopped it: over its commitment on a card that ran short (`detail`: gpu,
        /// committed_mib, used_mib, free_mib, reserve_mib).
        VramOveruse = "vram_overuse",
        /// Its cards were judged idle: no process of it above the launch policy's
        /// `idle_sm_percent` (or no process at all) for `idle_after_min` (`detail`: quiet_since,
        /// no_process, sm_percent, after_min, and stop_at under `idle_action: stop`).
        IdleFlagged = "idle_flagged",
        /// A job flagged idle got busy again: the flag is cleared (`detail`: busy_at).
        IdleCleared = "idle_cleared",
        /// gpuq stopped it: still idle `idle_grace_min` after the flag (`detail`: quiet_since,
        /// reclaim_gpu_hours).
        Idle = "idle",
        /// An interactive session has been idle (no HTTP or WebSocket traffic, no GPU activity)
        /// for most of `session_idle_min`: it is stopped if it stays so (`detail.reason`).
        SessionIdleWarning = "session_idle_warning",
        /// gpuq stops an idle interactive session (`detail.reason`, starting `idle`).
        SessionIdleStop = "session_idle_stop",
    }
}

impl JobEventKind {
    /// The event that records a job ending with `status`, if that status is an end.
    pub fn ending(status: JobStatus) -> Option<JobEventKind> {
        match status {
            JobStatus::Succeeded => Some(JobEventKind::Succeeded),
            JobStatus::Failed => Some(JobEventKind::Failed),
            JobStatus::TimedOut => Some(JobEventKind::TimedOut),
            JobStatus::Cancelled => Some(JobEventKind::Cancelled),
            JobStatus::Rejected => Some(JobEventKind::Rejected),
            _ => None,
        }
    }
}

vocabulary! {
    /// A change to the cluster's rules or people (`audit_events.kind`).
    pub enum AuditKind {
        /// A workload type was created or changed.
        ManifestPut = "manifest.put",
        /// A workload type was renamed.
        ManifestRename = "manifest.rename",
        /// A workload type was deleted.
        ManifestDelete = "manifest.delete",
        /// An admin put a card online, draining or offline.
        GpuState = "gpu.state",
        /// An admin set a simulated card's foreign memory.
        GpuSimExternal = "gpu.sim_external",
        /// An admin set what jobs use on a simulated card.
        GpuSimJobUsage = "gpu.sim_job_usage",
        /// A user was created.
        UserCreate = "user.create",
        /// A user's role or enabled state changed.
        UserUpdate = "user.update",
        /// A user changed their password.
        UserPassword = "user.password",
        /// The launch policy was replaced.
        LaunchPolicy = "settings.launch_policy",
        /// Someone signed in with the right password (subject: the user; detail: client, via).
        SignIn = "auth.sign_in",
        /// A password was checked and was wrong, or the account is disabled (subject: the name
        /// tried; detail: client, reason). Attempts refused before any check are not recorded.
        SignInFailed = "auth.sign_in_failed",
        /// A user created an API token (subject: the token's name; detail: id, expiry).
        TokenCreate = "token.create",
        /// An API token authenticated a request (at most once per token per
        /// `TOKEN_USE_AUDIT_EVERY_MIN` minutes, see `auth::service`).
        TokenUse = "token.use",
        /// A user revoked one of their API tokens.
        TokenRevoke = "token.revoke",
        /// An admin drained a node: it runs its jobs out and takes no new ones.
        NodeDrain = "node.drain",
        /// An admin put a drained node back to taking work.
        NodeUndrain = "node.undrain",
        /// An admin forgot a lost node: its jobs ended `node_lost` and their cards were released.
        NodeForget = "node.forget",
        /// An admin set (or replaced) a registry's credentials (subject: the host; detail: the
        /// username, never the password).
        RegistrySet = "registry.set",
        /// An admin removed a registry's credentials (subject: the host).
        RegistryRemove = "registry.remove",
        /// An admin created a team (subject: its name; detail: weight, budget).
        TeamCreate = "team.create",
        /// An admin changed a team's weight or budget (subject: its name; detail: the change).
        TeamUpdate = "team.update",
    }
}

/// What a job-change notification says: the job's new status, or that a stop was asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum JobChange {
    /// Its owner or an admin asked the running job to stop (`"cancel_requested"`).
    CancelRequested(CancelRequested),
    /// Its image's pull on a node moved (`"pulling"`): its wait reason says how far. At most
    /// twice a second per pull.
    Pulling(Pulling),
    /// Its status is now this.
    Status(JobStatus),
}

/// The marker of [`JobChange::CancelRequested`] on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum CancelRequested {
    /// `"cancel_requested"`.
    #[serde(rename = "cancel_requested")]
    CancelRequested,
}

/// The marker of [`JobChange::Pulling`] on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Pulling {
    /// `"pulling"`.
    #[serde(rename = "pulling")]
    Pulling,
}

/// A live event: what one gpuq process tells every other (through Postgres NOTIFY) and what the
/// browsers receive on `/api/v1/events`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum LiveEvent {
    /// A job changed.
    Job {
        /// Which job.
        job_id: Uuid,
        /// What changed.
        status: JobChange,
    },
    /// An admission pass admitted or reclaimed something.
    Pass {
        /// Jobs admitted.
        admitted: u64,
        /// Jobs whose capacity was taken back.
        reclaimed: u64,
    },
    /// The card inventory of a node changed.
    Cards,
    /// An admin changed something that decides admission.
    Changed {
        /// What kind of change.
        what: AuditKind,
        /// Which thing.
        subject: String,
    },
    /// Someone else's job changed (what a member's stream carries instead of the job's details):
    /// the shared queue may look different.
    Queue,
    /// Events may have been missed (the stream reconnected or fell behind): refetch everything.
    Resync,
}

impl LiveEvent {
    /// A job's new status.
    pub fn job(job_id: Uuid, status: JobStatus) -> LiveEvent {
        LiveEvent::Job {
            job_id,
            status: JobChange::Status(status),
        }
    }

    /// A running job was asked to stop.
    pub fn cancel_requested(job_id: Uuid) -> LiveEvent {
        LiveEvent::Job {
            job_id,
            status: JobChange::CancelRequested(CancelRequested::CancelRequested),
        }
    }

    /// A queued job's image is being pulled and its progress moved.
    pub fn pulling(job_id: Uuid) -> LiveEvent {
        LiveEvent::Job {
            job_id,
            status: JobChange::Pulling(Pulling::Pulling),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn live_events_keep_their_wire_shape() {
        let id = Uuid::nil();
        let cases = [
            (
                LiveEvent::job(id, JobStatus::Running),
                json!({"kind": "job", "job_id": id, "status": "running"}),
            ),
            (
                LiveEvent::cancel_requested(id),
                json!({"kind": "job", "job_id": id, "status": "cancel_requested"}),
            ),
            (
                LiveEvent::pulling(id),
                json!({"kind": "job", "job_id": id, "status": "pulling"}),
            ),
            (
                LiveEvent::Pass {
                    admitted: 2,
                    reclaimed: 1,
                },
                json!({"kind": "pass", "admitted": 2, "reclaimed": 1}),
            ),
            (LiveEvent::Cards, json!({"kind": "cards"})),
            (
                LiveEvent::Changed {
                    what: AuditKind::ManifestPut,
                    subject: "llm".into(),
                },
                json!({"kind": "changed", "what": "manifest.put", "subject": "llm"}),
            ),
            (LiveEvent::Resync, json!({"kind": "resync"})),
        ];
        for (event, wire) in cases {
            assert_eq!(serde_json::to_value(&event).unwrap(), wire);
            assert_eq!(serde_json::from_value::<LiveEvent>(wire).unwrap(), event);
        }
        assert!(serde_json::from_value::<LiveEvent>(
            json!({"kind": "job", "job_id": id, "status": "dancing"})
        )
        .is_err());
    }

    #[test]
    fn every_ending_status_has_its_event() {
        for &s in JobStatus::ALL {
            assert_eq!(JobEventKind::ending(s).is_some(), s.is_terminal(), "{s}");
        }
    }
}
