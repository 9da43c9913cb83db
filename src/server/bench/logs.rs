//! `gpuq bench logs`: how much memory a `gpuq serve` takes while it answers many log reads at once.
//!
//! It writes one finished job and its log (`--log-mib`, lines of about 120 bytes) into a scratch
//! database and a fresh data folder, starts a `gpuq serve` child on them (this binary, or the one
//! `--server` names, so an older build is measured the same way), and then sends waves of reads
//! at once: `--readers` whole-log reads spread over `--users` users (the job's owner and
//! managers, who may read every log), then as many `tail=10000` reads, then as many with a `tail`
//! far past any bound. While a wave runs, the child's `VmRSS` is read from `/proc` every 10 ms;
//! each wave prints the resident size before it and its peak, the answers by status, and the
//! bytes each complete answer carried (status 0: no whole answer within two minutes).

use super::ServeChild;
use crate::model::{JobStatus, Role};
use crate::server::auth::service::create_token;
use crate::server::db::lifecycle::{self, Actor, NewJob};
use crate::server::db::users;
use anyhow::{bail, Context, Result};
use sqlx::PgPool;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use uuid::Uuid;

/// How long one read may take, to its last byte, before it counts as unanswered (status 0).
pub const READ_TIMEOUT: Duration = Duration::from_secs(120);

/// Flags of `gpuq bench logs`.
#[derive(clap::Args, Debug, Clone)]
pub struct LogsBenchOptions {
    /// Reads sent at once in each wave.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub readers: u32,
    /// Users the reads are spread over (the job's owner and managers).
    #[arg(long, default_value_t = 15, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub users: u32,
    /// Size of the job's log, MiB.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub log_mib: u64,
    /// The `gpuq` binary whose `serve` is measured (default: this one).
    #[arg(long)]
    pub server: Option<PathBuf>,
    /// Extra flags for that `serve`, e.g. `--log-reads=60` (one per occurrence).
    #[arg(long = "server-arg", allow_hyphen_values = true)]
    pub server_args: Vec<String>,
}

/// What one wave of reads at once came to.
#[derive(Debug, Default, Clone)]
pub struct Wave {
    /// The server's `VmRSS` before the wave, KiB.
    pub rss_before_kib: u64,
    /// The highest `VmRSS` seen while the wave ran, KiB.
    pub rss_peak_kib: u64,
    /// Answers by HTTP status.
    pub statuses: BTreeMap<u16, usize>,
    /// The body length of each 200 answer.
    pub ok_bytes: Vec<u64>,
    /// Refusals (429, 503) that came without `Retry-After`.
    pub refused_without_retry: usize,
    /// From the first request sent to the last answer read.
    pub took: Duration,
}

impl Wave {
    /// How far the wave raised the server's resident size, MiB.
    pub fn growth_mib(&self) -> f64 {
        self.rss_peak_kib.saturating_sub(self.rss_before_kib) as f64 / 1024.0
    }
}

/// `VmRSS` and `VmHWM` (its peak so far) of process `pid`, KiB.
pub fn rss_kib(pid: u32) -> Result<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status"))?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .with_context(|| format!("no {name} in /proc/{pid}/status"))
    };
    Ok((field("VmRSS:")?, field("VmHWM:")?))
}

/// Writes a stored job log of at least `mib` MiB at `path` (lines as the runner writes them);
/// answers the length of the text a whole read of it returns.
pub fn write_log(path: &Path, mib: u64) -> Result<u64> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
    let (mut written, mut text) = (0u64, 0u64);
    let mut i = 0u64;
    while written < mib << 20 {
        let payload = format!("step {i:09} loss=0.{:06} {}", i % 999_983, "x".repeat(64));
        let line = format!(
            "2026-12-01T00:00:00.{:09}Z o {payload}\n",
            i % 1_000_000_000
        );
        f.write_all(line.as_bytes())?;
        written += line.len() as u64;
        text += payload.len() as u64 + 1;
        i += 1;
    }
    f.flush()?;
    Ok(text)
}

