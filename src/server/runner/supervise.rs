//! Following a running container to its end: logs, exit, deadline, cancellation, and the record.

use super::logs::{since_unix, LogWriter};
use super::Runner;
use crate::model::{JobStatus, StopCause};
use crate::server::db::lifecycle::{self, Ending};
use crate::server::db::runs;
use crate::server::runtime::{ContainerFacts, LogLine, RuntimeError};
use chrono::{DateTime, Utc};
use futures_util::StreamExt;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use uuid::Uuid;

/// How the container's run ended, as the runner saw it.
enum Outcome {
    Exited(i64),
    /// The kernel's OOM killer ended it inside its memory limit (exit code, the limit in MiB).
    OutOfMemory(i64, i64),
    /// Killed by a restart of the container runtime (exit code): see [`killed_by_restart`].
    RuntimeRestarted(i64),
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
        // Once more, without following: a follow stream attached as a short job exited can end
        // before dockerd delivered its lines (seen under load). What the file holds is skipped.
        read_logs(&self, job, &container, false).await;
        if matches!(outcome, Outcome::RuntimeRestarted(_)) {
            // A job whose start was not yet recorded had not begun its own work: it runs again.
            until_written(job, "queueing a job again", || {
                lifecycle::unclaim(&self.pool, job, &self.cfg.node, REQUEUED)
            })
            .await;
        }
        match outcome {
            // A stop someone asked for: the cause recorded with the request decides the end (a
            // person's cancel ends cancelled, gpuq's own stop failed with its reason).
            Outcome::Cancelled(c) => {
                let code = c.and_then(|c| i32::try_from(c).ok());
                until_written(job, "recording a stopped job's end", || {
                    lifecycle::finish_stopped(&self.pool, job, &self.cfg.node, code)
                })
                .await;
            }
            outcome => {
                if let Some(end) = ending(outcome, deadline) {
                    self.record_end(job, &end).await;
                }
            }
        }
        // The image was in use until now: its keep counts from here. Recorded before the container
        // goes, so that once it has gone the run's bookkeeping is complete (the container still
        // keeps the collector off the image meanwhile).
        super::image_gc::used(&self.pool, &self.cfg.node, job).await;
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
        // Whether Docker went out of reach while the job ran (its daemon stopped or restarted).
        let mut lost_sight = false;
        loop {
            tokio::select! {
                waited = self.docker.wait(container) => match waited {
                    Ok(code) => return self.exited(container, code, lost_sight).await,
                    Err(RuntimeError::NotFound(_)) => return Outcome::Vanished,
                    Err(e) => {
                        // Docker is unreachable or the stream broke: free nothing, look again.
                        tracing::warn!(%job, error = %e, "lost sight of a container; checking again");
                        lost_sight = true;
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        match self.docker.inspect(container).await {
                            Ok(f) if !f.running && f.finished_at.is_some() => {
                                let code = f.exit_code.unwrap_or(-1);
                                return self.exited(container, code, lost_sight).await;
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

    /// What an exit of `code` was: the job's own end, or a kill by the container runtime's restart
    /// (told from dockerd's record once it answers again: until then nothing is freed). `docker rm
    /// -f` kills before removing, so an exit followed by no container at all means someone
    /// removed it.
    async fn exited(&self, container: &str, code: i64, mut lost_sight: bool) -> Outcome {
        loop {
            match self.docker.inspect(container).await {
                // The kernel killed it for memory: say so, with its limit, not a bare 137.
                Ok(facts) if facts.oom_killed && code != 0 => {
                    return Outcome::OutOfMemory(code, facts.memory / (1024 * 1024));
                }
                // Its own end: nothing more to ask (the common case costs no more than before).
                Ok(facts) if signal_exit(&facts).is_none() => return Outcome::Exited(code),
                // A daemon going down still answers on the connections it had, but takes no new
                // one: then it is its shutdown that stopped the container, told once it is back.
                Ok(facts) => match self.docker.daemon_started_at().await {
                    Err(RuntimeError::Unreachable(e)) => {
                        tracing::warn!(%container, error = %e, "Docker is going away as a container ended; waiting for it");
                        lost_sight = true;
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                    daemon => {
                        let daemon = daemon.ok().flatten();
                        return match killed_by_restart(&facts, daemon, lost_sight) {
                            Some(code) => Outcome::RuntimeRestarted(code),
                            None => Outcome::Exited(code),
                        };
                    }
                },
                Err(RuntimeError::NotFound(_)) => return Outcome::Vanished,
                Err(RuntimeError::Unreachable(e)) => {
                    tracing::warn!(%container, error = %e, "Docker went away as a container ended; waiting for it");
                    lost_sight = true;
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                Err(e) => {
                    tracing::warn!(%container, error = %e, "inspecting an ended container failed");
                    return Outcome::Exited(code);
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
            lifecycle::finish(&self.pool, job, &self.cfg.node, end)
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

/// The end of a run that nobody asked to stop (a stop asked for ends through
/// [`lifecycle::finish_stopped`], which reads its cause).
fn ending(outcome: Outcome, deadline: DateTime<Utc>) -> Option<Ending> {
    let code = |c: Option<i64>| c.and_then(|c| i32::try_from(c).ok());
    Some(match outcome {
        Outcome::Exited(0) => Ending {
            status: JobStatus::Succeeded,
            exit_code: Some(0),
            reason: None,
            cause: None,
        },
        Outcome::Exited(c) => Ending {
            status: JobStatus::Failed,
            exit_code: code(Some(c)),
            reason: Some(format!("exited with code {c}")),
            cause: None,
        },
        Outcome::OutOfMemory(c, limit_mib) => Ending {
            status: JobStatus::Failed,
            exit_code: code(Some(c)),
            reason: Some(format!("out of memory (limit {limit_mib} MiB)")),
            cause: None,
        },
        Outcome::RuntimeRestarted(c) => restart_ending(c),
        Outcome::TimedOut(c) => Ending {
            status: JobStatus::TimedOut,
            exit_code: code(c),
            reason: Some(format!(
                "ran past its deadline ({deadline}) and was stopped"
            )),
            cause: Some(StopCause::Timeout),
        },
        Outcome::Cancelled(_) => return None,
        Outcome::Vanished => Ending {
            status: JobStatus::Failed,
            exit_code: None,
            reason: Some("its container was removed outside gpuq".into()),
            cause: None,
        },
    })
}

/// The reason a job killed by the container runtime's restart ends with.
pub(super) fn restart_ending(code: i64) -> Ending {
    Ending {
        status: JobStatus::Failed,
        exit_code: i32::try_from(code).ok(),
        reason: Some(format!(
            "the container runtime restarted (dockerd) and killed it (exit code {code}); \
             nothing of it runs any more: resubmit it to run it again"
        )),
        cause: Some(StopCause::RuntimeRestart),
    }
}

/// What an unclaimed job's event says when a runtime restart killed it before its start was
/// recorded.
pub(super) const REQUEUED: &str =
    "the container runtime restarted (dockerd) and killed it before it started: queued again";

/// How long after dockerd's start a kill still counts as its restart's: a daemon started without
/// `live-restore` kills the containers it finds still running as it starts.
const RESTART_KILL_WINDOW_S: i64 = 120;

/// `Some(exit code)` when dockerd's record says a restart of the daemon killed the container:
/// it ended by SIGTERM or SIGKILL (143, 137), not by the OOM killer, and it had started before
/// the daemon now running did and ended before that daemon had been up for
/// [`RESTART_KILL_WINDOW_S`]. When the host cannot tell when dockerd started (`daemon_started` is
/// `None`), losing sight of Docker while the job ran (`lost_sight`) stands in for it. Callers only
/// ask about exits gpuq did not cause itself (its own stops are timeouts and cancellations).
pub(super) fn killed_by_restart(
    facts: &ContainerFacts,
    daemon_started: Option<DateTime<Utc>>,
    lost_sight: bool,
) -> Option<i64> {
    let code = signal_exit(facts)?;
    let at = |t: &Option<String>| {
        t.as_deref()
            .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
            .map(|t| t.with_timezone(&Utc))
    };
    let restarted = match (
        daemon_started,
        at(&facts.started_at),
        at(&facts.finished_at),
    ) {
        (Some(daemon), Some(started), Some(finished)) => {
            started < daemon && finished < daemon + chrono::Duration::seconds(RESTART_KILL_WINDOW_S)
        }
        _ => lost_sight,
    };
    restarted.then_some(code)
}

/// The exit code of a container that ended by SIGTERM or SIGKILL (143, 137) and not by the OOM
/// killer: the ends a daemon's restart causes.
fn signal_exit(facts: &ContainerFacts) -> Option<i64> {
    let code = facts.exit_code.filter(|c| matches!(c, 137 | 143))?;
    (!facts.running && !facts.oom_killed).then_some(code)
}

/// Appends a container's output to its job's log file, resuming after the last line already kept,
/// and tells this process's log followers each time the file grew. A stream broken by Docker going
/// away is taken up again once it answers: the container may have outlived a restart of the daemon
/// (`live-restore`), or have written its last lines while the stream was down. Once the log
/// reaches its cap the output is no longer read from Docker at all (dockerd keeps only its own
/// capped copy).
pub(super) async fn follow_logs(runner: Arc<Runner>, job: Uuid, container: String) {
    read_logs(&runner, job, &container, true).await;
}

/// Copies the container's output into the job's log: following it while it runs (`follow`), or
/// reading once what the file does not hold yet (lines the file holds are not written again).
async fn read_logs(runner: &Runner, job: Uuid, container: &str, mut follow: bool) {
    let path = super::logs::log_path(&runner.cfg.logs_dir, job);
    loop {
        // Opened again each round: it knows which lines the file already holds.
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
        let lines = runner.docker.logs(container, since, follow);
        let broken = match copy_lines(lines, &mut writer, || runner.notifier.log_grew(job)).await {
            Ok(Copied::Cut) => {
                tracing::info!(
                    %job,
                    cap = runner.cfg.log_max_bytes,
                    "a job's log reached its cap; its output is no longer read"
                );
                return;
            }
            Ok(Copied::Ended) => false,
            Err(CopyError::Write(e)) => {
                tracing::error!(path = %path.display(), error = %e, "writing a job log failed");
                return;
            }
            Err(CopyError::Read(e)) => {
                tracing::warn!(%container, error = %e, "log stream ended with an error");
                matches!(e, RuntimeError::Unreachable(_))
            }
        };
        if !broken || !follow {
            return;
        }
        // Followed again while it runs; else read once more for what it wrote meanwhile.
        follow = match still_running(runner, container).await {
            Some(running) => running,
            None => return,
        };
    }
}

/// Whether the container runs, asked until Docker answers; `None` once it is gone.
async fn still_running(runner: &Runner, container: &str) -> Option<bool> {
    loop {
        match runner.docker.inspect(container).await {
            Ok(facts) => return Some(facts.running),
            Err(RuntimeError::Unreachable(_)) => {
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Err(_) => return None,
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

    fn ended(code: i64, started: &str, finished: &str) -> ContainerFacts {
        ContainerFacts {
            exit_code: Some(code),
            started_at: Some(started.into()),
            finished_at: Some(finished.into()),
            ..Default::default()
        }
    }

    fn at(t: &str) -> Option<DateTime<Utc>> {
        Some(t.parse().unwrap())
    }

    #[test]
    fn a_kill_across_the_daemons_start_is_the_restarts() {
        let c = ended(137, "2026-12-03T10:00:00Z", "2026-12-03T10:05:00Z");
        assert_eq!(
            killed_by_restart(&c, at("2026-12-03T10:05:03Z"), false),
            Some(137)
        );
        let c = ended(143, "2026-12-03T10:00:00Z", "2026-12-03T10:05:00Z");
        assert_eq!(
            killed_by_restart(&c, at("2026-12-03T10:05:03Z"), false),
            Some(143)
        );
        // A daemon that came back after a crash kills what it finds as it starts.
        assert_eq!(
            killed_by_restart(&c, at("2026-12-03T10:04:30Z"), false),
            Some(143)
        );
    }

    #[test]
    fn other_ends_are_not_the_restarts() {
        let daemon = at("2026-12-03T10:05:03Z");
        // Its own exit code, or the OOM killer's.
        let c = ended(1, "2026-12-03T10:00:00Z", "2026-12-03T10:05:00Z");
        assert_eq!(killed_by_restart(&c, daemon, true), None);
        let mut c = ended(137, "2026-12-03T10:00:00Z", "2026-12-03T10:05:00Z");
        c.oom_killed = true;
        assert_eq!(killed_by_restart(&c, daemon, true), None);
        // Started under the daemon running now: someone else killed it.
        let c = ended(137, "2026-12-03T10:06:00Z", "2026-12-03T10:07:00Z");
        assert_eq!(killed_by_restart(&c, daemon, true), None);
        // Outlived the restart (live-restore) and was killed long after it.
        let c = ended(137, "2026-12-03T10:00:00Z", "2026-12-03T11:00:00Z");
        assert_eq!(killed_by_restart(&c, daemon, true), None);
    }

    #[test]
    fn without_the_daemons_start_losing_sight_of_docker_decides() {
        let c = ended(143, "2026-12-03T10:00:00Z", "2026-12-03T10:05:00Z");
        assert_eq!(killed_by_restart(&c, None, true), Some(143));
        assert_eq!(killed_by_restart(&c, None, false), None);
    }
}
