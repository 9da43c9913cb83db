//! From a claimed job to a started, verified container.

use super::Runner;
use crate::model::spec::JobSpec;
use crate::model::LaunchPolicy;
use crate::model::{gpu_id, JobEventKind, JobStatus};
use crate::server::db::lifecycle::{self, Ending};
use crate::server::db::runs::{self, RunRow};
use crate::server::db::{events, job_uids, jobs};
use crate::server::runtime::hints::{self, CardShare};
use crate::server::runtime::mountinfo::{self, FolderOrigin, MountCheck};
use crate::server::runtime::simdev::sim_device_path;
use crate::server::runtime::volumes;
use crate::server::runtime::{
    verify, GrantedGpu, LaunchMode, LaunchRequest, Mount, RunAs, RuntimeError,
};
use chrono::{DateTime, Utc};
use serde_json::json;
use std::sync::Arc;
use tokio::sync::OwnedSemaphorePermit;

/// Why a launch did not happen.
pub(super) enum NotLaunched {
    /// Try again later (Docker unreachable): the job goes back to `admitted`, its cards stay held.
    Retry(String),
    /// The job cannot run: it fails with this reason and its cards are freed.
    Fail(String),
}

impl Runner {
    /// Launches a claimed job, holding a launch `slot` until its container has started (or the
    /// launch gave up), and supervises it to its end.
    pub(super) async fn launch(self: Arc<Self>, job: RunRow, slot: Option<OwnedSemaphorePermit>) {
        let started = self.start_container(&job).await;
        self.free_slot(slot);
        match started {
            Ok((container, deadline)) => self.supervise(job.id, container, deadline).await,
            Err(NotLaunched::Retry(why)) => {
                tracing::warn!(job = %job.id, %why, "launch deferred");
                // Until the database takes it back the job stays `starting`, which nothing else
                // would ever move on: retry until it does (its container is gone already).
                super::supervise::until_written(job.id, "deferring a launch", || {
                    lifecycle::unclaim(&self.pool, job.id, &self.cfg.node, &why)
                })
                .await;
            }
            Err(NotLaunched::Fail(reason)) => {
                tracing::warn!(job = %job.id, %reason, "launch failed");
                let end = Ending {
                    status: JobStatus::Failed,
                    exit_code: None,
                    reason: Some(reason),
                    cause: None,
                };
                self.record_end(job.id, &end).await;
            }
        }
    }

