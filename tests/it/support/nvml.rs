//! The fake NVML (`tests/fixtures/fake-nvml/`): built once into `target/fake-nvml/` (again when
//! its source is newer), then copied for each test, so every test has its own library and its
//! own state file (`<library>.state`) even when tests share a process.

use gpuq::server::gpu::observer::{self, Cards};
use gpuq::server::gpu::{from_config, GpuInventory, GpuMode, NvmlInventory};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};

/// What a card observer of `inventory` on `node` reads (processes looked up in `/proc`).
pub fn source(
    pool: &sqlx::PgPool,
    inventory: Arc<dyn GpuInventory>,
    node: &str,
) -> observer::Source {
    observer::Source {
        pool: pool.clone(),
        inventory,
        node: node.to_owned(),
        proc_root: "/proc".into(),
    }
}

/// Simulated cards as `gpuq serve --gpu-source sim --sim-gpus <spec>` on `node` reads them.
pub fn sim_source(pool: &sqlx::PgPool, spec: &str, node: &str) -> observer::Source {
    let inventory = Arc::from(from_config(GpuMode::Sim, Some(spec), node).unwrap());
    source(pool, inventory, node)
}

/// A card observer of `source`, running until its handles are dropped. Its own tick is an hour:
/// it reads when asked ([`Cards::fresh`]).
pub async fn spawn_observer(source: observer::Source) -> Cards {
    observer::spawn(source, std::time::Duration::from_secs(3600)).await
}

const SOURCES: [&str; 2] = ["fake_nvml.c", "stubs.c"];

/// The built fake `libnvidia-ml.so.1`, compiled with `cc` (or `$CC`) when missing or older than
/// its source.
pub fn fake_nvml_lib() -> PathBuf {
    static BUILD: Mutex<()> = Mutex::new(());
    let _once = BUILD.lock().unwrap_or_else(|p| p.into_inner());
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let src = root.join("tests/fixtures/fake-nvml");
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let out_dir = target.join("fake-nvml");
    let lib = out_dir.join("libnvidia-ml.so.1");
    let built = std::fs::metadata(&lib).and_then(|m| m.modified()).ok();
    let newest_source = SOURCES
        .iter()
        .map(|s| std::fs::metadata(src.join(s)).unwrap().modified().unwrap())
        .max()
        .unwrap();
    if built.is_some_and(|b| b >= newest_source) {
        return lib;
    }
    std::fs::create_dir_all(&out_dir).unwrap();
    // Built aside and renamed, so another test process never loads a half-written library.
    let tmp = out_dir.join(format!("libnvidia-ml.so.1.{}.tmp", std::process::id()));
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&cc)
        .args(["-shared", "-fPIC", "-O2", "-Wall", "-o"])
        .arg(&tmp)
        .args(SOURCES.iter().map(|s| src.join(s)))
        .arg("-lpthread")
        .output()
        .unwrap_or_else(|e| panic!("running {cc} to build the fake NVML: {e}"));
    assert!(
        out.status.success(),
        "building the fake NVML failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::rename(&tmp, &lib).unwrap();
    lib
}

/// One test's fake NVML: its own copy of the library and the state file beside it.
pub struct FakeNvml {
    dir: tempfile::TempDir,
    lib: PathBuf,
}

impl FakeNvml {
    /// A copy of the fake library whose driver reports `state` (the README's line format).
    pub fn new(state: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let lib = dir.path().join("libnvidia-ml.so.1");
        std::fs::copy(fake_nvml_lib(), &lib).unwrap();
        let fake = FakeNvml { dir, lib };
        fake.set(state);
        fake
    }

    /// The library, for `--nvml-lib` or [`NvmlInventory::new`].
    pub fn lib(&self) -> &Path {
        &self.lib
    }

    /// The state file the library reads on every call.
    pub fn state_file(&self) -> PathBuf {
        self.lib.with_extension("1.state")
    }

    /// A folder for the test's other files (logs).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Replaces the state atomically (a reader sees the old or the new file, never half of one).
    pub fn set(&self, state: &str) {
        let tmp = self.dir.path().join("state.tmp");
        std::fs::write(&tmp, state).unwrap();
        std::fs::rename(&tmp, self.state_file()).unwrap();
    }

