//! `gpuq bench external`: measures a running gpuq server from outside, through its REST API, its
//! database's statistics and dockerd, so the same bench can be pointed at an old build and a new
//! one alike. It never imports the server's code paths for what it measures, and never migrates
//! the database.
//!
//! Sections (figures are printed as they come):
//!
//! 1. **Idle cost**, for each N of `--idle-jobs`: N one-card jobs that run `sleep 600` are
//!    submitted and waited for until all are `running`; after a settling time (so statistics that
//!    backends flush late are in) `xact_commit + xact_rollback` of the server's database in
//!    `pg_stat_database` is read twice, `--idle-seconds` apart (the bench's own first read is
//!    subtracted; nothing else of the bench touches the database in between), with the CPU time
//!    of the server, dockerd and Postgres over the same window.
//! 2. **cancel → SIGTERM**: with dockerd's `kill` events subscribed, the N jobs are cancelled one
//!    at a time; each latency runs from just before `POST /api/v1/jobs/{id}/cancel` to the
//!    `timeNano` of the container's kill event with signal 15 (same machine, same clock), and the
//!    next cancel waits for it. Then the bench waits for all N to end.
//! 3. **Start latency**, one container at a time, `--latency-samples` of each row, the rows taken
//!    in turn: create → start answered straight through dockerd, plain (Docker's defaults), with
//!    each element of gpuq's fence alone on top of plain, with the whole fence, with each of
//!    gpuq's own looks (image inspect, verify, mount check) on top of the whole fence; then gpuq
//!    from the submit to the job's `started` event, step by step (`phases`).
//! 4. **Burst**: `--burst-jobs` containers running `true` per leg, made directly through dockerd
//!    by `--workers` workers (create → start → wait → remove; plain, with the whole fence, and
//!    through gpuq's own `Docker::create`), and as many one-card `true` jobs submitted through the
//!    REST API by `--workers` submitters, timed from the first submit to the last job's end; cut
//!    into `--burst-rounds` rounds that each run every leg in turn; CPU seconds per container of
//!    each process over each leg.
//!
//! Every dockerd container is built from gpuq's own fence config (`fence::partial_config`) for a
//! one-card job on a simulated card, with the server's launch policy (read through the API), so
//! the rows differ from gpuq's jobs only in what they name. Then a summary: plain, the whole fence
//! and gpuq side by side.
//!
//! The server under test needs simulated cards with room for the idle jobs (256 MiB each, the
//! launch policy's default floor), e.g.
//! `--sim-gpus "8x81920:NVIDIA A100 80GB"`, and must use the database given here.

mod burst;
mod cpu;
mod fence;
mod floor;
mod idle;
mod phases;

use anyhow::{bail, Context, Result};
use futures_util::{StreamExt, TryStreamExt};
use serde_json::{json, Value};
use sqlx::postgres::PgPoolOptions;
use sqlx::PgPool;
use std::collections::BTreeMap;
use std::io::Write;
use std::time::{Duration, Instant};
use uuid::Uuid;

use crate::model::Secret;
use crate::server::runtime::Docker;

/// Statuses a job never leaves.
const TERMINAL: [&str; 5] = ["succeeded", "failed", "cancelled", "timed_out", "rejected"];

