//! The host side: the data directory and free disk, the database (reachable, migrations current,
//! clock), the launch policy against what the host shares, and the listen address. Nothing here
//! migrates or starts anything.

use super::{Check, DoctorOptions};
use crate::model::LaunchPolicy;
use crate::server::db::manifest::{self, Manifest};
use crate::server::db::{embedded, settings};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::PgPool;
use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

const GIB: u64 = 1024 * 1024 * 1024;
/// Below this much free space a check fails; below [`WARN_FREE`] it warns.
const FAIL_FREE: u64 = GIB;
const WARN_FREE: u64 = 10 * GIB;
/// Clock difference with Postgres beyond which the clock check warns.
const CLOCK_SKEW_S: f64 = 2.0;

/// The data directory (writable), the embedded Postgres programs, free disk.
pub(super) fn storage(opts: &DoctorOptions, docker_root: Option<&str>) -> Vec<Check> {
    let mut checks = vec![data_dir(&opts.data_dir), secrets_key(&opts.data_dir)];
    if opts.database_url.is_none() {
        checks.push(postgres_programs());
    }
    checks.push(free_disk("disk-data", &opts.data_dir));
    match docker_root {
        Some(root) => checks.push(free_disk("disk-docker", Path::new(root))),
        None => checks.push(Check::warn(
            "disk-docker",
            "Docker's root directory is unknown (Docker unreachable)",
            "fix the docker check first",
        )),
    }
    checks
}

/// The key registry passwords are sealed under: `GPUQ_SECRETS_KEY` if set, else the key file in
/// the data directory, which must be readable by its owner only.
fn secrets_key(data_dir: &Path) -> Check {
    use crate::server::registries::key::KEY_ENV;
    use crate::server::registries::{KeyError, SecretsKey};
    const NAME: &str = "secrets-key";
    let key = match std::env::var(KEY_ENV) {
        Ok(text) if !text.trim().is_empty() => match SecretsKey::from_base64(&text) {
            Ok(key) => key,
            Err(e) => {
                return Check::fail(
                    NAME,
                    e.to_string(),
                    format!("set {KEY_ENV} to the base64 of 32 bytes (`openssl rand -base64 32`), the same on every node"),
                )
            }
        },
        _ => SecretsKey::in_data_dir(data_dir),
    };
    match key.for_opening() {
        Ok(_) if std::env::var(KEY_ENV).is_ok_and(|t| !t.trim().is_empty()) => {
            Check::pass(NAME, format!("registry credentials are sealed under {KEY_ENV}"))
        }
        Ok(_) => Check::pass(
            NAME,
            format!(
                "registry credentials are sealed under {} (readable by its owner only)",
                data_dir.join("secrets.key").display()
            ),
        ),
        Err(KeyError::Missing(path)) => Check::pass(
            NAME,
            format!("no secrets key yet: {path} is made (mode 0600) when an admin first stores registry credentials"),
        ),
        Err(e @ KeyError::Exposed { .. }) => {
            let fix = format!("chmod 600 {}", data_dir.join("secrets.key").display());
            Check::fail(NAME, e.to_string(), fix)
        }
        Err(e) => Check::fail(
            NAME,
            e.to_string(),
            format!("give gpuq a key it can read: {KEY_ENV}, or a key file in the data directory"),
        ),
    }
}

/// The nearest existing folder at or above `path`.
fn existing_ancestor(path: &Path) -> PathBuf {
    let abs = std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
    abs.ancestors()
        .find(|p| p.exists())
        .unwrap_or(Path::new("/"))
        .to_owned()
}

