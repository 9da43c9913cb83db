//! Simulated GPU device nodes, so GPU isolation can be demonstrated and tested
//! on hosts without NVIDIA hardware: a container fenced to `/dev/gpuq-sim1`
//! must see that node and no other.

use std::io::ErrorKind;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};

use nix::sys::stat::{makedev, mknod, Mode, SFlag};
use nix::unistd::geteuid;

use super::fence::SIM_DEVICE_PREFIX;
use super::RuntimeError;

/// Major/minor of `/dev/null`: harmless if a job opens the node.
const SIM_MAJOR: u64 = 1;
const SIM_MINOR: u64 = 3;

/// Path of simulated card `n`.
pub fn sim_device_path(n: usize) -> PathBuf {
    PathBuf::from(format!("{SIM_DEVICE_PREFIX}{n}"))
}

/// Creates `/dev/gpuq-sim0..count-1` (character devices, mode 0666) where
/// missing and returns their paths. Existing nodes are kept if they are
/// character devices; anything else at those paths is an error rather than
/// something to delete. Requires root.
pub fn ensure_sim_devices(count: usize) -> Result<Vec<PathBuf>, RuntimeError> {
    if !geteuid().is_root() {
        return Err(RuntimeError::SimDevice(format!(
            "creating {SIM_DEVICE_PREFIX}<N> needs root (euid {})",
            geteuid()
        )));
    }
    (0..count)
        .map(|n| {
            let path = sim_device_path(n);
            ensure_one(&path)?;
            Ok(path)
        })
        .collect()
}

/// Makes one node, tolerating a concurrent creator.
fn ensure_one(path: &Path) -> Result<(), RuntimeError> {
    let err = |what: &str, e: &dyn std::fmt::Display| {
        RuntimeError::SimDevice(format!("{what} {}: {e}", path.display()))
    };
    let mode = Mode::from_bits_truncate(0o666);
    match mknod(path, SFlag::S_IFCHR, mode, makedev(SIM_MAJOR, SIM_MINOR)) {
        Ok(()) | Err(nix::errno::Errno::EEXIST) => {}
        Err(e) => return Err(err("mknod", &e)),
    }
    let meta = std::fs::symlink_metadata(path).map_err(|e| match e.kind() {
        ErrorKind::NotFound => err("vanished after mknod", &e),
        _ => err("stat", &e),
    })?;
    if !meta.file_type().is_char_device() {
        return Err(RuntimeError::SimDevice(format!(
            "{} exists but is not a character device",
            path.display()
        )));
    }
    // mknod honours the umask; make the mode exactly 0666.
    if meta.permissions().mode() & 0o777 != 0o666 {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))
            .map_err(|e| err("chmod", &e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_follow_the_fence_prefix() {
        assert_eq!(sim_device_path(7), PathBuf::from("/dev/gpuq-sim7"));
    }

    #[test]
    fn creates_char_devices_when_root() {
        if !geteuid().is_root() {
            assert!(matches!(
                ensure_sim_devices(1),
                Err(RuntimeError::SimDevice(_))
            ));
            return;
        }
        let paths = ensure_sim_devices(2).unwrap();
        assert_eq!(paths, vec![sim_device_path(0), sim_device_path(1)]);
        for p in &paths {
            let meta = std::fs::metadata(p).unwrap();
            assert!(meta.file_type().is_char_device());
            assert_eq!(meta.permissions().mode() & 0o777, 0o666);
        }
        // Idempotent.
        assert_eq!(ensure_sim_devices(2).unwrap(), paths);
    }
}
