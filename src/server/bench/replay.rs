//! `gpuq bench replay`: how good the start estimate is, on a synthetic day of a team's jobs.
//!
//! A day of submissions ([`trace::day`]: single jobs, chains whose next link is submitted when the
//! one before ends, arrays with a running limit, a few admins' jobs at a higher priority; run times
//! log-normal, cut at each job's deadline) is replayed in virtual time on simulated cards (four
//! A100 80GB on one node, four RTX 3090 on another). Admission is the real planner under the
//! pass's caps, run at every submit and every end ([`sim::Sim`]). At each submit the start
//! estimate is made exactly as the server makes it ([`estimate::estimate`] over the cluster as it
//! stands, with the run-time history of the jobs finished so far); when the job really starts, the
//! two are compared. Nothing is written anywhere: it needs no database.

pub(super) mod trace;

use crate::server::admission::estimate::{
    self, sim::Sim, sim::SimJob, sim::Start, Durations, Estimate, Holding, Snapshot, Typical,
    Waiter,
};
use crate::server::admission::pass::Caps;
use crate::server::admission::planner::{Card, Need, QueuedJob};
use crate::server::bench::synth::Rng;
use anyhow::Result;
use std::collections::{HashMap, VecDeque};
use std::io::Write;
use std::time::Instant;
use trace::{Arrival, What, KINDS};
use uuid::Uuid;

/// Flags of `gpuq bench replay`.
#[derive(clap::Args, Debug, Clone)]
pub struct ReplayOptions {
    /// The trace replayed.
    #[command(flatten)]
    pub trace: trace::TraceOptions,
    /// The launch policy's `max_running_per_user` (0: none).
    #[arg(long, default_value_t = 4)]
    pub max_running_per_user: u32,
    /// Which figure of a type's run times the estimate takes (the server's is `mixed`): `median`
    /// everywhere, `mean` everywhere, or `mixed` (the conditional median for jobs holding cards,
    /// the mean for queued jobs).
    #[arg(long, value_enum, default_value_t = RunFigure::Mixed)]
    pub typical: RunFigure,
}

/// `--typical`.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunFigure {
    /// The median everywhere.
    Median,
    /// The mean everywhere.
    Mean,
    /// The conditional median for the jobs holding cards, the mean for the queued jobs.
    Mixed,
}

impl RunFigure {
    fn pair(self) -> (Typical, Typical) {
        match self {
            RunFigure::Median => (Typical::Median, Typical::Median),
            RunFigure::Mean => (Typical::Mean, Typical::Mean),
            RunFigure::Mixed => (Typical::Median, Typical::Mean),
        }
    }
}

pub(super) const MIN: i64 = 60_000;
/// The slack the server adds to every deadline in the bound (`estimate::SLACK`).
pub(super) const SLACK_MS: i64 = crate::server::admission::estimate::SLACK.as_millis() as i64;
/// Finished runs kept per workload type, as the server keeps.
const HISTORY_RUNS: usize = 200;
/// Earlier runs of each type the replay starts with (the team's previous days).
const SEEDED_RUNS: usize = 30;

/// What the replay knows of one job besides what the simulation holds.
struct Meta {
    kind: usize,
    owner: Uuid,
    priority: i32,
    submit_ms: i64,
    timeout_ms: i64,
    /// The links of its chain still to submit when it ends.
    rest: Vec<usize>,
    started_ms: Option<i64>,
    est: Option<Estimate>,
}

/// The replayed cluster.
struct Replay {
    sim: Sim,
    meta: HashMap<Uuid, Meta>,
    history: HashMap<&'static str, VecDeque<i64>>,
    rng: Rng,
    next: u128,
    users: Vec<Uuid>,
    admin: Uuid,
    estimates: usize,
    estimate_time: std::time::Duration,
    typical: (Typical, Typical),
}

/// The replayed cluster's cards: four A100 80GB on one node, four RTX 3090 on another.
pub(super) fn cards() -> Vec<Card> {
    let card = |node: &str, index: u32, model: &str, total: i64| Card {
        uuid: Uuid::from_u128(0xCA4D_0000 + u128::from(index) + if node == "a" { 0 } else { 100 }),
        node: format!("node-{node}"),
        index,
        model: model.into(),
        total_mib: total,
        reserved_mib: 0,
        external_mib: 0,
        online: true,
        exclusive_held: false,
    };
    (0..4)
        .map(|i| card("a", i, trace::A100, 81_920))
        .chain((0..4).map(|i| card("b", i, trace::RTX, 24_576)))
        .collect()
}