fn data_dir(dir: &Path) -> Check {
    const NAME: &str = "data-dir";
    let fix = format!(
        "create {} and give it to gpuq's user (`install -d -o gpuq -g gpuq -m 0750 DIR`)",
        dir.display()
    );
    if !dir.exists() {
        let parent = existing_ancestor(dir);
        return match nix::unistd::access(&parent, nix::unistd::AccessFlags::W_OK) {
            Ok(()) => Check::pass(
                NAME,
                format!(
                    "{} does not exist yet; gpuq serve creates it under {}",
                    dir.display(),
                    parent.display()
                ),
            ),
            Err(e) => Check::fail(
                NAME,
                format!(
                    "{} does not exist and {} is not writable ({e})",
                    dir.display(),
                    parent.display()
                ),
                fix,
            ),
        };
    }
    if !dir.is_dir() {
        return Check::fail(NAME, format!("{} is not a directory", dir.display()), fix);
    }
    let probe = dir.join(format!(".gpuq-doctor-{}", std::process::id()));
    match std::fs::write(&probe, b"probe") {
        Ok(()) => {
            let _ = std::fs::remove_file(&probe);
            Check::pass(NAME, format!("{} is writable", dir.display()))
        }
        Err(e) => Check::fail(NAME, format!("{} is not writable: {e}", dir.display()), fix),
    }
}

fn postgres_programs() -> Check {
    const NAME: &str = "postgres-programs";
    let mut found = Vec::new();
    for program in ["initdb", "pg_ctl", "postgres", "psql"] {
        match embedded::find_program(program) {
            Ok(p) => found.push(p.display().to_string()),
            Err(e) => {
                return Check::fail(
                    NAME,
                    format!("embedded Postgres (no --database-url): {e}"),
                    "install the Postgres server (`apt install postgresql` / `dnf install postgresql-server`) or pass --database-url",
                )
            }
        }
    }
    Check::pass(
        NAME,
        format!("embedded Postgres programs: {}", found.join(", ")),
    )
}

fn free_disk(name: &'static str, path: &Path) -> Check {
    let at = existing_ancestor(path);
    match nix::sys::statvfs::statvfs(&at) {
        Ok(s) => {
            let free = s.blocks_available() * s.fragment_size();
            let total = s.blocks() * s.fragment_size();
            let detail = format!(
                "{}: {:.1} GiB free of {:.1} GiB",
                at.display(),
                free as f64 / GIB as f64,
                total as f64 / GIB as f64
            );
            let fix = if name == "disk-docker" {
                format!(
                    "free space on the file system of {} (Docker's images and containers): images \
                     gpuq pulled go after the launch policy's image_keep_days, and set \
                     image_disk_max_gib to bound them; images loaded by hand are never removed \
                     by gpuq (`docker image prune -a` removes unused ones)",
                    at.display()
                )
            } else {
                format!(
                    "free space on the file system of {} (job logs, images, the database live there)",
                    at.display()
                )
            };
            if free < FAIL_FREE {
                Check::fail(name, detail, fix)
            } else if free < WARN_FREE {
                Check::warn(name, detail, fix)
            } else {
                Check::pass(name, detail)
            }
        }
        Err(e) => Check::warn(
            name,
            format!("cannot read free space of {}: {e}", at.display()),
            "run gpuq doctor as gpuq's user or as root",
        ),
    }
}

/// Postgres reachable, migrations current, clock agreement, and the launch policy it holds against
/// Docker's root (`docker_root`, when known). Never migrates, never starts the embedded cluster.
pub(super) async fn database(
    opts: &DoctorOptions,
    docker_root: Option<&str>,
    cards: &[(String, Option<u64>)],
) -> Vec<Check> {
    let target = match connect_options(opts) {
        Ok(t) => t,
        Err(check) => return vec![check],
    };
    let (options, what) = target;
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(Duration::from_secs(5))
        .connect_with(options)
        .await;
    let pool = match pool {
        Ok(p) => p,
        Err(e) => {
            return vec![Check::fail(
                "postgres",
                format!("{what}: cannot connect: {e}"),
                "start Postgres, or check --database-url (host, port, user, password, database)",
            )]
        }
    };
    let version: String = sqlx::query_scalar("SHOW server_version")
        .fetch_one(&pool)
        .await
        .unwrap_or_else(|_| "?".into());
    let checks = vec![
        Check::pass("postgres", format!("{what}: Postgres {version} answers")),
        migrations(&pool).await,
        clock(&pool).await,
        policy(&pool, docker_root.map(Path::new), cards).await,
    ];
    pool.close().await;
    checks
}

