//! The embedded Postgres: a cluster under `<data-dir>/pg`, run with the system's `initdb`/`pg_ctl`,
//! reachable only through a unix socket in a directory only its owner can enter.
//!
//! Postgres refuses to run as root, so when gpuq is root the cluster belongs to an unprivileged user
//! (`--pg-user`). A cluster already running on the same directory (another gpuq process, or
//! `gpuq user add` next to a running server) is attached to, not started twice.

use anyhow::{anyhow, bail, Context, Result};
use nix::unistd::{Gid, Uid, User};
use sqlx::postgres::PgConnectOptions;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Name of the database role and database gpuq uses inside its own cluster.
const ROLE: &str = "gpuq";
/// The socket file name is derived from a port even when no TCP port is opened.
const PORT: u16 = 5432;
/// Unix socket paths are limited to 107 bytes by the kernel.
const MAX_SOCKET_PATH: usize = 100;

/// A running embedded cluster and whether this process started it (and so must stop it).
#[derive(Debug)]
pub struct EmbeddedPg {
    cluster: PathBuf,
    socket_dir: PathBuf,
    owner: Option<(Uid, Gid)>,
    started_here: bool,
    stopped: bool,
}

impl EmbeddedPg {
    /// Creates the cluster on first use, starts it unless it is already running, and makes sure the
    /// `gpuq` database exists.
    pub fn start(data_dir: &Path, pg_user: &str) -> Result<Self> {
        let base = absolute(data_dir)?.join("pg");
        let cluster = base.join("data");
        let socket_dir = base.join("run");
        let socket_len = socket_dir.as_os_str().len() + 16;
        if socket_len > MAX_SOCKET_PATH {
            bail!(
                "data directory path is too long for a unix socket ({} bytes; keep `{}` under {} bytes)",
                socket_len,
                socket_dir.display(),
                MAX_SOCKET_PATH - 16
            );
        }
        let owner = if Uid::effective().is_root() {
            let user = User::from_name(pg_user)
                .with_context(|| format!("looking up system user `{pg_user}`"))?
                .ok_or_else(|| {
                    anyhow!(
                        "gpuq runs as root and Postgres refuses root: system user `{pg_user}` \
                         (--pg-user) does not exist; create it or pass --database-url"
                    )
                })?;
            Some((user.uid, user.gid))
        } else {
            None
        };
        for dir in [&base, &socket_dir] {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            if let Some((uid, gid)) = owner {
                nix::unistd::chown(dir.as_path(), Some(uid), Some(gid))
                    .with_context(|| format!("giving {} to {pg_user}", dir.display()))?;
            }
        }
        set_mode(&socket_dir, 0o700)?;
        let mut pg = EmbeddedPg {
            cluster,
            socket_dir,
            owner,
            started_here: false,
            stopped: false,
        };
        if !pg.cluster.join("PG_VERSION").exists() {
            pg.initdb()?;
        }
        if pg.is_running() {
            tracing::info!(cluster = %pg.cluster.display(), "attached to running embedded Postgres");
        } else {
            pg.run_start()?;
            pg.started_here = true;
            tracing::info!(cluster = %pg.cluster.display(), "started embedded Postgres");
        }
        Ok(pg)
    }

    /// Connection options for the `gpuq` database over the cluster's socket.
    pub fn connect_options(&self, database: &str) -> PgConnectOptions {
        PgConnectOptions::new()
            .socket(&self.socket_dir)
            .port(PORT)
            .username(ROLE)
            .database(database)
    }

    /// Stops the cluster if this process started it. Safe to call twice.
    pub fn stop(&mut self) -> Result<()> {
        if !self.started_here || self.stopped {
            return Ok(());
        }
        self.stopped = true;
        let out = self.pg_ctl(&["stop", "-m", "fast", "-w", "-t", "60"])?;
        check(&out, "pg_ctl stop")?;
        tracing::info!("stopped embedded Postgres");
        Ok(())
    }

    /// Whether this process started the cluster (rather than attaching to a running one).
    pub fn started_here(&self) -> bool {
        self.started_here
    }

    fn initdb(&self) -> Result<()> {
        let args = [
            "-D".as_ref(),
            self.cluster.as_os_str(),
            "-U".as_ref(),
            ROLE.as_ref(),
            "--auth-local=trust".as_ref(),
            "--auth-host=reject".as_ref(),
            "-E".as_ref(),
            "UTF8".as_ref(),
            "--no-instructions".as_ref(),
        ];
        let out = self
            .command("initdb")?
            .args(args)
            .output()
            .context("running initdb")?;
        check(&out, "initdb")
    }

