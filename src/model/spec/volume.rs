//! Bind mounts, checked lexically. The server additionally resolves
//! symlinks and applies the admin allowlist; this layer only refuses what
//! is wrong whatever the host looks like, so the front end can say so early.

use std::collections::BTreeMap;
use std::fmt;

use super::SpecError;

/// Longest path accepted on either side (Linux `PATH_MAX`).
const MAX_PATH_BYTES: usize = 4096;

/// Host paths that give away the host: system trees and the Docker socket (and everything below
/// them). The server applies the same list again after resolving symlinks.
pub const FORBIDDEN_HOST: &[&str] = &[
    "/proc",
    "/sys",
    "/dev",
    "/etc",
    "/run/docker.sock",
    "/var/run/docker.sock",
];
/// Container paths the runtime itself mounts; shadowing them breaks or
/// subverts the container.
const FORBIDDEN_CONTAINER: &[&str] = &["/proc", "/sys", "/dev"];

/// A bind mount whose paths are absolute, normalized and lexically safe.
/// Only obtainable from a parsed [`super::JobSpec`], so fields are private.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Volume {
    host: String,
    container: String,
    read_only: bool,
}

impl Volume {
    /// Host side, normalized (no `//`, `.`, or trailing `/`).
    pub fn host(&self) -> &str {
        &self.host
    }
    /// Container side, normalized like the host side.
    pub fn container(&self) -> &str {
        &self.container
    }
    /// Whether the job must not write through this mount.
    pub fn read_only(&self) -> bool {
        self.read_only
    }
}

impl fmt::Display for Volume {
    /// The wire form, so a volume can be resubmitted unchanged.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.host, self.container)?;
        if self.read_only {
            f.write_str(":ro")?;
        }
        Ok(())
    }
}

/// Whether `path` is `root` or inside it (both normalized).
fn is_within(path: &str, root: &str) -> bool {
    path == root || path.strip_prefix(root).is_some_and(|r| r.starts_with('/'))
}

fn normalize(side: &str, path: &str) -> Result<String, String> {
    if !path.starts_with('/') {
        return Err(format!(
            "{side} path `{path}` must be absolute (start with /)"
        ));
    }
    if path.len() > MAX_PATH_BYTES {
        return Err(format!("{side} path is longer than {MAX_PATH_BYTES} bytes"));
    }
    let mut out = String::with_capacity(path.len());
    for component in path.split('/') {
        match component {
            "" | "." => {}
            ".." => return Err(format!("{side} path `{path}` must not contain `..`")),
            c => {
                out.push('/');
                out.push_str(c);
            }
        }
    }
    if out.is_empty() {
        out.push('/');
    }
    Ok(out)
}

fn parse_volume(spec: &str) -> Result<Volume, String> {
    if spec.contains('\0') {
        return Err("volume contains a NUL character".to_owned());
    }
    let parts: Vec<&str> = spec.split(':').collect();
    let (host, container, read_only) = match parts.as_slice() {
        [host, container] => (*host, *container, false),
        [host, container, "ro"] => (*host, *container, true),
        [host, container, "rw"] => (*host, *container, false),
        [_, _, mode] => {
            return Err(format!("volume mode must be ro or rw, not `{mode}`"));
        }
        _ => {
            return Err(format!(
                "volume `{spec}` must look like /host/path:/container/path, optionally \
                 followed by :ro or :rw"
            ));
        }
    };
    let host = normalize("host", host)?;
    let container = normalize("container", container)?;
    if host == "/" {
        return Err("host path must not be / (the whole host filesystem)".to_owned());
    }
    if let Some(root) = FORBIDDEN_HOST.iter().find(|root| is_within(&host, root)) {
        return Err(format!(
            "host path {host} is not allowed: {root} belongs to the host system"
        ));
    }
    // Mounting a parent of the Docker socket exposes the socket too.
    if let Some(root) = FORBIDDEN_HOST.iter().find(|root| is_within(root, &host)) {
        return Err(format!(
            "host path {host} is not allowed: it contains {root}"
        ));
    }
    if container == "/" {
        return Err(
            "container path must not be / (it would replace the container's root)".to_owned(),
        );
    }
    if let Some(root) = FORBIDDEN_CONTAINER
        .iter()
        .find(|root| is_within(&container, root))
    {
        return Err(format!(
            "container path {container} is not allowed: the container runtime manages {root}"
        ));
    }
    Ok(Volume {
        host,
        container,
        read_only,
    })
}

