//! Pure fence logic: what a job's container must look like, and whether an
//! inspected container really looks like that. No I/O, so every rule is
//! unit-tested without Docker.

use std::collections::{BTreeSet, HashMap};

use bollard::models::{
    ContainerCreateBody, DeviceMapping, DeviceRequest, HostConfig, HostConfigLogConfig,
    RestartPolicy, RestartPolicyNameEnum,
};

pub use checks::SIM_DEVICE_PREFIX;
use checks::{bind_spec, check_env_key, check_scalars, split_gpus};

use super::{
    ContainerFacts, LaunchMode, LaunchRequest, RuntimeError, LABEL_ATTEMPT, LABEL_JOB_ID,
    LABEL_MANAGED, LABEL_NODE,
};

/// Builds the create body for `req`. Everything that decides isolation is set
/// here and nowhere else, so reviewing this function reviews the fence.
pub fn container_config(
    req: &LaunchRequest,
    mode: LaunchMode,
) -> Result<ContainerCreateBody, RuntimeError> {
    check_scalars(req)?;
    let env = build_env(req)?;
    let binds = req
        .mounts
        .iter()
        .map(bind_spec)
        .collect::<Result<Vec<_>, _>>()?;
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
    let memory = i64::try_from(req.memory_limit_mib)
        .ok()
        .and_then(|m| m.checked_mul(1024 * 1024))
        .ok_or_else(|| RuntimeError::InvalidRequest("memory_limit_mib too large".into()))?;
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
            config: Some(HashMap::from([(
                "max-size".to_string(),
                req.log_max_bytes.to_string(),
            )])),
        }),
        network_mode: Some("default".to_string()),
        auto_remove: Some(false),
        binds: (!binds.is_empty()).then_some(binds),
        device_requests,
        devices,
        ..Default::default()
    };

    Ok(ContainerCreateBody {
        image: Some(req.image.clone()),
        cmd: Some(req.argv.clone()),
        env: Some(env),
        labels: Some(labels(req)),
        host_config: Some(host_config),
        ..Default::default()
    })
}

/// Compares what dockerd recorded with what the ledger granted, so a
/// container that escaped its fence (by bug or tampering) is caught.
pub fn verify(facts: &ContainerFacts, req: &LaunchRequest) -> Result<(), RuntimeError> {
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

/// The labels every gpuq container carries.
pub fn labels(req: &LaunchRequest) -> HashMap<String, String> {
    HashMap::from([
        (LABEL_MANAGED.to_string(), "true".to_string()),
        (LABEL_JOB_ID.to_string(), req.job_id.to_string()),
        (LABEL_NODE.to_string(), req.node.clone()),
        (LABEL_ATTEMPT.to_string(), req.attempt.to_string()),
    ])
}

/// User env first, then the fence's own keys, which win because the user may
/// not name them at all.
fn build_env(req: &LaunchRequest) -> Result<Vec<String>, RuntimeError> {
    let mut env = Vec::with_capacity(req.env.len() + 3);
    for (key, value) in &req.env {
        check_env_key(key)?;
        if value.contains('\0') {
            return Err(RuntimeError::FenceViolation(format!(
                "env value of {key} contains NUL"
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
    Ok(env)
}

mod checks;

#[cfg(test)]
mod tests;

#[cfg(test)]
mod tests_rules;
