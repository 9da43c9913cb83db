use std::collections::BTreeMap;
use std::path::PathBuf;

use uuid::Uuid;

use super::*;
use crate::model::JobNetwork;
use crate::server::runtime::{GrantedGpu, Mount, MountFact, RunAs};

pub(super) const REAL_A: &str = "GPU-11111111-2222-3333-4444-555555555555";
pub(super) const REAL_B: &str = "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee";

pub(super) fn real(uuid: &str) -> GrantedGpu {
    GrantedGpu {
        uuid: uuid.to_string(),
        sim_device: None,
    }
}

pub(super) fn sim(n: u32) -> GrantedGpu {
    GrantedGpu {
        uuid: format!("GPU-5140{n:04}"),
        sim_device: Some(PathBuf::from(format!("/dev/gpuq-sim{n}"))),
    }
}

pub(super) fn req(gpus: Vec<GrantedGpu>) -> LaunchRequest {
    LaunchRequest {
        job_id: Uuid::new_v4(),
        attempt: 2,
        node: "node-a".into(),
        installation: Some("inst-a".into()),
        image: "img:1".into(),
        argv: vec!["python".into(), "train.py".into(), "--lr=0.1 ; rm".into()],
        env: BTreeMap::from([("FOO".into(), "bar".into())]),
        framework_env: BTreeMap::new(),
        mounts: vec![],
        gpus,
        memory_limit_mib: 512,
        pids_limit: 100,
        log_max_bytes: 1 << 20,
        run_as: RunAs::User {
            uid: 200_001,
            gid: 200_001,
        },
        nano_cpus: Some(1_500_000_000),
        shm_mib: 2048,
        tmp_mib: Some(1024),
        network: JobNetwork::Isolated,
        image_volumes: Vec::new(),
        array_index: None,
        session_port: None,
    }
}

/// The `/tmp` a job of [`req`] gets: 1024 MiB, programs built there may run, and its uid may
/// write there whatever mode the image's own `/tmp` has.
pub(super) const TMP_OPTIONS: &str =
    "rw,exec,nosuid,nodev,size=1024m,mode=1777,uid=200001,gid=200001";

pub(super) fn host(cfg: &ContainerCreateBody) -> &HostConfig {
    cfg.host_config.as_ref().unwrap()
}

pub(super) fn env_of(cfg: &ContainerCreateBody) -> Vec<String> {
    cfg.env.clone().unwrap()
}

pub(super) fn facts_for(r: &LaunchRequest) -> ContainerFacts {
    ContainerFacts {
        id: "c1".into(),
        devices: r
            .gpus
            .iter()
            .filter_map(|g| g.sim_device.clone())
            .map(|p| p.to_string_lossy().into_owned())
            .collect(),
        gpu_device_ids: r
            .gpus
            .iter()
            .filter(|g| g.sim_device.is_none())
            .map(|g| g.uuid.clone())
            .collect(),
        labels: labels(r).into_iter().collect(),
        mounts: r
            .mounts
            .iter()
            .map(|m| MountFact {
                kind: "bind".into(),
                source: m.host.clone(),
                destination: m.container.clone(),
                read_only: m.read_only,
            })
            .collect(),
        user: r.run_as.docker_user().unwrap_or_default(),
        network_mode: network_mode(r.network).into(),
        networks: vec![network_mode(r.network).into()],
        nano_cpus: r.nano_cpus.unwrap_or(0),
        shm_size: r.shm_mib as i64 * 1024 * 1024,
        memory: r.memory_limit_mib as i64 * 1024 * 1024,
        memory_swap: r.memory_limit_mib as i64 * 1024 * 1024,
        pids_limit: r.pids_limit,
        readonly_rootfs: r.tmp_mib.is_some(),
        tmpfs: r
            .tmp_mib
            .map(|_| BTreeMap::from([("/tmp".to_string(), TMP_OPTIONS.to_string())]))
            .unwrap_or_default(),
        ..Default::default()
    }
}

pub(super) fn violation(r: Result<impl std::fmt::Debug, RuntimeError>) -> String {
    match r {
        Err(RuntimeError::FenceViolation(m)) => m,
        other => panic!("expected FenceViolation, got {other:?}"),
    }
}

#[test]
fn real_cards_use_one_nvidia_device_request_and_no_devices() {
    let cfg = container_config(&req(vec![real(REAL_A), real(REAL_B)]), LaunchMode::Fenced).unwrap();
    let h = host(&cfg);
    let dr = h.device_requests.as_ref().unwrap();
    assert_eq!(dr.len(), 1);
    assert_eq!(dr[0].driver.as_deref(), Some("nvidia"));
    assert_eq!(dr[0].device_ids, Some(vec![REAL_A.into(), REAL_B.into()]));
    assert_eq!(dr[0].capabilities, Some(vec![vec!["gpu".to_string()]]));
    assert_eq!(dr[0].count, None);
    assert!(h.devices.is_none());
    assert!(env_of(&cfg).contains(&format!("NVIDIA_VISIBLE_DEVICES={REAL_A},{REAL_B}")));
}