/// Flags of `gpuq bench external`. The server and its token are the global `--url` and `--token`
/// (`GPUQ_URL`, `GPUQ_TOKEN`).
#[derive(Debug, clap::Args, Clone)]
pub struct ExternalBenchOptions {
    /// Without `--token`: sign in as this user (an admin) to mint a token.
    #[arg(long)]
    pub username: Option<String>,
    /// That user's password.
    #[arg(long, env = "GPUQ_BENCH_PASSWORD", hide_env_values = true)]
    pub password: Option<Secret>,
    /// The database the server uses (its transaction counters and job statuses are read there;
    /// nothing is written).
    #[arg(long)]
    pub database_url: String,
    /// PID of the `gpuq serve` process, to report its CPU time.
    #[arg(long)]
    pub server_pid: Option<u32>,
    /// Numbers of idle jobs (`sleep 600`) to measure, one after another.
    #[arg(long, value_delimiter = ',', default_value = "20,200")]
    pub idle_jobs: Vec<usize>,
    /// Length of the window over which idle transactions are counted.
    #[arg(long, default_value_t = 30)]
    pub idle_seconds: u64,
    /// Containers in each leg of the burst.
    #[arg(long, default_value_t = 1000)]
    pub burst_jobs: usize,
    /// Rounds the burst is cut into, each running every leg in turn.
    #[arg(long, default_value_t = 4)]
    pub burst_rounds: usize,
    /// Concurrent dockerd workers (floor) and REST submitters (gpuq).
    #[arg(long, default_value_t = 16)]
    pub workers: usize,
    /// A local image with `sleep` and `true` (nothing is pulled).
    #[arg(long, default_value = "gpuq-test/busybox:latest")]
    pub image: String,
    /// Skip the idle cost and cancel latency sections.
    #[arg(long, default_value_t = false)]
    pub skip_idle: bool,
    /// Containers (and gpuq jobs) in each row of the start latency section.
    #[arg(long, default_value_t = 30)]
    pub latency_samples: usize,
    /// Skip the start latency section.
    #[arg(long, default_value_t = false)]
    pub skip_latency: bool,
    /// Skip the burst section.
    #[arg(long, default_value_t = false)]
    pub skip_burst: bool,
}

/// What every section uses.
struct Ctx {
    api: Api,
    pool: PgPool,
    docker: Docker,
    opts: ExternalBenchOptions,
}

/// Runs the sections the options ask for against the server at `url` and prints their figures.
pub async fn run(
    url: &str,
    token: Option<Secret>,
    opts: &ExternalBenchOptions,
    out: &mut impl Write,
) -> Result<()> {
    if opts.workers == 0 {
        bail!("--workers must be at least 1");
    }
    let api = Api::connect(url, token, opts).await?;
    let pool = PgPoolOptions::new()
        .max_connections(2)
        // No ping before each use: it would add to the transactions counted while idle.
        .test_before_acquire(false)
        .connect(&opts.database_url)
        .await
        .context("connecting to --database-url")?;
    let docker = Docker::connect().await.context("the bench needs dockerd")?;
    if !docker.image_exists(&opts.image).await? {
        bail!("image {} is not present locally", opts.image);
    }
    let ctx = Ctx {
        api,
        pool,
        docker,
        opts: opts.clone(),
    };
    writeln!(out, "gpuq bench external against {url}\n")?;
    if !opts.skip_idle {
        idle::section(&ctx, out).await?;
    }
    if opts.skip_latency && opts.skip_burst {
        ctx.pool.close().await;
        return Ok(());
    }
    let bind = BindFolder::make()?;
    let shape = shape(&ctx, &bind).await?;
    writeln!(
        out,
        "The server's launch policy, which every dockerd row follows too: network {:?}, {} root \
         filesystem, memory {} MiB, {} processes\n",
        shape.policy.network,
        if shape.policy.tmpfs_mib().is_some() {
            "read-only"
        } else {
            "writable"
        },
        shape.policy.memory_limit_mib,
        shape.policy.pids_limit
    )?;
    let latency = match opts.skip_latency {
        true => None,
        false => Some(fence::section(&ctx, &shape, out).await?),
    };
    let burst = match opts.skip_burst {
        true => None,
        false => Some(burst::section(&ctx, &shape, out).await?),
    };
    summary(out, latency.as_ref(), burst.as_ref())?;
    ctx.pool.close().await;
    Ok(())
}

/// What every dockerd row is made of: the server's policy, the simulated cards and a folder to
/// bind.
async fn shape(ctx: &Ctx, bind: &BindFolder) -> Result<floor::Shape> {
    let policy = answer(
        ctx.api.get("/settings/launch-policy").send().await,
        "GET /api/v1/settings/launch-policy",
    )
    .await?;
    let policy: crate::model::LaunchPolicy =
        serde_json::from_value(policy).context("the server's launch policy")?;
    let cards = crate::server::runtime::ensure_sim_devices(floor::FLOOR_CARDS)
        .context("the dockerd rows' containers get a simulated card, like gpuq's (needs root)")?;
    let path = bind.0.clone();
    let origin = tokio::task::spawn_blocking(move || {
        crate::server::runtime::mountinfo::origins_of([path.as_path()])
    })
    .await?
    .map_err(|e| anyhow::anyhow!(e))?
    .pop()
    .context("no origin for the bind folder")?;
    Ok(floor::Shape {
        image: ctx.opts.image.clone(),
        policy,
        cards,
        bind: Some((bind.0.clone(), origin)),
    })
}

