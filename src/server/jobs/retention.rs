//! Log retention: finished jobs' logs go after the launch policy's `log_retention_days`; past the
//! folder's cap (`log_total_mib`, by default a tenth of the filesystem holding it) the oldest
//! finished jobs' logs go first; and past one user's share (`log_user_mib`, by default a quarter of
//! the cap) that user's oldest finished jobs' logs go first. A running job's log is never touched:
//! it counts against both, and `--log-max-bytes` bounds it.
//!
//! Each node sweeps its own log folder: at start, every `every`, and shortly after any job ends
//! (so a member running short jobs that print a lot is held to the share within seconds, not
//! within the hour).

use crate::model::{JobChange, LaunchPolicy, LiveEvent};
use crate::server::db::settings;
use crate::server::notifier::{Note, Subscription};
use anyhow::{Context, Result};
use chrono::{DateTime, Utc};
use sqlx::PgPool;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::sync::watch;
use uuid::Uuid;

/// What one sweep removed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Swept {
    /// Logs older than the retention period.
    pub expired: usize,
    /// Logs removed to bring the folder under its size cap.
    pub over_cap: usize,
    /// Logs removed to bring a user under their share of the folder.
    pub over_quota: usize,
    /// Bytes freed.
    pub bytes: u64,
}

/// The size bounds of one node's log folder, bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogCaps {
    /// All logs in the folder.
    pub total: u64,
    /// One user's logs in the folder.
    pub per_user: u64,
}

/// The share of the filesystem holding the log folder that its cap is by default.
pub const DISK_SHARE_PERCENT: u64 = 10;
/// The share of the folder's cap that one user's logs are by default.
pub const USER_SHARE_PERCENT: u64 = 25;

const MIB: u64 = 1024 * 1024;

impl LogCaps {
    /// The caps of the folder `dir` under `policy`: its settings, or where they are 0 the default
    /// shares (of the filesystem holding `dir` as `statvfs` reports it now).
    pub fn of(policy: &LaunchPolicy, dir: &Path) -> Result<LogCaps> {
        let total = match policy.log_total_mib {
            0 => disk_size(dir)? / 100 * DISK_SHARE_PERCENT,
            mib => mib.saturating_mul(MIB),
        };
        let per_user = match policy.log_user_mib {
            0 => total / 100 * USER_SHARE_PERCENT,
            mib => mib.saturating_mul(MIB).min(total),
        };
        Ok(LogCaps { total, per_user })
    }
}

/// The size of the filesystem holding `dir` (or its nearest existing parent, before the folder is
/// made), bytes.
fn disk_size(dir: &Path) -> Result<u64> {
    let mut at = dir;
    loop {
        match nix::sys::statvfs::statvfs(at) {
            Ok(fs) => {
                let blocks: u64 = fs.blocks();
                return Ok(blocks.saturating_mul(fs.fragment_size()));
            }
            Err(nix::errno::Errno::ENOENT) if at.parent().is_some() => {
                at = at.parent().unwrap_or(at);
            }
            Err(e) => {
                return Err(e).with_context(|| format!("measuring the disk of {}", dir.display()))
            }
        }
    }
}

/// Sweeps now, every `every`, and `after_end` after a job ends (once for all the jobs that end
/// meanwhile), until `stop`.
pub async fn run(
    pool: PgPool,
    logs_dir: PathBuf,
    (every, after_end): (Duration, Duration),
    mut ends: Subscription,
    mut stop: watch::Receiver<bool>,
) {
    match settings::launch_policy(&pool)
        .await
        .context("reading the launch policy")
        .and_then(|p| LogCaps::of(&p, &logs_dir))
    {
        Ok(caps) => tracing::info!(
            folder = %logs_dir.display(),
            cap_mib = caps.total / MIB,
            per_user_mib = caps.per_user / MIB,
            "job logs are bounded"
        ),
        Err(e) => tracing::warn!(error = format!("{e:#}"), "cannot tell the job logs' bounds"),
    }
    let mut timer = tokio::time::interval(every);
    timer.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            _ = timer.tick() => {}
            note = ends.recv() => {
                let ended = matches!(note, Note::Event(LiveEvent::Job {
                    status: JobChange::Status(s), ..
                }) if s.is_terminal()) || note == Note::Missed;
                if !ended {
                    continue;
                }
                tokio::select! {
                    _ = stop.changed() => return,
                    _ = tokio::time::sleep(after_end) => {}
                }
                ends.skip_queued();
            }
        }
        once(&pool, &logs_dir).await;
    }
}

