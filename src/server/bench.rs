//! `gpuq bench admission`: how long admission takes, from the pure planner up to whole passes
//! against Postgres, printed as plain text tables.
//!
//! Three sections, each timed with [`std::time::Instant`]:
//!
//! 1. **Planner alone**: `plan()` on synthetic inputs (queued 100 … 100k × cards 8 / 64 / 512, a
//!    partly busy mixed-model cluster, a mixed queue of workload types, explicit minimums,
//!    1–4 cards, some exclusive, three priorities, a quarter of it starving).
//! 2. **Whole pass**: `run_pass` against the given database with 10k queued jobs on 64 empty
//!    cards (8 nodes). The first pass admits what fits and is reported on its own; passes are
//!    then repeated until one admits nothing, and the next `repeats` passes (where nothing is
//!    left to admit, so every pass does the same work) give the median and p95.
//! 3. **Burst**: 10k jobs submitted at once that finish the moment they are admitted: passes
//!    alternate with one UPDATE marking every admitted job `succeeded` (the next pass reclaims its
//!    cards) until nothing is queued or admitted.
//! 4. **Nodes**: 10k queued on 1, 10 and 50 registered, heartbeating nodes of 8 cards each (the
//!    earlier nodes registered as lost, as dead hosts' cards that every pass reads and skips):
//!    the first pass, and the median and p95 of settled passes.
//!
//! Data: the bench writes its own user, workload types (`bench-*`), cards (`bench-node-*`) and
//! jobs with batched INSERTs, never through the HTTP API. Job events are append-only, so nothing
//! can be deleted afterwards: the caller must give it a scratch database, and it refuses to run
//! when `jobs` or `gpus` already has rows. Section 3 reuses section 2's cluster: section 2's jobs
//! are closed first (queued → cancelled, admitted → succeeded) and one untimed pass gives their
//! cards back, so the burst starts on 64 empty cards with only its own jobs queued. Section 2's
//! finished rows stay behind, outside every partial index a pass reads.

pub mod backfill;
mod db;
pub mod deps;
pub mod external;
pub mod failover;
pub mod fairness;
pub mod launch;
pub mod logs;
mod node;
pub mod pull;
pub mod replay;
mod synth;
pub mod vram;

use crate::server::admission::planner::plan;

/// A `gpuq serve` child of a benchmark, killed (and reaped) when dropped.
pub(crate) struct ServeChild(pub std::process::Child);

impl Drop for ServeChild {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
use anyhow::Result;
use sqlx::PgPool;
use std::io::Write;
use std::time::{Duration, Instant};

/// Flags of `gpuq bench admission`.
#[derive(clap::Args, Debug, Clone)]
pub struct BenchOptions {
    /// Smoke run: queues of 100 and 1k on 8 and 64 cards, 1k jobs against Postgres.
    #[arg(long, default_value_t = false)]
    pub quick: bool,
    /// Timed runs per figure (median and p95 are taken over them).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..))]
    pub repeats: u32,
    /// Seed of the synthetic clusters and queues.
    #[arg(long, default_value_t = 0x9E37_79B9_7F4A_7C15)]
    pub seed: u64,
}

/// Problem sizes of one run.
#[derive(Debug, Clone, Copy)]
struct Sizes {
    queues: &'static [usize],
    cards: &'static [usize],
    db_jobs: usize,
    db_cards: usize,
    node_counts: &'static [usize],
}

impl Sizes {
    fn of(opts: &BenchOptions) -> Self {
        if opts.quick {
            Sizes {
                queues: &[100, 1_000],
                cards: &[8, 64],
                db_jobs: 1_000,
                db_cards: 64,
                node_counts: &[1, 10],
            }
        } else {
            Sizes {
                queues: &[100, 1_000, 10_000, 100_000],
                cards: &[8, 64, 512],
                db_jobs: 10_000,
                db_cards: 64,
                node_counts: &[1, 10, 50],
            }
        }
    }
}

/// Runs the whole benchmark against `pool` (a scratch database, migrated, with no jobs and no
/// cards) and prints its tables to `out`.
pub async fn admission(pool: &PgPool, opts: &BenchOptions, out: &mut impl Write) -> Result<()> {
    let sizes = Sizes::of(opts);
    db::ensure_scratch(pool).await?;
    if cfg!(debug_assertions) {
        writeln!(
            out,
            "note: debug build; times are not representative of a release build\n"
        )?;
    }
    planner_section(&sizes, opts, out)?;
    let owner = db::setup(pool, sizes.db_cards).await?;
    let shape = (sizes.db_jobs, sizes.db_cards);
    db::pass_section(pool, owner, shape, opts, out).await?;
    db::burst_section(pool, owner, sizes.db_jobs, opts, out).await?;
    db::nodes_section(pool, owner, (sizes.db_jobs, sizes.node_counts), opts, out).await?;
    Ok(())
}

/// Median and 95th percentile of a set of timings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Summary {
    median: Duration,
    p95: Duration,
}

/// Nearest-rank percentile (`p` in 0..=100) of ascending samples; zero when there are none.
fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let n = sorted.len();
    if n == 0 {
        return Duration::ZERO;
    }
    let rank = (p / 100.0 * n as f64).ceil() as usize;
    sorted[rank.clamp(1, n) - 1]
}

fn summarize(mut samples: Vec<Duration>) -> Summary {
    samples.sort_unstable();
    Summary {
        median: percentile(&samples, 50.0),
        p95: percentile(&samples, 95.0),
    }
}

