//! Host folders a job may mount: only inside the admin's allowlist, judged after resolving
//! symlinks, and never the system's own folders or the Docker socket.

use crate::model::spec::{Volume, FORBIDDEN_HOST};
use crate::model::{AppError, VolumeRule};
use std::path::{Path, PathBuf};

/// Checks every volume of a spec against the allowlist. `field` names come from the spec
/// (`volumes[i]`).
pub fn check(volumes: &[Volume], allowlist: &[VolumeRule]) -> Result<(), AppError> {
    for (i, v) in volumes.iter().enumerate() {
        let field = format!("volumes[{i}]");
        let resolved = std::fs::canonicalize(v.host()).map_err(|e| {
            AppError::invalid(
                &field,
                format!("host path {} cannot be used: {e}", v.host()),
            )
        })?;
        if let Some(bad) = forbidden(&resolved) {
            return Err(AppError::invalid(
                &field,
                format!(
                    "host path {} resolves to {}, which jobs may never mount ({bad})",
                    v.host(),
                    resolved.display()
                ),
            ));
        }
        let rule = allowlist
            .iter()
            .find(|r| std::fs::canonicalize(&r.path).is_ok_and(|root| resolved.starts_with(root)));
        match rule {
            None if allowlist.is_empty() => {
                return Err(AppError::invalid(
                    &field,
                    "volumes are not allowed here: the admin's volume allowlist is empty",
                ))
            }
            None => {
                let allowed: Vec<&str> = allowlist.iter().map(|r| r.path.as_str()).collect();
                return Err(AppError::invalid(
                    &field,
                    format!(
                        "host path {} (resolved: {}) is outside the allowed folders: {}",
                        v.host(),
                        resolved.display(),
                        allowed.join(", ")
                    ),
                ));
            }
            Some(r) if r.read_only && !v.read_only() => {
                return Err(AppError::invalid(
                    &field,
                    format!("mounts from {} must be read-only: add `:ro`", r.path),
                ))
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// Host paths no job may mount, whatever the allowlist says: `/` itself, the parser's list with
/// everything below it, and every folder above one of them (`/var` holds the Docker socket) —
/// judged here on the resolved path.
fn forbidden(resolved: &Path) -> Option<&'static str> {
    if resolved == Path::new("/") {
        return Some("/");
    }
    FORBIDDEN_HOST.iter().copied().find(|n| {
        let n = PathBuf::from(n);
        resolved.starts_with(&n) || n.starts_with(resolved)
    })
}