/// One sweep, its outcome logged.
async fn once(pool: &PgPool, logs_dir: &Path) {
    match sweep(pool, logs_dir, Utc::now()).await {
        Ok(s) if s != Swept::default() => tracing::info!(
            expired = s.expired,
            over_cap = s.over_cap,
            over_quota = s.over_quota,
            bytes = s.bytes,
            "removed old job logs"
        ),
        Ok(_) => {}
        Err(e) => tracing::warn!(error = format!("{e:#}"), "sweeping job logs failed"),
    }
}

/// One sweep of `logs_dir` under the launch policy as it is now.
pub async fn sweep(pool: &PgPool, logs_dir: &Path, now: DateTime<Utc>) -> Result<Swept> {
    let policy = settings::launch_policy(pool)
        .await
        .context("reading the launch policy")?;
    let caps = LogCaps::of(&policy, logs_dir)?;
    let dir = logs_dir.to_owned();
    let files = tokio::task::spawn_blocking(move || list_logs(&dir))
        .await
        .context("listing job logs")??;
    if files.is_empty() {
        return Ok(Swept::default());
    }
    let ids: Vec<Uuid> = files.iter().map(|f| f.job).collect();
    // When each job ended, and whose it is; a log whose job is gone from the database counts as
    // ended long ago, and as no one's.
    let rows: Vec<(Uuid, Option<DateTime<Utc>>, Uuid)> =
        sqlx::query_as("SELECT id, finished_at, owner_id FROM jobs WHERE id = ANY($1)")
            .bind(&ids)
            .fetch_all(pool)
            .await
            .context("reading when jobs ended")?;
    let jobs: HashMap<Uuid, (Option<DateTime<Utc>>, Uuid)> = rows
        .into_iter()
        .map(|(id, at, owner)| (id, (at, owner)))
        .collect();
    let mut used: HashMap<Uuid, u64> = HashMap::new();
    for f in &files {
        if let Some((_, owner)) = jobs.get(&f.job) {
            *used.entry(*owner).or_default() += f.bytes;
        }
    }
    let mut done: Vec<(DateTime<Utc>, Option<Uuid>, &LogFile)> = files
        .iter()
        .filter_map(|f| match jobs.get(&f.job) {
            None => Some((DateTime::<Utc>::MIN_UTC, None, f)),
            Some((Some(at), owner)) => Some((*at, Some(*owner), f)),
            Some((None, _)) => None,
        })
        .collect();
    done.sort_by_key(|(at, _, f)| (*at, f.job));
    let mut swept = Swept::default();
    let mut total: u64 = files.iter().map(|f| f.bytes).sum();
    let cutoff = (policy.log_retention_days > 0)
        .then(|| now - chrono::Duration::days(i64::from(policy.log_retention_days)));
    for (at, owner, f) in done {
        let expired = cutoff.is_some_and(|c| at < c);
        let over = total > caps.total;
        let over_quota = owner.is_some_and(|o| used.get(&o).copied().unwrap_or(0) > caps.per_user);
        if !expired && !over && !over_quota {
            continue;
        }
        match std::fs::remove_file(&f.path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("removing {}", f.path.display())),
        }
        total -= f.bytes;
        if let Some(n) = owner.and_then(|o| used.get_mut(&o)) {
            *n -= f.bytes;
        }
        swept.bytes += f.bytes;
        if expired {
            swept.expired += 1;
        } else if over {
            swept.over_cap += 1;
        } else {
            swept.over_quota += 1;
        }
    }
    Ok(swept)
}

struct LogFile {
    job: Uuid,
    path: PathBuf,
    bytes: u64,
}

/// The job logs in `dir` (`<job id>.log`); anything else there is left alone.
fn list_logs(dir: &Path) -> Result<Vec<LogFile>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", dir.display())),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        let Some(job) = name
            .to_str()
            .and_then(|n| n.strip_suffix(".log"))
            .and_then(|n| n.parse::<Uuid>().ok())
        else {
            continue;
        };
        let meta = entry.metadata()?;
        if meta.is_file() {
            out.push(LogFile {
                job,
                path: entry.path(),
                bytes: meta.len(),
            });
        }
    }
    Ok(out)
}
