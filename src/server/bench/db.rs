//! Sections 2 and 3: whole admission passes against Postgres, on data the bench writes itself.

use super::{ms, summarize, synth, BenchOptions, Summary};
use crate::model::Role;
use crate::server::admission::{run_pass, PassConfig, PassOutcome};
use crate::server::db::lifecycle::{self, Actor, BatchEntry, BatchRow};
use crate::server::db::{gpus, manifest, settings, users};
use anyhow::{bail, Context, Result};
use chrono::Utc;
use sqlx::PgPool;
use std::io::Write;
use std::time::{Duration, Instant};
use uuid::Uuid;

/// VRAM kept free on every card, as `gpuq serve` does by default.
pub(super) const HEADROOM_MIB: i64 = 256;
/// Owner of every bench job.
const BENCH_USER: &str = "bench";
/// Owners the section-2 queue is spread over, each with four weeks of GPU-hours behind them, so
/// that fair share orders the queue by real standings.
const FAIR_SHARE_OWNERS: usize = 100;
/// Passes tried after the first before the queue is taken as settled.
const MAX_SETTLING_PASSES: usize = 10;

/// The pass settings of the bench: default headroom, starvation after 6 h (a quarter of the
/// section-2 queue is older than that).
fn config() -> PassConfig {
    PassConfig {
        headroom_mib: HEADROOM_MIB,
        starvation_after: Duration::from_secs(6 * 3600),
        cpu_node: "bench-cpu".into(),
    }
}

async fn pass(pool: &PgPool) -> Result<PassOutcome> {
    run_pass(pool, &config(), Utc::now()).await
}

/// Refuses a database that already holds jobs or cards: the bench cannot clean up after itself
/// (job events are append-only) and foreign rows would change what it measures.
pub(super) async fn ensure_scratch(pool: &PgPool) -> Result<()> {
    let (jobs, cards): (i64, i64) =
        sqlx::query_as("SELECT (SELECT count(*) FROM jobs), (SELECT count(*) FROM gpus)")
            .fetch_one(pool)
            .await
            .context("counting jobs and cards (is the database migrated?)")?;
    if jobs > 0 || cards > 0 {
        bail!(
            "the admission bench needs a scratch database: this one has {jobs} jobs and {cards} \
             cards. It writes jobs and append-only events it cannot remove, so give it an empty, \
             migrated database"
        );
    }
    Ok(())
}

/// A member named `name` that no one can sign in as, who submits a bench's jobs through the same
/// service functions the REST API calls.
pub(super) async fn bench_member(
    pool: &PgPool,
    name: &str,
) -> Result<crate::server::auth::CurrentUser> {
    let user = users::insert(pool, name, "!no-login", Role::Member).await?;
    Ok(crate::server::auth::CurrentUser {
        id: user.id,
        username: user.username,
        role: Role::Member,
        via_token: true,
    })
}

/// Gives `node` one simulated 24 GiB card (`gpuq-sim0`), as the runner benches run on.
pub(super) async fn one_sim_card(pool: &PgPool, node: &str) -> Result<()> {
    let card = crate::server::gpu::GpuInfo {
        uuid: crate::server::gpu::sim_uuid(node, 0, "bench", 24576),
        index: 0,
        model: "bench".into(),
        total_mib: 24576,
        used_mib: None,
        external_mib: None,
        utilization_pct: None,
        simulated: true,
    };
    let mut tx = pool.begin().await?;
    gpus::sync_node(&mut tx, node, &[card]).await?;
    tx.commit().await?;
    Ok(())
}

/// Creates the bench user, the `bench-*` workload types and `cards` empty cards; returns the
/// user's id.
pub(super) async fn setup(pool: &PgPool, cards: usize) -> Result<Uuid> {
    let owner = match users::by_name(pool, BENCH_USER).await? {
        Some(u) => u.id,
        None => {
            users::insert(pool, BENCH_USER, "!no-login", Role::Member)
                .await?
                .id
        }
    };
    let mut tx = pool.begin().await?;
    for (w, (name, _)) in synth::WORKLOADS.iter().enumerate() {
        manifest::put(&mut tx, name, "gpuq bench", &synth::needs_of(w)).await?;
    }
    for (node, observed) in synth::db_nodes(cards) {
        gpus::sync_node(&mut tx, &node, &observed).await?;
    }
    tx.commit()
        .await
        .context("writing the bench manifest and cards")?;
    Ok(owner)
}

