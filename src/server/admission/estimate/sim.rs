//! The admission pass run forward in virtual time: at each moment a job ends, the pass's own caps
//! and the real planner ([`planner::plan`]) decide what starts next. Pure, like the planner: the
//! start estimate runs it over a snapshot of the ledger, and `gpuq bench replay` drives its
//! simulated cluster with it.

use crate::server::admission::pass::Caps;
use crate::server::admission::planner::{
    self, never_fits, Backfill, Card, CardGrant, PlanInput, QueuedJob, Release, Reservation,
};
use std::collections::{HashMap, HashSet};
use uuid::Uuid;

/// A queued job as the simulation sees it.
#[derive(Debug, Clone)]
pub struct SimJob {
    /// The job as the planner takes it.
    pub job: QueuedJob,
    /// Its owner, for the per-user cap.
    pub owner: Uuid,
    /// How long it runs once started (virtual milliseconds).
    pub run_ms: i64,
    /// Jobs that must end before it may start (dependencies; empty until they land).
    pub after: Vec<Uuid>,
    /// The array it is an element of, whose running limit it counts against.
    pub array: Option<Uuid>,
    /// Why it cannot start as things stand (its image cannot be had, its owner is disabled);
    /// `None`: it waits only for cards.
    pub held: Option<String>,
}

/// A job that holds cards (or a place under a cap) until `ends_ms`.
#[derive(Debug, Clone)]
pub struct Active {
    /// The job.
    pub id: Uuid,
    /// Its owner.
    pub owner: Uuid,
    /// Cards it asked for (0: a job without GPUs, counted under `max_cpu_jobs_per_node`).
    pub gpu_count: u32,
    /// What it holds, card by card.
    pub grants: Vec<CardGrant>,
    /// It holds its cards whole.
    pub exclusive: bool,
    /// The array it is an element of.
    pub array: Option<Uuid>,
    /// When it ends and gives its cards back.
    pub ends_ms: i64,
}

/// When a simulated job starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Start {
    /// At this virtual time (milliseconds).
    At(i64),
    /// Never as things stand, and why.
    Never(String),
    /// Not within the simulation's reach (held behind something that never ends, or past its
    /// step limit).
    Unknown,
}

/// What backfill needs in the simulation: the bounds a real pass reads.
#[derive(Debug, Clone, Default)]
pub struct SimBackfill {
    /// Each job's timeout, ms (queued jobs, and those holding cards).
    pub timeout_ms: HashMap<Uuid, i64>,
    /// The deadline of each job holding cards, ms; jobs the simulation starts get theirs then.
    pub deadline_ms: HashMap<Uuid, i64>,
    /// The pass's slack.
    pub slack_ms: i64,
}

/// A cluster in virtual time: cards, what holds them, and the queue.
#[derive(Debug, Clone)]
pub struct Sim {
    /// The cards, their ledger kept up to date as jobs start and end.
    pub cards: Vec<Card>,
    /// Jobs holding cards or places.
    pub active: Vec<Active>,
    /// Jobs waiting, in any order.
    pub pending: Vec<SimJob>,
    /// The launch policy's caps; `running` and `cpu_running` are counted from `active` at each
    /// step.
    pub caps: Caps,
    /// Running limit per array.
    pub array_limits: HashMap<Uuid, u32>,
    /// The pass's headroom.
    pub headroom_mib: i64,
    /// The pass's starvation limit.
    pub starvation_after_ms: i64,
    /// Virtual now.
    pub now_ms: i64,
    /// Backfill, as the launch policy has it; `None`: off.
    pub backfill: Option<SimBackfill>,
}

impl Sim {
    /// One admission pass at `now_ms`: what it admits moves from `pending` to `active`, ending
    /// after its `run_ms`. Returns the ids admitted, in admission order.
    pub fn step(&mut self) -> Vec<Uuid> {
        self.step_kept().0
    }

