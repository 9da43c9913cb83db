//! A synthetic day of a team's GPU jobs: who submits what, and when, and how long each really
//! runs. Deterministic for a seed.

use crate::server::bench::synth::Rng;

/// The flags of the trace, shared by `gpuq bench replay` and `gpuq bench backfill`.
#[derive(clap::Args, Debug, Clone)]
pub struct TraceOptions {
    /// Hours of submissions replayed (each run then goes on until the queue is empty).
    #[arg(long, default_value_t = 24, value_parser = clap::value_parser!(i64).range(1..=24 * 14))]
    pub hours: i64,
    /// Submissions per busy hour (9:00–19:00; a tenth of it at night).
    #[arg(long, default_value_t = 7.0)]
    pub per_hour: f64,
    /// Seed of the trace.
    #[arg(long, default_value_t = 0x9E37_79B9_7F4A_7C15)]
    pub seed: u64,
}

/// A workload type of the trace: what it needs per card model and how long it runs.
pub(in crate::server::bench) struct Kind {
    /// Its name (the history is kept per name).
    pub name: &'static str,
    /// MiB per card on each model it runs on.
    pub needs: &'static [(&'static str, i64)],
    /// Cards per job.
    pub gpus: u32,
    /// Median run time, minutes.
    pub median_min: f64,
    /// Spread of the log-normal run time (its log's standard deviation).
    pub sigma: f64,
    /// Its deadline, minutes.
    pub timeout_min: i64,
}

/// The A100s' model name.
pub(in crate::server::bench) const A100: &str = "NVIDIA A100 80GB";
/// The 3090s' model name.
pub(in crate::server::bench) const RTX: &str = "NVIDIA GeForce RTX 3090";

/// The team's workload types.
pub(in crate::server::bench) const KINDS: [Kind; 5] = [
    Kind {
        name: "train-large",
        needs: &[(A100, 70_000)],
        gpus: 1,
        median_min: 120.0,
        sigma: 0.8,
        timeout_min: 8 * 60,
    },
    Kind {
        name: "train-multi",
        needs: &[(A100, 60_000)],
        gpus: 2,
        median_min: 90.0,
        sigma: 0.8,
        timeout_min: 6 * 60,
    },
    Kind {
        name: "finetune",
        needs: &[(A100, 30_000), (RTX, 20_000)],
        gpus: 1,
        median_min: 45.0,
        sigma: 1.0,
        timeout_min: 4 * 60,
    },
    Kind {
        name: "eval",
        needs: &[(A100, 10_000), (RTX, 10_000)],
        gpus: 1,
        median_min: 10.0,
        sigma: 0.7,
        timeout_min: 60,
    },
    Kind {
        name: "sweep",
        needs: &[(A100, 6_000), (RTX, 6_000)],
        gpus: 1,
        median_min: 15.0,
        sigma: 1.1,
        timeout_min: 90,
    },
];

/// What one submission is.
#[derive(Debug, Clone)]
pub(in crate::server::bench) enum What {
    /// One job of a kind.
    Single(usize),
    /// Jobs run one after the other: each submitted when the one before ends.
    Chain(Vec<usize>),
    /// `n` elements of a kind, at most `limit` running at once.
    Array { kind: usize, n: u32, limit: u32 },
    /// An admin's job of a kind at a higher priority.
    Priority(usize),
}

/// One submission.
#[derive(Debug, Clone)]
pub(in crate::server::bench) struct Arrival {
    /// When, virtual milliseconds from the start of the day.
    pub at_ms: i64,
    /// Who (a member's number).
    pub user: usize,
    /// What.
    pub what: What,
}

/// Members of the team.
pub(in crate::server::bench) const USERS: usize = 8;

impl Rng {
    /// Uniform in (0, 1).
    pub(in crate::server::bench) fn unit(&mut self) -> f64 {
        (self.below(1 << 53) as f64 + 0.5) / (1u64 << 53) as f64
    }

    /// A standard normal draw (Box–Muller).
    fn normal(&mut self) -> f64 {
        let (u, v) = (self.unit(), self.unit());
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }
}

/// How long a job of `kind` really runs (ms): log-normal around its median, cut at its deadline
/// (where it would time out).
pub(in crate::server::bench) fn run_ms(rng: &mut Rng, kind: &Kind) -> i64 {
    let minutes = (kind.median_min.ln() + kind.sigma * rng.normal()).exp();
    ((minutes * 60_000.0) as i64).clamp(30_000, kind.timeout_min * 60_000)
}

/// Submissions over `hours`: busy from 9:00 to 19:00, quiet at night; `per_hour` in the busy
/// hours, a tenth of it otherwise.
pub(in crate::server::bench) fn day(rng: &mut Rng, hours: i64, per_hour: f64) -> Vec<Arrival> {
    let mut out = Vec::new();
    let end = hours * 3_600_000;
    let mut t = 0i64;
    loop {
        let hour = (t / 3_600_000) % 24;
        let rate = if (9..19).contains(&hour) {
            per_hour
        } else {
            per_hour / 10.0
        };
        t += (-rng.unit().ln() / rate * 3_600_000.0) as i64;
        if t >= end {
            break;
        }
        let pick = rng.below(100);
        let what = match pick {
            0..=2 => What::Priority(rng.below(4) as usize),
            3..=17 => What::Chain(vec![2, 3]),
            18..=22 => What::Chain(vec![0, 3]),
            23..=30 => What::Array {
                kind: 4,
                n: 6 + rng.below(19) as u32,
                limit: 2 + rng.below(3) as u32,
            },
            31..=42 => What::Single(0),
            43..=50 => What::Single(1),
            51..=72 => What::Single(2),
            _ => What::Single(3),
        };
        out.push(Arrival {
            at_ms: t,
            user: rng.below(USERS as u64) as usize,
            what,
        });
    }
    out
}
