//! Host folders a job may mount: only inside the admin's allowlist, judged after resolving
//! symlinks, and never the system's own folders, the container runtime's sockets and state, or
//! gpuq's own data.
//!
//! The check runs twice: at submit (so a member hears at once), and again on the runner node just
//! before the container is created ([`resolve_for_mount`]), against the launch policy as it is then.
//! Only the second one decides: a folder inside an allowlisted tree can be swapped for a symlink
//! while its job waits in the queue, so the runner binds the path it resolved, never the one stored.

use crate::model::spec::{Volume, FORBIDDEN_HOST};
use crate::model::{AppError, VolumeRule};
use std::path::{Path, PathBuf};

/// Host paths no job may mount on any node, beyond the spec parser's list: all of `/run` (the
/// Docker and containerd sockets, systemd's and other daemons' sockets), the boot files, and the
/// container runtimes' own state.
pub const NEVER_MOUNT: &[&str] = &[
    "/run",
    "/var/run",
    "/boot",
    "/var/lib/docker",
    "/var/lib/containerd",
    "/run/containerd/containerd.sock",
];

/// A volume the runner may bind: its host path resolved, inside the allowlist.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedVolume {
    /// The resolved (canonical) host path: what is bound.
    pub host: PathBuf,
    /// The path inside the container.
    pub container: String,
    /// Whether the job may only read it.
    pub read_only: bool,
}

/// Checks every volume of a spec against the allowlist at submit time. `field` names come from
/// the spec (`volumes[i]`).
pub fn check(volumes: &[Volume], allowlist: &[VolumeRule]) -> Result<(), AppError> {
    for (i, v) in volumes.iter().enumerate() {
        resolve_one(v, allowlist, &[])
            .map_err(|m| AppError::invalid(format!("volumes[{i}]"), m))?;
    }
    Ok(())
}

/// Resolves every volume again where and when it is mounted, against the allowlist as it is now
/// and the never-mount list plus this node's own `never` paths (its Docker socket, gpuq's data
/// folder). The error names the volume (`volumes[i]`, its host path) and what is wrong.
pub fn resolve_for_mount(
    volumes: &[Volume],
    allowlist: &[VolumeRule],
    never: &[PathBuf],
) -> Result<Vec<ResolvedVolume>, String> {
    volumes
        .iter()
        .enumerate()
        .map(|(i, v)| {
            resolve_one(v, allowlist, never).map_err(|m| {
                format!(
                    "volume volumes[{i}] ({}:{}) refused at launch: {m}",
                    v.host(),
                    v.container()
                )
            })
        })
        .collect()
}

fn resolve_one(
    v: &Volume,
    allowlist: &[VolumeRule],
    never: &[PathBuf],
) -> Result<ResolvedVolume, String> {
    let resolved = std::fs::canonicalize(v.host())
        .map_err(|e| format!("host path {} cannot be used: {e}", v.host()))?;
    if let Some(bad) = forbidden(&resolved, never) {
        return Err(format!(
            "host path {} resolves to {}, which jobs may never mount ({})",
            v.host(),
            resolved.display(),
            bad.display()
        ));
    }
    let rule = allowlist
        .iter()
        .find(|r| std::fs::canonicalize(&r.path).is_ok_and(|root| resolved.starts_with(root)));
    match rule {
        None if allowlist.is_empty() => {
            Err("volumes are not allowed here: the admin's volume allowlist is empty".into())
        }
        None => {
            let allowed: Vec<&str> = allowlist.iter().map(|r| r.path.as_str()).collect();
            Err(format!(
                "host path {} (resolved: {}) is outside the allowed folders: {}",
                v.host(),
                resolved.display(),
                allowed.join(", ")
            ))
        }
        Some(r) if r.read_only && !v.read_only() => Err(format!(
            "mounts from {} must be read-only: add `:ro`",
            r.path
        )),
        Some(_) => Ok(ResolvedVolume {
            host: resolved,
            container: v.container().to_owned(),
            read_only: v.read_only(),
        }),
    }
}

/// The never-mount entry `resolved` hits, if any: `/` itself, a listed path or anything below it,
/// or a folder above one (`/var` holds the Docker socket). `never` entries are compared both as
/// given and resolved, so a data folder reached through a symlink is still recognised.
pub fn forbidden(resolved: &Path, never: &[PathBuf]) -> Option<PathBuf> {
    if resolved == Path::new("/") {
        return Some(PathBuf::from("/"));
    }
    let fixed = FORBIDDEN_HOST.iter().chain(NEVER_MOUNT).map(PathBuf::from);
    let local = never
        .iter()
        .flat_map(|n| [Some(n.clone()), std::fs::canonicalize(n).ok()])
        .flatten();
    fixed
        .chain(local)
        .find(|n| resolved.starts_with(n) || n.starts_with(resolved))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_mount_covers_runtime_state_and_local_paths() {
        for p in [
            "/run/containerd",
            "/boot",
            "/var/lib/docker/volumes",
            "/var/lib",
        ] {
            assert!(forbidden(Path::new(p), &[]).is_some(), "{p}");
        }
        assert!(forbidden(Path::new("/srv/data"), &[]).is_none());
        let data = vec![PathBuf::from("/srv/gpuq")];
        assert!(forbidden(Path::new("/srv/gpuq/logs"), &data).is_some());
        assert!(forbidden(Path::new("/srv"), &data).is_some());
        assert!(forbidden(Path::new("/srv/data"), &data).is_none());
    }
}
