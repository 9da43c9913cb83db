//! bollard → gpuq conversions, kept apart from the calls so they stay small
//! and the mapping rules are easy to audit.

use std::collections::BTreeMap;

use bollard::container::LogOutput;
use bollard::errors::Error as BollardError;
use bollard::models::{
    ContainerInspectResponse, ContainerStateStatusEnum, ContainerSummary,
    ContainerSummaryStateEnum, DeviceRequest,
};

use crate::server::runtime::{
    ContainerFacts, LogLine, LogStream, ManagedContainer, MountFact, RuntimeError, LABEL_ATTEMPT,
    LABEL_INSTALLATION, LABEL_JOB_ID, LABEL_NODE,
};

/// dockerd's "never happened" timestamp.
const ZERO_TIME: &str = "0001-01-01T00:00:00Z";

/// An error with its sources, because bollard's transport errors hide the
/// useful part ("No such file or directory", "Connection refused") in them.
pub(super) fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

/// Sorts bollard errors into the cases callers act on differently.
pub(super) fn map_err(e: BollardError) -> RuntimeError {
    match e {
        BollardError::DockerResponseServerError {
            status_code,
            message,
        } => match status_code {
            404 => RuntimeError::NotFound(message),
            409 => RuntimeError::Conflict(message),
            _ => RuntimeError::Docker(format!("status {status_code}: {message}")),
        },
        BollardError::HyperLegacyError { .. }
        | BollardError::HyperResponseError { .. }
        | BollardError::IOError { .. }
        | BollardError::SocketNotFoundError(_)
        | BollardError::RequestTimeoutError => RuntimeError::Unreachable(chain(&e)),
        other => RuntimeError::Docker(chain(&other)),
    }
}

/// Turns a device request into the ids it grants. Requests that would pick
/// GPUs by count, or via another driver, are rendered as markers that never
/// equal a granted uuid, so `verify` flags them.
fn request_ids(r: DeviceRequest) -> Vec<String> {
    let driver = r.driver.unwrap_or_default();
    let wants_gpu = r
        .capabilities
        .iter()
        .flatten()
        .flatten()
        .any(|c| c == "gpu");
    // An empty driver with the gpu capability is resolved to nvidia by dockerd.
    let nvidia = driver == "nvidia" || (driver.is_empty() && wants_gpu);
    let ids = r.device_ids.unwrap_or_default();
    let mut out: Vec<String> = if nvidia {
        ids
    } else {
        ids.into_iter().map(|id| format!("{driver}:{id}")).collect()
    };
    match r.count {
        Some(n) if n != 0 => out.push(format!("{driver}:count={n}")),
        _ => {}
    }
    out
}

/// What the fence cares about in an inspect response.
pub(super) fn facts(resp: ContainerInspectResponse) -> ContainerFacts {
    let hc = resp.host_config.unwrap_or_default();
    let state = resp.state.unwrap_or_default();
    let exited = matches!(
        state.status,
        Some(ContainerStateStatusEnum::EXITED | ContainerStateStatusEnum::DEAD)
    );
    let real_time = |t: Option<String>| t.filter(|t| !t.is_empty() && t != ZERO_TIME);
    let mounts = resp
        .mounts
        .unwrap_or_default()
        .into_iter()
        .map(|m| MountFact {
            kind: m.typ.unwrap_or_default(),
            source: m.source.unwrap_or_default(),
            destination: m.destination.unwrap_or_default(),
            read_only: !m.rw.unwrap_or(true),
        })
        .collect();
    let attached = resp
        .network_settings
        .and_then(|n| n.networks)
        .unwrap_or_default();
    let ip = attached
        .values()
        .filter_map(|e| e.ip_address.as_deref())
        .find_map(|ip| ip.parse().ok());
    let mut networks: Vec<String> = attached.into_keys().collect();
    networks.sort();
    let user = resp
        .config
        .as_ref()
        .and_then(|c| c.user.clone())
        .unwrap_or_default();
    ContainerFacts {
        id: resp.id.unwrap_or_default(),
        privileged: hc.privileged.unwrap_or(false),
        mounts,
        user,
        network_mode: hc.network_mode.clone().unwrap_or_default(),
        networks,
        ip,
        nano_cpus: hc.nano_cpus.unwrap_or(0),
        shm_size: hc.shm_size.unwrap_or(0),
        memory: hc.memory.unwrap_or(0),
        memory_swap: hc.memory_swap.unwrap_or(0),
        pids_limit: hc.pids_limit.unwrap_or(0),
        readonly_rootfs: hc.readonly_rootfs.unwrap_or(false),
        tmpfs: hc.tmpfs.unwrap_or_default().into_iter().collect(),
        devices: hc
            .devices
            .unwrap_or_default()
            .into_iter()
            .filter_map(|d| d.path_on_host)
            .collect(),
        gpu_device_ids: hc
            .device_requests
            .unwrap_or_default()
            .into_iter()
            .flat_map(request_ids)
            .collect(),
        cap_add: hc.cap_add.unwrap_or_default(),
        labels: resp
            .config
            .and_then(|c| c.labels)
            .unwrap_or_default()
            .into_iter()
            .collect::<BTreeMap<_, _>>(),
        running: state.running.unwrap_or(false),
        exit_code: if exited { state.exit_code } else { None },
        pid: state.pid.unwrap_or(0),
        oom_killed: state.oom_killed.unwrap_or(false),
        started_at: real_time(state.started_at),
        finished_at: real_time(state.finished_at),
    }
}