/// Queues `specs` with one batched INSERT (submitted `age_ms` ago when `aged`, else now), then
/// refreshes the planner statistics as autovacuum would; returns the time of the INSERT.
async fn insert_jobs(
    pool: &PgPool,
    owner: Uuid,
    specs: &[synth::JobSpec],
    prefix: &str,
    aged: bool,
) -> Result<Duration> {
    let rows: Vec<BatchRow> = specs
        .iter()
        .map(|s| BatchRow {
            gpu_count: s.gpu_count as i32,
            workload: s
                .workload
                .and_then(|w| synth::WORKLOADS.get(w))
                .map(|(n, _)| *n),
            min_vram_mib: s.workload.is_none().then_some(s.fixed_mib),
            exclusive: s.exclusive,
            priority: s.priority,
            waited_ms: if aged { s.age_ms } else { 0 },
        })
        .collect();
    let started = Instant::now();
    let batch = BatchEntry {
        owner_id: owner,
        name_prefix: prefix,
        image: "bench",
        timeout_s: 3600,
        rows: &rows,
    };
    lifecycle::enter_batch(pool, &batch)
        .await
        .context("inserting the bench jobs")?;
    let took = started.elapsed();
    sqlx::query("ANALYZE jobs").execute(pool).await?;
    Ok(took)
}

/// Section 2: the first (admitting) pass, then `repeats` passes with nothing left to admit.
pub(super) async fn pass_section(
    pool: &PgPool,
    owner: Uuid,
    (jobs, cards): (usize, usize),
    opts: &BenchOptions,
    out: &mut impl Write,
) -> Result<()> {
    let specs = synth::jobs(jobs, &mut synth::Rng::new(opts.seed ^ 0x0DB0));
    let took = insert_jobs(pool, owner, &specs, "pass", true).await?;
    spread_owners(pool, "pass", FAIR_SHARE_OWNERS).await?;
    set_fair_share(pool, true).await?;
    let nodes = cards.div_ceil(synth::CARDS_PER_NODE);
    writeln!(
        out,
        "== 2. Whole pass against Postgres: {jobs} queued x {cards} cards ({nodes} nodes) =="
    )?;
    writeln!(
        out,
        "setup: {jobs} jobs queued by one batched INSERT in {}",
        ms(took)
    )?;
    let first = pass(pool).await?;
    writeln!(
        out,
        "first pass (admits):    total {}, plan {}; admitted {}, waiting {}",
        ms(first.total_time),
        ms(first.plan_time),
        first.admitted,
        first.waiting
    )?;
    let mut settling = Vec::new();
    while settling.len() < MAX_SETTLING_PASSES {
        let o = pass(pool).await?;
        settling.push(o.admitted);
        if o.admitted == 0 {
            break;
        }
    }
    writeln!(
        out,
        "passes until one admits nothing: {} (admitted {settling:?})",
        settling.len()
    )?;
    writeln!(
        out,
        "fair share on: the queue is spread over {FAIR_SHARE_OWNERS} owners with 28 days of \
         GPU-hours each"
    )?;
    steady_passes(pool, opts, out).await?;
    set_fair_share(pool, false).await?;
    writeln!(
        out,
        "the same queue with fair share off (submit order within a priority)"
    )?;
    steady_passes(pool, opts, out).await?;
    set_fair_share(pool, true).await?;
    close_all(pool).await
}

/// Spreads the jobs named `prefix…` over `n` owners (created once), and gives each 28 days of
/// GPU-hours (different amounts), as a team's month would leave them.
async fn spread_owners(pool: &PgPool, prefix: &str, n: usize) -> Result<()> {
    let mut ids = Vec::with_capacity(n);
    for i in 0..n {
        let name = format!("{BENCH_USER}-owner-{i:03}");
        let id = match users::by_name(pool, &name).await? {
            Some(u) => u.id,
            None => {
                users::insert(pool, &name, "!no-login", Role::Member)
                    .await?
                    .id
            }
        };
        ids.push(id);
    }
    sqlx::query(
        "UPDATE jobs SET owner_id = ($1::uuid[])[1 + (seq % cardinality($1::uuid[]))] \
         WHERE name LIKE $2 || '%' AND status = 'queued'",
    )
    .bind(&ids)
    .bind(prefix)
    .execute(pool)
    .await
    .context("spreading the bench jobs over owners")?;
    sqlx::query(
        "INSERT INTO gpu_hours_daily (user_id, day, gpu_hours, hour_epoch) \
         SELECT u, current_date - d, h, \
                h * extract(epoch FROM (current_date - d) + interval '12 hours')::float8 \
         FROM unnest($1::uuid[]) WITH ORDINALITY AS x(u, o), generate_series(0, 27) AS d, \
              LATERAL (SELECT (1 + (o * 7 + d * 3) % 40)::float8 AS h) AS g \
         ON CONFLICT (user_id, day) DO NOTHING",
    )
    .bind(&ids)
    .execute(pool)
    .await
    .context("writing the owners' GPU-hours")?;
    sqlx::query("ANALYZE jobs").execute(pool).await?;
    Ok(())
}

