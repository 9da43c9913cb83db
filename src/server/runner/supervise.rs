//! Following a running container to its end: logs, exit, deadline, cancellation, and the record.

use super::logs::{since_unix, LogWriter};
use super::Runner;
use crate::model::JobStatus;
use crate::server::db::runs::{self, Ending};
use crate::server::db::vram;
use crate::server::runtime::{LogLine, RuntimeError};
use chrono::{DateTime, Utc};
use futures_util::StreamExt;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use uuid::Uuid;

/// How the container's run ended, as the runner saw it.
enum Outcome {
    Exited(i64),
    TimedOut(Option<i64>),
    Cancelled(Option<i64>),
    Vanished,
}

impl Runner {
    /// Follows a started container until it ends, then records the end and removes the container.
    pub(super) async fn supervise(
        self: Arc<Self>,
        job: Uuid,
        container: String,
        deadline: DateTime<Utc>,
    ) {
        let follower = tokio::spawn(follow_logs(Arc::clone(&self), job, container.clone()));
        let bell = self.cancel_bell(job);
        // A stop asked for before the bell existed was announced to nobody: look once.
        if matches!(runs::cancel_requested(&self.pool, job).await, Ok(true)) {
            bell.notify_one();
        }
        let outcome = self.watch(job, &container, deadline, &bell).await;
        self.forget_cancel_bell(job);
        // After the exit dockerd ends the log stream; give it a moment to deliver the last lines.
        if tokio::time::timeout(Duration::from_secs(10), follower)
            .await
            .is_err()
        {
            tracing::warn!(%job, "log follower did not finish in time");
        }
        // A stop gpuq asked for itself (a VRAM overrun) ends the job failed, with its reason.
        let stopped_for = match outcome {
            Outcome::Cancelled(_) => vram::stop_reason(&self.pool, job).await.ok().flatten(),
            _ => None,
        };
        let end = ending(outcome, deadline, stopped_for);
        self.record_end(job, &end).await;
        if let Err(e) = self.docker.remove(&container).await {
            tracing::warn!(%container, error = %e, "could not remove a finished container");
        }
    }

    async fn watch(
        &self,
        job: Uuid,
        container: &str,
        deadline: DateTime<Utc>,
        cancel: &Notify,
    ) -> Outcome {
        let until_deadline = (deadline - Utc::now()).to_std().unwrap_or(Duration::ZERO);
        let deadline_at = tokio::time::Instant::now() + until_deadline;
        loop {
            tokio::select! {
                waited = self.docker.wait(container) => match waited {
                    // `docker rm -f` kills before removing: an exit followed by no container at
                    // all means someone removed it.
                    Ok(code) => match self.docker.inspect(container).await {
                        Err(RuntimeError::NotFound(_)) => return Outcome::Vanished,
                        _ => return Outcome::Exited(code),
                    },
                    Err(RuntimeError::NotFound(_)) => return Outcome::Vanished,
                    Err(e) => {
                        // Docker is unreachable or the stream broke: free nothing, look again.
                        tracing::warn!(%job, error = %e, "lost sight of a container; checking again");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        match self.docker.inspect(container).await {
                            Ok(f) if !f.running && f.finished_at.is_some() => {
                                return Outcome::Exited(f.exit_code.unwrap_or(-1))
                            }
                            Err(RuntimeError::NotFound(_)) => return Outcome::Vanished,
                            _ => continue,
                        }
                    }
                },
                _ = tokio::time::sleep_until(deadline_at) => {
                    return Outcome::TimedOut(self.stop(container).await);
                }
                _ = cancel.notified() => {
                    return Outcome::Cancelled(self.stop(container).await);
                }
            }
        }
    }

    /// SIGTERM, the grace period, SIGKILL; then the exit code.
    async fn stop(&self, container: &str) -> Option<i64> {
        if let Err(e) = self.docker.stop(container, self.cfg.stop_grace).await {
            tracing::warn!(%container, error = %e, "stopping a container failed");
        }
        self.docker.wait(container).await.ok()
    }

    /// Records an end, retrying while the database is unreachable (the cards stay held until then).
    pub(super) async fn record_end(&self, job: Uuid, end: &Ending) {
        until_written(job, "recording a job's end", || {
            runs::finish(&self.pool, job, &self.cfg.node, end)
        })
        .await;
    }
}

/// Runs the database write `write` for `job` until it succeeds, waiting 200 ms after a failure,
/// then twice as long each time up to 10 s: a runner's record of what happened to a container
/// must not be lost while the database is away (the job's cards stay held until then).
pub(super) async fn until_written<T, F, Fut>(job: Uuid, what: &str, mut write: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = sqlx::Result<T>>,
{
    let mut delay = Duration::from_millis(200);
    while let Err(e) = write().await {
        tracing::warn!(%job, error = %e, "{what} failed; retrying");
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(10));
    }
}

