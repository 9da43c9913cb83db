//! Helpers of the isolation tests: a node with its own never-mount paths and uid range, the launch
//! policy, host folders a member's job may mount, and what Docker says about a job's container.

use super::docker::docker_cli;
use super::node::Node;
use super::TestApp;
use gpuq::server::db::job_uids::JobUidRange;
use gpuq::server::runtime::{ContainerFacts, Docker, LaunchMode};
use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use tempfile::TempDir;

/// The test image (busybox: `busybox nc`, `busybox chmod`, … for what is not linked).
pub const IMAGE: &str = "gpuq-test/busybox:latest";

/// A fenced node like `gpuq serve` runs, with these never-mount paths and uid range.
pub struct IsoNode;

impl IsoNode {
    /// Starts it (see [`Node::start_with`]).
    pub async fn start(app: &TestApp, node: &str, never: Vec<PathBuf>, uids: JobUidRange) -> Node {
        Node::start_with(app, node, LaunchMode::Fenced, uids, never).await
    }
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

/// A fresh temporary folder and a folder `name` in it, saved (by `admin`) as the policy's one
/// allowed volume. Only root may change `name` (mode 0755), as an admin sets up an allowlisted
/// tree: folders inside it can be mounted (and made with [`open_dir`] for a job to write in).
pub async fn allowed_tempdir(app: &TestApp, admin: &str, name: &str) -> (TempDir, PathBuf) {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let allow = json!({ "volume_allowlist": [{ "path": dir.to_str().unwrap() }] });
    app.set_policy(admin, allow).await;
    (root, dir)
}

/// A job's log as its owner reads it.
pub async fn log(app: &TestApp, bearer: &str, id: uuid::Uuid) -> String {
    let r = app.get(&format!("/api/v1/jobs/{id}/logs"), bearer).await;
    assert_eq!(r.status, 200, "{}", r.text);
    r.text
}

/// The container id the runner recorded for a job.
pub async fn container_of(app: &TestApp, id: uuid::Uuid) -> Option<String> {
    let sql = "SELECT container_id FROM jobs WHERE id = $1";
    app.scalar_of(sql, id).await
}

/// The main process of job `id`'s container, as the host sees it.
pub async fn host_pid_of(app: &TestApp, id: uuid::Uuid) -> u32 {
    let container = container_of(app, id).await.expect("the job's container");
    docker_cli(&["inspect", "-f", "{{.State.Pid}}", &container])
        .parse()
        .unwrap()
}

/// Waits (up to 30 s) until the runner removed job `id`'s container, if it had one: tests leave
/// the host as they found it, and a container left behind keeps its image in use.
pub async fn wait_container_removed(app: &TestApp, id: uuid::Uuid) {
    let Some(c) = container_of(app, id).await else {
        return;
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !docker_cli(&["ps", "-aq", "--filter", &format!("id={c}")]).is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the runner left container {c}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// What dockerd recorded for a job's (running) container.
pub async fn facts_of(app: &TestApp, id: uuid::Uuid) -> ContainerFacts {
    let c = container_of(app, id).await.expect("a container");
    Docker::connect().await.unwrap().inspect(&c).await.unwrap()
}

/// The job's events, oldest first.
pub async fn event_kinds(app: &TestApp, id: uuid::Uuid) -> Vec<String> {
    let sql = "SELECT kind FROM job_events WHERE job_id = $1 ORDER BY id";
    app.column_of(sql, id).await
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
    let networks = "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}";
    docker_cli(&["inspect", "-f", networks, container])
}