/// Where the database is; for the embedded cluster, only when it already runs.
fn connect_options(opts: &DoctorOptions) -> Result<(PgConnectOptions, String), Check> {
    if let Some(url) = &opts.database_url {
        let o = PgConnectOptions::from_str(url).map_err(|e| {
            Check::fail(
                "postgres",
                format!("--database-url does not parse: {e}"),
                "postgres://USER:PASSWORD@HOST:PORT/DATABASE",
            )
        })?;
        let what = format!(
            "{}:{}/{}",
            o.get_host(),
            o.get_port(),
            o.get_database().unwrap_or("?")
        );
        return Ok((o, what));
    }
    let probe = embedded::probe(&opts.data_dir).map_err(|e| {
        Check::fail(
            "postgres",
            format!("embedded cluster: {e:#}"),
            "check --data-dir",
        )
    })?;
    let where_ = probe.cluster.display().to_string();
    if !probe.initialised {
        return Err(Check::warn(
            "postgres",
            format!("embedded cluster {where_} not created yet (the doctor does not create it)"),
            "`gpuq serve` creates and starts it on its first start; run the doctor again afterwards",
        ));
    }
    if !probe.socket_present {
        return Err(Check::warn(
            "postgres",
            format!("embedded cluster {where_} is not running (the doctor does not start it)"),
            "start gpuq (`systemctl start gpuq`), which starts it, then run the doctor again to check migrations and the clock",
        ));
    }
    if let Some(e) = probe.password_error {
        return Err(Check::fail(
            "postgres",
            format!("embedded cluster {where_}: {e}"),
            "run gpuq doctor as gpuq's user or as root (the cluster's password is theirs alone)",
        ));
    }
    Ok((probe.connect, format!("embedded cluster {where_}")))
}

async fn migrations(pool: &PgPool) -> Check {
    const NAME: &str = "migrations";
    let known = sqlx::migrate!("./migrations");
    let want: BTreeMap<i64, Vec<u8>> = known
        .iter()
        .filter(|m| m.migration_type.is_up_migration())
        .map(|m| (m.version, m.checksum.to_vec()))
        .collect();
    let applied: Result<Vec<(i64, Vec<u8>, bool)>, _> =
        sqlx::query_as("SELECT version, checksum, success FROM _sqlx_migrations ORDER BY version")
            .fetch_all(pool)
            .await;
    let applied = match applied {
        Ok(a) => a,
        Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("42P01") => {
            return Check::warn(
                NAME,
                format!(
                    "an empty database: none of this binary's {} migrations applied",
                    want.len()
                ),
                "`gpuq serve` applies them at start",
            )
        }
        Err(e) => {
            return Check::fail(
                NAME,
                format!("reading _sqlx_migrations: {e}"),
                "check the database role's rights",
            )
        }
    };
    if let Some((v, _, _)) = applied.iter().find(|(_, _, ok)| !ok) {
        return Check::fail(
            NAME,
            format!("migration {v} failed part-way"),
            "restore the database from a backup; see the server log of that start",
        );
    }
    let applied: BTreeMap<i64, Vec<u8>> = applied.into_iter().map(|(v, s, _)| (v, s)).collect();
    let Drift {
        unknown,
        changed,
        pending,
    } = drift(&want, &applied);
    if !unknown.is_empty() {
        return Check::fail(
            NAME,
            format!("the database has migrations this binary does not know: {unknown:?}"),
            "this binary is older than the database: install the newer gpuq",
        );
    }
    if !changed.is_empty() {
        return Check::fail(
            NAME,
            format!("applied migrations differ from this binary's: {changed:?}"),
            "install the gpuq build that made this database, or restore a backup",
        );
    }
    if pending.is_empty() {
        Check::pass(NAME, format!("all {} migrations applied", want.len()))
    } else {
        Check::warn(
            NAME,
            format!(
                "{} of {} migrations pending: {pending:?}",
                pending.len(),
                want.len()
            ),
            "`gpuq serve` applies them at its next start (an upgrade)",
        )
    }
}

