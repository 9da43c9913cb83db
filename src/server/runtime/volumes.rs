//! Host folders a job may mount: only inside the admin's allowlist, reached only through folders
//! nobody but root (or gpuq's own user) can change, and never the system's own folders, the
//! container runtime's sockets and state, or gpuq's own data.
//!
//! The check runs twice: at submit (so a member hears at once), and again on the runner node just
//! before the container is created ([`resolve_for_mount`]), against the launch policy as it is then.
//! Only the second one decides.
//!
//! **Why "reached only through locked folders".** dockerd hands runc a bind's source as a path,
//! and runc resolves it, following symlinks, when it mounts, after gpuq's check. Whoever can rename
//! an entry in any folder along that path can swap the checked folder for a symlink in between
//! (a member's own job can flip a folder in its own tree thousands of times a second), and the job
//! would get another host folder, `/` included. So a path is accepted only if every folder it
//! passes through (symlink targets included) can be changed by root or gpuq alone: owned by one of
//! them, and writable by nobody else (a sticky folder such as `/tmp` counts when the entry in it is
//! root's too). POSIX ACLs cannot widen that: a folder's group bits are its ACL mask. The mounted
//! folder itself may belong to the member: its contents change, the folder does not. Binding an
//! opened directory instead (`/proc/<pid>/fd/N`) is what Kubernetes does, but the kernel refuses to
//! bind a mount of another mount namespace, which every container's is (EINVAL from runc here), and
//! gpuq runs without the privilege to bind it first; Docker's own volume `subpath` needs Docker 26.
//! After the start the runner also compares the container's mount table with what it resolved
//! ([`crate::server::runtime::mount_check`]).

use crate::model::spec::{Volume, FORBIDDEN_HOST};
use crate::model::{AppError, VolumeRule};
use std::collections::VecDeque;
use std::ffi::OsString;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

/// Host paths no job may mount on any node, beyond the spec parser's list: all of `/run` (the
/// Docker and containerd sockets, systemd's and other daemons' sockets), the boot files, and the
/// container runtimes' own state (a node adds Docker's real `DockerRootDir` at start).
pub const NEVER_MOUNT: &[&str] = &[
    "/run",
    "/var/run",
    "/boot",
    "/var/lib/docker",
    "/var/lib/containerd",
    "/run/containerd/containerd.sock",
];

/// Symlinks followed in one path at most, as the kernel's own limit.
const MAX_SYMLINKS: usize = 40;

/// A volume the runner may bind: its host path resolved, inside the allowlist.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedVolume {
    /// The resolved host path, reached through locked folders only: what is bound.
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

/// Checks the allowlist's rules where the policy is saved: a rule that exists on this node must
/// be named by its resolved path and reached through locked folders only, so that nobody but root
/// can change later what it covers. A rule naming a path this node lacks is kept (another node
/// may have it); every node resolves each rule again at launch and ignores one that is not locked.
pub fn check_rules(allowlist: &[VolumeRule]) -> Result<(), AppError> {
    for (i, rule) in allowlist.iter().enumerate() {
        let field = format!("volume_allowlist[{i}]");
        let path = Path::new(&rule.path);
        if std::fs::symlink_metadata(path).is_err() {
            continue;
        }
        let resolved = resolve_locked(path).map_err(|m| AppError::invalid(&field, m))?;
        if resolved != path {
            return Err(AppError::invalid(
                field,
                format!(
                    "{} is reached through a symlink: give the folder it resolves to, {}",
                    rule.path,
                    resolved.display()
                ),
            ));
        }
        if let Some(bad) = forbidden(&resolved, &[]) {
            return Err(AppError::invalid(
                field,
                format!(
                    "{} holds or is inside {}, which jobs may never mount",
                    rule.path,
                    bad.display()
                ),
            ));
        }
    }
    Ok(())
}

/// Resolves every volume again where and when it is mounted, against the allowlist as it is now
/// and the never-mount list plus this node's own `never` paths (its Docker socket and data root,
/// gpuq's data folder). The error names the volume (`volumes[i]`, its host path) and what is wrong.
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
    let resolved = resolve_locked(Path::new(v.host()))
        .map_err(|m| format!("host path {} cannot be used: {m}", v.host()))?;
    if let Some(bad) = forbidden(&resolved, never) {
        return Err(format!(
            "host path {} resolves to {}, which jobs may never mount ({})",
            v.host(),
            resolved.display(),
            bad.display()
        ));
    }
    if allowlist.is_empty() {
        return Err("volumes are not allowed here: the admin's volume allowlist is empty".into());
    }
    match most_specific(&resolved, allowlist) {
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

/// The rule covering `resolved` with the longest root: a read-only rule for `/data/secure` wins
/// over a read-write one for `/data`, whatever their order. A rule whose own path is not locked,
/// or does not exist on this node, covers nothing here.
fn most_specific<'a>(resolved: &Path, allowlist: &'a [VolumeRule]) -> Option<&'a VolumeRule> {
    allowlist
        .iter()
        .filter_map(|r| {
            let root = resolve_locked(Path::new(&r.path)).ok()?;
            resolved
                .starts_with(&root)
                .then(|| (root.components().count(), r))
        })
        .max_by_key(|(depth, _)| *depth)
        .map(|(_, r)| r)
}

