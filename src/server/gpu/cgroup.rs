//! Which container a host process belongs to, from its `/proc/<pid>/cgroup`.
//!
//! Docker puts each container's processes in a cgroup named after the container's 64-hex id. The
//! name differs by cgroup version and driver, so the id is looked for in every path:
//! - cgroup v2, systemd driver: `0::/system.slice/docker-<id>.scope`
//! - cgroup v2, cgroupfs driver: `0::/docker/<id>`
//! - cgroup v1, systemd driver: `4:memory:/system.slice/docker-<id>.scope` (one line per controller)
//! - cgroup v1, cgroupfs driver: `4:memory:/docker/<id>`
//!
//! Nested paths (Docker in Docker, a kubepods slice) hold more than one id; the innermost (the
//! last) is the process's own container.

use std::path::Path;

/// Docker's container id in one `/proc/<pid>/cgroup` text, if the process is in a container.
pub fn container_of(cgroup: &str) -> Option<String> {
    cgroup.lines().find_map(|line| {
        // hierarchy-ID:controller-list:cgroup-path; the path may itself contain ':'.
        let path = line.splitn(3, ':').nth(2)?;
        path.split('/').rev().find_map(id_in_component)
    })
}

/// The 64-hex id in one path component: `<id>`, `docker-<id>.scope`, `<runtime>-<id>.scope`.
fn id_in_component(component: &str) -> Option<String> {
    let name = component.strip_suffix(".scope").unwrap_or(component);
    let id = name.rsplit('-').next()?;
    (id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit())).then(|| id.to_ascii_lowercase())
}

/// The container of host process `pid`, read under `proc_root` (normally `/proc`). `None` when
/// the process is gone, unreadable, or in no container.
pub fn container_of_pid(proc_root: &Path, pid: u32) -> Option<String> {
    let text = std::fs::read_to_string(proc_root.join(pid.to_string()).join("cgroup")).ok()?;
    container_of(&text)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "3f1c0a9e5b7d2c4e6f8a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e";

    #[test]
    fn cgroup_v2_with_either_driver() {
        assert_eq!(
            container_of(&format!("0::/system.slice/docker-{ID}.scope\n")).as_deref(),
            Some(ID)
        );
        assert_eq!(
            container_of(&format!("0::/docker/{ID}\n")).as_deref(),
            Some(ID)
        );
    }

    #[test]
    fn cgroup_v1_with_either_driver() {
        let systemd = format!(
            "12:pids:/system.slice/docker-{ID}.scope\n11:memory:/system.slice/docker-{ID}.scope\n\
             1:name=systemd:/system.slice/docker-{ID}.scope\n0::/\n"
        );
        assert_eq!(container_of(&systemd).as_deref(), Some(ID));
        let cgroupfs = format!("12:cpu,cpuacct:/docker/{ID}\n3:devices:/docker/{ID}\n");
        assert_eq!(container_of(&cgroupfs).as_deref(), Some(ID));
    }

    #[test]
    fn the_innermost_of_nested_containers() {
        let outer = "a".repeat(64);
        let text = format!("0::/docker/{outer}/docker/{ID}\n");
        assert_eq!(container_of(&text).as_deref(), Some(ID));
        let kube = format!("0::/kubepods.slice/kubepods-pod1.slice/cri-containerd-{ID}.scope\n");
        assert_eq!(container_of(&kube).as_deref(), Some(ID));
    }

    #[test]
    fn processes_outside_containers_have_none() {
        assert_eq!(
            container_of("0::/user.slice/user-1000.slice/session-2.scope\n"),
            None
        );
        assert_eq!(container_of("0::/\n"), None);
        assert_eq!(container_of(""), None);
        assert_eq!(container_of("garbage"), None);
        // 63 or 65 hex digits, or non-hex: not an id.
        assert_eq!(container_of(&format!("0::/docker/{}\n", &ID[1..])), None);
        assert_eq!(container_of(&format!("0::/docker/{ID}0\n")), None);
        assert_eq!(
            container_of(&format!("0::/docker/{}\n", "g".repeat(64))),
            None
        );
    }

    #[test]
    fn read_from_a_proc_tree() {
        let root = std::env::temp_dir().join(format!("gpuq-proc-{}", std::process::id()));
        std::fs::create_dir_all(root.join("4242")).unwrap();
        std::fs::write(root.join("4242/cgroup"), format!("0::/docker/{ID}\n")).unwrap();
        assert_eq!(container_of_pid(&root, 4242).as_deref(), Some(ID));
        // A process that is gone has no container.
        assert_eq!(container_of_pid(&root, 4243), None);
        std::fs::remove_dir_all(&root).unwrap();
    }
}
