//! Idle sessions end: a session with no HTTP or WebSocket traffic for the launch policy's
//! `session_idle_min` and no GPU activity is warned on its page (an event), and stopped with a
//! reason starting `idle` if it stays so. The warning always comes first: a session is stopped
//! only on a round after the one that warned it.

use super::Sessions;
use crate::model::{JobEventKind, JobStatus, LaunchPolicy, StopCause};
use crate::server::db::{events, lifecycle, sessions as store, settings};
use chrono::{DateTime, TimeDelta, Utc};
use serde_json::json;
use sqlx::PgPool;
use std::time::Duration;

/// Share of `session_idle_min` after which the page is warned.
const WARN_AT: f64 = 0.8;

/// How often the watcher looks: often enough for the policy's window (a tenth of it), at most
/// every 30 s, at least every second.
pub fn period(idle_min: f64) -> Duration {
    Duration::from_secs_f64((idle_min * 60.0 / 10.0).clamp(1.0, 30.0))
}

/// What one round did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Round {
    /// Sessions warned.
    pub warned: usize,
    /// Sessions asked to stop.
    pub stopped: usize,
}

/// One round at `now` under the launch policy as it is now: writes the traffic the proxy saw,
/// then warns or stops idle sessions.
pub async fn round(
    pool: &PgPool,
    sessions: Option<&Sessions>,
    now: DateTime<Utc>,
) -> sqlx::Result<Round> {
    let policy = settings::launch_policy(pool).await?;
    round_under(pool, sessions, &policy, now).await
}

/// [`round`] under `policy`.
async fn round_under(
    pool: &PgPool,
    sessions: Option<&Sessions>,
    policy: &LaunchPolicy,
    now: DateTime<Utc>,
) -> sqlx::Result<Round> {
    if let Some(s) = sessions {
        let seen = s.take_traffic();
        if !seen.is_empty() {
            store::touch(pool, &seen, now).await?;
        }
    }
    let idle_min = policy.session_idle_min;
    let busy_pct = i32::try_from(policy.idle_sm_percent).unwrap_or(i32::MAX);
    let limit = TimeDelta::milliseconds((idle_min * 60_000.0) as i64);
    let warn_after = TimeDelta::milliseconds((idle_min * 60_000.0 * WARN_AT) as i64);
    let mut done = Round::default();
    let (busy, quiet): (Vec<_>, Vec<_>) = store::running(pool, busy_pct)
        .await?
        .into_iter()
        .partition(|s| s.gpu_busy);
    // A session whose cards were busy since its last traffic (the usage sampler's utilisation,
    // on cards it holds alone) was active now. (On NVML cards the idle engine also writes its
    // own processes' busy samples as its traffic: `server::idle`.)
    if !busy.is_empty() {
        let ids: Vec<_> = busy.iter().map(|s| s.id).collect();
        store::touch(pool, &ids, now).await?;
    }
    for s in quiet {
        let idle = now - s.active_at;
        if idle >= limit && s.warned_at.is_some() {
            let reason = format!(
                "idle: no HTTP or WebSocket traffic and no GPU activity for {idle_min} min \
                 (session_idle_min)"
            );
            let mut tx = pool.begin().await?;
            let (cause, kind) = (StopCause::SessionIdle, JobEventKind::SessionIdleStop);
            let detail = json!({ "reason": reason });
            if lifecycle::request_stop(&mut tx, s.id, cause, &reason, kind, detail).await? {
                done.stopped += 1;
            }
            tx.commit().await?;
        } else if idle >= warn_after && s.warned_at.is_none() {
            let left = (limit - idle).num_seconds().max(0);
            let reason = format!(
                "idle: this session is stopped in about {left} s unless it is used \
                 (no HTTP or WebSocket traffic and no GPU activity)"
            );
            let mut tx = pool.begin().await?;
            if store::set_warned(&mut *tx, s.id).await? {
                events::job_event(
                    &mut *tx,
                    s.id,
                    "gpuq",
                    JobEventKind::SessionIdleWarning,
                    json!({ "reason": reason }),
                )
                .await?;
                events::job_changed(&mut *tx, s.id, JobStatus::Running).await?;
                done.warned += 1;
            }
            tx.commit().await?;
        }
    }
    Ok(done)
}

/// Runs rounds until the process ends, at the pace the policy's window asks for; a failed round
/// is logged and tried again on the next.
pub async fn run(pool: PgPool, sessions: Option<Sessions>) {
    loop {
        let done = match settings::launch_policy(&pool).await {
            Ok(policy) => round_under(&pool, sessions.as_ref(), &policy, Utc::now())
                .await
                .map(|r| (r, period(policy.session_idle_min))),
            Err(e) => Err(e),
        };
        let wait = match done {
            Ok((r, wait)) => {
                if r.warned + r.stopped > 0 {
                    tracing::info!(warned = r.warned, stopped = r.stopped, "idle sessions");
                }
                wait
            }
            Err(e) => {
                tracing::warn!(error = %e, "an idle-session round failed");
                Duration::from_secs(30)
            }
        };
        if let Err(e) = store::sweep(&pool).await {
            tracing::warn!(error = %e, "sweeping session codes and cookies");
        }
        tokio::time::sleep(wait).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pace_follows_the_window_within_bounds() {
        assert_eq!(period(60.0), Duration::from_secs(30));
        assert_eq!(period(0.1), Duration::from_secs(1));
        assert_eq!(period(1.0), Duration::from_secs(6));
    }
}