/// Resolves `path` like the kernel would, symlinks included, but only through folders that
/// nobody except root and gpuq's own user can change (see the module's doc). The error names the
/// first folder that someone else could change, and who.
pub fn resolve_locked(path: &Path) -> Result<PathBuf, String> {
    if !path.is_absolute() {
        return Err(format!("{} is not an absolute path", path.display()));
    }
    let trusted = nix::unistd::geteuid().as_raw();
    let mut todo: VecDeque<OsString> = parts(path);
    let mut at = PathBuf::from("/");
    let mut hops = 0;
    while let Some(name) = todo.pop_front() {
        if name == ".." {
            at.pop();
            continue;
        }
        let next = at.join(&name);
        let parent =
            std::fs::symlink_metadata(&at).map_err(|e| format!("{}: {e}", at.display()))?;
        let swappable = |who: String| {
            format!(
                "{} can be changed by {who}, so {} in it could be swapped for a symlink \
                 between gpuq's check and the mount; mount a folder that only root can rename \
                 (every folder above it root's and not writable by others), such as {} itself \
                 if the folder holding it is root's",
                at.display(),
                name.to_string_lossy(),
                at.display()
            )
        };
        // The folder first: whatever its entry is this instant (a symlink, or nothing at all in
        // the middle of a swap), what matters is whether someone else could change it.
        if let Some(who) = changeable_by(&parent, None, trusted) {
            return Err(swappable(who));
        }
        let meta =
            std::fs::symlink_metadata(&next).map_err(|e| format!("{}: {e}", next.display()))?;
        if let Some(who) = changeable_by(&parent, Some(&meta), trusted) {
            return Err(swappable(who));
        }
        if meta.file_type().is_symlink() {
            hops += 1;
            if hops > MAX_SYMLINKS {
                return Err(format!("{}: too many levels of symlinks", path.display()));
            }
            let target =
                std::fs::read_link(&next).map_err(|e| format!("{}: {e}", next.display()))?;
            if target.is_absolute() {
                at = PathBuf::from("/");
            }
            for part in parts(&target).into_iter().rev() {
                todo.push_front(part);
            }
        } else if meta.is_dir() || todo.is_empty() {
            at = next;
        } else {
            return Err(format!("{} is not a folder", next.display()));
        }
    }
    Ok(at)
}

/// The named parts of a path, `.` dropped and `..` kept (it is resolved against what came before).
fn parts(path: &Path) -> VecDeque<OsString> {
    path.components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_os_string()),
            Component::ParentDir => Some(OsString::from("..")),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => None,
        })
        .collect()
}