/// The time from one database stamp to a later one (zero when clocks put it before).
fn gap(from: chrono::DateTime<chrono::Utc>, to: chrono::DateTime<chrono::Utc>) -> Duration {
    (to - from).to_std().unwrap_or(Duration::ZERO)
}

/// Milliseconds with three decimals and the unit.
fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1e3)
}

/// Writes one latency row of a bench: its median, 95th and 99th percentiles, maximum and count.
fn latency_row(
    out: &mut impl std::io::Write,
    what: &str,
    mut samples: Vec<Duration>,
) -> Result<()> {
    samples.sort_unstable();
    let at = |p| ms(percentile(&samples, p));
    writeln!(
        out,
        "  {what:<58} p50 {:>11}   p95 {:>11}   p99 {:>11}   max {:>11}   (n = {})",
        at(50.0),
        at(95.0),
        at(99.0),
        ms(samples.last().copied().unwrap_or_default()),
        samples.len()
    )?;
    Ok(())
}

/// One cell of the planner table.
struct Cell {
    summary: Summary,
    admitted: usize,
}

/// Times `plan()` `repeats` times after one untimed warm-up.
fn time_plan(queued: usize, cards: usize, opts: &BenchOptions) -> Cell {
    let seed = opts.seed ^ (queued as u64).wrapping_mul(31).wrapping_add(cards as u64);
    let input = synth::planner_input(queued, cards, seed);
    let admitted = plan(&input).admitted.len();
    let times = (0..opts.repeats)
        .map(|_| {
            let t = Instant::now();
            std::hint::black_box(plan(std::hint::black_box(&input)));
            t.elapsed()
        })
        .collect();
    Cell {
        summary: summarize(times),
        admitted,
    }
}

fn planner_section(sizes: &Sizes, opts: &BenchOptions, out: &mut impl Write) -> Result<()> {
    writeln!(
        out,
        "== 1. Planner alone: plan() median / p95 over {} runs (admitted jobs) ==",
        opts.repeats
    )?;
    write!(out, "{:>8}", "queued")?;
    for c in sizes.cards {
        write!(out, " | {:>34}", format!("{c} cards"))?;
    }
    writeln!(out)?;
    let mut grid = Vec::new();
    for &q in sizes.queues {
        write!(out, "{q:>8}")?;
        let row: Vec<Cell> = sizes.cards.iter().map(|&c| time_plan(q, c, opts)).collect();
        for cell in &row {
            let s = cell.summary;
            let text = format!("{} / {} ({})", ms(s.median), ms(s.p95), cell.admitted);
            write!(out, " | {text:>34}")?;
        }
        writeln!(out)?;
        grid.push(row);
    }
    growth_note(sizes, &grid, out)
}

/// Median time per queued job, and how it changes from the smallest queue to the largest.
fn growth_note(sizes: &Sizes, grid: &[Vec<Cell>], out: &mut impl Write) -> Result<()> {
    writeln!(out, "\nGrowth: median time per queued job")?;
    for (&q, row) in sizes.queues.iter().zip(grid) {
        write!(out, "{q:>8}")?;
        for cell in row {
            let per_job = cell.summary.median.as_secs_f64() * 1e6 / q as f64;
            write!(out, " | {:>34}", format!("{per_job:.3} µs/job"))?;
        }
        writeln!(out)?;
    }
    let (Some(first), Some(last)) = (grid.first(), grid.last()) else {
        return Ok(());
    };
    let (q0, q1) = (sizes.queues[0], sizes.queues[sizes.queues.len() - 1]);
    for ((c, a), b) in sizes.cards.iter().zip(first).zip(last) {
        let grew = b.summary.median.as_secs_f64() / a.summary.median.as_secs_f64().max(1e-9);
        writeln!(
            out,
            "  {c} cards: queue x{} ({q0} -> {q1}), time x{grew:.1} (linear would be x{})",
            q1 / q0.max(1),
            q1 / q0.max(1)
        )?;
    }
    writeln!(out)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    #[test]
    fn percentile_is_nearest_rank() {
        let s: Vec<Duration> = (1..=20).map(d).collect();
        assert_eq!(percentile(&s, 50.0), d(10));
        assert_eq!(percentile(&s, 95.0), d(19));
        assert_eq!(percentile(&s, 100.0), d(20));
        assert_eq!(percentile(&s, 0.0), d(1));
        assert_eq!(percentile(&[], 50.0), Duration::ZERO);
    }

    #[test]
    fn summary_sorts_its_samples() {
        let s = summarize(vec![d(5), d(1), d(4), d(2), d(3)]);
        assert_eq!(
            s,
            Summary {
                median: d(3),
                p95: d(5)
            }
        );
    }

    #[test]
    fn synthetic_inputs_are_deterministic() {
        assert_eq!(
            synth::planner_input(500, 64, 7),
            synth::planner_input(500, 64, 7)
        );
        assert_ne!(
            synth::planner_input(500, 64, 7),
            synth::planner_input(500, 64, 8)
        );
    }

    #[test]
    fn every_synthetic_job_fits_an_empty_bench_cluster() {
        let specs = synth::jobs(2_000, &mut synth::Rng::new(3));
        let nodes = synth::db_nodes(32);
        for s in &specs {
            assert!((1..=4).contains(&s.gpu_count));
            let fits = nodes.iter().any(|(_, cards)| {
                let model = &cards[0].model;
                let need = match s.workload {
                    Some(w) => synth::needs_of(w).get(model).copied(),
                    None => Some(s.fixed_mib),
                };
                need.is_some_and(|n| n <= cards[0].total_mib - db::HEADROOM_MIB)
            });
            assert!(fits, "{s:?}");
        }
    }
}