    /// The driver goes away: every call answers `NVML_ERROR_DRIVER_NOT_LOADED` until [`set`].
    pub fn vanish(&self) {
        std::fs::remove_file(self.state_file()).unwrap();
    }

    /// NVML loaded from this copy.
    pub fn inventory(&self) -> NvmlInventory {
        NvmlInventory::new(Some(&self.lib)).unwrap()
    }

    /// A card observer of this copy for `node` (processes looked up in `/proc`), running until
    /// its handles are dropped. Its own tick is an hour: it reads when asked ([`Cards::fresh`]).
    pub async fn observe(&self, pool: &sqlx::PgPool, node: &str) -> Cards {
        spawn_observer(source(pool, Arc::new(self.inventory()), node)).await
    }

    /// Starts the library's call counter (`<library>.calls`); [`FakeNvml::calls`] reads it.
    pub fn count_calls(&self) {
        std::fs::write(self.lib.with_extension("1.calls"), "").unwrap();
    }

    /// The calls counted so far, per NVML function, and `total`.
    pub fn calls(&self) -> std::collections::HashMap<String, u64> {
        std::fs::read_to_string(self.lib.with_extension("1.calls"))
            .unwrap()
            .lines()
            .filter_map(|l| {
                let (f, n) = l.split_once(' ')?;
                Some((f.to_owned(), n.parse().ok()?))
            })
            .collect()
    }
}

/// A throw-away dockerd with the stub `nvidia-container-runtime-hook`
/// (`tests/fixtures/nvidia-hook/`) on its PATH, so it registers its `nvidia` device driver and
/// starts containers with NVIDIA DeviceRequests. It has its own data root, exec root, pid file and
/// socket, a default bridge of its own and no iptables rules, so it leaves the machine's dockerd
/// (and what runs there) alone. It holds the local test image, copied from the machine's dockerd.
/// Stopped and removed when dropped, its bridge with it.
///
/// Never `--bridge=none`: a dockerd started so deletes the kernel's `docker0`, the machine
/// dockerd's default bridge, and every plain `docker run` there fails until that dockerd restarts.
pub struct NvidiaDocker {
    dir: tempfile::TempDir,
    daemon: std::process::Child,
    bridge: String,
}

impl NvidiaDocker {
    /// Starts the daemon and waits (60 s at most) until it answers.
    pub fn start() -> Self {
        Self::start_with("{}")
    }