impl Replay {
    fn new(opts: &ReplayOptions) -> Self {
        // Spread the seed (splitmix64's finaliser): nearby seeds give unrelated traces.
        let mut z = opts.trace.seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        let mut rng = Rng::new(z ^ (z >> 31));
        let mut history = HashMap::new();
        for k in &KINDS {
            let runs = (0..SEEDED_RUNS)
                .map(|_| trace::run_ms(&mut rng, k))
                .collect();
            history.insert(k.name, runs);
        }
        let users: Vec<Uuid> = (0..trace::USERS)
            .map(|u| Uuid::from_u128(0x05E4_0000 + u as u128))
            .collect();
        let admin = Uuid::from_u128(0xAD41);
        let caps = Caps {
            max_running_per_user: opts.max_running_per_user,
            admins: [admin].into_iter().collect(),
            ..Caps::default()
        };
        Replay {
            sim: Sim {
                cards: cards(),
                active: Vec::new(),
                pending: Vec::new(),
                caps,
                array_limits: HashMap::new(),
                headroom_mib: 256,
                starvation_after_ms: 30 * MIN,
                now_ms: 0,
                backfill: None,
            },
            meta: HashMap::new(),
            history,
            rng,
            next: 1,
            users,
            admin,
            estimates: 0,
            estimate_time: std::time::Duration::ZERO,
            typical: opts.typical.pair(),
        }
    }

    fn new_id(&mut self) -> Uuid {
        self.next += 1;
        Uuid::from_u128(self.next)
    }

    /// Queues one job of `kind`; returns its id.
    fn queue(&mut self, kind: usize, owner: Uuid, priority: i32, array: Option<Uuid>) -> Uuid {
        let k = &KINDS[kind];
        let id = self.new_id();
        let now = self.sim.now_ms;
        self.sim.pending.push(SimJob {
            job: QueuedJob {
                id,
                seq: self.next as i64,
                priority,
                past_soft_budget: false,
                standing: crate::model::Standing::EVEN,
                gpu_count: k.gpus,
                need: Need::PerModel(k.needs.iter().map(|(m, v)| (m.to_string(), *v)).collect()),
                exclusive: false,
                queued_at_ms: now,
                nodes: None,
            },
            owner,
            run_ms: trace::run_ms(&mut self.rng, k),
            after: Vec::new(),
            array,
            held: None,
        });
        self.meta.insert(
            id,
            Meta {
                kind,
                owner,
                priority,
                submit_ms: now,
                timeout_ms: k.timeout_min * MIN,
                rest: Vec::new(),
                started_ms: None,
                est: None,
            },
        );
        id
    }

    /// Submits what an arrival asks for now; returns the jobs queued.
    fn submit(&mut self, a: &Arrival) -> Vec<Uuid> {
        let owner = self.users[a.user % self.users.len()];
        match &a.what {
            What::Single(k) => vec![self.queue(*k, owner, 0, None)],
            What::Priority(k) => vec![self.queue(*k, self.admin, 10, None)],
            What::Chain(links) => match links.split_first() {
                Some((first, rest)) => {
                    let id = self.queue(*first, owner, 0, None);
                    if let Some(m) = self.meta.get_mut(&id) {
                        m.rest = rest.to_vec();
                    }
                    vec![id]
                }
                None => Vec::new(),
            },
            What::Array { kind, n, limit } => {
                let array = self.new_id();
                self.sim.array_limits.insert(array, *limit);
                (0..*n)
                    .map(|_| self.queue(*kind, owner, 0, Some(array)))
                    .collect()
            }
        }
    }

    /// The cluster as the server's snapshot would show it now.
    fn snapshot(&self) -> Snapshot {
        let name = |id: &Uuid| self.meta.get(id).map(|m| KINDS[m.kind].name.to_owned());
        let timeout = |id: &Uuid| self.meta.get(id).map_or(0, |m| m.timeout_ms);
        Snapshot {
            cards: self.sim.cards.clone(),
            holding: self
                .sim
                .active
                .iter()
                .map(|a| Holding {
                    id: a.id,
                    owner: a.owner,
                    gpu_count: a.gpu_count,
                    grants: a.grants.clone(),
                    exclusive: a.exclusive,
                    array: a.array,
                    workload: name(&a.id),
                    timeout_ms: timeout(&a.id),
                    started_ms: self.meta.get(&a.id).and_then(|m| m.started_ms),
                    ended: false,
                })
                .collect(),
            queued: self
                .sim
                .pending
                .iter()
                .map(|p| Waiter {
                    job: p.job.clone(),
                    owner: p.owner,
                    workload: name(&p.job.id),
                    timeout_ms: timeout(&p.job.id),
                    after: p.after.clone(),
                    array: p.array,
                    held: None,
                })
                .collect(),
            caps: self.sim.caps.clone(),
            array_limits: self.sim.array_limits.clone(),
            headroom_mib: self.sim.headroom_mib,
            starvation_after_ms: self.sim.starvation_after_ms,
            slack_ms: SLACK_MS,
            history: self
                .history
                .iter()
                .map(|(k, runs)| {
                    (
                        k.to_string(),
                        Durations::new(runs.iter().copied().collect()),
                    )
                })
                .collect(),
            typical: self.typical,
            now_ms: self.sim.now_ms,
            backfill: false,
        }
    }