#[test]
fn sim_cards_map_exactly_their_device_nodes() {
    let cfg = container_config(&req(vec![sim(1), sim(2)]), LaunchMode::Fenced).unwrap();
    let h = host(&cfg);
    assert!(h.device_requests.is_none());
    let devs = h.devices.as_ref().unwrap();
    let paths: Vec<_> = devs
        .iter()
        .map(|d| d.path_on_host.clone().unwrap())
        .collect();
    assert_eq!(paths, vec!["/dev/gpuq-sim1", "/dev/gpuq-sim2"]);
    for d in devs {
        assert_eq!(d.path_in_container, d.path_on_host);
        assert_eq!(d.cgroup_permissions.as_deref(), Some("rwm"));
    }
}

#[test]
fn fenced_defaults_are_locked_down() {
    let r = req(vec![]);
    let cfg = container_config(&r, LaunchMode::Fenced).unwrap();
    let h = host(&cfg);
    assert_eq!(h.privileged, Some(false));
    assert_eq!(h.cap_drop, Some(vec!["ALL".to_string()]));
    assert!(h.cap_add.is_none());
    assert_eq!(h.security_opt, Some(vec!["no-new-privileges".to_string()]));
    assert_eq!(h.pids_limit, Some(100));
    assert_eq!(h.memory, Some(512 * 1024 * 1024));
    assert_eq!(h.memory_swap, h.memory);
    assert_eq!(
        h.restart_policy.as_ref().unwrap().name,
        Some(RestartPolicyNameEnum::NO)
    );
    let log = h.log_config.as_ref().unwrap();
    assert_eq!(log.typ.as_deref(), Some("json-file"));
    // Three times gpuq's 1 MiB cap in each of two files: JSON takes more room than gpuq's lines,
    // and a full file is renamed, not truncated under the runner reading it.
    assert_eq!(log.config.as_ref().unwrap()["max-size"], "3145728");
    assert_eq!(log.config.as_ref().unwrap()["max-file"], "2");
    assert_eq!(h.auto_remove, Some(false));
    assert_eq!(h.network_mode.as_deref(), Some("gpuq-jobs"));
    // Nothing a job writes lands on Docker's disk: a read-only root, a bounded /tmp.
    assert_eq!(h.readonly_rootfs, Some(true));
    assert_eq!(
        h.tmpfs,
        Some(HashMap::from([(
            "/tmp".to_string(),
            TMP_OPTIONS.to_string()
        )]))
    );
    assert!(h.pid_mode.is_none() && h.ipc_mode.is_none() && h.runtime.is_none());
    assert!(
        h.devices.is_none()
            && h.device_requests.is_none()
            && h.binds.is_none()
            && h.mounts.is_none()
    );
    assert_eq!(cfg.cmd, Some(r.argv.clone()));
    assert!(cfg.entrypoint.is_none());
    let env = env_of(&cfg);
    assert!(env.contains(&"NVIDIA_VISIBLE_DEVICES=void".to_string()));
    assert!(env.contains(&"GPUQ_GPUS=".to_string()));
}

#[test]
fn privileged_only_in_test_mode() {
    let r = req(vec![sim(0)]);
    let fenced = container_config(&r, LaunchMode::Fenced).unwrap();
    let mut privileged = container_config(&r, LaunchMode::PrivilegedForTest).unwrap();
    assert_eq!(host(&privileged).privileged, Some(true));
    assert!(host(&privileged).cap_drop.is_none());
    // Apart from those two fields the configs are identical.
    let h = privileged.host_config.as_mut().unwrap();
    h.privileged = Some(false);
    h.cap_drop = Some(vec!["ALL".into()]);
    assert_eq!(privileged, fenced);
}

#[test]
fn env_user_first_then_fence_keys() {
    let r = req(vec![sim(3)]);
    let env = env_of(&container_config(&r, LaunchMode::Fenced).unwrap());
    assert_eq!(
        env,
        vec![
            "FOO=bar".to_string(),
            "HOME=/tmp".into(),
            "NVIDIA_VISIBLE_DEVICES=GPU-51400003".into(),
            "GPUQ_GPUS=GPU-51400003".into(),
            format!("GPUQ_JOB_ID={}", r.job_id),
        ]
    );
}