/// How the database's migrations (version → checksum) differ from this binary's.
#[derive(Debug, Default, PartialEq, Eq)]
struct Drift {
    /// Applied, but this binary does not know them (it is older than the database).
    unknown: Vec<i64>,
    /// Applied with another checksum than this binary's.
    changed: Vec<i64>,
    /// This binary's, not applied yet.
    pending: Vec<i64>,
}

fn drift(want: &BTreeMap<i64, Vec<u8>>, applied: &BTreeMap<i64, Vec<u8>>) -> Drift {
    let mut d = Drift::default();
    for (version, sum) in applied {
        match want.get(version) {
            None => d.unknown.push(*version),
            Some(ours) if ours != sum => d.changed.push(*version),
            Some(_) => {}
        }
    }
    d.pending = want
        .keys()
        .filter(|v| !applied.contains_key(v))
        .copied()
        .collect();
    d
}

/// The launch policy as it applies to this host: does it let a job fill the disk dockerd and every
/// job share, through a writable root or through a volume, or let the jobs that can run here at
/// once (on `cards`, each a model and its VRAM) take the host's memory?
async fn policy(
    pool: &PgPool,
    docker_root: Option<&Path>,
    cards: &[(String, Option<u64>)],
) -> Check {
    let read = async {
        let p = settings::launch_policy(pool).await?;
        let m = manifest::load(&mut *pool.acquire().await?).await?;
        Ok::<_, sqlx::Error>((p, m))
    };
    match read.await {
        Ok((p, m)) => {
            let host = HostFacts {
                memory_mib: host_memory_mib(),
                cards: card_rooms(&p, &m, cards),
            };
            policy_check(&p, docker_root, &host, |path| {
                std::fs::metadata(existing_ancestor(path))
                    .ok()
                    .map(|m| m.dev())
            })
        }
        Err(e) => Check::warn(
            "policy",
            format!("reading the launch policy and the manifest: {e}"),
            "let `gpuq serve` apply its migrations, then run the doctor again",
        ),
    }
}

/// The host the policy is judged against.
#[derive(Debug)]
struct HostFacts {
    /// `MemTotal`, MiB; `None` where it cannot be read.
    memory_mib: Option<u64>,
    /// This node's cards whose VRAM is known.
    cards: Vec<CardRoom>,
}

/// A card, for counting the jobs that can share it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct CardRoom {
    /// VRAM, MiB.
    total_mib: u64,
    /// The least one job may commit on it, MiB: the policy's `min_vram_mib`, or less where the
    /// manifest gives a workload type a smaller need on the card's model.
    least_mib: u64,
}

/// The cards (model, VRAM) as rooms for jobs under the policy and the manifest.
fn card_rooms(p: &LaunchPolicy, m: &Manifest, cards: &[(String, Option<u64>)]) -> Vec<CardRoom> {
    cards
        .iter()
        .filter_map(|(model, total)| {
            let least_need = m
                .needs
                .values()
                .filter_map(|needs| needs.get(model))
                .map(|mib| u64::try_from(*mib).unwrap_or(0))
                .min();
            Some(CardRoom {
                total_mib: (*total)?,
                least_mib: least_need.map_or(p.min_vram_mib, |n| n.min(p.min_vram_mib)),
            })
        })
        .collect()
}

/// How many jobs can run on this node at once under `p`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AtOnce {
    /// At most `on_cards` on the cards (each card's VRAM over the least a job may commit there)
    /// and `cpu` without a GPU.
    Bounded { on_cards: u64, cpu: u64 },
    /// Nothing bounds them; the field that lets them be many.
    Unbounded(&'static str),
}