/// Turns the launch policy's `fair_share` on or off.
async fn set_fair_share(pool: &PgPool, on: bool) -> Result<()> {
    let mut policy = settings::launch_policy(pool).await?;
    policy.fair_share = on;
    settings::save_launch_policy(pool, &policy).await?;
    Ok(())
}

/// `repeats` passes on a settled queue, as a median / p95 table.
async fn steady_passes(pool: &PgPool, opts: &BenchOptions, out: &mut impl Write) -> Result<()> {
    let mut runs = Vec::new();
    for _ in 0..opts.repeats {
        runs.push(pass(pool).await?);
    }
    let admitted: usize = runs.iter().map(|o| o.admitted).sum();
    let waiting = runs.last().map_or(0, |o| o.waiting);
    writeln!(
        out,
        "steady passes: {} runs, nothing left to admit (admitted {admitted}, waiting {waiting})",
        runs.len()
    )?;
    writeln!(out, "  {:<34} {:>12} {:>12}", "", "median", "p95")?;
    let rows: [(&str, Metric); 3] = [
        ("total pass (lock to commit)", |o| o.total_time),
        ("plan()", |o| o.plan_time),
        ("outside plan() (SQL, transfer)", |o| {
            o.total_time.saturating_sub(o.plan_time)
        }),
    ];
    for (label, f) in rows {
        let s = summarize(runs.iter().map(f).collect());
        writeln!(out, "  {label:<34} {:>12} {:>12}", ms(s.median), ms(s.p95))?;
    }
    writeln!(out)?;
    Ok(())
}

/// Closes every open job (queued and admitted → cancelled) and runs one pass to give
/// their cards back, then checks that the cluster is empty again.
async fn close_all(pool: &PgPool) -> Result<()> {
    lifecycle::cancel_unstarted_all(pool, false, Actor::Admin)
        .await
        .context("closing the section-2 jobs")?;
    pass(pool).await?;
    let (open, reserved): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM jobs WHERE released_at IS NULL), \
                (SELECT coalesce(sum(reserved_mib), 0)::bigint FROM gpus)",
    )
    .fetch_one(pool)
    .await?;
    if open > 0 || reserved > 0 {
        bail!("the bench cluster did not empty: {open} jobs unreleased, {reserved} MiB reserved");
    }
    Ok(())
}

/// One timing read from a pass outcome.
type Metric = fn(&PassOutcome) -> Duration;

/// What the burst loop saw.
#[derive(Default)]
struct Burst {
    passes: Vec<PassOutcome>,
    finishing: Duration,
}

/// Section 3: `jobs` jobs at once, each finishing the moment it is admitted.
pub(super) async fn burst_section(
    pool: &PgPool,
    owner: Uuid,
    jobs: usize,
    opts: &BenchOptions,
    out: &mut impl Write,
) -> Result<()> {
    let specs = synth::jobs(jobs, &mut synth::Rng::new(opts.seed ^ 0xB0257));
    let took = insert_jobs(pool, owner, &specs, "burst", false).await?;
    writeln!(
        out,
        "== 3. Burst: {jobs} jobs submitted at once, each done when admitted =="
    )?;
    writeln!(
        out,
        "setup: one batched INSERT in {} (not counted below)",
        ms(took)
    )?;
    let started = Instant::now();
    let burst = drain(pool).await?;
    let wall = started.elapsed();
    let admitted: usize = burst.passes.iter().map(|o| o.admitted).sum();
    let rate = admitted as f64 / wall.as_secs_f64().max(1e-9);
    writeln!(
        out,
        "admitted {admitted} in {:.3} s over {} passes: {rate:.0} admissions/s",
        wall.as_secs_f64(),
        burst.passes.len()
    )?;
    let total = summarize(burst.passes.iter().map(|o| o.total_time).collect());
    let plan = summarize(burst.passes.iter().map(|o| o.plan_time).collect());
    let per_pass = admitted as f64 / burst.passes.len().max(1) as f64;
    writeln!(
        out,
        "  pass time {}; plan() {}",
        med_p95(total),
        med_p95(plan)
    )?;
    writeln!(
        out,
        "  {per_pass:.1} admitted per pass; {} in the finishing UPDATEs",
        ms(burst.finishing)
    )?;
    if admitted != jobs {
        bail!("the burst admitted {admitted} of its {jobs} jobs");
    }
    Ok(())
}