    fn is_running(&self) -> bool {
        self.pg_ctl(&["status"])
            .map(|o| o.status.success())
            .unwrap_or(false)
    }

    fn run_start(&self) -> Result<()> {
        let opts = format!(
            "-c listen_addresses='' -c unix_socket_directories='{}' -c unix_socket_permissions=0700 -p {}",
            self.socket_dir.display(),
            PORT
        );
        let log = self.cluster.join("postgres.log");
        let log = log.to_string_lossy().into_owned();
        let out = self.pg_ctl(&["start", "-w", "-t", "60", "-l", &log, "-o", &opts])?;
        check(&out, "pg_ctl start").with_context(|| format!("see {log}"))?;
        self.ensure_database()
    }

    fn ensure_database(&self) -> Result<()> {
        let exists = self.psql(&format!(
            "SELECT 1 FROM pg_database WHERE datname = '{ROLE}'"
        ))?;
        if exists.trim() != "1" {
            self.psql(&format!("CREATE DATABASE {ROLE}"))?;
        }
        Ok(())
    }

    fn psql(&self, sql: &str) -> Result<String> {
        let out = self
            .command("psql")?
            .args(["-X", "-q", "-t", "-A", "-v", "ON_ERROR_STOP=1", "-h"])
            .arg(&self.socket_dir)
            .args([
                "-p",
                &PORT.to_string(),
                "-U",
                ROLE,
                "-d",
                "postgres",
                "-c",
                sql,
            ])
            .output()
            .context("running psql")?;
        check(&out, "preparing the gpuq database")?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    fn pg_ctl(&self, args: &[&str]) -> Result<Output> {
        self.command("pg_ctl")?
            .arg("-D")
            .arg(&self.cluster)
            .args(args)
            .output()
            .context("running pg_ctl")
    }

    fn command(&self, program: &str) -> Result<Command> {
        let mut cmd = Command::new(find_program(program)?);
        cmd.current_dir(self.cluster.parent().unwrap_or(Path::new("/")));
        if let Some((uid, gid)) = self.owner {
            cmd.uid(uid.as_raw()).gid(gid.as_raw());
        }
        Ok(cmd)
    }
}

impl Drop for EmbeddedPg {
    fn drop(&mut self) {
        if let Err(e) = self.stop() {
            tracing::warn!(error = %e, "stopping embedded Postgres");
        }
    }
}

/// What `gpuq doctor` may know of the embedded cluster without starting or changing it.
#[derive(Debug, Clone)]
pub struct EmbeddedProbe {
    /// The cluster's data folder.
    pub cluster: PathBuf,
    /// It has been created (`PG_VERSION` exists).
    pub initialised: bool,
    /// Its socket exists, so a server is probably running.
    pub socket_present: bool,
    /// How to connect to the `gpuq` database, if it runs.
    pub connect: PgConnectOptions,
}

/// Looks at the embedded cluster under `data_dir` without touching it.
pub fn probe(data_dir: &Path) -> Result<EmbeddedProbe> {
    let base = std::path::absolute(data_dir)
        .with_context(|| format!("resolving {}", data_dir.display()))?
        .join("pg");
    let socket_dir = base.join("run");
    Ok(EmbeddedProbe {
        initialised: base.join("data").join("PG_VERSION").exists(),
        socket_present: socket_dir.join(format!(".s.PGSQL.{PORT}")).exists(),
        cluster: base.join("data"),
        connect: PgConnectOptions::new()
            .socket(&socket_dir)
            .port(PORT)
            .username(ROLE)
            .database(ROLE),
    })
}

/// Finds a Postgres program on PATH, else in Debian's versioned directory.
pub fn find_program(name: &str) -> Result<PathBuf> {
    let on_path = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default();
    let mut debian: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|rd| rd.flatten().map(|e| e.path().join("bin")).collect())
        .unwrap_or_default();
    debian.sort();
    debian.reverse();
    on_path
        .into_iter()
        .chain(debian)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            anyhow!("`{name}` not found on PATH or in /usr/lib/postgresql: install the Postgres server or pass --database-url")
        })
}

fn check(out: &Output, what: &str) -> Result<()> {
    if out.status.success() {
        return Ok(());
    }
    bail!(
        "{what} failed ({}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr).trim(),
        String::from_utf8_lossy(&out.stdout).trim()
    )
}

fn absolute(path: &Path) -> Result<PathBuf> {
    std::fs::create_dir_all(path).with_context(|| format!("creating {}", path.display()))?;
    path.canonicalize()
        .with_context(|| format!("resolving {}", path.display()))
}

fn set_mode(path: &Path, mode: u32) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .with_context(|| format!("setting permissions of {}", path.display()))
}