    /// As [`Sim::step`], with the cards the pass kept for heads of the queue (backfill).
    pub fn step_kept(&mut self) -> (Vec<Uuid>, Vec<Reservation>) {
        let mut caps = self.caps.clone();
        caps.running.clear();
        caps.cpu_running = 0;
        let mut in_array: HashMap<Uuid, u32> = HashMap::new();
        for a in &self.active {
            *caps.running.entry(a.owner).or_default() += 1;
            if a.gpu_count == 0 {
                caps.cpu_running += 1;
            }
            if let Some(arr) = a.array {
                *in_array.entry(arr).or_default() += 1;
            }
        }
        let live: HashSet<Uuid> = self
            .pending
            .iter()
            .map(|p| p.job.id)
            .chain(self.active.iter().map(|a| a.id))
            .collect();
        self.pending.sort_by_key(|p| p.job.queue_key());
        let mut queue = Vec::new();
        for p in &self.pending {
            if p.held.is_some() || p.after.iter().any(|a| live.contains(a)) {
                continue;
            }
            if let Some(limit) = p.array.and_then(|a| self.array_limits.get(&a)) {
                let n = in_array.entry(p.array.unwrap_or_default()).or_default();
                if *n >= *limit {
                    continue;
                }
                *n += 1;
            }
            if caps.take(p.owner, p.job.gpu_count as i32).is_none() {
                queue.push(p.job.clone());
            }
        }
        if queue.is_empty() {
            return (Vec::new(), Vec::new());
        }
        let backfill = self.backfill.as_ref().map(|b| self.bounds(b, &queue));
        let plan = planner::plan(&PlanInput {
            cards: self.cards.clone(),
            queue,
            headroom_mib: self.headroom_mib,
            starvation_after_ms: self.starvation_after_ms,
            now_ms: self.now_ms,
            backfill,
        });
        let mut started = Vec::with_capacity(plan.admitted.len());
        for placement in plan.admitted {
            let Some(i) = self
                .pending
                .iter()
                .position(|p| p.job.id == placement.job_id)
            else {
                continue;
            };
            let p = self.pending.swap_remove(i);
            let active = Active {
                id: p.job.id,
                owner: p.owner,
                gpu_count: p.job.gpu_count,
                grants: placement.cards,
                exclusive: p.job.exclusive,
                array: p.array,
                ends_ms: self.now_ms.saturating_add(p.run_ms.max(0)),
            };
            self.hold(&active, 1);
            if let Some(b) = &mut self.backfill {
                if let Some(t) = b.timeout_ms.get(&active.id).copied() {
                    b.deadline_ms
                        .insert(active.id, self.now_ms.saturating_add(t));
                }
            }
            started.push(active.id);
            self.active.push(active);
        }
        (started, plan.reserved)
    }

    /// The planner's backfill input: the deadlines of the jobs holding cards, the timeouts of
    /// `queue`.
    fn bounds(&self, b: &SimBackfill, queue: &[QueuedJob]) -> Backfill {
        Backfill {
            releases: self
                .active
                .iter()
                .filter_map(|a| {
                    Some(Release {
                        job_id: a.id,
                        deadline_ms: *b.deadline_ms.get(&a.id)?,
                        grants: a.grants.clone(),
                        exclusive: a.exclusive,
                    })
                })
                .collect(),
            bounds: queue
                .iter()
                .filter_map(|j| Some((j.id, *b.timeout_ms.get(&j.id)?)))
                .collect(),
            slack_ms: b.slack_ms,
        }
    }

    /// Adds (`sign` 1) or gives back (`sign` -1) a job's grants in the ledger.
    fn hold(&mut self, job: &Active, sign: i64) {
        for g in &job.grants {
            if let Some(card) = self.cards.iter_mut().find(|c| c.uuid == g.uuid) {
                card.reserved_mib = (card.reserved_mib + sign * g.vram_mib).max(0);
                if job.exclusive {
                    card.exclusive_held = sign > 0;
                }
            }
        }
    }

    /// When the next active job ends.
    pub fn next_end(&self) -> Option<i64> {
        self.active.iter().map(|a| a.ends_ms).min()
    }

    /// Moves virtual time to `to_ms` (never back), ending every job due by then; returns them.
    pub fn advance(&mut self, to_ms: i64) -> Vec<Active> {
        self.now_ms = self.now_ms.max(to_ms);
        let now = self.now_ms;
        let (ended, kept): (Vec<Active>, Vec<Active>) = std::mem::take(&mut self.active)
            .into_iter()
            .partition(|a| a.ends_ms <= now);
        self.active = kept;
        for a in &ended {
            self.hold(a, -1);
            if let Some(b) = &mut self.backfill {
                b.deadline_ms.remove(&a.id);
            }
        }
        ended
    }

    /// Runs until the queue is empty or nothing more will end (at most `max_steps` ends), and
    /// says when each pending job starts.
    pub fn run(mut self, max_steps: usize) -> HashMap<Uuid, Start> {
        let mut out = HashMap::with_capacity(self.pending.len());
        let mut steps = 0;
        loop {
            for id in self.step() {
                out.insert(id, Start::At(self.now_ms));
            }
            if self.pending.iter().all(|p| p.held.is_some()) || steps >= max_steps {
                break;
            }
            match self.next_end() {
                Some(t) => {
                    self.advance(t);
                }
                None => break,
            }
            steps += 1;
        }
        let online: Vec<Card> = self.cards.iter().filter(|c| c.online).cloned().collect();
        for p in self.pending {
            let why = p.held.or_else(|| {
                never_fits(
                    &p.job.need,
                    p.job.gpu_count,
                    p.job.exclusive,
                    &online,
                    self.headroom_mib,
                )
                .map(|w| {
                    if online.len() < self.cards.len() {
                        format!("{w} (counting only the cards that take work now)")
                    } else {
                        w
                    }
                })
            });
            out.insert(p.job.id, why.map_or(Start::Unknown, Start::Never));
        }
        out
    }
}

#[cfg(test)]
mod tests;