/// Parses `Exited (137) 3 seconds ago`, the only place a list reply carries
/// the exit code (saves one inspect per container).
fn exit_code_from_status(status: &str) -> Option<i64> {
    let rest = status.strip_prefix("Exited (")?;
    rest.split_once(')')?.0.parse().ok()
}

/// A listed container as a `ManagedContainer`, or `None` (with a warning) if
/// its labels are not ours to interpret.
pub(super) fn managed(c: ContainerSummary) -> Option<ManagedContainer> {
    let id = c.id.unwrap_or_default();
    let labels = c.labels.unwrap_or_default();
    let job_id = labels.get(LABEL_JOB_ID).and_then(|v| v.parse().ok());
    let attempt = labels.get(LABEL_ATTEMPT).and_then(|v| v.parse().ok());
    let (Some(job_id), Some(attempt)) = (job_id, attempt) else {
        tracing::warn!(container = %id, ?labels, "managed container with unreadable labels");
        return None;
    };
    let exit_code = match c.state {
        Some(ContainerSummaryStateEnum::EXITED | ContainerSummaryStateEnum::DEAD) => {
            c.status.as_deref().and_then(exit_code_from_status)
        }
        _ => None,
    };
    Some(ManagedContainer {
        id,
        job_id,
        node: labels.get(LABEL_NODE).cloned().unwrap_or_default(),
        attempt,
        installation: labels.get(LABEL_INSTALLATION).cloned(),
        running: c.state == Some(ContainerSummaryStateEnum::RUNNING),
        exit_code,
    })
}

/// Splits one log frame into timestamped lines. Frames normally hold one
/// line, but every line dockerd sends carries its own timestamp, so splitting
/// is safe either way.
pub(super) fn log_lines(out: LogOutput) -> Vec<Result<LogLine, RuntimeError>> {
    let (stream, bytes) = match out {
        LogOutput::StdOut { message } | LogOutput::Console { message } => {
            (LogStream::Stdout, message)
        }
        LogOutput::StdErr { message } => (LogStream::Stderr, message),
        LogOutput::StdIn { .. } => return Vec::new(),
    };
    let text = String::from_utf8_lossy(&bytes);
    text.split_inclusive('\n')
        .map(|raw| {
            let line = raw.strip_suffix('\n').unwrap_or(raw);
            match line.split_once(' ') {
                Some((at, rest)) => Ok(LogLine {
                    stream,
                    at: at.to_string(),
                    text: rest.to_string(),
                }),
                // A line with an empty payload may arrive without the space.
                None if looks_like_timestamp(line) => Ok(LogLine {
                    stream,
                    at: line.to_string(),
                    text: String::new(),
                }),
                None => Err(RuntimeError::Docker(format!(
                    "log line without timestamp: {line:?}"
                ))),
            }
        })
        .collect()
}

fn looks_like_timestamp(s: &str) -> bool {
    s.len() >= 20 && s.as_bytes().get(4) == Some(&b'-') && s.contains('T')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_code_parsing() {
        assert_eq!(
            exit_code_from_status("Exited (137) 2 seconds ago"),
            Some(137)
        );
        assert_eq!(
            exit_code_from_status("Exited (0) About a minute ago"),
            Some(0)
        );
        assert_eq!(exit_code_from_status("Up 3 seconds"), None);
    }

    #[test]
    fn count_and_foreign_requests_are_flagged() {
        let all = DeviceRequest {
            count: Some(-1),
            capabilities: Some(vec![vec!["gpu".into()]]),
            ..Default::default()
        };
        assert_eq!(request_ids(all), vec![":count=-1".to_string()]);
        let nv = DeviceRequest {
            driver: Some("nvidia".into()),
            device_ids: Some(vec!["GPU-1".into()]),
            ..Default::default()
        };
        assert_eq!(request_ids(nv), vec!["GPU-1".to_string()]);
        let cdi = DeviceRequest {
            driver: Some("cdi".into()),
            device_ids: Some(vec!["nvidia.com/gpu=all".into()]),
            ..Default::default()
        };
        assert_eq!(request_ids(cdi), vec!["cdi:nvidia.com/gpu=all".to_string()]);
    }

    #[test]
    fn log_frames_split_into_lines() {
        let out = LogOutput::StdErr {
            message: "2024-01-02T03:04:05.000000001Z hello world\n".into(),
        };
        let lines: Vec<_> = log_lines(out).into_iter().map(|l| l.unwrap()).collect();
        assert_eq!(lines.len(), 1);
        assert_eq!(lines[0].stream, LogStream::Stderr);
        assert_eq!(lines[0].at, "2024-01-02T03:04:05.000000001Z");
        assert_eq!(lines[0].text, "hello world");
    }
}
