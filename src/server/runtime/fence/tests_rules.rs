//! Refusal-rule tests: every request that could widen the fence is refused.

use std::path::PathBuf;

use super::tests::{host, real, req, sim, violation, REAL_A};
use super::*;
use crate::server::runtime::Mount;

#[test]
fn reserved_env_keys_are_refused_case_insensitively() {
    for key in [
        "NVIDIA_VISIBLE_DEVICES",
        "nvidia_driver_capabilities",
        "CUDA_MPS_PIPE_DIRECTORY",
        "Cuda_Visible_Devices",
        "GPUQ_JOB_ID",
        "gpuq_gpus",
        "LD_PRELOAD",
        "ld_library_path",
        "LD_AUDIT",
        "DOCKER_HOST",
        "XLA_PYTHON_CLIENT_MEM_FRACTION",
        "tf_force_gpu_allow_growth",
    ] {
        let mut r = req(vec![]);
        r.env.insert(key.into(), "x".into());
        let msg = violation(container_config(&r, LaunchMode::Fenced));
        assert!(msg.contains(key), "{msg} should name {key}");
    }
    for key in ["", "A=B", "A\0"] {
        let mut r = req(vec![]);
        r.env.insert(key.into(), "x".into());
        violation(container_config(&r, LaunchMode::Fenced));
    }
    let mut r = req(vec![]);
    r.env.insert("CUDA_HOME".into(), "/usr/local/cuda".into());
    assert!(container_config(&r, LaunchMode::Fenced).is_ok());
}

#[test]
fn framework_hints_are_set_and_carry_nothing_else() {
    let mut r = req(vec![]);
    r.framework_env = crate::server::runtime::hints::framework_env(
        true,
        &[crate::server::runtime::hints::CardShare {
            committed_mib: 8000,
            total_mib: 24576,
            exclusive: false,
        }],
    );
    let env = container_config(&r, LaunchMode::Fenced)
        .unwrap()
        .env
        .unwrap();
    assert!(env.contains(&"XLA_PYTHON_CLIENT_MEM_FRACTION=0.32".to_string()));
    assert!(env.contains(&"XLA_PYTHON_CLIENT_PREALLOCATE=false".to_string()));
    assert!(env.contains(&"TF_FORCE_GPU_ALLOW_GROWTH=true".to_string()));
    // The hints field cannot smuggle a fence key in.
    let mut r = req(vec![]);
    r.framework_env
        .insert("NVIDIA_VISIBLE_DEVICES".into(), "all".into());
    let msg = violation(container_config(&r, LaunchMode::Fenced));
    assert!(msg.contains("NVIDIA_VISIBLE_DEVICES"), "{msg}");
}

fn mount(host: &str, container: &str, ro: bool) -> Mount {
    Mount {
        host: host.into(),
        container: container.into(),
        read_only: ro,
    }
}

#[test]
fn mounts_become_bind_mounts_never_binds() {
    let mut r = req(vec![]);
    r.mounts = vec![
        mount("/data/set", "/data", true),
        mount("/scratch/j1", "/out", false),
    ];
    let cfg = container_config(&r, LaunchMode::Fenced).unwrap();
    // `Binds` would have dockerd create a missing source as root, following symlinks.
    assert_eq!(host(&cfg).binds, None);
    let got: Vec<(String, String, bool, bool)> = host(&cfg)
        .mounts
        .clone()
        .unwrap()
        .into_iter()
        .map(|m| {
            (
                m.source.unwrap(),
                m.target.unwrap(),
                m.read_only.unwrap(),
                m.typ == Some(bollard::models::MountType::BIND),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            ("/data/set".into(), "/data".into(), true, true),
            ("/scratch/j1".into(), "/out".into(), false, true),
        ]
    );
}

#[test]
fn dangerous_mounts_are_refused() {
    for h in [
        "/",
        "//",
        "/proc",
        "/proc/1/root",
        "/sys/fs",
        "/dev",
        "/dev/nvidia0",
        "/etc",
        "/etc/shadow",
        "//etc/",
        "/./etc",
        "/run/docker.sock",
        "/var/run/docker.sock",
        "/run",
        "/var/run",
        "/var",
        "relative/path",
        "",
        "/data/../etc",
        "/data:/x",
    ] {
        let mut r = req(vec![]);
        r.mounts = vec![mount(h, "/mnt", true)];
        violation(container_config(&r, LaunchMode::Fenced));
    }
    let mut r = req(vec![]);
    r.mounts = vec![mount("/data", "mnt", true)];
    violation(container_config(&r, LaunchMode::Fenced));
    r.mounts = vec![mount("/etcetera", "/mnt", true)];
    assert!(container_config(&r, LaunchMode::Fenced).is_ok());
}

#[test]
fn odd_gpu_grants_are_refused() {
    violation(container_config(
        &req(vec![real("GPU-a,GPU-b")]),
        LaunchMode::Fenced,
    ));
    violation(container_config(
        &req(vec![real("all")]),
        LaunchMode::Fenced,
    ));
    violation(container_config(
        &req(vec![real(REAL_A), real(REAL_A)]),
        LaunchMode::Fenced,
    ));
    let mut g = sim(0);
    g.sim_device = Some(PathBuf::from("/dev/sda"));
    violation(container_config(&req(vec![g]), LaunchMode::Fenced));
    let mut g = sim(0);
    g.sim_device = Some(PathBuf::from("/dev/gpuq-sim0/../sda"));
    violation(container_config(&req(vec![g]), LaunchMode::Fenced));
}

#[test]
fn unlimited_resources_are_refused() {
    let mut r = req(vec![]);
    r.pids_limit = 0;
    assert!(matches!(
        container_config(&r, LaunchMode::Fenced),
        Err(RuntimeError::InvalidRequest(_))
    ));
    let mut r = req(vec![]);
    r.memory_limit_mib = 0;
    assert!(container_config(&r, LaunchMode::Fenced).is_err());
    let mut r = req(vec![]);
    r.argv.clear();
    assert!(container_config(&r, LaunchMode::Fenced).is_err());
}
