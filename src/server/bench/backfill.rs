//! `gpuq bench backfill`: what backfill gives and costs, on a synthetic day of a team's jobs with
//! real run times (minutes to hours).
//!
//! The day of `gpuq bench replay` ([`super::replay::trace::day`]) is replayed twice in virtual
//! time on the same simulated cards (four A100 80GB on one node, four RTX 3090 on another), with
//! the real planner under the pass's caps ([`Sim`]), once with backfill and once without. A
//! chain's links are submitted together, as independent jobs; an array's elements keep their
//! running limit. Each job's timeout is its workload type's; its run time is drawn once and is
//! the same in both runs. Figures, for each run:
//!
//! - **packing**: VRAM-time used over the VRAM-time the ledger allows: the sum over jobs of the
//!   MiB granted times the run time, over the cards' capacity (total less headroom) times the span
//!   from the first submission to the last end;
//! - **heads' waits**: the waits of the jobs that were, at some pass, the first waiting job of the
//!   queue (mean, p90, max), and of the big jobs (`train-large`, `train-multi`);
//! - **mean wait** of every job.

use super::replay::{self, trace, MIN, SLACK_MS};
use crate::server::admission::estimate::sim::{Sim, SimBackfill, SimJob};
use crate::server::admission::pass::Caps;
use crate::server::admission::planner::{Need, QueuedJob};
use crate::server::bench::synth::Rng;
use anyhow::Result;
use std::collections::{HashMap, HashSet, VecDeque};
use std::io::Write;
use trace::{What, KINDS};
use uuid::Uuid;

/// Flags of `gpuq bench backfill`.
#[derive(clap::Args, Debug, Clone)]
pub struct BackfillOptions {
    /// The trace replayed.
    #[command(flatten)]
    pub trace: trace::TraceOptions,
}

const HEADROOM_MIB: i64 = 256;

/// One job of the trace.
struct Job {
    sim: SimJob,
    kind: usize,
    submit_ms: i64,
    timeout_ms: i64,
}

/// The figures of one run.
#[derive(Debug, Default, Clone)]
pub struct RunFigures {
    /// VRAM-time used over the VRAM-time the ledger allows.
    pub packing: f64,
    /// Mean wait of the jobs that were once the head of the queue, minutes.
    pub head_mean_min: f64,
    /// Their 90th percentile.
    pub head_p90_min: f64,
    /// Their longest.
    pub head_max_min: f64,
    /// Mean wait of the big jobs, minutes.
    pub big_mean_min: f64,
    /// Mean wait of every job, minutes.
    pub mean_min: f64,
    /// When the last job ended, hours.
    pub span_h: f64,
    /// Heads given a start by backfill (cards kept for them).
    pub promised: usize,
    /// Of those, heads that started after the first start they were given.
    pub late: usize,
}

/// The trace's jobs, the same for both runs.
fn jobs(opts: &BackfillOptions) -> (Vec<Job>, HashMap<Uuid, u32>) {
    let t = &opts.trace;
    let mut rng = Rng::new(t.seed ^ 0xBAC4_F111);
    let arrivals = trace::day(&mut rng, t.hours, t.per_hour);
    let users: Vec<Uuid> = (0..trace::USERS)
        .map(|u| Uuid::from_u128(0x05E4_0000 + u as u128))
        .collect();
    let admin = Uuid::from_u128(0xAD41);
    let (mut out, mut limits) = (Vec::new(), HashMap::new());
    let mut next = 1u128;
    for a in arrivals {
        let owner = users[a.user % users.len()];
        let (kinds, owner, priority, array): (Vec<usize>, Uuid, i32, Option<Uuid>) = match a.what {
            What::Single(k) => (vec![k], owner, 0, None),
            What::Priority(k) => (vec![k], admin, 10, None),
            What::Chain(links) => (links, owner, 0, None),
            What::Array { kind, n, limit } => {
                next += 1;
                let id = Uuid::from_u128(next);
                limits.insert(id, limit);
                (vec![kind; n as usize], owner, 0, Some(id))
            }
        };
        for k in kinds {
            next += 1;
            let kind = &KINDS[k];
            out.push(Job {
                sim: SimJob {
                    job: QueuedJob {
                        id: Uuid::from_u128(next),
                        seq: next as i64,
                        priority,
                        past_soft_budget: false,
                        standing: crate::model::Standing::EVEN,
                        gpu_count: kind.gpus,
                        need: Need::PerModel(
                            kind.needs
                                .iter()
                                .map(|(m, v)| (m.to_string(), *v))
                                .collect(),
                        ),
                        exclusive: false,
                        queued_at_ms: a.at_ms,
                        nodes: None,
                    },
                    owner,
                    run_ms: trace::run_ms(&mut rng, kind),
                    after: Vec::new(),
                    array,
                    held: None,
                },
                kind: k,
                submit_ms: a.at_ms,
                timeout_ms: kind.timeout_min * MIN,
            });
        }
    }
    (out, limits)
}