#[test]
fn home_is_the_jobs_tmp_under_a_read_only_root_unless_the_job_set_it() {
    let mut r = req(vec![]);
    let home = |r: &LaunchRequest| {
        env_of(&container_config(r, LaunchMode::Fenced).unwrap())
            .into_iter()
            .filter(|e| e.starts_with("HOME="))
            .collect::<Vec<_>>()
    };
    assert_eq!(home(&r), ["HOME=/tmp"]);
    r.env.insert("HOME".into(), "/data/me".into());
    assert_eq!(home(&r), ["HOME=/data/me"]);
    r.env.remove("HOME");
    r.tmp_mib = None;
    assert!(
        home(&r).is_empty(),
        "a writable root keeps the image's home"
    );
}

#[test]
fn labels_identify_the_job() {
    let r = req(vec![]);
    let cfg = container_config(&r, LaunchMode::Fenced).unwrap();
    let l = cfg.labels.unwrap();
    assert_eq!(l["org.gpuq.managed"], "true");
    assert_eq!(l["org.gpuq.job-id"], r.job_id.to_string());
    assert_eq!(l["org.gpuq.node"], "node-a");
    assert_eq!(l["org.gpuq.attempt"], "2");
    assert_eq!(l["org.gpuq.installation"], "inst-a");
}

#[test]
fn verify_accepts_exact_match() {
    let r = req(vec![sim(0), real(REAL_A)]);
    verify(&facts_for(&r), &r).unwrap();
}

#[test]
fn verify_catches_each_mismatch() {
    let r = req(vec![sim(0), sim(1), real(REAL_A)]);
    type Mutation = fn(&mut ContainerFacts);
    let cases: Vec<(&str, Mutation)> = vec![
        ("privileged", |f| f.privileged = true),
        ("capabilities", |f| f.cap_add = vec!["SYS_ADMIN".into()]),
        ("devices", |f| f.devices.push("/dev/gpuq-sim2".into())),
        ("devices", |f| drop(f.devices.pop())),
        ("devices", |f| f.devices[0] = "/dev/gpuq-sim9".into()),
        ("nvidia", |f| f.gpu_device_ids.push(REAL_B.into())),
        ("nvidia", |f| f.gpu_device_ids.clear()),
        ("job-id", |f| {
            let other = Uuid::new_v4().to_string();
            f.labels.insert("org.gpuq.job-id".into(), other);
        }),
        ("managed", |f| drop(f.labels.remove("org.gpuq.managed"))),
        // Another installation's container, or one without the label, is not this job's.
        ("installation", |f| {
            f.labels
                .insert("org.gpuq.installation".into(), "inst-b".into());
        }),
        ("installation", |f| {
            drop(f.labels.remove("org.gpuq.installation"))
        }),
    ];
    for (what, mutate) in cases {
        let mut f = facts_for(&r);
        mutate(&mut f);
        let msg = violation(verify(&f, &r));
        assert!(msg.contains(what), "{msg} should mention {what}");
    }
}

#[test]
fn user_limits_and_network_are_set() {
    let r = req(vec![]);
    let cfg = container_config(&r, LaunchMode::Fenced).unwrap();
    assert_eq!(cfg.user.as_deref(), Some("200001:200001"));
    let h = host(&cfg);
    assert_eq!(h.nano_cpus, Some(1_500_000_000));
    assert_eq!(h.shm_size, Some(2048 * 1024 * 1024));
    assert_eq!(h.network_mode.as_deref(), Some("gpuq-jobs"));
    let mut none = req(vec![]);
    none.network = JobNetwork::None;
    none.nano_cpus = None;
    none.run_as = RunAs::ImageUser;
    let cfg = container_config(&none, LaunchMode::Fenced).unwrap();
    assert_eq!(cfg.user, None, "a root image keeps its own user");
    assert_eq!(host(&cfg).network_mode.as_deref(), Some("none"));
    assert_eq!(host(&cfg).nano_cpus, None);
}

#[test]
fn a_writable_root_has_no_tmpfs_and_an_unbounded_tmp_is_refused() {
    let mut r = req(vec![]);
    r.tmp_mib = None;
    let cfg = container_config(&r, LaunchMode::Fenced).unwrap();
    assert_eq!(host(&cfg).readonly_rootfs, Some(false));
    assert_eq!(host(&cfg).tmpfs, None);
    verify(&facts_for(&r), &r).unwrap();
    let mut f = facts_for(&r);
    f.readonly_rootfs = true;
    assert!(violation(verify(&f, &r)).contains("root filesystem"));
    // tmpfs reads size=0 as "no limit": never asked for.
    r.tmp_mib = Some(0);
    match container_config(&r, LaunchMode::Fenced) {
        Err(RuntimeError::InvalidRequest(m)) => assert!(m.contains("tmp_mib"), "{m}"),
        other => panic!("expected InvalidRequest, got {other:?}"),
    }
}

#[test]
fn root_job_users_are_refused() {
    for (uid, gid) in [(0, 200_001), (200_001, 0)] {
        let mut r = req(vec![]);
        r.run_as = RunAs::User { uid, gid };
        let msg = violation(container_config(&r, LaunchMode::Fenced));
        assert!(msg.contains("root_images"), "{msg}");
    }
}