/// The most jobs that can run at once on `cards` and without a GPU under `p` (an upper bound: it
/// leaves out the headroom kept on each card and counts a job of several cards once a card).
fn at_once(p: &LaunchPolicy, cards: &[CardRoom]) -> AtOnce {
    if p.max_cpu_jobs_per_node == 0 {
        return AtOnce::Unbounded("max_cpu_jobs_per_node is 0 (no cap on jobs without a GPU)");
    }
    if cards.iter().any(|c| c.least_mib == 0) {
        return AtOnce::Unbounded(
            "a job may commit 0 MiB on a card (min_vram_mib or the manifest)",
        );
    }
    AtOnce::Bounded {
        on_cards: cards.iter().map(|c| c.total_mib / c.least_mib).sum(),
        cpu: u64::from(p.max_cpu_jobs_per_node),
    }
}

/// What the jobs that can run at once may take of the host's memory (`host_mib`): how much in
/// all where that fits, else the risk.
fn memory_at_once(p: &LaunchPolicy, host: &HostFacts, host_mib: u64) -> Result<String, String> {
    let each = p.memory_limit_mib;
    match at_once(p, &host.cards) {
        AtOnce::Unbounded(why) => Err(format!(
            "nothing bounds the jobs that can run here at once ({why}), and each may use \
             memory_limit_mib {each} MiB: together they can take the host's {host_mib} MiB"
        )),
        AtOnce::Bounded { on_cards, cpu } => {
            let jobs = on_cards + cpu;
            let all = jobs.saturating_mul(each);
            if all.saturating_add(HOST_RESERVE_MIB) > host_mib {
                Err(format!(
                    "up to {jobs} jobs can run here at once ({on_cards} on {} cards by the least \
                     VRAM a job may commit, {cpu} without a GPU), each with memory_limit_mib \
                     {each}: {all} MiB in all, more than the {} MiB this host's {host_mib} \
                     leave after {HOST_RESERVE_MIB} for everything else: together they can take \
                     the host's memory",
                    host.cards.len(),
                    host_mib.saturating_sub(HOST_RESERVE_MIB)
                ))
            } else {
                Ok(format!(
                    "up to {jobs} jobs at once fit in memory ({all} of {host_mib} MiB)"
                ))
            }
        }
    }
}

/// This host's memory (`MemTotal` of `/proc/meminfo`), MiB; `None` where it cannot be read.
fn host_memory_mib() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse::<u64>()
        .ok()?;
    Some(kib / 1024)
}

/// Memory the jobs' limits must leave to the rest of the host (gpuq, Postgres, dockerd, the
/// system), MiB: one job's limit, and the limits of all the jobs that can run at once.
const HOST_RESERVE_MIB: u64 = 2048;

/// [`policy`] with the host (its memory, its cards) and the file system of a path (`device`)
/// given, so it is tested without mounts.
fn policy_check(
    p: &LaunchPolicy,
    docker_root: Option<&Path>,
    host: &HostFacts,
    device: impl Fn(&Path) -> Option<u64>,
) -> Check {
    const NAME: &str = "policy";
    let mut risks = Vec::new();
    let mut memory = None;
    if !p.read_only_rootfs {
        risks.push("read_only_rootfs is off: a job can fill Docker's disk".to_string());
    }
    if let Some(host_mib) = host.memory_mib {
        if p.memory_limit_mib + HOST_RESERVE_MIB > host_mib {
            risks.push(format!(
                "memory_limit_mib {} leaves less than {HOST_RESERVE_MIB} MiB of this host's \
                 {host_mib} MiB to everything else: one job can take the host's memory",
                p.memory_limit_mib
            ));
        } else {
            match memory_at_once(p, host, host_mib) {
                Ok(fits) => memory = Some(fits),
                Err(risk) => risks.push(risk),
            }
        }
    }
    let docker_dev = docker_root.and_then(&device);
    if let (Some(root), Some(dev)) = (docker_root, docker_dev) {
        for rule in &p.volume_allowlist {
            if !rule.read_only && device(Path::new(&rule.path)) == Some(dev) {
                risks.push(format!(
                    "volume tree {} is on the file system of Docker's root {}: a job can fill it",
                    rule.path,
                    root.display()
                ));
            }
        }
    }
    if risks.is_empty() {
        let rootfs = match p.tmpfs_mib() {
            Some(mib) => format!("jobs' roots are read-only (/tmp {mib} MiB)"),
            None => "jobs' roots are writable".to_string(),
        };
        let memory = memory.map(|m| format!("; {m}")).unwrap_or_default();
        return Check::pass(
            NAME,
            format!("{rootfs}; no writable volume tree on Docker's file system{memory}"),
        );
    }
    Check::warn(
        NAME,
        risks.join("; "),
        "turn read_only_rootfs on, keep writable volume trees off Docker's file system, and keep memory_limit_mib times the jobs that can run at once (cards' VRAM over min_vram_mib, plus max_cpu_jobs_per_node) below the host's memory (the admin page, or PUT /api/v1/settings/launch-policy)",
    )
}

