//! Layer 2, the runner: each gpuq process claims the admitted jobs of its own node, launches each
//! in a fenced container, follows its logs, enforces its deadline and cancellation, records how it
//! ended and gives its cards back. At start-up it first re-adopts what Docker still runs.
//!
//! One runner per node is the deployment model: re-adoption assumes this process is the only one
//! supervising the node's containers.

mod launch;
pub mod logs;
mod reconcile;
mod supervise;

use crate::server::db::{events, runs};
use crate::server::runtime::{Docker, LaunchMode};
use sqlx::postgres::PgListener;
use sqlx::PgPool;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::sync::watch;

/// Settings of a runner.
#[derive(Debug, Clone)]
pub struct RunnerConfig {
    /// This node: only its admitted jobs are launched here.
    pub node: String,
    /// Where job logs are kept.
    pub logs_dir: PathBuf,
    /// Size cap of one job's log.
    pub log_max_bytes: u64,
    /// Time between SIGTERM and SIGKILL on timeout or cancel.
    pub stop_grace: Duration,
    /// How containers are launched. Only tests ever set `PrivilegedForTest`; no flag, setting or
    /// API of the server can.
    pub mode: LaunchMode,
    /// Backstop interval for claiming work (NOTIFY wakes the runner sooner).
    pub poll: Duration,
}

/// Whether this node can launch: read by `/readyz`.
#[derive(Debug, Default)]
pub struct DockerHealth {
    down: RwLock<Option<String>>,
}

impl DockerHealth {
    /// `None` when Docker answers, else why not.
    pub fn problem(&self) -> Option<String> {
        self.down
            .read()
            .map(|g| g.clone())
            .unwrap_or(Some("health state poisoned".into()))
    }

    /// Records Docker's state (`None`: it answers).
    pub fn report(&self, problem: Option<String>) {
        if let Ok(mut g) = self.down.write() {
            *g = problem;
        }
    }
}

/// A runner and what it shares with its supervising tasks.
pub struct Runner {
    pool: PgPool,
    docker: Docker,
    cfg: RunnerConfig,
    health: Arc<DockerHealth>,
}

impl Runner {
    /// A runner on this pool and Docker.
    pub fn new(
        pool: PgPool,
        docker: Docker,
        cfg: RunnerConfig,
        health: Arc<DockerHealth>,
    ) -> Arc<Self> {
        Arc::new(Runner {
            pool,
            docker,
            cfg,
            health,
        })
    }

    /// Waits for Docker, re-adopts or settles what it finds, then returns: call before any
    /// admission so no card is handed out twice.
    pub async fn start_up(self: &Arc<Self>, stop: &mut watch::Receiver<bool>) -> bool {
        loop {
            match self.docker.ping().await {
                Ok(()) => match reconcile::reconcile(self).await {
                    Ok(()) => {
                        self.health.report(None);
                        return true;
                    }
                    Err(e) => {
                        tracing::warn!(
                            error = format!("{e:#}"),
                            "re-adopting containers failed; retrying"
                        );
                        self.health
                            .report(Some(format!("re-adoption failed: {e:#}")));
                    }
                },
                Err(e) => {
                    tracing::warn!(error = %e, "Docker unreachable at start-up; this node starts nothing");
                    self.health.report(Some(e.to_string()));
                }
            }
            tokio::select! {
                _ = stop.changed() => return false,
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
        }
    }

    /// Claims and launches work until `stop` turns true. While Docker is unreachable nothing new
    /// starts and nothing is freed; work resumes when it answers again.
    pub async fn run(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        let mut listener = listen(&self.pool).await;
        loop {
            tokio::select! {
                _ = stop.changed() => break,
                _ = tokio::time::sleep(self.cfg.poll) => {
                    if listener.is_none() {
                        listener = listen(&self.pool).await;
                    }
                }
                note = recv(&mut listener) => {
                    if note.is_err() {
                        listener = None;
                    }
                    if let Some(l) = listener.as_mut() {
                        while l.next_buffered().is_some() {}
                    }
                }
            }
            if let Err(e) = self.docker.ping().await {
                if self.health.problem().is_none() {
                    tracing::warn!(error = %e, "Docker unreachable: this node starts nothing until it returns");
                }
                self.health.report(Some(e.to_string()));
                continue;
            }
            self.health.report(None);
            match runs::claim(&self.pool, &self.cfg.node, 16).await {
                Ok(jobs) => {
                    for job in jobs {
                        tokio::spawn(Arc::clone(&self).launch(job));
                    }
                }
                Err(e) => tracing::warn!(error = %e, "claiming admitted jobs failed"),
            }
        }
    }
}

async fn listen(pool: &PgPool) -> Option<PgListener> {
    events::listener(pool, events::EVENTS_CHANNEL).await.ok()
}

async fn recv(listener: &mut Option<PgListener>) -> Result<(), sqlx::Error> {
    match listener {
        Some(l) => l.recv().await.map(|_| ()),
        None => std::future::pending().await,
    }
}
