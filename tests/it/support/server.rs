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

impl Server {
    /// Kills it with SIGKILL (no shutdown code runs) and reaps it.
    pub fn kill9(self) {
        let pid = nix::unistd::Pid::from_raw(self.0.id() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL).unwrap();
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

/// Sends a request to a running `gpuq serve` and reads its JSON answer.
pub async fn json_of(req: reqwest::RequestBuilder) -> Value {
    req.send().await.unwrap().json().await.unwrap()
}

/// `GET url` of a running `gpuq serve` with the `authorization` header `bearer`.
pub async fn get_with(client: &reqwest::Client, url: &str, bearer: &str) -> reqwest::Response {
    let req = client.get(url).header("authorization", bearer);
    req.send().await.unwrap()
}

/// Submits a job over HTTP to a running `gpuq serve`; returns its id.
pub async fn post_job(
    client: &reqwest::Client,
    port: u16,
    bearer: &str,
    spec: &Value,
) -> uuid::Uuid {
    let url = format!("http://127.0.0.1:{port}/api/v1/jobs");
    let r = json_of(client.post(url).header("authorization", bearer).json(spec)).await;
    r["job_id"]
        .as_str()
        .unwrap_or_else(|| panic!("not accepted: {r}"))
        .parse()
        .unwrap()
}

/// An HTTP client and an admin bearer header for a running `gpuq serve`.
pub async fn api_as_admin(port: u16) -> (reqwest::Client, String) {
    let client = reqwest::Client::new();
    let login = serde_json::json!({ "username": "admin", "password": PASSWORD, "name": "t" });
    let url = format!("http://127.0.0.1:{port}/api/v1/tokens");
    let token = json_of(client.post(url).json(&login)).await;
    (
        client,
        format!("Bearer {}", token["token"].as_str().unwrap()),
    )
}

/// How a test runs `gpuq serve`: over the test's database, on a free port, with a data folder of
/// its own and these arguments. [`Serve::start`] starts it, and starts it again after a kill.
pub struct Serve {
    /// The test database's URL.
    pub url: String,
    /// The port it listens on.
    pub port: u16,
    /// Its data folder (job logs go to `logs/` there) and where its own logs are written.
    pub dir: tempfile::TempDir,
    args: Vec<String>,
}

impl Serve {
    /// `gpuq serve` with `args` beside the defaults of [`start_server`].
    pub fn new(pool: &PgPool, args: &[&str]) -> Serve {
        Serve {
            url: database_url(pool),
            port: free_port(),
            dir: tempfile::tempdir().unwrap(),
            args: args.iter().map(|a| a.to_string()).collect(),
        }
    }

    /// `gpuq serve` with its runner on as node `node`, its data in [`Serve::dir`], then `extra`.
    pub fn runner(pool: &PgPool, node: &str, extra: &[&str]) -> Serve {
        let mut serve = Serve::new(pool, &[]);
        let data = serve.dir.path().to_str().unwrap().to_owned();
        let runner = ["--runner", "true", "--data-dir", &data, "--node", node];
        serve.args = runner.iter().chain(extra).map(|a| a.to_string()).collect();
        serve
    }

    /// Starts it (see [`start_server`]), writing its stderr to `log` in its folder.
    pub async fn start(&self, log: &str) -> Server {
        let args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        start_server(&self.url, self.port, &self.dir.path().join(log), &args).await
    }

    /// Its base URL.
    pub fn base(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}