    async fn start_container(&self, job: &RunRow) -> Result<(String, DateTime<Utc>), NotLaunched> {
        let (req, origins, digest) = self.request_with_origins(job).await?;
        let container = self
            .docker
            .create(&req, self.cfg.mode)
            .await
            .map_err(|e| match e {
                RuntimeError::Unreachable(m) => {
                    NotLaunched::Retry(format!("Docker unreachable: {m}"))
                }
                RuntimeError::NetworkGone(m) => NotLaunched::Retry(format!("the job network: {m}")),
                RuntimeError::ImageMissing(image) => {
                    NotLaunched::Fail(missing(&image, &self.cfg.node))
                }
                RuntimeError::FenceViolation(m) => {
                    NotLaunched::Fail(format!("fence check failed: {m}"))
                }
                other => NotLaunched::Fail(format!("container could not be created: {other}")),
            })?;
        // Whatever the launch mode, nothing starts that Docker recorded differently from the grant.
        // In `Fenced` mode `create` has inspected and verified the container already (and removed
        // it had it differed); a second inspect would only repeat that.
        let recorded = match self.cfg.mode {
            LaunchMode::Fenced => Ok(()),
            LaunchMode::PrivilegedForTest => match self.docker.inspect(&container).await {
                Ok(facts) => verify(&facts, &req),
                Err(e) => Err(e),
            },
        };
        if let Err(e) = recorded {
            self.discard(&container).await;
            return Err(match e {
                RuntimeError::Unreachable(m) => {
                    NotLaunched::Retry(format!("Docker unreachable: {m}"))
                }
                other => NotLaunched::Fail(format!("fence check failed: {other}")),
            });
        }
        let devices: Vec<&str> = req.gpus.iter().map(|g| g.uuid.as_str()).collect();
        let detail = json!({ "container": container, "gpus": devices, "mode": format!("{:?}", self.cfg.mode) });
        let deadline = Utc::now() + chrono::Duration::seconds(job.timeout_s);
        let log = super::logs::log_path(&self.cfg.logs_dir, job.id);
        let recorded = async {
            events::job_event(
                &self.pool,
                job.id,
                &runs::actor(&self.cfg.node),
                JobEventKind::FenceVerified,
                detail,
            )
            .await?;
            runs::set_created(
                &self.pool,
                job.id,
                &container,
                &log.to_string_lossy(),
                deadline,
            )
            .await
        }
        .await;
        if !matches!(recorded, Ok(true)) {
            self.discard(&container).await;
            return Err(NotLaunched::Retry(format!(
                "could not record the launch: {recorded:?}"
            )));
        }
        // The exact image the container was made from, beside the reference the job gave.
        if let Err(e) = jobs::set_image_digest(&self.pool, job.id, &digest).await {
            tracing::warn!(job = %job.id, error = %e, "could not record the image's digest");
        }
        super::image_gc::used(&self.pool, &self.cfg.node, job.id).await;
        let issued = Utc::now();
        if let Err(e) = self.docker.start(&container).await {
            self.discard(&container).await;
            return Err(match e {
                RuntimeError::Unreachable(m) => {
                    NotLaunched::Retry(format!("Docker unreachable: {m}"))
                }
                RuntimeError::NetworkGone(m) => NotLaunched::Retry(format!("the job network: {m}")),
                other => NotLaunched::Fail(format!("container could not start: {other}")),
            });
        }
        self.check_binds(&container, &origins).await?;
        if let Some(port) = req.session_port {
            self.record_session(job.id, &container, port).await;
        }
        let _ = events::job_event(
            &self.pool,
            job.id,
            &runs::actor(&self.cfg.node),
            JobEventKind::StartIssued,
            json!({ "at": issued }),
        )
        .await;
        match lifecycle::set_running(&self.pool, job.id, &self.cfg.node).await {
            Ok(waited) => {
                if let Some(secs) = waited {
                    crate::server::metrics::observe_container_start(secs);
                }
                Ok((container, deadline))
            }
            Err(e) => {
                tracing::error!(job = %job.id, error = %e, "could not record the start; supervising anyway");
                Ok((container, deadline))
            }
        }
    }

    /// After the start, before the job counts as running: each bind of the container must show
    /// the very folder the runner resolved ([`mountinfo`]); one that shows any other is stopped
    /// and the job fails naming it. A container whose first process is already gone has no mount
    /// table left to read (and its bind was made from a locked path, see `runtime::volumes`).
    async fn check_binds(
        &self,
        container: &str,
        origins: &[(String, FolderOrigin)],
    ) -> Result<(), NotLaunched> {
        if origins.is_empty() {
            return Ok(());
        }
        let pid = match self.docker.inspect(container).await {
            Ok(facts) if facts.running && facts.pid > 0 => facts.pid,
            Ok(_) => return Ok(()),
            Err(e) => {
                self.discard(container).await;
                return Err(NotLaunched::Fail(format!(
                    "could not check the container's mounts: {e}"
                )));
            }
        };
        let want = origins.to_vec();
        let checked = tokio::task::spawn_blocking(move || mountinfo::check(pid, &want))
            .await
            .unwrap_or_else(|e| Err(MountCheck::Differs(format!("checking mounts: {e}"))));
        match checked {
            Ok(()) | Err(MountCheck::Unreadable(_)) => Ok(()),
            Err(MountCheck::Differs(what)) => {
                tracing::error!(%container, %what, "a bind differs from the folder checked; stopping the job");
                self.discard(container).await;
                Err(NotLaunched::Fail(format!(
                    "mount check failed, the job was stopped: {what}"
                )))
            }
        }
    }

