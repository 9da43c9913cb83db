//! Idle reclaim (issue 29): jobs that hold cards and leave them idle are flagged, their owners
//! told, and under `idle_action: stop` they are stopped (docs/admission.md#idle-cards).
//!
//! At every snapshot of the card observer (on NVML cards; never on simulated ones, whose processes
//! are not seen) the engine of a node:
//! 1. reads the jobs holding its cards (`db::vram::held_on`, as the VRAM sampler does) and the
//!    launch policy;
//! 2. says of each started job what the snapshot shows of it ([`judge::Seen`]): busy (a process
//!    of it on its cards at or above `idle_sm_percent` in an NVML process utilisation sample, with
//!    the sample's own time), quiet (processes, all below), no process, or unknown (samples not
//!    readable on one of its cards, or the reading failed: never idle);
//! 3. keeps a short track per job ([`judge::Track`]: last activity, a bounded history) and
//!    decides ([`judge::Track::decide`]): quiet for `idle_after_min` → flagged (an `idle_flagged`
//!    event and the owner's `idle` notification); busy again → cleared; still flagged after
//!    `idle_grace_min` under `stop` → stopped through the runner (SIGTERM, the grace, SIGKILL),
//!    ending `failed` with the cause `idle` and a reason starting `idle:`.
//!
//! The tracks live in memory: a restart of gpuq starts every job's clock again (a job is never
//! stopped sooner than the window after gpuq first saw it). The flags and stops are in the
//! database, for the job page and the usage report. A round decides on copies of the tracks and
//! keeps them only once what it decided is written: a round whose writes fail leaves the tracks
//! as they were, so the next one decides again.

pub mod judge;

use crate::server::db::{idle, sessions, settings, vram};
use crate::server::gpu::observer::{Cards, Snapshot};
use crate::server::gpu::InventoryKind;
use anyhow::{Context, Result};
use chrono::{DateTime, Utc};
use judge::{Rules, Seen, Track, Verdict};
use serde_json::json;
use sqlx::PgPool;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use tokio::sync::watch;
use uuid::Uuid;

/// What one round did, for tests, benchmarks and logs.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Round {
    /// Jobs read.
    pub judged: usize,
    /// Jobs flagged this round.
    pub flagged: Vec<Uuid>,
    /// Flags cleared this round.
    pub cleared: Vec<Uuid>,
    /// Stops asked for this round.
    pub stopped: Vec<Uuid>,
    /// Sessions whose processes were busy: their activity was written as the session's.
    pub session_active: Vec<Uuid>,
}

/// One started job's cards, as the round reads them.
#[derive(Debug, Default)]
struct Held {
    workload: Option<String>,
    started: bool,
    stopping: bool,
    session: bool,
    gpus: Vec<Uuid>,
}

/// What the engine keeps of one started job between rounds.
#[derive(Debug, Clone)]
struct Watch {
    track: Track,
    /// For a session: the newest activity written as its traffic.
    marked: Option<DateTime<Utc>>,
}

/// What a round writes, once it has decided on every job.
enum Write {
    /// A session's processes were busy at this time.
    Touch(Uuid, DateTime<Utc>),
    Flag(Uuid, serde_json::Value),
    Clear(Uuid, serde_json::Value),
    /// A stop with its reason and the job's last activity.
    Stop(Uuid, String, serde_json::Value, DateTime<Utc>),
}

/// The engine of one node, with its tracks.
pub struct Engine {
    pool: PgPool,
    cards: Cards,
    node: String,
    watches: HashMap<Uuid, Watch>,
}

impl Engine {
    /// The engine of `node`, reading what `cards` observes.
    pub fn new(pool: PgPool, cards: Cards, node: String) -> Self {
        Engine {
            pool,
            cards,
            node,
            watches: HashMap::new(),
        }
    }

    /// Its track of `job`, as the last round left it; `None` for a job it does not read
    /// (another node's, not started, simulated cards).
    pub fn tracked(&self, job: Uuid) -> Option<&Track> {
        self.watches.get(&job).map(|w| &w.track)
    }

    /// A round on a reading taken now (tests and benchmarks drive the engine so).
    pub async fn round(&mut self) -> Result<Round> {
        self.round_at(None).await
    }

    /// A round on a reading taken now, judged as at `now` (`None`: the clock's now), so that a
    /// test's own clock and the engine's are one.
    pub async fn round_at(&mut self, now: Option<DateTime<Utc>>) -> Result<Round> {
        if self.cards.kind() != InventoryKind::Nvml {
            return Ok(Round::default());
        }
        let snapshot = self.cards.fresh().await?;
        self.round_on(&snapshot, now.unwrap_or_else(Utc::now)).await
    }

