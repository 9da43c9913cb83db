//! Per-job observed VRAM and its policing (issue 12): what each running job really holds on each
//! of its cards, compared with what it committed.
//!
//! Every `--vram-sample-ms` the sampler of a node:
//! 1. asks the card observer for a fresh reading: each card's size and memory in use, and the
//!    processes on it, each already put to its job
//!    ([`JobOwners::job_of`](crate::server::gpu::observer::JobOwners::job_of): the container in
//!    `/proc/<pid>/cgroup` against the job's recorded container id); on simulated cards, the
//!    usage admins gave each job (`PUT /api/v1/gpus/{uuid}/sim`);
//! 2. counts each job's processes on the cards it holds. Memory of a process of no job holding
//!    that card is foreign: it lowers the card's free memory and is never acted on;
//! 3. writes each (job, card)'s reading to `job_vram` (now, peak, consecutive readings above the
//!    commitment), and what changed only;
//! 4. polices ([`police`]): a `vram_over_commitment` event after `--vram-overuse-samples`
//!    readings above the commitment; under policy `stop`, a card whose free memory is below
//!    `--vram-reserve-mib` gets the job most over its commitment stopped (SIGTERM, the grace,
//!    SIGKILL through the runner), ending `failed` with a `vram_overuse` reason;
//! 5. when a job has ended, stores NVML accounting's peak of its processes, where kept.

pub mod police;

use crate::server::db::{settings, vram};
use crate::server::gpu::observer::{Cards, Snapshot};
use crate::server::gpu::InventoryKind;
use anyhow::{anyhow, Context, Result};
use police::{CardReading, JobReading, Rules};
use serde_json::json;
use sqlx::PgPool;
use std::collections::{HashMap, HashSet};
use std::time::Duration;
use tokio::sync::watch;
use uuid::Uuid;

/// Settings of the sampler (`gpuq serve` flags).
#[derive(Debug, Clone)]
pub struct VramConfig {
    /// This node: only its cards and jobs are sampled.
    pub node: String,
    /// Time between readings (`--vram-sample-ms`).
    pub every: Duration,
    /// Consecutive readings above the commitment before a warning (`--vram-overuse-samples`).
    pub overuse_samples: i32,
    /// Free memory below which a card is short (`--vram-reserve-mib`).
    pub reserve_mib: i64,
}

/// One round's observations.
#[derive(Debug, Default)]
struct Observed {
    /// Each card's size and use; for the short-card rule.
    cards: Vec<CardReading>,
    /// MiB per (job, card), for the jobs this round observed.
    used: HashMap<(Uuid, Uuid), i64>,
    /// (job, card, host PID) of the jobs' processes, for accounting once they end.
    pids: Vec<(Uuid, Uuid, u32)>,
}

/// What one round did, for tests and logs.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Round {
    /// (job, card) readings taken.
    pub readings: usize,
    /// Warnings given.
    pub warned: usize,
    /// Stops asked for.
    pub stopped: usize,
    /// (job, card) readings above the commitment whose count has not reached the warning yet:
    /// the next reading comes sooner, to confirm or clear them.
    pub confirming: usize,
}

/// The sampler of one node, with what it remembers between rounds.
pub struct Sampler {
    pool: PgPool,
    cards: Cards,
    cfg: VramConfig,
    /// The last reading written per (job, card): unchanged ones within the commitment are not
    /// written again.
    written: HashMap<(Uuid, Uuid), i64>,
    /// The processes seen per job, for accounting once it ends.
    seen: HashMap<Uuid, HashSet<(Uuid, u32)>>,
    /// Simulated cards whose memory in use this sampler wrote at the last round.
    simulating: HashSet<Uuid>,
}

impl Sampler {
    /// A sampler of the cards `cards` observes.
    pub fn new(pool: PgPool, cards: Cards, cfg: VramConfig) -> Self {
        Sampler {
            pool,
            cards,
            cfg,
            written: HashMap::new(),
            seen: HashMap::new(),
            simulating: HashSet::new(),
        }
    }

