//! Pure fence logic: what a job's container must look like, and whether an
//! inspected container really looks like that. No I/O, so every rule is
//! unit-tested without Docker.

use std::collections::{BTreeSet, HashMap};

use bollard::models::{
    ContainerCreateBody, DeviceMapping, DeviceRequest, HostConfig, HostConfigLogConfig, Mount,
    MountType, RestartPolicy, RestartPolicyNameEnum,
};

pub use checks::SIM_DEVICE_PREFIX;
use checks::{check_bind, check_env_key, check_scalars, split_gpus};

use super::{
    json_log, ContainerFacts, LaunchMode, LaunchRequest, RuntimeError, JOB_NETWORK, LABEL_ATTEMPT,
    LABEL_INSTALLATION, LABEL_JOB_ID, LABEL_MANAGED, LABEL_NODE,
};
use crate::model::spec::FRAMEWORK_HINT_KEYS;
use crate::model::JobNetwork;

/// Builds the create body for `req`. Everything that decides isolation is set
/// here and nowhere else, so reviewing this function reviews the fence.
pub fn container_config(
    req: &LaunchRequest,
    mode: LaunchMode,
) -> Result<ContainerCreateBody, RuntimeError> {
    check_scalars(req)?;
    let env = build_env(req)?;
    // As `Mounts` of type `bind`, never as `Binds`: dockerd creates a missing `Binds` source as
    // root (following symlinks in its parents), and refuses a missing `Mounts` source.
    let binds = req
        .mounts
        .iter()
        .map(|m| {
            check_bind(m)?;
            Ok(Mount {
                target: Some(m.container.clone()),
                source: Some(m.host.clone()),
                typ: Some(MountType::BIND),
                read_only: Some(m.read_only),
                ..Default::default()
            })
        })
        .collect::<Result<Vec<_>, RuntimeError>>()?;
    let (real, sim) = split_gpus(req)?;

    let device_requests = (!real.is_empty()).then(|| {
        vec![DeviceRequest {
            driver: Some("nvidia".to_string()),
            device_ids: Some(real.clone()),
            capabilities: Some(vec![vec!["gpu".to_string()]]),
            ..Default::default()
        }]
    });
    let devices = (!sim.is_empty()).then(|| {
        sim.iter()
            .map(|p| DeviceMapping {
                path_on_host: Some(p.clone()),
                path_in_container: Some(p.clone()),
                cgroup_permissions: Some("rwm".to_string()),
            })
            .collect()
    });
    let memory = bytes(req.memory_limit_mib, "memory_limit_mib")?;
    let shm = bytes(req.shm_mib, "shm_mib")?;
    let privileged = mode == LaunchMode::PrivilegedForTest;

    let host_config = HostConfig {
        privileged: Some(privileged),
        cap_drop: (!privileged).then(|| vec!["ALL".to_string()]),
        security_opt: Some(vec!["no-new-privileges".to_string()]),
        pids_limit: Some(req.pids_limit),
        memory: Some(memory),
        memory_swap: Some(memory),
        restart_policy: Some(RestartPolicy {
            name: Some(RestartPolicyNameEnum::NO),
            maximum_retry_count: None,
        }),
        log_config: Some(HostConfigLogConfig {
            typ: Some("json-file".to_string()),
            // Sized so dockerd never rotates away output gpuq has not read (see `json_log`).
            config: Some(HashMap::from([
                (
                    "max-size".to_string(),
                    json_log::file_bytes(req.log_max_bytes).to_string(),
                ),
                ("max-file".to_string(), json_log::FILES.to_string()),
            ])),
        }),
        network_mode: Some(network_mode(req.network).to_string()),
        nano_cpus: req.nano_cpus,
        shm_size: Some(shm),
        readonly_rootfs: Some(req.tmp_mib.is_some()),
        tmpfs: tmpfs(req)?,
        auto_remove: Some(false),
        mounts: (!binds.is_empty()).then_some(binds),
        device_requests,
        devices,
        ..Default::default()
    };

    Ok(ContainerCreateBody {
        image: Some(req.image.clone()),
        user: req.run_as.docker_user(),
        cmd: Some(req.argv.clone()),
        env: Some(env),
        labels: Some(labels(req)),
        host_config: Some(host_config),
        ..Default::default()
    })
}

