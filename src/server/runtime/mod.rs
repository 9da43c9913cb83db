//! The Docker edge of gpuq: turns an admission decision into a container that
//! can see exactly the GPUs it was granted, and checks that it really does.
//!
//! `fence` is pure (config building and verification), `docker` is the only
//! module that talks to dockerd, `simdev` provides fake GPU device nodes so
//! isolation can be tested on machines without GPUs.

pub mod docker;
pub mod egress;
pub mod fence;
pub mod hints;
pub mod json_log;
pub mod mountinfo;
pub mod simdev;
pub mod volumes;

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::model::JobNetwork;

pub use docker::images::ImageFacts;
pub use docker::pull::{LocalImage, PullAuth, PullError, PullProgress};
pub use docker::Docker;
pub use fence::{container_config, verify, verify_isolation};
pub use simdev::ensure_sim_devices;

/// Label marking containers that gpuq owns, so reconciliation never touches
/// anything else on the host.
pub const LABEL_MANAGED: &str = "org.gpuq.managed";
/// Label carrying the job id, so a container can be tied back to the ledger.
pub const LABEL_JOB_ID: &str = "org.gpuq.job-id";
/// Label carrying the node name, so several nodes can share one dockerd.
pub const LABEL_NODE: &str = "org.gpuq.node";
/// Label carrying the attempt number, so retries are distinguishable.
pub const LABEL_ATTEMPT: &str = "org.gpuq.attempt";
/// Label carrying the installation's id (one per database), so two installations on one dockerd
/// never settle each other's containers.
pub const LABEL_INSTALLATION: &str = "org.gpuq.installation";
/// The bridge network jobs join under the `isolated` policy: gpuq creates it with traffic between
/// its containers disabled, so a job reaches out but not its neighbours.
pub const JOB_NETWORK: &str = "gpuq-jobs";
/// Docker's bridge option that, set to `false`, drops traffic between containers of a network.
pub const ICC_OPTION: &str = "com.docker.network.bridge.enable_icc";

/// One GPU the scheduler granted to a job; the unit the fence is built from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrantedGpu {
    /// NVIDIA UUID (`GPU-…`), the only identifier stable across reboots.
    pub uuid: String,
    /// `Some(/dev/gpuq-sim<N>)` for simulated cards, so tests can exercise
    /// isolation without an NVIDIA runtime; `None` for real cards.
    pub sim_device: Option<PathBuf>,
}

/// A bind mount the server has already resolved against its allowlist.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mount {
    /// Absolute host path.
    pub host: String,
    /// Absolute path inside the container.
    pub container: String,
    /// Whether the job may only read it.
    pub read_only: bool,
}

