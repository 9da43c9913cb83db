//! Shared helpers for the dockerd integration tests.

use std::collections::BTreeMap;
use std::sync::Mutex;

use futures_util::StreamExt;
use gpuq::server::runtime::docker::container_name;
use gpuq::server::runtime::{
    Docker, GrantedGpu, LaunchMode, LaunchRequest, LogLine, RunAs, RuntimeError,
};
use uuid::Uuid;

/// The only image available on the test host.
pub const IMAGE: &str = "gpuq-test/busybox:latest";

/// Connects or fails the test: an unreachable dockerd is a failure, never a skip.
pub async fn docker() -> Docker {
    match Docker::connect().await {
        Ok(d) => d,
        Err(e) => panic!("dockerd must be reachable for these tests: {e}"),
    }
}

/// A fresh launch request with a unique job id.
pub fn request(argv: &[&str], gpus: Vec<GrantedGpu>) -> LaunchRequest {
    LaunchRequest {
        job_id: Uuid::new_v4(),
        attempt: 1,
        node: "test-node".into(),
        installation: None,
        image: IMAGE.into(),
        argv: argv.iter().map(|s| s.to_string()).collect(),
        env: BTreeMap::new(),
        framework_env: BTreeMap::new(),
        mounts: vec![],
        gpus,
        memory_limit_mib: 64,
        pids_limit: 64,
        log_max_bytes: 1 << 20,
        run_as: RunAs::User {
            uid: 200_000,
            gid: 200_000,
        },
        nano_cpus: None,
        shm_mib: 64,
        tmp_mib: Some(64),
        network: gpuq::model::JobNetwork::Isolated,
        image_volumes: Vec::new(),
        array_index: None,
        session_port: None,
    }
}

/// A launch request without cards on a node of its own (named after the job), so that what
/// is listed by node is this job's container only.
pub fn request_alone(argv: &[&str]) -> LaunchRequest {
    let mut r = request(argv, vec![]);
    r.node = format!("node-{}", r.job_id);
    r
}

/// Removes every container registered with it when dropped, panics included.
#[derive(Default)]
pub struct Cleanup {
    names: Mutex<Vec<String>>,
}

impl Cleanup {
    /// Registers the container a request will create (before creating it,
    /// so a panic between create and bookkeeping still cleans up).
    pub fn track(&self, req: &LaunchRequest) {
        self.names.lock().unwrap().push(container_name(req));
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let names = std::mem::take(&mut *self.names.lock().unwrap());
        if names.is_empty() {
            return;
        }
        // Drop cannot await; use a private runtime on its own thread.
        let done = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                let Ok(d) = Docker::connect().await else {
                    return;
                };
                for n in names {
                    match d.remove(&n).await {
                        Ok(()) | Err(RuntimeError::NotFound(_)) => {}
                        Err(e) => eprintln!("cleanup of {n} failed: {e}"),
                    }
                }
            });
        })
        .join();
        if done.is_err() {
            eprintln!("cleanup thread panicked");
        }
    }
}

/// create + start + wait; returns (id, exit code).
pub async fn run(d: &Docker, c: &Cleanup, req: &LaunchRequest, mode: LaunchMode) -> (String, i64) {
    c.track(req);
    let id = d.create(req, mode).await.unwrap();
    d.start(&id).await.unwrap();
    let code = d.wait(&id).await.unwrap();
    (id, code)
}

/// All log lines of a (finished) container.
pub async fn all_logs(d: &Docker, id: &str) -> Vec<LogLine> {
    d.logs(id, None, false).map(|l| l.unwrap()).collect().await
}

/// Runs the docker CLI against the test host's dockerd and returns its trimmed stdout; a failed
/// command fails the test with what docker said.
pub fn docker_cli(args: &[&str]) -> String {
    let out = std::process::Command::new("docker")
        .args(args)
        .output()
        .expect("running the docker CLI");
    assert!(
        out.status.success(),
        "docker {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}