    /// [`NvidiaDocker::start`] with `config` as its `daemon.json` (`{"live-restore": true}`).
    pub fn start_with(config: &str) -> Self {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        // Short: containerd's sockets live under the exec root, and socket paths are limited.
        let dir = tempfile::Builder::new()
            .prefix("gnv")
            .tempdir_in("/tmp")
            .unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        let hook = root.join("tests/fixtures/nvidia-hook/nvidia-container-runtime-hook");
        std::fs::copy(&hook, bin.join("nvidia-container-runtime-hook")).unwrap();
        std::fs::write(dir.path().join("daemon.json"), config).unwrap();
        // Its default bridge, named after its folder (`gnv` and six characters: an interface
        // name has at most 15). dockerd uses a bridge of another name only if it exists.
        let bridge = dir.path().file_name().unwrap().to_str().unwrap().to_owned();
        let made = Command::new("ip")
            .args(["link", "add", "name", &bridge, "type", "bridge"])
            .output()
            .unwrap();
        assert!(
            made.status.success(),
            "making the bridge {bridge}: {}",
            String::from_utf8_lossy(&made.stderr)
        );
        let daemon = Self::spawn(dir.path(), &bridge);
        let docker = NvidiaDocker {
            dir,
            daemon,
            bridge,
        };
        docker.wait_up();
        let image = std::env::var("GPUQ_TEST_IMAGE").unwrap_or("gpuq-test/busybox:latest".into());
        let copy = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "docker save '{image}' | docker -H unix://{} load",
                docker.socket().display()
            ))
            .output()
            .unwrap();
        assert!(
            copy.status.success(),
            "copying {image} into the throw-away dockerd: {}",
            String::from_utf8_lossy(&copy.stderr)
        );
        docker
    }

    /// Starts dockerd on the folder `d` with the default bridge `bridge` (its log appended to
    /// `d/dockerd.log`).
    fn spawn(d: &Path, bridge: &str) -> std::process::Child {
        let path = format!(
            "{}:{}",
            d.join("bin").display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(d.join("dockerd.log"))
            .unwrap();
        Command::new("dockerd")
            .arg("--config-file")
            .arg(d.join("daemon.json"))
            .arg("--data-root")
            .arg(d.join("data"))
            .arg("--exec-root")
            .arg(d.join("x"))
            .arg("--pidfile")
            .arg(d.join("docker.pid"))
            .arg("-H")
            .arg(format!("unix://{}", d.join("d.sock").display()))
            .arg(format!("--bridge={bridge}"))
            .args(["--iptables=false", "--ip-forward=false", "--ip-masq=false"])
            .env("PATH", path)
            .env("GPUQ_NVIDIA_HOOK_LOG", d.join("hook.log"))
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start a throw-away dockerd")
    }

    /// Waits (60 s at most) until the daemon answers.
    fn wait_up(&self) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while !self.cli(&["info"]).status.success() {
            assert!(
                std::time::Instant::now() < deadline,
                "throw-away dockerd did not come up: {}",
                std::fs::read_to_string(self.dir.path().join("dockerd.log")).unwrap_or_default()
            );
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    }

    /// Kills the daemon with SIGKILL, as a crash does: its containers outlive it, out of its sight.
    pub fn crash(&mut self) {
        let _ = self.daemon.kill();
        let _ = self.daemon.wait();
    }

    /// Stops the daemon with SIGTERM, as `systemctl stop docker` does, and waits until it has
    /// exited: without live-restore it stops its containers first.
    pub fn stop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.daemon.id().to_string()])
            .status();
        let _ = self.daemon.wait();
    }

    /// Starts the daemon again on the same data (the image and the old containers' records are
    /// still there) and waits until it answers.
    pub fn restart(&mut self) {
        self.daemon = Self::spawn(self.dir.path(), &self.bridge);
        self.wait_up();
    }

    /// Its socket, for `--docker-socket`.
    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("d.sock")
    }

    /// What the stub hook recorded (one `args:`/`state:` pair per container start).
    pub fn hook_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("hook.log")).unwrap_or_default()
    }

    /// Runs the docker CLI against this daemon.
    pub fn cli(&self, args: &[&str]) -> std::process::Output {
        Command::new("docker")
            .arg("-H")
            .arg(format!("unix://{}", self.socket().display()))
            .args(args)
            .output()
            .unwrap()
    }
}

impl Drop for NvidiaDocker {
    fn drop(&mut self) {
        // A network made in it (gpuq makes `gpuq-jobs`) is a bridge in the host's kernel, which
        // outlives the daemon and its data root: left there, each run kept one, and after a few
        // dozen Docker had no address pool left for a new network. Its containers go first, so
        // that the networks are unused.
        if matches!(self.daemon.try_wait(), Ok(None)) {
            let ids = self.cli(&["ps", "-aq"]);
            let ids = String::from_utf8_lossy(&ids.stdout).into_owned();
            let ids: Vec<&str> = ids.split_whitespace().collect();
            if !ids.is_empty() {
                let _ = self.cli(&[&["rm", "-f"][..], &ids].concat());
            }
            let _ = self.cli(&["network", "prune", "-f"]);
        }
        // SIGTERM: dockerd stops its containers and containerd and unmounts its layers (not to a
        // daemon already reaped: its pid may be another process's by now).
        if matches!(self.daemon.try_wait(), Ok(None)) {
            let _ = Command::new("kill")
                .args(["-TERM", &self.daemon.id().to_string()])
                .status();
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while matches!(self.daemon.try_wait(), Ok(None)) && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        let _ = self.daemon.kill();
        let _ = self.daemon.wait();
        let _ = Command::new("ip")
            .args(["link", "del", &self.bridge])
            .output();
    }
}
