//! The fence taken apart, for `gpuq bench external`: each element of [`container_config`] alone
//! on top of a plain container, so what each costs dockerd can be timed. Every part is cut out of
//! the real config, so the bench sends the very options gpuq sends; a unit test checks that all
//! parts together are the whole fence, so a new option cannot slip past the bench unclassified.

use bollard::models::{ContainerCreateBody, HostConfig};

use super::container_config;
use crate::server::runtime::{LaunchMode, LaunchRequest, RuntimeError};

/// One element of the fence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FencePart {
    /// The job's network as the policy names it (gpuq's bridge without traffic between its
    /// containers, or `none`) instead of Docker's default bridge.
    Network,
    /// The read-only root filesystem and the tmpfs mounts over `/tmp` and the image's `VOLUME`s.
    ReadOnlyRoot,
    /// The job's own uid and gid instead of the image's user.
    User,
    /// The granted cards: their device nodes (simulated cards) or the NVIDIA device request.
    Devices,
    /// All capabilities dropped, no new privileges, the memory, process, CPU and `/dev/shm`
    /// limits, the log cap, no restart.
    Limits,
    /// The job's binds (as `Mounts` of type `bind`).
    Binds,
}

impl FencePart {
    /// Every part: together they are [`container_config`] in `Fenced` mode.
    pub const ALL: [FencePart; 6] = [
        FencePart::Network,
        FencePart::ReadOnlyRoot,
        FencePart::User,
        FencePart::Devices,
        FencePart::Limits,
        FencePart::Binds,
    ];
}

/// The create body of `req` with only `parts` of the fence: image, command, environment and
/// labels always; what no part names is left to Docker's defaults (the default bridge network,
/// a writable root, the image's user, no devices, no limits, no binds).
pub fn partial_config(
    req: &LaunchRequest,
    parts: &[FencePart],
) -> Result<ContainerCreateBody, RuntimeError> {
    let full = container_config(req, LaunchMode::Fenced)?;
    let hc = full.host_config.unwrap_or_default();
    let has = |p: FencePart| parts.contains(&p);
    let mut out = HostConfig {
        auto_remove: Some(false),
        ..Default::default()
    };
    if has(FencePart::Network) {
        out.network_mode = hc.network_mode;
    }
    if has(FencePart::ReadOnlyRoot) {
        out.readonly_rootfs = hc.readonly_rootfs;
        out.tmpfs = hc.tmpfs;
    }
    if has(FencePart::Devices) {
        out.devices = hc.devices;
        out.device_requests = hc.device_requests;
    }
    if has(FencePart::Limits) {
        out.privileged = hc.privileged;
        out.cap_drop = hc.cap_drop;
        out.security_opt = hc.security_opt;
        out.pids_limit = hc.pids_limit;
        out.memory = hc.memory;
        out.memory_swap = hc.memory_swap;
        out.nano_cpus = hc.nano_cpus;
        out.shm_size = hc.shm_size;
        out.log_config = hc.log_config;
        out.restart_policy = hc.restart_policy;
    }
    if has(FencePart::Binds) {
        out.mounts = hc.mounts;
    }
    Ok(ContainerCreateBody {
        image: full.image,
        cmd: full.cmd,
        env: full.env,
        labels: full.labels,
        user: if has(FencePart::User) {
            full.user
        } else {
            None
        },
        host_config: Some(out),
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::super::tests::{req, sim};
    use super::*;
    use crate::server::runtime::Mount;

    fn a_job() -> LaunchRequest {
        let mut r = req(vec![sim(1)]);
        r.mounts = vec![Mount {
            host: "/srv/data".into(),
            container: "/data".into(),
            read_only: true,
        }];
        r.image_volumes = vec!["/cache".into()];
        r
    }

    #[test]
    fn all_parts_together_are_the_whole_fence() {
        let r = a_job();
        let whole = container_config(&r, LaunchMode::Fenced).unwrap();
        assert_eq!(partial_config(&r, &FencePart::ALL).unwrap(), whole);
    }

    #[test]
    fn no_part_leaves_a_plain_container() {
        let r = a_job();
        let plain = partial_config(&r, &[]).unwrap();
        let whole = container_config(&r, LaunchMode::Fenced).unwrap();
        assert_eq!(plain.image, whole.image);
        assert_eq!(plain.cmd, whole.cmd);
        assert_eq!(plain.labels, whole.labels);
        assert_eq!(plain.user, None);
        let hc = plain.host_config.unwrap();
        assert_eq!(
            hc,
            HostConfig {
                auto_remove: Some(false),
                ..Default::default()
            }
        );
    }

    #[test]
    fn each_part_adds_only_its_own_options() {
        let r = a_job();
        let user = partial_config(&r, &[FencePart::User]).unwrap();
        assert_eq!(user.user.as_deref(), Some("200001:200001"));
        assert_eq!(user.host_config.unwrap().readonly_rootfs, None);
        let root = partial_config(&r, &[FencePart::ReadOnlyRoot]).unwrap();
        let hc = root.host_config.unwrap();
        assert_eq!(hc.readonly_rootfs, Some(true));
        assert_eq!(hc.tmpfs.unwrap().len(), 2, "/tmp and the image's VOLUME");
        assert_eq!(hc.cap_drop, None);
        let devices = partial_config(&r, &[FencePart::Devices]).unwrap();
        let hc = devices.host_config.unwrap();
        assert_eq!(hc.devices.unwrap().len(), 1);
        assert_eq!(hc.network_mode, None);
        let limits = partial_config(&r, &[FencePart::Limits]).unwrap();
        let hc = limits.host_config.unwrap();
        assert_eq!(hc.cap_drop, Some(vec!["ALL".to_string()]));
        assert_eq!(hc.mounts, None);
        let binds = partial_config(&r, &[FencePart::Binds]).unwrap();
        assert_eq!(binds.host_config.unwrap().mounts.unwrap().len(), 1);
        let net = partial_config(&r, &[FencePart::Network]).unwrap();
        assert_eq!(
            net.host_config.unwrap().network_mode.as_deref(),
            Some(crate::server::runtime::JOB_NETWORK)
        );
    }
}