#[test]
fn verify_catches_mount_user_network_and_limit_mismatches() {
    let mut r = req(vec![]);
    r.mounts = vec![Mount {
        host: "/data/alice".into(),
        container: "/data".into(),
        read_only: true,
    }];
    type Mutation = fn(&mut ContainerFacts);
    let cases: Vec<(&str, Mutation, bool)> = vec![
        ("mounts", |f| f.mounts[0].source = "/".into(), true),
        ("mounts", |f| f.mounts[0].read_only = false, true),
        ("mounts", |f| f.mounts.clear(), true),
        (
            "tmpfs",
            |f| {
                f.mounts.push(MountFact {
                    kind: "tmpfs".into(),
                    destination: "/x".into(),
                    ..Default::default()
                })
            },
            true,
        ),
        ("user", |f| f.user = "0:0".into(), true),
        ("user", |f| f.user = String::new(), true),
        ("networks", |f| f.networks = vec!["bridge".into()], false),
        ("cpu", |f| f.nano_cpus = 0, false),
        ("shm", |f| f.shm_size = 64 << 20, false),
        ("memory limit", |f| f.memory = 0, false),
        ("memory limit", |f| f.memory *= 2, false),
        ("memory limit", |f| f.memory_swap = -1, false),
        ("memory limit", |f| f.memory_swap = 0, false),
        ("process limit", |f| f.pids_limit = 0, false),
        ("process limit", |f| f.pids_limit = -1, false),
        ("root filesystem", |f| f.readonly_rootfs = false, false),
        ("tmpfs", |f| f.tmpfs.clear(), false),
        (
            "tmpfs",
            |f| {
                f.tmpfs
                    .insert("/tmp".into(), "rw,exec,nosuid,nodev,size=0".into());
            },
            false,
        ),
        (
            "tmpfs",
            |f| drop(f.tmpfs.insert("/var/tmp".into(), TMP_OPTIONS.into())),
            false,
        ),
    ];
    for (what, mutate, isolation) in cases {
        let mut f = facts_for(&r);
        verify(&f, &r).unwrap();
        mutate(&mut f);
        let msg = violation(verify(&f, &r));
        assert!(msg.contains(what), "{msg} should mention {what}");
        // Re-adoption checks isolation only: a changed policy's limits are no reason to kill.
        assert_eq!(verify_isolation(&f, &r).is_err(), isolation, "{what}");
    }
    // An anonymous volume (an image's `VOLUME` the fence did not cover, e.g. an image re-tagged
    // between the request and the create) is an unbounded writable folder on Docker's disk.
    let mut f = facts_for(&r);
    f.mounts.push(MountFact {
        kind: "volume".into(),
        source: "/var/lib/docker/volumes/x/_data".into(),
        destination: "/cache".into(),
        read_only: false,
    });
    assert!(violation(verify(&f, &r)).contains("unexpected volume mount at /cache"));
}

#[test]
fn an_images_declared_volumes_are_covered_by_bounded_tmpfs_owned_by_the_job() {
    let mut r = req(vec![]);
    r.image_volumes = vec!["/data".into(), "/var/cache/x".into()];
    let cfg = container_config(&r, LaunchMode::Fenced).unwrap();
    let t = host(&cfg).tmpfs.clone().unwrap();
    let cover = "rw,exec,nosuid,nodev,size=1024m,mode=755,uid=200001,gid=200001";
    assert_eq!(t["/data"], cover);
    assert_eq!(t["/var/cache/x"], cover);
    assert_eq!(t["/tmp"], TMP_OPTIONS);
    // A writable root has no /tmp of its own, but the image's volumes are still covered.
    r.tmp_mib = None;
    let cfg = container_config(&r, LaunchMode::Fenced).unwrap();
    let t = host(&cfg).tmpfs.clone().unwrap();
    assert_eq!(t.len(), 2);
    assert!(t["/data"].contains("size=1024m"));
    // Folders no tmpfs may cover are refused, not left to Docker.
    for bad in ["/", "/proc", "/dev/x", "relative", "/a,b", "/a/../b"] {
        r.image_volumes = vec![bad.into()];
        let msg = violation(container_config(&r, LaunchMode::Fenced));
        assert!(msg.contains("VOLUME"), "{bad}: {msg}");
    }
    // Images the policy lets run as their own user keep their own owner.
    r.image_volumes = vec!["/data".into()];
    r.tmp_mib = Some(64);
    r.run_as = RunAs::ImageUser;
    let cfg = container_config(&r, LaunchMode::Fenced).unwrap();
    assert_eq!(
        host(&cfg).tmpfs.clone().unwrap()["/tmp"],
        "rw,exec,nosuid,nodev,size=64m,mode=1777"
    );
}
