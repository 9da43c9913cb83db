//! `gpuq bench fairness`: one day replayed in virtual time on eight simulated 24 GiB cards with
//! the real planner under the pass's caps ([`Sim`], the machinery `gpuq bench replay` drives), and
//! the real fair-share code ([`fairness::standings`]) recomputed at
//! every pass from the GPU-hours charged so far (decayed exactly, as `db::gpu_hours::decayed`
//! does). User A submits a 200-job sweep at 9:00; B at 10:00 and C at 11:30 submit 40 jobs each.
//! Printed with fair share off and on: each user's wait (mean, max), their share of the day's
//! GPU-hours, and their share while all three had work, against their weight's share (equal).
//! Then a second day in which all three submit 100 jobs each at 9:00, so that all three have work
//! from the first moment: their shares of that time against what their weights owe them.
//! Needs no database.

use crate::model::Standing;
use crate::server::admission::estimate::sim::{Sim, SimJob};
use crate::server::admission::pass::Caps;
use crate::server::admission::planner::{Card, Need, QueuedJob};
use crate::server::bench::synth::Rng;
use crate::server::fairness::{self, Member};
use anyhow::Result;
use std::collections::{HashMap, HashSet};
use std::io::Write;
use uuid::Uuid;

const MIN: i64 = 60_000;
const HOUR: i64 = 60 * MIN;
const CARD_MIB: i64 = 24_576;
const JOB_MIB: i64 = 20_000;
/// The server's default starvation limit (`--starvation-after-s`).
const STARVATION_MS: i64 = 30 * MIN;

/// Flags of `gpuq bench fairness`.
#[derive(clap::Args, Debug, Clone)]
pub struct FairnessOptions {
    /// Seed of the run times.
    #[arg(long, default_value_t = 0x9E37_79B9_7F4A_7C15)]
    pub seed: u64,
    /// The policy's `fair_share_half_life_h`.
    #[arg(long, default_value_t = 168.0)]
    pub half_life_h: f64,
    /// The share weights of A, B and C (each user in a team of their own, of that weight).
    #[arg(long, value_delimiter = ',', default_values_t = [1.0, 1.0, 1.0])]
    pub weights: Vec<f64>,
}

impl FairnessOptions {
    /// The part of the cards the weights owe user `u` while all three have work.
    fn owed(&self, u: usize) -> f64 {
        let total: f64 = self.weights.iter().sum();
        self.weights.get(u).copied().unwrap_or(1.0) / total
    }
}

/// One user's figures.
#[derive(Debug, Clone, Default)]
pub struct UserFigures {
    /// Jobs submitted.
    pub jobs: usize,
    /// Mean wait, minutes.
    pub mean_wait_min: f64,
    /// Longest wait, minutes.
    pub max_wait_min: f64,
    /// From their first submit to their first job's start, minutes: how long someone arriving
    /// behind a sweep waits before the cards start working for them.
    pub first_start_min: f64,
    /// Their part of the day's GPU-hours.
    pub day_share: f64,
    /// Their part of the GPU-hours used while all three had work.
    pub busy_share: f64,
}

/// What one replay measured, users A, B, C in order.
#[derive(Debug, Clone, Default)]
pub struct Figures {
    /// Per user.
    pub users: Vec<UserFigures>,
    /// Hours during which all three had work.
    pub all_busy_h: f64,
    /// The mean run time of A's jobs, minutes.
    pub a_job_min: f64,
}

struct Job {
    owner: usize,
    submit_ms: i64,
    run_ms: i64,
    start_ms: Option<i64>,
}

fn cards() -> Vec<Card> {
    (0..8u32)
        .map(|i| Card {
            uuid: Uuid::from_u128(0xFA1_0000 + u128::from(i)),
            node: format!("node-{}", i / 4),
            index: i % 4,
            model: "sim-24g".into(),
            total_mib: CARD_MIB,
            reserved_mib: 0,
            external_mib: 0,
            online: true,
            exclusive_held: false,
        })
        .collect()
}

/// Who submits what: (submit time, user, jobs).
type Arrivals = [(i64, usize, usize); 3];

/// A's 200-job sweep at 9:00, then B at 10:00 and C at 11:30, 40 jobs each.
const SWEEP: Arrivals = [
    (9 * HOUR, 0, 200),
    (10 * HOUR, 1, 40),
    (11 * HOUR + 30 * MIN, 2, 40),
];

