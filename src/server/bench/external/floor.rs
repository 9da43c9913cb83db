//! Containers made straight through dockerd as gpuq would make a one-card job's, with all of the
//! fence, some of it or none: the floor gpuq is measured against.

use crate::model::{JobNetwork, LaunchPolicy};
use crate::server::runtime::fence::FencePart;
use crate::server::runtime::mountinfo::{self, FolderOrigin, MountCheck};
use crate::server::runtime::{verify, Docker, GrantedGpu, LaunchMode, LaunchRequest, Mount, RunAs};
use anyhow::{bail, Context, Result};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use uuid::Uuid;

/// Node label of the floor's containers, so no gpuq server takes them for its own.
pub(super) const FLOOR_NODE: &str = "bench-floor";
/// Simulated cards the floor's containers are spread over (`/dev/gpuq-sim0` …).
pub(super) const FLOOR_CARDS: usize = 8;
/// Where the bind of the bind legs shows inside the container.
const BIND_TARGET: &str = "/bench-data";

/// What a floor container gets, besides its command.
#[derive(Debug, Clone)]
pub(super) struct Shape {
    /// A local image with `true` and `sleep`.
    pub image: String,
    /// The server's launch policy: limits, network and root filesystem as gpuq gives a job.
    pub policy: LaunchPolicy,
    /// The simulated cards' device nodes.
    pub cards: Vec<PathBuf>,
    /// A folder to bind read-only, with where it lives (for the mount check).
    pub bind: Option<(PathBuf, FolderOrigin)>,
}

/// How a floor container is made.
#[derive(Debug, Clone, Copy)]
pub(super) enum Make {
    /// `create_parts` with these parts of the fence (nothing checked), on this network.
    Parts(&'static [FencePart], JobNetwork),
    /// gpuq's own `Docker::create` in `Fenced` mode (the job network looked up, the created
    /// container inspected and verified).
    GpuqCreate,
}

/// gpuq's own looks around a launch, each timed with it.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Checks {
    /// Inspect the image first (the folders it declares as `VOLUME`).
    pub image: bool,
    /// Inspect the created container and verify it against the request.
    pub verify: bool,
    /// With a bind: inspect the started container and compare its mount table with the folder.
    pub mounts: bool,
}

/// The times of one container, create → started.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Sample {
    pub total: Duration,
    pub create: Duration,
    pub start: Duration,
}

impl Shape {
    /// The request of floor container `i` running `argv`, with the bind when `bind` is true.
    pub fn request(&self, i: usize, argv: &[&str], bind: bool) -> Result<LaunchRequest> {
        let p = &self.policy;
        let mounts = match (&self.bind, bind) {
            (Some((host, _)), true) => vec![Mount {
                host: host
                    .to_str()
                    .context("bind folder is not UTF-8")?
                    .to_owned(),
                container: BIND_TARGET.into(),
                read_only: true,
            }],
            _ => Vec::new(),
        };
        Ok(LaunchRequest {
            job_id: Uuid::new_v4(),
            attempt: 1,
            node: FLOOR_NODE.into(),
            installation: None,
            image: self.image.clone(),
            argv: argv.iter().map(|a| a.to_string()).collect(),
            env: BTreeMap::new(),
            framework_env: BTreeMap::new(),
            mounts,
            gpus: vec![GrantedGpu {
                uuid: format!("GPU-bench-floor-{}", i % self.cards.len()),
                sim_device: Some(self.cards[i % self.cards.len()].clone()),
            }],
            memory_limit_mib: p.memory_limit_mib,
            pids_limit: p.pids_limit,
            log_max_bytes: 64 * 1024 * 1024,
            run_as: RunAs::User {
                uid: 65534,
                gid: 65534,
            },
            nano_cpus: p.nano_cpus(),
            shm_mib: p.shm_mib,
            tmp_mib: p.tmpfs_mib(),
            network: p.network,
            image_volumes: Vec::new(),
            array_index: None,
            session_port: None,
        })
    }
}

/// Makes, starts, waits for and removes one container of `req`; times the first two (with the
/// `checks`), and fails if it exits non-zero.
pub(super) async fn one(
    docker: &Docker,
    req: &LaunchRequest,
    make: Make,
    checks: Checks,
    bind: Option<&FolderOrigin>,
) -> Result<Sample> {
    let t = Instant::now();
    if checks.image {
        docker.image_volumes(&req.image).await?;
    }
    let c = Instant::now();
    let id = match make {
        Make::Parts(parts, network) => {
            let mut req = req.clone();
            req.network = network;
            docker.create_parts(&req, parts).await?
        }
        Make::GpuqCreate => docker.create(req, LaunchMode::Fenced).await?,
    };
    let create = c.elapsed();
    let run = async {
        if checks.verify {
            verify(&docker.inspect(&id).await?, req)?;
        }
        let s = Instant::now();
        docker.start(&id).await?;
        let start = s.elapsed();
        if let (true, Some(origin)) = (checks.mounts, bind) {
            mount_check(docker, &id, origin).await?;
        }
        let total = t.elapsed();
        let code = docker.wait(&id).await?;
        Ok::<_, anyhow::Error>((
            Sample {
                total,
                create,
                start,
            },
            code,
        ))
    };
    let ran = run.await;
    docker.remove(&id).await?;
    match ran? {
        (sample, 0) => Ok(sample),
        (_, code) => bail!("floor container {id} exited {code}"),
    }
}

/// What the runner does after a start with binds: the first process's mount table must show the
/// very folder that was checked.
async fn mount_check(docker: &Docker, id: &str, origin: &FolderOrigin) -> Result<()> {
    let facts = docker.inspect(id).await?;
    if !facts.running || facts.pid <= 0 {
        bail!("floor container {id} ended before its mounts could be checked");
    }
    let want = vec![(BIND_TARGET.to_string(), origin.clone())];
    let pid = facts.pid;
    match tokio::task::spawn_blocking(move || mountinfo::check(pid, &want)).await? {
        Ok(()) => Ok(()),
        Err(MountCheck::Differs(m) | MountCheck::Unreadable(m)) => {
            bail!("mount check of floor container {id}: {m}")
        }
    }
}
