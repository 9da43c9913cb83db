//! Start-up: the containers are the truth. Re-adopt running ones, record exits that happened while
//! gpuq was down, fail jobs whose container vanished, and remove containers no job owns.
//!
//! Only this installation's containers: those labelled with its id, and those made before the
//! label existed whose job this database knows. Another installation's containers on the same
//! dockerd (its own database, perhaps the same node name) are never touched, nor unlabelled ones
//! of jobs this database has never seen.

use super::launch::NotLaunched;
use super::supervise::{follow_logs, killed_by_restart, restart_ending, REQUEUED};
use super::Runner;
use crate::model::{JobEventKind, JobStatus};
use crate::server::db::lifecycle::{self, Ending};
use crate::server::db::runs::{self, RunRow};
use crate::server::db::{events, installation};
use crate::server::runtime::{verify_isolation, ManagedContainer};
use anyhow::{Context, Result};
use serde_json::json;
use std::collections::HashMap;
use std::sync::Arc;

impl Runner {
    /// The installation's id, read from the database the first time it is needed.
    pub(super) async fn installation(&self) -> Result<String, String> {
        self.installation
            .get_or_try_init(|| installation::id(&self.pool))
            .await
            .cloned()
            .map_err(|e| format!("reading the installation id: {e}"))
    }
}

/// This node's containers that are this installation's to settle (see the module's doc).
async fn own_containers(runner: &Runner, node: &str) -> Result<Vec<ManagedContainer>> {
    let mine = runner.installation().await.map_err(anyhow::Error::msg)?;
    let all = runner
        .docker
        .list_managed(Some(node))
        .await
        .context("listing gpuq containers")?;
    let unlabelled: Vec<uuid::Uuid> = all
        .iter()
        .filter(|c| c.installation.is_none())
        .map(|c| c.job_id)
        .collect();
    let known = installation::known_jobs(&runner.pool, &unlabelled)
        .await
        .context("looking up the jobs of unlabelled containers")?;
    let (own, foreign): (Vec<_>, Vec<_>) =
        all.into_iter()
            .partition(|c| match c.installation.as_deref() {
                Some(i) => i == mine,
                None => known.contains(&c.job_id),
            });
    if !foreign.is_empty() {
        tracing::info!(
            count = foreign.len(),
            "leaving alone the gpuq containers of another installation on this dockerd"
        );
    }
    Ok(own)
}