/// `mib` in bytes, as Docker's `i64` fields take it; `field` names it when it does not fit.
fn bytes(mib: u64, field: &str) -> Result<i64, RuntimeError> {
    i64::try_from(mib)
        .ok()
        .and_then(|m| m.checked_mul(1024 * 1024))
        .ok_or_else(|| RuntimeError::InvalidRequest(format!("{field} too large")))
}

/// Where a job with a read-only root filesystem may write besides its volumes and `/dev/shm`.
const TMP_DIR: &str = "/tmp";

/// Size of the tmpfs over each folder the image declares as `VOLUME` when the root filesystem is
/// writable (no `tmp_mib` to follow), MiB.
pub const VOLUME_COVER_MIB: u64 = 1024;

/// `HostConfig.Tmpfs`: with a read-only root filesystem, one tmpfs at [`TMP_DIR`] of the granted
/// size; and one over each folder the image declares as `VOLUME`, so that Docker makes no
/// anonymous volume there (an unbounded, writable folder under its data root that outlives the
/// job). `exec`, because dockerd's default is `noexec` and frameworks load the kernels they compile
/// there (PyTorch's inductor, Triton). The job's uid owns each: runc gives a tmpfs the mode of the
/// image's own folder (a minimal image's `/tmp` is 0755 and root's), and `mode=1777` covers the
/// image without one.
fn tmpfs(req: &LaunchRequest) -> Result<Option<HashMap<String, String>>, RuntimeError> {
    let mut out = HashMap::new();
    let owner = match req.run_as {
        super::RunAs::User { uid, gid } => format!(",uid={uid},gid={gid}"),
        super::RunAs::ImageUser => String::new(),
    };
    for dir in &req.image_volumes {
        check_cover(dir)?;
        let mib = req.tmp_mib.unwrap_or(VOLUME_COVER_MIB);
        bytes(mib, "tmp_mib")?;
        out.insert(
            dir.clone(),
            format!("rw,exec,nosuid,nodev,size={mib}m,mode=755{owner}"),
        );
    }
    if let Some(mib) = req.tmp_mib {
        bytes(mib, "tmp_mib")?;
        out.insert(
            TMP_DIR.to_string(),
            format!("rw,exec,nosuid,nodev,size={mib}m,mode=1777{owner}"),
        );
    }
    Ok((!out.is_empty()).then_some(out))
}

/// A folder an image declares as `VOLUME` that gpuq can cover: absolute, plain, and not one the
/// runtime mounts itself.
fn check_cover(dir: &str) -> Result<(), RuntimeError> {
    let path = std::path::Path::new(dir);
    let plain = path.is_absolute()
        && !dir.contains([',', ':', '\0'])
        && path.components().all(|c| {
            matches!(
                c,
                std::path::Component::RootDir | std::path::Component::Normal(_)
            )
        });
    let runtime = ["/proc", "/sys", "/dev"]
        .iter()
        .any(|p| path.starts_with(p));
    if !plain || path == std::path::Path::new("/") || runtime {
        return Err(RuntimeError::FenceViolation(format!(
            "the image declares VOLUME {dir:?}, which gpuq cannot cover with a bounded tmpfs"
        )));
    }
    Ok(())
}

/// The `NetworkMode` a policy network stands for (the docker edge may name gpuq's network by id).
pub fn network_mode(network: JobNetwork) -> &'static str {
    match network {
        JobNetwork::Isolated => JOB_NETWORK,
        JobNetwork::None => "none",
    }
}