/// Everything needed to launch one attempt of an admitted job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchRequest {
    /// Ledger id of the job, carried in labels and env.
    pub job_id: Uuid,
    /// Attempt number, so a retry gets a distinct container name.
    pub attempt: u32,
    /// Node the job was admitted on.
    pub node: String,
    /// The installation's id, labelled on the container ([`LABEL_INSTALLATION`]); `None` only
    /// for containers that are no installation's (the doctor's smoke container, benchmarks) and
    /// for re-checking a container made before the label existed.
    #[serde(default)]
    pub installation: Option<String>,
    /// Image reference; must already be present locally (never pulled).
    pub image: String,
    /// Command, passed as-is (no shell) so quoting cannot be abused.
    pub argv: Vec<String>,
    /// User environment; fence-owned keys are refused.
    pub env: BTreeMap<String, String>,
    /// The framework memory hints gpuq sets (`hints::framework_env`): only keys of
    /// `FRAMEWORK_HINT_KEYS`, set after the user's keys. Empty when the policy is off or the
    /// job has no cards.
    #[serde(default)]
    pub framework_env: BTreeMap<String, String>,
    /// Bind mounts.
    pub mounts: Vec<Mount>,
    /// The GPUs this attempt may see — and no others.
    pub gpus: Vec<GrantedGpu>,
    /// Hard memory limit (swap included) in MiB.
    pub memory_limit_mib: u64,
    /// Maximum number of processes, against fork bombs.
    pub pids_limit: i64,
    /// gpuq's cap on the job's log: dockerd's json-file copy is sized from it
    /// ([`json_log::file_bytes`], [`json_log::FILES`] files), so a chatty job cannot fill the disk.
    pub log_max_bytes: u64,
    /// Who the job's processes are.
    pub run_as: RunAs,
    /// CPU limit in billionths of a core (`NanoCpus`); `None`: no limit.
    pub nano_cpus: Option<i64>,
    /// Size of the job's `/dev/shm`, MiB.
    pub shm_mib: u64,
    /// `Some(size)`: the root filesystem is read-only and `/tmp` is a tmpfs of that many MiB;
    /// `None`: the root filesystem is writable (an attempt launched before gpuq offered the
    /// choice reads as writable, which it was).
    #[serde(default)]
    pub tmp_mib: Option<u64>,
    /// The network the container joins.
    pub network: JobNetwork,
    /// The folders the image declares as `VOLUME`, each covered with a bounded tmpfs owned by the
    /// job's uid, so dockerd makes no anonymous volume (see `fence::tmpfs`).
    #[serde(default)]
    pub image_volumes: Vec<String>,
    /// Its index in its array, set as `GPUQ_ARRAY_INDEX` (`None`: not an array's element).
    #[serde(default)]
    pub array_index: Option<u32>,
    /// An interactive session's port: gpuq's proxy reaches it on the job network, and the app is
    /// told its base path (`GPUQ_SESSION_BASE=/s/<job-id>/`, `GPUQ_SESSION_PORT`). `None`: a
    /// batch job.
    #[serde(default)]
    pub session_port: Option<u16>,
}

/// Who a job's processes run as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RunAs {
    /// This numeric uid and gid (the owner's job ids); never 0.
    User {
        /// Numeric user id.
        uid: u32,
        /// Numeric group id.
        gid: u32,
    },
    /// The image's own user, possibly root: only for images the launch policy's `root_images`
    /// allow.
    ImageUser,
}

impl RunAs {
    /// The `User` of the container config (`uid:gid`), or `None` to keep the image's.
    pub fn docker_user(self) -> Option<String> {
        match self {
            RunAs::User { uid, gid } => Some(format!("{uid}:{gid}")),
            RunAs::ImageUser => None,
        }
    }
}

/// One mount as dockerd recorded it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct MountFact {
    /// `bind`, `volume`, `tmpfs`, …
    pub kind: String,
    /// Host path of a bind (or the volume's data folder).
    pub source: String,
    /// Path inside the container.
    pub destination: String,
    /// Whether the job may only read it.
    pub read_only: bool,
}

/// How the container is fenced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LaunchMode {
    /// The only production mode: unprivileged, all capabilities dropped.
    Fenced,
    /// Test-only A/B switch proving the fence matters; never reachable from
    /// the server's config or API.
    PrivilegedForTest,
}