async fn clock(pool: &PgPool) -> Check {
    const NAME: &str = "clock";
    let before = chrono::Utc::now();
    let theirs: Result<chrono::DateTime<chrono::Utc>, _> =
        sqlx::query_scalar("SELECT now()").fetch_one(pool).await;
    let after = chrono::Utc::now();
    let theirs = match theirs {
        Ok(t) => t,
        Err(e) => {
            return Check::fail(
                NAME,
                format!("reading Postgres' clock: {e}"),
                "check the database connection",
            )
        }
    };
    let ours = before + (after - before) / 2;
    let skew = (theirs - ours).num_milliseconds() as f64 / 1000.0;
    let detail = format!("Postgres' clock is {skew:+.3} s from this host's");
    if skew.abs() > CLOCK_SKEW_S {
        Check::warn(NAME, detail, "run NTP (chrony or systemd-timesyncd) on this host and the database host: deadlines and waits use both clocks")
    } else {
        Check::pass(NAME, detail)
    }
}

/// Can the server bind its address, and is a non-loopback address served without TLS?
pub(super) fn listen(opts: &DoctorOptions) -> Check {
    const NAME: &str = "listen";
    let at = opts.listen;
    let bind = std::net::TcpListener::bind(at);
    let exposed = !at.ip().is_loopback() && !opts.secure_cookies;
    match bind {
        Ok(_) if exposed => Check::warn(
            NAME,
            format!("{at} can be bound, and is reachable from other hosts without TLS"),
            "serve through a TLS reverse proxy and set --secure-cookies, or listen on 127.0.0.1 behind the proxy",
        ),
        Ok(_) => Check::pass(NAME, format!("{at} can be bound")),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => Check::warn(
            NAME,
            format!("{at} is in use (by a running gpuq, after installing?)"),
            "if gpuq is not running, free the port or choose another with --listen",
        ),
        Err(e) => Check::fail(NAME, format!("cannot bind {at}: {e}"), "choose another --listen address (ports below 1024 need a capability)"),
    }
}

#[cfg(test)]
mod drift_tests {
    use super::*;

    #[test]
    fn unknown_changed_and_pending_migrations_are_told_apart() {
        let map = |items: &[(i64, u8)]| -> BTreeMap<i64, Vec<u8>> {
            items.iter().map(|(v, s)| (*v, vec![*s])).collect()
        };
        let want = map(&[(1, 1), (2, 2), (3, 3)]);
        assert_eq!(drift(&want, &want), Drift::default());
        let d = drift(&want, &map(&[(1, 1), (2, 9), (7, 7)]));
        assert_eq!(
            d,
            Drift {
                unknown: vec![7],
                changed: vec![2],
                pending: vec![3],
            }
        );
        assert_eq!(drift(&want, &BTreeMap::new()).pending, vec![1, 2, 3]);
    }
}

#[cfg(test)]
mod policy_tests {
    use super::*;
    use crate::model::VolumeRule;
    use crate::server::doctor::Status;

    /// Paths under `/docker` and `/home` share Docker's file system (device 1); `/data` does not.
    fn device(path: &Path) -> Option<u64> {
        let p = path.to_str().unwrap();
        Some(if p.starts_with("/data") { 2 } else { 1 })
    }

    /// A host of `memory_mib` without cards.
    fn host(memory_mib: Option<u64>) -> HostFacts {
        HostFacts {
            memory_mib,
            cards: Vec::new(),
        }
    }