    /// Records the estimates of the jobs just submitted.
    fn estimate(&mut self, ids: &[Uuid]) {
        let started = Instant::now();
        let mut figures = estimate::estimate(&self.snapshot(), 10_000);
        self.estimate_time += started.elapsed();
        self.estimates += 1;
        for id in ids {
            if let Some(m) = self.meta.get_mut(id) {
                m.est = figures.remove(id);
            }
        }
    }

    /// Replays `arrivals` until every job has started and ended.
    fn run(&mut self, arrivals: Vec<Arrival>) {
        let mut arrivals: VecDeque<Arrival> = arrivals.into();
        loop {
            let t = match (arrivals.front().map(|a| a.at_ms), self.sim.next_end()) {
                (None, None) => break,
                (a, e) => a.unwrap_or(i64::MAX).min(e.unwrap_or(i64::MAX)),
            };
            let mut queued = Vec::new();
            for ended in self.sim.advance(t) {
                let Some(m) = self.meta.get(&ended.id) else {
                    continue;
                };
                let ran = t - m.started_ms.unwrap_or(t);
                let runs = self.history.entry(KINDS[m.kind].name).or_default();
                runs.push_back(ran);
                if runs.len() > HISTORY_RUNS {
                    runs.pop_front();
                }
                if let Some((next, rest)) = m.rest.split_first() {
                    let (next, rest, owner) = (*next, rest.to_vec(), m.owner);
                    let id = self.queue(next, owner, 0, None);
                    if let Some(child) = self.meta.get_mut(&id) {
                        child.rest = rest;
                    }
                    queued.push(id);
                }
            }
            while arrivals.front().is_some_and(|a| a.at_ms <= t) {
                if let Some(a) = arrivals.pop_front() {
                    queued.extend(self.submit(&a));
                }
            }
            if !queued.is_empty() {
                self.estimate(&queued);
            }
            for id in self.sim.step() {
                if let Some(m) = self.meta.get_mut(&id) {
                    m.started_ms = Some(t);
                }
            }
        }
    }
}

