//! The bench's registry and image: Debian's `docker-registry` (distribution 2.8) on a free
//! loopback port (dockerd pulls from `127.0.0.0/8` without TLS), and an image of busybox and a
//! layer of random bytes pushed to it (random bytes do not compress: a pull moves all of them).

use anyhow::{bail, Context, Result};
use rand::RngCore;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running registry, stopped and its storage removed when dropped.
pub(super) struct Registry {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl Registry {
    /// Starts `program` (`docker-registry`) and waits up to 20 s until it answers.
    pub(super) async fn start(program: &str) -> Result<Registry> {
        let dir =
            std::env::temp_dir().join(format!("gpuq-bench-registry-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).context("a folder for the registry")?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let config = dir.join("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {}\n\
                 http:\n  addr: 127.0.0.1:{port}\n",
                dir.join("storage").display()
            ),
        )?;
        let log = std::fs::File::create(dir.join("registry.log"))?;
        let child = Command::new(program)
            .arg("serve")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {program} (Debian: apt install docker-registry)"))?;
        let registry = Registry { child, port, dir };
        let deadline = Instant::now() + Duration::from_secs(20);
        let url = format!("http://127.0.0.1:{port}/v2/");
        loop {
            if let Ok(r) = reqwest::get(&url).await {
                if r.status().is_success() {
                    return Ok(registry);
                }
            }
            if Instant::now() > deadline {
                bail!(
                    "the registry never answered: {}",
                    std::fs::read_to_string(registry.dir.join("registry.log")).unwrap_or_default()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// `127.0.0.1:PORT`.
    pub(super) fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Makes `reference` from `/bin/busybox` and `mib` MiB of random bytes (`docker import`: one
/// layer), pushes it to its registry and removes it from this dockerd again.
pub(super) fn push_image(reference: &str, mib: u64) -> Result<()> {
    let root = std::env::temp_dir().join(format!("gpuq-bench-image-{}", uuid::Uuid::new_v4()));
    let made = (|| -> Result<()> {
        for d in ["bin", "tmp", "dev", "proc", "sys", "etc"] {
            std::fs::create_dir_all(root.join(d))?;
        }
        std::fs::copy("/bin/busybox", root.join("bin/busybox"))
            .context("/bin/busybox (Debian: apt install busybox-static)")?;
        for tool in ["sh", "true", "sleep"] {
            std::os::unix::fs::symlink("busybox", root.join("bin").join(tool))?;
        }
        let mut data = vec![0u8; (mib as usize) << 20];
        rand::thread_rng().fill_bytes(&mut data);
        std::fs::write(root.join("random"), data)?;
        sh(
            &root,
            &format!("chmod 1777 tmp && tar -c . | docker import -c 'ENV PATH=/bin' - {reference}"),
        )?;
        sh(&root, &format!("docker push {reference} >/dev/null"))?;
        sh(&root, &format!("docker rmi {reference} >/dev/null"))
    })();
    let _ = std::fs::remove_dir_all(&root);
    made
}

fn sh(dir: &std::path::Path, script: &str) -> Result<()> {
    let out = Command::new("sh")
        .arg("-c")
        .arg(script)
        .current_dir(dir)
        .output()
        .with_context(|| format!("running `{script}`"))?;
    if !out.status.success() {
        bail!(
            "`{script}`: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}