fn med_p95(s: Summary) -> String {
    format!("median {} / p95 {}", ms(s.median), ms(s.p95))
}

/// Alternates passes with ending every admitted job (cancelled before its start, so the next pass
/// takes its cards back as it does a finished job's), until nothing is queued or admitted.
async fn drain(pool: &PgPool) -> Result<Burst> {
    let mut burst = Burst::default();
    loop {
        let o = pass(pool).await?;
        let (admitted, waiting) = (o.admitted, o.waiting);
        burst.passes.push(o);
        if admitted == 0 && waiting > 0 {
            bail!("burst stalled: a pass on free cards admitted none of {waiting} queued jobs");
        }
        let t = Instant::now();
        lifecycle::cancel_unstarted_all(pool, true, Actor::Admin)
            .await
            .context("finishing admitted jobs")?;
        burst.finishing += t.elapsed();
        if waiting == 0 {
            return Ok(burst);
        }
    }
}

/// Section 4: whole passes with the cards on registered, heartbeating nodes: for each node count,
/// that many nodes of [`synth::CARDS_PER_NODE`] cards and `jobs` queued. The nodes of the earlier
/// sections and rounds are registered as lost first, so the pass reads their cards and places
/// nothing on them, as it does with a dead host's.
pub(super) async fn nodes_section(
    pool: &PgPool,
    owner: Uuid,
    (jobs, counts): (usize, &[usize]),
    opts: &BenchOptions,
    out: &mut impl Write,
) -> Result<()> {
    let per = synth::CARDS_PER_NODE;
    writeln!(out)?;
    writeln!(
        out,
        "== 4. Nodes: {jobs} queued, on 1 to {} registered nodes of {per} cards ==",
        counts.iter().max().unwrap_or(&0)
    )?;
    writeln!(
        out,
        "  {:>5} {:>5} {:>6} {:>12} {:>9} {:>14} {:>12}",
        "nodes", "cards", "lost", "first pass", "admitted", "steady median", "steady p95"
    )?;
    for (round, &count) in counts.iter().enumerate() {
        lose_every_node(pool).await?;
        let lost: i64 = sqlx::query_scalar("SELECT count(*) FROM gpus")
            .fetch_one(pool)
            .await?;
        let mut tx = pool.begin().await?;
        for (name, observed) in synth::round_nodes(round, count) {
            gpus::sync_node(&mut tx, &name, &observed).await?;
            sqlx::query(
                "INSERT INTO nodes (name, version, advertise_url, runs_jobs) \
                 VALUES ($1, 'bench', '', true)",
            )
            .bind(&name)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await.context("writing the round's nodes")?;
        let seed = opts.seed ^ (0x004E_0DE5 + round as u64);
        let specs = synth::jobs(jobs, &mut synth::Rng::new(seed));
        insert_jobs(pool, owner, &specs, &format!("nodes{count}"), true).await?;
        let first = pass(pool).await?;
        let mut admitted = first.admitted;
        for _ in 0..MAX_SETTLING_PASSES {
            let o = pass(pool).await?;
            admitted += o.admitted;
            if o.admitted == 0 {
                break;
            }
        }
        let mut steady = Vec::new();
        for _ in 0..opts.repeats {
            steady.push(pass(pool).await?.total_time);
        }
        let s = summarize(steady);
        writeln!(
            out,
            "  {count:>5} {:>5} {lost:>6} {:>12} {admitted:>9} {:>14} {:>12}",
            count * per,
            ms(first.total_time),
            ms(s.median),
            ms(s.p95)
        )?;
        close_all(pool).await?;
    }
    writeln!(
        out,
        "  (lost: cards of lost nodes the pass also reads; steady: {} passes with nothing left to admit)\n",
        opts.repeats
    )?;
    Ok(())
}

/// Registers every node that has cards as lost (silent for a day), whether it had a row or not.
async fn lose_every_node(pool: &PgPool) -> Result<()> {
    sqlx::query(
        "INSERT INTO nodes (name, version, advertise_url, runs_jobs, heartbeat_at) \
         SELECT DISTINCT node, 'bench', '', true, now() - interval '1 day' FROM gpus \
         ON CONFLICT (name) DO UPDATE SET heartbeat_at = EXCLUDED.heartbeat_at",
    )
    .execute(pool)
    .await
    .context("marking the earlier bench nodes lost")?;
    Ok(())
}