/// All three at 9:00, 100 jobs each: more than the cards run in the day, so all have work
/// throughout.
const TOGETHER: Arrivals = [(9 * HOUR, 0, 100), (9 * HOUR, 1, 100), (9 * HOUR, 2, 100)];

/// Runs one day; `fair` turns fair share on.
fn replay(opts: &FairnessOptions, arrivals: Arrivals, fair: bool) -> Figures {
    let users: Vec<Uuid> = (0..3).map(|u| Uuid::from_u128(0xA0 + u)).collect();
    let members: Vec<Member> = users
        .iter()
        .enumerate()
        .map(|(i, id)| Member {
            id: *id,
            username: ["a", "b", "c"][i].into(),
            team: ["team-a", "team-b", "team-c"][i].into(),
            weight: 1.0,
            team_weight: opts.weights.get(i).copied().unwrap_or(1.0),
            budget: None,
            team_budget: None,
        })
        .collect();
    let mut rng = Rng::new(opts.seed);
    let mut jobs: Vec<Job> = Vec::new();
    for (at, owner, n) in arrivals {
        for _ in 0..n {
            let run_ms = 45 * MIN + rng.below(31) as i64 * MIN;
            jobs.push(Job {
                owner,
                submit_ms: at,
                run_ms,
                start_ms: None,
            });
        }
    }
    let mut sim = Sim {
        cards: cards(),
        active: Vec::new(),
        pending: Vec::new(),
        caps: Caps::default(),
        array_limits: HashMap::new(),
        headroom_mib: 256,
        starvation_after_ms: STARVATION_MS,
        now_ms: 0,
        backfill: None,
    };
    let share_of_job = JOB_MIB as f64 / CARD_MIB as f64;
    let h_ms = opts.half_life_h * HOUR as f64;
    let mut decayed = vec![0.0f64; 3];
    let (mut day, mut busy) = (vec![0.0f64; 3], vec![0.0f64; 3]);
    let mut all_busy_ms = 0i64;
    let mut next = 0usize;
    let mut t = 0i64;
    loop {
        // Charge from t to the next event.
        let next_arrival = jobs.get(next).map(|j| j.submit_ms);
        let Some(to) = [next_arrival, sim.next_end()].into_iter().flatten().min() else {
            break;
        };
        let dt = (to - t) as f64;
        let mut holding = [0usize; 3];
        for a in &sim.active {
            holding[owner_of(&users, a.owner)] += 1;
        }
        let waiting: HashSet<usize> = sim
            .pending
            .iter()
            .map(|p| owner_of(&users, p.owner))
            .collect();
        let all = (0..3).all(|u| holding[u] > 0 || waiting.contains(&u));
        let factor = 0.5f64.powf(dt / h_ms);
        for u in 0..3 {
            let s = holding[u] as f64 * share_of_job;
            let hours = s * dt / HOUR as f64;
            decayed[u] = decayed[u] * factor
                + s * (h_ms / HOUR as f64) / std::f64::consts::LN_2 * (1.0 - factor);
            let in_day = (to.min(24 * HOUR) - t.min(24 * HOUR)).max(0) as f64;
            day[u] += s * in_day / HOUR as f64;
            if all {
                busy[u] += hours;
            }
        }
        if all {
            all_busy_ms += to - t;
        }
        t = to;
        sim.advance(to);
        while jobs.get(next).is_some_and(|j| j.submit_ms <= t) {
            let j = &jobs[next];
            sim.pending.push(SimJob {
                job: QueuedJob {
                    id: Uuid::from_u128(next as u128 + 1),
                    seq: next as i64 + 1,
                    priority: 0,
                    past_soft_budget: false,
                    standing: Standing::EVEN,
                    gpu_count: 1,
                    need: Need::Fixed(JOB_MIB),
                    exclusive: false,
                    queued_at_ms: j.submit_ms,
                    nodes: None,
                },
                owner: users[j.owner],
                run_ms: j.run_ms,
                after: Vec::new(),
                array: None,
                held: None,
            });
            next += 1;
        }
        if fair {
            let active: HashSet<Uuid> = sim
                .pending
                .iter()
                .map(|p| p.owner)
                .chain(sim.active.iter().map(|a| a.owner))
                .collect();
            let usage: HashMap<Uuid, f64> =
                users.iter().zip(&decayed).map(|(u, d)| (*u, *d)).collect();
            let standings = fairness::standings(&members, &usage, &active);
            for p in &mut sim.pending {
                p.job.standing = standings.of(p.owner);
            }
        }
        for id in sim.step() {
            let i = id.as_u128() as usize - 1;
            if let Some(j) = jobs.get_mut(i) {
                j.start_ms = Some(t);
            }
        }
    }
    let total_day: f64 = day.iter().sum();
    let total_busy: f64 = busy.iter().sum();
    let part = |x: f64, total: f64| if total > 0.0 { x / total } else { 0.0 };
    let users_out = (0..3)
        .map(|u| {
            let waits: Vec<f64> = jobs
                .iter()
                .filter(|j| j.owner == u)
                .map(|j| (j.start_ms.unwrap_or(t) - j.submit_ms) as f64 / MIN as f64)
                .collect();
            let first_submit = jobs
                .iter()
                .filter(|j| j.owner == u)
                .map(|j| j.submit_ms)
                .min()
                .unwrap_or(0);
            let first_start = jobs
                .iter()
                .filter(|j| j.owner == u)
                .map(|j| j.start_ms.unwrap_or(t))
                .min()
                .unwrap_or(t);
            UserFigures {
                jobs: waits.len(),
                first_start_min: (first_start - first_submit) as f64 / MIN as f64,
                mean_wait_min: waits.iter().sum::<f64>() / waits.len().max(1) as f64,
                max_wait_min: waits.iter().copied().fold(0.0, f64::max),
                day_share: part(day[u], total_day),
                busy_share: part(busy[u], total_busy),
            }
        })
        .collect();
    let a_runs: Vec<f64> = jobs
        .iter()
        .filter(|j| j.owner == 0)
        .map(|j| j.run_ms as f64 / MIN as f64)
        .collect();
    Figures {
        users: users_out,
        all_busy_h: all_busy_ms as f64 / HOUR as f64,
        a_job_min: a_runs.iter().sum::<f64>() / a_runs.len().max(1) as f64,
    }
}