pub(super) async fn reconcile(runner: &Arc<Runner>) -> Result<()> {
    let node = runner.cfg.node.clone();
    // Containers first, then jobs: a job claimed in between is then seen as active, never orphaned.
    let containers = own_containers(runner, &node).await?;
    let daemon_started = runner
        .docker
        .daemon_started_at()
        .await
        .context("reading when dockerd started")?;
    let jobs = runs::active_on(&runner.pool, &node)
        .await
        .context("reading this node's jobs")?;
    let mut by_run: HashMap<(uuid::Uuid, u32), _> = containers
        .into_iter()
        .map(|c| ((c.job_id, c.attempt), c))
        .collect();
    for job in jobs {
        let key = (job.id, job.attempt.max(0) as u32);
        let found = by_run.remove(&key);
        let killed = match &found {
            Some(c) if !c.running && c.exit_code.is_some() => {
                restarted(runner, c, daemon_started).await
            }
            _ => false,
        };
        match found {
            Some(c) if c.running => {
                if let Some(reason) = recheck(runner, &job, &c).await? {
                    tracing::error!(job = %job.id, container = %c.id, %reason, "refusing to re-adopt a container");
                    let _ = runner.docker.stop(&c.id, runner.cfg.stop_grace).await;
                    follow_logs(Arc::clone(runner), job.id, c.id.clone()).await;
                    let end = Ending {
                        status: JobStatus::Failed,
                        exit_code: None,
                        reason: Some(format!("not re-adopted after a restart: {reason}")),
                        cause: None,
                    };
                    runner.record_end(job.id, &end).await;
                    remove(runner, &c.id).await;
                    continue;
                }
                tracing::info!(job = %job.id, container = %c.id, "re-adopting a running container");
                events::job_event(
                    &runner.pool,
                    job.id,
                    &runs::actor(&node),
                    JobEventKind::Readopted,
                    json!({ "container": c.id }),
                )
                .await?;
                if job.status == JobStatus::Starting {
                    lifecycle::set_running(&runner.pool, job.id, &node).await?;
                }
                let deadline = job.deadline_at.unwrap_or_else(|| {
                    chrono::Utc::now() + chrono::Duration::seconds(job.timeout_s)
                });
                tokio::spawn(Arc::clone(runner).supervise(job.id, c.id, deadline));
            }
            Some(c) if killed => {
                tracing::warn!(job = %job.id, container = %c.id, "a restart of the container runtime killed a job");
                follow_logs(Arc::clone(runner), job.id, c.id.clone()).await;
                if job.status == JobStatus::Starting {
                    // Its start was not recorded: it had not begun its own work, so it runs again.
                    lifecycle::unclaim(&runner.pool, job.id, &node, REQUEUED).await?;
                } else {
                    let code = c.exit_code.unwrap_or(-1);
                    runner.record_end(job.id, &restart_ending(code)).await;
                }
                remove(runner, &c.id).await;
            }
            Some(c) if c.exit_code.is_some() => {
                let code = c.exit_code.unwrap_or(-1);
                tracing::info!(job = %job.id, code, "recording an exit that happened while gpuq was down");
                follow_logs(Arc::clone(runner), job.id, c.id.clone()).await;
                let end = if code == 0 {
                    Ending {
                        status: JobStatus::Succeeded,
                        exit_code: Some(0),
                        reason: Some("exited while gpuq was down".into()),
                        cause: None,
                    }
                } else {
                    Ending {
                        status: JobStatus::Failed,
                        exit_code: i32::try_from(code).ok(),
                        reason: Some(format!("exited with code {code} while gpuq was down")),
                        cause: None,
                    }
                };
                runner.record_end(job.id, &end).await;
                remove(runner, &c.id).await;
            }
            None if job.status != JobStatus::Starting || job.container_id.is_some() => {
                let end = Ending {
                    status: JobStatus::Failed,
                    exit_code: None,
                    reason: Some("its container vanished while gpuq was down".into()),
                    cause: None,
                };
                runner.record_end(job.id, &end).await;
            }
            // Created but never started, or never created: start afresh with a new attempt.
            created => {
                if let Some(c) = created {
                    remove(runner, &c.id).await;
                }
                lifecycle::unclaim(
                    &runner.pool,
                    job.id,
                    &node,
                    "launch interrupted by a restart",
                )
                .await?;
            }
        }
    }
    for (_, orphan) in by_run {
        tracing::warn!(container = %orphan.id, job = %orphan.job_id, "removing a gpuq container no active job owns");
        if orphan.running {
            let _ = runner.docker.stop(&orphan.id, runner.cfg.stop_grace).await;
        }
        remove(runner, &orphan.id).await;
    }
    Ok(())
}

/// Whether a restart of the container runtime killed this exited container (see
/// [`killed_by_restart`]; gpuq was down, so it saw nothing itself).
async fn restarted(
    runner: &Runner,
    c: &ManagedContainer,
    daemon_started: Option<chrono::DateTime<chrono::Utc>>,
) -> bool {
    match runner.docker.inspect(&c.id).await {
        Ok(facts) => killed_by_restart(&facts, daemon_started, false).is_some(),
        Err(e) => {
            tracing::warn!(container = %c.id, error = %e, "inspecting an exited container failed");
            false
        }
    }
}

/// Checks a running container found at start-up against what its job may have now: its volumes
/// resolved again under the launch policy as it is, its user and the fence. `Some(reason)` when
/// it must not run on; an error when that cannot be decided yet (Docker or the database).
async fn recheck(
    runner: &Arc<Runner>,
    job: &RunRow,
    c: &ManagedContainer,
) -> Result<Option<String>> {
    let mut granted = match runner.request(job).await {
        Ok(req) => req,
        Err(NotLaunched::Fail(reason)) => return Ok(Some(reason)),
        Err(NotLaunched::Retry(why)) => anyhow::bail!("re-checking job {}: {why}", job.id),
    };
    // Made before containers carried the installation (its job is this database's): adopted
    // without the label.
    if c.installation.is_none() {
        granted.installation = None;
    }
    let container = &c.id;
    let facts = runner
        .docker
        .inspect(container)
        .await
        .with_context(|| format!("inspecting container {container}"))?;
    Ok(verify_isolation(&facts, &granted)
        .err()
        .map(|e| e.to_string()))
}

async fn remove(runner: &Runner, container: &str) {
    if let Err(e) = runner.docker.remove(container).await {
        tracing::warn!(%container, error = %e, "could not remove a container");
    }
}