    /// One round: observe, record, police.
    pub async fn round(&mut self) -> Result<Round> {
        let held = vram::held_on(&self.pool, &self.cfg.node)
            .await
            .context("reading the jobs holding this node's cards")?;
        let observed = match self.cards.kind() {
            InventoryKind::Nvml => observe_nvml(&held, &*self.cards.fresh().await?)?,
            InventoryKind::Simulated => self.observe_sim().await?,
        };
        let policy = settings::launch_policy(&self.pool)
            .await
            .context("reading the launch policy")?;
        let rules = Rules {
            enforcement: policy.vram_enforcement,
            overuse_samples: self.cfg.overuse_samples,
            reserve_mib: self.cfg.reserve_mib,
        };
        let readings: Vec<JobReading> = held
            .iter()
            .filter_map(|h| {
                let used = *observed.used.get(&(h.job_id, h.gpu_uuid))?;
                Some(JobReading {
                    job: h.job_id,
                    gpu: h.gpu_uuid,
                    committed_mib: h.committed_mib,
                    used_mib: used,
                    stopping: h.stopping,
                })
            })
            .collect();
        let mut round = Round {
            readings: readings.len(),
            ..Round::default()
        };
        let to_write: Vec<(Uuid, Uuid, i64, i64)> = readings
            .iter()
            .filter(|r| r.over_mib() > 0 || self.written.get(&(r.job, r.gpu)) != Some(&r.used_mib))
            .map(|r| (r.job, r.gpu, r.committed_mib, r.used_mib))
            .collect();
        let mut tx = self.pool.begin().await?;
        let recorded = vram::record(&mut tx, &to_write)
            .await
            .context("recording VRAM readings")?;
        round.confirming = recorded
            .iter()
            .filter(|r| police::confirming(&rules, r.over_samples))
            .count();
        for r in &recorded {
            if !police::warn_now(&rules, r.over_samples) {
                continue;
            }
            if let Some(j) = readings
                .iter()
                .find(|j| j.job == r.job_id && j.gpu == r.gpu_uuid)
            {
                vram::warn(
                    &mut tx,
                    j.job,
                    j.gpu,
                    j.committed_mib,
                    j.used_mib,
                    r.over_samples,
                )
                .await?;
                round.warned += 1;
            }
        }
        for stop in police::stops(&rules, &observed.cards, &readings) {
            let detail = json!({
                "gpu": crate::model::gpu_id(&stop.gpu),
                "committed_mib": stop.committed_mib,
                "used_mib": stop.used_mib,
                "free_mib": stop.free_mib,
                "reserve_mib": rules.reserve_mib,
            });
            if vram::request_stop(&mut tx, stop.job, &stop.reason(rules.reserve_mib), detail)
                .await?
            {
                tracing::warn!(job = %stop.job, gpu = %stop.gpu, used_mib = stop.used_mib,
                    committed_mib = stop.committed_mib, free_mib = stop.free_mib,
                    "stopping a job over its VRAM commitment on a card that ran short");
                round.stopped += 1;
            }
        }
        // A simulated card's memory in use is written while usage is simulated on it, and cleared
        // once, when that ends; otherwise it is left as it is.
        let mut simulating = HashSet::new();
        if self.cards.kind() == InventoryKind::Simulated {
            for card in &observed.cards {
                if card.used_mib.is_some() {
                    simulating.insert(card.gpu);
                }
                if card.used_mib.is_some() || self.simulating.contains(&card.gpu) {
                    vram::set_sim_used(&mut *tx, card.gpu, card.used_mib).await?;
                }
            }
        }
        tx.commit().await?;
        self.simulating = simulating;
        for (job, gpu, _, used) in to_write {
            self.written.insert((job, gpu), used);
        }
        for (job, gpu, pid) in observed.pids {
            self.seen.entry(job).or_default().insert((gpu, pid));
        }
        self.settle_ended(&held).await;
        if round.warned + round.stopped > 0 {
            tracing::debug!(?round, "VRAM round");
        }
        Ok(round)
    }

    /// Simulated cards: the usage admins or tests gave each job, over the card's foreign memory.
    async fn observe_sim(&self) -> Result<Observed> {
        let cards = vram::sim_cards(&self.pool, &self.cfg.node).await?;
        let usage = vram::sim_usage(&self.pool, &self.cfg.node).await?;
        let mut out = Observed::default();
        for (gpu, job, used) in &usage {
            out.used.insert((*job, *gpu), *used);
        }
        for c in cards {
            let jobs: Vec<i64> = usage
                .iter()
                .filter(|u| u.0 == c.uuid)
                .map(|u| u.2)
                .collect();
            out.cards.push(CardReading {
                gpu: c.uuid,
                total_mib: c.total_mib,
                // Unknown until something on the card is simulated.
                used_mib: (!jobs.is_empty()).then(|| c.external_mib + jobs.iter().sum::<i64>()),
            });
        }
        Ok(out)
    }

