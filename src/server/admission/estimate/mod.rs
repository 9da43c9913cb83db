//! The start estimate: when each queued job is expected to start, and when at the latest.
//!
//! Both come from the same simulation ([`sim::Sim`]): the admission pass run forward over the
//! current ledger with the pass's own caps and the real planner. They differ only in when the jobs
//! holding cards give them back:
//!
//! - **expected** (`estimated_start_at`): a job ends after its workload type's observed run time,
//!   and at its deadline where its type has no history. For a job already holding cards that is
//!   the median of the runs that lasted longer than it has so far, less what it has run; for a
//!   queued job, by default the mean of its type's runs (a long wait is the sum of the runs ahead,
//!   and with heavy-tailed run times the sum follows the mean, not the median: `gpuq bench
//!   replay --typical` compares the choices);
//! - **latest** (`latest_start_at`): every job runs to its deadline, plus a slack for the stop and
//!   the release. Nothing submitted later is foreseen, so a later job of higher priority (an
//!   admin's), or a node that goes away, can break it.
//!
//! [`run`] refreshes the figures of the whole cluster every few seconds, one node at a time, and
//! stores them (`job_estimates`), so that reading a job costs one indexed lookup.

mod history;
pub mod sim;
mod store;

pub use history::{Durations, History, Typical};
pub(crate) use store::holding;
pub use store::{read, refresh, run, EstimateConfig, StoredEstimate, ESTIMATE_LOCK, SLACK};

use crate::server::admission::pass::Caps;
use crate::server::admission::planner::{Card, CardGrant, QueuedJob};
use sim::{Active, Sim, SimBackfill, SimJob, Start};
use std::collections::HashMap;
use uuid::Uuid;

/// A job that holds cards now (admitted, starting, running, or ended and not yet released).
#[derive(Debug, Clone)]
pub struct Holding {
    /// The job.
    pub id: Uuid,
    /// Its owner.
    pub owner: Uuid,
    /// Cards it asked for.
    pub gpu_count: u32,
    /// What it holds.
    pub grants: Vec<CardGrant>,
    /// Whole cards.
    pub exclusive: bool,
    /// Its array, if it is an element of one.
    pub array: Option<Uuid>,
    /// Its workload type, whose history says how long it runs.
    pub workload: Option<String>,
    /// Its run-time limit.
    pub timeout_ms: i64,
    /// When its container started (its deadline counts from there); `None` before.
    pub started_ms: Option<i64>,
    /// It has ended already; the next pass gives its cards back.
    pub ended: bool,
}

impl Holding {
    /// When it ends at the latest, ms, the slack left out: its deadline, which counts from its
    /// container's start (from `now_ms` before that); `now_ms` once it has ended.
    pub fn deadline_ms(&self, now_ms: i64) -> i64 {
        if self.ended {
            return now_ms;
        }
        self.started_ms
            .unwrap_or(now_ms)
            .saturating_add(self.timeout_ms)
    }
}

/// A queued job.
#[derive(Debug, Clone)]
pub struct Waiter {
    /// The job as the planner takes it.
    pub job: QueuedJob,
    /// Its owner.
    pub owner: Uuid,
    /// Its workload type.
    pub workload: Option<String>,
    /// Its run-time limit.
    pub timeout_ms: i64,
    /// Jobs that must end first.
    pub after: Vec<Uuid>,
    /// Its array.
    pub array: Option<Uuid>,
    /// Why it cannot start as things stand, if so.
    pub held: Option<String>,
}

/// Everything an estimate depends on; nothing else is consulted.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// The cards and their ledger.
    pub cards: Vec<Card>,
    /// Jobs holding cards.
    pub holding: Vec<Holding>,
    /// Jobs waiting.
    pub queued: Vec<Waiter>,
    /// The launch policy's caps (running counts are taken from `holding`).
    pub caps: Caps,
    /// Running limit per array.
    pub array_limits: HashMap<Uuid, u32>,
    /// The pass's headroom.
    pub headroom_mib: i64,
    /// The pass's starvation limit.
    pub starvation_after_ms: i64,
    /// Added to every deadline in the bound: the stop's grace, the release, the launch.
    pub slack_ms: i64,
    /// Observed run times per workload type.
    pub history: History,
    /// Which figure of them the estimate takes: for the jobs holding cards, and for the queued
    /// jobs once started.
    pub typical: (Typical, Typical),
    /// Now.
    pub now_ms: i64,
    /// The launch policy's `backfill`: the simulation keeps cards for heads as the pass does.
    pub backfill: bool,
}

