//! `gpuq wait` and `gpuq submit --wait`: block until jobs end and turn their ends into an exit code.
//!
//! The client polls `GET /api/v1/jobs/{id}` (every 250 ms at first, then every 2 s): a wait lasts
//! as long as a job, often hours, and a poll every few seconds costs the server one indexed read,
//! less than holding a live stream open per waiting script.

use std::fmt;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use uuid::Uuid;

use super::api::ApiClient;
use crate::model::{JobStatus, JobView};

/// The exit code of a job that timed out (and of a `--timeout` that passed first), as
/// coreutils' `timeout` uses it.
pub const EXIT_TIMED_OUT: u8 = 124;
/// The exit code of a job that ended without an exit code of its own: it failed before its
/// container ran (image, launch, node lost), was rejected, or was stopped by gpuq.
pub const EXIT_NO_CODE: u8 = 125;
/// The exit code of a cancelled job (128 + SIGINT, as a shell reports an interrupted command).
pub const EXIT_CANCELLED: u8 = 130;

/// An error that carries the exit code the process ends with (its message is already printed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exit(pub u8);

impl fmt::Display for Exit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "exit code {}", self.0)
    }
}

impl std::error::Error for Exit {}

/// What `gpuq wait` exits with for one ended job: its container's exit code when it ran to an
/// exit (1 stands for a failure whose code reads as 0 in 8 bits), 124 timed out, 130 cancelled,
/// 125 ended without an exit code.
pub fn exit_code_of(job: &JobView) -> u8 {
    match job.status {
        JobStatus::Succeeded => 0,
        JobStatus::TimedOut => EXIT_TIMED_OUT,
        JobStatus::Cancelled => EXIT_CANCELLED,
        JobStatus::Failed => match job.exit_code {
            Some(code) if code & 0xff != 0 => (code & 0xff) as u8,
            Some(_) => 1,
            None => EXIT_NO_CODE,
        },
        _ => EXIT_NO_CODE,
    }
}

/// Whether `wait` returns when every job ended, or the first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Until {
    /// Every job ended.
    All,
    /// One job ended.
    Any,
}

/// What a wait saw.
#[derive(Debug, Clone)]
pub struct Waited {
    /// The jobs that ended, in the order they were found ended.
    pub ended: Vec<JobView>,
    /// The deadline passed before the jobs ended.
    pub timed_out: bool,
}

impl Waited {
    /// The exit code: 124 when the deadline passed; with `All`, the first job (in the order
    /// given) that did not succeed decides, else 0; with `Any`, the first job found ended.
    pub fn exit_code(&self, order: &[Uuid], until: Until) -> u8 {
        if self.timed_out {
            return EXIT_TIMED_OUT;
        }
        if until == Until::Any {
            return self.ended.first().map_or(EXIT_NO_CODE, exit_code_of);
        }
        order
            .iter()
            .filter_map(|id| self.ended.iter().find(|j| j.id == *id))
            .map(exit_code_of)
            .find(|&c| c != 0)
            .unwrap_or(0)
    }
}

/// One poll's interval: quick at first (a short job's end is seen at once), then every 2 s.
fn interval(since: Duration) -> Duration {
    if since < Duration::from_secs(5) {
        Duration::from_millis(250)
    } else {
        Duration::from_secs(2)
    }
}

/// Polls the jobs until they end (`All`) or one ends (`Any`), or `timeout` passes.
pub async fn wait(
    api: &ApiClient,
    ids: &[Uuid],
    until: Until,
    timeout: Option<Duration>,
) -> Result<Waited> {
    let start = Instant::now();
    let mut pending: Vec<Uuid> = ids.to_vec();
    let mut ended = Vec::new();
    loop {
        let mut still = Vec::with_capacity(pending.len());
        for id in pending {
            let view: JobView = serde_json::from_value(api.get_job(id).await?)
                .with_context(|| format!("unexpected answer for job {id}"))?;
            if view.status.is_terminal() {
                ended.push(view);
            } else {
                still.push(id);
            }
        }
        pending = still;
        let done = match until {
            Until::All => pending.is_empty(),
            Until::Any => !ended.is_empty(),
        };
        if done {
            // With `Any`, the first job found ended decides: ends found in one round are in the
            // order given.
            return Ok(Waited {
                ended,
                timed_out: false,
            });
        }
        let elapsed = start.elapsed();
        if timeout.is_some_and(|t| elapsed >= t) {
            return Ok(Waited {
                ended,
                timed_out: true,
            });
        }
        let mut pause = interval(elapsed);
        if let Some(t) = timeout {
            pause = pause.min(t.saturating_sub(elapsed));
        }
        tokio::time::sleep(pause).await;
    }
}

/// One line per ended job: `<id> <status> (exit N[: reason])`, and a line for a deadline.
pub fn summary(waited: &Waited, timeout: Option<Duration>) -> String {
    let mut out = String::new();
    for j in &waited.ended {
        let mut line = format!("{} {} (exit {}", j.id, j.status, exit_code_of(j));
        if let Some(reason) = &j.status_reason {
            line.push_str(": ");
            line.push_str(reason);
        }
        line.push_str(")\n");
        out.push_str(&line);
    }
    if waited.timed_out {
        let secs = timeout.map_or(0, |t| t.as_secs());
        out.push_str(&format!(
            "gpuq wait: --timeout {secs}s passed before the jobs ended (exit 124)\n"
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(status: JobStatus, exit_code: Option<i32>) -> JobView {
        let mut v: JobView = serde_json::from_value(serde_json::json!({
            "id": Uuid::new_v4(), "seq": 1, "name": "j", "owner": "o", "status": status,
            "status_reason": null, "image": "i", "command": [], "gpu_count": 0,
            "workload": null, "min_vram_mb": null, "exclusive": false, "priority": 0,
            "timeout_s": 1, "env": null, "volumes": [], "node": null, "assigned_gpus": [],
            "exit_code": exit_code, "created_at": "2026-01-01T00:00:00Z", "admitted_at": null,
            "started_at": null, "finished_at": null, "released_at": null,
            "queue_position": null, "wait_reason": null,
        }))
        .unwrap();
        v.exit_code = exit_code;
        v
    }

    #[test]
    fn each_end_has_its_documented_code() {
        assert_eq!(exit_code_of(&job(JobStatus::Succeeded, Some(0))), 0);
        assert_eq!(exit_code_of(&job(JobStatus::Failed, Some(3))), 3);
        assert_eq!(exit_code_of(&job(JobStatus::Failed, Some(256))), 1);
        assert_eq!(exit_code_of(&job(JobStatus::Failed, None)), 125);
        assert_eq!(exit_code_of(&job(JobStatus::TimedOut, Some(137))), 124);
        assert_eq!(exit_code_of(&job(JobStatus::Cancelled, Some(143))), 130);
        assert_eq!(exit_code_of(&job(JobStatus::Rejected, None)), 125);
    }

    #[test]
    fn all_takes_the_first_failure_in_the_order_given() {
        let (a, b) = (
            job(JobStatus::Succeeded, Some(0)),
            job(JobStatus::Failed, Some(7)),
        );
        let order = [a.id, b.id];
        let w = Waited {
            ended: vec![b.clone(), a.clone()],
            timed_out: false,
        };
        assert_eq!(w.exit_code(&order, Until::All), 7);
        assert_eq!(w.exit_code(&order, Until::Any), 7);
        let late = Waited {
            ended: vec![a],
            timed_out: true,
        };
        assert_eq!(late.exit_code(&order, Until::All), 124);
    }
}
