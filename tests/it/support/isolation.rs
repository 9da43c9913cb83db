//! Helpers of the isolation tests: a node with its own never-mount paths and uid range, the launch
//! policy, host folders a member's job may mount, and what Docker says about a job's container.

use super::{pass_config, TestApp};
use gpuq::server::db::job_uids::JobUidRange;
use gpuq::server::runner::{LocalNode, RunnerConfig};
use gpuq::server::runtime::{ContainerFacts, Docker, LaunchMode};
use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// The test image (busybox: `busybox nc`, `busybox chmod`, … for what is not linked).
pub const IMAGE: &str = "gpuq-test/busybox:latest";

/// A node whose runner has the given never-mount paths and uid range.
pub struct IsoNode {
    inner: LocalNode,
}

impl IsoNode {
    /// A fenced node like `gpuq serve` runs, with `never` beside the app's logs folder.
    pub async fn start(app: &TestApp, node: &str, never: Vec<PathBuf>, uids: JobUidRange) -> Self {
        let docker = Docker::connect().await.expect("dockerd must be running");
        let mut never_mount = vec![app.logs_dir.clone()];
        never_mount.extend(never);
        let cfg = RunnerConfig {
            node: node.to_owned(),
            logs_dir: app.logs_dir.clone(),
            log_max_bytes: 1 << 20,
            stop_grace: std::time::Duration::from_secs(1),
            mode: LaunchMode::Fenced,
            job_uids: uids,
            never_mount,
        };
        let pass = gpuq::server::admission::PassConfig {
            cpu_node: node.to_owned(),
            ..pass_config()
        };
        let inner = LocalNode::start(app.pool.clone(), docker, cfg, pass, app.notifier.clone())
            .await
            .expect("the node starts");
        IsoNode { inner }
    }

    /// Stops the runner and scheduler; running containers are left alone.
    pub async fn stop(self) {
        self.inner.stop().await;
    }
}

/// Replaces the launch policy with `policy` (unset fields: defaults), as `admin`.
pub async fn set_policy(app: &TestApp, admin: &str, policy: Value) {
    let put = app
        .api(
            "PUT",
            "/api/v1/settings/launch-policy",
            Some(admin),
            Some(policy),
        )
        .await;
    assert_eq!(put.status, 200, "{}", put.text);
}

/// A CPU-only job running `script` with `sh -c`, with `volumes`.
pub fn job(script: &str, volumes: &[String]) -> Value {
    json!({
        "image": IMAGE,
        "command": ["sh", "-c", script],
        "gpu_count": 0,
        "volumes": volumes,
    })
}

/// A folder anyone may write (a job runs as its owner's uid, not as the test's root).
pub fn open_dir(path: &Path) -> PathBuf {
    std::fs::create_dir_all(path).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o777)).unwrap();
    path.to_path_buf()
}

/// A job's log as its owner reads it.
pub async fn log(app: &TestApp, bearer: &str, id: uuid::Uuid) -> String {
    let r = app
        .api(
            "GET",
            &format!("/api/v1/jobs/{id}/logs"),
            Some(bearer),
            None,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    r.text
}

/// The container id the runner recorded for a job.
pub async fn container_of(app: &TestApp, id: uuid::Uuid) -> Option<String> {
    sqlx::query_scalar("SELECT container_id FROM jobs WHERE id = $1")
        .bind(id)
        .fetch_one(&app.pool)
        .await
        .unwrap()
}

/// What dockerd recorded for a job's (running) container.
pub async fn facts_of(app: &TestApp, id: uuid::Uuid) -> ContainerFacts {
    let c = container_of(app, id).await.expect("a container");
    Docker::connect().await.unwrap().inspect(&c).await.unwrap()
}

/// The job's events, oldest first.
pub async fn event_kinds(app: &TestApp, id: uuid::Uuid) -> Vec<String> {
    sqlx::query_scalar("SELECT kind FROM job_events WHERE job_id = $1 ORDER BY id")
        .bind(id)
        .fetch_all(&app.pool)
        .await
        .unwrap()
}

/// The uid and gid a user's jobs run as, as stored.
pub async fn job_ids_of(app: &TestApp, user: &str) -> (Option<i32>, Option<i32>) {
    sqlx::query_as("SELECT job_uid, job_gid FROM users WHERE username = $1")
        .bind(user)
        .fetch_one(&app.pool)
        .await
        .unwrap()
}

/// A container's IPv4 address on its network, as `docker inspect` shows it.
pub fn ip_of(container: &str) -> String {
    let out = std::process::Command::new("docker")
        .args([
            "inspect",
            "-f",
            "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
            container,
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}