/// One queued job's two figures.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Estimate {
    /// When it is expected to start.
    pub expected: Start,
    /// When it starts at the latest, barring later priority jobs and lost nodes.
    pub latest: Start,
}

/// Which run times a simulation assumes.
#[derive(Clone, Copy)]
enum Runs {
    Expected,
    Deadlines,
}

impl Snapshot {
    /// When a job holding cards gives them back.
    fn end_of(&self, h: &Holding, runs: Runs) -> i64 {
        let now = self.now_ms;
        if h.ended {
            return now;
        }
        let deadline = h.deadline_ms(now);
        let end = match runs {
            Runs::Deadlines => deadline.saturating_add(self.slack_ms),
            Runs::Expected => {
                let typed = h.workload.as_ref().and_then(|w| self.history.get(w));
                let t = self.typical.0;
                let more = match (typed, h.started_ms) {
                    (Some(d), Some(start)) => d.remaining(now - start, t),
                    (Some(d), None) => d.typical(t),
                    (None, _) => None,
                };
                more.map_or(deadline, |m| now.saturating_add(m).min(deadline))
            }
        };
        end.max(now)
    }

    /// How long a queued job runs once started.
    fn run_of(&self, w: &Waiter, runs: Runs) -> i64 {
        match runs {
            Runs::Deadlines => w.timeout_ms.saturating_add(self.slack_ms),
            Runs::Expected => w
                .workload
                .as_ref()
                .and_then(|t| self.history.get(t))
                .and_then(|d| d.typical(self.typical.1))
                .map_or(w.timeout_ms, |m| m.min(w.timeout_ms)),
        }
    }

    fn sim(&self, runs: Runs) -> Sim {
        Sim {
            cards: self.cards.clone(),
            active: self
                .holding
                .iter()
                .map(|h| Active {
                    id: h.id,
                    owner: h.owner,
                    gpu_count: h.gpu_count,
                    grants: h.grants.clone(),
                    exclusive: h.exclusive,
                    array: h.array,
                    ends_ms: self.end_of(h, runs),
                })
                .collect(),
            pending: self
                .queued
                .iter()
                .map(|w| SimJob {
                    job: w.job.clone(),
                    owner: w.owner,
                    run_ms: self.run_of(w, runs),
                    after: w.after.clone(),
                    array: w.array,
                    held: w.held.clone(),
                })
                .collect(),
            caps: self.caps.clone(),
            array_limits: self.array_limits.clone(),
            headroom_mib: self.headroom_mib,
            starvation_after_ms: self.starvation_after_ms,
            now_ms: self.now_ms,
            backfill: self.backfill.then(|| self.sim_backfill()),
        }
    }

    /// Backfill's bounds as the pass reads them: deadlines of the jobs holding cards, timeouts.
    fn sim_backfill(&self) -> SimBackfill {
        let now = self.now_ms;
        SimBackfill {
            timeout_ms: self
                .queued
                .iter()
                .map(|w| (w.job.id, w.timeout_ms))
                .chain(self.holding.iter().map(|h| (h.id, h.timeout_ms)))
                .collect(),
            deadline_ms: self
                .holding
                .iter()
                .map(|h| (h.id, h.deadline_ms(now)))
                .collect(),
            slack_ms: self.slack_ms,
        }
    }
}

/// Both figures for every queued job of `snap`, each simulation stopping after `max_steps` ends.
/// The bound is never earlier than the estimate (a job ending sooner can, through the planner's
/// best fit, delay another: the bound takes the later of the two).
pub fn estimate(snap: &Snapshot, max_steps: usize) -> HashMap<Uuid, Estimate> {
    let expected = snap.sim(Runs::Expected).run(max_steps);
    let mut latest = snap.sim(Runs::Deadlines).run(max_steps);
    expected
        .into_iter()
        .map(|(id, e)| {
            let l = latest.remove(&id).unwrap_or(Start::Unknown);
            let l = match (&e, l) {
                (Start::Never(w), _) => Start::Never(w.clone()),
                (Start::At(a), Start::At(b)) => Start::At((*a).max(b)),
                (_, l) => l,
            };
            (
                id,
                Estimate {
                    expected: e,
                    latest: l,
                },
            )
        })
        .collect()
}

#[cfg(test)]
mod tests;