fn owner_of(users: &[Uuid], id: Uuid) -> usize {
    users.iter().position(|u| *u == id).unwrap_or(0)
}

/// The line above a replay's table: how long all three had work.
fn all_busy_line(out: &mut impl Write, fair: &str, f: &Figures) -> std::io::Result<()> {
    writeln!(
        out,
        "fair share {fair}: all three had work for {:.1} h",
        f.all_busy_h
    )
}

/// Both days, fair share off and on.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// A's sweep first, fair share off.
    pub off: Figures,
    /// A's sweep first, fair share on.
    pub on: Figures,
    /// All three from 9:00, fair share off.
    pub together_off: Figures,
    /// All three from 9:00, fair share on.
    pub together_on: Figures,
}

/// Runs both days with fair share off and on and prints them.
pub fn run(opts: &FairnessOptions, out: &mut impl Write) -> Result<Report> {
    if opts.weights.len() != 3 || opts.weights.iter().any(|w| !(w.is_finite() && *w > 0.0)) {
        anyhow::bail!(
            "--weights: three weights above 0, for A, B and C (e.g. 2,1,1); got {:?}",
            opts.weights
        );
    }
    let off = replay(opts, SWEEP, false);
    let on = replay(opts, SWEEP, true);
    let together_off = replay(opts, TOGETHER, false);
    let together_on = replay(opts, TOGETHER, true);
    writeln!(
        out,
        "== Fair share: 8 cards, A submits 200 jobs at 9:00, B 40 at 10:00, C 40 at 11:30 \
         (45-75 min each, one card each; weights {:?}; half-life {} h) ==",
        opts.weights, opts.half_life_h
    )?;
    writeln!(out, "A's jobs run {:.0} min on average", on.a_job_min)?;
    for (name, f) in [("off", &off), ("on", &on)] {
        all_busy_line(out, name, f)?;
        writeln!(
            out,
            "  {:<5} {:>5} {:>12} {:>10} {:>10} {:>11} {:>14}",
            "user", "jobs", "first start", "mean wait", "max wait", "day share", "all-busy share"
        )?;
        for (u, x) in f.users.iter().enumerate() {
            writeln!(
                out,
                "  {:<5} {:>5} {:>8.0} min {:>6.0} min {:>6.0} min {:>9.1} % {:>12.1} %",
                ["A", "B", "C"][u],
                x.jobs,
                x.first_start_min,
                x.mean_wait_min,
                x.max_wait_min,
                x.day_share * 100.0,
                x.busy_share * 100.0
            )?;
        }
    }
    writeln!(
        out,
        "Targets with fair share on: a later user's first start within about one of A's jobs \
         ({:.0} min): B {:.0} min, C {:.0} min",
        on.a_job_min, on.users[1].first_start_min, on.users[2].first_start_min,
    )?;
    for (u, x) in on.users.iter().enumerate() {
        let owed = opts.owed(u);
        writeln!(
            out,
            "  {}'s day share {:.1} %, owed {:.1} % (within 10 %: {:.1} to {:.1} %)",
            ["A", "B", "C"][u],
            x.day_share * 100.0,
            owed * 100.0,
            owed * 90.0,
            owed * 110.0
        )?;
    }
    writeln!(
        out,
        "\n== All busy: A, B and C submit 100 jobs each at 9:00, A's first =="
    )?;
    for (name, f) in [("off", &together_off), ("on", &together_on)] {
        all_busy_line(out, name, f)?;
        writeln!(
            out,
            "  {:<5} {:>10} {:>14} {:>8} {:>18}",
            "user", "mean wait", "all-busy share", "owed", "within 10 % of it"
        )?;
        for (u, x) in f.users.iter().enumerate() {
            let owed = opts.owed(u);
            writeln!(
                out,
                "  {:<5} {:>6.0} min {:>12.1} % {:>6.1} % {:>18}",
                ["A", "B", "C"][u],
                x.mean_wait_min,
                x.busy_share * 100.0,
                owed * 100.0,
                if (x.busy_share - owed).abs() <= 0.1 * owed {
                    "yes"
                } else {
                    "no"
                }
            )?;
        }
    }
    Ok(Report {
        off,
        on,
        together_off,
        together_on,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn with_fair_share_later_users_wait_less() {
        let opts = FairnessOptions {
            seed: 7,
            half_life_h: 168.0,
            weights: vec![1.0, 1.0, 1.0],
        };
        let Report { off, on, .. } = run(&opts, &mut Vec::new()).unwrap();
        // Off: B and C wait behind A's sweep for hours.
        assert!(off.users[1].max_wait_min > 5.0 * 60.0, "{off:?}");
        // On: a later user's first job starts within about one of A's job lengths, and each
        // user's share of the day's GPU-hours is within 10 % of the third the weights owe them.
        for u in 1..3 {
            assert!(
                on.users[u].first_start_min <= on.a_job_min,
                "{on:?} {off:?}"
            );
            assert!(off.users[u].first_start_min > 5.0 * on.a_job_min, "{off:?}");
        }
        for u in 0..3 {
            let share = on.users[u].day_share;
            assert!((share - 1.0 / 3.0).abs() <= 0.1 / 3.0, "{on:?}");
        }
    }

    #[test]
    fn shares_follow_unequal_weights() {
        let opts = FairnessOptions {
            seed: 7,
            half_life_h: 168.0,
            weights: vec![2.0, 1.0, 1.0],
        };
        let Report { on, .. } = run(&opts, &mut Vec::new()).unwrap();
        for u in 0..3 {
            let (share, owed) = (on.users[u].day_share, opts.owed(u));
            assert!(
                (share - owed).abs() <= 0.1 * owed,
                "{u}: {share} of {owed}: {on:?}"
            );
        }
    }

    #[test]
    fn while_all_are_busy_shares_follow_the_weights() {
        for weights in [
            vec![1.0, 1.0, 1.0],
            vec![2.0, 1.0, 1.0],
            vec![1.0, 2.0, 3.0],
        ] {
            let opts = FairnessOptions {
                seed: 7,
                half_life_h: 168.0,
                weights,
            };
            let r = run(&opts, &mut Vec::new()).unwrap();
            let (off, on) = (&r.together_off, &r.together_on);
            // All three had work for most of the day either way.
            assert!(on.all_busy_h > 10.0, "{on:?}");
            for u in 0..3 {
                let (share, owed) = (on.users[u].busy_share, opts.owed(u));
                assert!(
                    (share - owed).abs() <= 0.1 * owed,
                    "{:?} {u}: {share} of {owed}: {on:?}",
                    opts.weights
                );
            }
            // Off, A's 100 jobs, submitted first, take the cards while all three have work.
            assert!(off.users[0].busy_share > 0.9, "{off:?}");
        }
    }

    #[test]
    fn weights_must_be_three_and_positive() {
        for weights in [
            vec![1.0, 2.0],
            vec![1.0, 0.0, 1.0],
            vec![1.0, f64::NAN, 1.0],
        ] {
            let opts = FairnessOptions {
                seed: 7,
                half_life_h: 168.0,
                weights,
            };
            let e = run(&opts, &mut Vec::new()).unwrap_err().to_string();
            assert!(e.starts_with("--weights"), "{e}");
        }
    }
}