/// Who besides root and `trusted` could rename or replace `entry` in the folder `dir`: the
/// folder's owner, or the group or everyone through its mode (a sticky folder only lets them
/// touch their own entries, so there the entry's owner counts; `None` asks about the folder
/// alone).
fn changeable_by(
    dir: &std::fs::Metadata,
    entry: Option<&std::fs::Metadata>,
    trusted: u32,
) -> Option<String> {
    let ours = |uid: u32| uid == 0 || uid == trusted;
    if !ours(dir.uid()) {
        return Some(format!("its owner (uid {})", dir.uid()));
    }
    let mode = dir.mode();
    let sticky = mode & 0o1000 != 0;
    if let Some(entry) = entry.filter(|e| sticky && !ours(e.uid())) {
        return Some(format!(
            "the entry's owner (uid {}) in a sticky folder",
            entry.uid()
        ));
    }
    if !sticky && mode & 0o002 != 0 {
        return Some(format!("everyone (mode {:o})", mode & 0o7777));
    }
    if !sticky && mode & 0o020 != 0 {
        return Some(format!(
            "its group (gid {}, mode {:o})",
            dir.gid(),
            mode & 0o7777
        ));
    }
    None
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

    fn rule(path: &Path, read_only: bool) -> VolumeRule {
        VolumeRule {
            path: path.to_str().unwrap().to_owned(),
            read_only,
        }
    }

    fn mkdir(path: &Path, mode: u32, uid: u32) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        std::fs::create_dir_all(path).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
        nix::unistd::chown(path, Some(nix::unistd::Uid::from_raw(uid)), None).unwrap();
        path.to_path_buf()
    }

    /// One volume as a spec carries it.
    fn vol(text: &str) -> Volume {
        let spec = serde_json::json!({
            "image": "busybox", "command": ["true"], "gpu_count": 0, "volumes": [text],
        });
        let limits = crate::model::spec::SpecLimits::default();
        let spec = crate::model::spec::JobSpec::from_json(&spec.to_string(), &limits).unwrap();
        spec.volumes()[0].clone()
    }

    fn is_root() -> bool {
        nix::unistd::geteuid().is_root()
    }

    #[test]
    fn a_folder_below_one_a_member_owns_is_refused() {
        assert!(
            is_root(),
            "these volume tests create folders owned by other uids and must run as root"
        );
        let t = tempfile::tempdir().unwrap();
        let root = mkdir(&t.path().join("scratch"), 0o755, 0);
        let alice = mkdir(&root.join("alice"), 0o755, 4242);
        let proj = mkdir(&alice.join("proj"), 0o755, 4242);
        assert_eq!(
            resolve_locked(&alice).unwrap(),
            alice,
            "her own folder is fine"
        );
        let err = resolve_locked(&proj).unwrap_err();
        assert!(err.contains("uid 4242") && err.contains("proj"), "{err}");
        // Writable by group or everyone: the same, whoever owns it.
        let open = mkdir(&root.join("open"), 0o777, 0);
        let inner = mkdir(&open.join("inner"), 0o755, 0);
        assert!(resolve_locked(&inner).unwrap_err().contains("everyone"));
        let team = mkdir(&root.join("team"), 0o775, 0);
        let x = mkdir(&team.join("x"), 0o755, 0);
        assert!(resolve_locked(&x).unwrap_err().contains("its group"));
        // Sticky and world-writable (like /tmp): root's entries are locked, a member's are not.
        let tmp = mkdir(&root.join("tmp"), 0o1777, 0);
        let roots = mkdir(&tmp.join("roots"), 0o755, 0);
        let hers = mkdir(&tmp.join("hers"), 0o755, 4242);
        assert_eq!(resolve_locked(&roots).unwrap(), roots);
        assert!(resolve_locked(&hers).unwrap_err().contains("sticky"));
    }

    #[test]
    fn symlinks_are_followed_only_through_locked_folders() {
        assert!(
            is_root(),
            "these volume tests create folders owned by other uids and must run as root"
        );
        let t = tempfile::tempdir().unwrap();
        let root = mkdir(&t.path().join("data"), 0o755, 0);
        let real = mkdir(&root.join("real"), 0o755, 4242);
        // A root-owned link in a root-owned folder: followed, to the folder it names.
        std::os::unix::fs::symlink("real", root.join("link")).unwrap();
        assert_eq!(resolve_locked(&root.join("link")).unwrap(), real);
        assert_eq!(resolve_locked(&root.join("real/../link")).unwrap(), real);
        // A link a member could replace (in her own folder) is refused before it is read.
        std::os::unix::fs::symlink("/", real.join("up")).unwrap();
        let err = resolve_locked(&real.join("up")).unwrap_err();
        assert!(err.contains("uid 4242"), "{err}");
        // A loop ends with an error, not a hang.
        std::os::unix::fs::symlink("loop", root.join("loop")).unwrap();
        assert!(resolve_locked(&root.join("loop"))
            .unwrap_err()
            .contains("too many levels"));
        assert!(resolve_locked(Path::new("relative/path")).is_err());
        assert!(resolve_locked(&root.join("missing")).is_err());
    }

    #[test]
    fn the_most_specific_rule_wins_whatever_the_order() {
        assert!(
            is_root(),
            "these volume tests create folders owned by other uids and must run as root"
        );
        let t = tempfile::tempdir().unwrap();
        let data = mkdir(&t.path().join("data"), 0o755, 0);
        let secure = mkdir(&data.join("secure"), 0o755, 0);
        let inside = mkdir(&secure.join("x"), 0o755, 0);
        let allow = [rule(&data, false), rule(&secure, true)];
        let rw = vol(&format!("{}:/x", inside.display()));
        let err = resolve_one(&rw, &allow, &[]).unwrap_err();
        assert!(err.contains("read-only"), "{err}");
        let reversed = [rule(&secure, true), rule(&data, false)];
        assert!(resolve_one(&rw, &reversed, &[]).is_err());
        let ro = vol(&format!("{}:/x:ro", inside.display()));
        let got = resolve_one(&ro, &allow, &[]).unwrap();
        assert_eq!(got.host, inside);
        // The broader rule still lets the rest of /data be written.
        let other = mkdir(&data.join("other"), 0o755, 0);
        let rw2 = vol(&format!("{}:/x", other.display()));
        assert!(resolve_one(&rw2, &allow, &[]).is_ok());
    }

    #[test]
    fn rules_are_saved_resolved_and_locked() {
        assert!(
            is_root(),
            "these volume tests create folders owned by other uids and must run as root"
        );
        let t = tempfile::tempdir().unwrap();
        let data = mkdir(&t.path().join("data"), 0o755, 0);
        std::os::unix::fs::symlink(&data, t.path().join("alias")).unwrap();
        assert!(check_rules(&[rule(&data, false)]).is_ok());
        let e = check_rules(&[rule(&t.path().join("alias"), false)]).unwrap_err();
        assert!(format!("{e:?}").contains("resolves to"), "{e:?}");
        let hers = mkdir(&data.join("hers"), 0o755, 4242);
        let inside = mkdir(&hers.join("inside"), 0o755, 4242);
        let e = check_rules(&[rule(&data, false), rule(&inside, false)]).unwrap_err();
        assert!(format!("{e:?}").contains("volume_allowlist[1]"), "{e:?}");
        // Not on this node: kept for the nodes that have it.
        assert!(check_rules(&[rule(&t.path().join("elsewhere"), false)]).is_ok());
    }
}