    fn rule(path: &str, read_only: bool) -> VolumeRule {
        VolumeRule {
            path: path.into(),
            read_only,
        }
    }

    #[test]
    fn a_writable_root_or_a_writable_volume_on_dockers_disk_is_a_warn() {
        let docker = Some(Path::new("/docker"));
        let safe = LaunchPolicy {
            volume_allowlist: vec![rule("/data/teams", false), rule("/home", true)],
            ..Default::default()
        };
        let c = policy_check(&safe, docker, &host(Some(TIB)), device);
        assert_eq!(c.status, Status::Pass, "{}", c.detail);
        assert!(c.detail.contains("/tmp 4096 MiB"), "{}", c.detail);

        let shared = LaunchPolicy {
            volume_allowlist: vec![rule("/data/teams", false), rule("/home/scratch", false)],
            read_only_rootfs: false,
            ..Default::default()
        };
        let c = policy_check(&shared, docker, &host(Some(TIB)), device);
        assert_eq!(c.status, Status::Warn);
        assert!(c.detail.contains("read_only_rootfs is off"), "{}", c.detail);
        assert!(c.detail.contains("/home/scratch"), "{}", c.detail);
        assert!(!c.detail.contains("/data/teams"), "{}", c.detail);

        // Docker's root unknown (Docker unreachable): only the root filesystem is judged.
        let c = policy_check(&safe, None, &host(Some(TIB)), device);
        assert_eq!(c.status, Status::Pass, "{}", c.detail);
    }

    const TIB: u64 = 1 << 20;
    const RTX: &str = "NVIDIA GeForce RTX 3090";

    /// Judges `p` on hosts with `cards` whose memory is exactly `need` MiB plus the reserve (a
    /// pass), one MiB less (a warn whose detail says `says`, returned) and unknown (a pass that
    /// says nothing of memory).
    fn holds_exactly(p: &LaunchPolicy, cards: &[CardRoom], need: u64, says: &str) -> Check {
        let docker = Some(Path::new("/docker"));
        let on = |memory_mib| HostFacts {
            memory_mib,
            cards: cards.to_vec(),
        };
        let c = policy_check(p, docker, &on(Some(need + HOST_RESERVE_MIB)), device);
        assert_eq!(c.status, Status::Pass, "{}", c.detail);
        let c = policy_check(p, docker, &on(None), device);
        assert_eq!(c.status, Status::Pass, "{}", c.detail);
        assert!(!c.detail.contains("at once"), "{}", c.detail);
        warns(p, &on(Some(need + HOST_RESERVE_MIB - 1)), says)
    }

    /// Judges `p` on `host`: a warn whose detail says `says`.
    fn warns(p: &LaunchPolicy, host: &HostFacts, says: &str) -> Check {
        let c = policy_check(p, Some(Path::new("/docker")), host, device);
        assert_eq!(c.status, Status::Warn, "{}", c.detail);
        assert!(c.detail.contains(says), "{says}: {}", c.detail);
        c
    }

    #[test]
    fn a_memory_limit_that_leaves_the_host_too_little_is_a_warn() {
        // One job at a time (no cards, one job without a GPU), so only the one job's limit counts.
        let p = LaunchPolicy {
            max_cpu_jobs_per_node: 1,
            ..Default::default()
        };
        assert_eq!(p.memory_limit_mib, 16_384);
        // 16 GiB on an 18 GiB host leaves exactly the reserve: enough; a warn on one MiB less
        // names the field and the host's memory.
        let says = "memory_limit_mib 16384 leaves less than 2048 MiB of this host's 18431 MiB";
        let c = holds_exactly(&p, &[], 16_384, says);
        assert!(c.fix.unwrap_or_default().contains("memory_limit_mib"));
        // A host no larger than the limit.
        warns(&p, &host(Some(16_384)), "of this host's 16384 MiB");
    }

