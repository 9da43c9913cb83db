//! `gpuq serve` as a child process, for tests that need the real binary and its HTTP port.

use super::PASSWORD;
use serde_json::Value;
use sqlx::PgPool;

/// A `gpuq serve` child process, killed when dropped.
pub struct Server(pub std::process::Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A free loopback port.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The URL of the test's own database.
pub fn database_url(pool: &PgPool) -> String {
    let base = std::env::var("DATABASE_URL").expect("DATABASE_URL");
    let db = pool.connect_options().get_database().unwrap().to_owned();
    format!("{}/{db}", base.rsplit_once('/').unwrap().0)
}

/// Starts `gpuq serve` on simulated cards (unless `extra` names a `--gpu-source`; node `shared`)
/// and waits until it is ready.
pub async fn start_server(url: &str, port: u16, log: &std::path::Path, extra: &[&str]) -> Server {
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_gpuq"))
        .args([
            "serve",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--database-url",
            url,
        ])
        .args(if extra.contains(&"--gpu-source") {
            &[][..]
        } else {
            &[
                "--gpu-source",
                "sim",
                "--sim-gpus",
                "4x24576:NVIDIA GeForce RTX 3090",
            ][..]
        })
        .args(if extra.contains(&"--node") {
            &[][..]
        } else {
            &["--node", "shared"][..]
        })
        .args(["--pass-interval-ms", "100", "--vram-headroom-mib", "0"])
        .args(if extra.contains(&"--runner") {
            &[][..]
        } else {
            &["--runner", "false"][..]
        })
        .args(extra)
        .env("GPUQ_BOOTSTRAP_ADMIN_PASSWORD", PASSWORD)
        .stdout(std::fs::File::create(log.with_extension("out")).unwrap())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .expect("start gpuq serve");
    let server = Server(child);
    let client = reqwest::Client::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        // Without a usable Docker the server answers but is not ready, by design.
        let probe = if extra.contains(&"--docker-socket") {
            "healthz"
        } else {
            "readyz"
        };
        if let Ok(r) = client
            .get(format!("http://127.0.0.1:{port}/{probe}"))
            .send()
            .await
        {
            if r.status().is_success() {
                return server;
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "server on {port} not ready: {}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// Submits a job over HTTP to a running `gpuq serve`; returns its id.
pub async fn post_job(
    client: &reqwest::Client,
    port: u16,
    bearer: &str,
    spec: &Value,
) -> uuid::Uuid {
    let r: Value = client
        .post(format!("http://127.0.0.1:{port}/api/v1/jobs"))
        .header("authorization", bearer)
        .json(spec)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    r["job_id"]
        .as_str()
        .unwrap_or_else(|| panic!("not accepted: {r}"))
        .parse()
        .unwrap()
}

/// An HTTP client and an admin bearer header for a running `gpuq serve`.
pub async fn api_as_admin(port: u16) -> (reqwest::Client, String) {
    let client = reqwest::Client::new();
    let token: Value = client
        .post(format!("http://127.0.0.1:{port}/api/v1/tokens"))
        .json(&serde_json::json!({ "username": "admin", "password": PASSWORD, "name": "t" }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    (
        client,
        format!("Bearer {}", token["token"].as_str().unwrap()),
    )
}