    /// Jobs that no longer hold cards here: their accounting peaks, where the driver kept them,
    /// then they are forgotten.
    async fn settle_ended(&mut self, held: &[vram::HeldCard]) {
        let live: HashSet<Uuid> = held.iter().map(|h| h.job_id).collect();
        self.written.retain(|(job, _), _| live.contains(job));
        let ended: Vec<Uuid> = self
            .seen
            .keys()
            .filter(|j| !live.contains(j))
            .copied()
            .collect();
        for job in ended {
            let Some(procs) = self.seen.remove(&job) else {
                continue;
            };
            let pids: Vec<u32> = procs.iter().map(|p| p.1).collect();
            let Ok(peaks) = self.cards.accounting_peaks(pids).await else {
                continue;
            };
            // A job's peak on a card: the sum of its processes' peaks there (an upper bound when
            // several processes peaked at different times).
            let mut per_card: HashMap<Uuid, i64> = HashMap::new();
            for p in peaks {
                if procs.contains(&(p.gpu, p.pid)) {
                    if let Some(mib) = p.peak_mib {
                        *per_card.entry(p.gpu).or_insert(0) += mib;
                    }
                }
            }
            for (gpu, mib) in per_card {
                if let Err(e) = vram::set_accounting_peak(&self.pool, job, gpu, mib).await {
                    tracing::warn!(%job, error = %e, "recording an accounting peak failed");
                }
            }
        }
    }
}

/// Real cards: sizes and use from the observer's fresh reading, each process's memory put to the
/// job that owns it, where that job holds the card.
fn observe_nvml(held: &[vram::HeldCard], snapshot: &Snapshot) -> Result<Observed> {
    let cards = snapshot.cards().context("reading the cards")?;
    if let Some(why) = &snapshot.owners_unknown {
        return Err(anyhow!("{why}").context("putting the processes on the cards to jobs"));
    }
    let holds: HashSet<(Uuid, Uuid)> = held.iter().map(|h| (h.job_id, h.gpu_uuid)).collect();
    let mut out = Observed {
        cards: cards
            .iter()
            .map(|c| CardReading {
                gpu: c.uuid,
                total_mib: c.total_mib,
                used_mib: c.used_mib,
            })
            .collect(),
        ..Observed::default()
    };
    // Every running job with a container is observed: no process on a card means 0 there.
    for h in held {
        if h.container_id.is_some() {
            out.used.insert((h.job_id, h.gpu_uuid), 0);
        }
    }
    // A process in both the compute and graphics lists is counted once.
    let mut counted: HashSet<(Uuid, u32)> = HashSet::new();
    for p in &snapshot.processes {
        if !counted.insert((p.gpu, p.pid)) {
            continue;
        }
        match p.job {
            Some(job) if holds.contains(&(job, p.gpu)) => {
                *out.used.entry((job, p.gpu)).or_insert(0) += p.used_mib.unwrap_or(0);
                out.pids.push((job, p.gpu, p.pid));
            }
            Some(job) => tracing::warn!(%job, gpu = %p.gpu, pid = p.pid,
                "a job's process is on a card it was not given; counted as foreign"),
            None => {}
        }
    }
    Ok(out)
}

/// Samples every `cfg.every` until `stop` turns true.
pub async fn run(pool: PgPool, cards: Cards, cfg: VramConfig, mut stop: watch::Receiver<bool>) {
    let every = cfg.every;
    let mut sampler = Sampler::new(pool, cards, cfg);
    loop {
        let next = match sampler.round().await {
            Ok(round) => confirm_sooner(every, &round),
            Err(e) => {
                tracing::warn!(
                    error = format!("{e:#}"),
                    "VRAM sampling round failed; nothing was decided on it"
                );
                every
            }
        };
        tokio::select! {
            _ = stop.changed() => break,
            _ = tokio::time::sleep(next) => {}
        }
    }
}

/// The pause before the next round: a quarter of the period (at least 50 ms) while a reading above
/// a commitment waits to be confirmed, so the warning comes within about one period of the
/// overuse rather than `--vram-overuse-samples` periods; the period otherwise.
pub fn confirm_sooner(every: Duration, round: &Round) -> Duration {
    if round.confirming > 0 {
        (every / 4).max(Duration::from_millis(50)).min(every)
    } else {
        every
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reading_above_the_commitment_is_confirmed_sooner() {
        let every = Duration::from_millis(1000);
        let quiet = Round::default();
        assert_eq!(confirm_sooner(every, &quiet), every);
        let over = Round {
            confirming: 1,
            ..Round::default()
        };
        assert_eq!(confirm_sooner(every, &over), Duration::from_millis(250));
        // Never below 50 ms, never above the period.
        assert_eq!(
            confirm_sooner(Duration::from_millis(60), &over),
            Duration::from_millis(50)
        );
        assert_eq!(
            confirm_sooner(Duration::from_millis(20), &over),
            Duration::from_millis(20)
        );
    }
}