/// A folder of the bench's own to bind into the bind rows' containers; removed when dropped.
struct BindFolder(std::path::PathBuf);

impl BindFolder {
    fn make() -> Result<Self> {
        let path = std::env::temp_dir().join(format!("gpuq-bench-bind-{}", std::process::id()));
        std::fs::create_dir_all(&path).with_context(|| format!("creating {}", path.display()))?;
        Ok(BindFolder(path))
    }
}

impl Drop for BindFolder {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// Plain dockerd, dockerd with the whole fence and gpuq, side by side.
fn summary(
    out: &mut impl Write,
    latency: Option<&fence::Latency>,
    burst: Option<&burst::Burst>,
) -> Result<()> {
    writeln!(out, "== Summary ==")?;
    writeln!(
        out,
        "  {:<34} {:>12} {:>12} {:>14}",
        "", "start p50", "start p90", "burst, jobs/s"
    )?;
    let names = [
        "(a) dockerd plain",
        "(b) dockerd with the whole fence",
        "(c) gpuq",
    ];
    for (i, name) in names.into_iter().enumerate() {
        let p = |q: f64| {
            latency.map_or("-".into(), |l| {
                let v = [&l.plain, &l.whole, &l.gpuq][i];
                fence::ms(crate::server::bench::percentile(v, q))
            })
        };
        let rate = burst.map_or("-".into(), |b| {
            format!("{:.2}", [&b.plain, &b.whole, &b.gpuq][i].per_s())
        });
        writeln!(
            out,
            "  {name:<34} {:>12} {:>12} {rate:>14}",
            p(50.0),
            p(90.0)
        )?;
    }
    let p50 = |v: &Vec<Duration>| crate::server::bench::percentile(v, 50.0).as_secs_f64();
    let lat_ratio = latency.map_or("-".into(), |l| {
        format!("{:.2}×", p50(&l.gpuq) / p50(&l.whole).max(1e-9))
    });
    let burst_ratio = burst.map_or("-".into(), |b| {
        format!("{:.2}×", b.whole.per_s() / b.gpuq.per_s().max(1e-9))
    });
    writeln!(
        out,
        "  {:<34} {lat_ratio:>12} {:>12} {burst_ratio:>14}",
        "(c) / (b), time per job", ""
    )?;
    Ok(())
}

/// Waits until dockerd holds no container of `ids` (gpuq removes each after recording its end).
async fn wait_removed(docker: &Docker, ids: &[Uuid]) -> Result<()> {
    let ours: std::collections::HashSet<Uuid> = ids.iter().copied().collect();
    let t = Instant::now();
    loop {
        let left = docker
            .list_managed(None)
            .await?
            .iter()
            .filter(|c| ours.contains(&c.job_id))
            .count();
        if left == 0 {
            return Ok(());
        }
        if t.elapsed() > Duration::from_secs(120) {
            bail!("{left} of the bench's containers still there after 120 s");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The server's REST API with an admin's bearer token.
struct Api {
    http: reqwest::Client,
    base: String,
    token: Secret,
}

impl Api {
    /// Uses `token`, or mints one with `--username`/`--password`, and checks it with `/me`.
    async fn connect(
        url: &str,
        token: Option<Secret>,
        opts: &ExternalBenchOptions,
    ) -> Result<Self> {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(120))
            .build()?;
        let base = format!("{}/api/v1", url.trim_end_matches('/'));
        let token = match (token, &opts.username, &opts.password) {
            (Some(t), _, _) => t,
            (None, Some(username), Some(password)) => {
                let password = password.expose();
                let body =
                    json!({ "username": username, "password": password, "name": "bench-external" });
                let resp = http.post(format!("{base}/tokens")).json(&body).send().await;
                let created = answer(resp, "minting a token").await?;
                created["token"]
                    .as_str()
                    .context("POST /tokens answered without a token")?
                    .into()
            }
            _ => bail!("give --token (or GPUQ_TOKEN), or --username and --password of an admin"),
        };
        let api = Api { http, base, token };
        let me = answer(api.get("/me").send().await, "GET /api/v1/me").await?;
        eprintln!("bench: signed in as {} ({})", me["username"], me["role"]);
        Ok(api)
    }

    fn get(&self, path: &str) -> reqwest::RequestBuilder {
        self.http
            .get(format!("{}{path}", self.base))
            .bearer_auth(self.token.expose())
    }

    fn post(&self, path: &str) -> reqwest::RequestBuilder {
        self.http
            .post(format!("{}{path}", self.base))
            .bearer_auth(self.token.expose())
    }

    /// Submits one job and returns its id.
    async fn submit(&self, body: &Value) -> Result<Uuid> {
        let created = answer(self.post("/jobs").json(body).send().await, "submitting").await?;
        let id = created["job_id"].as_str().unwrap_or_default();
        id.parse()
            .with_context(|| format!("submit answered {created}"))
    }

    /// Submits `bodies` with `workers` requests in flight; the ids come back in order.
    async fn submit_all(&self, bodies: Vec<Value>, workers: usize) -> Result<Vec<Uuid>> {
        futures_util::stream::iter(bodies)
            .map(|b| async move { self.submit(&b).await })
            .buffered(workers)
            .try_collect()
            .await
    }

    async fn cancel(&self, id: Uuid) -> Result<()> {
        let resp = self.post(&format!("/jobs/{id}/cancel")).send().await;
        answer(resp, "cancelling").await.map(drop)
    }
}

/// The JSON body of a successful answer (`null` for an empty one), else an error with the status
/// and the server's words.
async fn answer(resp: reqwest::Result<reqwest::Response>, what: &str) -> Result<Value> {
    let resp = resp.with_context(|| format!("{what}: no answer"))?;
    let status = resp.status();
    let text = resp.text().await.unwrap_or_default();
    if !status.is_success() {
        bail!("{what}: {status}: {text}");
    }
    if text.is_empty() {
        return Ok(Value::Null);
    }
    serde_json::from_str(&text).with_context(|| format!("{what}: answer is not JSON: {text}"))
}

/// How many of `ids` are in each status.
async fn statuses(pool: &PgPool, ids: &[Uuid]) -> Result<BTreeMap<String, i64>> {
    let rows: Vec<(String, i64)> =
        sqlx::query_as("SELECT status, count(*) FROM jobs WHERE id = ANY($1) GROUP BY status")
            .bind(ids)
            .fetch_all(pool)
            .await?;
    Ok(rows.into_iter().collect())
}

/// Polls the database every `every` until all of `ids` are in one of `want`, and returns how long
/// that took. Fails at once if some reach a terminal status that is not wanted (with one of their
/// reasons), and after `limit`.
async fn wait_for(
    pool: &PgPool,
    ids: &[Uuid],
    want: &[&str],
    every: Duration,
    limit: Duration,
) -> Result<Duration> {
    let t = Instant::now();
    loop {
        let now = statuses(pool, ids).await?;
        let there: i64 = want.iter().filter_map(|s| now.get(*s)).sum();
        if there == ids.len() as i64 {
            return Ok(t.elapsed());
        }
        let stray = now
            .keys()
            .any(|s| TERMINAL.contains(&s.as_str()) && !want.contains(&s.as_str()));
        if stray {
            let reason: Option<String> = sqlx::query_scalar(
                "SELECT status || ': ' || coalesce(status_reason, '(no reason)') FROM jobs \
                 WHERE id = ANY($1) AND status <> ALL($2) AND status = ANY($3) LIMIT 1",
            )
            .bind(ids)
            .bind(want)
            .bind(&TERMINAL[..])
            .fetch_optional(pool)
            .await?;
            bail!(
                "waiting for {want:?}, bench jobs ended otherwise: {now:?}; e.g. {}",
                reason.unwrap_or_default()
            );
        }
        if t.elapsed() > limit {
            bail!("bench jobs not all {want:?} after {limit:?}: {now:?}");
        }
        tokio::time::sleep(every).await;
    }
}

/// A count, e.g. `{"succeeded": 1000}`, as `1000 succeeded`.
fn describe(counts: &BTreeMap<String, i64>) -> String {
    let parts: Vec<String> = counts.iter().map(|(s, n)| format!("{n} {s}")).collect();
    parts.join(", ")
}
