//! The embedded Postgres: a cluster under `<data-dir>/pg`, run with the system's `initdb`/`pg_ctl`,
//! reachable only through a unix socket in a directory only its owner can enter.
//!
//! Reaching the socket is not enough to get in: every local connection authenticates with
//! SCRAM-SHA-256 against a secret gpuq generates once and keeps in `<data-dir>/pg-password` (mode
//! 0600, gpuq's own user), so the cluster's superuser is never open by `trust` to whoever else can
//! reach the socket (a process of the cluster's owner, root in a container given the folder). A
//! cluster made before the secret (trusting its socket) gets a password and the same rules at its
//! next start.
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
/// The file, in the data directory, holding the password of the cluster's roles.
pub const PASSWORD_FILE: &str = "pg-password";
/// The cluster's client authentication: a password over the socket, nothing over TCP (which is not
/// opened anyway).
const HBA: &str =
    "# Written by gpuq: every connection proves the password in <data-dir>/pg-password.\n\
                   local all all scram-sha-256\n";

/// A running embedded cluster and whether this process started it (and so must stop it).
#[derive(Debug)]
pub struct EmbeddedPg {
    cluster: PathBuf,
    socket_dir: PathBuf,
    password: String,
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
        let password = password::load_or_create(&absolute(data_dir)?.join(PASSWORD_FILE))?;
        let mut pg = EmbeddedPg {
            cluster,
            socket_dir,
            password,
            owner,
            started_here: false,
            stopped: false,
        };
        if !pg.cluster.join("PG_VERSION").exists() {
            pg.initdb()?;
            pg.write_hba()?;
        }
        if pg.is_running() {
            tracing::info!(cluster = %pg.cluster.display(), "attached to running embedded Postgres");
        } else {
            pg.run_start()?;
            pg.started_here = true;
            tracing::info!(cluster = %pg.cluster.display(), "started embedded Postgres");
        }
        if !pg.hba_is_ours() {
            pg.close_trust()?;
        }
        pg.ensure_database()?;
        Ok(pg)
    }

    /// Connection options for the `gpuq` database over the cluster's socket.
    pub fn connect_options(&self, database: &str) -> PgConnectOptions {
        PgConnectOptions::new()
            .socket(&self.socket_dir)
            .port(PORT)
            .username(ROLE)
            .password(&self.password)
            .database(database)
    }

    /// The password of the cluster's roles (`gpuq`, and the application's role gpuq makes).
    pub fn password(&self) -> &str {
        &self.password
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
            // Nobody gets in until the owner role has its password and gpuq's rules are written.
            "--auth-local=reject".as_ref(),
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
        check(&out, "initdb")?;
        self.set_password_offline()
    }

    /// Gives the owner role its password in single-user mode (the cluster stopped, no socket),
    /// the statement on standard input: neither a command line nor a file shows it to anyone.
    fn set_password_offline(&self) -> Result<()> {
        let mut single = self.command("postgres")?;
        single
            .arg("--single")
            .arg("-D")
            .arg(&self.cluster)
            .arg("postgres");
        let sql = format!("ALTER ROLE {ROLE} PASSWORD '{}'\n", self.password);
        let out = run_with_input(single, &sql, "postgres --single")?;
        check(&out, "setting the embedded cluster's password")?;
        let said = String::from_utf8_lossy(&out.stdout);
        if said.contains("ERROR") {
            bail!("setting the embedded cluster's password: {}", said.trim());
        }
        Ok(())
    }

    /// Whether the cluster's `pg_hba.conf` is gpuq's own (password only).
    fn hba_is_ours(&self) -> bool {
        std::fs::read_to_string(self.cluster.join("pg_hba.conf")).is_ok_and(|hba| hba == HBA)
    }

    /// Writes gpuq's `pg_hba.conf`, as the cluster's owner: gpuq running as root never writes
    /// into a folder another user owns, where a planted link could point it anywhere.
    fn write_hba(&self) -> Result<()> {
        let path = self.cluster.join("pg_hba.conf");
        let mut tee = self.command("sh")?;
        tee.args(["-c", "cat > \"$0\""]).arg(&path);
        let out = run_with_input(tee, HBA, "writing pg_hba.conf")?;
        check(&out, &format!("writing {}", path.display()))
    }

    /// A cluster made before the password trusts its socket: give its owner role the password
    /// over that trusted way in, then require it from every connection.
    fn close_trust(&self) -> Result<()> {
        tracing::info!(cluster = %self.cluster.display(), "embedded Postgres: requiring a password on its socket");
        self.psql(&format!("ALTER ROLE {ROLE} PASSWORD '{}'", self.password))?;
        self.write_hba()?;
        self.psql("SELECT pg_reload_conf()")?;
        Ok(())
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
        check(&out, "pg_ctl start").with_context(|| format!("see {log}"))
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

    /// Runs `sql` as the cluster's owner role. The statement goes through standard input, never
    /// the command line, which every local user can read in `ps`.
    fn psql(&self, sql: &str) -> Result<String> {
        let mut psql = self.command("psql")?;
        psql.args(["-X", "-q", "-t", "-A", "-v", "ON_ERROR_STOP=1", "-h"])
            .arg(&self.socket_dir)
            .args(["-p", &PORT.to_string(), "-U", ROLE, "-d", "postgres"])
            .env("PGPASSWORD", &self.password);
        let out = run_with_input(psql, sql, "psql")?;
        check(&out, "preparing the gpuq database").with_context(|| {
            format!(
                "the embedded cluster's password is kept in {PASSWORD_FILE} in the data directory; \
                 if that file was removed or replaced, restore it"
            )
        })?;
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
    /// Why the cluster's password file could not be read, if it is there and could not be (the
    /// doctor then says so).
    pub password_error: Option<String>,
}

/// Looks at the embedded cluster under `data_dir` without touching it.
pub fn probe(data_dir: &Path) -> Result<EmbeddedProbe> {
    let base = std::path::absolute(data_dir)
        .with_context(|| format!("resolving {}", data_dir.display()))?
        .join("pg");
    let socket_dir = base.join("run");
    let mut connect = PgConnectOptions::new()
        .socket(&socket_dir)
        .port(PORT)
        .username(ROLE)
        .database(ROLE);
    let password_file = std::path::absolute(data_dir)
        .unwrap_or_else(|_| data_dir.to_owned())
        .join(PASSWORD_FILE);
    // No file: a cluster from before the password (it still trusts its socket) or none at all.
    let password_error = match password_file.symlink_metadata() {
        Err(_) => None,
        Ok(_) => match password::read(&password_file) {
            Ok(secret) => {
                connect = connect.password(&secret);
                None
            }
            Err(e) => Some(format!("{e:#}")),
        },
    };
    Ok(EmbeddedProbe {
        initialised: base.join("data").join("PG_VERSION").exists(),
        socket_present: socket_dir.join(format!(".s.PGSQL.{PORT}")).exists(),
        cluster: base.join("data"),
        connect,
        password_error,
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

/// Runs `cmd` with `input` on its standard input and collects its output.
fn run_with_input(mut cmd: Command, input: &str, what: &str) -> Result<Output> {
    use std::io::Write;
    use std::process::Stdio;
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("running {what}"))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(input.as_bytes())
            .with_context(|| format!("feeding {what}"))?;
    }
    child
        .wait_with_output()
        .with_context(|| format!("waiting for {what}"))
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

/// The cluster's password file: made once, readable by gpuq's user alone.
mod password {
    use anyhow::{bail, Context, Result};
    use rand::RngCore;
    use std::io::{Read, Write};
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    use std::path::Path;

    /// The password kept in `path`, made (32 random bytes, hex) if there is none yet.
    pub fn load_or_create(path: &Path) -> Result<String> {
        if path.symlink_metadata().is_ok() {
            return read(path);
        }
        let mut bytes = [0u8; 32];
        rand::rngs::OsRng.fill_bytes(&mut bytes);
        let secret = hex::encode(bytes);
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(nix::libc::O_NOFOLLOW)
            .open(path)
            .with_context(|| format!("creating {}", path.display()))?;
        writeln!(file, "{secret}").with_context(|| format!("writing {}", path.display()))?;
        file.sync_all()
            .with_context(|| format!("writing {}", path.display()))?;
        Ok(secret)
    }

    /// The password kept in `path`; its mode is set back to 0600 if it had become wider.
    pub fn read(path: &Path) -> Result<String> {
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(nix::libc::O_NOFOLLOW)
            .open(path)
            .with_context(|| {
                format!("reading the embedded cluster's password {}", path.display())
            })?;
        let mode = file.metadata()?.permissions().mode();
        if mode & 0o077 != 0 {
            tracing::warn!(file = %path.display(), mode = format!("{:o}", mode & 0o777), "the embedded cluster's password was readable by others; restricting it to 0600");
            file.set_permissions(std::fs::Permissions::from_mode(0o600))
                .with_context(|| format!("restricting {}", path.display()))?;
        }
        let mut text = String::new();
        file.read_to_string(&mut text)
            .with_context(|| format!("reading {}", path.display()))?;
        let secret = text.trim();
        if secret.is_empty() || !secret.chars().all(|c| c.is_ascii_alphanumeric()) {
            bail!(
                "{} does not hold a password gpuq made (letters and digits on one line)",
                path.display()
            );
        }
        Ok(secret.to_owned())
    }
}