/// Replays `jobs` with or without backfill, under the trace's caps.
fn run_once(jobs: &[Job], limits: &HashMap<Uuid, u32>, backfill: bool) -> RunFigures {
    let caps = Caps {
        max_running_per_user: 4,
        admins: [Uuid::from_u128(0xAD41)].into_iter().collect(),
        ..Caps::default()
    };
    run_once_with(jobs, limits, backfill, caps)
}

/// Replays `jobs` with or without backfill under `caps`.
fn run_once_with(
    jobs: &[Job],
    limits: &HashMap<Uuid, u32>,
    backfill: bool,
    caps: Caps,
) -> RunFigures {
    let mut sim = Sim {
        cards: replay::cards(),
        active: Vec::new(),
        pending: Vec::new(),
        caps,
        array_limits: limits.clone(),
        headroom_mib: HEADROOM_MIB,
        starvation_after_ms: 30 * MIN,
        now_ms: 0,
        backfill: backfill.then(|| SimBackfill {
            timeout_ms: jobs.iter().map(|j| (j.sim.job.id, j.timeout_ms)).collect(),
            deadline_ms: HashMap::new(),
            slack_ms: SLACK_MS,
        }),
    };
    let by_id: HashMap<Uuid, &Job> = jobs.iter().map(|j| (j.sim.job.id, j)).collect();
    let mut arrivals: VecDeque<&Job> = jobs.iter().collect();
    let mut started: HashMap<Uuid, i64> = HashMap::new();
    let mut heads: HashSet<Uuid> = HashSet::new();
    // The first start each head was given (backfill on), to hold the trace to the guarantee.
    let mut promised: HashMap<Uuid, i64> = HashMap::new();
    let (mut used, mut last_end) = (0f64, 0i64);
    loop {
        let t = match (arrivals.front().map(|j| j.submit_ms), sim.next_end()) {
            (None, None) => break,
            (a, e) => a.unwrap_or(i64::MAX).min(e.unwrap_or(i64::MAX)),
        };
        for ended in sim.advance(t) {
            let mib: i64 = ended.grants.iter().map(|g| g.vram_mib).sum();
            let ran = t - started.get(&ended.id).copied().unwrap_or(t);
            used += mib as f64 * ran as f64;
            last_end = last_end.max(t);
        }
        while arrivals.front().is_some_and(|j| j.submit_ms <= t) {
            if let Some(j) = arrivals.pop_front() {
                sim.pending.push(j.sim.clone());
            }
        }
        let (now_started, kept) = sim.step_kept();
        for id in now_started {
            started.insert(id, t);
        }
        for r in kept {
            promised.entry(r.head).or_insert(r.start_ms);
        }
        let head = sim
            .pending
            .iter()
            .filter(|p| p.held.is_none())
            .min_by_key(|p| p.job.queue_key());
        if let Some(p) = head {
            heads.insert(p.job.id);
        }
    }
    let capacity: i64 = sim
        .cards
        .iter()
        .map(|c| (c.total_mib - HEADROOM_MIB).max(0))
        .sum();
    let wait = |id: &Uuid| {
        let j = by_id[id];
        (started.get(id).copied().unwrap_or(last_end) - j.submit_ms) as f64 / MIN as f64
    };
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    let mut head_waits: Vec<f64> = heads.iter().map(wait).collect();
    head_waits.sort_by(f64::total_cmp);
    let big: Vec<f64> = jobs
        .iter()
        .filter(|j| KINDS[j.kind].name.starts_with("train"))
        .map(|j| wait(&j.sim.job.id))
        .collect();
    let all: Vec<f64> = jobs.iter().map(|j| wait(&j.sim.job.id)).collect();
    let first = jobs.first().map_or(0, |j| j.submit_ms);
    let span = (last_end - first).max(1);
    let late = promised
        .iter()
        .filter(|(id, at)| started.get(*id).is_none_or(|s| s > *at))
        .count();
    RunFigures {
        promised: promised.len(),
        late,
        packing: used / (capacity as f64 * span as f64),
        head_mean_min: mean(&head_waits),
        head_p90_min: replay::pct(&head_waits, 90.0),
        head_max_min: head_waits.last().copied().unwrap_or(0.0),
        big_mean_min: mean(&big),
        mean_min: mean(&all),
        span_h: span as f64 / 3_600_000.0,
    }
}