    /// A round on `snapshot`, read at `now`. Simulated cards are never judged.
    pub async fn round_on(&mut self, snapshot: &Snapshot, now: DateTime<Utc>) -> Result<Round> {
        if snapshot.kind != InventoryKind::Nvml {
            return Ok(Round::default());
        }
        let held = vram::held_on(&self.pool, &self.node)
            .await
            .context("reading the jobs holding this node's cards")?;
        let mut jobs: BTreeMap<Uuid, Held> = BTreeMap::new();
        for h in held {
            let job = jobs.entry(h.job_id).or_default();
            job.workload = h.workload;
            job.started = h.container_id.is_some();
            job.stopping = h.stopping;
            job.session = h.session;
            job.gpus.push(h.gpu_uuid);
        }
        if jobs.is_empty() {
            self.watches.clear();
            return Ok(Round::default());
        }
        let policy = settings::launch_policy(&self.pool)
            .await
            .context("reading the launch policy")?;
        let rules = Rules::new(
            policy.idle_action,
            policy.idle_after_min,
            policy.idle_sm_percent,
            policy.idle_grace_min,
        );
        // A failed reading, or processes that cannot be put to jobs: nothing is known.
        let readable = snapshot.cards.is_ok() && snapshot.owners_unknown.is_none();
        let mut round = Round::default();
        let mut watches: HashMap<Uuid, Watch> = HashMap::with_capacity(jobs.len());
        let mut writes = Vec::new();
        for (&job, held) in &jobs {
            let kept = self.watches.get(&job).cloned();
            if !held.started || held.stopping {
                // Not judged (no container yet, or a stop asked for); what was kept stays.
                watches.extend(kept.map(|w| (job, w)));
                continue;
            }
            let watch = watches.entry(job).or_insert(kept.unwrap_or(Watch {
                track: Track::new(now),
                marked: None,
            }));
            let seen = if readable {
                seen(snapshot, job, &held.gpus, rules.sm_percent)
            } else {
                Seen::Unknown
            };
            let track = &mut watch.track;
            track.see(now, seen);
            if held.session {
                // A session is never judged here (someone may be reading a notebook with nothing
                // on the card): its processes' activity counts as the session's traffic, and
                // the session watcher ends it when neither comes for `session_idle_min`.
                if matches!(seen, Seen::Busy(_))
                    && watch.marked.is_none_or(|m| track.last_active > m)
                {
                    writes.push(Write::Touch(job, track.last_active));
                    watch.marked = Some(track.last_active);
                    round.session_active.push(job);
                }
                continue;
            }
            let exempt = held
                .workload
                .as_ref()
                .is_some_and(|w| policy.idle_exempt_workloads.contains(w));
            round.judged += 1;
            match track.decide(&rules, exempt, now) {
                Verdict::Nothing => {}
                Verdict::Flag { quiet_since } => {
                    let detail = json!({
                        "quiet_since": quiet_since,
                        "no_process": track.no_process_since.is_some(),
                        "sm_percent": rules.sm_percent,
                        "after_min": policy.idle_after_min,
                        "stop_at": track.stop_at(&rules),
                    });
                    writes.push(Write::Flag(job, detail));
                    tracing::info!(%job, %quiet_since, "job flagged idle");
                    round.flagged.push(job);
                }
                Verdict::Clear => {
                    let detail = json!({ "busy_at": track.last_active });
                    writes.push(Write::Clear(job, detail));
                    round.cleared.push(job);
                }
                Verdict::Stop { quiet_since } => {
                    let no_process = track.no_process_since.is_some();
                    let why = judge::reason(&rules, no_process, quiet_since);
                    let detail = json!({
                        "quiet_since": quiet_since,
                        "no_process": no_process,
                        "grace_min": policy.idle_grace_min,
                    });
                    writes.push(Write::Stop(job, why, detail, quiet_since));
                }
            }
        }
        if !writes.is_empty() {
            let mut tx = self.pool.begin().await?;
            for write in writes {
                match write {
                    Write::Touch(job, at) => sessions::touch(&mut *tx, &[job], at).await?,
                    Write::Flag(job, detail) => idle::flag(&mut tx, job, detail).await?,
                    Write::Clear(job, detail) => idle::clear(&mut tx, job, detail).await?,
                    Write::Stop(job, why, detail, quiet_since) => {
                        if idle::request_stop(&mut tx, job, &why, detail).await? {
                            let what = "stopping a job whose cards stayed idle";
                            tracing::warn!(%job, %quiet_since, "{what}");
                            round.stopped.push(job);
                        }
                    }
                }
            }
            tx.commit().await?;
        }
        self.watches = watches;
        Ok(round)
    }
}

/// What `snapshot` shows of `job`, which holds `gpus`.
fn seen(snapshot: &Snapshot, job: Uuid, gpus: &[Uuid], sm_percent: u32) -> Seen {
    let pids: HashSet<(Uuid, u32)> = snapshot
        .processes
        .iter()
        .filter(|p| p.job == Some(job) && gpus.contains(&p.gpu))
        .map(|p| (p.gpu, p.pid))
        .collect();
    let mut busy: Option<DateTime<Utc>> = None;
    for gpu in gpus {
        let Some(Some(samples)) = snapshot.sm_samples.get(gpu) else {
            return Seen::Unknown;
        };
        for s in samples {
            if s.sm_percent >= sm_percent && pids.contains(&(*gpu, s.pid)) {
                let at = judge::sample_time(s.at_us);
                busy = Some(busy.map_or(at, |b| b.max(at)));
            }
        }
    }
    match busy {
        Some(at) => Seen::Busy(at),
        None if pids.is_empty() => Seen::NoProcess,
        None => Seen::Quiet,
    }
}

/// Judges every snapshot the observer publishes until `stop` turns true.
pub async fn run(pool: PgPool, cards: Cards, node: String, mut stop: watch::Receiver<bool>) {
    if cards.kind() != InventoryKind::Nvml {
        // Simulated cards: their processes are not seen, so nothing is judged.
        return;
    }
    let mut snapshots = cards.subscribe();
    let mut engine = Engine::new(pool, cards, node);
    loop {
        tokio::select! {
            _ = stop.changed() => break,
            changed = snapshots.changed() => if changed.is_err() { break },
        }
        let snapshot = Arc::clone(&snapshots.borrow_and_update());
        if let Err(e) = engine.round_on(&snapshot, Utc::now()).await {
            tracing::warn!(
                error = format!("{e:#}"),
                "idle judging round failed; nothing was decided on it"
            );
        }
    }
}