/// Nearest-rank percentile (`p` in 0..=100) of ascending values; 0 when there are none.
pub(super) fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (p / 100.0 * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn sorted(mut v: Vec<f64>) -> Vec<f64> {
    v.sort_by(f64::total_cmp);
    v
}

/// The figures of one replay.
#[derive(Debug, Default)]
pub struct Figures {
    /// Jobs submitted.
    pub jobs: usize,
    /// Jobs that waited at least a minute.
    pub waited: usize,
    /// Median absolute error of the estimate, as a share of the actual wait (jobs that waited).
    pub median_error: f64,
    /// Its 90th percentile.
    pub p90_error: f64,
    /// Jobs whose bound was broken, by a later job of higher priority.
    pub broken_by_priority: usize,
    /// Jobs whose bound was broken otherwise.
    pub broken_otherwise: usize,
}

/// Runs the replay and prints its figures to `out`.
pub fn run(opts: &ReplayOptions, out: &mut impl Write) -> Result<Figures> {
    let started = Instant::now();
    let mut replay = Replay::new(opts);
    let arrivals = trace::day(&mut replay.rng, opts.trace.hours, opts.trace.per_hour);
    let submissions = arrivals.len();
    replay.run(arrivals);
    let wall = started.elapsed();

    let meta = &replay.meta;
    let mut figures = Figures {
        jobs: meta.len(),
        ..Figures::default()
    };
    let (mut rel, mut abs_min, mut waits) = (Vec::new(), Vec::new(), Vec::new());
    let mut signed = Vec::new();
    let (mut no_figure, mut worst_break) = (0usize, 0i64);
    for (id, m) in meta {
        let Some(start) = m.started_ms else {
            continue;
        };
        let wait = start - m.submit_ms;
        waits.push(wait as f64 / MIN as f64);
        let Some(Estimate {
            expected: Start::At(est),
            latest,
        }) = &m.est
        else {
            no_figure += 1;
            continue;
        };
        abs_min.push((est - start).abs() as f64 / MIN as f64);
        if wait >= MIN {
            figures.waited += 1;
            rel.push((est - start).abs() as f64 / wait as f64 * 100.0);
            signed.push((est - start) as f64 / wait as f64 * 100.0);
        }
        if let Start::At(bound) = latest {
            if start > *bound {
                worst_break = worst_break.max(start - bound);
                let jumped = meta.iter().any(|(other, o)| {
                    other != id
                        && o.priority > m.priority
                        && o.submit_ms > m.submit_ms
                        && o.started_ms.is_some_and(|s| s <= start)
                });
                if jumped {
                    figures.broken_by_priority += 1;
                } else {
                    figures.broken_otherwise += 1;
                }
            }
        }
    }
    let (rel, abs_min, waits, signed) =
        (sorted(rel), sorted(abs_min), sorted(waits), sorted(signed));
    figures.median_error = pct(&rel, 50.0);
    figures.p90_error = pct(&rel, 90.0);
    let priority = meta.values().filter(|m| m.priority > 0).count();
    let in_arrays = replay.sim.array_limits.len();
    writeln!(
        out,
        "gpuq bench replay: {} h of a team's jobs (seed {:#x}, {} submissions/busy hour), 4x A100 80GB + 4x RTX 3090, max_running_per_user {}, run times taken as {:?}",
        opts.trace.hours,
        opts.trace.seed,
        opts.trace.per_hour,
        opts.max_running_per_user,
        opts.typical
    )?;
    writeln!(
        out,
        "jobs: {} from {submissions} submissions ({in_arrays} arrays, {priority} admins' priority jobs, chains' later links submitted as their parent ended)",
        figures.jobs
    )?;
    writeln!(
        out,
        "wait: median {:.1} min, p90 {:.1} min, max {:.1} min; {} of {} waited a minute or more",
        pct(&waits, 50.0),
        pct(&waits, 90.0),
        waits.last().copied().unwrap_or(0.0),
        figures.waited,
        figures.jobs
    )?;
    writeln!(
        out,
        "estimate error, % of the actual wait (jobs that waited >= 1 min): median {:.1} %, p90 {:.1} % (target: median <= 25 %)",
        figures.median_error, figures.p90_error
    )?;
    writeln!(
        out,
        "estimate early (-) or late (+), % of the actual wait: p10 {:.1} %, median {:.1} %, p90 {:.1} %",
        pct(&signed, 10.0),
        pct(&signed, 50.0),
        pct(&signed, 90.0)
    )?;
    writeln!(
        out,
        "estimate error, minutes (every job): median {:.1}, p90 {:.1}; jobs without a figure: {no_figure}",
        pct(&abs_min, 50.0),
        pct(&abs_min, 90.0)
    )?;
    writeln!(
        out,
        "bound broken: {} of {} ({} by a later job of higher priority, {} otherwise; worst by {:.1} min)",
        figures.broken_by_priority + figures.broken_otherwise,
        figures.jobs,
        figures.broken_by_priority,
        figures.broken_otherwise,
        worst_break as f64 / MIN as f64
    )?;
    writeln!(
        out,
        "cost: {} estimates, {:.2} ms each on average; the whole replay took {:.2} s",
        replay.estimates,
        replay.estimate_time.as_secs_f64() * 1000.0 / replay.estimates.max(1) as f64,
        wall.as_secs_f64()
    )?;
    if cfg!(debug_assertions) {
        writeln!(
            out,
            "note: debug build; the costs are not a release build's"
        )?;
    }
    Ok(figures)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_replay_starts_every_job_and_measures_it() {
        let opts = ReplayOptions {
            // Past 9:00, when the team's day starts.
            trace: trace::TraceOptions {
                hours: 12,
                per_hour: 6.0,
                seed: 7,
            },
            max_running_per_user: 2,
            typical: RunFigure::Mixed,
        };
        let mut out = Vec::new();
        let f = run(&opts, &mut out).expect("replay");
        let text = String::from_utf8(out).unwrap();
        assert!(f.jobs > 0, "{text}");
        assert!(
            text.contains("estimate error, % of the actual wait"),
            "{text}"
        );
        // Every job of a replay starts: none is left in the queue at the end.
        let mut replay = Replay::new(&opts);
        let arrivals = trace::day(&mut replay.rng, opts.trace.hours, opts.trace.per_hour);
        replay.run(arrivals);
        assert!(replay.sim.pending.is_empty());
        assert!(replay.meta.values().all(|m| m.started_ms.is_some()));
        assert!(replay.meta.values().all(|m| m.est.is_some()));
    }
}