    #[test]
    fn the_jobs_that_can_run_at_once_must_fit_in_the_hosts_memory_together() {
        // Two 24 GiB cards at the default floor of 256 MiB: 96 jobs each, and 8 without a GPU.
        let p = LaunchPolicy {
            memory_limit_mib: 1024,
            ..Default::default()
        };
        let cards = vec![(RTX.to_string(), Some(24_576)); 2];
        let rooms = card_rooms(&p, &Manifest::default(), &cards);
        let at_most = AtOnce::Bounded {
            on_cards: 192,
            cpu: 8,
        };
        assert_eq!(at_once(&p, &rooms), at_most);
        // 200 jobs of 1 GiB and the reserve fit exactly; one MiB less does not.
        let c = holds_exactly(
            &p,
            &rooms,
            200 * 1024,
            "up to 200 jobs can run here at once",
        );
        for part in [
            "(192 on 2 cards",
            "8 without a GPU",
            "204800 MiB in all, more than the 204799 MiB this host's 206847 leave after 2048",
        ] {
            assert!(c.detail.contains(part), "{part}: {}", c.detail);
        }
        let fix = c.fix.unwrap_or_default();
        assert!(
            fix.contains("min_vram_mib") && fix.contains("max_cpu_jobs_per_node"),
            "{fix}"
        );
        let fits = HostFacts {
            memory_mib: Some(TIB),
            cards: rooms,
        };
        let c = policy_check(&p, Some(Path::new("/docker")), &fits, device);
        let says = format!("up to 200 jobs at once fit in memory (204800 of {TIB} MiB)");
        assert!(c.detail.contains(&says), "{}", c.detail);
    }

    #[test]
    fn a_workload_type_below_the_floor_lets_more_jobs_share_a_card() {
        let p = LaunchPolicy::default();
        let mut m = Manifest::default();
        m.needs
            .entry("tiny".into())
            .or_default()
            .insert(RTX.into(), 128);
        m.needs
            .entry("big".into())
            .or_default()
            .insert(RTX.into(), 20_000);
        m.needs
            .entry("elsewhere".into())
            .or_default()
            .insert("NVIDIA A100 80GB".into(), 64);
        let cards = [
            (RTX.to_string(), Some(24_576)),
            ("NVIDIA A100 80GB".to_string(), Some(81_920)),
            ("NVIDIA T4".to_string(), Some(15_360)),
            // VRAM unknown: not counted.
            (RTX.to_string(), None),
        ];
        let rooms = card_rooms(&p, &m, &cards);
        let least: Vec<u64> = rooms.iter().map(|r| r.least_mib).collect();
        assert_eq!(least, vec![128, 64, 256]);
        assert_eq!(
            at_once(&p, &rooms),
            AtOnce::Bounded {
                on_cards: 192 + 1280 + 60,
                cpu: 8
            }
        );
    }

    #[test]
    fn nothing_bounding_the_jobs_at_once_is_a_warn_naming_the_field() {
        let docker = Some(Path::new("/docker"));
        let rooms = vec![CardRoom {
            total_mib: 24_576,
            least_mib: 24_576,
        }];
        let on = HostFacts {
            memory_mib: Some(TIB),
            cards: rooms.clone(),
        };
        let ok = LaunchPolicy {
            memory_limit_mib: 1024,
            ..Default::default()
        };
        assert_eq!(policy_check(&ok, docker, &on, device).status, Status::Pass);
        let no_cpu_cap = LaunchPolicy {
            max_cpu_jobs_per_node: 0,
            ..ok.clone()
        };
        warns(&no_cpu_cap, &on, "max_cpu_jobs_per_node is 0");
        let no_floor = LaunchPolicy {
            min_vram_mib: 0,
            ..ok
        };
        let rooms = card_rooms(
            &no_floor,
            &Manifest::default(),
            &[(RTX.into(), Some(24_576))],
        );
        let on = HostFacts {
            memory_mib: Some(TIB),
            cards: rooms,
        };
        warns(&no_floor, &on, "a job may commit 0 MiB on a card");
    }

    #[test]
    fn the_hosts_memory_is_read() {
        let mib = host_memory_mib().expect("/proc/meminfo has MemTotal");
        assert!(mib >= 64, "{mib} MiB");
    }
}
