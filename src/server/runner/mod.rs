//! Isolation, the runner: each gpuq process claims the admitted jobs of its own node, launches each
//! in a fenced container, follows its logs, enforces its deadline and cancellation, records how it
//! ended and gives its cards back. At start-up it first re-adopts what Docker still runs.
//!
//! One runner per node is the deployment model: re-adoption assumes this process is the only one
//! supervising the node's containers.

pub mod image_gc;
mod launch;
pub mod logs;
mod policy;
pub mod pull;
mod reconcile;
mod supervise;

use crate::model::{JobChange, JobStatus, LiveEvent};
use crate::server::db::job_uids::JobUidRange;
use crate::server::db::{lifecycle, runs};
use crate::server::nodes::Lease;
use crate::server::notifier::{Note, Notifier, Subscription};
use crate::server::runtime::{Docker, LaunchMode};
use sqlx::PgPool;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;
use tokio::sync::{watch, Notify, OwnedSemaphorePermit, Semaphore};
use uuid::Uuid;

/// Launches (claim → container started) in flight at once on one node. dockerd serialises much
/// of its work: hundreds of concurrent creates make every one of them slow, so claimed jobs beyond
/// this wait `admitted` (their cards held) and are claimed as launches finish.
pub const MAX_LAUNCHING: usize = 16;

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
    /// Where job uids are allocated from, for users who have none yet.
    pub job_uids: JobUidRange,
    /// This node's own paths no job may mount, beside the fixed never-mount list: its Docker
    /// socket, gpuq's data folder.
    pub never_mount: Vec<PathBuf>,
    /// The key the stored registry passwords are opened with when this node pulls.
    pub secrets: crate::server::registries::SecretsKey,
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
    notifier: Notifier,
    /// One bell per supervised job, rung when its stop is asked for.
    cancels: Mutex<HashMap<Uuid, Arc<Notify>>>,
    /// Launch slots ([`MAX_LAUNCHING`]); a launch holds one until its container has started.
    launching: Arc<Semaphore>,
    /// Rung when a launch gives its slot back, so waiting admitted jobs are claimed at once.
    slot_freed: Notify,
    /// This node's lease: once lost, nothing new is claimed.
    lease: Lease,
    /// Folders of the container runtime no job may mount, as dockerd reported them at start-up
    /// (its `DockerRootDir`, wherever it was moved).
    runtime_roots: std::sync::OnceLock<Vec<PathBuf>>,
    /// The installation's id, read once from the database: every container is labelled with it.
    installation: tokio::sync::OnceCell<String>,
    /// The launch policy, read again only when the notifier says it may have changed.
    policy: policy::PolicyCache,
}

impl Runner {
    /// A runner on this pool and Docker that always holds its lease (benchmarks, tests).
    pub fn new(
        pool: PgPool,
        docker: Docker,
        cfg: RunnerConfig,
        health: Arc<DockerHealth>,
        notifier: Notifier,
    ) -> Arc<Self> {
        Self::leased(pool, docker, cfg, health, notifier, Lease::held())
    }

    /// A runner that claims new jobs only while `lease` is held (`gpuq serve`: the heartbeat loses
    /// it when another epoch holds the node).
    pub fn leased(
        pool: PgPool,
        docker: Docker,
        cfg: RunnerConfig,
        health: Arc<DockerHealth>,
        notifier: Notifier,
        lease: Lease,
    ) -> Arc<Self> {
        Arc::new(Runner {
            pool,
            docker,
            cfg,
            health,
            notifier,
            cancels: Mutex::new(HashMap::new()),
            launching: Arc::new(Semaphore::new(MAX_LAUNCHING)),
            slot_freed: Notify::new(),
            lease,
            runtime_roots: std::sync::OnceLock::new(),
            installation: tokio::sync::OnceCell::new(),
            policy: policy::PolicyCache::default(),
        })
    }

