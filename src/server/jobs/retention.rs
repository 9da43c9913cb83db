//! Log retention: finished jobs' logs go after the launch policy's `log_retention_days`, and past
//! `log_total_mib` the oldest finished jobs' logs go first. A running job's log is never touched.
//! Each node sweeps its own log folder, once at start and then every `every`.

use crate::server::db::settings;
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
    /// Bytes freed.
    pub bytes: u64,
}

/// Sweeps now and every `every` until `stop`.
pub async fn run(pool: PgPool, logs_dir: PathBuf, every: Duration, stop: watch::Receiver<bool>) {
    crate::server::periodic::every(every, stop, || async {
        match sweep(&pool, &logs_dir, Utc::now()).await {
            Ok(s) if s != Swept::default() => tracing::info!(
                expired = s.expired,
                over_cap = s.over_cap,
                bytes = s.bytes,
                "removed old job logs"
            ),
            Ok(_) => {}
            Err(e) => tracing::warn!(error = format!("{e:#}"), "sweeping job logs failed"),
        }
    })
    .await
}

/// One sweep of `logs_dir` under the launch policy as it is now.
pub async fn sweep(pool: &PgPool, logs_dir: &Path, now: DateTime<Utc>) -> Result<Swept> {
    let policy = settings::launch_policy(pool)
        .await
        .context("reading the launch policy")?;
    let dir = logs_dir.to_owned();
    let files = tokio::task::spawn_blocking(move || list_logs(&dir))
        .await
        .context("listing job logs")??;
    if files.is_empty() {
        return Ok(Swept::default());
    }
    let ids: Vec<Uuid> = files.iter().map(|f| f.job).collect();
    // When each job ended; a log whose job is gone from the database counts as ended long ago.
    let rows: Vec<(Uuid, Option<DateTime<Utc>>)> =
        sqlx::query_as("SELECT id, finished_at FROM jobs WHERE id = ANY($1)")
            .bind(&ids)
            .fetch_all(pool)
            .await
            .context("reading when jobs ended")?;
    let ended: HashMap<Uuid, Option<DateTime<Utc>>> = rows.into_iter().collect();
    let mut done: Vec<(DateTime<Utc>, &LogFile)> = files
        .iter()
        .filter_map(|f| match ended.get(&f.job) {
            None => Some((DateTime::<Utc>::MIN_UTC, f)),
            Some(Some(at)) => Some((*at, f)),
            Some(None) => None,
        })
        .collect();
    done.sort_by_key(|(at, f)| (*at, f.job));
    let mut swept = Swept::default();
    let mut total: u64 = files.iter().map(|f| f.bytes).sum();
    let cutoff = (policy.log_retention_days > 0)
        .then(|| now - chrono::Duration::days(i64::from(policy.log_retention_days)));
    let cap = (policy.log_total_mib > 0).then(|| policy.log_total_mib * 1024 * 1024);
    for (at, f) in done {
        let expired = cutoff.is_some_and(|c| at < c);
        let over = cap.is_some_and(|c| total > c);
        if !expired && !over {
            continue;
        }
        match std::fs::remove_file(&f.path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("removing {}", f.path.display())),
        }
        total -= f.bytes;
        swept.bytes += f.bytes;
        if expired {
            swept.expired += 1;
        } else {
            swept.over_cap += 1;
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