/// Compares what dockerd recorded with what the ledger granted, so a
/// container that escaped its fence (by bug or tampering) is caught: the
/// isolation of [`verify_isolation`], and the network and limits asked for.
pub fn verify(facts: &ContainerFacts, req: &LaunchRequest) -> Result<(), RuntimeError> {
    let mut problems = isolation_problems(facts, req);
    let want_net = vec![network_mode(req.network).to_string()];
    if facts.networks != want_net {
        problems.push(format!(
            "networks differ: granted {want_net:?}, container has {:?}",
            facts.networks
        ));
    }
    let want_cpus = req.nano_cpus.unwrap_or(0);
    if facts.nano_cpus != want_cpus {
        problems.push(format!(
            "cpu limit differs: granted {want_cpus} nano-cpus, container has {}",
            facts.nano_cpus
        ));
    }
    let granted = |mib: u64, field: &str| bytes(mib, field).unwrap_or(i64::MAX);
    let want_shm = granted(req.shm_mib, "shm_mib");
    if facts.shm_size != want_shm {
        problems.push(format!(
            "/dev/shm differs: granted {want_shm} bytes, container has {}",
            facts.shm_size
        ));
    }
    // Swap is memory too: the limit on both together equals the memory limit, so none is swap.
    let want_memory = granted(req.memory_limit_mib, "memory_limit_mib");
    if facts.memory != want_memory || facts.memory_swap != want_memory {
        problems.push(format!(
            "memory limit differs: granted {want_memory} bytes without swap, container has {} \
             (memory and swap {})",
            facts.memory, facts.memory_swap
        ));
    }
    if facts.pids_limit != req.pids_limit {
        problems.push(format!(
            "process limit differs: granted {}, container has {}",
            req.pids_limit, facts.pids_limit
        ));
    }
    if facts.readonly_rootfs != req.tmp_mib.is_some() {
        problems.push(format!(
            "root filesystem differs: granted {}, container has {}",
            rootfs_word(req.tmp_mib.is_some()),
            rootfs_word(facts.readonly_rootfs)
        ));
    }
    let want_tmpfs: std::collections::BTreeMap<String, String> = tmpfs(req)
        .ok()
        .flatten()
        .unwrap_or_default()
        .into_iter()
        .collect();
    if facts.tmpfs != want_tmpfs {
        problems.push(format!(
            "tmpfs mounts differ: granted {want_tmpfs:?}, container has {:?}",
            facts.tmpfs
        ));
    }
    outcome(facts, problems)
}

fn rootfs_word(read_only: bool) -> &'static str {
    if read_only {
        "read-only"
    } else {
        "writable"
    }
}

/// What must hold for a container to be re-adopted after a restart whatever the launch policy
/// says now about limits and network: not privileged, no added capabilities, exactly the granted
/// cards, gpuq's labels, exactly the granted binds (resolved host path, read-only flag), and the
/// granted user.
pub fn verify_isolation(facts: &ContainerFacts, req: &LaunchRequest) -> Result<(), RuntimeError> {
    outcome(facts, isolation_problems(facts, req))
}

fn outcome(facts: &ContainerFacts, problems: Vec<String>) -> Result<(), RuntimeError> {
    if problems.is_empty() {
        Ok(())
    } else {
        Err(RuntimeError::FenceViolation(format!(
            "container {}: {}",
            facts.id,
            problems.join("; ")
        )))
    }
}

fn isolation_problems(facts: &ContainerFacts, req: &LaunchRequest) -> Vec<String> {
    let mut problems = Vec::new();
    if facts.privileged {
        problems.push("container is privileged".to_string());
    }
    if !facts.cap_add.is_empty() {
        problems.push(format!("capabilities added: {:?}", facts.cap_add));
    }
    let want_dev: BTreeSet<String> = req
        .gpus
        .iter()
        .filter_map(|g| g.sim_device.as_ref())
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let have_dev: BTreeSet<String> = facts.devices.iter().cloned().collect();
    if want_dev != have_dev {
        problems.push(format!(
            "devices differ: granted {want_dev:?}, container has {have_dev:?}"
        ));
    }
    let want_gpu: BTreeSet<String> = req
        .gpus
        .iter()
        .filter(|g| g.sim_device.is_none())
        .map(|g| g.uuid.clone())
        .collect();
    let have_gpu: BTreeSet<String> = facts.gpu_device_ids.iter().cloned().collect();
    if want_gpu != have_gpu {
        problems.push(format!(
            "nvidia device ids differ: granted {want_gpu:?}, container has {have_gpu:?}"
        ));
    }
    let want_labels: std::collections::BTreeMap<_, _> = labels(req).into_iter().collect();
    for (key, want) in want_labels {
        let have = facts.labels.get(&key);
        if have != Some(&want) {
            problems.push(format!("label {key}: want {want:?}, have {have:?}"));
        }
    }
    problems.extend(mount_problems(facts, req));
    if let Some(want) = req.run_as.docker_user() {
        if facts.user != want {
            problems.push(format!(
                "user differs: granted {want:?}, container runs as {:?}",
                facts.user
            ));
        }
    }
    problems
}

