//! A real image registry for the pull tests: Debian's `docker-registry` (distribution 2.8) on a
//! free loopback port, which dockerd pushes to and pulls from without TLS. Its access log names
//! every request, so a test counts the pulls the node made. [`Registry::start_with_auth`] starts
//! one that asks for a username and password (htpasswd, bcrypt), as a team's private one does.

use super::docker::{docker_cli, IMAGE};
use super::free_port;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running registry, stopped (and its storage removed) when dropped.
pub struct Registry {
    child: Option<Child>,
    port: u16,
    log: PathBuf,
    _dir: tempfile::TempDir,
    /// References this test tagged or pulled on the host's dockerd, removed when dropped.
    images: std::sync::Mutex<Vec<String>>,
    /// For a registry with auth: the account, and a docker CLI config folder of this registry's
    /// own, which `docker login` writes (the user's `~/.docker` is left alone).
    auth: Option<(String, String, PathBuf)>,
}

impl Registry {
    /// Starts a registry and waits (up to 20 s) until it answers.
    pub async fn start() -> Registry {
        Self::start_inner(None).await
    }

    /// Starts a registry that serves only `user` with `password` (htpasswd, bcrypt: `docker
    /// login` against it works, and a pull without them is refused as `unauthorized`).
    pub async fn start_with_auth(user: &str, password: &str) -> Registry {
        Self::start_inner(Some((user, password))).await
    }

    async fn start_inner(auth: Option<(&str, &str)>) -> Registry {
        let dir = tempfile::tempdir().expect("a folder for the registry");
        let port = free_port();
        let config = dir.path().join("config.yml");
        let storage = dir.path().join("storage");
        let mut auth_config = String::new();
        let mut account = None;
        if let Some((user, password)) = auth {
            let out = Command::new("htpasswd")
                .args(["-Bbn", user, password])
                .output()
                .expect("htpasswd must be installed (apache2-utils, scripts/deps.sh)");
            assert!(out.status.success(), "htpasswd: {out:?}");
            let file = dir.path().join("htpasswd");
            std::fs::write(&file, &out.stdout).expect("writing the htpasswd file");
            auth_config = format!(
                "auth:\n  htpasswd:\n    realm: gpuq-test\n    path: {}\n",
                file.display()
            );
            let docker_config = dir.path().join("docker-config");
            std::fs::create_dir(&docker_config).expect("a docker CLI config folder");
            account = Some((user.to_owned(), password.to_owned(), docker_config));
        }
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: info\nstorage:\n  filesystem:\n    rootdirectory: {}\n\
                 http:\n  addr: 127.0.0.1:{port}\n{auth_config}",
                storage.display()
            ),
        )
        .expect("writing the registry's config");
        let log = dir.path().join("registry.log");
        let out = std::fs::File::create(&log).expect("the registry's log");
        let err = out.try_clone().expect("the registry's log");
        let child = Command::new("docker-registry")
            .arg("serve")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .expect("docker-registry must be installed (scripts/deps.sh)");
        let registry = Registry {
            child: Some(child),
            port,
            log,
            _dir: dir,
            images: Default::default(),
            auth: account,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        let url = format!("http://127.0.0.1:{port}/v2/");
        loop {
            if let Ok(r) = reqwest::get(&url).await {
                // A registry with auth answers its base route 401 once it runs.
                if r.status().is_success() || r.status() == reqwest::StatusCode::UNAUTHORIZED {
                    break;
                }
            }
            assert!(
                Instant::now() < deadline,
                "the registry never answered: {}",
                std::fs::read_to_string(&registry.log).unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        registry
    }

    /// `127.0.0.1:PORT`.
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Pushes the local test image as `<host>/<repo>:<tag>` and removes that tag from the host's
    /// dockerd again, so a node must pull it. Returns the reference.
    pub fn push_test_image(&self, repo: &str, tag: &str) -> String {
        let reference = format!("{}/{repo}:{tag}", self.host());
        docker_cli(&["tag", IMAGE, &reference]);
        self.forget_later(&reference);
        match &self.auth {
            None => {
                docker_cli(&["push", &reference]);
            }
            Some((user, password, config)) => {
                let config = config.to_str().expect("a UTF-8 path");
                let login = ["--config", config, "login", "--username", user];
                login_with_stdin(&login, &self.host(), password);
                docker_cli(&["--config", config, "push", &reference]);
            }
        }
        docker_cli(&["rmi", &reference]);
        reference
    }

    /// Pushes an image of its own (see [`unique_image`]) with `filler` bytes of random data as
    /// `<host>/<repo>:<tag>`, and removes it from the host's dockerd again, so a node must pull
    /// it. Returns the reference.
    pub fn push_unique_image(&self, repo: &str, tag: &str, filler: usize) -> String {
        self.push_unique_image_token(repo, tag, filler).0
    }

    /// [`Registry::push_unique_image`], and the image's token (see [`unique_image`]).
    pub fn push_unique_image_token(
        &self,
        repo: &str,
        tag: &str,
        filler: usize,
    ) -> (String, String) {
        let reference = format!("{}/{repo}:{tag}", self.host());
        self.forget_later(&reference);
        let token = unique_image(&reference, filler);
        docker_cli(&["push", &reference]);
        docker_cli(&["rmi", &reference]);
        (reference, token)
    }

    /// A slow way to this registry: a proxy on another loopback port that passes what the
    /// registry sends at `bytes_per_s` at most (what it is sent, at once), until dropped. The
    /// registry's repositories are the same under either host.
    pub async fn throttled(&self, bytes_per_s: usize) -> Throttle {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a port for the proxy");
        let port = listener.local_addr().expect("the proxy's port").port();
        let upstream = self.port;
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(proxy(client, upstream, bytes_per_s));
            }
        });
        Throttle { port, task }
    }

    /// Removes `reference` from the host's dockerd when the registry is dropped.
    pub fn forget_later(&self, reference: &str) {
        if let Ok(mut images) = self.images.lock() {
            images.push(reference.to_owned());
        }
    }

    /// Pulls of a tag of `repo` the registry answered: dockerd asks for the tag's manifest once
    /// per pull (a `HEAD`, then a `GET` by digest only when it lacks the image it names), so the
    /// requests for a manifest by tag count the pulls.
    pub fn pulls(&self, repo: &str) -> usize {
        let path = format!(" /v2/{repo}/manifests/");
        self.log()
            .lines()
            .filter(|l| l.contains("\"HEAD ") || l.contains("\"GET "))
            .filter_map(|l| l.split_once(&path).map(|(_, rest)| rest))
            .filter(|rest| !rest.starts_with("sha256:"))
            .count()
    }

    /// The registry's log so far (for a failing test's message).
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Stops the registry (a pull then finds nothing listening).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// `docker <args> --password-stdin <host>`, the password written to its standard input.
fn login_with_stdin(args: &[&str], host: &str, password: &str) {
    use std::io::Write;
    let mut child = Command::new("docker")
        .args(args)
        .args(["--password-stdin", host])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running docker login");
    child
        .stdin
        .take()
        .expect("its stdin")
        .write_all(password.as_bytes())
        .expect("writing the password");
    let out = child.wait_with_output().expect("docker login");
    assert!(out.status.success(), "docker login {host}: {out:?}");
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.stop();
        let images = self.images.lock().map(|i| i.clone()).unwrap_or_default();
        for image in images {
            let _ = Command::new("docker")
                .args(["rmi", "--force", &image])
                .output();
        }
    }
}