fn ending(outcome: Outcome, deadline: DateTime<Utc>, stopped_for: Option<String>) -> Ending {
    let code = |c: Option<i64>| c.and_then(|c| i32::try_from(c).ok());
    match outcome {
        Outcome::Cancelled(c) if stopped_for.is_some() => Ending {
            status: JobStatus::Failed,
            exit_code: code(c),
            reason: stopped_for,
        },
        Outcome::Exited(0) => Ending {
            status: JobStatus::Succeeded,
            exit_code: Some(0),
            reason: None,
        },
        Outcome::Exited(c) => Ending {
            status: JobStatus::Failed,
            exit_code: code(Some(c)),
            reason: Some(format!("exited with code {c}")),
        },
        Outcome::TimedOut(c) => Ending {
            status: JobStatus::TimedOut,
            exit_code: code(c),
            reason: Some(format!(
                "ran past its deadline ({deadline}) and was stopped"
            )),
        },
        Outcome::Cancelled(c) => Ending {
            status: JobStatus::Cancelled,
            exit_code: code(c),
            reason: Some("cancelled while running".into()),
        },
        Outcome::Vanished => Ending {
            status: JobStatus::Failed,
            exit_code: None,
            reason: Some("its container was removed outside gpuq".into()),
        },
    }
}

/// Appends a container's output to its job's log file, resuming after the last line already kept,
/// and tells this process's log followers each time the file grew. Once the log reaches its cap
/// the output is no longer read from Docker at all (dockerd keeps only its own capped copy).
pub(super) async fn follow_logs(runner: Arc<Runner>, job: Uuid, container: String) {
    let path = super::logs::log_path(&runner.cfg.logs_dir, job);
    let mut writer = match LogWriter::open(&path, runner.cfg.log_max_bytes) {
        Ok(w) => w,
        Err(e) => {
            tracing::error!(path = %path.display(), error = %e, "cannot open a job log");
            return;
        }
    };
    if writer.is_cut() {
        return;
    }
    let since = writer.last_at().and_then(since_unix);
    let lines = runner.docker.logs(&container, since, true);
    match copy_lines(lines, &mut writer, || runner.notifier.log_grew(job)).await {
        Ok(Copied::Cut) => tracing::info!(
            %job,
            cap = runner.cfg.log_max_bytes,
            "a job's log reached its cap; its output is no longer read"
        ),
        Ok(Copied::Ended) => {}
        Err(CopyError::Write(e)) => {
            tracing::error!(path = %path.display(), error = %e, "writing a job log failed")
        }
        Err(CopyError::Read(e)) => {
            tracing::warn!(%container, error = %e, "log stream ended with an error")
        }
    }
}

/// How copying a container's output ended.
#[derive(Debug, PartialEq, Eq)]
enum Copied {
    /// The output ended (the container stopped).
    Ended,
    /// The log reached its cap; the rest of the output was left unread.
    Cut,
}

#[derive(Debug)]
enum CopyError {
    Write(std::io::Error),
    Read(RuntimeError),
}

/// Writes `lines` to `writer`, calling `grew` after each, until they end or the log is cut: then
/// the stream is dropped unread.
async fn copy_lines(
    mut lines: impl futures_util::Stream<Item = Result<LogLine, RuntimeError>> + Unpin,
    writer: &mut LogWriter,
    grew: impl Fn(),
) -> Result<Copied, CopyError> {
    while let Some(item) = lines.next().await {
        writer
            .push(&item.map_err(CopyError::Read)?)
            .map_err(CopyError::Write)?;
        grew();
        if writer.is_cut() {
            return Ok(Copied::Cut);
        }
    }
    Ok(Copied::Ended)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::runtime::LogStream;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test]
    async fn output_past_the_cap_is_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.log");
        let mut writer = LogWriter::open(&path, 64 * 1024).unwrap();
        let read = AtomicUsize::new(0);
        // A job that never stops printing.
        let endless = futures_util::stream::iter(0u64..).map(|i| {
            read.fetch_add(1, Ordering::Relaxed);
            Ok(LogLine {
                stream: LogStream::Stdout,
                at: format!("2026-01-01T00:00:01.{i:09}Z"),
                text: "y".repeat(100),
            })
        });
        let copied = copy_lines(Box::pin(endless), &mut writer, || {}).await;
        assert_eq!(copied.unwrap(), Copied::Cut);
        let read = read.load(Ordering::Relaxed);
        assert!(read < 1_000, "{read} lines were read for a 64 KiB log");
        assert!(std::fs::metadata(&path).unwrap().len() <= 64 * 1024);
    }
}