    /// Waits for Docker, re-adopts or settles what it finds, then returns: call before any
    /// admission so no card is handed out twice.
    pub async fn start_up(self: &Arc<Self>, stop: &mut watch::Receiver<bool>) -> bool {
        loop {
            match self.docker.ping().await {
                Ok(()) => match self.learn_runtime_roots().await {
                    Err(e) => {
                        tracing::warn!(error = %e, "could not read Docker's data root; retrying");
                    }
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

    /// Reads, once, which folders of the container runtime no job may mount.
    async fn learn_runtime_roots(&self) -> Result<(), crate::server::runtime::RuntimeError> {
        if self.runtime_roots.get().is_none() {
            let root = self.docker.data_root().await?;
            let _ = self.runtime_roots.set(root.into_iter().collect());
        }
        Ok(())
    }

    /// Claims and launches work until `stop` turns true: at once, after every admission, when
    /// notifications may have been missed and on the backstop timer. Cancellations of running jobs
    /// arrive the same way. While Docker is unreachable nothing new starts and nothing is freed;
    /// work resumes when it answers again.
    pub async fn run(self: Arc<Self>, mut notes: Subscription, mut stop: watch::Receiver<bool>) {
        let mut note = Note::Backstop;
        loop {
            match &note {
                Note::Event(LiveEvent::Job {
                    job_id,
                    status: JobChange::CancelRequested(_),
                }) => self.ring_cancel(*job_id),
                Note::Event(LiveEvent::Pass { admitted, .. }) if *admitted > 0 => {
                    notes.skip_queued();
                    self.claim().await;
                }
                Note::Event(LiveEvent::Job {
                    status: JobChange::Status(JobStatus::Admitted),
                    ..
                }) => {
                    notes.skip_queued();
                    self.claim().await;
                }
                Note::Missed | Note::Backstop => {
                    self.sweep_cancels().await;
                    self.claim().await;
                }
                Note::Wake | Note::Event(_) => {}
            }
            note = tokio::select! {
                _ = stop.changed() => break,
                n = notes.recv() => n,
                _ = self.slot_freed.notified() => {
                    self.claim().await;
                    Note::Wake
                }
            };
        }
    }

    async fn claim(self: &Arc<Self>) {
        if !self.lease.is_held() {
            // The heartbeat has logged why; another process (or an admin) now decides this node.
            return;
        }
        if let Err(e) = self.docker.ping().await {
            if self.health.problem().is_none() {
                tracing::warn!(error = %e, "Docker unreachable: this node starts nothing until it returns");
            }
            self.health.report(Some(e.to_string()));
            return;
        }
        self.health.report(None);
        // Only this loop claims, and slots only come back meanwhile, so every claimed job gets one.
        let free = self.launching.available_permits();
        if free == 0 {
            return;
        }
        match lifecycle::claim(&self.pool, &self.cfg.node, self.lease.epoch(), free as i64).await {
            Ok(jobs) => {
                for job in jobs {
                    let slot = Arc::clone(&self.launching).try_acquire_owned().ok();
                    tokio::spawn(Arc::clone(self).launch(job, slot));
                }
            }
            Err(e) => tracing::warn!(error = %e, "claiming admitted jobs failed"),
        }
    }

    /// Gives a launch slot back and has the run loop claim what waits for one.
    fn free_slot(&self, slot: Option<OwnedSemaphorePermit>) {
        drop(slot);
        self.slot_freed.notify_one();
    }

    /// The bell a supervised job's stop rings; registered for as long as the job is supervised.
    fn cancel_bell(&self, job: Uuid) -> Arc<Notify> {
        let mut bells = self.cancels.lock().unwrap_or_else(|p| p.into_inner());
        Arc::clone(bells.entry(job).or_default())
    }

    fn forget_cancel_bell(&self, job: Uuid) {
        let mut bells = self.cancels.lock().unwrap_or_else(|p| p.into_inner());
        bells.remove(&job);
    }

    fn ring_cancel(&self, job: Uuid) {
        let bells = self.cancels.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(bell) = bells.get(&job) {
            // A stored permit: a supervisor that is not waiting yet still hears it.
            bell.notify_one();
        }
    }

    /// After a possible gap in notifications: one query for every supervised job at once, which
    /// also stops the containers of jobs that ended without this process (its node was forgotten
    /// while it was frozen): they hold cards the ledger has given back.
    async fn sweep_cancels(&self) {
        let supervised: Vec<Uuid> = {
            let bells = self.cancels.lock().unwrap_or_else(|p| p.into_inner());
            bells.keys().copied().collect()
        };
        if supervised.is_empty() {
            return;
        }
        match runs::to_stop_among(&self.pool, &supervised, &self.cfg.node).await {
            Ok(jobs) => jobs.into_iter().for_each(|j| self.ring_cancel(j)),
            Err(e) => tracing::warn!(error = %e, "checking for cancellations failed"),
        }
    }
}