    /// What this job may get, decided now on this node: its cards from the ledger, and from the
    /// launch policy as it is now its image, its volumes (resolved again and bound as resolved),
    /// its user, limits and network. Used for launches and to re-check re-adopted containers.
    pub(super) async fn request(&self, job: &RunRow) -> Result<LaunchRequest, NotLaunched> {
        Ok(self.request_with_origins(job).await?.0)
    }

    /// [`Runner::request`], where each bind's folder lives (for [`Runner::check_binds`]) and the
    /// digest of the image the node has under the job's reference.
    async fn request_with_origins(
        &self,
        job: &RunRow,
    ) -> Result<(LaunchRequest, Vec<(String, FolderOrigin)>, String), NotLaunched> {
        let spec: JobSpec = serde_json::from_value(job.spec.clone())
            .map_err(|e| NotLaunched::Fail(format!("stored spec is no longer valid: {e}")))?;
        // Independent of each other: the ledger, the policy and dockerd are asked at once.
        let (grants, policy, image) = tokio::join!(
            runs::live_grants(&self.pool, job.id),
            self.policy.get(&self.pool, &self.notifier),
            self.docker.local_image(spec.image()),
        );
        let grants = grants.map_err(|e| NotLaunched::Retry(format!("reading the ledger: {e}")))?;
        if grants.len() != spec.gpu_count() as usize {
            return Err(NotLaunched::Fail(format!(
                "the ledger holds {} cards for this job, it needs {}",
                grants.len(),
                spec.gpu_count()
            )));
        }
        let policy =
            policy.map_err(|e| NotLaunched::Retry(format!("reading the launch policy: {e}")))?;
        if !policy.image_allowed(spec.image()) {
            return Err(NotLaunched::Fail(format!(
                "image {} is no longer allowed by the launch policy",
                spec.image()
            )));
        }
        let (mounts, origins) = self.mounts(&spec, &policy).await?;
        let run_as = self.run_as(job, spec.image(), &policy).await?;
        let (image_volumes, digest) = match image {
            Ok(Some(found)) => (found.volumes, found.digest),
            Ok(None) => return Err(NotLaunched::Fail(missing(spec.image(), &self.cfg.node))),
            Err(RuntimeError::Unreachable(m)) => {
                return Err(NotLaunched::Retry(format!("Docker unreachable: {m}")))
            }
            Err(e) => return Err(NotLaunched::Fail(format!("inspecting the image: {e}"))),
        };
        let req = LaunchRequest {
            job_id: job.id,
            attempt: job.attempt.max(1) as u32,
            node: self.cfg.node.clone(),
            installation: Some(self.installation().await.map_err(NotLaunched::Retry)?),
            image: spec.image().to_owned(),
            argv: spec.command().to_vec(),
            env: spec.env().clone(),
            framework_env: hints::framework_env(
                policy.framework_memory_hints,
                &grants
                    .iter()
                    .map(|g| CardShare {
                        committed_mib: g.vram_mib,
                        total_mib: g.total_mib,
                        exclusive: g.exclusive,
                    })
                    .collect::<Vec<_>>(),
            ),
            mounts,
            gpus: grants
                .iter()
                .map(|g| GrantedGpu {
                    uuid: gpu_id(&g.gpu_uuid),
                    sim_device: g.simulated.then(|| sim_device_path(g.idx as usize)),
                })
                .collect(),
            memory_limit_mib: policy.memory_limit_mib,
            pids_limit: policy.pids_limit,
            log_max_bytes: super::logs::docker_cap(self.cfg.log_max_bytes),
            run_as,
            nano_cpus: policy.nano_cpus(),
            shm_mib: policy.shm_mib,
            tmp_mib: policy.tmpfs_mib(),
            network: policy.network,
            image_volumes,
            array_index: job.array_index.and_then(|i| u32::try_from(i).ok()),
            session_port: spec.port(),
        };
        Ok((req, origins, digest))
    }