pub(super) fn parse_volumes(
    volumes: Vec<String>,
    max_volumes: usize,
) -> Result<Vec<Volume>, SpecError> {
    SpecError::at_most("volumes", "entries", volumes.len(), max_volumes)?;
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = Vec::with_capacity(volumes.len());
    for (i, spec) in volumes.iter().enumerate() {
        let field = format!("volumes[{i}]");
        let volume = parse_volume(spec).map_err(|m| SpecError::new(&field, m))?;
        if let Some(first) = seen.insert(volume.container.clone(), i) {
            return Err(SpecError::new(
                field,
                format!(
                    "container path {} is already used by volumes[{first}]",
                    volume.container
                ),
            ));
        }
        out.push(volume);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vols(specs: &[&str]) -> Result<Vec<Volume>, SpecError> {
        parse_volumes(specs.iter().map(|s| s.to_string()).collect(), 8)
    }

    #[test]
    fn parses_and_normalizes() {
        let cases: &[(&str, &str, &str, bool)] = &[
            ("/data:/data", "/data", "/data", false),
            ("/data:/data:ro", "/data", "/data", true),
            ("/data:/data:rw", "/data", "/data", false),
            ("//srv//x/./y/:/mnt/./in//:ro", "/srv/x/y", "/mnt/in", true),
            ("/home/u/etc:/work/proc", "/home/u/etc", "/work/proc", false),
            ("/etcetera:/devices", "/etcetera", "/devices", false),
            ("/run/user/1000:/procfs", "/run/user/1000", "/procfs", false),
            ("/var/lib/data:/mnt", "/var/lib/data", "/mnt", false),
        ];
        for (spec, host, container, ro) in cases {
            let v = vols(&[spec]);
            let v = v.as_deref().map(|v| &v[0]);
            assert_eq!(v.map(Volume::host), Ok(*host), "{spec}");
            assert_eq!(v.map(Volume::container), Ok(*container), "{spec}");
            assert_eq!(v.map(Volume::read_only), Ok(*ro), "{spec}");
        }
    }

    #[test]
    fn display_is_reparseable() {
        let v = vols(&["/a//b/:/c/./d:ro", "/x:/y:rw"]).unwrap_or_default();
        let shown: Vec<String> = v.iter().map(Volume::to_string).collect();
        assert_eq!(shown, ["/a/b:/c/d:ro", "/x:/y"]);
        let again = parse_volumes(shown, 8);
        assert_eq!(again, Ok(v));
    }

    #[test]
    fn refusals() {
        let long = format!("/{}", "a".repeat(MAX_PATH_BYTES));
        let long_spec = format!("{long}:/x");
        let cases: &[(&str, &str)] = &[
            ("/data", "must look like"),
            ("/a:/b:ro:x", "must look like"),
            ("", "must look like"),
            ("/a:/b:RO", "mode must be ro or rw"),
            ("/a:/b:", "mode must be ro or rw"),
            ("data:/data", "host path `data` must be absolute"),
            ("/data:data", "container path `data` must be absolute"),
            (":/data", "must be absolute"),
            ("/a/../etc:/x", "must not contain `..`"),
            ("/a:/b/..", "must not contain `..`"),
            ("/a\0:/b", "NUL"),
            (&long_spec, "longer than 4096"),
            ("/:/host", "must not be /"),
            ("//./:/host", "must not be /"),
            ("/proc:/x", "not allowed"),
            ("/proc/1/root:/x", "not allowed"),
            ("/sys/fs:/x", "not allowed"),
            ("/dev:/x", "not allowed"),
            ("/dev/nvidia0:/x", "not allowed"),
            ("/etc:/x", "not allowed"),
            ("/etc/shadow:/x:ro", "not allowed"),
            ("//etc/./:/x", "not allowed"),
            ("/run/docker.sock:/x", "not allowed"),
            ("/var/run/docker.sock:/x", "not allowed"),
            ("/var/run:/x", "contains /var/run/docker.sock"),
            ("/var:/x", "contains /var/run/docker.sock"),
            ("/run:/x", "contains /run/docker.sock"),
            ("/data:/", "must not be /"),
            ("/data:/./", "must not be /"),
            ("/data:/proc", "runtime manages /proc"),
            ("/data:/sys/x", "runtime manages /sys"),
            ("/data:/dev/shm", "runtime manages /dev"),
        ];
        for (spec, needle) in cases {
            match vols(&["/ok:/ok", spec]) {
                Ok(v) => panic!("accepted {spec:?} as {v:?}"),
                Err(e) => {
                    assert_eq!(e.field, "volumes[1]", "{spec:?}");
                    assert!(e.message.contains(needle), "{spec:?}: {}", e.message);
                }
            }
        }
    }

    #[test]
    fn refuses_duplicate_container_paths_after_normalizing() {
        let e = vols(&["/a:/data", "/b:/x", "/c:/data/"]).err();
        assert_eq!(
            e,
            Some(SpecError::new(
                "volumes[2]",
                "container path /data is already used by volumes[0]"
            ))
        );
    }

    #[test]
    fn refuses_too_many() {
        let specs: Vec<String> = (0..3).map(|i| format!("/h{i}:/c{i}")).collect();
        assert!(parse_volumes(specs.clone(), 3).is_ok());
        let e = parse_volumes(specs, 2).err();
        assert_eq!(e.map(|e| e.field), Some("volumes".to_owned()));
    }
}
