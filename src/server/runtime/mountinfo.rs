//! What a started container really got at each bind, read from its mount table
//! (`/proc/<pid>/mountinfo`, which any user may read), against where the runner resolved the
//! folder: the same filesystem (`major:minor`) and the same path from that filesystem's root.
//! A second line of defence after the runner's locked-path resolution (`runtime::volumes`): a
//! container whose bind shows any other folder is stopped before it is reported running.

use std::path::{Component, Path, PathBuf};

/// Where a folder lives: its filesystem and its path from that filesystem's root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FolderOrigin {
    /// `major:minor` of the filesystem, as the mount table writes it.
    pub device: String,
    /// The folder's path from the root of that filesystem.
    pub root: PathBuf,
}

impl std::fmt::Display for FolderOrigin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} on device {}", self.root.display(), self.device)
    }
}

/// One line of a mount table.
#[derive(Debug)]
struct Entry {
    device: String,
    root: PathBuf,
    mount_point: PathBuf,
}

/// The lines of a mount table, in order (a later mount covers an earlier one at the same place).
fn parse(table: &str) -> Vec<Entry> {
    table
        .lines()
        .filter_map(|line| {
            let mut fields = line.split(' ');
            let (_id, _parent) = (fields.next()?, fields.next()?);
            let device = fields.next()?.to_owned();
            let root = PathBuf::from(unescape(fields.next()?));
            let mount_point = PathBuf::from(unescape(fields.next()?));
            Some(Entry {
                device,
                root,
                mount_point,
            })
        })
        .collect()
}