    /// The job's volumes resolved on this node now, and where each folder lives; a volume that
    /// left the allowlist (a folder swapped for a symlink while the job waited, a policy change)
    /// fails the job, naming it.
    async fn mounts(
        &self,
        spec: &JobSpec,
        policy: &LaunchPolicy,
    ) -> Result<(Vec<Mount>, Vec<(String, FolderOrigin)>), NotLaunched> {
        if spec.volumes().is_empty() {
            return Ok((Vec::new(), Vec::new()));
        }
        let volumes = spec.volumes().to_vec();
        let allow = policy.volume_allowlist.clone();
        let mut never = self.cfg.never_mount.clone();
        never.extend(self.runtime_roots.get().into_iter().flatten().cloned());
        let resolved = tokio::task::spawn_blocking(move || {
            let resolved = volumes::resolve_for_mount(&volumes, &allow, &never)?;
            let origins = mountinfo::origins_of(resolved.iter().map(|v| v.host.as_path()))?;
            Ok::<_, String>(resolved.into_iter().zip(origins).collect::<Vec<_>>())
        })
        .await
        .map_err(|e| NotLaunched::Retry(format!("resolving volumes: {e}")))?
        .map_err(NotLaunched::Fail)?;
        let mut mounts = Vec::with_capacity(resolved.len());
        let mut origins = Vec::with_capacity(resolved.len());
        for (v, origin) in resolved {
            let Some(host) = v.host.to_str() else {
                return Err(NotLaunched::Fail(format!(
                    "volume {} resolves to a path that is not UTF-8: {}",
                    v.container,
                    v.host.display()
                )));
            };
            origins.push((v.container.clone(), origin));
            mounts.push(Mount {
                host: host.to_owned(),
                container: v.container,
                read_only: v.read_only,
            });
        }
        Ok((mounts, origins))
    }

    /// The owner's job uid/gid (allocated on their first launch), or the image's own user for
    /// images the policy lets run as root.
    async fn run_as(
        &self,
        job: &RunRow,
        image: &str,
        policy: &LaunchPolicy,
    ) -> Result<RunAs, NotLaunched> {
        if policy.root_allowed(image) {
            return Ok(RunAs::ImageUser);
        }
        let range = self.cfg.job_uids;
        match job_uids::for_job(&self.pool, job.id, range).await {
            Ok(Some(ids)) => Ok(RunAs::User {
                uid: ids.uid,
                gid: ids.gid,
            }),
            Ok(None) => Err(NotLaunched::Fail(format!(
                "no free job uid is left in {range}: an admin must set this user's job_uid \
                 or widen --job-uid-range"
            ))),
            Err(e) => Err(NotLaunched::Retry(format!("reading the job uid: {e}"))),
        }
    }

    /// Records where gpuq's session proxy reaches a started session: the container's address on
    /// the job network and the job's port. Without one the session cannot be opened (the job
    /// still runs: its owner sees why in the log).
    async fn record_session(&self, job: uuid::Uuid, container: &str, port: u16) {
        match self.docker.container_ip(container).await {
            Ok(Some(ip)) => {
                let addr = std::net::SocketAddr::new(ip, port).to_string();
                if let Err(e) = crate::server::db::sessions::set_addr(&self.pool, job, &addr).await
                {
                    tracing::warn!(%job, error = %e, "could not record the session's address");
                }
            }
            Ok(None) => {
                tracing::warn!(%job, "the session's container has no address on the job network")
            }
            Err(e) => tracing::warn!(%job, error = %e, "could not read the session's address"),
        }
    }

    async fn discard(&self, container: &str) {
        if let Err(e) = self.docker.remove(container).await {
            tracing::warn!(%container, error = %e, "could not remove a container that was not launched");
        }
    }
}

/// Why a job whose image left its node after admission fails (its puller had found the image
/// there, or the node pulls nothing: an older gpuq's row, a node without a puller).
fn missing(image: &str, node: &str) -> String {
    format!(
        "image {image} is not present on node {node}: it was removed after the job was placed, \
         or this node does not pull images"
    )
}
