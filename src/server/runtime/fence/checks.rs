//! The refusal rules of the fence: each turns a request that could widen
//! what a job sees of the host into a typed error before Docker is called.

use std::collections::BTreeSet;
use std::path::{Component, Path};

use crate::model::spec::FRAMEWORK_HINT_KEYS;
use crate::server::runtime::{LaunchRequest, Mount, RunAs, RuntimeError};

/// Prefix every simulated device path must have, so a request can never map
/// an arbitrary host device into a container.
pub const SIM_DEVICE_PREFIX: &str = "/dev/gpuq-sim";

/// Env keys (exact, upper-cased) the user may not set: they steer GPU
/// visibility or the dynamic loader. The framework memory hints
/// (`FRAMEWORK_HINT_KEYS`) are refused too.
const REFUSED_ENV_EXACT: &[&str] = &[
    "CUDA_VISIBLE_DEVICES",
    "LD_PRELOAD",
    "LD_LIBRARY_PATH",
    "LD_AUDIT",
];
/// Env key prefixes (upper-cased) the user may not set.
const REFUSED_ENV_PREFIX: &[&str] = &["NVIDIA_", "CUDA_MPS_", "GPUQ_", "DOCKER_"];
/// Host trees that must never be bind-mounted (nor anything below them): the
/// system's own, the runtime sockets under `/run`, boot files and the
/// container runtimes' state.
const REFUSED_HOST_TREES: &[&str] = &[
    "/proc",
    "/sys",
    "/dev",
    "/etc",
    "/run",
    "/var/run",
    "/boot",
    "/var/lib/docker",
    "/var/lib/containerd",
];
/// Docker control sockets: neither they nor any directory above them may be
/// mounted, since either hands the job root on the host.
const DOCKER_SOCKETS: &[&str] = &["/run/docker.sock", "/var/run/docker.sock"];

/// Refuses limits that dockerd would read as "unlimited".
pub(super) fn check_scalars(req: &LaunchRequest) -> Result<(), RuntimeError> {
    let invalid = |m: &str| Err(RuntimeError::InvalidRequest(m.to_string()));
    if req.image.trim().is_empty() {
        return invalid("image is empty");
    }
    if req.argv.is_empty() {
        return invalid("argv is empty");
    }
    if req.memory_limit_mib == 0 {
        return invalid("memory_limit_mib must be > 0 (0 means unlimited)");
    }
    if req.pids_limit <= 0 {
        return invalid("pids_limit must be > 0 (<= 0 means unlimited)");
    }
    if req.log_max_bytes == 0 {
        return invalid("log_max_bytes must be > 0");
    }
    if req.shm_mib == 0 {
        return invalid("shm_mib must be > 0");
    }
    if req.tmp_mib == Some(0) {
        return invalid("tmp_mib must be > 0 when set (a tmpfs of size 0 is unbounded)");
    }
    if req.nano_cpus.is_some_and(|n| n <= 0) {
        return invalid("nano_cpus must be > 0 when set (0 means unlimited)");
    }
    if let RunAs::User { uid, gid } = req.run_as {
        if uid == 0 || gid == 0 {
            return Err(RuntimeError::FenceViolation(format!(
                "job user {uid}:{gid} is root: only images the policy lists in root_images may run as root"
            )));
        }
    }
    Ok(())
}

/// Refuses env keys that would let the job steer GPU visibility or the loader.
pub(super) fn check_env_key(key: &str) -> Result<(), RuntimeError> {
    if key.is_empty() || key.contains('=') || key.contains('\0') {
        return Err(RuntimeError::FenceViolation(format!(
            "env key {key:?} is malformed"
        )));
    }
    let upper = key.to_ascii_uppercase();
    let refused = REFUSED_ENV_EXACT.contains(&upper.as_str())
        || FRAMEWORK_HINT_KEYS.contains(&upper.as_str())
        || REFUSED_ENV_PREFIX.iter().any(|p| upper.starts_with(p));
    if refused {
        return Err(RuntimeError::FenceViolation(format!(
            "env key {key} is reserved for the GPU fence"
        )));
    }
    Ok(())
}

/// Refuses a mount that would give the job the host.
pub(super) fn check_bind(m: &Mount) -> Result<(), RuntimeError> {
    let refuse = |why: &str| {
        Err(RuntimeError::FenceViolation(format!(
            "mount {} -> {}: {why}",
            m.host, m.container
        )))
    };
    for p in [&m.host, &m.container] {
        if !p.starts_with('/') {
            return refuse("paths must be absolute");
        }
        if p.contains([':', ',', '\0']) {
            return refuse("paths may not contain ':' ',' or NUL");
        }
        if Path::new(p).components().any(|c| c == Component::ParentDir) {
            return refuse("paths may not contain '..'");
        }
    }
    let host = Path::new(&m.host);
    if host.components().all(|c| c == Component::RootDir) {
        return refuse("the host root may not be mounted");
    }
    if REFUSED_HOST_TREES.iter().any(|t| host.starts_with(t)) {
        return refuse("host system trees may not be mounted");
    }
    if REFUSED_HOST_TREES
        .iter()
        .any(|t| Path::new(t).starts_with(host))
    {
        return refuse("a folder holding a host system tree may not be mounted");
    }
    if DOCKER_SOCKETS
        .iter()
        .any(|s| Path::new(s).starts_with(host))
    {
        return refuse("the docker socket may not be mounted");
    }
    Ok(())
}

/// Splits the grant into real NVIDIA uuids and simulated device paths,
/// refusing anything that could widen the fence (odd uuids, foreign devices,
/// duplicates).
pub(super) fn split_gpus(req: &LaunchRequest) -> Result<(Vec<String>, Vec<String>), RuntimeError> {
    let mut real = Vec::new();
    let mut sim = Vec::new();
    let mut seen = BTreeSet::new();
    for gpu in &req.gpus {
        let ok_uuid = gpu.uuid.starts_with("GPU-")
            && gpu.uuid.len() > 4
            && gpu
                .uuid
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-');
        if !ok_uuid {
            return Err(RuntimeError::FenceViolation(format!(
                "gpu uuid {:?} is not of the form GPU-<hex>",
                gpu.uuid
            )));
        }
        if !seen.insert(gpu.uuid.clone()) {
            return Err(RuntimeError::FenceViolation(format!(
                "gpu {} granted twice",
                gpu.uuid
            )));
        }
        match &gpu.sim_device {
            None => real.push(gpu.uuid.clone()),
            Some(path) => {
                let s = path.to_string_lossy();
                let n = s.strip_prefix(SIM_DEVICE_PREFIX).unwrap_or("");
                if n.is_empty() || !n.chars().all(|c| c.is_ascii_digit()) {
                    return Err(RuntimeError::FenceViolation(format!(
                        "simulated device {s} is not {SIM_DEVICE_PREFIX}<N>"
                    )));
                }
                if sim.contains(&s.to_string()) {
                    return Err(RuntimeError::FenceViolation(format!(
                        "simulated device {s} granted twice"
                    )));
                }
                sim.push(s.into_owned());
            }
        }
    }
    Ok((real, sim))
}