/// Sends `per_user` GETs of `url` at once for each of `bearers` (`Bearer …` headers) and reads
/// every answer to its end, while sampling the resident size of process `pid`.
pub async fn wave(pid: u32, url: &str, bearers: &[String], per_user: usize) -> Result<Wave> {
    let (before, _) = rss_kib(pid)?;
    let peak = Arc::new(AtomicU64::new(before));
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (peak, done) = (Arc::clone(&peak), Arc::clone(&done));
        tokio::spawn(async move {
            while !done.load(Ordering::Relaxed) {
                if let Ok((rss, _)) = rss_kib(pid) {
                    peak.fetch_max(rss, Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
    };
    let client = reqwest::Client::builder().timeout(READ_TIMEOUT).build()?;
    let started = Instant::now();
    let reads = bearers
        .iter()
        .flat_map(|b| std::iter::repeat_n(b, per_user));
    let answers =
        futures_util::future::join_all(reads.map(|bearer| read(&client, url, bearer))).await;
    let took = started.elapsed();
    done.store(true, Ordering::Relaxed);
    sampler.await.ok();
    if let Ok((rss, _)) = rss_kib(pid) {
        peak.fetch_max(rss, Ordering::Relaxed);
    }
    let mut w = Wave {
        rss_before_kib: before,
        rss_peak_kib: peak.load(Ordering::Relaxed),
        took,
        ..Wave::default()
    };
    for answer in answers {
        let (status, retry, bytes) = answer;
        *w.statuses.entry(status).or_default() += 1;
        match status {
            200 => w.ok_bytes.push(bytes),
            429 | 503 if !retry => w.refused_without_retry += 1,
            _ => {}
        }
    }
    Ok(w)
}

/// One read to its end: status (0 when no whole answer came within [`READ_TIMEOUT`] or the
/// connection broke), whether it had `Retry-After`, body length.
async fn read(client: &reqwest::Client, url: &str, bearer: &str) -> (u16, bool, u64) {
    let Ok(mut answer) = client.get(url).header("authorization", bearer).send().await else {
        return (0, false, 0);
    };
    let status = answer.status().as_u16();
    let retry = answer.headers().contains_key("retry-after");
    let mut bytes = 0u64;
    loop {
        match answer.chunk().await {
            Ok(Some(chunk)) => bytes += chunk.len() as u64,
            Ok(None) => return (status, retry, bytes),
            Err(_) => return (0, false, bytes),
        }
    }
}

/// Runs the bench against the scratch database at `url` and prints its figures.
pub async fn run(
    pool: &PgPool,
    url: &str,
    opts: &LogsBenchOptions,
    out: &mut impl Write,
) -> Result<()> {
    super::db::ensure_scratch(pool).await?;
    let data = std::env::temp_dir().join(format!("gpuq-bench-logs-{}", Uuid::new_v4()));
    let outcome = measure(pool, url, opts, &data, out).await;
    let _ = std::fs::remove_dir_all(&data);
    outcome
}

async fn measure(
    pool: &PgPool,
    url: &str,
    opts: &LogsBenchOptions,
    data: &Path,
    out: &mut impl Write,
) -> Result<()> {
    let mut bearers = Vec::new();
    let mut owner = None;
    for i in 0..opts.users {
        let role = if i == 0 { Role::Member } else { Role::Manager };
        let name = format!("bench-logs-{i}");
        let user = users::insert(pool, &name, "!no-login", role).await?;
        owner.get_or_insert(user.id);
        let token = create_token(pool, user.id, &name, "bench logs", None)
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        bearers.push(format!("Bearer {}", token.token.expose()));
    }
    // An ended job whose log is read: entered, then cancelled before it ran (it never runs).
    let new = NewJob {
        owner_id: owner.context("the bench has no user")?,
        name: "bench-logs",
        spec: serde_json::json!({}),
        image: "bench",
        command: &[],
        gpu_count: 0,
        workload: None,
        min_vram_mib: None,
        exclusive: false,
        priority: 0,
        timeout_s: 3600,
        status: JobStatus::Queued,
        status_reason: None,
    };
    let job = lifecycle::enter(pool, &new)
        .await
        .context("inserting the bench job")?;
    lifecycle::cancel_unstarted(pool, job, Actor::Admin, "the log bench's job never runs")
        .await
        .context("ending the bench job")?;
    let log = crate::server::runner::logs::log_path(&data.join("logs"), job);
    let text = write_log(&log, opts.log_mib)?;
    let exe = match &opts.server {
        Some(p) => p.clone(),
        None => std::env::current_exe().context("finding this binary")?,
    };
    let (child, base) = start(&exe, url, data, &opts.server_args).await?;
    let pid = child.0.id();
    writeln!(
        out,
        "server: {} {}\nlog: {} MiB on disk, {text} bytes as text; {} reads at once over {} users",
        exe.display(),
        opts.server_args.join(" "),
        opts.log_mib,
        opts.readers,
        opts.users,
    )?;
    if cfg!(debug_assertions) {
        writeln!(
            out,
            "note: debug build of the bench (the server is what is measured)"
        )?;
    }
    let logs = format!("{base}/api/v1/jobs/{job}/logs");
    let per_user = (opts.readers as usize).div_ceil(opts.users as usize);
    writeln!(
        out,
        "\n{:<22} {:>10} {:>10} {:>10} {:>9}  answers (status × count)",
        "wave", "RSS before", "RSS peak", "growth", "took"
    )?;
    for (what, query) in [
        ("whole log", String::new()),
        ("tail=10000", "?tail=10000".to_owned()),
        ("tail=1000000000", "?tail=1000000000".to_owned()),
    ] {
        let w = wave(pid, &format!("{logs}{query}"), &bearers, per_user).await?;
        let answers: Vec<String> = w.statuses.iter().map(|(s, n)| format!("{s}×{n}")).collect();
        writeln!(
            out,
            "{what:<22} {:>7} MiB {:>6} MiB {:>6.0} MiB {:>7.2} s  {}",
            w.rss_before_kib / 1024,
            w.rss_peak_kib / 1024,
            w.growth_mib(),
            w.took.as_secs_f64(),
            answers.join(" "),
        )?;
        if what == "whole log" && w.ok_bytes.iter().any(|b| *b != text) {
            bail!(
                "a whole read returned other than the log's {text} bytes: {:?}",
                w.ok_bytes
            );
        }
        if w.refused_without_retry > 0 {
            bail!(
                "{} refusals came without Retry-After",
                w.refused_without_retry
            );
        }
    }
    let (_, hwm) = rss_kib(pid)?;
    writeln!(
        out,
        "\nserver's peak resident size (VmHWM): {} MiB",
        hwm / 1024
    )?;
    drop(child);
    Ok(())
}

/// Starts `exe serve` on the database at `url` and the folder `data`; answers it and its base URL
/// once it is ready.
async fn start(
    exe: &Path,
    url: &str,
    data: &Path,
    extra: &[String],
) -> Result<(ServeChild, String)> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let log = data.join("serve.log");
    let child = std::process::Command::new(exe)
        .args(["serve", "--database-url", url, "--node", "bench-logs"])
        .args([
            "--runner",
            "false",
            "--listen",
            &format!("127.0.0.1:{port}"),
        ])
        .args([
            "--gpu-source",
            "sim",
            "--sim-gpus",
            "1x24576:NVIDIA GeForce RTX 3090",
        ])
        .arg("--data-dir")
        .arg(data)
        .args(extra)
        .env("GPUQ_BOOTSTRAP_ADMIN_PASSWORD", "bench-logs-admin")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log)?)
        .spawn()
        .with_context(|| format!("starting {} serve", exe.display()))?;
    let child = ServeChild(child);
    let base = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let ready = client.get(format!("{base}/readyz")).send().await;
        if ready.is_ok_and(|r| r.status().is_success()) {
            return Ok((child, base));
        }
        if Instant::now() > deadline {
            bail!("the server did not get ready; see {}", log.display());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