/// Makes the local image `reference` from the test image's busybox plus a file of `filler` random
/// bytes, with a label of its own, so that its id is shared with no other image on the machine
/// (containers of the test image do not make it "in use"). Its `/etc/unique` holds the token
/// returned, so a job can say which image it ran.
pub fn unique_image(reference: &str, filler: usize) -> String {
    let token = uuid::Uuid::new_v4().simple().to_string();
    let root = tempfile::tempdir().expect("a folder for the image's files");
    let r = root.path();
    for dir in ["bin", "tmp", "dev", "proc", "sys", "etc"] {
        std::fs::create_dir_all(r.join(dir)).expect("the image's folders");
    }
    std::fs::copy("/bin/busybox", r.join("bin/busybox")).expect("/bin/busybox (busybox-static)");
    for tool in ["sh", "echo", "true", "sleep", "cat"] {
        std::os::unix::fs::symlink("busybox", r.join("bin").join(tool)).expect("a busybox link");
    }
    let mut data = Vec::with_capacity(filler + 16);
    while data.len() < filler {
        data.extend_from_slice(uuid::Uuid::new_v4().as_bytes());
    }
    data.truncate(filler);
    std::fs::write(r.join("filler"), data).expect("the filler");
    std::fs::write(r.join("etc/unique"), &token).expect("the token");
    let script = format!(
        "chmod 1777 tmp && tar -c . | docker import -c 'ENV PATH=/bin' \
         -c 'LABEL org.gpuq.test-unique={token}' - {reference}"
    );
    let out = Command::new("sh")
        .arg("-c")
        .arg(&script)
        .current_dir(r)
        .output()
        .expect("running tar and docker import");
    assert!(
        out.status.success(),
        "docker import of {reference}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    token
}

/// A throttling proxy in front of a registry ([`Registry::throttled`]).
pub struct Throttle {
    port: u16,
    task: tokio::task::JoinHandle<()>,
}

impl Throttle {
    /// `127.0.0.1:PORT` of the proxy.
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

impl Drop for Throttle {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One connection through the proxy: requests pass at once, answers at `bytes_per_s`.
async fn proxy(mut client: tokio::net::TcpStream, upstream: u16, bytes_per_s: usize) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(mut server) = tokio::net::TcpStream::connect(("127.0.0.1", upstream)).await else {
        return;
    };
    let (mut cr, mut cw) = client.split();
    let (mut sr, mut sw) = server.split();
    let up = tokio::io::copy(&mut cr, &mut sw);
    let down = async {
        // Chunks of a twentieth of a second's worth, each followed by its share of the second.
        let chunk = (bytes_per_s / 20).max(1);
        let mut buf = vec![0u8; chunk];
        loop {
            let n = sr.read(&mut buf).await?;
            if n == 0 {
                break;
            }
            cw.write_all(&buf[..n]).await?;
            tokio::time::sleep(Duration::from_secs_f64(n as f64 / bytes_per_s as f64)).await;
        }
        cw.shutdown().await
    };
    let _ = tokio::join!(up, down);
}