/// Undoes the kernel's octal escapes (`\040` for a space, `\134` for a backslash, …).
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| bytes[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match octal {
            Some(d) => {
                let v = d.iter().fold(0u32, |acc, c| acc * 8 + u32::from(c - b'0'));
                out.push(u8::try_from(v).unwrap_or(b'?'));
                i += 4;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Where `path` (absolute, symlinks resolved) lives according to the mount table `table`: the
/// last mount whose mount point holds it, and the path below that mount's root.
pub fn origin_in(table: &str, path: &Path) -> Option<FolderOrigin> {
    let entries = parse(table);
    let (_, e) = entries
        .iter()
        .enumerate()
        .filter(|(_, e)| path.starts_with(&e.mount_point))
        .max_by_key(|(i, e)| (e.mount_point.components().count(), *i))?;
    let below = path.strip_prefix(&e.mount_point).ok()?;
    Some(FolderOrigin {
        device: e.device.clone(),
        root: normal(&e.root.join(below)),
    })
}

/// `path` without `.` parts or a trailing slash.
fn normal(path: &Path) -> PathBuf {
    path.components()
        .filter(|c| !matches!(c, Component::CurDir))
        .collect()
}

/// What is mounted at `destination` in the mount table `table` (the last mount there).
pub fn mounted_at(table: &str, destination: &str) -> Option<FolderOrigin> {
    let want = normal(Path::new(destination));
    parse(table)
        .into_iter()
        .rfind(|e| e.mount_point == want)
        .map(|e| FolderOrigin {
            device: e.device,
            root: normal(&e.root),
        })
}

/// Where each of `paths` lives, from this process's own mount table (read once).
pub fn origins_of<'a>(
    paths: impl IntoIterator<Item = &'a Path>,
) -> Result<Vec<FolderOrigin>, String> {
    let table = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| format!("reading /proc/self/mountinfo: {e}"))?;
    paths
        .into_iter()
        .map(|path| {
            origin_in(&table, path)
                .ok_or_else(|| format!("{} is on no mount this process sees", path.display()))
        })
        .collect()
}

/// Why a container's binds could not be confirmed.
#[derive(Debug, PartialEq, Eq)]
pub enum MountCheck {
    /// Its mount table could not be read: the process is gone (the job ended already).
    Unreadable(String),
    /// A bind shows another folder than the one resolved: (container path, what it shows).
    Differs(String),
}

/// Compares the binds of the container whose first process is `pid` with `want` (container
/// path, where the runner resolved its folder).
pub fn check(pid: i64, want: &[(String, FolderOrigin)]) -> Result<(), MountCheck> {
    let table = std::fs::read_to_string(format!("/proc/{pid}/mountinfo"))
        .map_err(|e| MountCheck::Unreadable(format!("/proc/{pid}/mountinfo: {e}")))?;
    compare(&table, want)
}

/// [`check`] on a mount table already read.
pub fn compare(table: &str, want: &[(String, FolderOrigin)]) -> Result<(), MountCheck> {
    for (destination, origin) in want {
        match mounted_at(table, destination) {
            Some(got) if &got == origin => {}
            Some(got) => {
                return Err(MountCheck::Differs(format!(
                    "{destination} shows {got}, not the folder gpuq checked ({origin})"
                )))
            }
            None => {
                return Err(MountCheck::Differs(format!(
                    "nothing is mounted at {destination} (gpuq checked {origin})"
                )))
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOST: &str = "\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
30 22 8:17 / /scratch rw,relatime shared:5 - xfs /dev/sdb1 rw
31 22 8:17 /teams/a /srv/team\\040a rw,relatime shared:5 - xfs /dev/sdb1 rw
40 22 0:50 / /scratch/nfs rw - nfs srv:/x rw
";

    fn origin(device: &str, root: &str) -> FolderOrigin {
        FolderOrigin {
            device: device.into(),
            root: root.into(),
        }
    }

    #[test]
    fn a_folder_is_placed_on_the_deepest_mount_holding_it() {
        let at = |p: &str| origin_in(HOST, Path::new(p)).unwrap();
        assert_eq!(at("/home/alice"), origin("8:1", "/home/alice"));
        assert_eq!(at("/scratch/alice/x"), origin("8:17", "/alice/x"));
        assert_eq!(at("/scratch"), origin("8:17", "/"));
        assert_eq!(at("/scratch/nfs/d"), origin("0:50", "/d"));
        // A bind mount (root below its filesystem's root), with an escaped space.
        assert_eq!(at("/srv/team a/run"), origin("8:17", "/teams/a/run"));
        // Not a prefix by characters: /scratchy is on /.
        assert_eq!(at("/scratchy"), origin("8:1", "/scratchy"));
    }

    #[test]
    fn a_containers_bind_must_show_the_resolved_folder() {
        let container = "\
75 51 0:40 / / rw - overlay overlay rw
80 75 8:17 /alice/x /data rw,relatime - xfs /dev/sdb1 rw
81 75 8:1 / /swapped rw,relatime - ext4 /dev/sda1 rw
";
        let want = |d: &str, dev: &str, root: &str| vec![(d.to_string(), origin(dev, root))];
        assert_eq!(
            compare(container, &want("/data", "8:17", "/alice/x")),
            Ok(())
        );
        assert_eq!(
            compare(container, &want("/data/", "8:17", "/alice/x")),
            Ok(())
        );
        // The host root where /scratch/alice/x was checked: refused, naming both.
        let got = compare(container, &want("/swapped", "8:17", "/alice/x")).unwrap_err();
        assert!(
            matches!(&got, MountCheck::Differs(m) if m.contains("/ on device 8:1") && m.contains("/alice/x")),
            "{got:?}"
        );
        // Same path on another filesystem, or nothing there at all.
        assert!(compare(container, &want("/data", "8:1", "/alice/x")).is_err());
        assert!(compare(container, &want("/elsewhere", "8:17", "/alice/x")).is_err());
    }

    #[test]
    fn escapes_are_undone() {
        assert_eq!(unescape("a\\040b\\134c\\011"), "a b\\c\t");
        assert_eq!(unescape("plain\\x"), "plain\\x");
    }
}