/// Binds must be exactly the granted ones; any other kind of mount is not, Docker's anonymous
/// volumes included (the fence covers each folder the image declares with a tmpfs).
fn mount_problems(facts: &ContainerFacts, req: &LaunchRequest) -> Vec<String> {
    let want: BTreeSet<(String, String, bool)> = req
        .mounts
        .iter()
        .map(|m| (m.host.clone(), m.container.clone(), m.read_only))
        .collect();
    let have: BTreeSet<(String, String, bool)> = facts
        .mounts
        .iter()
        .filter(|m| m.kind == "bind")
        .map(|m| (m.source.clone(), m.destination.clone(), m.read_only))
        .collect();
    let mut problems = Vec::new();
    if want != have {
        problems.push(format!(
            "mounts differ: granted {want:?}, container has {have:?}"
        ));
    }
    for m in facts.mounts.iter().filter(|m| m.kind != "bind") {
        problems.push(format!("unexpected {} mount at {}", m.kind, m.destination));
    }
    problems
}

/// The labels every gpuq container carries, its installation's among them (when it has one):
/// `verify` requires each, so a container of another installation is never taken for this one's.
pub fn labels(req: &LaunchRequest) -> HashMap<String, String> {
    let mut labels = HashMap::from([
        (LABEL_MANAGED.to_string(), "true".to_string()),
        (LABEL_JOB_ID.to_string(), req.job_id.to_string()),
        (LABEL_NODE.to_string(), req.node.clone()),
        (LABEL_ATTEMPT.to_string(), req.attempt.to_string()),
    ]);
    if let Some(installation) = &req.installation {
        labels.insert(LABEL_INSTALLATION.to_string(), installation.clone());
    }
    labels
}

/// User env first, then the framework memory hints, then the fence's own keys; the user may
/// name neither of the last two.
fn build_env(req: &LaunchRequest) -> Result<Vec<String>, RuntimeError> {
    let mut env = Vec::with_capacity(req.env.len() + req.framework_env.len() + 3);
    for (key, value) in &req.env {
        check_env_key(key)?;
        if value.contains('\0') {
            return Err(RuntimeError::FenceViolation(format!(
                "env value of {key} contains NUL"
            )));
        }
        env.push(format!("{key}={value}"));
    }
    // Under a read-only root the image's home cannot be written, and pip, Hugging Face, PyTorch
    // and Triton keep their caches under $HOME: they go to the job's /tmp unless it set HOME.
    if req.tmp_mib.is_some() && !req.env.contains_key("HOME") {
        env.push(format!("HOME={TMP_DIR}"));
    }
    for (key, value) in &req.framework_env {
        if !FRAMEWORK_HINT_KEYS.contains(&key.as_str()) || value.contains('\0') {
            return Err(RuntimeError::FenceViolation(format!(
                "framework_env key {key} is not a framework memory hint"
            )));
        }
        env.push(format!("{key}={value}"));
    }
    let uuids: Vec<&str> = req.gpus.iter().map(|g| g.uuid.as_str()).collect();
    let joined = uuids.join(",");
    let visible = if uuids.is_empty() { "void" } else { &joined };
    env.push(format!("NVIDIA_VISIBLE_DEVICES={visible}"));
    env.push(format!("GPUQ_GPUS={joined}"));
    env.push(format!("GPUQ_JOB_ID={}", req.job_id));
    if let Some(index) = req.array_index {
        env.push(format!("GPUQ_ARRAY_INDEX={index}"));
    }
    if let Some(port) = req.session_port {
        env.push(format!(
            "GPUQ_SESSION_BASE={}",
            crate::model::session_path(req.job_id)
        ));
        env.push(format!("GPUQ_SESSION_PORT={port}"));
    }
    Ok(env)
}

mod checks;
mod parts;

pub use parts::{partial_config, FencePart};

#[cfg(test)]
mod tests;

#[cfg(test)]
mod tests_rules;