/// Runs the trace with and without backfill and prints both.
pub fn run(opts: &BackfillOptions, out: &mut impl Write) -> Result<(RunFigures, RunFigures)> {
    let (jobs, limits) = jobs(opts);
    let on = run_once(&jobs, &limits, true);
    let off = run_once(&jobs, &limits, false);
    writeln!(
        out,
        "backfill: {} jobs over {} h ({} per busy hour), 4x A100 80GB + 4x RTX 3090",
        jobs.len(),
        opts.trace.hours,
        opts.trace.per_hour
    )?;
    writeln!(
        out,
        "{:<10} {:>8} {:>10} {:>9} {:>9} {:>9} {:>9} {:>7}",
        "backfill",
        "packing",
        "head mean",
        "head p90",
        "head max",
        "big mean",
        "all mean",
        "span h"
    )?;
    for (name, f) in [("on", &on), ("off", &off)] {
        writeln!(
            out,
            "{:<10} {:>8.3} {:>9.1}m {:>8.1}m {:>8.1}m {:>8.1}m {:>8.1}m {:>7.1}",
            name,
            f.packing,
            f.head_mean_min,
            f.head_p90_min,
            f.head_max_min,
            f.big_mean_min,
            f.mean_min,
            f.span_h
        )?;
    }
    writeln!(
        out,
        "backfill on: {} heads had cards kept for them; {} started after the first start they \
         were given (a later job of a higher priority, the per-user cap or an array's limit can \
         move it; a backfilled job never does)",
        on.promised, on.late
    )?;
    Ok((on, off))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_day_runs_both_ways_and_every_job_ends() {
        let opts = BackfillOptions {
            trace: trace::TraceOptions {
                hours: 4,
                per_hour: 7.0,
                seed: 3,
            },
        };
        let mut out = Vec::new();
        let (on, off) = run(&opts, &mut out).expect("the bench runs");
        for f in [&on, &off] {
            assert!(f.packing > 0.0 && f.packing <= 1.0, "{f:?}");
        }
        let text = String::from_utf8(out).expect("text");
        assert!(text.contains("packing"), "{text}");
    }

    /// The guarantee on a trace: with one priority, no cap and no array limit, nothing but
    /// backfilled jobs could take a head's kept cards, and no head starts after the first start
    /// it was given.
    #[test]
    fn on_a_trace_no_head_starts_after_its_first_promised_start() {
        let opts = BackfillOptions {
            trace: trace::TraceOptions {
                hours: 24,
                per_hour: 12.0,
                seed: 11,
            },
        };
        let (mut jobs, _) = jobs(&opts);
        for j in &mut jobs {
            j.sim.job.priority = 0;
            j.sim.array = None;
        }
        let f = run_once_with(&jobs, &HashMap::new(), true, Caps::default());
        assert!(f.promised > 10, "{f:?}");
        assert_eq!(f.late, 0, "{f:?}");
    }
}