/// What dockerd actually recorded for a container, in our own terms, so
/// `verify` can compare it with the ledger without knowing bollard.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ContainerFacts {
    /// Full container id.
    pub id: String,
    /// Privileged containers see every host device; must be false.
    pub privileged: bool,
    /// Host paths of `HostConfig.Devices`.
    pub devices: Vec<String>,
    /// Device ids from `DeviceRequests` whose driver is `nvidia` (or empty
    /// with the `gpu` capability, which dockerd resolves to nvidia). Requests
    /// by count or through another driver appear as `<driver>:…` markers, so
    /// `verify` rejects them.
    pub gpu_device_ids: Vec<String>,
    /// Added capabilities; must be empty.
    pub cap_add: Vec<String>,
    /// Container labels.
    pub labels: BTreeMap<String, String>,
    /// Whether the container is running now.
    pub running: bool,
    /// Exit code, once it has exited.
    pub exit_code: Option<i64>,
    /// Host pid of its first process while it runs (0 otherwise).
    pub pid: i64,
    /// Whether the kernel's OOM killer ended it (`State.OOMKilled`).
    pub oom_killed: bool,
    /// Start time as dockerd reports it (RFC 3339), if ever started.
    pub started_at: Option<String>,
    /// Finish time as dockerd reports it (RFC 3339), if finished.
    pub finished_at: Option<String>,
    /// The mounts, as dockerd will set them up.
    pub mounts: Vec<MountFact>,
    /// `Config.User` (the image's user when the create did not set one).
    pub user: String,
    /// `HostConfig.NetworkMode` (a network id or name, or `none`).
    pub network_mode: String,
    /// Names of the networks the container is attached to.
    pub networks: Vec<String>,
    /// Its IP address on one of them (the job network: where gpuq's session proxy reaches it);
    /// `None` without one (no network, not running).
    pub ip: Option<std::net::IpAddr>,
    /// `HostConfig.NanoCpus` (0: no limit).
    pub nano_cpus: i64,
    /// `HostConfig.ShmSize`, bytes.
    pub shm_size: i64,
    /// `HostConfig.Memory`, bytes (0: no limit).
    pub memory: i64,
    /// `HostConfig.MemorySwap`, bytes: memory plus swap (0: Docker's default of twice the memory;
    /// -1: unlimited swap).
    pub memory_swap: i64,
    /// `HostConfig.PidsLimit` (0 or -1: no limit).
    pub pids_limit: i64,
    /// `HostConfig.ReadonlyRootfs`.
    pub readonly_rootfs: bool,
    /// `HostConfig.Tmpfs`: mount point → options.
    pub tmpfs: BTreeMap<String, String>,
}

/// A gpuq-labelled container found on the host, for reconciliation after a
/// restart of the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManagedContainer {
    /// Full container id.
    pub id: String,
    /// Job id from the label.
    pub job_id: Uuid,
    /// Node from the label.
    pub node: String,
    /// Attempt from the label.
    pub attempt: u32,
    /// Installation from the label; `None` on containers made before the label existed.
    pub installation: Option<String>,
    /// Whether it is running now.
    pub running: bool,
    /// Exit code once it has exited.
    pub exit_code: Option<i64>,
}

/// Which output stream a log line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum LogStream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

/// One log line with dockerd's timestamp, so a reader can resume without
/// duplicates.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogLine {
    /// Which stream it came from.
    pub stream: LogStream,
    /// Fixed-width RFC3339Nano timestamp (`2006-01-02T15:04:05.000000000Z`),
    /// so lexical order is time order.
    pub at: String,
    /// The line without its trailing newline.
    pub text: String,
}

/// Everything that can go wrong at the Docker edge, in terms callers can act on.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// dockerd cannot be reached; the node should stop admitting jobs.
    #[error("docker daemon unreachable: {0}")]
    Unreachable(String),
    /// The image is not present locally (a launch never pulls: the node's puller did, before the
    /// job's cards were held).
    #[error("image not present locally: {0}")]
    ImageMissing(String),
    /// The container would not be (or is not) fenced as the ledger says.
    #[error("fence violation: {0}")]
    FenceViolation(String),
    /// The launch request is malformed in a way that is not a security issue.
    #[error("invalid launch request: {0}")]
    InvalidRequest(String),
    /// The container does not exist.
    #[error("container not found: {0}")]
    NotFound(String),
    /// gpuq's job network was removed after gpuq looked it up (dockerd says `network … not
    /// found`); it has been forgotten, and a new launch looks it up or creates it again.
    #[error("the job network is gone: {0}")]
    NetworkGone(String),
    /// A container with that name already exists.
    #[error("conflict: {0}")]
    Conflict(String),
    /// Simulated GPU device nodes could not be prepared.
    #[error("simulated device: {0}")]
    SimDevice(String),
    /// Any other error reported by dockerd.
    #[error("docker: {0}")]
    Docker(String),
}
